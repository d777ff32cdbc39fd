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

Timing (docs/timing.md): the slot key match is registered in IDLE and acted on in LOOK; the
accumulate pipeline registers the accumulator beat before combining (read at t, combine and
write at t + 2); the softmax fold is a ``FOLD_LATENCY``-stage pipeline (words, differences,
maximum, exp2 index, exp2 value and products, rounding, sum) writing one word per cycle, and a
row's exp2 factors reach the products exactly when the row's first product word does.
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
from mcf.hw.lut import carry_chain, equal, greater, lut6_2, lut6_2_init
from mcf.hw.layouts import MetaLayout
from mcf.hw.layouts import Op as HwOp
from mcf.hw.nic.common import RouteLookupSignature, last_keep, payload_beats, raw
from mcf.hw.packet.header import HeaderSerializer, ParsedHeaderLayout
from mcf.spec import ReduceOp
from mcf.spec.packet import REDUCE_WORD_BITS
# The softmax merge's constants and exp2 table: the golden model's (one definition).
from mcf.spec.fixed import EXP_LUT_BITS, P_FRAC, S_FRAC

WORD = REDUCE_WORD_BITS


def same_key(a, b, m=None, primitive: bool = False, name: str = "key"):
    """Two headers belong to the same reduction.  ``primitive`` (round 30, the node's build): the key's
    fields as one compare of LUT6 instances, three bit pairs each (``mcf.hw.lut.equal``; ABC9 mapped the
    NIC's 3 inputs x 4 slots of ~60-bit compares at ~64 LUT each), in module ``m``."""
    def key(h):
        return Cat(h.route_id, h.seq, h.kv_id, h.length, raw(h.reduce_op))
    if primitive:
        return equal(m, key(a), key(b), primitive=True, name=name)
    return ((a.route_id == b.route_id) & (a.seq == b.seq) & (a.kv_id == b.kv_id)
            & (a.length == b.length) & (raw(a.reduce_op) == raw(b.reduce_op)))


def _rshr15(m: Module, x, f):
    """rshr(x * f, 15) for a signed 32-bit word x and an unsigned factor f."""
    out = Signal(signed(WORD + 2))
    m.d.comb += out.eq((x.as_signed() * f.as_unsigned() + (1 << (P_FRAC - 1))) >> P_FRAC)
    return out


def _sat32_sum(m: Module, pa, pb):
    """sat32(pa + pb)."""
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


def _rshr15_sat_sum(m: Module, a, fa, b, fb):
    """sat32(rshr(a * fa, 15) + rshr(b * fb, 15)), a/b signed 32-bit words, f unsigned (the
    engine's pipeline has a register between the two halves)."""
    return _sat32_sum(m, _rshr15(m, a, fa), _rshr15(m, b, fb))


#: The rounding constant of the exp2 index: rshr(nd, S_FRAC - 8) = (nd + EXP2_ROUND) >> (S_FRAC - 8).
EXP2_ROUND = 1 << (S_FRAC - EXP_LUT_BITS - 1)


def _exp2_index(m: Module, nd, rounded: bool = False):
    """First half of exp2(-nd) for nd >= 0 (SCORE units): y = rshr(nd, S_FRAC - 8), its octave
    n (clamped to 4 bits) and fraction f, and whether n > 15 (the result is then 0).
    ``rounded``: ``nd`` already holds nd + EXP2_ROUND."""
    y = Signal(WORD + 2)
    m.d.comb += y.eq((nd if rounded else nd + EXP2_ROUND) >> (S_FRAC - EXP_LUT_BITS))
    n, f, zero = Signal(4), Signal(EXP_LUT_BITS), Signal()
    m.d.comb += [f.eq(y[:EXP_LUT_BITS]), n.eq(y[EXP_LUT_BITS:]), zero.eq(y[EXP_LUT_BITS:] > P_FRAC)]
    return n, f, zero


