"""The sequencer's registers (the ``SEQ_WINDOW`` of ``mcf.spec.regmap``), behind the register
block's ``RegisterBusSignature`` port.

Like ``ControlRegisters`` the table is walked, not written out: RW registers are storage
(masked by their fields, byte strobes honoured), SEQ_CONTROL's fields are one-cycle pulses,
and every RO register has a source below (a missing one is an elaboration error).  Reads
answer one cycle after ``r_en``; SEM_DATA, DIR_DATA and PERF_LO / PERF_HI read what their
index register selects (DIR_DATA through the execute unit's directory read port; PERF_LO
snapshots the high half for PERF_HI).
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.csr.ports import RegisterBusSignature
from mcf.hw.layouts import register_word
from mcf.hw.seq.perf import COUNTER_BITS
from mcf.hw.seq.sequencer import FAULT_BITS
from mcf.spec import REGISTERS, Access
from mcf.spec.isa import SEM_BITS
from mcf.spec.node import NodeConfig
from mcf.spec.plan import REPLICA_STATE_BITS
from mcf.spec.regmap import DATA_BITS, DMA_ADDR_BITS, PC_BITS, SEQ_WINDOW


class DirReadSignature(wiring.Signature):
    """A replica-directory read, from the reader's side: ``en`` + ``block``, ``state`` the
    cycle after."""

    def __init__(self, block_bits: int = 16):
        self.block_bits = block_bits
        super().__init__({"en": Out(1), "block": Out(block_bits), "state": In(REPLICA_STATE_BITS)})

    def __eq__(self, other):
        return isinstance(other, DirReadSignature) and other.block_bits == self.block_bits

    def __hash__(self):
        return hash((type(self), self.block_bits))

    def __repr__(self):
        return f"DirReadSignature({self.block_bits})"


def seq_registers():
    return [r for r in REGISTERS if r.offset in SEQ_WINDOW]


class SeqRegisters(wiring.Component):
    def __init__(self, config: NodeConfig = NodeConfig(), has_exec: bool = True):
        self.config = config
        self.caps = REGISTERS["SEQ_CAPS"].encode(
            num_sems=config.num_sems, rx_slots=config.rx_slots,
            queue_log2=config.seq_queue_depth.bit_length() - 1, hp_ports=config.hp_ports,
            max_payload_log2=config.max_payload.bit_length() - 1, exec=int(has_exec))
        super().__init__({
            "bus": In(RegisterBusSignature()),
            # configuration out
            "prog_base": Out(DMA_ADDR_BITS), "prog_count": Out(PC_BITS),
            "fault_mask": Out(32), "watchdog": Out(32), "rx_wait": Out(32),
            "start": Out(1), "abort": Out(1),
            "sem_index": Out(SEM_BITS), "perf_index": Out(8),
            "dir_rd": Out(DirReadSignature()),
            # status in
            "running": In(1), "done": In(1), "fault": In(1), "idle": In(1), "start_pending": In(1),
            "fault_cause": In(FAULT_BITS), "pc": In(PC_BITS), "fault_pc": In(PC_BITS),
            "wait": In(32), "levels": In(32), "sem_value": In(16), "perf_value": In(COUNTER_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        regs = seq_registers()
        store = {r.name: Signal(DATA_BITS, init=r.reset, name=f"r_{r.name.lower()}")
                 for r in regs if r.access is Access.RW}

        def fld(name, field):
            f = REGISTERS[name].field(field)
            return store[name][f.lsb:f.lsb + f.width]

        # --- writes -----------------------------------------------------------------------------
        mask = Signal(DATA_BITS)
        m.d.comb += mask.eq(Cat(*(bus.w_strb[i].replicate(8) for i in range(DATA_BITS // 8))))
        with m.If(bus.w_en):
            with m.Switch(bus.w_addr):
                for r in regs:
                    with m.Case(r.offset >> 2):
                        if r.access is Access.RW:
                            s = store[r.name]
                            m.d.sync += s.eq(((s & ~mask) | (bus.w_data & mask)) & r.mask)
                        elif r.name == "SEQ_CONTROL":
                            c = REGISTERS["SEQ_CONTROL"]
                            m.d.comb += [self.start.eq(bus.w_data[c.field("start").lsb]),
                                         self.abort.eq(bus.w_data[c.field("abort").lsb])]
                        elif r.access is not Access.RO:
                            raise NotImplementedError(f"register {r.name} ({r.access.value}) has no action")
        m.d.comb += [
            self.prog_base.eq(Cat(store["PROG_BASE_LO"], fld("PROG_BASE_HI", "addr_hi"))),
            self.prog_count.eq(fld("PROG_COUNT", "count")),
            self.fault_mask.eq(store["FAULT_MASK"]), self.watchdog.eq(store["WATCHDOG"]),
            self.rx_wait.eq(store["RX_WAIT"]),
            self.sem_index.eq(fld("SEM_INDEX", "index")), self.perf_index.eq(fld("PERF_INDEX", "index")),
            self.dir_rd.block.eq(fld("DIR_INDEX", "index")),
        ]

        # --- read sources -------------------------------------------------------------------------
        def compose(name, **values):
            word = Signal(DATA_BITS, name=f"{name.lower()}_word")
            m.d.comb += word.eq(register_word(REGISTERS[name], **values))
            return word

        hi = Signal(32)
        ro = {
            "SEQ_CAPS": Const(self.caps, DATA_BITS),
            "SEQ_STATUS": compose("SEQ_STATUS", running=self.running, done=self.done, fault=self.fault,
                                  idle=self.idle, start_pending=self.start_pending, fault_cause=self.fault_cause),
            "SEQ_PC": compose("SEQ_PC", pc=self.pc),
            "SEQ_FAULT_PC": compose("SEQ_FAULT_PC", pc=self.fault_pc),
            "SEQ_WAIT": self.wait, "SEQ_LEVELS": self.levels,
            "SEM_DATA": compose("SEM_DATA", value=self.sem_value),
            "DIR_DATA": compose("DIR_DATA", state=self.dir_rd.state),
            "PERF_LO": self.perf_value[:32], "PERF_HI": hi,
        }
        for r in regs:
            if r.access is Access.RO and r.name not in ro:
                raise NotImplementedError(f"register {r.name} (RO) has no source in SeqRegisters")

        # DIR_DATA: the directory answers the cycle after en.
        m.d.comb += self.dir_rd.en.eq(bus.r_en)
        r_pending = Signal()
        r_addr = Signal(len(bus.r_addr))
        m.d.sync += r_pending.eq(bus.r_en)
        with m.If(bus.r_en):
            m.d.sync += r_addr.eq(bus.r_addr)
        m.d.comb += bus.r_valid.eq(r_pending)
        with m.Switch(r_addr):
            for r in regs:
                with m.Case(r.offset >> 2):
                    if r.access is Access.RO:
                        m.d.comb += bus.r_data.eq(ro[r.name])
                    elif r.name in store:
                        m.d.comb += bus.r_data.eq(store[r.name])
        with m.If(r_pending & (r_addr == REGISTERS["PERF_LO"].offset >> 2)):
            m.d.sync += hi.eq(self.perf_value[32:])
        return m
