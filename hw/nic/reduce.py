"""NIC reduction engine: combines ``fan_in`` contributions element-wise (32-bit words).

Contributions of one reduction share a *key* (route_id, seq, kv_id, length, reduce_op); each
key gets a slot (``slots`` of them) with an accumulator of up to ``max_beats`` beats in one
block RAM.  A contribution is folded into its slot beat by beat as it arrives, at one beat
per cycle (read the accumulator, combine, write back one cycle later).  MAX (signed) and SUM
(two's complement, wrapping) are associative and commutative, so the result does not depend
on arrival order and equals the golden fold in ascending source order.

SOFTMAX_MERGE (``softmax_fan_in`` > 0) is not associative (it rounds), so it must fold in
the golden model's order: ((s_0 + s_1) + s_2) + ... in increasing ``src``
(``mcf.sw.golden.fixed.fold_states``).  Its contributions are stored whole (one region per
arrival, up to ``softmax_fan_in`` per slot); when the last one is in, the regions are ranked by
``src`` and folded into the accumulator one 32-bit word per cycle.  The payload is rows of
``state_words`` = head_dim + 2 words ``[m, l, o_0 .. o_{d-1}]`` (golden ``encode_state``);
per row: m = max(m_a, m_b), f_x = exp2(m_x - m) (the golden LUT), l and every o word =
sat32(rshr(x_a f_a, 15) + rshr(x_b f_b, 15)).

When the slot has ``fan_in`` contributions (route table), the result leaves on ``o`` as a
packet with the first contribution's header, ``src`` = this node and ``op`` = REDUCE_RESULT.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf import spec
from mcf.spec import packet as wire
from mcf.hw.arith import exp2_rom
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.layouts import MetaLayout
from mcf.hw.layouts import Op as HwOp
from mcf.hw.nic.common import RouteLookupSignature, last_keep, payload_beats, raw
from mcf.hw.packet.header import HeaderSerializer, ParsedHeaderLayout
from mcf.spec import ReduceOp
from mcf.spec.packet import REDUCE_WORD_BITS
# The softmax merge's constants and exp2 table: the golden model's (one definition).
from mcf.spec.fixed import EXP_LUT_BITS, P_FRAC, S_FRAC

WORD = REDUCE_WORD_BITS


def same_key(a, b):
    """Two headers belong to the same reduction."""
    return ((a.route_id == b.route_id) & (a.seq == b.seq) & (a.kv_id == b.kv_id)
            & (a.length == b.length) & (raw(a.reduce_op) == raw(b.reduce_op)))


def _rshr15_sat_sum(m: Module, a, fa, b, fb):
    """sat32(rshr(a * fa, 15) + rshr(b * fb, 15)), a/b signed 32-bit words, f unsigned."""
    half = 1 << (P_FRAC - 1)
    pa = (a.as_signed() * fa.as_unsigned() + half) >> P_FRAC
    pb = (b.as_signed() * fb.as_unsigned() + half) >> P_FRAC
    total = Signal(signed(WORD + 3))
    m.d.comb += total.eq(pa + pb)
    lo, hi = -(1 << (WORD - 1)), (1 << (WORD - 1)) - 1
    out = Signal(WORD)
    with m.If(total > hi):
        m.d.comb += out.eq(hi)
    with m.Elif(total < lo):
        m.d.comb += out.eq(lo & 0xFFFFFFFF)
    with m.Else():
        m.d.comb += out.eq(total[:WORD])
    return out


def _exp2(m: Module, d):
    """exp2(d) for d <= 0 (SCORE units): the golden ``exp2``, the table in an exp2 ROM
    (``mcf.hw.arith.exp2_rom``) read asynchronously."""
    y = Signal(WORD + 2)
    m.d.comb += y.eq((-d + (1 << (S_FRAC - EXP_LUT_BITS - 1))) >> (S_FRAC - EXP_LUT_BITS))
    n = y[EXP_LUT_BITS:]
    f = y[:EXP_LUT_BITS]
    rom = exp2_rom()
    m.submodules += rom
    rd = rom.read_port(domain="comb")
    val = Signal(P_FRAC + 1)
    m.d.comb += [rd.addr.eq(f), val.eq(rd.data)]
    out = Signal(P_FRAC + 1)
    with m.If(n > P_FRAC):
        m.d.comb += out.eq(0)
    with m.Elif(n == 0):
        m.d.comb += out.eq(val)
    with m.Else():
        sh = Signal(4)
        m.d.comb += [sh.eq(n[:4] - 1),
                     out.eq((val + (Const(1, P_FRAC + 1) << sh)) >> n[:4])]
    return out


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
    def __init__(self, data_width: int = 64, slots: int = 4, max_beats: int = 64,
                 softmax_fan_in: int = 4, state_words: int = 130):
        if data_width % WORD:
            raise ValueError(f"data_width={data_width}: reductions need whole {WORD}-bit words")
        if max_beats < 1 or max_beats & (max_beats - 1):
            raise ValueError(f"max_beats={max_beats}: must be a power of two")
        if softmax_fan_in and (softmax_fan_in < 2 or softmax_fan_in & (softmax_fan_in - 1)):
            raise ValueError(f"softmax_fan_in={softmax_fan_in}: 0 (off) or a power of two >= 2")
        if state_words < 3:
            raise ValueError(f"state_words={state_words}: head_dim + 2 >= 3")
        self.data_width = data_width
        self.slots = slots
        self.max_beats = max_beats
        self.softmax_fan_in = softmax_fan_in
        self.state_words = state_words
        super().__init__({
            "meta": In(stream.Signature(ParsedHeaderLayout)),
            "payload": In(AXIStreamSignature(data_width)),
            "lookup": Out(RouteLookupSignature()),
            "node_id": In(wire.NODE_BITS),
            "o": Out(AXIStreamSignature(data_width)),
            # Slot state, so that the NIC only sends contributions that have a slot.
            "slot_valid": Out(slots),
            "slot_meta": Out(MetaLayout).array(slots),
            "placed": Out(1),       # a contribution got its slot (pulse)
        })

    def elaborate(self, platform):
        m = Module()
        w, S = self.data_width, self.slots
        L = w // WORD
        lbits = (L - 1).bit_length()
        kbits = (self.max_beats - 1).bit_length()
        nb_mask = (1 << w // 8) - 1
        F = self.softmax_fan_in
        fbits = (F - 1).bit_length() if F else 0

        m.submodules.ser = ser = HeaderSerializer(w)
        wiring.connect(m, ser.o, wiring.flipped(self.o))
        # Accumulator: one region per slot; lane-granular writes for the word-serial fold.
        m.submodules.acc = acc = Memory(shape=w, depth=S * self.max_beats, init=[])
        wp = acc.write_port(granularity=WORD)
        rp = acc.read_port()

        s_valid = Signal(S)
        s_meta = [Signal(MetaLayout, name=f"s_meta{i}") for i in range(S)]
        s_count = [Signal(8, name=f"s_count{i}") for i in range(S)]
        s_fanin = [Signal(8, name=f"s_fanin{i}") for i in range(S)]
        m.d.comb += self.slot_valid.eq(s_valid)
        for i in range(S):
            m.d.comb += self.slot_meta[i].eq(s_meta[i])

        cur = Signal(range(max(S, 2)))      # (a 1-bit index even for one slot: no 0-width wire)
        cmeta = Signal(MetaLayout)
        count = Signal(8)
        fanin = Signal(8)
        for i in range(S):
            with m.If(cur == i):
                m.d.comb += [cmeta.eq(s_meta[i]), count.eq(s_count[i]), fanin.eq(s_fanin[i])]
        nbeats = Signal(wire.LENGTH_BITS)
        m.d.comb += nbeats.eq(payload_beats(cmeta.length, w))
        cop = raw(cmeta.reduce_op)
        is_softmax = Signal()
        if F:
            m.d.comb += is_softmax.eq(cop == ReduceOp.SOFTMAX_MERGE)

        inm = Signal(MetaLayout)
        m.d.comb += [inm.eq(self.meta.payload.meta), self.lookup.addr.eq(inm.route_id)]
        match = Signal(S)
        free = Signal(S)
        m.d.comb += [match.eq(Cat(s_valid[i] & same_key(s_meta[i], inm) for i in range(S))),
                     free.eq(~s_valid)]
        pick = Signal(range(max(S, 2)))
        for i in reversed(range(S)):
            with m.If(Mux(match.any(), match[i], free[i])):
                m.d.comb += pick.eq(i)

        # Softmax contributions: stored whole, one region per arrival, with their src.
        if F:
            m.submodules.store = store = Memory(shape=w, depth=S * F * self.max_beats, init=[])
            st_wp = store.write_port()
            st_ra = store.read_port()     # fold pass 1: the lowest-src contribution
            st_rb = store.read_port()     # every pass: the next contribution in src order
            s_src = [[Signal(8, name=f"s_src{i}_{a}") for a in range(F)] for i in range(S)]
            csrc = [Signal(8, name=f"csrc{a}") for a in range(F)]
            for i in range(S):
                with m.If(cur == i):
                    m.d.comb += [csrc[a].eq(s_src[i][a]) for a in range(F)]
            # order[r] = the arrival index with rank r (rank = arrivals with a lower src).
            order = [Signal(range(F), name=f"order{r}") for r in range(F)]
            for a in range(F):
                rank = sum(((csrc[b] < csrc[a]) | ((csrc[b] == csrc[a]) & (b < a))) & (b < count)
                           for b in range(F) if b != a)
                for r in range(F):
                    with m.If((rank == r) & (a < count)):
                        m.d.comb += order[r].eq(a)

        # Accumulate pipeline (MAX / SUM): a beat read at cycle t is combined and written at t+1.
        k = Signal(range(self.max_beats + 1))
        p_v = Signal()
        p_k = Signal(kbits)
        p_first = Signal()
        p_data = Signal(w)
        with m.If(p_v):
            m.d.comb += [wp.en.eq(-1), wp.addr.eq(Cat(p_k, cur)),
                         wp.data.eq(Mux(p_first, p_data, combine(cop, rp.data, p_data, w)))]
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

        # Softmax fold (word serial): issue word j at t, combine and write its lane at t+1.
        nwords = Signal(wire.LENGTH_BITS)
        m.d.comb += nwords.eq((cmeta.length + 3) >> 2)
        fpass = Signal(range(max(F, 2)))       # fold pass r (1 .. fan_in - 1)
        j = Signal(range(max(S * F * self.max_beats * L + 1, 2)))
        jr = Signal(range(self.state_words))   # word index within the (m, l, o) row
        f_v = Signal()
        f_j = Signal.like(j)
        f_jr = Signal.like(jr)
        f_a = Signal(range(max(F, 2)))          # pass 1 reads region order[0], else the accumulator
        fa = Signal(P_FRAC + 1)
        fb = Signal(P_FRAC + 1)
        if F:
            lane = f_j[:lbits] if lbits else Const(0, 1)
            a_beat = Mux(f_a == 1, st_ra.data, rp.data)
            a_word = a_beat.word_select(lane, WORD) if lbits else a_beat
            b_word = st_rb.data.word_select(lane, WORD) if lbits else st_rb.data
            mx = Mux(a_word.as_signed() >= b_word.as_signed(), a_word, b_word)
            new_fa = _exp2(m, a_word.as_signed() - mx.as_signed())
            new_fb = _exp2(m, b_word.as_signed() - mx.as_signed())
            merged = _rshr15_sat_sum(m, a_word, fa, b_word, fb)
            with m.If(f_v):
                m.d.comb += [wp.addr.eq(Cat(f_j[lbits:][:kbits], cur)),
                             wp.data.eq(Mux(f_jr == 0, mx, merged).replicate(L)),
                             wp.en.eq(1 << lane if lbits else 1)]
                with m.If(f_jr == 0):
                    m.d.sync += [fa.eq(new_fa), fb.eq(new_fb)]
            m.d.sync += f_v.eq(0)
            # Store writes (contribution arrivals).
            m.d.comb += [st_wp.addr.eq(Cat(p_k, count[:fbits], cur)), st_wp.data.eq(p_data)]
            with m.If(p_v & is_softmax):
                m.d.comb += [st_wp.en.eq(1), wp.en.eq(0)]
            first_region = order[0]
            next_region = Signal(range(F))
            for r in range(1, F):
                with m.If(fpass == r):
                    m.d.comb += next_region.eq(order[r])

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.meta.valid):
                    m.next = "LOOK"
            with m.State("LOOK"):
                with m.If((match | free).any()):
                    m.d.comb += [self.meta.ready.eq(1), self.placed.eq(1)]
                    m.d.sync += [cur.eq(pick), k.eq(0)]
                    for i in range(S):
                        with m.If((pick == i) & ~match.any()):
                            m.d.sync += [s_valid[i].eq(1), s_meta[i].eq(inm), s_count[i].eq(0),
                                         s_fanin[i].eq(self.lookup.entry.fan_in)]
                        if F:
                            # Remember who sent this arrival (its rank in the fold).
                            arrival = Mux(match.any(), Cat(s_count[i][:fbits]), 0)
                            for a in range(F):
                                with m.If((pick == i) & (arrival == a)):
                                    m.d.sync += s_src[i][a].eq(inm.src)
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
                for i in range(S):
                    with m.If(cur == i):
                        m.d.sync += s_count[i].eq(s_count[i] + 1)
                m.d.sync += [fpass.eq(1), j.eq(0), jr.eq(0)]
                with m.If(count + 1 >= fanin):
                    if F:
                        with m.If(is_softmax & (nwords != 0)):
                            m.next = "FOLD"
                        with m.Else():
                            m.next = "HEADER"
                    else:
                        m.next = "HEADER"
                with m.Else():
                    m.next = "IDLE"
            if F:
                with m.State("FOLD"):
                    beat_j = j[lbits:][:kbits]
                    m.d.comb += [st_ra.en.eq(1), st_ra.addr.eq(Cat(beat_j, first_region[:fbits], cur)),
                                 st_rb.en.eq(1), st_rb.addr.eq(Cat(beat_j, next_region[:fbits], cur)),
                                 rp.en.eq(1), rp.addr.eq(Cat(beat_j, cur))]
                    with m.If(j < nwords):
                        m.d.sync += [f_v.eq(1), f_j.eq(j), f_jr.eq(jr), f_a.eq(fpass), j.eq(j + 1),
                                     jr.eq(Mux(jr == self.state_words - 1, 0, jr + 1))]
                    with m.Elif(~f_v):
                        # Pass done (its last word written): next contribution, or emit.
                        m.d.sync += [j.eq(0), jr.eq(0), fpass.eq(fpass + 1)]
                        with m.If(fpass + 1 >= count):
                            m.next = "HEADER"
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