def _exp2_lookup(m: Module, f):
    """EXP2_LUT[f]: the table in an exp2 ROM (``mcf.hw.arith.exp2_rom``) read asynchronously."""
    rom = exp2_rom()
    m.submodules += rom
    rd = rom.read_port(domain="comb")
    val = Signal(P_FRAC + 1)
    m.d.comb += [rd.addr.eq(f), val.eq(rd.data)]
    return val


def _exp2_shift(m: Module, val, n, zero):
    """rshr(val, n), 0 when ``zero``."""
    out = Signal(P_FRAC + 1)
    with m.If(zero):
        m.d.comb += out.eq(0)
    with m.Elif(n == 0):
        m.d.comb += out.eq(val)
    with m.Else():
        # (val + 2^(n-1)) >> n == ((val >> (n-1)) + 1) >> 1: the shift before the add.
        sh = Signal(4)
        part = Signal(P_FRAC + 1)
        inc = Signal(P_FRAC + 2)
        m.d.comb += [sh.eq(n - 1), part.eq(val >> sh), inc.eq(part + 1), out.eq(inc >> 1)]
    return out


def _exp2_shift_pre(m: Module, val, sh, zero, n0):
    """``_exp2_shift`` with sh = n - 1 and n0 = (n == 0) computed a stage earlier."""
    out = Signal(P_FRAC + 1)
    part = Signal(P_FRAC + 1)
    inc = Signal(P_FRAC + 2)
    m.d.comb += [part.eq(val >> sh), inc.eq(part + 1)]
    with m.If(zero):
        m.d.comb += out.eq(0)
    with m.Elif(n0):
        m.d.comb += out.eq(val)
    with m.Else():
        m.d.comb += out.eq(inc >> 1)
    return out


def _exp2_value(m: Module, n, f, zero):
    """Second half: rshr(EXP2_LUT[f], n), 0 when ``zero``."""
    return _exp2_shift(m, _exp2_lookup(m, f), n, zero)


def _exp2(m: Module, d):
    """exp2(d) for d <= 0 (SCORE units): the golden ``exp2`` (both halves, combinationally)."""
    nd = Signal(WORD + 2)
    m.d.comb += nd.eq(-d)
    return _exp2_value(m, *_exp2_index(m, nd))


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


def _acc_x(new, acc, alt, c0, c1):
    """The accumulator write's first operand for the code ``c1 c0`` (``combine_write``)."""
    return (new, new, acc, alt)[2 * c1 + c0]


#: ``combine_write``'s LUT6_2 a bit: I0 new, I1 acc, I2 the softmax word, I3 / I4 the code (00 new, 01 new + acc,
#: 10 acc, 11 the softmax word); O6 the chain's propagate x ^ y (y = acc for 01, else 0), O5 x (its DI).
ACC_W_INIT = lut6_2_init(lambda n, a, s, c0, c1: _acc_x(n, a, s, c0, c1) ^ (a & (2 * c1 + c0 == 1)),
                         lambda n, a, s, c0, c1: _acc_x(n, a, s, c0, c1))


