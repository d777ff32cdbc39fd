"""AXI4-Lite register block generated from ``mcf.spec.REGISTERS`` (MCF section 5: the PS
writes metadata and DMA descriptors to the PL over AXI-Lite).

Every register of the spec table is decoded by a loop over the table; what a register *does*
is chosen by its access kind (RW storage, RO source, W1C, W1P) and, for the few with side
effects, by its name.  An RO register without a source is an elaboration error, so the
table and the hardware cannot drift apart.

The ETH_* registers face a 10GBASE-R port through ``eth`` (``EthControlPort``): the MAC
table writes leave on it, the link status and sequence gaps come in.

Protocol: one write and one read in flight (AW and W are accepted in either order and held
until the response is taken).  Addresses decode on 32-bit words (AWADDR/ARADDR bits 1:0 are
ignored).  Unmapped addresses and writes to RO registers answer SLVERR (the write has no
effect); reads of W1P/WO registers return 0.  Writes honour WSTRB, except ROUTE_DATA, which
stores the whole word in the NIC's route table.
"""
from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.arith import log2_exact
from mcf.hw.axi.lite import AXI4LiteSignature, Resp
from mcf.hw.csr.ports import EthControlPort, RegisterBusSignature, RouteTablePort
from mcf.hw.layouts import DmaDescriptorLayout, MetaLayout
from mcf.hw.fifo import buffered_fifo
from mcf.hw.lut import mux4
from mcf.hw.registry import block
from mcf.hw.seq.perf import swept_counters
from mcf.spec.node import RANGES as NODE_RANGES
from mcf.spec.params import Range
from mcf.spec import DMA_DESCRIPTOR, REGISTERS, Access, DmaDir, ErrorCause, Irq
from mcf.spec.packet import HEADER_BITS, NODE_BITS
from mcf.spec.regmap import (ADDR_BITS, DATA_BITS, DESC_WORDS, DMA_ADDR_BITS, DMA_TAG_BITS, META_WORDS,
                             SEQ_WINDOW)

#: (round 31b, ``primitive``) an error counter's low bits in flip-flops, the high ones in LUT RAM, one
#: counter a cycle brought up to date in turn (every 2^5 cycles): a carry waits in a flag until then and
#: must not come twice in that time (one event a cycle: 2^5 + 1 < 2^6).
ERR_LO_BITS = 6

#: Fields that read back as 0 and act for one cycle when written with 1.
SELF_CLEARING = {"CONTROL": ("clear_counters",)}

def _reg(m, value, name):
    """``value`` registered (a read source or check one cycle behind, for the logic depth)."""
    q = Signal(len(value), name=name)
    m.d.sync += q.eq(value)
    return q


def write_bytes(m, store, data, strb, mask: int, reset: int):
    """``store`` = ((store & ~bytes) | (data & bytes)) & mask, the bytes those of ``strb``; under the
    write's condition.  (Round 29: as an enable a byte, the flip-flops taking ``data`` straight -- a
    LUT a byte, where the merge with the old word was a LUT a bit; the same value in every cycle.
    A reset value outside ``mask`` keeps the merge: a write clears those bits in every byte.)"""
    if reset & ~mask:
        bm = Cat(*(strb[i].replicate(8) for i in range(len(strb))))
        m.d.sync += store.eq(((store & ~bm) | (data & bm)) & mask)
        return
    for i in range(len(strb)):
        with m.If(strb[i]):
            m.d.sync += store[8 * i:8 * i + 8].eq(data[8 * i:8 * i + 8] & (mask >> 8 * i & 0xFF))


def _compose(reg: Register, **values):
    """A register word from field signals (RO status words)."""
    word = Signal(DATA_BITS, name=f"{reg.name.lower()}_word")
    parts = []
    for name, value in values.items():
        f = reg.field(name)
        parts.append(word[f.lsb:f.lsb + f.width].eq(value))
    return word, parts


