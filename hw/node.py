"""One MCF node (MCF section 5, Fig. 2; docs/node.md): registers + sequencer + execute unit +
DMA + packetizer + NIC behind one AXI interconnect with the DDR firewall.

    PS ─AXI-Lite─► ControlRegisters ─seq_regs─► SeqRegisters ◄──► Sequencer ─fetch──┐
                     │ route, meta, desc                           │ ex  tx  rx     │
                     │                              ExecUnit ◄─────┘  │   │        │
                     │            ┌──── TxEngine ◄────────────────────┘   │        │
                     │            │  LOAD   Meta       RxEngine ◄─────────┘        │
                     │            ▼   │       │        │ STORE  credits            │
                     │       DmaLoader│  Packetizer ◄──┘   │       │              │
                     │            │   └──────►│            ▼       ▼              │
                     │            └─payload──►┘        DmaWriter  HeaderSerializer │
                     │                        │            ▲       │              │
                     │                        └─► PacketMux ◄──────┘              │
                     └──────────────────────► Nic ──► tx[0..P-1]   (local_out ──► RxEngine)
    DDR ◄═ m_axi, m_axi1.. (HP ports) ═ AxiInterconnect (firewall) ◄═ fetch, loader, writer,
                                                   execute unit (m_axi + weight loaders m_axi_w<k>)

While a program runs (SEQ_CONTROL.start) the sequencer's engines drive the DMA loader, the DMA
writer and the packetizer.  While none runs, the PS's metadata and descriptor queues do (the
debug path of earlier nodes): LOAD descriptors stream DDR blocks into the packetizer behind
the next Meta, and delivered data packets take STORE descriptors (see ``mcf.spec.regmap``).

The execute unit (``mcf.hw.compute.exec.unit.ExecUnit``; ``exec_unit``: another factory taking
the NodeConfig) has its AXI4 master port(s) on the interconnect as clients.  Which client is on
which HP port is ``NodeConfig.ddr_masters`` (one definition, docs/node.md "HP ports"): weight
loader k on HP port k mod ``hp_ports``, the node's own fetch / loader / writer on HP port 0, the
execute unit's ``m_axi`` (scales, bias, KV, activations) on the first port no weight loader
uses, else HP port 1; with one HP port everything shares ``m_axi``.  The DMA-window firewall
checks every burst of every client on every port.  With a weight clock
(``NodeConfig.weight_clock_hz``) the weight loaders' masters are in the clock domain ``axi``
(``axi_clk`` / ``axi_rst`` of the Verilog: the board's pl_clk1), on HP ports 0 .. W-1 of their own
through a second interconnect in that domain (``wic``: the same firewall, the window synchronized
into ``axi``; its faults, idle and byte counts crossed back), every other client on HP port W.
``eth=True`` adds ``eth`` and ``eth_errors`` for a 10GBASE-R port (``EthNode``).  This is the top that
``mcf board build`` wraps for Vivado; HP port 0 is ``m_axi``, HP port p > 0 ``m_axi<p>``.
"""
from __future__ import annotations

from amaranth import Cat, Const, DomainRenamer, Module, Mux, Signal, Value
from amaranth.lib import cdc, data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf.hw.axi.full import AXI4Signature
from mcf.hw.axi.lite import AXI4LiteSignature
from mcf.hw.arith import add_tree
from mcf.hw.axis import AXIStreamSignature, AxisRegister, skid_register
from mcf.hw.fifo import PrefetchFIFO, buffered_fifo, nonempty
from mcf.hw.lut import equal
from mcf.hw.compute.exec.unit import PERF_BITS, ExecUnit
from mcf.hw.csr import ControlRegisters, EthControlPort
from mcf.hw.csr.ports import RegisterBusSignature
from mcf.hw.csr.registers import write_bytes
from mcf.hw.dma.loader import DmaLoader
from mcf.hw.dma.writer import DmaWriter
from mcf.hw.layouts import DmaDescriptorLayout, InstrLayouts, MetaLayout, register_word
from mcf.hw.nic.common import raw
from mcf.hw.nic.nic import Nic
from mcf.hw.packet.header import HeaderDeserializer, HeaderSerializer
from mcf.hw.packet.packetizer import Packetizer
from mcf.hw.registry import block
from mcf.hw.seq.interconnect import AxiInterconnect, Client
from mcf.hw.seq.perf import COUNTER_BITS, PerfCounters
from mcf.hw.seq.sems import SemEventSignature
from mcf.hw.seq.sequencer import ENGINE_IDLE_PARTS, FAULT_BITS, IssueLayout, Sequencer
from mcf.spec import REGISTERS, Access, Collective, DmaDir, ErrorCause, Irq, Op, ReduceOp, Stage
from mcf.spec.isa import MAX_HP_PORTS, DDR_ALIGN, INSTR_BITS, LAYOUTS, SEM_BITS, Opcode, PerfCounter, Queue, SeqFault
from mcf.spec.node import NodeConfig
from mcf.spec.packet import KV_ID_BITS, LENGTH_BITS, META, NODE_BITS
from mcf.spec.params import Choice, Range
from mcf.spec.plan import REPLICA_STATE_BITS, ReplicaState
from mcf.spec.regmap import ADDR_BITS, DATA_BITS, DMA_ADDR_BITS, DMA_TAG_BITS, PC_BITS, SEQ_WINDOW
from mcf.spec.node import RANGES as NODE_RANGES


# === TX engine =================================================================================
# TX engine: SEND and CREDIT instructions -> packets through the packetizer (docs/node.md).
#
# SEND reads ``length`` bytes at ``ddr`` through the DMA loader, one LOAD descriptor per
# packet of at most ``max_payload`` bytes (the ping-pong buffers overlap the next read with
# the current packet), and pushes each packet's Meta into the packetizer once its LOAD is
# complete (so a packet, once started, never waits for DDR): ``src`` = this node, ``kv_id`` =
# the tag, ``length`` = the packet's bytes, the other fields from the instruction.  ``length =
# 0`` sends one header-only packet.  SEND completes when its last payload beat has entered the
# packetizer.  CREDIT pushes one header-only Op.CREDIT packet (stage CONTROL, UNICAST,
# ``kv_id`` = the semaphore, ``seq`` = the count).
#
# When the node stops (``running`` falls) the engine issues no further LOAD and pushes no
# further Meta; the payload of LOADs already issued is taken from the loader and dropped, so
# the packetizer never holds a payload without its header.  ``busy`` until then.
#
# The loader's output passes through ``payload_in`` -> ``payload_out``; while the engine has
# nothing in flight and the node is not running, it passes every packet (the PS's own LOAD
# descriptors, the debug path).

def meta_word(**values):
    """A Meta header word (``MetaLayout``) from field values, as one ``Cat`` (fields not named
    are 0: magic, reserved and check are the serializer's)."""
    parts = []
    for f in META.fields:
        v = Value.cast(values.pop(f.name, 0))
        parts.append(v[:f.width] if len(v) >= f.width else Cat(v, Const(0, f.width - len(v))))
    if values:
        raise ValueError(f"Meta has no field(s) {', '.join(values)}")
    return Cat(*parts)