def combine_write(m, op, first, acc, new, data_width: int, primitive: bool = False, name: str = "acc_w",
                  alt=None, alt_v=None):
    """The accumulator's write word: ``new`` for a reduction's first beat, else ``combine``; ``alt`` (a
    32-bit word, every lane) when ``alt_v`` (the softmax fold's write).  ``primitive`` (round 32, the node's
    build): a lane's 32 bits on a CARRY4 chain, one LUT6_2 a bit (``ACC_W_INIT``: the operand's choice among
    new, acc and ``alt`` and the sum's y) beside the signed compare acc >= new as ``greater`` (half a LUT a
    bit), where ABC9 mapped the compare, the sum and the choices at ~5 LUT a bit (``reduce.acc`` 662 at
    Qwen's 128 bits).  The same word either way."""
    lanes = data_width // WORD
    if not primitive:
        word = Mux(first, new, combine(op, acc, new, data_width))
        return word if alt is None else Mux(alt_v, alt.replicate(lanes), word)
    alt, alt_v = (Const(0, WORD), Const(0, 1)) if alt is None else (alt, alt_v)
    c0, alt_w = Signal(name=f"{name}_c0"), Signal(WORD, name=f"{name}_alt")
    m.d.comb += [c0.eq(alt_v | ~first & (op != ReduceOp.MAX)), alt_w.eq(alt)]
    is_max = Signal(name=f"{name}_is_max")
    m.d.comb += is_max.eq(~first & (op == ReduceOp.MAX))
    out = []
    for i in range(lanes):
        a = acc[i * WORD:(i + 1) * WORD]
        b = new[i * WORD:(i + 1) * WORD]
        b_above = greater(m, b.as_signed(), a.as_signed(), f"{name}_gt{i}", primitive=True)   # not a >= b
        c1 = Signal(name=f"{name}_c1_{i}")
        m.d.comb += c1.eq(alt_v | is_max & ~b_above)
        prop, di = Signal(WORD, name=f"{name}_p{i}"), Signal(WORD, name=f"{name}_x{i}")
        for j in range(WORD):
            lut6_2(m, ACC_W_INIT, [b[j], a[j], alt_w[j], c0, c1], prop[j], di[j], f"{name}_l{i}_{j}")
        total, _ = carry_chain(m, prop, di, f"{name}_s{i}")
        out.append(total)
    return Cat(*out)


