"""TX engine: SEND and CREDIT instructions -> packets through the packetizer (docs/node.md).

SEND reads ``length`` bytes at ``ddr`` through the DMA loader, one LOAD descriptor per
packet of at most ``max_payload`` bytes (the ping-pong buffers overlap the next read with
the current packet), and pushes each packet's Meta into the packetizer once its LOAD is
complete (so a packet, once started, never waits for DDR): ``src`` = this node, ``kv_id`` =
the tag, ``length`` = the packet's bytes, the other fields from the instruction.  ``length =
0`` sends one header-only packet.  SEND completes when its last payload beat has entered the
packetizer.  CREDIT pushes one header-only Op.CREDIT packet (stage CONTROL, UNICAST,
``kv_id`` = the semaphore, ``seq`` = the count).

When the node stops (``running`` falls) the engine issues no further LOAD and pushes no
further Meta; the payload of LOADs already issued is taken from the loader and dropped, so
the packetizer never holds a payload without its header.  ``busy`` until then.

The loader's output passes through ``payload_in`` -> ``payload_out``; while the engine has
nothing in flight and the node is not running, it passes every packet (the PS's own LOAD
descriptors, the debug path).
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axis import AXIStreamSignature
from mcf.hw.layouts import DmaDescriptorLayout, InstrLayouts, MetaLayout
from mcf.hw.nic.common import raw
from mcf.hw.seq.sequencer import IssueLayout
from mcf.spec import Collective, DmaDir, Op, ReduceOp, Stage
from mcf.spec.isa import DDR_ALIGN, INSTR_BITS, Opcode
from mcf.spec.node import NodeConfig
from mcf.spec.packet import LENGTH_BITS, META, NODE_BITS


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
        m.submodules.lens = lens = fifo.SyncFIFOBuffered(width=LENGTH_BITS, depth=self.depth)
        m.submodules.marks = marks = fifo.SyncFIFOBuffered(width=1, depth=self.depth)

        word = Signal(INSTR_BITS)
        send = InstrLayouts[Opcode.SEND](word)
        credit = InstrLayouts[Opcode.CREDIT](word)
        active = Signal()            # an instruction is being worked on
        is_send = Signal()
        addr = Signal(len(self.load.payload.addr))
        remaining = Signal(LENGTH_BITS)
        header_only_sent = Signal()
        buf = Signal(range(max(cfg.buffers, 2)))
        loaded = Signal(range(self.depth + 1))   # LOADs complete, Meta not yet decided

        m.d.comb += self.instr.ready.eq(~active & self.running)
        with m.If(self.instr.valid & self.instr.ready):
            ins = self.instr.payload.word
            is_s = ins[:6] == int(Opcode.SEND)
            m.d.sync += [active.eq(1), word.eq(ins), is_send.eq(is_s), header_only_sent.eq(0),
                         addr.eq(InstrLayouts[Opcode.SEND](ins).ddr * DDR_ALIGN),
                         remaining.eq(Mux(is_s, InstrLayouts[Opcode.SEND](ins).length, 0))]

        # --- LOAD descriptors: one per packet -------------------------------------------------------
        n = Signal(LENGTH_BITS)
        m.d.comb += n.eq(Mux(remaining > self.max_payload, self.max_payload, remaining))
        d = self.load.payload
        m.d.comb += [d.addr.eq(addr), d.length.eq(n), d.buffer.eq(buf), raw(d.dir).eq(DmaDir.LOAD), d.tag.eq(0),
                     lens.w_data.eq(n)]
        m.d.comb += self.load.valid.eq(active & is_send & (remaining != 0) & self.running & lens.w_rdy)
        with m.If(self.load.valid & self.load.ready):
            m.d.comb += lens.w_en.eq(1)
            m.d.sync += [addr.eq(addr + n), remaining.eq(remaining - n),
                         buf.eq(Mux(buf == cfg.buffers - 1, 0, buf + 1))]

        # --- Meta for a loaded packet (or a header-only one), or a drop mark after a stop ---------
        # Driven by one assignment (partly driven vectors become `always @*` blocks Icarus never runs).
        m.d.comb += self.meta.payload.eq(meta_word(
            stage=Mux(is_send, raw(send.stage), Stage.CONTROL), op=Mux(is_send, raw(send.mop), Op.CREDIT),
            collective=Mux(is_send, raw(send.collective), Collective.UNICAST),
            reduce_op=Mux(is_send, raw(send.reduce_op), ReduceOp.NONE), src=self.node_id,
            dst=Mux(is_send, send.dst, credit.dst), route_id=Mux(is_send, send.route_id, credit.route_id),
            kv_id=Mux(is_send, send.tag, credit.sem), length=Mux(is_send & (send.length != 0), lens.r_data, 0),
            seq=Mux(is_send, send.seq, credit.count)))
        header_only = active & (~is_send | (send.length == 0)) & ~header_only_sent
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
        own = (lens.level != 0) | (marks.level != 0) | active
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
        finished = active & self.running & (remaining == 0) & (loaded == 0) & (lens.level == 0) & \
            (marks.level == 0) & Mux(is_send & (send.length != 0), 1, header_only_sent)
        with m.If(finished):
            m.d.comb += self.done.eq(1)
            m.d.sync += active.eq(0)
        with m.If(~self.running & (lens.level == 0) & (marks.level == 0) & (loaded == 0)):
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
