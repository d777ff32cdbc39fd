"""NIC reduction engine: combines ``fan_in`` contributions element-wise (32-bit words).

Contributions of one reduction share a *key* (route_id, seq, kv_id, length, reduce_op); each
key gets a slot (``slots`` of them) with an accumulator of up to ``max_beats`` beats in one
block RAM.  A contribution is folded into its slot beat by beat as it arrives, at one beat
per cycle (read the accumulator, combine, write back one cycle later).  MAX (signed) and SUM
(two's complement, wrapping) are associative and commutative, so the result does not depend
on arrival order and equals the golden fold in ascending source order.

When the slot has ``fan_in`` contributions (route table), the result leaves on ``o`` as a
packet with the first contribution's header, ``src`` = this node and ``op`` = REDUCE_RESULT.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf import spec
from mcf.spec import packet as wire
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.layouts import MetaLayout
from mcf.hw.layouts import Op as HwOp
from mcf.hw.nic.common import RouteLookupSignature, last_keep, payload_beats, raw
from mcf.hw.packet.header import HeaderSerializer, ParsedHeaderLayout
from mcf.spec import ReduceOp
from mcf.spec.packet import REDUCE_WORD_BITS

WORD = REDUCE_WORD_BITS


def same_key(a, b):
    """Two headers belong to the same reduction."""
    return ((a.route_id == b.route_id) & (a.seq == b.seq) & (a.kv_id == b.kv_id)
            & (a.length == b.length) & (raw(a.reduce_op) == raw(b.reduce_op)))


def combine(op, acc, new, data_width: int):
    """Element-wise reduce of two beats of 32-bit little-endian words."""
    lanes = []
    for i in range(data_width // WORD):
        a = acc[i * WORD:(i + 1) * WORD]
        b = new[i * WORD:(i + 1) * WORD]
        mx = Mux(a.as_signed() >= b.as_signed(), a, b)
        sm = (a + b)[:WORD]
        lanes.append(Mux(op == ReduceOp.MAX, mx, sm))
    return Cat(*lanes)


class ReduceEngine(wiring.Component):
    def __init__(self, data_width: int = 64, slots: int = 4, max_beats: int = 64):
        if data_width % WORD:
            raise ValueError(f"data_width={data_width}: reductions need whole {WORD}-bit words")
        if max_beats < 1 or max_beats & (max_beats - 1):
            raise ValueError(f"max_beats={max_beats}: must be a power of two")
        self.data_width = data_width
        self.slots = slots
        self.max_beats = max_beats
        super().__init__({
            "meta": In(stream.Signature(ParsedHeaderLayout)),
            "payload": In(AXIStreamSignature(data_width)),
            "lookup": Out(RouteLookupSignature()),
            "node_id": In(wire.NODE_BITS),
            "o": Out(AXIStreamSignature(data_width)),
            # Slot state, so that the NIC only sends contributions that have a slot.
            "slot_valid": Out(slots),
            "slot_meta": Out(MetaLayout).array(slots),
            "taken": Out(1),        # one contribution fully consumed (pulse)
        })

    def elaborate(self, platform):
        m = Module()
        w, S = self.data_width, self.slots
        kbits = (self.max_beats - 1).bit_length()
        nb_mask = (1 << w // 8) - 1

        m.submodules.ser = ser = HeaderSerializer(w)
        wiring.connect(m, ser.o, wiring.flipped(self.o))
        m.submodules.acc = acc = Memory(shape=w, depth=S * self.max_beats, init=[])
        wp = acc.write_port()
        rp = acc.read_port()

        s_valid = Signal(S)
        s_meta = [Signal(MetaLayout, name=f"s_meta{i}") for i in range(S)]
        s_count = [Signal(8, name=f"s_count{i}") for i in range(S)]
        s_fanin = [Signal(8, name=f"s_fanin{i}") for i in range(S)]
        m.d.comb += self.slot_valid.eq(s_valid)
        for i in range(S):
            m.d.comb += self.slot_meta[i].eq(s_meta[i])

        cur = Signal(range(S))
        cmeta = Signal(MetaLayout)
        count = Signal(8)
        fanin = Signal(8)
        for i in range(S):
            with m.If(cur == i):
                m.d.comb += [cmeta.eq(s_meta[i]), count.eq(s_count[i]), fanin.eq(s_fanin[i])]
        nbeats = Signal(wire.LENGTH_BITS)
        m.d.comb += nbeats.eq(payload_beats(cmeta.length, w))

        inm = Signal(MetaLayout)
        m.d.comb += [inm.eq(self.meta.payload.meta), self.lookup.addr.eq(inm.route_id)]
        match = Signal(S)
        free = Signal(S)
        m.d.comb += [match.eq(Cat(s_valid[i] & same_key(s_meta[i], inm) for i in range(S))),
                     free.eq(~s_valid)]
        pick = Signal(range(S))
        for i in reversed(range(S)):
            with m.If(Mux(match.any(), match[i], free[i])):
                m.d.comb += pick.eq(i)

        # Accumulate pipeline: a beat read at cycle t is combined and written at t+1.
        k = Signal(range(self.max_beats + 1))
        p_v = Signal()
        p_k = Signal(kbits)
        p_first = Signal()
        p_data = Signal(w)
        with m.If(p_v):
            m.d.comb += [wp.en.eq(1), wp.addr.eq(Cat(p_k, cur)),
                         wp.data.eq(Mux(p_first, p_data,
                                        combine(raw(cmeta.reduce_op), rp.data, p_data, w)))]
        m.d.sync += p_v.eq(0)

        # Emit pipeline (read register = output stage, clocked by ``advance``).
        ek = Signal(range(self.max_beats + 1))
        ev = Signal()
        elast = Signal()
        advance = Signal()
        m.d.comb += advance.eq(~ev | ser.payload.tready)
        m.d.comb += [ser.payload.tvalid.eq(ev), ser.payload.tdata.eq(rp.data),
                     ser.payload.tlast.eq(elast),
                     ser.payload.tkeep.eq(Mux(elast, last_keep(cmeta.length, w), nb_mask))]
        result = Signal(MetaLayout)
        m.d.comb += [result.eq(cmeta), result.src.eq(self.node_id), result.op.eq(HwOp.REDUCE_RESULT),
                     ser.meta.payload.eq(result)]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.meta.valid):
                    m.next = "LOOK"
            with m.State("LOOK"):
                with m.If((match | free).any()):
                    m.d.comb += self.meta.ready.eq(1)
                    m.d.sync += [cur.eq(pick), k.eq(0)]
                    for i in range(S):
                        with m.If((pick == i) & ~match.any()):
                            m.d.sync += [s_valid[i].eq(1), s_meta[i].eq(inm), s_count[i].eq(0),
                                         s_fanin[i].eq(self.lookup.entry.fan_in)]
                    with m.If(self.meta.payload.has_payload):
                        m.next = "ACC"
                    with m.Else():
                        m.next = "FIN"
            with m.State("ACC"):
                m.d.comb += [self.payload.tready.eq(1), rp.en.eq(1), rp.addr.eq(Cat(k[:kbits], cur))]
                with m.If(self.payload.tvalid):
                    keep_bits = Cat(b.replicate(8) for b in self.payload.tkeep)
                    m.d.sync += [p_v.eq(1), p_k.eq(k[:kbits]), p_first.eq(count == 0),
                                 p_data.eq(self.payload.tdata & keep_bits), k.eq(k + 1)]
                    with m.If(self.payload.tlast):
                        m.next = "FIN"
            with m.State("FIN"):
                m.d.comb += self.taken.eq(1)
                for i in range(S):
                    with m.If(cur == i):
                        m.d.sync += s_count[i].eq(s_count[i] + 1)
                with m.If(count + 1 >= fanin):
                    m.next = "HEADER"
                with m.Else():
                    m.next = "IDLE"
            with m.State("HEADER"):
                m.d.comb += ser.meta.valid.eq(1)
                m.d.sync += [ek.eq(0), ev.eq(0)]
                with m.If(ser.meta.ready):
                    with m.If(nbeats == 0):
                        m.next = "RELEASE"
                    with m.Else():
                        m.next = "EMIT"
            with m.State("EMIT"):
                m.d.comb += [rp.en.eq(advance), rp.addr.eq(Cat(ek[:kbits], cur))]
                with m.If(advance):
                    with m.If(ek < nbeats):
                        m.d.sync += [ev.eq(1), elast.eq(ek == nbeats - 1), ek.eq(ek + 1)]
                    with m.Else():
                        m.d.sync += ev.eq(0)
                with m.If(ev & ser.payload.tready & elast):
                    m.d.sync += ev.eq(0)
                    m.next = "RELEASE"
            with m.State("RELEASE"):
                # The serializer holds its own copy of the header: the slot is free.
                for i in range(S):
                    with m.If(cur == i):
                        m.d.sync += s_valid[i].eq(0)
                m.next = "IDLE"
        return m
