"""NIC ingress: parser + metadata decoder + store-and-forward packet buffer for one input.

Per packet: the header deserializer splits the header off, the route table is read at
``route_id``, the decoder checks the header and picks the outputs (a bit mask), and the
payload is written into this input's buffer.  Only a packet that arrived whole and exactly
``Meta.length`` bytes long is committed (its descriptor pushed); any other is drained and
reported once on ``err``.  Store-and-forward is what makes "a short packet never reaches an
output" possible: a cut-through switch would already have sent its head.

The buffer is one block RAM with one read port per output (``rd[k]``): every output that a
packet goes to reads it at its own pace (independent backpressure, no multicast lockstep);
the head descriptor is popped and its space freed when all of them are ``done``.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf import spec
from mcf.spec import packet as wire
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.layouts import MetaLayout
from mcf.hw.nic.common import (BufferReadSignature, RouteLookupSignature, beat_layout,
                               desc_layout, last_keep, payload_beats, raw)
from mcf.hw.packet.header import HeaderDeserializer
from mcf.spec import Collective, ErrorCause, Op, ReduceOp, Stage

N_CAUSES = len(ErrorCause)


class IngressPort(wiring.Component):
    """One NIC input.  Outputs are numbered: network ports ``0..P-1``, local ``P``,
    reduction engine ``P+1``.

    ``role``: ``"net"`` (a network port), ``"local"`` (the packetizer: a node's own ALL_REDUCE
    contribution is also sent on the route's port mask) or ``"result"`` (reduction results:
    never reduced again here; REDUCE results leave per the route, ALL_REDUCE results locally).
    See docs/nic.md."""

    def __init__(self, data_width: int, net_ports: int, depth: int = 256, desc_depth: int = 16,
                 route_entries: int = spec.ROUTE_TABLE_ENTRIES, reduce_beats: int = 64,
                 role: str = "net", softmax_fan_in: int = 0):
        if role not in ("net", "local", "result"):
            raise ValueError(f"role={role!r}: net, local or result")
        if depth < 2 or depth & (depth - 1):
            raise ValueError(f"buffer depth={depth}: must be a power of two >= 2")
        if not 1 <= net_ports <= spec.ROUTE_ENTRY["port_mask"].width:
            raise ValueError(f"net_ports={net_ports}: 1..{spec.ROUTE_ENTRY['port_mask'].width}")
        self.data_width = data_width
        self.net_ports = net_ports
        self.n_out = net_ports + 2
        self.depth = depth
        self.desc_depth = desc_depth
        self.route_entries = route_entries
        self.reduce_beats = reduce_beats
        self.role = role
        self.softmax_fan_in = softmax_fan_in
        self.desc_layout = desc_layout(self.n_out, depth)
        super().__init__({
            "i": In(AXIStreamSignature(data_width)),
            "lookup": Out(RouteLookupSignature()),
            "node_id": In(wire.NODE_BITS),
            "num_nodes": In(wire.NODE_BITS + 1),
            "err": Out(stream.Signature(range(N_CAUSES))),
            "head": Out(self.desc_layout),
            "head_valid": Out(1),
            "head_pop": Out(1),                   # the head leaves (another follows next cycle)
            # Outputs that still have to send the head packet; they pulse done[k] when sent.
            "pending": Out(self.n_out),
            "done": In(self.n_out),
            "rd": In(BufferReadSignature(data_width, depth)).array(self.n_out),
        })

    def elaborate(self, platform):
        m = Module()
        w, depth, P = self.data_width, self.depth, self.net_ports
        abits = (depth - 1).bit_length()

        m.submodules.deser = deser = HeaderDeserializer(w)
        wiring.connect(m, wiring.flipped(self.i), deser.i)
        # A word never written reads 0 for a reader's ``zero`` (round 28: the egress ORs its
        # inputs' words): the upper half of a power-of-two buffer of at most 256 words (a 512 x 36
        # block RAM holds it at no cost; the address's top bit is ``zero``), else one word more.
        if depth & (depth - 1) == 0 and depth <= 256:
            mem_depth, zaddr = 2 * depth, (lambda a, z: Cat(a[:abits], z))
        else:
            mem_depth, zaddr = depth + 1, (lambda a, z: Mux(z, depth, a))
        m.submodules.mem = mem = Memory(shape=beat_layout(w), depth=mem_depth, init=[])
        wp = mem.write_port()
        for k in range(self.n_out):
            rp = mem.read_port()
            m.d.comb += [rp.addr.eq(zaddr(self.rd[k].addr, self.rd[k].zero)), rp.en.eq(self.rd[k].en),
                         self.rd[k].data.eq(rp.data)]
        m.submodules.descs = descs = fifo.SyncFIFOBuffered(
            width=self.desc_layout.size, depth=self.desc_depth)

        # --- decode the parsed header ---------------------------------------------------
        # Three steps per packet (docs/timing.md): IDLE registers the checks of the header
        # alone while the route table is read; LOOK adds the route entry and registers the
        # decision; DECIDE acts on it.  The deserializer holds the header until it is taken.
        hm = deser.meta.payload
        mv = Signal(MetaLayout)
        m.d.comb += mv.eq(hm.meta)
        entry = self.lookup.entry
        m.d.comb += self.lookup.addr.eq(mv.route_id)
        stage, op, coll, rop = raw(mv.stage), raw(mv.op), raw(mv.collective), raw(mv.reduce_op)
        reducing = (coll == Collective.REDUCE) | (coll == Collective.ALL_REDUCE)
        enums_ok = ((stage <= max(Stage)) & (op >= min(Op)) & (op <= max(Op))
                    & (coll <= max(Collective)) & (rop <= max(ReduceOp)))
        # reduce_op must be NONE unless the collective reduces (spec); a NIC built without
        # the softmax merge refuses SOFTMAX_MERGE like an unknown operator.
        rop_defined = (rop == ReduceOp.MAX) | (rop == ReduceOp.SUM)
        if self.softmax_fan_in:
            rop_defined = rop_defined | (rop == ReduceOp.SOFTMAX_MERGE)
        rop_ok = Mux(reducing, rop_defined, rop == ReduceOp.NONE)
        # dst names a node for UNICAST / ALL_TO_ALL / REDUCE; for MULTICAST / ALL_REDUCE it is
        # a group tag (spec), so only the former are checked against NUM_NODES.
        dst_node = (coll == Collective.UNICAST) | (coll == Collective.ALL_TO_ALL) | (coll == Collective.REDUCE)
        dst_ok = ~dst_node | (mv.dst < self.num_nodes)
        nbeats_now = Signal(wire.LENGTH_BITS)
        m.d.comb += nbeats_now.eq(payload_beats(mv.length, w))

        # IDLE: the header's own checks, registered (the header is stable while meta.valid).
        pre = data.StructLayout({"early_cause": range(N_CAUSES), "early_bad": 1, "in_table": 1,
                                 "reducing": 1, "all_reduce": 1, "softmax": 1, "dst_ok": 1,
                                 "fits_buffer": 1, "fits_reduce": 1, "nbeats": wire.LENGTH_BITS})
        p = Signal(pre)
        with m.If(hm.truncated):
            m.d.sync += [p.early_bad.eq(1), p.early_cause.eq(ErrorCause.SHORT_PACKET)]
        with m.Elif(hm.malformed):
            m.d.sync += [p.early_bad.eq(1), p.early_cause.eq(ErrorCause.BAD_HEADER)]
        with m.Elif(~enums_ok | ~rop_ok):
            m.d.sync += [p.early_bad.eq(1), p.early_cause.eq(ErrorCause.UNKNOWN_OP)]
        with m.Else():
            m.d.sync += [p.early_bad.eq(0), p.early_cause.eq(0)]
        m.d.sync += [p.in_table.eq(mv.route_id < self.route_entries), p.reducing.eq(reducing),
                     p.all_reduce.eq(coll == Collective.ALL_REDUCE),
                     p.softmax.eq(rop == ReduceOp.SOFTMAX_MERGE), p.dst_ok.eq(dst_ok),
                     p.fits_buffer.eq(nbeats_now <= depth), p.fits_reduce.eq(nbeats_now <= self.reduce_beats),
                     p.nbeats.eq(nbeats_now)]

        desc = Signal(self.desc_layout)

        # LOOK: the route entry's part.  This NIC is the route's reduction point when
        # fan_in >= 2 (results of a reduction tree come back in as contributions of the next level).
        route_ok = entry.valid & p.in_table
        to_reduce = Signal()
        if self.role != "result":
            m.d.comb += to_reduce.eq(p.reducing & (entry.fan_in >= 2))
        port_mask = entry.port_mask[:P]
        mask = Signal(self.n_out)
        with m.If(to_reduce):
            own = port_mask if self.role == "local" else Const(0, P)
            m.d.comb += mask.eq(Cat(Mux(p.all_reduce, own, 0), Const(0b10, 2)))
        if self.role == "result":
            with m.Elif(p.all_reduce):   # every member reduced it itself: local only
                m.d.comb += mask.eq(Cat(Const(0, P), Const(0b01, 2)))
        with m.Else():
            m.d.comb += mask.eq(Cat(port_mask, entry.local, Const(0, 1)))
        fits = p.fits_buffer & (~to_reduce | p.fits_reduce)

        # The softmax merge stores every contribution: a route with more than it can hold
        # is refused.
        too_many = (to_reduce & p.softmax & (entry.fan_in > self.softmax_fan_in)) if self.softmax_fan_in else 0
        route_bad_q = Signal()        # registered in LOOK with the descriptor (its mask)
        fit_bad_q = Signal()
        m.d.sync += [route_bad_q.eq(~route_ok | too_many), fit_bad_q.eq(~fits)]

        # DECIDE: the decision from registered parts.
        cause_now = Signal(range(N_CAUSES))
        bad_now = Signal()
        with m.If(p.early_bad):
            m.d.comb += [bad_now.eq(1), cause_now.eq(p.early_cause)]
        with m.Elif(route_bad_q | (desc.mask == 0)):
            m.d.comb += [bad_now.eq(1), cause_now.eq(ErrorCause.BAD_ROUTE)]
        with m.Elif(~p.dst_ok):
            m.d.comb += [bad_now.eq(1), cause_now.eq(ErrorCause.BAD_DST)]
        with m.Elif(fit_bad_q):
            # More payload than this NIC can buffer or reduce: refused as overlong.
            m.d.comb += [bad_now.eq(1), cause_now.eq(ErrorCause.LONG_PACKET)]

        # --- latched packet state ------------------------------------------------------
        has_payload = Signal()
        cause = Signal(range(N_CAUSES))
        drain_after = Signal()
        k = Signal(range(depth + 1))
        last_k = Signal(range(depth + 1))     # desc.nbeats - 1
        bad_keep = Signal()
        wr = Signal(abits + 1)        # next free slot (commit point)
        rd_free = Signal(abits + 1)   # oldest slot still in use
        # Free space, registered: one cycle stale, which only errs low (rd_free only grows,
        # and wr last moved at a commit, at least two cycles before the next DECIDE).
        space = Signal(range(depth + 1))
        m.d.sync += space.eq(depth - (wr - rd_free))

        # The descriptor of the packet being decided (LOOK) and of the one being stored.
        desc_now = Signal(self.desc_layout)
        m.d.comb += [desc_now.meta.eq(mv), desc_now.mask.eq(mask), desc_now.nbeats.eq(p.nbeats),
                     desc_now.start.eq(wr[:abits])]
        wdesc = Signal(self.desc_layout)
        m.d.comb += [self.err.payload.eq(cause), wdesc.eq(desc), descs.w_data.eq(wdesc)]
        beat = deser.o
        exp_keep = Signal(w // 8)     # the last beat's tkeep, registered in LOOK
        at_end = Signal()             # k == last_k, registered with k
        push = Signal()               # push ``desc`` (registered: the cycle after the decision)
        m.d.sync += push.eq(0)
        m.d.comb += descs.w_en.eq(push)
        m.d.comb += [wp.addr.eq((wr + k)[:abits]),
                     wp.data.eq(Cat(beat.tdata, beat.tkeep, beat.tlast))]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(deser.meta.valid):
                    m.next = "LOOK"     # the route table answers next cycle
            with m.State("LOOK"):
                m.d.sync += [has_payload.eq(hm.has_payload), k.eq(0), bad_keep.eq(0),
                             desc.eq(desc_now), last_k.eq(p.nbeats - 1), at_end.eq(p.nbeats == 1),
                             exp_keep.eq(last_keep(mv.length, w))]
                m.next = "DECIDE"
            with m.State("DECIDE"):
                # For a good packet wait (holding the header) until the whole payload and a
                # descriptor fit: the buffer never overflows mid-packet.
                with m.If(bad_now):
                    m.d.comb += deser.meta.ready.eq(1)
                    m.d.sync += [cause.eq(cause_now), drain_after.eq(has_payload)]
                    m.next = "ERR"
                with m.Elif((space >= desc.nbeats) & descs.w_rdy):
                    m.d.comb += deser.meta.ready.eq(1)
                    with m.If(desc.nbeats == 0):
                        with m.If(has_payload):
                            m.d.sync += [cause.eq(ErrorCause.LONG_PACKET), drain_after.eq(1)]
                            m.next = "ERR"
                        with m.Else():
                            m.d.sync += push.eq(1)
                            m.next = "IDLE"
                    with m.Elif(~has_payload):
                        m.d.sync += [cause.eq(ErrorCause.SHORT_PACKET), drain_after.eq(0)]
                        m.next = "ERR"
                    with m.Else():
                        m.next = "STORE"
            with m.State("STORE"):
                m.d.comb += beat.tready.eq(1)
                with m.If(beat.tvalid):
                    m.d.comb += wp.en.eq(1)
                    m.d.sync += [k.eq(k + 1), at_end.eq(k + 1 == last_k)]
                    end = at_end
                    with m.If(beat.tlast & ~end):
                        m.d.sync += [cause.eq(ErrorCause.SHORT_PACKET), drain_after.eq(0)]
                        m.next = "ERR"
                    with m.Elif(end & ~beat.tlast):
                        m.d.sync += [cause.eq(ErrorCause.LONG_PACKET), drain_after.eq(1)]
                        m.next = "ERR"
                    with m.Elif(end):
                        with m.If((beat.tkeep & ~exp_keep) != 0):
                            m.d.sync += [cause.eq(ErrorCause.LONG_PACKET), drain_after.eq(0)]
                            m.next = "ERR"
                        with m.Elif((beat.tkeep != exp_keep) | bad_keep):
                            m.d.sync += [cause.eq(ErrorCause.SHORT_PACKET), drain_after.eq(0)]
                            m.next = "ERR"
                        with m.Else():
                            # Commit: the packet is whole and exactly Meta.length long.
                            m.d.sync += [push.eq(1), wr.eq(wr + desc.nbeats)]
                            m.next = "IDLE"
                    with m.Else():
                        with m.If(beat.tkeep != (1 << w // 8) - 1):
                            m.d.sync += bad_keep.eq(1)   # a hole in the payload: short
            with m.State("ERR"):
                # Report once (one cycle or more, while other inputs report the same cause).
                m.d.comb += self.err.valid.eq(1)
                with m.If(self.err.ready):
                    with m.If(drain_after):
                        m.next = "DRAIN"
                    with m.Else():
                        m.next = "IDLE"
            with m.State("DRAIN"):
                m.d.comb += beat.tready.eq(1)
                with m.If(beat.tvalid & beat.tlast):
                    m.next = "IDLE"

        # --- head of the buffer: served by every output in its mask, then freed ----------
        head = Signal(self.desc_layout)
        served = Signal(self.n_out)
        m.d.comb += [head.eq(descs.r_data), self.head.eq(head), self.head_valid.eq(descs.r_rdy),
                     self.head_pop.eq(descs.r_en)]
        with m.If(descs.r_rdy):
            m.d.comb += self.pending.eq(head.mask & ~served)
        # The pop is registered: decided the cycle every output is done (``served`` then
        # holds them all, so nothing is pending), done the next.
        now = served | self.done
        pop = Signal()
        m.d.sync += pop.eq(0)
        with m.If(pop):
            m.d.comb += descs.r_en.eq(1)
            m.d.sync += [served.eq(0), rd_free.eq(rd_free + head.nbeats)]
        with m.Else():
            m.d.sync += served.eq(now)
            with m.If(descs.r_rdy & ((now & head.mask) == head.mask)):
                m.d.sync += pop.eq(1)
        return m