class ControlRegisters(wiring.Component):
    """The node's control/status registers, route-table access, metadata and DMA queues.

    Ports (see ``mcf.hw.csr`` for the contract the NIC and DMA code against):

    * ``s_axil`` — AXI4-Lite slave, ``mcf.spec.regmap`` layout.
    * ``route`` — the NIC's route table (ROUTE_INDEX / ROUTE_DATA).
    * ``eth`` — the 10GBASE-R port: MAC table writes out, link status and sequence gaps in.
    * ``errors`` — one increment strobe per ``ErrorCause`` (bit i = one event of cause i).
    * ``meta`` — Meta headers pushed through META_W0..3 + META_PUSH (to the packetizer).
    * ``desc`` — DMA descriptors that passed validation (to the DMA engines).
    * ``node_id``, ``num_nodes``, ``enable``, ``irq`` — configuration and the interrupt line.
    * ``busy``, ``desc_done`` + ``desc_done_tag``, ``rx_packet`` — status inputs.

    * ``window_base``, ``window_size`` — the DMA window (the interconnect's firewall).
    * with ``seq=True``: ``seq_regs`` — the registers of the sequencer's window
      (``SEQ_WINDOW``), implemented by the sequencer; ``irq_events`` — further interrupt
      events (bit i sets IRQ_STATUS bit i).  Without, that window answers SLVERR.

    Both queues hold their entries while CONTROL.enable is 0.
    """

    def __init__(self, meta_queue_depth: int = 16, desc_queue_depth: int = 16, data_bytes: int = 8,
                 net_ports: int = 2, dma_bus_bytes: int = 16, dma_buffers: int = 2,
                 dma_buffer_bytes: int = 4096, seq: bool = False, primitive: bool = False,
                 err_bits: int = DATA_BITS):
        self.seq = seq
        self.primitive = primitive      # the read word's group choice as LUT6 instances (round 28b)
        # the error counters' width (saturating at 2^err_bits - 1): DATA_BITS, narrower only for a test
        # that reaches the saturation (round 31b)
        if not ERR_LO_BITS + 2 <= err_bits <= DATA_BITS:
            raise ValueError(f"err_bits {err_bits}: {ERR_LO_BITS + 2} .. {DATA_BITS}")
        self.err_bits = err_bits
        self.meta_queue_log2 = log2_exact(meta_queue_depth, "meta_queue_depth")
        self.desc_queue_log2 = log2_exact(desc_queue_depth, "desc_queue_depth")
        self.dma_bus_log2 = log2_exact(dma_bus_bytes, "dma_bus_bytes")
        self.dma_buffer_log2 = log2_exact(dma_buffer_bytes, "dma_buffer_bytes")
        self.meta_queue_depth, self.desc_queue_depth = meta_queue_depth, desc_queue_depth
        self.dma_buffers = dma_buffers
        self.caps = REGISTERS["CAPS"].encode(data_bytes=data_bytes, net_ports=net_ports,
                           meta_queue_log2=self.meta_queue_log2, desc_queue_log2=self.desc_queue_log2)
        self.dma_caps = REGISTERS["DMA_CAPS"].encode(bus_bytes_log2=self.dma_bus_log2,
                               buffers=dma_buffers, buffer_bytes_log2=self.dma_buffer_log2)
        super().__init__({
            "s_axil": In(AXI4LiteSignature(ADDR_BITS, DATA_BITS)),
            "route": Out(RouteTablePort()),
            "eth": Out(EthControlPort()),
            "errors": In(len(ErrorCause)),
            "meta": Out(stream.Signature(MetaLayout)),
            "desc": Out(stream.Signature(DmaDescriptorLayout)),
            "node_id": Out(NODE_BITS),
            "num_nodes": Out(NODE_BITS + 1),
            "enable": Out(1),
            "irq": Out(1),
            "busy": In(1),
            "desc_done": In(1),
            "desc_done_tag": In(DMA_TAG_BITS),
            "rx_packet": In(1),
            "window_base": Out(DMA_ADDR_BITS),
            "window_size": Out(DMA_ADDR_BITS),
            **({"seq_regs": Out(RegisterBusSignature()), "irq_events": In(len(Irq))} if seq else {}),
        })

    def registers(self):
        """The registers this block decodes (the sequencer's window only with ``seq``)."""
        return [r for r in REGISTERS if self.seq or r.offset not in SEQ_WINDOW]

    def elaborate(self, platform):
        m = Module()
        bus = self.s_axil
        word_bits = ADDR_BITS - 2

        # --- storage: RW and W1C registers --------------------------------------------------
        regs = self.registers()
        external = {r.name for r in regs if r.offset in SEQ_WINDOW}
        store = {r.name: Signal(DATA_BITS, init=r.reset, name=f"r_{r.name.lower()}")
                 for r in regs if r.access in (Access.RW, Access.W1C) and r.name != "ROUTE_DATA"
                 and r.name not in external}

        def fld(reg_name, field_name):
            f = REGISTERS[reg_name].field(field_name)
            return store[reg_name][f.lsb:f.lsb + f.width]

        # --- queues ----------------------------------------------------------------------------
        # (hw/fifo.py: the consumers' ready -- the TX engine's ownership of the loader and the
        # packetizer, across the node -- reaches only the queues' output registers)
        m.submodules.meta_q = meta_q = buffered_fifo(HEADER_BITS, self.meta_queue_depth)
        m.submodules.desc_q = desc_q = buffered_fifo(DMA_DESCRIPTOR.total_bits, self.desc_queue_depth)
        enable = fld("CONTROL", "enable")
        m.d.comb += [
            self.meta.valid.eq(meta_q.r_rdy & enable), meta_q.r_en.eq(self.meta.ready & enable),
            self.meta.payload.eq(meta_q.r_data),
            self.desc.valid.eq(desc_q.r_rdy & enable), desc_q.r_en.eq(self.desc.ready & enable),
            self.desc.payload.eq(desc_q.r_data),
            meta_q.w_data.eq(Cat(*(store[f"META_W{i}"] for i in range(META_WORDS)))),
        ]

        # --- error counters ------------------------------------------------------------------
        # Events raised here, ORed with the errors port.  One whole signal per cause (a
        # partially driven vector becomes a sensitivity-less ``always @*`` in Verilog that
        # Icarus never runs, leaving the undriven bits X).
        strobe = {c: Signal(name=f"strobe_{c.name.lower()}") for c in ErrorCause}
        events = Signal(len(ErrorCause))
        m.d.comb += events.eq(self.errors | Cat(*strobe.values()))
        clear_counters = fld("CONTROL", "clear_counters")
        if self.primitive:
            counters, err_hi = self._err_split(m, events, clear_counters)
        else:
            counters, err_hi = {c: Signal(self.err_bits, name=f"err_{c.name.lower()}") for c in ErrorCause}, None
            for c, cnt in counters.items():
                with m.If(clear_counters):
                    m.d.sync += cnt.eq(0)
                with m.Elif(events[c] & (cnt != (1 << self.err_bits) - 1)):   # saturate
                    m.d.sync += cnt.eq(cnt + 1)
        # whether any counter is not 0: a register set by an event and cleared with the counters
        # (a counter leaves 0 only by an event and returns to it only by the clear; the OR of
        # every counter's bits was ~230 LUTs; issue 14)
        any_error = Signal()
        with m.If(clear_counters):
            m.d.sync += any_error.eq(0)
        with m.Elif(events.any()):
            m.d.sync += any_error.eq(1)

        # --- descriptor validation (combinational on the staged words) ------------------------
        staged = Signal(DmaDescriptorLayout)
        m.d.comb += staged.eq(Cat(*(store[f"DESC_W{i}"] for i in range(DESC_WORDS)))[:DMA_DESCRIPTOR.total_bits])
        base = Cat(store["DMA_WINDOW_BASE_LO"], fld("DMA_WINDOW_BASE_HI", "base_hi"))
        size = Cat(store["DMA_WINDOW_SIZE_LO"], fld("DMA_WINDOW_SIZE_HI", "size_hi"))
        # Ordered as ErrorCause: the first failing check is the one counted.
        checks = {
            ErrorCause.DESC_ZERO_LENGTH: staged.length == 0,
            ErrorCause.DESC_OUT_OF_WINDOW: (staged.addr < base) | (staged.addr + staged.length > base + size),
            ErrorCause.DESC_BAD_BUFFER: staged.buffer >= self.dma_buffers,
            ErrorCause.DESC_UNALIGNED: (staged.addr[:self.dma_bus_log2] != 0) if self.dma_bus_log2 else Const(0),
            ErrorCause.DESC_TOO_LONG: (staged.dir.as_value() == int(DmaDir.LOAD)) & (staged.length > (1 << self.dma_buffer_log2)),
        }
        # registered: the staged words and the window change only by register writes, and a
        # DESC_PUSH write comes at least two cycles after the last of them (one write in flight)
        checks = {cause: _reg(m, bad, f"check_{cause.name.lower()}") for cause, bad in checks.items()}
        m.d.comb += desc_q.w_data.eq(staged.as_value())

        # --- write channel ---------------------------------------------------------------------
        aw_held, w_held = Signal(), Signal()
        aw_addr = Signal(ADDR_BITS)
        # the held address decoded as AW is taken: a flag per writable register (``aw_is``), whether
        # it is one (``aw_ok``, else SLVERR) and whether it is in the sequencer's window
        # (``aw_ext``), so every write strobe is an AND of registers (issue 14: the decode of the
        # held address ran on into SEQ_CONTROL's abort and the sequencer's fault, 9 levels, and
        # into DESC_PUSH's queue level and the response, 8)
        writable = [r for r in regs if r.access is not Access.RO]
        aw_is = {r.name: Signal(name=f"aw_is_{r.name.lower()}") for r in writable}
        aw_ok, aw_ext = Signal(), Signal()
        w_data, w_strb = Signal(DATA_BITS), Signal(DATA_BITS // 8)
        bvalid, bresp = Signal(), Signal(2)
        m.d.comb += [bus.awready.eq(~aw_held), bus.wready.eq(~w_held),
                     bus.bvalid.eq(bvalid), bus.bresp.eq(bresp)]
        with m.If(bus.awvalid & bus.awready):
            hit = {r.name: bus.awaddr[2:] == r.offset >> 2 for r in writable}
            m.d.sync += [aw_held.eq(1), aw_addr.eq(bus.awaddr), aw_ok.eq(Cat(*hit.values()).any()),
                         aw_ext.eq(Cat(*(hit[n] for n in hit if n in external)).any() if external else 0)]
            m.d.sync += [aw_is[n].eq(h) for n, h in hit.items()]
        with m.If(bus.wvalid & bus.wready):
            m.d.sync += [w_held.eq(1), w_data.eq(bus.wdata), w_strb.eq(bus.wstrb)]
        with m.If(bus.bvalid & bus.bready):
            m.d.sync += bvalid.eq(0)

        do_write = Signal()
        m.d.comb += do_write.eq(aw_held & w_held & ~bvalid)
        byte_mask = Signal(DATA_BITS)
        m.d.comb += byte_mask.eq(Cat(*(w_strb[i].replicate(8) for i in range(DATA_BITS // 8))))
        written = Signal(DATA_BITS)   # the strobed bits of the write data
        m.d.comb += written.eq(w_data & byte_mask)
        pulse = {r.name: Signal(DATA_BITS, name=f"p_{r.name.lower()}")
                 for r in regs if r.access in (Access.W1P, Access.WO) and r.name not in external}
        subtract = {r.name: Signal(DATA_BITS, name=f"sub_{r.name.lower()}")
                    for r in regs if r.access is Access.RSUB and r.name not in external}

        # Self-clearing fields drop after one cycle (the write below overrides this).
        for reg_name, names in SELF_CLEARING.items():
            for n in names:
                m.d.sync += fld(reg_name, n).eq(0)

        with m.If(do_write):
            m.d.sync += [aw_held.eq(0), w_held.eq(0), bvalid.eq(1),
                         bresp.eq(Mux(aw_ok, Resp.OKAY, Resp.SLVERR))]
            for r in writable:
                with m.If(aw_is[r.name]):
                    if r.name in external:
                        pass                        # (the write strobe: ``aw_ext``, below)
                    elif r.name == "ROUTE_DATA":
                        m.d.comb += self.route.w_en.eq(1)
                    elif r.access is Access.RW and r.name not in SELF_CLEARING:
                        write_bytes(m, store[r.name], w_data, w_strb, r.mask, r.reset)
                    elif r.access is Access.RW:
                        # (a self-clearing field in a byte not written stays for the cycle, as the
                        # whole word's assignment overrides the clear: the merge kept)
                        s = store[r.name]
                        m.d.sync += s.eq(((s & ~byte_mask) | written) & r.mask)
                    elif r.access is Access.W1C:
                        pass                        # the clear itself is applied with the sets below
                    elif r.access is Access.RSUB:
                        m.d.comb += subtract[r.name].eq(written)
                    else:
                        m.d.comb += pulse[r.name].eq(written & r.mask)
        m.d.comb += [self.route.addr.eq(fld("ROUTE_INDEX", "index")), self.route.w_data.eq(w_data)]
        if self.seq:
            m.d.comb += [self.seq_regs.w_en.eq(do_write & aw_ext),
                         self.seq_regs.w_data.eq(w_data), self.seq_regs.w_strb.eq(w_strb)]

        w1c_clear = {r.name: Signal(DATA_BITS, name=f"c_{r.name.lower()}")
                     for r in REGISTERS if r.access is Access.W1C}
        for name, clr in w1c_clear.items():
            with m.If(do_write & (aw_is[name] if name in aw_is else aw_addr[2:] == REGISTERS[name].offset >> 2)):
                m.d.comb += clr.eq(written)

        # --- queue pushes ----------------------------------------------------------------------
        with m.If(pulse["META_PUSH"][0]):
            with m.If(meta_q.w_rdy):
                m.d.comb += meta_q.w_en.eq(1)
            with m.Else():
                m.d.comb += strobe[ErrorCause.META_QUEUE_FULL].eq(1)
        with m.If(pulse["DESC_PUSH"][0]):
            refused = Const(0)
            for cause, bad in checks.items():
                with m.If(bad & ~refused):
                    m.d.comb += strobe[cause].eq(1)
                refused = refused | bad
            with m.If(~refused):
                with m.If(desc_q.w_rdy):
                    m.d.comb += desc_q.w_en.eq(1)
                with m.Else():
                    m.d.comb += strobe[ErrorCause.DESC_QUEUE_FULL].eq(1)

        # --- interrupts: events set IRQ_STATUS bits (a set wins over a same-cycle clear) ------
        meta_empty = meta_q.level == 0
        was_empty = Signal(init=1)
        m.d.sync += was_empty.eq(meta_empty)
        irq_set = Signal(len(Irq))
        # (any error event, registered: IRQ_STATUS.error is set a cycle after the counter moves;
        # issue 14: the NIC's error strobes came 5 levels deep into the OR and the status bit)
        error_event = Signal()
        m.d.sync += error_event.eq(events.any())
        m.d.comb += [
            irq_set[Irq.DESC_DONE].eq(self.desc_done),
            irq_set[Irq.META_QUEUE_EMPTY].eq(meta_empty & ~was_empty),
            irq_set[Irq.ERROR].eq(error_event),
            irq_set[Irq.RX_PACKET].eq(self.rx_packet),
        ]
        irq_any = irq_set | (self.irq_events if self.seq else 0)
        irq_status = store["IRQ_STATUS"]
        m.d.sync += irq_status.eq(((irq_status & ~w1c_clear["IRQ_STATUS"]) | irq_any) & REGISTERS["IRQ_STATUS"].mask)
        m.d.sync += self.irq.eq((irq_status & store["IRQ_ENABLE"]).any())

        done_count = Signal(REGISTERS["DESC_DONE"].field("count").width)
        done_tag = Signal(DMA_TAG_BITS)
        with m.If(self.desc_done):
            m.d.sync += [done_count.eq(done_count + 1), done_tag.eq(self.desc_done_tag)]

        # --- RSUB counters: add events, subtract what the PS writes (both saturating) ---------
        rsub_events = {"ETH_SEQ_GAPS": self.eth.seq_missing}
        rsub = {}
        for name, sub in subtract.items():
            sub = _reg(m, sub, f"sub_{name.lower()}_q")      # applied the cycle after the write
            cnt = rsub[name] = Signal(DATA_BITS, name=f"cnt_{name.lower()}")
            left = Signal(DATA_BITS, name=f"left_{name.lower()}")
            total = Signal(DATA_BITS + 1, name=f"total_{name.lower()}")
            m.d.comb += [left.eq(Mux(sub > cnt, 0, cnt - sub)), total.eq(left + rsub_events[name])]
            with m.If(clear_counters):
                m.d.sync += cnt.eq(0)
            with m.Else():
                m.d.sync += cnt.eq(Mux(total[DATA_BITS], (1 << DATA_BITS) - 1, total[:DATA_BITS]))

        # --- 10GBASE-R port: MAC table writes --------------------------------------------------
        m.d.comb += [
            self.eth.mac_w_en.eq(pulse["ETH_MAC_WRITE"][0]),
            self.eth.mac_index.eq(fld("ETH_MAC_INDEX", "index")),
            self.eth.mac_data.eq(Cat(store["ETH_MAC_LO"], fld("ETH_MAC_HI", "mac_hi"))),
            self.eth.resync.eq(clear_counters),
            self.eth.node_id.eq(fld("NODE_ID", "node_id")),
        ]

        # --- read sources of the RO registers ----------------------------------------------
        status, status_parts = _compose(
            REGISTERS["STATUS"], busy=self.busy, meta_queue_empty=meta_empty, meta_queue_full=~meta_q.w_rdy,
            desc_queue_empty=desc_q.level == 0, desc_queue_full=~desc_q.w_rdy, error=any_error)
        meta_level, p1 = _compose(REGISTERS["META_LEVEL"], level=meta_q.level)
        desc_level, p2 = _compose(REGISTERS["DESC_LEVEL"], level=desc_q.level)
        desc_done, p3 = _compose(REGISTERS["DESC_DONE"], count=done_count, tag=done_tag)
        m.d.comb += status_parts + p1 + p2 + p3
        cycles = Signal(2 * DATA_BITS)          # free-running: CYCLES_LO/HI measure the clock
        m.d.sync += cycles.eq(cycles + 1)
        # the composed words are registered (one cycle behind their sources, for the depth of
        # the read mux; a read decodes at least a cycle after the write it follows)
        ro = {
            "ID": Const(REGISTERS["ID"].reset, DATA_BITS),
            "CYCLES_LO": cycles[:DATA_BITS], "CYCLES_HI": cycles[DATA_BITS:],
            "VERSION": Const(REGISTERS["VERSION"].reset, DATA_BITS),
            "CAPS": Const(self.caps, DATA_BITS),
            "DMA_CAPS": Const(self.dma_caps, DATA_BITS),
            "STATUS": _reg(m, status, "status_q"), "META_LEVEL": _reg(m, meta_level, "meta_level_q"),
            "DESC_LEVEL": _reg(m, desc_level, "desc_level_q"), "DESC_DONE": desc_done,
            "ETH_STATUS": _reg(m, self.eth.status, "eth_status_q"),
            **{f"ERR_{c.name}": cnt for c, cnt in counters.items()},
        }
        for r in regs:
            if r.access is Access.RO and r.name not in ro and r.name not in external:
                raise NotImplementedError(f"register {r.name} (RO) has no source in ControlRegisters")

        # --- read channel: decode one cycle after AR, ROUTE_DATA waits for the table -------------
        ar_addr = Signal(word_bits)
        # the word and the kind of every address: one bit select each (a mux tree on the
        # address bits, no per-register compare), unmapped addresses SLVERR
        R_SLVERR, R_OK, R_EXTERNAL, R_ROUTE = 0, 1, 2, 3
        abits = max(r.offset >> 2 for r in regs).bit_length()
        values = [Const(0, DATA_BITS)] * (1 << abits)
        kinds = [Const(R_SLVERR, 2)] * (1 << abits)
        for r in regs:
            w = r.offset >> 2
            if r.name in external:
                kinds[w] = Const(R_EXTERNAL, 2)
            elif r.name == "ROUTE_DATA":
                kinds[w] = Const(R_ROUTE, 2)
            else:
                kinds[w] = Const(R_OK, 2)
                if r.access is Access.RO:
                    values[w] = ro[r.name]
                elif r.access is Access.RSUB:
                    values[w] = rsub[r.name]
                elif r.name in store:
                    values[w] = store[r.name]       # (W1P / WO read as 0)
        sourced = {r.offset >> 2 for r in regs if r.access is Access.RO and r.name not in external
                   or r.access is Access.RSUB or r.name in store}
        values = [Cat(v, Const(0, DATA_BITS - len(v))) for v in values]     # narrower sources: 0 above
        rd_kind = Signal(2)                 # decoded with AR, registered
        ar_word = bus.araddr[2:ADDR_BITS]
        # The word in two steps (round 27: the one-cycle select, a 2:1 tree over the 8 word bits into
        # ``rdata``, was mapped at 8 to 9 levels from ``ar_addr`` as the logic around it changed): in
        # DECODE each group of 64 words (the address's low 6 bits: a balanced tree of 2:1
        # multiplexers, low bits first) is registered in ``rd_part``; SELECT picks the group by the
        # high bits.  The values are sampled in DECODE as before; the R beat comes a cycle later
        # (AXI4-Lite leaves R's latency to the slave; ROUTE_DATA and the sequencer's window as before)
        lo_bits = min(abits, 6)
        parts = []
        for g in range(1 << (abits - lo_bits)):
            level = values[g << lo_bits:(g + 1) << lo_bits]
            if not any(w >> lo_bits == g for w in sourced):
                parts.append(Const(0, DATA_BITS))          # (a group without a readable word)
                continue
            for b in range(lo_bits):
                level = [Mux(ar_addr[b], level[k + 1], level[k]) for k in range(0, len(level), 2)]
            part = Signal(DATA_BITS, name=f"rd_part{g}")
            m.d.sync += part.eq(level[0])
            parts.append(part)
        rd_value = Signal(DATA_BITS)
        gsel = ar_addr[lo_bits:abits]
        used = 0
        if self.primitive:
            # (round 28b, vt28b) the group choice as radix-4 layers of 4:1 LUT6 instances (hw/lut.py; a
            # quartet without a readable word stays 0): ABC9 mapped it with ``rdata``'s choices at ~9 LUT a bit
            while len(parts) >= 4 and len(parts) % 4 == 0:
                parts = [Const(0, DATA_BITS) if all(isinstance(p, Const) for p in parts[k:k + 4]) else
                         mux4(m, gsel[used:used + 2], parts[k:k + 4], primitive=True, name=f"rd_group{used}_{k // 4}")
                         for k in range(0, len(parts), 4)]
                used += 2
        m.d.comb += rd_value.eq((Array(parts)[gsel[used:]] if len(parts) > 1 else parts[0])
                                | (err_hi(m, ar_addr) if err_hi else 0))
        rvalid, rdata, rresp = Signal(), Signal(DATA_BITS), Signal(2)
        m.d.comb += [bus.rvalid.eq(rvalid), bus.rdata.eq(rdata), bus.rresp.eq(rresp)]
        with m.FSM(name="read"):
            with m.State("IDLE"):
                m.d.comb += bus.arready.eq(1)
                with m.If(bus.arvalid):
                    m.d.sync += [ar_addr.eq(bus.araddr[2:]),
                                 rd_kind.eq(Mux(ar_word[abits:] == 0, Cat(*kinds).word_select(ar_word[:abits], 2),
                                                R_SLVERR))]
                    m.next = "DECODE"
            with m.State("DECODE"):
                m.next = "SELECT"
                if self.seq:
                    with m.If(rd_kind == R_EXTERNAL):
                        m.d.comb += self.seq_regs.r_en.eq(1)
                        m.next = "EXTERNAL"
                with m.If(rd_kind == R_ROUTE):
                    m.d.comb += self.route.r_en.eq(1)
                    m.next = "ROUTE"
            with m.State("SELECT"):
                m.d.sync += [rvalid.eq(~rd_kind[1]), rresp.eq(Mux(rd_kind == R_SLVERR, Resp.SLVERR, Resp.OKAY)),
                             rdata.eq(Mux(rd_kind == R_OK, rd_value, 0))]
                m.next = "RESP"
            with m.State("ROUTE"):
                m.d.sync += [rvalid.eq(1), rresp.eq(Resp.OKAY), rdata.eq(self.route.r_data)]
                m.next = "RESP"
            if self.seq:
                with m.State("EXTERNAL"):
                    with m.If(self.seq_regs.r_valid):
                        m.d.sync += [rvalid.eq(1), rresp.eq(Resp.OKAY), rdata.eq(self.seq_regs.r_data)]
                        m.next = "RESP"
            with m.State("RESP"):
                with m.If(bus.rready):
                    m.d.sync += rvalid.eq(0)
                    m.next = "IDLE"

        if self.seq:
            m.d.comb += [self.seq_regs.w_addr.eq(aw_addr[2:]), self.seq_regs.r_addr.eq(ar_addr)]
        m.d.comb += [
            self.window_base.eq(base), self.window_size.eq(size),
            self.enable.eq(enable),
            self.node_id.eq(fld("NODE_ID", "node_id")),
            self.num_nodes.eq(fld("NUM_NODES", "num_nodes")),
        ]
        return m

    def _err_split(self, m, events, clear):
        """The node's build (round 31b): every error counter ``hi * 2^ERR_LO_BITS + lo`` (hw/seq/perf.py's
        ``swept_counters`` with ``saturate``: ``lo`` and its carry in flip-flops, ``hi`` in LUT RAM visited
        one counter a cycle, the saturation at 2^err_bits - 1 exact).  Returns the counters' low words (the
        read's source: zeros above) and a function giving the read's high bits (registered in the read's
        DECODE cycle, as the low words' ``rd_part``): the same value every cycle as the plain counters (the
        cost: the 26 x 32-bit counters and their choice, ~260 + ~280 LUT; issue 14)."""
        n = len(ErrorCause)
        abits = (n - 1).bit_length()
        if REGISTERS[f"ERR_{ErrorCause(0).name}"].offset & (4 << abits) - 1:
            raise NotImplementedError(f"error counters: the first not at a multiple of {1 << abits} words")
        sc = swept_counters(m, [events[c] for c in ErrorCause], clear, lo_bits=ERR_LO_BITS,
                            total_bits=self.err_bits, inc_bits=1, saturate=True,
                            names=[c.name.lower() for c in ErrorCause], prefix="err_")
        counters = dict(zip(ErrorCause, sc.lo))

        def read_hi(m, word):
            """``(hi + pend) << ERR_LO_BITS`` of the error counter at ``word`` (0 for another word), registered."""
            first = REGISTERS[f"ERR_{ErrorCause(0).name}"].offset >> 2
            index = word[:abits]
            is_err = (word[abits:] == first >> abits) & (index < n)
            value = Signal(self.err_bits, name="err_hi_q")
            m.d.sync += value.eq(sc.read_hi(index, guard=is_err, shift=ERR_LO_BITS))
            return value
        return counters, read_hi


@block("csr", "AXI4-Lite control/status registers, route-table port, metadata and DMA queues",
       variants=({"meta_queue_depth": 4, "desc_queue_depth": 4, "dma_bus_bytes": 8},),
       meta_queue_depth=16, desc_queue_depth=16, data_bytes=8, net_ports=2, dma_bus_bytes=16,
       dma_buffers=2, dma_buffer_bytes=4096,
       ranges={"data_bytes": Range(4, 128, pow2=True), "dma_bus_bytes": Range(4, 128, pow2=True),
               "dma_buffers": NODE_RANGES["buffers"], "dma_buffer_bytes": NODE_RANGES["buffer_bytes"]})
def _csr(**params):
    return ControlRegisters(**params)