class ReduceEngine(wiring.Component):
    def __init__(self, data_width: int = 64, slots: int = 4, max_beats: int = 64,
                 softmax_fan_in: int = 4, state_words: int = 130, primitive: bool = False):
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
        # (round 30) the slot key compares as LUT6 instances; (round 32) the accumulator's write word
        # (``combine_write``) as LUT6_2 + CARRY4
        self.primitive = primitive
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

        # The reduction being worked on: its slot, and its header, count (before this
        # contribution) and fan-in, registered when the contribution is placed.
        cur = Signal(range(max(S, 2)))      # (a 1-bit index even for one slot)
        cmeta = Signal(MetaLayout)
        count = Signal(8)
        fanin = Signal(8)
        nbeats = Signal(wire.LENGTH_BITS)
        m.d.comb += nbeats.eq(payload_beats(cmeta.length, w))
        cop = raw(cmeta.reduce_op)
        is_softmax = Signal()
        if F:
            m.d.comb += is_softmax.eq(cop == ReduceOp.SOFTMAX_MERGE)

        # Slot look-up: the key compare is registered in IDLE (the header is held while
        # meta.valid, and the slots change only in LOOK, FIN and RELEASE), used in LOOK.
        inm = Signal(MetaLayout)
        m.d.comb += [inm.eq(self.meta.payload.meta), self.lookup.addr.eq(inm.route_id)]
        match = Signal(S)
        free = Signal(S)
        m.d.sync += [match.eq(Cat(s_valid[i] & same_key(s_meta[i], inm, m, self.primitive, f"match{i}_eq")
                                  for i in range(S))),
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
            # (round 29: the write and ``st_ra`` on one address -- the write's outside FOLD, st_ra's in
            # it -- so Yosys makes them one read/write port: one true dual-port copy of the store
            # (8 BRAM36 at Qwen), not one a read port (2 x 15).  st_ra always reads: its word is
            # used only the cycle after a FOLD read; a block RAM port has one enable for both)
            st_wa, st_aa, st_fold = Signal.like(st_wp.addr), Signal.like(st_ra.addr), Signal()
            m.d.comb += [st_wp.addr.eq(Mux(st_fold, st_aa, st_wa)), st_ra.addr.eq(st_wp.addr), st_ra.en.eq(1)]
            s_src = [[Signal(8, name=f"s_src{i}_{a}") for a in range(F)] for i in range(S)]
            csrc = [Signal(8, name=f"csrc{a}") for a in range(F)]     # registered in FIN
            # order[r] = the arrival index with rank r (rank = arrivals with a lower src),
            # registered in RANK.
            order = [Signal(range(F), name=f"order{r}") for r in range(F)]
            arrivals = Signal(8)          # count + 1, registered in FIN
            for a in range(F):
                rank = sum(((csrc[b] < csrc[a]) | ((csrc[b] == csrc[a]) & (b < a))) & (b < arrivals)
                           for b in range(F) if b != a)
                for r in range(F):
                    with m.If((rank == r) & (a < arrivals)):
                        m.d.sync += order[r].eq(a)

        # Accumulate pipeline (MAX / SUM): a beat read at t is registered at t + 1 and
        # combined and written at t + 2.
        k = Signal(range(self.max_beats + 1))
        p_v = Signal()
        p_k = Signal(kbits)
        p_first = Signal()
        p_data = Signal(w)
        q_v = Signal()
        q_k = Signal(kbits)
        q_first = Signal()
        q_data = Signal(w)
        q_acc = Signal(w)
        m.d.sync += [q_v.eq(p_v & ~is_softmax), q_k.eq(p_k), q_first.eq(p_first), q_data.eq(p_data),
                     q_acc.eq(rp.data)]
        with m.If(q_v):
            m.d.comb += [wp.en.eq(-1), wp.addr.eq(Cat(q_k, cur))]
            if not self.primitive:
                m.d.comb += wp.data.eq(combine_write(m, cop, q_first, q_acc, q_data, w))
        sm_word, sm_v = None, None          # the softmax fold's write (``primitive``: one choice with the above)
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

        # Softmax fold (word serial): word j is issued at t (the reads), and passes
        # FOLD_LATENCY stages: 1 the two words, 2 a - b and b - a, 3 m = max and the
        # exponents, 4 the exp2 indices, 5 the exp2 values (row's first word: the factors
        # fa, fb) and the products with the factors, 6 rounding, 7 the sum, written.
        nwords = Signal(wire.LENGTH_BITS)
        m.d.comb += nwords.eq((cmeta.length + 3) >> 2)
        fpass = Signal(range(max(F, 2)))       # fold pass r (1 .. fan_in - 1)
        j = Signal(range(max(S * F * self.max_beats * L + 1, 2)))
        jr = Signal(range(self.state_words))   # word index within the (m, l, o) row
        fa = Signal(P_FRAC + 1)
        fb = Signal(P_FRAC + 1)
        fold_busy = Signal()                   # a word is somewhere in the fold pipeline
        if F:
            stage = [dict(v=Signal(name=f"f{n}_v"), j=Signal.like(j, name=f"f{n}_j"),
                          first=Signal(name=f"f{n}_first")) for n in range(FOLD_LATENCY + 1)]
            m.d.sync += stage[0]["v"].eq(0)
            for n in range(1, FOLD_LATENCY + 1):
                m.d.sync += [stage[n]["v"].eq(stage[n - 1]["v"]), stage[n]["j"].eq(stage[n - 1]["j"]),
                             stage[n]["first"].eq(stage[n - 1]["first"])]
            m.d.comb += fold_busy.eq(Cat(st["v"] for st in stage[:FOLD_LATENCY]).any())
            f_a = Signal(range(max(F, 2)))     # pass of the word in stage 0: 1 reads region order[0]
            lane0 = stage[0]["j"][:lbits] if lbits else Const(0, 1)
            a_beat = Mux(f_a == 1, st_ra.data, rp.data)
            a1, b1 = Signal(signed(WORD)), Signal(signed(WORD))
            m.d.sync += [a1.eq(a_beat.word_select(lane0, WORD) if lbits else a_beat),
                         b1.eq(st_rb.data.word_select(lane0, WORD) if lbits else st_rb.data)]
            a2, b2 = Signal(signed(WORD)), Signal(signed(WORD))
            ab2, ba2 = Signal(signed(WORD + 1)), Signal(signed(WORD + 1))
            m.d.sync += [a2.eq(a1), b2.eq(b1), ab2.eq(a1 - b1), ba2.eq(b1 - a1)]
            a3, b3, mx3 = Signal(signed(WORD)), Signal(signed(WORD)), Signal(WORD)
            # -(a - m), -(b - m) >= 0, plus the exp2 index's rounding constant
            nda3, ndb3 = Signal(WORD + 2), Signal(WORD + 2)
            a_ge = ab2 >= 0
            m.d.sync += [a3.eq(a2), b3.eq(b2), mx3.eq(Mux(a_ge, a2, b2)),
                         nda3.eq(Mux(a_ge, 0, ba2[:WORD + 1]) + EXP2_ROUND),
                         ndb3.eq(Mux(a_ge, ab2[:WORD + 1], 0) + EXP2_ROUND)]
            a4, b4, mx4 = Signal(signed(WORD)), Signal(signed(WORD)), Signal(WORD)
            # exp2's shift n - 1, the table value, whether the result is 0, whether n == 0
            xa4, xb4 = [Signal(4 + P_FRAC + 1 + 2, name=f"x{c}4") for c in "ab"]

            def index_and_table(nd):
                n, f, zero = _exp2_index(m, nd, rounded=True)
                return Cat((n - 1)[:4], _exp2_lookup(m, f), zero, n == 0)
            m.d.sync += [a4.eq(a3), b4.eq(b3), mx4.eq(mx3),
                         xa4.eq(index_and_table(nda3)), xb4.eq(index_and_table(ndb3))]
            # Stage 5: the row's first word sets the factors; every word takes the products
            # with the factors of its row (set by the row's first word one cycle earlier).
            def shifted(x):
                return _exp2_shift_pre(m, x[4:4 + P_FRAC + 1], x[:4], x[4 + P_FRAC + 1], x[4 + P_FRAC + 2])
            with m.If(stage[4]["v"] & stage[4]["first"]):
                m.d.sync += [fa.eq(shifted(xa4)), fb.eq(shifted(xb4))]
            # The 32 x 16-bit products as two partial products (a DSP each: low 17 bits
            # unsigned, high 15 bits signed), added with the rounding in stage 6.
            mx5 = Signal(WORD)
            LO = 17
            pal5, pbl5 = Signal(LO + P_FRAC + 1), Signal(LO + P_FRAC + 1)
            pah5, pbh5 = Signal(signed(WORD - LO + P_FRAC + 2)), Signal(signed(WORD - LO + P_FRAC + 2))
            m.d.sync += [mx5.eq(mx4), pal5.eq(a4[:LO] * fa), pah5.eq(a4[LO:].as_signed() * fa),
                         pbl5.eq(b4[:LO] * fb), pbh5.eq(b4[LO:].as_signed() * fb)]
            mx6 = Signal(WORD)
            ra6, rb6 = Signal(signed(WORD + 2)), Signal(signed(WORD + 2))
            half = 1 << (P_FRAC - 1)
            m.d.sync += [mx6.eq(mx5), ra6.eq(((pah5 << LO) + pal5 + half) >> P_FRAC),
                         rb6.eq(((pbh5 << LO) + pbl5 + half) >> P_FRAC)]
            last = stage[FOLD_LATENCY - 1]
            lane = last["j"][:lbits] if lbits else Const(0, 1)
            sm_word, sm_v = Mux(last["first"], mx6, _sat32_sum(m, ra6, rb6)), last["v"]
            with m.If(last["v"]):
                m.d.comb += [wp.addr.eq(Cat(last["j"][lbits:][:kbits], cur)), wp.en.eq(1 << lane if lbits else 1)]
                if not self.primitive:
                    m.d.comb += wp.data.eq(sm_word.replicate(L))
            # Store writes (contribution arrivals).
            m.d.comb += [st_wa.eq(Cat(p_k, count[:fbits], cur)), st_wp.data.eq(p_data)]
            with m.If(p_v & is_softmax):
                m.d.comb += st_wp.en.eq(1)
            first_region = order[0]
            next_region = Signal(range(F))
            for r in range(1, F):
                with m.If(fpass == r):
                    m.d.comb += next_region.eq(order[r])
        if self.primitive:
            # the write word when either writes (its enables above; the softmax fold's has priority)
            m.d.comb += wp.data.eq(combine_write(m, cop, q_first, q_acc, q_data, w, True, alt=sm_word, alt_v=sm_v))

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.meta.valid):
                    m.next = "LOOK"
            with m.State("LOOK"):
                with m.If((match | free).any()):
                    m.d.comb += [self.meta.ready.eq(1), self.placed.eq(1)]
                    found = match.any()
                    m.d.sync += [cur.eq(pick), k.eq(0),
                                 cmeta.eq(Mux(found, _or_mux(match, s_meta), inm)),
                                 count.eq(Mux(found, _or_mux(match, s_count), 0)),
                                 fanin.eq(Mux(found, _or_mux(match, s_fanin), self.lookup.entry.fan_in))]
                    for i in range(S):
                        with m.If((pick == i) & ~found):
                            m.d.sync += [s_valid[i].eq(1), s_meta[i].eq(inm), s_count[i].eq(0),
                                         s_fanin[i].eq(self.lookup.entry.fan_in)]
                        if F:
                            # Remember who sent this arrival (its rank in the fold).
                            arrival = Mux(found, s_count[i][:fbits], 0)
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
                        if F:
                            m.d.sync += [csrc[a].eq(s_src[i][a]) for a in range(F)]
                if F:
                    m.d.sync += arrivals.eq(count + 1)
                m.d.sync += [fpass.eq(1), j.eq(0), jr.eq(0)]
                with m.If(count + 1 >= fanin):
                    if F:
                        with m.If(is_softmax & (nwords != 0)):
                            m.next = "RANK"
                        with m.Else():
                            m.next = "HEADER"
                    else:
                        m.next = "HEADER"
                with m.Else():
                    m.next = "IDLE"
            if F:
                with m.State("RANK"):
                    # ``order`` is registered from the arrivals' srcs (``csrc``) this cycle.
                    m.next = "FOLD"
                with m.State("FOLD"):
                    beat_j = j[lbits:][:kbits]
                    m.d.comb += [st_fold.eq(1), st_aa.eq(Cat(beat_j, first_region[:fbits], cur)),
                                 st_rb.en.eq(1), st_rb.addr.eq(Cat(beat_j, next_region[:fbits], cur)),
                                 rp.en.eq(1), rp.addr.eq(Cat(beat_j, cur))]
                    with m.If(j < nwords):
                        m.d.sync += [stage[0]["v"].eq(1), stage[0]["j"].eq(j), stage[0]["first"].eq(jr == 0),
                                     f_a.eq(fpass), j.eq(j + 1),
                                     jr.eq(Mux(jr == self.state_words - 1, 0, jr + 1))]
                    with m.Elif(~fold_busy):
                        # Pass done (its last word written): next contribution, or emit.
                        m.d.sync += [j.eq(0), jr.eq(0), fpass.eq(fpass + 1)]
                        with m.If(fpass + 1 >= arrivals):
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


#: Stages of the softmax fold, from the reads of a word to the write of its result.
FOLD_LATENCY = 7


def _or_mux(onehot, signals):
    """``signals[i]`` for the one set bit i of ``onehot`` (0 if none): an AND-OR mux."""
    out = 0
    for i, sig in enumerate(signals):
        out = out | Mux(onehot[i], sig.as_value() if hasattr(sig, "as_value") else sig, 0)
    return out
