"""KV block writer: BFP16 K/V rows -> KV4 blocks (golden ``fixed.quantize_kv``), bit for bit.

A block is one (token, KV head) row of ``head_dim`` mantissas sharing one exponent; it arrives
as ``head_dim / lanes`` beats on ``i`` (``last`` on the final beat, ``exp`` on every beat)
and leaves as the same number of beats on ``o``: ``lanes`` INT4 values plus the block scale
(A, E) repeated on every beat.

    amax = max |mant|; t = amax * RCP7; Ep = bitlen(t) - 8; A = t >> Ep
    q = sat4(rshr(mant * KV_RCP_LUT[A - 128], 8 + Ep)); E = Ep - 16 + exp  (all zero: A = E = 0)

Pipelined for the 250 MHz budget (docs/timing.md, at most 8 LUT levels between registers):
two halves with a block buffer each (the two banks of one LUT RAM of ``2 x beats`` words), so
that one block is collected while the one before is scaled and emitted.

* **Collector** (bank ``A``, ``i.ready`` while it is not full): a beat is written into its place in
  ``A`` and its |mant| go through a max pipeline: the magnitudes registered, 16 -> 4 per group (one
  compare level: the 6 pairs compared at once, the first largest picked), the group maxima -> the
  beat's maximum, then the running ``amax`` (four register stages).  The block is complete when its
  last beat has left that pipeline; it is handed over (the banks swap roles: ``A`` becomes ``E``;
  its ``amax`` and exponent are copied) once the emitter is free.
* **Emitter**: the scale in four registered steps, free-running from the handed-over
  ``amax`` (``t = amax * RCP7``; ``Ep = bitlen(t) - 8``; ``A = t >> Ep``, ``E``, the shift;
  the reciprocal table's word read at ``A - 128``), then the beats of ``E``, one per cycle,
  each read ahead into the RAM's read register (the beat the next issue takes) through a
  three-stage quantiser: the product ``mant * rcp``; its arithmetic shift by ``7 + Ep``, of
  which only 5 bits are ever significant (``SHD_BITS``: 5 bits of the product at one of 16
  places); the rounding ``+ 1 >> 1`` into the output register (in [-7, 7]: golden's 4-bit
  saturation never clamps).  The quantiser stages and the output register advance
  together while the output is empty or taken (one enable: ``~o.valid | o.ready``); each beat
  carries its own block's shift, scale and ``last``.  ``E`` takes the next block in the cycle
  its last beat enters the quantiser, so that block's scale is computed while this one drains.

Latency and rate (always-ready streams): the last input beat of a block is accepted at cycle
0, the block is handed over at cycle 4 and its first output beat is valid at cycle 12; a
steady stream gives one block every ``beats + 4`` cycles (collect ``beats`` and four max
stages; the emitter four scale steps and ``beats``), against ``2 * beats + 1`` of the
unpipelined writer: latency grew by 10 cycles, and the rate is higher for ``beats`` >= 4 (the presets: 4 and 8).
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.arith import bitlen
from mcf.hw.compute.common import KVWriterState
from mcf.hw.lut import greater, mux4
from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec import fixed as fx
from mcf.spec.fixed import EXP_BITS, KV_A_BITS, MANT_BITS, W_BITS

#: |mant| of a 16-bit mantissa (|-32768| = 32768 fits 16 unsigned bits).
MAG_BITS = MANT_BITS
#: t = amax * RCP7 < 2^16 * 2^14.
T_BITS = MAG_BITS + fx.RCP7.bit_length()
#: The reciprocal table's words (round(2^24 / A) <= 2^17).
RCP_BITS = 18
#: The product mant * rcp (signed 16 x unsigned 18).
PROD_BITS = MANT_BITS + RCP_BITS + 1
#: Ep = bitlen(amax * RCP7) - 8 of a non-zero block: 6 (amax 1) .. 21 (amax 32768).
EP_MIN = fx.RCP7.bit_length() - KV_A_BITS
EP_MAX = ((1 << (MAG_BITS - 1)) * fx.RCP7).bit_length() - KV_A_BITS
#: mant * rcp >> (7 + Ep) of a mantissa of its own block lies in [-15, 14] (|mant| <= amax and
#: A 2^Ep <= t: at most ~7.05 x 2 in magnitude; every amax checked in tests/hw/compute/
#: test_kv_writer.py against golden): 5 bits, so the quantiser's shift takes 5 bits of the
#: product at one of 16 places, and the 4-bit saturation never clamps.
SHD_BITS = 5


def kv_in_layout(lanes):
    return data.StructLayout({"mant": lanes * MANT_BITS, "exp": signed(EXP_BITS), "last": 1})


def kv_out_layout(lanes):
    return data.StructLayout({"q": lanes * W_BITS, "a": KV_A_BITS, "e": signed(EXP_BITS), "last": 1})


def _max(m, a, b, name):
    out = Signal(len(a), name=name)
    m.d.comb += out.eq(Mux(a > b, a, b))
    return out


def _max_tree(m, values, name):
    """Balanced max of ``values`` (comb)."""
    level = 0
    while len(values) > 1:
        values = [_max(m, values[k], values[k + 1], f"{name}_{level}_{k // 2}") if k + 1 < len(values)
                  else values[k] for k in range(0, len(values), 2)]
        level += 1
    return values[0]


def _max_flat(m, values, name, primitive: bool = False):
    """Max of a few ``values`` (comb) in one compare level: each pair compared once, the first
    of the largest picked (``values[i] >= values[j]`` for j > i and ``>`` for j < i) and the
    picks OR-ed -- no compare behind another's mux.  ``primitive`` (the node's build, round 32):
    each compare ``mcf.hw.lut.greater`` (half a LUT a bit on the carry chain, not one), and four
    values' pick one 4:1 LUT6 a bit (``mux4``) by the winner's index (two LUTs of the six
    compares), not the one-hot AND-OR (two LUTs a bit)."""
    n = len(values)
    if n == 1:
        return values[0]
    ge = {}
    for i in range(n):
        for j in range(i + 1, n):
            ge[i, j] = Signal(name=f"{name}_ge{i}{j}")
            if primitive:       # values[i] >= values[j]: not values[j] > values[i]
                m.d.comb += ge[i, j].eq(~greater(m, values[j], values[i], f"{name}_gt{j}{i}", True))
            else:
                m.d.comb += ge[i, j].eq(values[i] >= values[j])
    out = Signal(len(values[0]), name=name)
    sels = [Cat(*[ge[i, j] for j in range(i + 1, n)], *[~ge[j, i] for j in range(i)]).all() for i in range(n)]
    if primitive and n == 4:
        idx = Signal(2, name=f"{name}_idx")
        m.d.comb += idx.eq(Mux(sels[0], 0, Mux(sels[1], 1, Mux(sels[2], 2, 3))))
        m.d.comb += out.eq(mux4(m, idx, values, True, f"{name}_pick"))
        return out
    acc = Mux(sels[0], values[0], 0)
    for i in range(1, n):
        acc = acc | Mux(sels[i], values[i], 0)
    m.d.comb += out.eq(acc)
    return out


class KVWriter(wiring.Component):
    def __init__(self, head_dim: int = 16, lanes: int = 4, primitive: bool = False):
        if lanes < 1 or head_dim % lanes:
            raise ValueError(f"lanes={lanes} does not divide head_dim={head_dim}")
        self.head_dim, self.lanes, self.primitive = head_dim, lanes, bool(primitive)
        self.beats = head_dim // lanes
        super().__init__({
            "i": In(stream.Signature(kv_in_layout(lanes))),
            "o": Out(stream.Signature(kv_out_layout(lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        L, NB = self.lanes, self.beats
        W = L * MANT_BITS

        # ================================ collector ==========================================
        # The two block buffers are the two banks of one LUT RAM (2 x beats words of lanes
        # mantissas): the collector writes bank ``cb``, the emitter reads bank ``~cb``; the
        # handover flips ``cb`` instead of copying a block between two register files.
        ib = (NB - 1).bit_length()  # the beat's address bits (0 for one beat a block)
        m.submodules.blocks = blocks = memory.Memory(shape=W, depth=2 << ib, init=[])
        wr = blocks.write_port()
        cb = Signal()
        exp_a = Signal(signed(EXP_BITS))
        idx = Signal(range(NB))
        a_full = Signal()           # every beat of the block is in bank cb
        a_done = Signal()           # ... and its amax is final
        handoff = Signal()
        m.d.comb += self.i.ready.eq(~a_full)
        accept = self.i.valid & ~a_full
        end_beat = self.i.payload.last | (idx == NB - 1)
        m.d.comb += [wr.addr.eq(Cat(idx[:ib], cb)), wr.data.eq(self.i.payload.mant), wr.en.eq(accept)]
        with m.If(accept):
            m.d.sync += [exp_a.eq(self.i.payload.exp), idx.eq(idx + 1)]
            with m.If(end_beat):
                m.d.sync += [idx.eq(0), a_full.eq(1)]

        # max pipeline: s1 the magnitude keys registered; s2 groups of 4; s3 the beat; s4 the
        # running maximum.  The key of x (sign s) is 2 (x ^ s) + s, i.e. 2 |x| - s: ordered as |x|
        # (a negative x sits just below the positive one of its magnitude), no negation's adder;
        # |x| = (key >> 1) + key[0] once, at the handover.
        v1, first1, last1 = Signal(), Signal(), Signal()
        mags = [Signal(MAG_BITS, name=f"mag{k}") for k in range(L)]
        m.d.sync += [v1.eq(accept), first1.eq(idx == 0), last1.eq(end_beat)]
        for k in range(L):          # the mantissas registered; their keys formed in the compares' LUTs
            m.d.sync += mags[k].eq(self.i.payload.mant[k * MANT_BITS:(k + 1) * MANT_BITS])

        def key(x):
            sign = x[MANT_BITS - 1]
            return Cat(sign, (x ^ sign.replicate(MANT_BITS))[:MANT_BITS - 1])
        keys = [key(x) for x in mags]
        groups = [keys[k:k + 4] for k in range(0, L, 4)]
        gmax = [Signal(MAG_BITS, name=f"gmax{g}") for g in range(len(groups))]
        v2, first2, last2 = Signal(), Signal(), Signal()
        m.d.sync += [v2.eq(v1), first2.eq(first1), last2.eq(last1)]
        for g, grp in enumerate(groups):
            m.d.sync += gmax[g].eq(_max_flat(m, grp, f"gm{g}", self.primitive))
        bmax = Signal(MAG_BITS)
        v3, first3, last3 = Signal(), Signal(), Signal()
        # (round 32: the node's four groups in one flat level too, ``greater`` and a 4:1 LUT6 a bit)
        bm = (_max_flat(m, gmax, "bm", True) if self.primitive and len(gmax) == 4 else _max_tree(m, gmax, "bm"))
        m.d.sync += [v3.eq(v2), first3.eq(first2), last3.eq(last2), bmax.eq(bm)]
        amax = Signal(MAG_BITS)
        with m.If(v3):
            m.d.sync += amax.eq(Mux(first3 | greater(m, bmax, amax, "amax_gt", self.primitive), bmax, amax))
            with m.If(last3):
                m.d.sync += a_done.eq(1)
        with m.If(handoff):
            m.d.sync += [a_full.eq(0), a_done.eq(0)]

        # ================================ emitter ===========================================
        collect, scale, emit = KVWriterState       # COLLECT: waiting for a collected block
        state = Signal(KVWriterState)
        issue = Signal()
        eidx = Signal(range(NB))
        # E is free in COLLECT, or as its last beat enters the quantiser (which has that
        # block's table word and tags by then: the next scale changes them from h+2 on)
        m.d.comb += handoff.eq(a_done & ((state == collect) | (issue & (eidx == NB - 1))))
        amax_e = Signal(MAG_BITS)
        exp_e = Signal(signed(EXP_BITS))

        # scale, free-running from amax_e (handover at h): t at h+1; Ep at h+2; A, E and the
        # shift at h+3; the reciprocal table's word (read at A - 128) at h+4, used from h+5 on
        t1 = Signal(T_BITS)
        m.d.sync += t1.eq(amax_e * fx.RCP7)
        t2 = Signal(T_BITS)
        ep2 = Signal(5)             # 6 <= Ep <= 21 when amax > 0 (unused when amax = 0)
        m.d.sync += [t2.eq(t1), ep2.eq(bitlen(m, t1, "tlen") - KV_A_BITS)]
        a_c = Signal(KV_A_BITS)
        m.d.comb += a_c.eq(t2 >> ep2)
        a_s, zero_s = Signal(KV_A_BITS), Signal()
        e_s, sh_s = Signal(signed(EXP_BITS)), Signal(range(EP_MAX - EP_MIN + 1))
        m.d.sync += [a_s.eq(a_c), zero_s.eq(amax_e == 0), e_s.eq(ep2 - 16 + exp_e), sh_s.eq(ep2 - EP_MIN)]
        m.submodules.rcp = rcp = memory.Memory(shape=RCP_BITS, depth=128, init=[int(v) for v in fx.KV_RCP_LUT])
        rd = rcp.read_port()
        m.d.comb += [rd.addr.eq(a_s[:KV_A_BITS - 1]), rd.en.eq(1)]     # A - 128: A >= 128 when amax > 0
        step = Signal(range(4))
        with m.If(state == scale):
            m.d.sync += step.eq(step + 1)
            with m.If(step == 3):
                m.d.sync += [step.eq(0), state.eq(emit)]

        # quantiser: q1 product; q2 shifted by 7 + Ep; q3 (+1) >> 1 saturated -> the output register
        adv = Signal()
        out_v = Signal()
        m.d.comb += adv.eq(~out_v | self.o.ready)
        m.d.comb += issue.eq((state == emit) & adv)
        # the emitted block's head beat: the bank's word read ahead into the read port's
        # register (the beat the next issue takes), from bank cb at the handover
        rh = blocks.read_port(transparent_for=())
        m.d.comb += [rh.en.eq(handoff | issue),
                     rh.addr.eq(Mux(handoff, Cat(Const(0, ib), cb), Cat((eidx + 1)[:ib], ~cb)))]
        with m.If(issue):
            m.d.sync += eidx.eq(eidx + 1)
            with m.If(eidx == NB - 1):
                m.d.sync += [eidx.eq(0), state.eq(collect)]
        with m.If(handoff):
            m.d.sync += [cb.eq(~cb), amax_e.eq((amax >> 1) + amax[0]), exp_e.eq(exp_a), state.eq(scale)]

        Beat = data.StructLayout({"v": 1, "sh": len(sh_s), "zero": 1, "a": KV_A_BITS, "e": signed(EXP_BITS), "last": 1})
        tag0 = Signal(Beat)
        m.d.comb += [tag0.v.eq(issue), tag0.sh.eq(sh_s), tag0.zero.eq(zero_s), tag0.a.eq(a_s), tag0.e.eq(e_s),
                     tag0.last.eq(eidx == NB - 1)]
        tag1, tag2 = Signal(Beat), Signal(Beat)
        prods = [Signal(signed(PROD_BITS), name=f"prod{k}") for k in range(L)]
        shd = [Signal(SHD_BITS + 3, name=f"shd{k}") for k in range(L)]
        lo_bit = 7 + EP_MIN                 # prod >> (7 + Ep): bits [7 + Ep, 7 + Ep + SHD_BITS)
        qs = [Signal(signed(W_BITS), name=f"q{k}") for k in range(L)]
        o_a, o_e, o_last = Signal(KV_A_BITS), Signal(signed(EXP_BITS)), Signal()
        with m.If(adv):
            m.d.sync += [tag1.eq(tag0), tag2.eq(tag1), out_v.eq(tag2.v),
                         o_a.eq(Mux(tag2.zero, 0, tag2.a)), o_e.eq(Mux(tag2.zero, 0, tag2.e)), o_last.eq(tag2.last)]
            for k in range(L):
                mk = rh.data[k * MANT_BITS:(k + 1) * MANT_BITS].as_signed()
                window = prods[k][lo_bit:lo_bit + EP_MAX - EP_MIN + SHD_BITS]
                # the shift in two steps: by its multiple of 4 (q2), then by the rest (q3)
                m.d.sync += [prods[k].eq(mk * rd.data), shd[k].eq((window >> Cat(Const(0, 2), tag1.sh[2:]))[:SHD_BITS + 3])]
                w = Signal(signed(SHD_BITS), name=f"w{k}")
                m.d.comb += w.eq(shd[k] >> tag2.sh[:2])
                r = Signal(signed(SHD_BITS + 1), name=f"rnd{k}")
                m.d.comb += r.eq(w + 1)
                m.d.sync += qs[k].eq(Mux(tag2.zero, 0, r >> 1))     # in [-7, 7]: no clamp
        m.d.comb += [
            self.o.valid.eq(out_v),
            self.o.payload.q.eq(Cat(*[q[:W_BITS] for q in qs])),
            self.o.payload.a.eq(o_a),
            self.o.payload.e.eq(o_e),
            self.o.payload.last.eq(o_last),
        ]
        return m


@block("compute_kv_writer", "BFP16 K/V rows -> INT4 KV blocks with per-block scale",
       variants=({"head_dim": 128, "lanes": 16}, {"head_dim": 128, "lanes": 16, "primitive": 1}),
       head_dim=16, lanes=4, primitive=0,
       ranges={"head_dim": Range(1, 1024), "lanes": Range(1, 256), "primitive": Range(0, 1)})
def _kv_writer(head_dim, lanes, primitive):
    return KVWriter(head_dim, lanes, primitive=bool(primitive))