class TxEngine(wiring.Component):
    """Ports: ``instr`` (SEND / CREDIT with their index), ``done`` (strobe: the instruction
    completed), ``load`` (LOAD descriptors to the DMA loader) + ``load_done``, ``payload_in``
    (the loader's output) -> ``payload_out`` (the packetizer's payload input), ``meta`` (the
    packetizer's metadata input), ``node_id``, ``running``, ``busy``, ``stall`` (blocked by the
    loader or the packetizer this cycle), ``bytes`` (payload bytes of the Meta pushed this
    cycle)."""

    def __init__(self, config: NodeConfig = NodeConfig()):
        self.config = config
        self.max_payload = config.max_payload
        self.depth = 2 * config.buffers
        super().__init__({
            "instr": In(stream.Signature(IssueLayout)),
            "done": Out(1),
            "load": Out(stream.Signature(DmaDescriptorLayout)),
            "load_done": In(1),
            "payload_in": In(AXIStreamSignature(config.data_width)),
            "payload_out": Out(AXIStreamSignature(config.data_width)),
            "meta": Out(stream.Signature(MetaLayout)),
            "node_id": In(NODE_BITS),
            "running": In(1),
            "busy": Out(1),
            "stall": Out(1),
            "bytes": Out(LENGTH_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        # lengths of issued LOADs whose Meta is not decided yet; send/drop marks of loaded packets
        # (hw/fifo.py: their levels from registers, so ``own`` below -- and the node's
        # ``tx_owns`` of the loader behind it -- is not behind a level adder)
        m.submodules.lens = lens = PrefetchFIFO(LENGTH_BITS, self.depth, exact=True)
        m.submodules.marks = marks = PrefetchFIFO(1, self.depth, exact=True)

        word = Signal(INSTR_BITS)
        send = InstrLayouts[Opcode.SEND](word)
        credit = InstrLayouts[Opcode.CREDIT](word)
        active = Signal()            # an instruction is being worked on
        is_send = Signal()
        addr = Signal(len(self.load.payload.addr))
        header_only_sent = Signal()
        buf = Signal(range(max(cfg.buffers, 2)))
        loaded = Signal(range(self.depth + 1))   # LOADs complete, Meta not yet decided

        # registered beside the bytes left (issue 14: no compare of the instruction word or of
        # the bytes left in front of the loader's and the packetizer's handshakes): ``has_data``
        # (a SEND with bytes), ``n`` (the next packet's bytes, min(remaining, max_payload)),
        # ``more`` (remaining != 0), ``rest`` (remaining - n: the bytes after the next packet) and
        # ``big`` (rest > max_payload).  A LOAD's update is then a choice of registers and
        # compares of ``rest`` alone (issue 14: remaining - n, its compare with max_payload and
        # != 0 behind the loader's handshake were 9 levels)
        MP = self.max_payload
        has_data, more, big = Signal(), Signal(), Signal()
        n, rest = Signal(LENGTH_BITS), Signal(LENGTH_BITS)

        def first_packet(length):
            return Mux(length > MP, MP, length)

        m.d.comb += self.instr.ready.eq(~active & self.running)
        with m.If(self.instr.valid & self.instr.ready):
            ins = self.instr.payload.word
            is_s = ins[:6] == int(Opcode.SEND)
            length = InstrLayouts[Opcode.SEND](ins).length
            m.d.sync += [active.eq(1), word.eq(ins), is_send.eq(is_s), header_only_sent.eq(0),
                         addr.eq(InstrLayouts[Opcode.SEND](ins).ddr * DDR_ALIGN),
                         n.eq(Mux(is_s, first_packet(length), 0)),
                         rest.eq(Mux(is_s & (length > MP), length - MP, 0)), big.eq(is_s & (length > 2 * MP)),
                         has_data.eq(is_s & (length != 0)), more.eq(is_s & (length != 0))]

        # --- LOAD descriptors: one per packet -------------------------------------------------------
        d = self.load.payload
        m.d.comb += [d.addr.eq(addr), d.length.eq(n), d.buffer.eq(buf), raw(d.dir).eq(DmaDir.LOAD), d.tag.eq(0),
                     lens.w_data.eq(n)]
        m.d.comb += self.load.valid.eq(active & is_send & more & self.running & lens.w_rdy)
        with m.If(self.load.valid & self.load.ready):
            m.d.comb += lens.w_en.eq(1)
            m.d.sync += [addr.eq(addr + n), n.eq(Mux(big, MP, rest)), rest.eq(Mux(big, rest - MP, 0)),
                         big.eq(rest > 2 * MP), more.eq(rest != 0),
                         buf.eq(Mux(buf == cfg.buffers - 1, 0, buf + 1))]

        # --- Meta for a loaded packet (or a header-only one), or a drop mark after a stop ---------
        # Driven by one assignment (partly driven vectors become `always @*` blocks Icarus never runs).
        m.d.comb += self.meta.payload.eq(meta_word(
            stage=Mux(is_send, raw(send.stage), Stage.CONTROL), op=Mux(is_send, raw(send.mop), Op.CREDIT),
            collective=Mux(is_send, raw(send.collective), Collective.UNICAST),
            reduce_op=Mux(is_send, raw(send.reduce_op), ReduceOp.NONE), src=self.node_id,
            dst=Mux(is_send, send.dst, credit.dst), route_id=Mux(is_send, send.route_id, credit.route_id),
            kv_id=Mux(is_send, send.tag, credit.sem), length=Mux(has_data, lens.r_data, 0),
            seq=Mux(is_send, send.seq, credit.count)))
        header_only = active & ~has_data & ~header_only_sent
        with_payload = loaded != 0
        m.d.comb += self.meta.valid.eq(self.running & (header_only | with_payload))
        m.d.comb += marks.w_data.eq(1)
        loaded_dec = Signal()
        with m.If(self.meta.valid & self.meta.ready):
            with m.If(header_only):
                m.d.sync += header_only_sent.eq(1)
            with m.Else():
                m.d.comb += [lens.r_en.eq(1), marks.w_en.eq(1), loaded_dec.eq(1), self.bytes.eq(lens.r_data)]
        with m.If(~self.running & with_payload):
            m.d.comb += [lens.r_en.eq(1), marks.w_data.eq(0), marks.w_en.eq(1), loaded_dec.eq(1)]
        m.d.sync += loaded.eq(loaded + self.load_done - loaded_dec)

        # --- payload: pass (or drop) each loaded packet per its mark; anything while idle ----------
        own = lens.holds | marks.holds | active
        pass_all = ~own & ~self.running
        i, o = self.payload_in, self.payload_out
        go = marks.r_rdy | pass_all
        keep = Mux(marks.r_rdy, marks.r_data[0], 1)
        m.d.comb += [o.tdata.eq(i.tdata), o.tkeep.eq(i.tkeep), o.tlast.eq(i.tlast),
                     o.tvalid.eq(i.tvalid & go & keep),
                     i.tready.eq(go & (o.tready | ~keep))]
        with m.If(i.tvalid & i.tready & i.tlast & marks.r_rdy):
            m.d.comb += marks.r_en.eq(1)

        # --- completion -------------------------------------------------------------------------
        finished = active & self.running & ~more & (loaded == 0) & ~lens.holds & \
            ~marks.holds & (has_data | header_only_sent)
        with m.If(finished):
            m.d.comb += self.done.eq(1)
            m.d.sync += active.eq(0)
        with m.If(~self.running & ~lens.holds & ~marks.holds & (loaded == 0)):
            m.d.sync += active.eq(0)
        m.d.comb += [
            self.busy.eq(own | (loaded != 0)),
            self.stall.eq(active & ((self.load.valid & ~self.load.ready) | (self.meta.valid & ~self.meta.ready))),
        ]
        return m


class PacketMux(wiring.Component):
    """Two AXI-Stream packet sources -> one output, switching only between packets; ``a``
    (the RX engine's credits) goes first when both have a packet waiting, so a credit waits
    for at most the packet that is already leaving ``b`` (the packetizer)."""

    def __init__(self, data_width: int):
        axis = AXIStreamSignature(data_width)
        super().__init__({"a": In(axis), "b": In(axis), "o": Out(axis)})

    def elaborate(self, platform):
        m = Module()
        locked, sel_b = Signal(), Signal()
        cur_b = Signal()
        m.d.comb += cur_b.eq(Mux(locked, sel_b, ~self.a.tvalid))
        src_valid = Mux(cur_b, self.b.tvalid, self.a.tvalid)
        m.d.comb += [
            self.o.tvalid.eq(src_valid),
            self.o.tdata.eq(Mux(cur_b, self.b.tdata, self.a.tdata)),
            self.o.tkeep.eq(Mux(cur_b, self.b.tkeep, self.a.tkeep)),
            self.o.tlast.eq(Mux(cur_b, self.b.tlast, self.a.tlast)),
            self.a.tready.eq(~cur_b & self.o.tready),
            self.b.tready.eq(cur_b & self.o.tready),
        ]
        # Hold the choice from the first cycle a packet is offered until its last beat is taken.
        with m.If(self.o.tvalid):
            with m.If(self.o.tready & self.o.tlast):
                m.d.sync += locked.eq(0)
            with m.Else():
                m.d.sync += [locked.eq(1), sel_b.eq(cur_b)]
        return m


# === RX engine =================================================================================
# RX engine: RECV posting, the receive table, and the packets the NIC delivers to this node.
#
# *Posting*: a RECV takes a free receive-table entry {tag, address, length, done semaphore}
# (none free: it waits, ``slot_wait``) and, with ``credit``, queues a CREDIT packet for the
# sender on its own path to the NIC (``credit``: it never waits behind a SEND's data).
#
# *Delivered packets* (``i``: the NIC's local output, header first), one at a time:
#
# * control ops: CREDIT adds ``seq`` to ``sem[kv_id]`` (``credit_inc``); KV_DRAIN /
#   KV_INVALIDATE set directory entry ``kv_id`` to DRAINING / INVALID (``dir_wr``).  A control
#   packet with a payload or an id out of range, and a header-only packet of any other op, is
#   dropped and counted (RX_BAD_CONTROL).
# * data, while a program runs: matched by ``kv_id`` against the posted tags; the payload is
#   written by the DMA writer at the entry's address + the bytes already assigned
#   (``store`` descriptor, beats on ``o``); when the writer has acknowledged ``length`` bytes
#   the entry is freed and ``sem[done_sem]`` incremented (``done_inc``).  More bytes than the
#   entry still expects: dropped, RX_OVERFLOW.  No matching entry: the packet waits (a RECV
#   may be posted meanwhile) for ``rx_wait`` cycles, then it is dropped, RX_UNEXPECTED.
# * data, while no program runs (the PS's debug path): the packet takes the next STORE
#   descriptor of ``ps_store`` (its completion leaves on ``ps_done`` + ``ps_done_tag``); one
#   longer than the descriptor is dropped (RX_OVERFLOW), one that finds none within
#   ``rx_wait`` cycles is dropped (RX_UNEXPECTED).
#
# ``clear`` (a program starts) empties the receive table.

#: Directory ids the DIR instruction and the control packets can name.
DIR_BLOCK_BITS = LAYOUTS[Opcode.DIR]["block"].width


class DirWriteSignature(wiring.Signature):
    """A replica-directory write, from the writer's side: ``en``, ``block``, ``state``."""

    def __init__(self):
        super().__init__({"en": Out(1), "block": Out(DIR_BLOCK_BITS), "state": Out(REPLICA_STATE_BITS)})

    def __eq__(self, other):
        return isinstance(other, DirWriteSignature)

    def __hash__(self):
        return hash(type(self))

    def __repr__(self):
        return "DirWriteSignature()"


def _lowest_has(g, p):
    """Whether some bit i has ``g[i]`` and every bit below it ``p`` (``g`` and ``p`` never both
    set in a bit): the carry out of a ripple over the bits in reverse order, one carry chain.
    (Round 27: ``x & -x`` picked at an index, or prefix ORs, were mapped 8 to 9 levels deep.)"""
    n = len(g)
    x = Cat(*((g[i] | p[i]) for i in reversed(range(n))))
    y = Cat(*(g[i] for i in reversed(range(n))))
    return (x + y)[n]


#: A LUT6's INIT for O = (I0 == I1) & (I2 == I3) & (I4 == I5): three bit pairs equal (round 29).
class RxEngine(wiring.Component):
    """See the module text.  Other ports: ``errors`` (strobes per ErrorCause), ``busy`` (a
    packet or a DDR write in flight, or a credit queued), ``posted`` (table entries in use, a
    cycle late; ``has_posted``: any, at once),
    ``bytes`` (payload bytes acknowledged this cycle), ``rx_packet`` (a header arrived),
    ``cur_pc`` (the RECV whose payload is being written), ``running``, ``rx_wait``,
    ``node_id``, ``clear``."""

    def __init__(self, config: NodeConfig = NodeConfig(), outstanding: int = 4):
        self.config, self.slots, self.outstanding = config, config.rx_slots, outstanding
        super().__init__({
            "instr": In(stream.Signature(IssueLayout)),
            "i": In(AXIStreamSignature(config.data_width)),
            "store": Out(stream.Signature(DmaDescriptorLayout)),
            "o": Out(AXIStreamSignature(config.data_width)),
            "store_done": In(1),
            "ps_store": In(stream.Signature(DmaDescriptorLayout)),
            "ps_done": Out(1), "ps_done_tag": Out(DMA_TAG_BITS),
            "credit": Out(stream.Signature(MetaLayout)),
            "done_inc": Out(SemEventSignature(1)),
            "credit_inc": Out(SemEventSignature(16)),
            "dir_wr": Out(DirWriteSignature()),
            "errors": Out(len(ErrorCause)),
            "running": In(1), "rx_wait": In(32), "node_id": In(NODE_BITS), "clear": In(1),
            "busy": Out(1), "posted": Out(8), "has_posted": Out(1), "slot_wait": Out(1), "bytes": Out(LENGTH_BITS),
            "rx_packet": Out(1), "cur_pc": Out(PC_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, S = self.config, self.slots
        m.submodules.deser = deser = HeaderDeserializer(cfg.data_width)
        wiring.connect(m, wiring.flipped(self.i), deser.i)

        # --- the receive table ------------------------------------------------------------------
        # ``next``: the DDR address of the entry's next byte (base + bytes assigned), ``room``: the
        # bytes it still expects (length - bytes assigned): the CHECK state compares and hands them
        # on without an adder.  The write that completes an entry is the one that was assigned its
        # last byte (the writer acknowledges in order): ``final`` travels with it in ``outs``, so
        # the acknowledgement frees the entry without a compare (issue 14)
        #
        # The tags are registers (a packet's is compared with every entry's); the rest is read at
        # ``slot`` only, so it lives in LUT RAM (issue 14's LUTs: registers with two writers, a
        # post and an assignment, took a multiplexer per bit per entry).  A post and an assignment
        # can fall in one cycle, so two memories: ``posted`` (written by a post) and ``moved``
        # (``next`` / ``room`` written by an assignment); ``moved_bits`` says which one holds an
        # entry's last ``next`` / ``room`` (a live-value table: set by an assignment, cleared by a
        # post).  Read as the registers were: a write shows the cycle after.
        entry = data.StructLayout({"tag": KV_ID_BITS, "next": DMA_ADDR_BITS, "room": LENGTH_BITS,
                                   "done_sem": 5, "pc": PC_BITS})
        posted_l = data.StructLayout({"next": DMA_ADDR_BITS, "room": LENGTH_BITS, "done_sem": 5, "pc": PC_BITS})
        moved_l = data.StructLayout({"next": DMA_ADDR_BITS, "room": LENGTH_BITS})
        tags = [Signal(KV_ID_BITS, name=f"tag{i}") for i in range(S)]
        m.submodules.posted = posted_mem = Memory(shape=posted_l, depth=max(S, 2), init=[])
        m.submodules.moved = moved_mem = Memory(shape=moved_l, depth=max(S, 2), init=[])
        posted_w, posted_r = posted_mem.write_port(), posted_mem.read_port(domain="comb")
        moved_w, moved_r = moved_mem.write_port(), moved_mem.read_port(domain="comb")
        moved_bits = Signal(S)
        valid = Signal(S)
        # (registered: SEQ_LEVELS.posted is a cycle late, the popcount is not in the register read;
        # its adders as a balanced tree, not a chain of S: issue 14)
        m.d.sync += self.posted.eq(add_tree(m, [valid[i] for i in range(S)], "posted_sum"))

        # --- posting ----------------------------------------------------------------------------
        m.submodules.credits = credits = buffered_fifo(MetaLayout.size, 4)
        free = ~valid
        # whether an entry is free, registered from the table's next state (issue 14: the OR over
        # the entries was in front of ``instr.ready`` and so of the sequencer's queue and counters;
        # the register holds what ``(~valid).any()`` computes, cycle for cycle)
        free_any = Signal(init=1)
        first_free = Signal(S)            # the lowest free entry, one-hot (x & -x: a carry chain)
        m.d.comb += first_free.eq(free & (~free + 1))
        recv = InstrLayouts[Opcode.RECV](self.instr.payload.word)
        wants_credit = recv.credit
        m.d.comb += self.instr.ready.eq(self.running & free_any & (~wants_credit | credits.w_rdy))
        m.d.comb += self.slot_wait.eq(self.instr.valid & self.running & ~free_any)
        post = Signal()
        m.d.comb += post.eq(self.instr.valid & self.instr.ready)
        m.d.comb += [credits.w_data.eq(meta_word(stage=Stage.CONTROL, op=Op.CREDIT, collective=Collective.UNICAST,
                                                 reduce_op=ReduceOp.NONE, src=self.node_id, dst=recv.credit_dst,
                                                 route_id=recv.credit_route, kv_id=recv.credit_sem, seq=1)),
                     credits.w_en.eq(post & wants_credit)]
        m.d.comb += [self.credit.valid.eq(credits.r_rdy), self.credit.payload.eq(credits.r_data),
                     credits.r_en.eq(self.credit.ready)]

        # --- outstanding DMA writes: {slot, length, ps, tag}, in order -----------------------------
        out_layout = data.StructLayout({"slot": range(max(S, 2)), "length": LENGTH_BITS, "ps": 1,
                                        "tag": DMA_TAG_BITS, "done_sem": 5, "final": 1})
        m.submodules.outs = outs = buffered_fifo(out_layout.size, self.outstanding)
        head = Signal(out_layout)
        m.d.comb += head.eq(outs.r_data)

        # --- packets ------------------------------------------------------------------------------
        hm = Signal(MetaLayout)
        has_payload, bad = Signal(), Signal()
        match = Signal(S)
        timer = Signal(32)
        # ``matched``: whether an entry matches, per group of 8 entries (issue 14: the OR of all the
        # entries' tag compares in front of one register was 9 levels, mapped as a chain); DECIDE ORs
        # the groups
        matched, expired = Signal((S + 7) // 8), Signal()
        # the PS's path: whether a STORE descriptor was waiting in LOOKUP and whether the packet is longer,
        # registered there (round 19: the length compare behind the queue's head was 9 levels to the state);
        # the head stays until DECIDE takes it
        ps_seen, ps_over = Signal(), Signal()
        slot = Signal(range(max(S, 2)))
        sel = Signal(entry)               # the entry at ``slot`` (its tag is not read: 0)
        # moved_bits[slot], registered with ``slot`` (from the bits' next state: a post may clear one
        # in that cycle); CHECK, the one state that reads ``sel``, follows at once.  (Round 27: as
        # two registers, ``ms_keep`` = the bit before that cycle and ``ms_hit`` = that cycle's post
        # wrote the entry, both from prefix ORs / ANDs of registers and without the post's
        # carry-chain one-hot or ``first``'s encoder: one register was mapped at 8 to 8.19 levels
        # from ``valid``.  ``moved_sel`` is one LUT of the two, beside the LUT RAMs' read at ``slot``)
        moved_nx, moved_sel = Signal(S), Signal()
        ms_keep, ms_hit = Signal(), Signal()
        m.d.comb += moved_sel.eq(ms_keep & ~ms_hit)
        m.d.comb += [posted_r.addr.eq(slot), moved_r.addr.eq(slot),
                     sel.next.eq(Mux(moved_sel, moved_r.data.next, posted_r.data.next)),
                     sel.room.eq(Mux(moved_sel, moved_r.data.room, posted_r.data.room)),
                     sel.done_sem.eq(posted_r.data.done_sem), sel.pc.eq(posted_r.data.pc)]
        store_d = Signal(DmaDescriptorLayout)
        store_ps, store_tag = Signal(), Signal(DMA_TAG_BITS)
        # One whole signal per cause (a partly driven vector becomes an `always @*` Icarus never runs).
        strobe = {c: Signal(name=f"err_{c.name.lower()}")
                  for c in (ErrorCause.RX_BAD_CONTROL, ErrorCause.RX_OVERFLOW, ErrorCause.RX_UNEXPECTED)}
        m.d.comb += self.errors.eq(sum(sig << int(c) for c, sig in strobe.items()))
        err = strobe
        op = raw(hm.op)
        is_control = (op == Op.CREDIT) | (op == Op.KV_DRAIN) | (op == Op.KV_INVALIDATE)
        cur_pc = Signal(PC_BITS)
        m.d.comb += self.cur_pc.eq(cur_pc)
        assign = Signal()            # a packet's bytes were assigned to slot `slot`
        checking = Signal()          # in CHECK

        out_entry = Signal(out_layout)
        out_done_sem, out_final = Signal(5), Signal()
        m.d.comb += [out_entry.slot.eq(slot), out_entry.length.eq(store_d.length), out_entry.ps.eq(store_ps),
                     out_entry.tag.eq(store_tag), out_entry.done_sem.eq(out_done_sem), out_entry.final.eq(out_final)]
        m.d.comb += [self.store.payload.eq(store_d), outs.w_data.eq(out_entry)]
        ps = self.ps_store.payload
        # A control packet's directory write and credit, decided in LOOKUP (from the header's
        # registers) and registered: they strobe in DECIDE as before, from registers (issue 14:
        # the header's decode was in front of the execute unit's directory write, 14 levels
        # joined).  LOOKUP always goes on to DECIDE and DECIDE leaves a control packet at once, so
        # each register is high exactly in the DECIDE the old decode strobed in
        dir_en, dir_state, credit_v = Signal(), Signal(REPLICA_STATE_BITS), Signal()
        m.d.sync += [dir_en.eq(0), credit_v.eq(0)]
        m.d.comb += [self.dir_wr.en.eq(dir_en), self.dir_wr.block.eq(hm.kv_id), self.dir_wr.state.eq(dir_state),
                     self.credit_inc.valid.eq(credit_v), self.credit_inc.sem.eq(hm.kv_id),
                     self.credit_inc.amount.eq(hm.seq)]
        ctl_ok = ~bad & is_control & ~has_payload & (hm.length == 0)
        is_data, bad_control = Signal(), Signal()      # (DECIDE's header checks, registered in LOOKUP)
        # (the payload's lines whatever the state, only the handshake in FORWARD: round 33, as the deserializer's)
        m.d.comb += [self.o.tdata.eq(deser.o.tdata), self.o.tkeep.eq(deser.o.tkeep), self.o.tlast.eq(deser.o.tlast)]
        with m.FSM(name="packet") as fsm:
            with m.State("HEADER"):
                m.d.comb += deser.meta.ready.eq(1)
                with m.If(deser.meta.valid):
                    p = deser.meta.payload
                    m.d.comb += self.rx_packet.eq(1)
                    m.d.sync += [hm.eq(p.meta), has_payload.eq(p.has_payload), bad.eq(p.truncated | p.malformed),
                                 timer.eq(0)]
                    m.next = "LOOKUP"
            with m.State("LOOKUP"):
                # (whether any entry matches and whether the wait ran out are registered beside
                # the match: DECIDE has no OR over the entries and no compare of the timer)
                # (round 29: the compares as LUT6 instances in the node's build, ``equal``)
                hit = Cat(*(valid[i] & equal(m, tags[i], hm.kv_id, bool(cfg.dsp_primitives), f"tag{i}_eq")
                            for i in range(S)))
                m.d.sync += [match.eq(hit), matched.eq(Cat(*(hit[k:k + 8].any() for k in range(0, S, 8)))), timer.eq(timer + 1),
                             expired.eq((timer + 1)[:len(timer)] >= self.rx_wait),
                             ps_seen.eq(self.ps_store.valid), ps_over.eq(hm.length > self.ps_store.payload.length),
                             dir_en.eq(ctl_ok & (op != Op.CREDIT) & (hm.kv_id < (1 << DIR_BLOCK_BITS))),
                             dir_state.eq(Mux(op == Op.KV_DRAIN, int(ReplicaState.DRAINING), int(ReplicaState.INVALID))),
                             credit_v.eq(ctl_ok & (op == Op.CREDIT) & (hm.kv_id < cfg.num_sems)),
                             is_data.eq(~bad & ~is_control & has_payload),
                             bad_control.eq(~bad & Mux(is_control, has_payload | (hm.length != 0) |
                                                       Mux(op == Op.CREDIT, hm.kv_id >= cfg.num_sems,
                                                           hm.kv_id >= (1 << DIR_BLOCK_BITS)),
                                                       ~has_payload))]
                m.next = "DECIDE"
            with m.State("DECIDE"):
                first = Signal(range(max(S, 2)))
                for i in reversed(range(S)):
                    with m.If(match[i]):
                        m.d.comb += first.eq(i)
                # a bad packet, a control packet (its directory write / credit: ``dir_en`` /
                # ``credit_v``) and a data packet without payload end here: decided in LOOKUP from
                # the header (``is_data``, ``bad_control``; issue 14: the header's checks in front
                # of the wait for the table, 9 levels to the state), dropped unless a good control.
                # A data packet waits (LOOKUP) while ``outs`` has no room; running, it goes to
                # CHECK if an entry matches, else is dropped once the wait ran out; stopped, it
                # goes to the PS's STORE descriptor seen in LOOKUP (dropped if longer), else waits
                # (a descriptor that arrived after LOOKUP is compared there next: never dropped)
                # or is dropped once the wait ran out.  (Round 27: the outcomes as flat terms --
                # ``leave`` (the packet ends here: DRAIN or HEADER), ``go_check``, ``go_store`` --
                # not a tree of branches: abc9 mapped the tree as a chain of LUT2s, ``running`` ->
                # the state 8 to 9 levels)
                ok, m_any = Signal(), Signal()
                unexpected, overflow, go_check, go_store, leave = Signal(), Signal(), Signal(), Signal(), Signal()
                m.d.comb += [ok.eq(is_data & outs.w_rdy), m_any.eq(matched.any()),
                             unexpected.eq(ok & expired & Mux(self.running, ~m_any, ~ps_seen & ~self.ps_store.valid)),
                             overflow.eq(ok & ~self.running & ps_seen & ps_over),
                             go_check.eq(ok & self.running & m_any),
                             go_store.eq(ok & ~self.running & ps_seen & ~ps_over),
                             leave.eq(~is_data | unexpected | overflow),
                             err[ErrorCause.RX_BAD_CONTROL].eq(~is_data & bad_control),
                             err[ErrorCause.RX_UNEXPECTED].eq(unexpected),
                             err[ErrorCause.RX_OVERFLOW].eq(overflow),
                             self.ps_store.ready.eq(go_store)]
                with m.If(go_check):
                    # (no CHECK now: moved_nx without it.)  moved_bits[first]: a bit i with
                    # match[i] & moved_bits[i] and no match below; the post wrote ``first``:
                    # a bit i with match[i] & ~valid[i] (the lowest free entry) and every
                    # entry below valid and not matched
                    m.d.sync += [slot.eq(first),
                                 ms_keep.eq(_lowest_has(match & moved_bits, ~match)),
                                 ms_hit.eq(post & _lowest_has(match & ~valid, valid & ~match))]
                with m.If(go_store):
                    m.d.sync += [store_d.addr.eq(ps.addr), store_d.length.eq(hm.length),
                                 raw(store_d.dir).eq(DmaDir.STORE), store_d.buffer.eq(0),
                                 store_d.tag.eq(ps.tag), store_tag.eq(ps.tag), store_ps.eq(1)]
                with m.If(leave):
                    with m.If(has_payload):
                        m.next = "DRAIN"
                    with m.Else():
                        m.next = "HEADER"
                with m.Elif(go_check):
                    m.next = "CHECK"
                with m.Elif(go_store):
                    m.next = "STORE"
                with m.Else():
                    m.next = "LOOKUP"
            with m.State("CHECK"):
                m.d.comb += checking.eq(1)
                # the matched entry: does the packet fit what it still expects?
                with m.If(hm.length > sel.room):
                    m.d.comb += err[ErrorCause.RX_OVERFLOW].eq(1)
                    m.next = "DRAIN"
                with m.Else():
                    m.d.comb += assign.eq(1)
                    m.d.sync += [store_d.addr.eq(sel.next), store_d.length.eq(hm.length),
                                 raw(store_d.dir).eq(DmaDir.STORE), store_d.buffer.eq(0), store_d.tag.eq(0),
                                 store_tag.eq(0), store_ps.eq(0), cur_pc.eq(sel.pc), out_done_sem.eq(sel.done_sem),
                                 out_final.eq(hm.length == sel.room)]
                    m.next = "STORE"
            with m.State("STORE"):
                m.d.comb += self.store.valid.eq(1)
                with m.If(self.store.ready):
                    m.d.comb += outs.w_en.eq(1)
                    m.next = "FORWARD"
            with m.State("FORWARD"):
                b = deser.o
                m.d.comb += [self.o.tvalid.eq(b.tvalid), b.tready.eq(self.o.tready)]
                with m.If(b.tvalid & b.tready & b.tlast):
                    m.next = "HEADER"
            with m.State("DRAIN"):
                m.d.comb += deser.o.tready.eq(1)
                with m.If(deser.o.tvalid & deser.o.tlast):
                    m.next = "HEADER"

        # --- completions of the writer, in order ---------------------------------------------------
        complete = Signal()
        m.d.comb += [outs.r_en.eq(self.store_done)]
        with m.If(self.store_done & head.ps):
            m.d.comb += [self.ps_done.eq(1), self.ps_done_tag.eq(head.tag)]
        with m.If(self.store_done & ~head.ps):
            m.d.comb += [complete.eq(1), self.bytes.eq(head.length)]

        # --- table updates (post, assign, acknowledge) ---------------------------------------------
        # a post writes the lowest free entry (its index: the OR of the one-hot's bits), an
        # assignment the entry at ``slot`` (one adder and one subtractor on ``sel``)
        free_idx = Signal(range(max(S, 2)))
        m.d.comb += free_idx.eq(Cat(*(Cat(*(first_free[i] for i in range(S) if i >> b & 1)).any()
                                      for b in range(len(free_idx)))))
        m.d.comb += [posted_w.addr.eq(free_idx), posted_w.en.eq(post),
                     posted_w.data.next.eq(recv.ddr * DDR_ALIGN), posted_w.data.room.eq(recv.length),
                     posted_w.data.done_sem.eq(recv.done_sem), posted_w.data.pc.eq(self.instr.payload.pc),
                     moved_w.addr.eq(slot), moved_w.en.eq(checking),
                     moved_w.data.next.eq(Mux(assign, sel.next + hm.length, sel.next)),
                     moved_w.data.room.eq(Mux(assign, sel.room - hm.length, sel.room))]
        for i in range(S):
            with m.If(post & first_free[i]):
                m.d.sync += tags[i].eq(recv.tag)
        # (CHECK writes the entry at ``slot`` into ``moved`` whether or not it assigns: the same
        # values when not, and the live-value bit does not wait for the length check.  A post
        # to that entry in that cycle -- it was freed after LOOKUP -- wins, unless it assigns:
        # as with one register per field, where the assignment's ``next`` / ``room`` won)
        post_bits = Mux(post, first_free, 0)
        m.d.comb += moved_nx.eq(((moved_bits | Mux(checking, 1 << slot, 0)) & ~post_bits)
                                | (post_bits & Mux(assign, 1 << slot, 0)))
        m.d.sync += moved_bits.eq(moved_nx)
        valid_nx = Signal(S)
        posted_bits = Mux(post, first_free, 0)
        freed_bits = Mux(complete & head.final, Cat(*(head.slot == i for i in range(S))), 0)
        m.d.comb += valid_nx.eq(Mux(self.clear, 0, (valid | posted_bits) & ~freed_bits))
        # ~valid_nx.all() without the post's one-hot: a post fills the lowest free entry, so the
        # table fills up then if that was the only one (``one_free``, from the registers), and
        # a freed entry or a clear leaves one free
        one_free = Signal()
        m.d.comb += one_free.eq(Cat(*(valid == ((1 << S) - 1) ^ (1 << i) for i in range(S))).any())
        m.d.sync += [valid.eq(valid_nx),
                     free_any.eq(self.clear | freed_bits.any() | ~Mux(post, one_free, valid.all()))]
        m.d.comb += [self.done_inc.valid.eq(complete & head.final), self.done_inc.sem.eq(head.done_sem),
                     self.done_inc.amount.eq(1)]

        in_packet = Signal()
        m.d.comb += in_packet.eq(~fsm.ongoing("HEADER") | deser.meta.valid)
        m.d.comb += [self.busy.eq(in_packet | outs.r_rdy | nonempty(outs) | nonempty(credits)),
                     self.has_posted.eq(valid.any())]
        return m


# === sequencer registers =======================================================================
# The sequencer's registers (the ``SEQ_WINDOW`` of ``mcf.spec.regmap``), behind the register
# block's ``RegisterBusSignature`` port.
#
# Like ``ControlRegisters`` the table is walked, not written out: RW registers are storage
# (masked by their fields, byte strobes honoured), SEQ_CONTROL's fields are one-cycle pulses,
# and every RO register has a source below (a missing one is an elaboration error).  Reads
# answer one cycle after ``r_en``; SEM_DATA, DIR_DATA and PERF_LO / PERF_HI read what their
# index register selects (DIR_DATA through the execute unit's directory read port; PERF_LO
# snapshots the high half for PERF_HI).

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
        # the word's bits within the window (``w_en`` pulses for the window's registers only:
        # ``RegisterBusSignature``; issue 14: the whole address's compare was in front of
        # SEQ_CONTROL's abort and so of the sequencer's fault)
        wbits = (len(SEQ_WINDOW) // 4 - 1).bit_length()
        assert SEQ_WINDOW.start % len(SEQ_WINDOW) == 0, "the sequencer's window must be aligned to its size"
        with m.If(bus.w_en):
            with m.Switch(bus.w_addr[:wbits]):
                for r in regs:
                    with m.Case((r.offset >> 2) % (1 << wbits)):
                        if r.access is Access.RW:      # (round 29: an enable a byte, ``write_bytes``)
                            write_bytes(m, store[r.name], bus.w_data, bus.w_strb, r.mask, r.reset)
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
        # SEQ_LEVELS as it was in the read's request cycle (round 32: the queues' levels come from
        # adders behind their output registers; that carry, the window's choice and the CSR's read
        # choice in one cycle were mapped at 9 levels when abc9 remapped the top)
        levels = Signal(32, name="levels_q")
        with m.If(bus.r_en):
            m.d.sync += levels.eq(self.levels)
        ro = {
            "SEQ_CAPS": Const(self.caps, DATA_BITS),
            "SEQ_STATUS": compose("SEQ_STATUS", running=self.running, done=self.done, fault=self.fault,
                                  idle=self.idle, start_pending=self.start_pending, fault_cause=self.fault_cause),
            "SEQ_PC": compose("SEQ_PC", pc=self.pc),
            "SEQ_FAULT_PC": compose("SEQ_FAULT_PC", pc=self.fault_pc),
            "SEQ_WAIT": self.wait, "SEQ_LEVELS": levels,
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


# === the node ====================================================================================
#: The node's own DDR clients (interconnect slots 0-2; on HP port 0, ``NodeConfig.ddr_masters``).
FETCH, LOADER, WRITER = 0, 1, 2


def exec_master(port: str) -> str:
    """The ``NodeConfig.ddr_masters`` name of an execute-unit AXI4 port: ``m_axi`` -> ``exec``,
    ``m_axi_w<k>`` -> ``weight<k>``."""
    return "exec" if port == "m_axi" else "weight" + port.removeprefix("m_axi_w")


def axi_members(component) -> list[str]:
    """Names of a component's AXI4 master ports (its DDR clients)."""
    return [name for name, member in component.signature.members.items()
            if member.is_signature and isinstance(member.signature, AXI4Signature) and member.flow == Out]


class Node(wiring.Component):
    """One node, built from a ``mcf.spec.node.NodeConfig``.

    ``eth=True`` adds the ports a 10GBASE-R port (``mcf.hw.eth``) needs from the register
    block: ``eth`` (MAC table writes, link status, sequence gaps) and ``eth_errors`` (its
    error events); ``mcf.hw.eth.eth_node.EthNode`` wires them.  ``exec_unit``: a factory of
    the execute unit from the NodeConfig (default ``ExecUnit``)."""

    def __init__(self, config: NodeConfig = NodeConfig(), exec_unit=None, *, eth: bool = False):
        self.config, self.has_eth = config, eth
        self.data_width, self.net_ports = config.data_width, config.net_ports
        self.csr = ControlRegisters(config.meta_queue_depth, config.desc_queue_depth, config.data_bytes,
                                    config.net_ports, dma_bus_bytes=config.data_bytes,
                                    dma_buffers=config.buffers, dma_buffer_bytes=config.buffer_bytes, seq=True,
                                    primitive=bool(config.dsp_primitives))     # (round 28b: LUT6 choices)
        self.exec = (exec_unit or ExecUnit)(config)
        self.seq = Sequencer(config, primitive=bool(config.dsp_primitives))    # (round 29: LUT6 picks)
        self.loader = DmaLoader(config.data_width, config.ddr_addr_bits, config.buffer_bytes, config.buffers)
        self.writer = DmaWriter(config.data_width, config.ddr_addr_bits)
        self.packetizer = Packetizer(config.data_width, config.payload_depth, config.meta_queue_depth)
        self.nic = Nic(config.data_width, config.net_ports, **config.nic_params(),
                       primitive=bool(config.dsp_primitives))     # (round 30: the slot key compares as LUT6)
        self.exec_ports = axi_members(self.exec)
        self.hp_of = config.ddr_masters()
        # with a weight clock: the weight loaders on HP 0 .. W-1 (``wic``, domain axi), the rest on
        # the ports after them (``ic``, its port q is HP port W + q)
        self.weight_domain = bool(config.weight_clock_hz)
        W = config.weight_ports if self.weight_domain else 0
        self.first_sync_port = W
        clients = [Client("fetch", write=False, port=self.hp_of["fetch"] - W),
                   Client("loader", write=False, port=self.hp_of["loader"] - W),
                   Client("writer", read=False, port=self.hp_of["writer"] - W)]
        weight_clients = []
        for name in self.exec_ports:
            sig = getattr(self.exec.signature.members[name], "signature")
            weight = self.weight_domain and name != "m_axi"
            (weight_clients if weight else clients).append(Client(
                f"ex_{name}", read=sig.read, write=sig.write, id_width=sig.id_width,
                port=self.hp_of[exec_master(name)] - (0 if weight else W), addr_width=sig.addr_width))
        # (round 31b: every client's bursts are of the bus's width, ``full_width``)
        # (round 33: the window checks on LUT6_2 / CARRY4 instances with ``dsp_primitives``)
        prim = bool(config.dsp_primitives)
        self.ic = AxiInterconnect(clients, config.hp_ports - W, config.ddr_addr_bits, config.data_width,
                                  full_width=True, primitive=prim)
        self.wic = (DomainRenamer({"sync": "axi"})(AxiInterconnect(weight_clients, W, config.ddr_addr_bits,
                                                                     config.data_width, full_width=True,
                                                                     primitive=prim))
                    if W else None)
        id_width = max(self.ic.port_id_width + (self.wic.port_id_width if W else []))
        axis = AXIStreamSignature(config.data_width)
        members = {
            "s_axil": In(AXI4LiteSignature(ADDR_BITS, DATA_BITS)),
            "rx": In(axis).array(config.net_ports),
            "tx": Out(axis).array(config.net_ports),
            "irq": Out(1),
            **({"eth": Out(EthControlPort()), "eth_errors": In(len(ErrorCause))} if eth else {}),
        }
        hp_sig = AXI4Signature(config.ddr_addr_bits, config.data_width, id_width)
        for p in range(config.hp_ports):
            members["m_axi" if p == 0 else f"m_axi{p}"] = Out(hp_sig)
        super().__init__(members)

    def hp(self, p: int):
        return self.m_axi if p == 0 else getattr(self, f"m_axi{p}")

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.csr = csr = self.csr
        m.submodules.seqregs = sr = SeqRegisters(cfg)
        m.submodules.seq = seq = self.seq
        m.submodules.exec = ex = self.exec
        m.submodules.loader = ld = self.loader
        m.submodules.writer = wr = self.writer
        m.submodules.tx_engine = txe = TxEngine(cfg)
        m.submodules.rx_engine = rxe = RxEngine(cfg)
        m.submodules.packetizer = pk = self.packetizer
        m.submodules.credit_header = cser = HeaderSerializer(cfg.data_width)
        m.submodules.local_mux = lmux = PacketMux(cfg.data_width)
        m.submodules.nic = nic = self.nic
        m.submodules.ic = ic = self.ic
        if self.wic is not None:
            m.submodules.wic = self.wic
        # the interconnect's byte counts are registered (AxiInterconnect.BYTES_LATENCY); the weight
        # ports' come through the clock crossing, counted as they arrive
        m.submodules.perf = perf = PerfCounters(latency={
            PerfCounter[f"HP{p}_{d}_BYTES"]: AxiInterconnect.BYTES_LATENCY
            for p in range(self.first_sync_port, cfg.hp_ports) for d in ("RD", "WR")},
            primitive=bool(cfg.dsp_primitives))     # (round 28b: PERF's read choice as LUT6 instances)

        # --- registers ------------------------------------------------------------------------------
        wiring.connect(m, wiring.flipped(self.s_axil), csr.s_axil)
        wiring.connect(m, csr.seq_regs, sr.bus)
        wiring.connect(m, csr.route, nic.route)
        if self.has_eth:
            wiring.connect(m, wiring.flipped(self.eth), csr.eth)
        m.d.comb += [
            nic.node_id.eq(csr.node_id), nic.num_nodes.eq(csr.num_nodes), nic.enable.eq(csr.enable),
            self.irq.eq(csr.irq),
            ic.window_base.eq(csr.window_base), ic.window_size.eq(csr.window_size),
        ]

        # --- sequencer <-> engines ------------------------------------------------------------------
        running = seq.running
        wiring.connect(m, seq.ex, ex.instr)
        m.d.comb += [seq.ex_done.eq(ex.done), seq.ex_fault.eq(ex.fault), seq.ex_fault_cause.eq(ex.fault_cause)]
        wiring.connect(m, seq.tx, txe.instr)
        m.d.comb += seq.tx_done.eq(txe.done)
        wiring.connect(m, seq.rx, rxe.instr)
        wiring.connect(m, rxe.done_inc, seq.rx_done_inc)
        wiring.connect(m, rxe.credit_inc, seq.rx_credit_inc)
        m.d.comb += [ex.dir_wr.en.eq(rxe.dir_wr.en), ex.dir_wr.block.eq(rxe.dir_wr.block),
                     ex.dir_wr.state.eq(rxe.dir_wr.state),
                     ex.dir_rd.en.eq(sr.dir_rd.en), ex.dir_rd.block.eq(sr.dir_rd.block),
                     sr.dir_rd.state.eq(ex.dir_rd.state)]
        # SEM_DATA: the semaphore at SEM_INDEX through a register (issue 14: the sequencer's pick
        # of it was in front of the register read's word mux and the CSR's RDATA; the value a
        # cycle old, which an AXI-Lite read cannot tell)
        sem_value_q = Signal.like(seq.sem_value)
        m.d.sync += sem_value_q.eq(seq.sem_value)
        m.d.comb += [
            txe.node_id.eq(csr.node_id), txe.running.eq(running),
            rxe.node_id.eq(csr.node_id), rxe.running.eq(running), rxe.rx_wait.eq(sr.rx_wait),
            rxe.clear.eq(seq.clear), ex.clear.eq(seq.clear),
            seq.rx_slot_wait.eq(rxe.slot_wait), seq.rx_posted.eq(rxe.posted),
            seq.start.eq(sr.start), seq.abort.eq(sr.abort), seq.prog_base.eq(sr.prog_base),
            seq.prog_count.eq(sr.prog_count), seq.fault_mask.eq(sr.fault_mask), seq.watchdog.eq(sr.watchdog),
            seq.sem_index.eq(sr.sem_index),
            sr.running.eq(running), sr.done.eq(seq.done), sr.fault.eq(seq.fault),
            sr.start_pending.eq(seq.start_pending), sr.fault_cause.eq(seq.fault_cause), sr.pc.eq(seq.pc),
            sr.fault_pc.eq(seq.fault_pc), sr.wait.eq(seq.wait), sr.levels.eq(seq.levels),
            sr.sem_value.eq(sem_value_q), sr.perf_value.eq(perf.value),
            perf.index.eq(sr.perf_index), perf.clear.eq(seq.clear), perf.enable.eq(running),
        ]

        # --- the PS's queues (debug path) and the engines onto the DMA engines and the packetizer --
        # the TX engine owns the loader and the packetizer while a program runs and until it has
        # finished: registered (issue 14; the ownership fans out into the loader's and the CSR
        # queues' handshakes).  A cycle late at both ends: the engine gets an instruction only
        # several cycles after ``running`` rises, and stays busy while a LOAD of its own is out;
        # the PS's path gets the loader a cycle after the engine is done
        tx_owns = Signal()
        m.d.sync += tx_owns.eq(running | txe.busy)
        m.submodules.ps_stores = ps_stores = buffered_fifo(DmaDescriptorLayout.size, cfg.desc_queue_depth)
        ps_is_load = raw(csr.desc.payload.dir) == int(DmaDir.LOAD)
        m.d.comb += [
            ps_stores.w_data.eq(csr.desc.payload.as_value()),
            ps_stores.w_en.eq(csr.desc.valid & ~ps_is_load),
            rxe.ps_store.valid.eq(ps_stores.r_rdy), rxe.ps_store.payload.eq(ps_stores.r_data),
            ps_stores.r_en.eq(rxe.ps_store.ready),
        ]
        with m.If(tx_owns):
            wiring.connect(m, txe.load, ld.desc)
            wiring.connect(m, txe.meta, pk.meta)
            m.d.comb += csr.desc.ready.eq(csr.desc.valid & ~ps_is_load & ps_stores.w_rdy)
        with m.Else():
            m.d.comb += [ld.desc.valid.eq(csr.desc.valid & ps_is_load), ld.desc.payload.eq(csr.desc.payload),
                         csr.desc.ready.eq(Mux(ps_is_load, ld.desc.ready, ps_stores.w_rdy)),
                         pk.meta.valid.eq(csr.meta.valid), pk.meta.payload.eq(csr.meta.payload),
                         csr.meta.ready.eq(pk.meta.ready)]
        m.d.comb += txe.load_done.eq(ld.done & tx_owns)
        wiring.connect(m, ld.o, txe.payload_in)
        wiring.connect(m, txe.payload_out, pk.payload)
        wiring.connect(m, rxe.store, wr.desc)
        wiring.connect(m, rxe.o, wr.i)
        m.d.comb += rxe.store_done.eq(wr.done)
        # DESC_DONE: the PS's LOADs (loader) and STOREs (through the RX engine), one per cycle.
        done_ev = data.StructLayout({"tag": DMA_TAG_BITS})
        m.submodules.ps_done = ps_done = fifo.SyncFIFOBuffered(width=done_ev.size, depth=4)
        m.d.comb += [ps_done.w_data.eq(rxe.ps_done_tag), ps_done.w_en.eq(rxe.ps_done)]
        with m.If(ld.done & ~tx_owns):
            m.d.comb += [csr.desc_done.eq(1), csr.desc_done_tag.eq(ld.done_tag)]
        with m.Elif(ps_done.r_rdy):
            m.d.comb += [csr.desc_done.eq(1), csr.desc_done_tag.eq(ps_done.r_data), ps_done.r_en.eq(1)]

        # --- to and from the NIC --------------------------------------------------------------------
        wiring.connect(m, rxe.credit, cser.meta)
        m.d.comb += cser.payload.tvalid.eq(0)
        wiring.connect(m, cser.o, lmux.a)
        wiring.connect(m, pk.o, lmux.b)
        # a register stage into the NIC (issue 14): its ingress decodes the beat from its port
        # (the deserializer's keep checks, ~8 LUT levels), so the mux and the serializer's
        # state must not be in front of it in the same cycle; +1 cycle a local packet, no bubble
        m.submodules.local_reg = lreg = AxisRegister(cfg.data_width, primitive=bool(cfg.dsp_primitives))
        wiring.connect(m, lmux.o, lreg.i)
        wiring.connect(m, lreg.o, nic.local_in)
        # and one out of it (issue 14): the writer's WREADY (behind the interconnect's W slot) went
        # through the RX engine and the header deserializer into the NIC's egress handshake, 12
        # levels joined; +1 cycle a received packet, no bubble
        m.submodules.rx_reg = rreg = AxisRegister(cfg.data_width, primitive=bool(cfg.dsp_primitives))
        wiring.connect(m, nic.local_out, rreg.i)
        wiring.connect(m, rreg.o, rxe.i)
        for p in range(self.net_ports):
            wiring.connect(m, wiring.flipped(self.rx[p]), nic.rx[p])
            wiring.connect(m, nic.tx[p], wiring.flipped(self.tx[p]))

        # --- DDR: clients -> interconnect -> HP ports -------------------------------------------------
        wiring.connect(m, seq.m_axi, ic.c_fetch)
        wiring.connect(m, ld.m_axi, ic.c_loader)
        wiring.connect(m, wr.m_axi, ic.c_writer)
        wic, W = self.wic, self.first_sync_port
        aw_busy = Const(0)
        for name in self.exec_ports:
            on = wic if wic is not None and name != "m_axi" else ic
            src, dst = getattr(ex, name), getattr(on, f"c_ex_{name}")
            if not src.signature.write or on is not ic:
                wiring.connect(m, src, dst)
                continue
            # a register slice on the write address channel (issue 14: the glue's AWVALID went
            # through the interconnect's round robin back into its AWREADY, 9 levels joined):
            # AWREADY and the interconnect's AW from registers, +1 cycle a write burst's
            # address, a burst a cycle; the other channels straight through
            aw = [f for f in src.signature.members if f.startswith("aw") and f not in ("awvalid", "awready")]
            for f, member in src.signature.members.items():
                if not f.startswith("aw"):
                    a, b = getattr(src, f), getattr(dst, f)
                    m.d.comb += (b.eq(a) if member.flow == Out else a.eq(b))
            aw_busy = aw_busy | skid_register(m, src.awvalid, src.awready, Cat(*(getattr(src, f) for f in aw)),
                                              dst.awvalid, dst.awready, Cat(*(getattr(dst, f) for f in aw)),
                                              name=f"{name}_aw_", primitive=bool(cfg.dsp_primitives))
        for p in range(cfg.hp_ports):
            src = wic.m_axi[p] if p < W else ic.m_axi[p - W]
            if len(src.arid) == len(self.hp(p).arid):
                wiring.connect(m, src, wiring.flipped(self.hp(p)))
            else:           # the two interconnects' IDs differ in width: the port's is the wider
                for path, member, value in src.signature.flatten(src):
                    port = getattr(self.hp(p), path[-1])
                    m.d.comb += (port.eq(value) if member.flow == Out else value.eq(port))
        # the weight loaders' interconnect (domain axi): the window in (set while the node is idle:
        # quasi-static), its faults as pulses, its idle as a level and its read beats as a Gray
        # count out (hp_rd_bytes: bytes per engine cycle of each of its ports)
        w_oow, w_err, w_idle = Signal(name="w_oow"), Signal(name="w_err"), Signal(name="w_idle", init=1)
        hp_rd = [None] * cfg.hp_ports
        if wic is not None:
            for name in ("window_base", "window_size"):
                m.submodules[f"wic_{name}"] = cdc.FFSynchronizer(getattr(csr, name), getattr(wic, name), o_domain="axi")
            for strobe, out in ((wic.oow, w_oow), (wic.resp_err, w_err)):
                ps = cdc.PulseSynchronizer(i_domain="axi", o_domain="sync")
                m.submodules[f"wic_{out.name}"] = ps
                m.d.comb += [ps.i.eq(strobe), out.eq(ps.o)]
            m.submodules.wic_idle = cdc.FFSynchronizer(wic.idle, w_idle, o_domain="sync", init=1)
            for p in range(W):
                beats = Signal(8, name=f"hp{p}_beats")       # R beats of the port, mod 256, in axi
                m.d.axi += beats.eq(beats + (wic.rd_bytes[p] != 0))
                gray, seen = Signal(8, name=f"hp{p}_gray"), Signal(8, name=f"hp{p}_gray_s")
                m.d.axi += gray.eq(beats ^ (beats >> 1))
                m.submodules[f"hp{p}_count"] = cdc.FFSynchronizer(gray, seen, o_domain="sync")
                # (binary: registered, issue 14: the Gray-to-binary XORs were in front of the
                # difference and the counter's increment register; the counts a cycle later)
                binary = Signal(8, name=f"hp{p}_seen")
                for b in reversed(range(8)):
                    m.d.sync += binary[b].eq(seen[b:].xor())
                last = Signal(8, name=f"hp{p}_last")
                m.d.sync += last.eq(binary)
                hp_rd[p] = Signal(range(256 * cfg.data_bytes), name=f"hp{p}_rd_bytes")
                m.d.comb += hp_rd[p].eq((binary - last)[:8] * cfg.data_bytes)
        # the instruction of a DDR fault: its client's; a weight port's: the execute unit's.  Each
        # client's pc is picked before the strobes choose (issue 14: the strobes come late, behind
        # the clients' R / B handshakes)
        def client_pc(client):
            pc = Signal.like(seq.fault_pc)
            with m.Switch(client):
                with m.Case(FETCH):
                    m.d.comb += pc.eq(seq.fetch_pc)
                with m.Case(LOADER):
                    m.d.comb += pc.eq(seq.tx_pc)
                with m.Case(WRITER):
                    m.d.comb += pc.eq(rxe.cur_pc)
                with m.Default():
                    m.d.comb += pc.eq(seq.ex_pc)
            return pc
        # an error response enters through a register with its instruction (it is behind the
        # clients' R / B handshakes): it faults the program and is counted a cycle later
        resp_err, resp_err_pc = Signal(), Signal.like(seq.fault_pc)
        m.d.sync += [resp_err.eq(ic.resp_err), resp_err_pc.eq(client_pc(ic.resp_err_client))]
        ddr_pc = Mux(ic.oow, client_pc(ic.oow_client), Mux(resp_err, resp_err_pc, seq.ex_pc))
        m.d.comb += [
            seq.ddr_fault.eq(ic.oow | resp_err | w_oow | w_err),
            seq.ddr_fault_cause.eq(Mux(ic.oow | w_oow, SeqFault.OUT_OF_WINDOW, SeqFault.AXI_ERROR)),
            seq.ddr_fault_pc.eq(ddr_pc),
        ]

        # --- errors, idle, activity, interrupts -----------------------------------------------------
        errors = Signal(len(ErrorCause))
        m.d.comb += errors.eq(nic.errors | rxe.errors | ((resp_err | w_err) << ErrorCause.AXI_RESP_ERROR)
                              | (self.eth_errors if self.has_eth else 0))
        # the error counters take the strobes through a register (issue 14: the NIC's strobes come
        # 5 levels deep into this OR, the CSR's OR with its own strobes and its "any error event"
        # behind it): every counter moves a cycle later, IRQ_STATUS.error two cycles after the
        # event, which the PS (an AXI-Lite read is several cycles) cannot tell.  The sequencer
        # registers them itself (its fault on a network error as before)
        errors_q = Signal(len(ErrorCause))
        m.d.sync += errors_q.eq(errors)
        m.d.comb += [csr.errors.eq(errors_q), seq.net_errors.eq(errors)]
        pk_empty = (pk.meta_level == 0) & (pk.payload_level == 0)
        # the engines' idle in groups of about equal inputs (~15-20 register bits each), each registered
        # on its own (here and in the sequencer) and ANDed after (issue 14: the one AND of ~50 bits in
        # front of a register was mapped as a chain of LUTs, 9 levels): the same value, the same cycle
        engines_idle = Signal(ENGINE_IDLE_PARTS)
        m.d.comb += engines_idle.eq(Cat(~txe.busy & ~cser.o.tvalid & ~lreg.busy & ~rreg.busy,
                                        ~rxe.busy & ~rxe.has_posted, pk_empty))
        # the datapath besides the engines (the sequencer registers both halves and ANDs them)
        others_idle = (~ld.busy & ~wr.busy & ic.idle & w_idle & ~aw_busy & ~csr.meta.valid & ~csr.desc.valid
                       & ~ps_stores.r_rdy & ~ps_done.r_rdy & ~seq.fetch_busy)
        # the PS's status bits (STATUS.busy, the sequencer's idle) a cycle late: registered
        engines_idle_q, others_idle_q, busy_q = Signal(ENGINE_IDLE_PARTS), Signal(), Signal()
        m.d.sync += [engines_idle_q.eq(engines_idle), others_idle_q.eq(others_idle),
                     busy_q.eq(ld.busy | wr.busy | txe.busy | rxe.busy)]
        m.d.comb += [
            seq.engines_idle.eq(engines_idle), seq.datapath_idle.eq(others_idle),
            sr.idle.eq(engines_idle_q.all() & others_idle_q),
            seq.activity.eq(ic.activity | ~w_idle | (nic.local_in.tvalid & nic.local_in.tready)
                            | (nic.local_out.tvalid & nic.local_out.tready)),
            csr.busy.eq(busy_q),
            csr.rx_packet.eq(rxe.rx_packet),
            csr.irq_events.eq((seq.irq_done << Irq.SEQ_DONE) | (seq.irq_fault << Irq.SEQ_FAULT)),
        ]

        # --- performance counters ---------------------------------------------------------------------
        inc = {c: 0 for c in PerfCounter}
        inc[PerfCounter.CYCLES] = 1
        for q, c in ((Queue.EX, PerfCounter.RETIRED_EX), (Queue.TX, PerfCounter.RETIRED_TX),
                     (Queue.RX, PerfCounter.RETIRED_RX)):
            inc[c] = seq.retired[q]
        for q, c in ((Queue.EX, PerfCounter.STALL_EX_SEM), (Queue.TX, PerfCounter.STALL_TX_SEM),
                     (Queue.RX, PerfCounter.STALL_RX_SEM)):
            inc[c] = seq.stall_sem[q]
        inc[PerfCounter.STALL_FETCH] = seq.stall_fetch
        inc[PerfCounter.STALL_TX_NET] = txe.stall
        inc[PerfCounter.STALL_RX_SLOT] = rxe.slot_wait
        inc[PerfCounter.NET_TX_BYTES] = txe.bytes
        inc[PerfCounter.NET_RX_BYTES] = rxe.bytes
        rd = [hp_rd[p] if p < W else ic.rd_bytes[p - W] for p in range(cfg.hp_ports)]
        wrb = [Const(0) if p < W else ic.wr_bytes[p - W] for p in range(cfg.hp_ports)]
        for p in range(cfg.hp_ports):          # (DDR_RD_BYTES / DDR_WR_BYTES: their sums, perf.SUMS)
            inc[PerfCounter[f"HP{p}_RD_BYTES"]] = rd[p]
            inc[PerfCounter[f"HP{p}_WR_BYTES"]] = wrb[p]
        for name in PERF_BITS:         # the execute unit's strobes (its DDR bytes are counted above)
            inc[PerfCounter[name.upper()]] = getattr(ex.perf, name)
        for c in PerfCounter:
            m.d.comb += perf.inc[c].eq(inc[c])
        return m


class NodePair(wiring.Component):
    """Two nodes of ``config`` with one network port each, wired to each other (the smallest
    cluster)."""

    def __init__(self, config: NodeConfig = NodeConfig.tiny(), exec_unit=None):
        self.config = config.replace(net_ports=1)
        self.nodes = [Node(self.config, exec_unit) for _ in range(2)]
        hp = self.nodes[0].m_axi.signature
        super().__init__({
            "axil": In(AXI4LiteSignature(ADDR_BITS, DATA_BITS)).array(2),
            "m_axi": Out(hp).array(2),
            "irq": Out(1).array(2),
        })

    def elaborate(self, platform):
        m = Module()
        for i, node in enumerate(self.nodes):
            m.submodules[f"node{i}"] = node
            wiring.connect(m, wiring.flipped(self.axil[i]), node.s_axil)
            wiring.connect(m, wiring.flipped(self.m_axi[i]), node.m_axi)
            m.d.comb += self.irq[i].eq(node.irq)
        wiring.connect(m, self.nodes[0].tx[0], self.nodes[1].rx[0])
        wiring.connect(m, self.nodes[1].tx[0], self.nodes[0].rx[0])
        return m


#: The node configurations the registry builds by model name.
PRESETS = {"tiny": NodeConfig.tiny, "qwen2.5-1.5b": NodeConfig.qwen2_5_1_5b}

#: The instances ``mcf synth node --method blocks`` maps one by one (the Qwen node is too large
#: for one Yosys run here): the engine's units, the scratchpad, the rest of the execute unit, the
#: NIC; the rest of the node (registers, sequencer, DMA, packetizer, interconnect) is the top's run.
NODE_PARTS = ("exec.attn.unit", "exec.gemm.matrix.dot", "exec.gemm.matrix", "exec.vec.vector", "exec.spad",
              "exec.kvw.kv", "exec", "nic")


@block("node", "one node: registers, sequencer, execute unit, DMA, packetizer, NIC, DDR firewall (Vivado top)",
       variants=({"model": "tiny"}, {"model": "tiny", "net_ports": 2, "hp_ports": 2, "weight_ports": 2}),
       parts=NODE_PARTS, icarus_default=False, model="qwen2.5-1.5b", net_ports=1, hp_ports=0, weight_ports=0,
       ranges={"model": Choice(tuple(PRESETS)), "net_ports": NODE_RANGES["net_ports"],
               "hp_ports": Range(1, MAX_HP_PORTS, zero=True, doc="HP ports (0: the preset's)"),
               "weight_ports": Range(1, MAX_HP_PORTS, pow2=True, zero=True, doc="weight loaders (0: the preset's)")})
def _node(model, net_ports, hp_ports, weight_ports):
    if model not in PRESETS:
        raise ValueError(f"model={model!r}: one of {', '.join(PRESETS)}")
    ports = {k: v for k, v in (("hp_ports", hp_ports), ("weight_ports", weight_ports)) if v}
    return Node(PRESETS[model](net_ports=net_ports, **ports))
