"""Attention unit: Q.K^T over streamed KV, softmax state, P.V (golden ``fixed.scores``,
``fixed.partial_state``, ``fixed.finalize``, ``fixed.encode_state``), bit for bit, driven the
way the instruction set's ATTN_Q / ATTN_KV / ATTN_EMIT say (``spec/isa.py``).

The unit holds ``rows`` query rows (the GQA group's heads x some tokens: K and V are read once
per group) and, per row, a softmax state (m, l, o[head_dim]):

* **loads** (no command): ``q`` writes ``words`` (W) mantissas of a query row a cycle (slice s =
  mantissas s W .. s W + W - 1; the row's exponent and position come with slice 0:
  ``q_slice_layout``, ``q_writes``; the mantissas live in distributed RAM, the score array reads a
  chunk of every row a cycle); ``clear``
  empties every row's state (m = M_EMPTY, l = o = 0: ATTN_Q QUERY and ROWS do); ``pw`` writes the
  position of a range of rows (ATTN_Q ROWS: a token's heads a cycle, no mantissas); ``st`` writes one
  state word of a row, word 0 = m, 1 = l, 2 + c = o[c] (ATTN_Q MREF writes word 0 of each row,
  ATTN_Q STATE every word); ``ow`` writes ``words`` (W) consecutive o words of a row a cycle
  (ATTN_Q O: slice s = o[s W .. s W + W - 1]).
* a **pass** (``cmd.emit = 0``) over a stream of keys that ends with ``k.last``.  A key is
  *visible* to row r iff its position <= the row's.  ``AttnPass.MAX`` takes ``k`` alone:
  s = sat32(rshr(dot(q, kq) A_k, -(e_q + E_k + S_FRAC))), m[r] = max(m[r], visible s)
  (``first``: m = INT32_MIN before).  ``AttnPass.APPLY`` takes ``k`` and ``v`` together,
  recomputes each score, p = exp2(s - m[r]) (LUT) on visible keys, l += p,
  w = min(rshr(p A_v, 15 - O_FRAC - E_v), W_MAX), o += w vq (``first``: l = o = 0 before).
* a **pass over streamed scores** (``cmd.src = 1``, ATTN_SM: step 2 of docs/attention-array.md):
  the scores come in on ``s``, one key a beat (every row's int32 s, the key's position, its V
  scale (A, E), ``last``) instead of from ``k``; visibility as above.  MAX: m[r] = max(m[r],
  visible s).  APPLY: p, l += p and w as above, but w leaves on ``w`` (one beat a key, word r =
  row r's w, 0 where not visible) instead of going into P.V, and o is untouched (``first``
  resets l only): the array computes P.V (GEMM_PV) and ATTN_Q O loads its o.  The scores enter
  the post as raw = s with shift 0, so s6 = s; one key a cycle (the w queue holds
  ``POST_LATENCY`` + 3 keys, distributed RAM), MAX S + 9 cycles, APPLY S + 17 (``w`` ready).
* **row maxima** (``mx``, no command; ATTN_SM MAX): ``max_words`` (MW) scores of one row a cycle,
  word j the key at position ``pos`` + j, the first ``count`` of them keys: the words' visibility
  (as above), a tree of the visible words' maximum (a level a stage; MW > 2: the visibility and
  the first level's compares at stage 2, its picks with the second level), then m[row] = max(m[row], it)
  (``first``: m = INT32_MIN before); a row's writes may come back to back.  The SPAD's score rows go
  in as they lie (no transpose; the execute unit reads ``spad_banks`` beats of a row at once: MW =
  banks x VL = 32 at Qwen), so a MAX over R rows takes R / MW cycles a key (0.19 at R = 6, MW = 32,
  against one key a cycle through the post); m is final ``max_write_latency`` cycles after the last
  write.  Cost: MW - 1 32-bit comparators and multiplexers, MW position compares, no DSP.
* an **emit** (``cmd.emit = 1``) of rows 0 .. ``cmd.rows`` - 1 on ``o`` (W 32-bit words wide,
  TLAST on the last) in ``EmitMode``: FINAL, head_dim X32 words per row (``finalize``, RCP LUT),
  W words a transfer (all kept); STATE, head_dim + 2 words [m, sat32(l), sat32(o_c) ...]
  (``encode_state``) and MAX, one word m, one word a transfer (word 0, TKEEP 0xF).

**Rows without products** (``prod_rows`` < ``rows``): rows prod_rows .. rows - 1 hold a position, m,
l and o (written by ``ow`` only, a row a cycle: all of them in one set of ``o_lanes`` memories, row x
the row's depth + address, a flag per ``ow`` group) and a post lane that takes streamed scores (raw = s, no
dot A_k product; its p A_v product as the others'), but no query mantissas, no score or P.V
products: they serve ATTN_SM, ATTN_Q O and the emits (the array path's jobs of two tokens x the GQA
group on the KR260 node: ``NodeConfig.sm_rows`` = 12 rows, ``att_rows`` = 6 with products).  A pass
over keys (``cmd.src = 0``) reaches the first prod_rows rows only; state words (``st``, ATTN_Q MREF /
STATE) reach every row (o words past m and l of a row without products go to its memories as ``ow``'s).

l and o stay exact (``max_keys`` sizes them) across passes, so a state summed over several runs
of KV blocks (several APPLY passes without ``first``) is the golden single sum, saturated to
32 bits only when it leaves.  The golden softmax uses the row maximum of *all* visible keys (no
running-max rescale), hence the two passes: the program runs MAX over every run, then APPLY
over every run (or loads a global maximum, MREF, after a ReduceOp.MAX round: the decode
protocol of docs/fixed-point.md section 7.4).  APPLY reads K again beside V: no score buffer,
whatever the number of keys.

Folded to the rate the K/V streams deliver keys (``lanes`` = head_dim / 8 by default, ``chunks``
= head_dim / lanes):

* **scores**: keys are taken in pairs, and each row's ``DotArray(2, lanes)`` (two INT4 x 16-bit
  products per DSP48E2: the pair's two keys times one q mantissa) sums a chunk of ``lanes``
  elements of both keys a cycle, a pair in ``chunks`` cycles (MAX: chunks / 2 cycles a key);
* **post**, one key a cycle through 13 stages: raw = dot A_k, the rounding shift and sat32 (MAX:
  m), the exp2 index of m - s, the table, p (l += p), p A_v, the shift and the W_MAX bound to w;
* **P.V**, one key per ``chunks`` cycles (APPLY's rate): w as two 16-bit digits, each times two
  INT4 V elements packed in one DSP operand, so ``lanes`` DSP48E2 a row give ``lanes`` elements
  a cycle; o[r][c lanes + l] lives in memory (r, l) at address c (synchronous read, read at one
  stage and written back at the next: an element returns only ``chunks`` cycles later), with a
  flag per element so that ``clear`` / APPLY's ``first`` empty it in one cycle; a state word
  (``st``) reaches o through the same pipeline (the word times a unit INT4 on its lane and row);
* **emit**: a pipeline (the o memories read a chunk, then the row and a group of W lanes, W
  x sat32, x the row's reciprocal, the rounding shift: W products and shifters) that stalls on
  the output; FINAL computes every row's reciprocal ahead, one a cycle.  A slice of W (``words``)
  words is one address of W o memories: ``ow`` and FINAL move W words a cycle (``out_words``:
  gcd(VL, default lanes) in the execute unit, 8 at Qwen: one SPAD beat a cycle).  W divides
  ``lanes``, or is a multiple of them: then o lives in ``o_lanes`` = W memories a row, head_dim / W
  deep, and P.V's chunk c fills lanes (c mod W / lanes) x lanes .. + lanes - 1 of address
  c // (W / lanes) -- so a unit folded narrow (``NodeConfig.att_lanes``: 4 on the KR260 node, whose
  attention runs on the MAC array) keeps O and FINAL at a beat a cycle.

``k.ready`` falls while the key slots are full; a pass ends when its last key has left the post
(MAX) or P.V (APPLY).  Cycles, keys always valid and from the command (``sim.compute.cost``):
MAX 18 + chunks ceil(S / 2) (+2 for an even S, +1 for an odd S > 1), APPLY 30 + chunks (S + 1)
(+1 for S > 1), FINAL emit rows x head_dim / W + 16, STATE rows x (head_dim + 2) + 9.
"""
from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Shape, Signal, Value, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from mcf.hw.arith import bitlen, log2_exact, rshr, rshr_pos, sat
from mcf.hw.arith import stage as arith_stage
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.compute.common import AttentionState, MemWriteSignature
from mcf.hw.compute.dot_array import CHAIN, DSP_A_BITS, PACK_SHIFT, DotArray
from mcf.hw.lut import add_load, greater, mux2_pairs, mux4, pick, shr_layers
from mcf.hw.layouts import amaranth_enum
from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec import fixed as fx
from mcf.spec import isa
from mcf.spec.fixed import EXP_BITS, INT32_MIN, KV_A_BITS, MANT_BITS, POS_BITS, W_BITS

#: The instruction set's pass and emit encodings (one definition: spec.isa).
AttnPass = amaranth_enum(isa.AttnPass, 1)
EmitMode = amaranth_enum(isa.EmitMode, 2)


def q_layout(head_dim):
    """A whole query row (a job's form of it; the unit takes it in slices: ``q_slice_layout``)."""
    return data.StructLayout({"mant": head_dim * MANT_BITS, "exp": signed(EXP_BITS), "pos": POS_BITS})


def q_slice_layout(words):
    """One ``q`` write: ``words`` (W) mantissas of a query row, slice s = mantissas s W .. s W + W - 1;
    the row's exponent and position are taken from the write of slice 0."""
    return data.StructLayout({"mant": words * MANT_BITS, "exp": signed(EXP_BITS), "pos": POS_BITS})


def q_addr_bits(rows: int, head_dim: int, words: int) -> tuple[int, int]:
    """The ``q`` port's address = Cat(slice, row): (slice bits, row bits)."""
    return max(ceil_log2(head_dim // words), 1), max(ceil_log2(rows), 1)


def q_writes(rows: int, head_dim: int, words: int, q_rows) -> list:
    """``(addr, data)`` writes of the ``q`` port that load whole query rows ``q_rows`` = [(row,
    packed ``q_layout``)]: head_dim / W slices a row (the ATTN_Q QUERY order)."""
    sb, _ = q_addr_bits(rows, head_dim, words)
    mb = MANT_BITS * words
    out = []
    for row, packed in q_rows:
        packed = int(packed)
        tail = packed >> (head_dim * MANT_BITS)                     # exp, pos
        for s in range(head_dim // words):
            mant = (packed >> (s * mb)) & ((1 << mb) - 1)
            out.append(((row << sb) | s, mant | (tail << mb)))
    return out


def k_layout(head_dim):
    return data.StructLayout({"q": head_dim * W_BITS, "a": KV_A_BITS, "e": signed(EXP_BITS), "pos": POS_BITS,
                              "last": 1})


def v_layout(head_dim):
    return data.StructLayout({"q": head_dim * W_BITS, "a": KV_A_BITS, "e": signed(EXP_BITS)})


def s_layout(rows):
    """One key of a pass over streamed scores (``cmd.src``): its score for every row (word r =
    row r, int32), its position, the scale (A, E) of its V row (APPLY) and ``last`` on the pass's
    final key."""
    return data.StructLayout({"s": rows * 32, "pos": POS_BITS, "va": KV_A_BITS, "ve": signed(EXP_BITS),
                              "last": 1})


def cmd_layout(rows):
    return data.StructLayout({
        "emit": 1,                      # 0: a pass over keys; 1: emit rows
        "phase": AttnPass,              # pass: MAX or APPLY
        "first": 1,                     # pass: reset m (MAX) or l and o (APPLY; src: l only) first
        "src": 1,                       # pass: scores from ``s`` (w out on ``w``), not from ``k``
        "mode": EmitMode,               # emit: FINAL, STATE or MAX
        "rows": range(1, rows + 1),     # emit: rows 0 .. rows - 1
    })


class OWriteSignature(wiring.Signature):
    """``words`` consecutive o elements of one row, o[slice words + k] = word k of ``data``
    (int32, ATTN_Q O; the producer drives all)."""

    def __init__(self, rows: int, head_dim: int, words: int):
        super().__init__({"en": Out(1), "row": Out(max(ceil_log2(rows), 1)),
                          "slice": Out(range(max(head_dim // words, 2))), "data": Out(32 * words)})


def out_words(head_dim: int, vl: int, lanes: int | None = None) -> int:
    """Words a cycle of the unit's o loads (``ow``) and FINAL emit when its host moves ``vl``-word
    SPAD beats: gcd(vl, lanes), lanes the default build's (``default_lanes``) unless given -- a unit
    folded narrower (``NodeConfig.att_lanes``) keeps that rate: its o memories are ``words`` a row
    when W > lanes (``AttentionUnit.o_lanes``)."""
    import math
    return math.gcd(vl, default_lanes(head_dim) if lanes is None else lanes)


class MaxWriteSignature(wiring.Signature):
    """Row maxima (ATTN_SM MAX, no command): ``words`` scores of one row, word j = the score of
    the key at position ``pos`` + j (int32), words j < ``count`` keys (the rest ignored); m[row] =
    max(m[row], its visible keys' words) (``first``: m = INT32_MIN before; the producer drives all)."""

    def __init__(self, rows: int, words: int):
        super().__init__({"en": Out(1), "row": Out(max(ceil_log2(rows), 1)), "first": Out(1),
                          "pos": Out(POS_BITS + 1), "count": Out(range(words + 1)), "data": Out(32 * words)})


#: Cycles from an ``mx`` write to its m (the visibility stage, the max tree's levels, the update).
def max_write_latency(words: int) -> int:
    return 2 + ceil_log2(words)


class PosWriteSignature(wiring.Signature):
    """The position of rows ``lo`` .. ``hi`` - 1 (ATTN_Q ROWS: one token's heads a cycle; their
    mantissas and exponents untouched; the producer drives all)."""

    def __init__(self, rows: int):
        super().__init__({"en": Out(1), "lo": Out(range(rows + 1)), "hi": Out(range(rows + 1)),
                          "pos": Out(POS_BITS)})


class StateWriteSignature(wiring.Signature):
    """One state word of one row: word 0 = m, 1 = l, 2 + c = o[c] (the producer drives all)."""

    def __init__(self, rows: int, head_dim: int):
        super().__init__({"en": Out(1), "row": Out(max(ceil_log2(rows), 1)),
                          "word": Out(range(head_dim + 2)), "data": Out(32)})


def unit_lanes(head_dim: int, att_lanes: int = 0) -> int:
    """The score / P.V lanes of the unit a node builds: ``att_lanes`` (``NodeConfig.att_lanes``), or
    ``default_lanes`` when 0."""
    return att_lanes or default_lanes(head_dim)


def key_cycles(head_dim: int, lanes: int) -> tuple[float, int]:
    """The unit's steady-state cycles per key at ``lanes``: (MAX, APPLY) = (max(c / 2, 1), c), c =
    head_dim / lanes (a key pair's scores in c cycles; a key's P.V in c)."""
    c = head_dim // lanes
    return max(c / 2, 1), max(c, 1)


def default_lanes(head_dim: int) -> int:
    """Score lanes per row: about head_dim / 8 (at least ``CHAIN``), a divisor of head_dim the
    DSP chain takes (a multiple of ``CHAIN``, or fewer lanes than one chain)."""
    want = min(max(CHAIN, head_dim // 8), head_dim)
    for lanes in range(want, 0, -1):
        if head_dim % lanes == 0 and (lanes < CHAIN or lanes % CHAIN == 0):
            return lanes
    return 1


def rshr_staged(m, x, s, max_left: int, name: str, en=None) -> Signal:
    """Golden ``rshr`` (as ``mcf.hw.arith.rshr``) in three register stages: the operand and the
    shift controls, the barrel shifts, then the rounding add and the choice of left or right
    shift; ``en`` gates every stage.  The right shift takes 2x by sc (= x >> (sc - 1) for sc >= 1),
    so (that + 1) >> 1 is rshr(x, sc) for every sc >= 0, no shift (sc = 0) included."""
    xs = x if x.shape().signed else Cat(x, Const(0, 1)).as_signed()
    cap = len(xs) + 1
    neg = Signal(name=f"{name}_neg")
    m.d.comb += neg.eq(s < 0)
    sc = Signal(range(cap + 1), name=f"{name}_sc")
    m.d.comb += sc.eq(Mux(neg, 0, Mux(s > cap, cap, s)))
    left = Signal(range(max_left + 1), name=f"{name}_left")
    m.d.comb += left.eq(Mux(neg, Mux(-s > max_left, max_left, -s), 0))
    c_x = Signal.like(xs, name=f"{name}_cx")
    c_sc, c_left = Signal(range(cap + 1), name=f"{name}_csc"), Signal.like(left, name=f"{name}_cleft")
    c_neg = Signal(name=f"{name}_cn")
    a_shr = Signal(signed(len(xs) + 1), name=f"{name}_shr")
    a_shl = Signal(signed(len(xs) + max_left + 1), name=f"{name}_shl")
    a_neg = Signal(name=f"{name}_n")
    out = Signal(signed(len(xs) + max_left + 1), name=name)
    pre = Signal(signed(len(xs) + 2), name=f"{name}_pre")
    m.d.comb += pre.eq(a_shr + 1)
    stmts = [c_x.eq(xs), c_sc.eq(sc), c_left.eq(left), c_neg.eq(neg),
             a_shr.eq(Cat(Const(0, 1), c_x).as_signed() >> c_sc), a_shl.eq(c_x << c_left), a_neg.eq(c_neg),
             out.eq(Mux(a_neg, a_shl, pre >> 1))]
    _sync(m, stmts, en)
    return out


def _sync(m, stmts, en=None):
    """``stmts`` into the sync domain, under ``en`` when one is given (the staged shifts' enable)."""
    if en is None:
        m.d.sync += stmts
    else:
        with m.If(en):
            m.d.sync += stmts


def rshr_sat_staged(m, x, s, max_left: int, bits: int, name: str, en=None) -> Signal:
    """``rshr_staged`` for a caller that saturates the result to ``bits`` bits (golden
    sat(rshr(x, s), bits)): the same three stages, but the left shift keeps only ``bits`` bits and
    says apart whether x << left fits them (x's magnitude bits -- x xor its sign -- at positions
    bits - 1 - left and up all zero), else gives the sign's bound; so a left shift past ``bits`` of
    a non-zero x saturates whatever ``max_left`` (at most ``bits`` is shifted).  The output's
    saturation to ``bits`` bits (the caller's) is sat(rshr(x, s), bits) for every s >= -max_left."""
    xs = x if x.shape().signed else Cat(x, Const(0, 1)).as_signed()
    n = len(xs)
    s = Value.cast(s)
    # the right shift: at most n + 1 (x >> n + 1 is all sign: as a longer one), or s's largest value
    smax = (1 << (len(s) - 1)) - 1 if s.shape().signed else (1 << len(s)) - 1
    cap = min(n + 1, smax)
    lmax = min(max_left, bits - 1)      # x << (bits - 1) fits iff x is 0 or -1: as x << more
    neg = Signal(name=f"{name}_neg")
    m.d.comb += neg.eq(s < 0)
    sc = Signal(range(cap + 1), name=f"{name}_sc")
    m.d.comb += sc.eq(Mux(neg, 0, Mux(s > cap, cap, s) if cap < smax else s[:len(sc)]))
    left = Signal(range(lmax + 1), name=f"{name}_left")
    m.d.comb += left.eq(Mux(neg, Mux(-s > lmax, lmax, -s), 0))
    c_x = Signal.like(xs, name=f"{name}_cx")
    c_sc, c_left = Signal(range(cap + 1), name=f"{name}_csc"), Signal.like(left, name=f"{name}_cleft")
    c_neg = Signal(name=f"{name}_cn")
    a_shr = Signal(signed(n + 1), name=f"{name}_shr")
    a_shl = Signal(signed(bits), name=f"{name}_shl")
    a_neg, a_ovf, a_sgn = Signal(name=f"{name}_n"), Signal(name=f"{name}_ovf"), Signal(name=f"{name}_sg")
    out = Signal(signed(max(n + 1, bits)), name=name)
    pre = Signal(signed(n + 2), name=f"{name}_pre")
    m.d.comb += pre.eq(a_shr + 1)
    # x << left fits ``bits`` signed bits iff the magnitude bits j >= bits - 1 - left are all 0: the
    # bits j < bits - 1 that count (left >= bits - 1 - j, i.e. s <= j + 1 - bits) as a mask at stage 1
    sign = c_x[n - 1]
    mag = [c_x[j] ^ sign for j in range(n - 1)]
    lows = [j for j in range(min(n - 1, bits - 1)) if bits - 1 - j <= lmax]
    c_mask = Signal(max(len(lows), 1), name=f"{name}_cmask")
    ovf = Cat(*([mag[j] & c_mask[i] for i, j in enumerate(lows)] + mag[bits - 1:])).any()
    bound = Mux(a_sgn, Const(-(1 << (bits - 1)), signed(bits)), Const((1 << (bits - 1)) - 1, signed(bits)))
    stmts = [c_x.eq(xs), c_sc.eq(sc), c_left.eq(left), c_neg.eq(neg),
             c_mask.eq(Cat(*(s <= j + 1 - bits for j in lows)) if lows else 0),
             a_shr.eq(Cat(Const(0, 1), c_x).as_signed() >> c_sc), a_shl.eq((c_x << c_left)[:bits]), a_neg.eq(c_neg),
             a_ovf.eq(c_neg & ovf), a_sgn.eq(sign),
             out.eq(Mux(a_neg, Mux(a_ovf, bound, a_shl), pre >> 1))]
    _sync(m, stmts, en)
    return out


def rshr_biased_staged(m, x, k, bias: int, name: str, en=None, step: int = 0, primitive: bool = False,
                       bound: int | None = None) -> Signal:
    """Golden ``rshr(x, k 2^step - bias)`` for an unsigned ``k`` (a shift biased by ``bias``: left ``bias``
    .. right; ``step``: k counts 2^step bits) as one rounding right shift of x << ``bias`` by k 2^step, in
    ``rshr_staged``'s three stages (x and k; the shift of 2 (x << bias); + 1 and >> 1): no left shifter, no
    choice of the two, no saturation check -- the result exact, n + bias + 1 bits (the caller saturates).
    For k 2^step <= bias the + 1 falls below the shifted zeros; past bias it is the rounding.
    ``primitive`` (round 28b): the shift as radix-4 layers of LUT6 instances (``mcf.hw.lut.shr_layers``; ABC9 maps
    a wide 4:1 choice at ~1.5 LUT a bit), else Amaranth's shift (the Python simulator's build).
    ``bound`` (round 29; x unsigned): the result min(rshr(...), bound), unsigned in bound's bits, its bound
    taken at the output register (result > bound iff the shift > 2 bound, a compare of the shift's register
    beside the + 1: the register's constant for the flag is its synchronous set / reset, no choice after).
    The shift is then kept to its low B = bitlen(2 bound) bits, beside a flag of its bits from B up (x >=
    2^(B - bias - 1 + k 2^step): x's bits from there up, one OR a k, chosen by k), so the layers' bits
    that only feed bits from B up are not built."""
    if bound is not None and x.shape().signed:
        raise ValueError("rshr_biased_staged: a bound for an unsigned x only")
    xs = x if x.shape().signed else Cat(x, Const(0, 1)).as_signed()
    k = Value.cast(k)
    n = len(xs)
    cap = -(-(n + bias + 1) // (1 << step))     # shifts from here on give -1 (then (-1 + 1) >> 1 = 0) or 0
    kmax = (1 << len(k)) - 1
    c_x = Signal.like(xs, name=f"{name}_cx")
    c_k = Signal(range(min(kmax, cap) + 1), name=f"{name}_ck")
    B = n + bias + 1 if bound is None else (2 * bound).bit_length()
    shifted = (shr_layers(m, c_x, bias + 1, c_k, step, f"{name}_l", nonneg=not x.shape().signed,
                           out_bits=B).as_signed() if primitive
               else Cat(Const(0, bias + 1), c_x).as_signed() >> (Cat(Const(0, step), c_k) if step else c_k))
    stmts = [c_x.eq(xs), c_k.eq(Mux(k > cap, cap, k) if kmax > cap else k)]
    if bound is None:
        a_shr = Signal(signed(B), name=f"{name}_shr")
        out = Signal(signed(B), name=name)
        pre = Signal(signed(B + 1), name=f"{name}_pre")
        m.d.comb += pre.eq(a_shr + 1)
        stmts += [a_shr.eq(shifted), out.eq(pre >> 1)]
    else:
        a_lo, a_hi = Signal(B, name=f"{name}_shr"), Signal(name=f"{name}_hi")
        out = Signal(bound.bit_length(), name=name)
        pre = Signal(B + 1, name=f"{name}_pre")
        m.d.comb += pre.eq(a_lo + 1)
        xu = c_x[:n - 1]

        def hi_at(kk):              # the shift >= 2^B: x >= 2^e, e = B - bias - 1 + kk 2^step
            e = max(B - bias - 1 + (kk << step), 0)
            return xu[e:].any() if e < len(xu) else Const(0, 1)
        stmts += [a_lo.eq(shifted[:B]), a_hi.eq(Array(hi_at(kk) for kk in range(min(kmax, cap) + 1))[c_k]),
                  out.eq(Mux(a_hi | (a_lo > 2 * bound), bound, (pre >> 1)[:len(out)]))]
    _sync(m, stmts, en)
    return out


#: Keys held for the score array (two pairs: one scored, one filling); V rows held until P.V.
K_SLOTS, V_DEPTH = 4, 32
#: Cycles from a key's entry into the post-processing to its w in the queue for P.V.
POST_LATENCY = 13
#: The exp2 table shifted by the exponent's low EXP2_SH_LOW bits (its RAMB18 is 1 K deep): entry
#: (l, f) = (T[f] >> l) | T[f]'s bit l - 1 (l > 0) << (P_FRAC + 1); rshr(T[f], l) = that's sum.
EXP2_SH_LOW = 2
EXP2_SH_BITS = fx.P_FRAC + 2
EXP2_SHIFTED = [(int(t) >> l) | ((int(t) >> (l - 1) & 1 if l else 0) << (fx.P_FRAC + 1))
                for l in range(1 << EXP2_SH_LOW) for t in fx.EXP2_LUT]
#: Bits of p A_v (p <= 2^P_FRAC, the exp2 table's largest entry; A_v < 2^KV_A_BITS).
U_BITS = fx.P_FRAC + KV_A_BITS
assert max(fx.EXP2_LUT) == 1 << fx.P_FRAC and (1 << fx.P_FRAC) * ((1 << KV_A_BITS) - 1) < 1 << U_BITS
#: The rows' w shift (round 29): rshr(u, 3 - E_v) as a right shift of u << W_BIAS by k = W_K0 - E_v in
#: steps of 2^W_STEP (u << c, c = (E_v - W_K0) mod 2^W_STEP), at most W_KMAX steps: past it the result is 0
#: (the right shift past u 2^c's 26 bits and the rounding bit).
W_BIAS, W_STEP = 31, 2
W_K0 = fx.P_FRAC - fx.O_FRAC + W_BIAS
W_KMAX = -(-(U_BITS + (1 << W_STEP) - 1 + 1 + W_BIAS + 1) // (1 << W_STEP))
#: Bits of FINAL's sat32(o) x rcp (signed): |o| <= 2^31, rcp <= 2^P_FRAC (the table's largest entry, 2^24 / 2^9).
FIN_X_BITS = 32 + fx.P_FRAC
#: FINAL's shift in steps of 2^FIN_STEP: the row's reciprocal is kept shifted left by c (0 .. 2^FIN_STEP - 1)
#: so that the shift of o x (r << c) is a multiple of 2^FIN_STEP (rshr(x, s) = rshr(x 2^c, s + c), exact).
FIN_STEP = 2
assert max(fx.RCP_LUT) == 1 << fx.P_FRAC


class AttentionUnit(wiring.Component):
    """See the module docstring.  ``lanes`` elements per row per cycle in both product arrays
    (``default_lanes``): a key pair's scores take head_dim / lanes cycles, one key's P.V as
    many; ``primitive`` builds the score products as DSP48E2 instances (``DotArray``); ``words``
    o words a cycle on ``ow`` and in a FINAL emit (a power of two dividing ``lanes``)."""

    def __init__(self, head_dim: int = 16, rows: int = 2, max_keys: int = 64, lanes: int | None = None,
                 primitive: bool = False, words: int = 1, max_words: int | None = None,
                 prod_rows: int | None = None):
        log2_exact(max_keys, "max_keys")
        if rows < 1 or head_dim < 1:
            raise ValueError(f"rows={rows}, head_dim={head_dim}: must be >= 1")
        # rows with query mantissas and products (ATTN_KV, state loads); the rest (the array path's
        # rows, ``NodeConfig.sm_rows``) hold a position, m, l and o and pass streamed scores only
        self.prod_rows = rows if prod_rows is None else prod_rows
        if not 1 <= self.prod_rows <= rows:
            raise ValueError(f"prod_rows={prod_rows}: must be 1 .. rows={rows}")
        lanes = default_lanes(head_dim) if lanes is None else lanes
        if lanes < 1 or head_dim % lanes or (lanes >= CHAIN and lanes % CHAIN):
            raise ValueError(f"lanes={lanes}: must divide head_dim={head_dim} and be a multiple of {CHAIN} "
                             f"(or below it)")
        if words < 1 or words & (words - 1) or (lanes % words and (words % lanes or head_dim % words)):
            raise ValueError(f"words={words}: must be a power of two dividing lanes={lanes} or a multiple of "
                             f"lanes dividing head_dim={head_dim}")
        self.head_dim, self.rows, self.max_keys, self.words = head_dim, rows, max_keys, words
        self.max_words = words if max_words is None else max_words
        if self.max_words < 1:
            raise ValueError(f"max_words={max_words}: must be >= 1")
        self.lanes, self.chunks, self.primitive = lanes, head_dim // lanes, bool(primitive)
        # o lives in ``o_lanes`` memories a row (max(lanes, words)), ``head_dim / o_lanes`` deep: W
        # words of a slice are one address; with W > lanes a product chunk fills lanes of them
        self.o_lanes = max(lanes, words)
        kb = ceil_log2(max_keys)
        # Exact widths: l <= 2^15 keys (+ a loaded int32), |w vq| <= 2^34 per key (+ a loaded int32).
        self.l_width = max(32, 16 + kb) + 2
        self.o_width = 38 + kb
        super().__init__({
            "q": In(MemWriteSignature(sum(q_addr_bits(rows, head_dim, words)), q_slice_layout(words).size)),
            "st": In(StateWriteSignature(rows, head_dim)),
            "ow": In(OWriteSignature(rows, head_dim, words)),
            "mx": In(MaxWriteSignature(rows, self.max_words)),
            "pw": In(PosWriteSignature(rows)),
            "clear": In(1),
            "cmd": In(stream.Signature(cmd_layout(rows))),
            "k": In(stream.Signature(k_layout(head_dim))),
            "v": In(stream.Signature(v_layout(head_dim))),
            "s": In(stream.Signature(s_layout(rows))),
            "w": Out(stream.Signature(rows * 32)),
            "o": Out(AXIStreamSignature(32 * words)),
            "busy": Out(1),
            # (``kr_app`` itself, a register: v.ready == v_room & k.valid & v.valid -- for a producer whose
            # readies must not wait for the unit's AND of the two valids, round 24)
            "v_room": Out(1),
        })

    @property
    def cycles_per_key(self) -> tuple[float, int]:
        """Steady-state cycles per key: (MAX, APPLY) (``key_cycles``)."""
        return key_cycles(self.head_dim, self.lanes)

    @property
    def multipliers(self) -> int:
        """DSP48E2 slices of the two product arrays (the score pairs, the P.V digit pairs)."""
        return self.prod_rows * (self.lanes + 2 * (-(-self.lanes // 2)))

    def elaborate(self, platform):
        m = Module()
        D, R, L, C = self.head_dim, self.rows, self.lanes, self.chunks
        PR = self.prod_rows                     # rows 0 .. PR - 1: q mantissas, scores, P.V products

        def row_pick(values, idx, name):
            """values[idx] of the R rows' (round 32: the node's build at R >= 8 ``mcf.hw.lut.pick``, 4:1 LUT6
            under MUXF7 / F8, 0 past the rows; else the plain choice)"""
            if R == 1:
                return values[0]
            if self.primitive and R >= 8:
                v = pick(m, values, idx[:ceil_log2(R)], True, name)
                return v.as_signed() if values[0].shape().signed else v
            return Array(values)[idx]
        Ls = self.o_lanes                       # o memories a row; product chunk c -> address c // K,
        Cs, K = D // Ls, Ls // L                # memories (c mod K) L .. (c mod K) L + L - 1
        dotw = MANT_BITS + W_BITS + ceil_log2(D) + 1
        # a key's dot in fewer bits: |q k| <= 2^15 x 8 = 2^18 an element, |dot| <= D 2^18 < 2^(dot_bits - 1)
        # (27 at head_dim 128: the post's raw = dot A_k is one 27 x 18 DSP48E2, not two)
        dot_bits = MANT_BITS + W_BITS + ceil_log2(D)

        # query rows: the mantissas in one memory (distributed RAM, read asynchronously by the score
        # array: chunk c of every row at once), laid out as o: mantissa a Ls + j of row r at address a,
        # lane r Ls + j; a q write (slice s, W mantissas) is one granule of address s // (Ls / W).  The
        # exponent and position in registers (written with slice 0).
        sb, rb_ = q_addr_bits(R, D, self.words)
        qd = data.View(q_slice_layout(self.words), self.q.data)
        q_slice, q_row = self.q.addr[:sb], self.q.addr[sb:sb + rb_]
        QG = Ls // self.words                   # q / ow granules an address (W = words)
        m.submodules.qmem = qmem = memory.Memory(shape=PR * Ls * MANT_BITS, depth=Cs, init=[])
        qwp = qmem.write_port(granularity=self.words * MANT_BITS)
        qrp = qmem.read_port(domain="comb")
        m.d.comb += [qwp.addr.eq(q_slice // QG if QG > 1 else q_slice), qwp.data.eq(Cat(*([qd.mant] * (PR * QG))))]
        for r in range(PR):
            for g in range(QG):
                m.d.comb += qwp.en[r * QG + g].eq(self.q.en & (q_row == r) & ((q_slice % QG == g) if QG > 1 else 1))
        qexp = [Signal(signed(EXP_BITS), name=f"qexp{r}") for r in range(PR)]
        qpos = [Signal(POS_BITS, name=f"qpos{r}") for r in range(R)]
        for r in range(R):
            with m.If(self.q.en & (q_row == r) & (q_slice == 0)):
                m.d.sync += qpos[r].eq(qd.pos)
                if r < PR:
                    m.d.sync += qexp[r].eq(qd.exp)
            with m.If(self.pw.en & (self.pw.lo <= r) & (r < self.pw.hi)):
                m.d.sync += qpos[r].eq(self.pw.pos)

        IDLE, PASS, DRAIN, OUT = AttentionState
        state = Signal(AttentionState)
        cfg = Signal(cmd_layout(R))
        apply = Signal()
        pv_busy = Signal()                      # the P.V pipeline holds a product (state loads too)
        mx_any = Signal()                       # the row maxima's pipeline holds a beat
        m.d.comb += [apply.eq(cfg.phase == AttnPass.APPLY), self.busy.eq((state != IDLE) | pv_busy | mx_any),
                     self.cmd.ready.eq(state == IDLE)]
        start = Signal()
        m.d.comb += start.eq(self.cmd.valid & self.cmd.ready)
        cp = self.cmd.payload
        reset_m, reset_l, reset_lo = Signal(), Signal(), Signal()
        m.d.comb += [reset_m.eq(start & ~cp.emit & cp.first & (cp.phase == AttnPass.MAX)),
                     reset_l.eq(start & ~cp.emit & cp.first & (cp.phase == AttnPass.APPLY)),
                     reset_lo.eq(reset_l & ~cp.src)]         # a pass over streamed scores keeps o
        with m.If(start):
            m.d.sync += [cfg.eq(cp), state.eq(Mux(cp.emit, OUT, PASS))]

        mrow = [Signal(signed(32), name=f"m{r}", init=INT32_MIN) for r in range(R)]
        m_s6 = {}                       # row -> (the pass's write of s into m, s)
        l_p9 = {}                       # row -> APPLY's p, added into l
        lacc = [Signal(signed(self.l_width), name=f"l{r}") for r in range(R)]
        # o[r][a * Ls + j] of a row with products in memory (r, j) at address a (Ls = o_lanes; = lanes
        # unless W > lanes), a flag per element (0 reads as 0: ``clear`` and APPLY's ``first`` empty
        # every o in one cycle).  The rows without products (written by ``ow`` only, a row a cycle)
        # share Ls memories, o[PR + x][a * Ls + j] in memory j at address x Cs + a, a flag per ``ow``
        # group of W elements.
        NR, G_ = R - PR, Ls // self.words
        omem = [[memory.Memory(shape=signed(self.o_width), depth=Cs, init=[]) for _ in range(Ls)] for _ in range(PR)]
        for r in range(PR):
            for j in range(Ls):
                m.submodules[f"o{r}_{j}"] = omem[r][j]
        o_rd = [[omem[r][j].read_port() for j in range(Ls)] for r in range(PR)]
        o_wr = [[omem[r][j].write_port() for j in range(Ls)] for r in range(PR)]
        oflag = [[Signal(name=f"of{r}_{i}") for i in range(D)] for r in range(PR)]
        xflag = [[Signal(name=f"xf{x}_{i}") for i in range(Cs * G_)] for x in range(NR)]
        oflag += [[xflag[x][(i // Ls) * G_ + (i % Ls) // self.words] for i in range(D)] for x in range(NR)]
        if NR:
            # (block RAM, asked for: NR Cs = 96 words of 53 bits at Qwen, Yosys's own choice was LUT RAM, 3
            # RAM32M16 deep and a 3-way read choice, ~150 LUT a memory; one BRAM36 each, read synchronously as before)
            xmem = [memory.Memory(shape=signed(self.o_width), depth=NR * Cs, init=[], attrs={"ram_style": "block"})
                    for _ in range(Ls)]
            for j in range(Ls):
                m.submodules[f"ox_{j}"] = xmem[j]
            x_rd = [xmem[j].read_port() for j in range(Ls)]
            x_wr = [xmem[j].write_port() for j in range(Ls)]

        # APPLY keys in the post or the w queue: the queue covers the post's latency at one key a
        # cycle (streamed scores) and at one key per C (P.V)
        W_CREDITS = max(POST_LATENCY + 3, -(-(POST_LATENCY + 2) // C) + 2)
        credit = Signal(range(W_CREDITS + 1))

        # --- keys in: K (and V) rows into slots; counters of this pass (mod 2^16) ----------------------
        acc, sidx, kdone = (Signal(16, name=n) for n in ("acc", "sidx", "kdone"))
        with m.If(start & ~cp.emit):
            m.d.sync += [acc.eq(0), sidx.eq(0), kdone.eq(0)]
        # k.ready / v.ready from registers: ``kr_max`` (a MAX pass takes a key) and ``kr_app`` (an
        # APPLY pass takes a key and its V row), each decided a cycle ahead from the next state and
        # the next values of two small counters (below, after the P.V pipeline): the keys in slots
        # not yet scored (``n_sl``, <= K_SLOTS) and an APPLY pass's keys not yet through P.V
        # (``n_v``, <= V_DEPTH); room = n_sl < K_SLOTS and (MAX, or n_v < V_DEPTH).  (The ready was
        # the 16-bit acc - sfree / acc - kdone and their compares: v.ready -> the glue's FIFO 13.2.)
        kr_max, kr_app = Signal(), Signal()
        n_sl, n_v = Signal(range(K_SLOTS + 1)), Signal(range(V_DEPTH + 1))
        fire = Signal()
        smode = cfg.src                   # a pass over streamed scores
        # streamed scores: a key enters the post at once (APPLY: while a w entry is free)
        s_fire = Signal()
        with m.If((state == PASS) & smode):
            m.d.comb += [self.s.ready.eq(~apply | (credit < W_CREDITS)), s_fire.eq(self.s.valid & self.s.ready)]
        with m.If(s_fire):
            m.d.sync += acc.eq(acc + 1)
            with m.If(self.s.payload.last):
                m.d.sync += state.eq(DRAIN)
        kv_app = Signal()
        m.d.comb += [kv_app.eq(kr_app & self.k.valid & self.v.valid), fire.eq((kr_max & self.k.valid) | kv_app),
                     self.k.ready.eq(kr_max | kv_app), self.v.ready.eq(kv_app), self.v_room.eq(kr_app)]
        slot_layout = data.StructLayout({"q": D * W_BITS, "a": KV_A_BITS, "e": signed(EXP_BITS), "pos": POS_BITS,
                                         "va": KV_A_BITS, "ve": signed(EXP_BITS)})
        kslot = [Signal(slot_layout, name=f"kslot{s}") for s in range(K_SLOTS)]
        kp, vp = self.k.payload, self.v.payload
        for s in range(K_SLOTS):
            with m.If(fire & (acc[:2] == s)):
                m.d.sync += kslot[s].eq(Cat(kp.q, kp.a, kp.e, kp.pos, vp.a, vp.e))
        # the V rows' ring: chunk 0 in a memory of its own (``vring0``, read at the next P.V run's slot a
        # cycle ahead), chunks 1 .. C - 1 in ``vring`` (read at the running key's slot)
        chunk_bits = L * W_BITS
        m.submodules.vring0 = vring0 = memory.Memory(shape=chunk_bits, depth=V_DEPTH, init=[])
        vw0 = vring0.write_port()
        m.d.comb += [vw0.en.eq(fire & apply), vw0.addr.eq(acc[:5]), vw0.data.eq(vp.q[:chunk_bits])]
        if C > 1:
            m.submodules.vring = vring = memory.Memory(shape=(C - 1) * chunk_bits, depth=V_DEPTH, init=[])
            vw = vring.write_port()
            m.d.comb += [vw.en.eq(fire & apply), vw.addr.eq(acc[:5]), vw.data.eq(vp.q[chunk_bits:])]
        with m.If(fire):
            m.d.sync += acc.eq(acc + 1)
            with m.If(kp.last):
                m.d.sync += state.eq(DRAIN)
        draining = state == DRAIN

        # --- scores: a key pair per head_dim / lanes cycles, two INT4 keys per DSP (DotArray) ---------
        # avail = acc - sidx (keys in slots, not yet issued: at most K_SLOTS) in a register of its own
        # (the 16-bit subtraction in front of ``issue`` made sidx -> rq_meta 8.19 levels); acc only
        # counts ``fire`` outside a pass over streamed scores, where ``issue`` is 0
        avail = Signal(range(K_SLOTS + 1))
        arrays = [DotArray(2, L, packed=True, primitive=self.primitive) for _ in range(PR)]
        lat = arrays[0].latency
        NQ = max(2, -(-(C + lat + 3) // C))            # result entries: the DotArray's latency covered
        rq_n = Signal(range(NQ + 1))                    # pairs issued, not yet popped by the post
        s_run, s_c, s_base, s_has2 = Signal(), Signal(range(C)), Signal(2), Signal()
        # s_end = s_run & (s_c == C - 1) as a register kept beside s_c (as ``pv_end``: the compare in front of
        # ``issue`` was 8.0 levels at prod_rows = 1: s_c -> avail, sl_lt1)
        s_end = Signal()
        issue = Signal()
        m.d.comb += issue.eq(~smode & ((avail >= 2) | (draining & (avail == 1))) & (rq_n < NQ) & (~s_run | s_end)
                             & ((state == PASS) | draining))
        with m.If(s_run):
            m.d.sync += s_c.eq(s_c + 1)
            with m.If(s_end):
                m.d.sync += [s_run.eq(0), s_c.eq(0)]
        if C > 1:
            m.d.sync += s_end.eq(Mux(issue, 0, s_run & ~s_end & (s_c == C - 2)))
        else:
            m.d.comb += s_end.eq(s_run)
        m.d.sync += avail.eq(avail + fire - Mux(issue, Mux(avail >= 2, 2, 1), 0))
        with m.If(start & ~cp.emit):
            m.d.sync += avail.eq(0)
        with m.If(issue):
            m.d.sync += [s_run.eq(1), s_c.eq(0), s_base.eq(sidx[:2]), s_has2.eq(avail >= 2),
                         sidx.eq(sidx + Mux(avail >= 2, 2, 1))]
        # the pair's chunk s_c: each slot's chunk, then the pair (a pass's pairs start at even slots:
        # sidx goes up by two but for the pass's last odd key)
        # The pair's chunk for the next cycle chosen a cycle ahead into a register (the chunk choice and
        # the packing add in front of the DSPs' A pins were 8.06 levels): on ``issue`` chunk 0 of the
        # pair at sidx, else chunk s_c + 1 of the running pair (whatever it is when the run ends)
        def chunk_of(c_idx, hi_pair):
            if self.primitive and C >= 8:
                # (round 32) each key of the pair: one choice of the 2 C chunks of its two slots by (c_idx,
                # hi_pair), ``pick``'s 4:1 LUT6 under MUXF7 / F8 / F9 (C = 64: 33 LUT a bit, where the C-way
                # choices took ~21 a slot and the pair's 2:1 one more)
                return Cat(*(pick(m, [kslot[t].q[c * chunk_bits:(c + 1) * chunk_bits] for t in (h, h + 2)
                                      for c in range(C)], Cat(c_idx, hi_pair), True, f"kp{h}_pick") for h in range(2)))
            kc = [Array(kslot[t].q[c * chunk_bits:(c + 1) * chunk_bits] for c in range(C))[c_idx] if C > 1
                  else kslot[t].q[:chunk_bits] for t in range(K_SLOTS)]
            return Cat(Mux(hi_pair, kc[2], kc[0]), Mux(hi_pair, kc[3], kc[1]))
        s_cn = Signal(range(C))
        m.d.comb += s_cn.eq(Mux(s_end, 0, s_c + 1))
        kpair = Signal(2 * chunk_bits)
        m.d.sync += kpair.eq(Mux(issue, Cat(*(kslot[t].q[:chunk_bits] for t in range(K_SLOTS))).word_select(
            sidx[1], 2 * chunk_bits), chunk_of(s_cn, s_base[1])))
        k0c, k1c = kpair[:chunk_bits], kpair[chunk_bits:]
        # chunk s_c of every query row: address s_c // K, lanes (s_c mod K) L .. + L - 1 of each row's Ls
        kb_ = ceil_log2(K)                      # K = Ls / L: a power of two (W and L are, when K > 1)
        m.d.comb += qrp.addr.eq(s_c[kb_:] if K > 1 else s_c)
        for r in range(PR):
            m.submodules[f"dots{r}"] = da = arrays[r]
            qword = qrp.data[r * Ls * MANT_BITS:(r + 1) * Ls * MANT_BITS]
            qc = qword.word_select(s_c[:kb_], L * MANT_BITS) if K > 1 else qword
            m.d.comb += [da.en.eq(1), da.w.eq(Cat(k0c, k1c)), da.a.eq(qc)]
        tv, tfirst, tlast = Signal(), Signal(), Signal()
        pv_, pf_, pl_ = s_run, s_c == 0, s_end
        for i in range(lat):
            nv, nf, nl = Signal(name=f"tv{i}"), Signal(name=f"tf{i}"), Signal(name=f"tl{i}")
            m.d.sync += [nv.eq(pv_), nf.eq(pf_), nl.eq(pl_)]
            pv_, pf_, pl_ = nv, nf, nl
        m.d.comb += [tv.eq(pv_), tfirst.eq(pf_), tlast.eq(pl_)]

        # two result entries: the pair's key fields at issue, its dots when the last chunk is summed
        meta_layout = data.StructLayout({"a": KV_A_BITS, "e": signed(EXP_BITS), "pos": POS_BITS,
                                         "va": KV_A_BITS, "ve": signed(EXP_BITS),
                                         "ap": 1})              # the post: an APPLY key
        rq_meta = [[Signal(meta_layout, name=f"rq{e}_meta{h}") for h in range(2)] for e in range(NQ)]
        rq_has2 = [Signal(name=f"rq{e}_has2") for e in range(NQ)]
        rq_full = [Signal(name=f"rq{e}_full") for e in range(NQ)]
        rq_dot = [[[Signal(signed(dotw), name=f"rq{e}_dot{r}_{h}") for h in range(2)] for r in range(PR)]
                  for e in range(NQ)]
        rq_wm, rq_wd, rq_rd = (Signal(range(NQ), name=n) for n in ("rq_wm", "rq_wd", "rq_rd"))

        def wrap(ptr):
            return Mux(ptr == NQ - 1, 0, ptr + 1)
        sl = Array(s.as_value() for s in kslot)
        srcs = [Signal(slot_layout, name=f"issue_key{h}") for h in range(2)]
        for h in range(2):
            m.d.comb += srcs[h].eq(sl[(sidx + h)[:2]])
        for e in range(NQ):
            with m.If(issue & (rq_wm == e)):
                for h in range(2):
                    src = srcs[h]
                    m.d.sync += rq_meta[e][h].eq(Cat(src.a, src.e, src.pos, src.va, src.ve))
                m.d.sync += rq_has2[e].eq(avail >= 2)
        with m.If(issue):
            m.d.sync += rq_wm.eq(wrap(rq_wm))
        sacc = [[Signal(signed(dotw), name=f"sacc{r}_{h}") for h in range(2)] for r in range(PR)]
        for r in range(PR):
            for h in range(2):
                total = Signal(signed(dotw), name=f"stot{r}_{h}")
                m.d.comb += total.eq(Mux(tfirst, 0, sacc[r][h]) + arrays[r].dots[h])
                with m.If(tv):
                    m.d.sync += sacc[r][h].eq(total)
                for e in range(NQ):
                    with m.If(tv & tlast & (rq_wd == e)):
                        m.d.sync += rq_dot[e][r][h].eq(total)
        with m.If(tv & tlast):
            m.d.sync += rq_wd.eq(wrap(rq_wd))

        # --- post: one key per cycle, s (and in APPLY p, w) per row --------------------------------
        ph = Signal()
        head_full = Array(rq_full)[rq_rd]
        head_has2 = Array(rq_has2)[rq_rd]
        go, go_k = Signal(), Signal()
        m.d.comb += [go_k.eq(head_full & (~apply | (credit < W_CREDITS))), go.eq(go_k | s_fire)]
        pop = Signal()
        m.d.comb += pop.eq(go_k & (~head_has2 | ph))
        with m.If(go_k):
            m.d.sync += ph.eq(~pop)
        with m.If(pop):
            m.d.sync += rq_rd.eq(wrap(rq_rd))
        for e in range(NQ):
            with m.If(tv & tlast & (rq_wd == e)):
                m.d.sync += rq_full[e].eq(1)
            with m.If(pop & (rq_rd == e)):
                m.d.sync += rq_full[e].eq(0)
        m.d.sync += rq_n.eq(rq_n + issue - pop)

        # stage 1: the key's fields and dots
        meta_arr = Array(Array(rq_meta[e][h].as_value() for h in range(2)) for e in range(NQ))
        p1v = Signal()
        p1 = Signal(meta_layout)
        p1d = [Signal(signed(max(dotw, 32)), name=f"p1d{r}") for r in range(R)]     # the dot, or s (src)
        sp = self.s.payload
        m.d.sync += [p1v.eq(go), p1.eq(Mux(smode, Cat(Const(0, KV_A_BITS + EXP_BITS), sp.pos, sp.va, sp.ve),
                                           meta_arr[rq_rd][ph])), p1.ap.eq(go & apply)]
        for r in range(R):
            if r < PR:
                m.d.sync += p1d[r].eq(Mux(smode, sp.s[32 * r:32 * (r + 1)].as_signed(),
                                          Array(Array(rq_dot[e][r][h] for h in range(2)) for e in range(NQ))[rq_rd][ph]))
            else:                       # a row without products: streamed scores only
                m.d.sync += p1d[r].eq(sp.s[32 * r:32 * (r + 1)].as_signed())

        def stage(name, value, shape=None):
            return arith_stage(m, value, name, shape)

        def carry(prev_v, prev_meta, n):
            return stage(f"p{n}v", prev_v), stage(f"p{n}m", prev_meta)

        # the post's stages: 2 raw = dot A_k; 3-5 the rounding shift; 6 s = sat32 (MAX: m);
        # 7 the exp2 index of m - s; 8 the table; 9 p (l += p); 10 p A_v; 11-13 the shift to w
        pv_, pm_ = {1: p1v}, {1: p1}
        for i in range(2, POST_LATENCY + 1):
            pv_[i], pm_[i] = carry(pv_[i - 1], pm_[i - 1], i)
        # the exp2 table in block RAM, one for every two rows (a port each; round 28: 12 tables in LUTs were
        # ~1 260 LUT at rows 12; 6 RAMB18 instead).  The read is addressed by stage 7's index itself (the RAM's
        # address register in place of ``eaddr``) and its data registered in the fabric at stage 8 (``e8_#``):
        # the RAM's clock-to-out ends in a register, the stages and every cycle as before.  The RAMB18's
        # 1 K x 18 holds the table shifted by the exponent's two low bits (``exp2_shifted``): p's shift a
        # choice of four, not sixteen
        exp2s = []
        for r2 in range(0, R, 2):
            rom = memory.Memory(shape=EXP2_SH_BITS, depth=len(EXP2_SHIFTED), init=EXP2_SHIFTED,
                                attrs={"ram_style": "block"})
            m.submodules[f"exp2_{r2 // 2}"] = rom
            exp2s += [rom, rom]
        # the w queue: W_CREDITS entries of every row's w (distributed RAM, read asynchronously)
        m.submodules.wq = wq = memory.Memory(shape=R * 32, depth=W_CREDITS, init=[])
        wq_wr, wq_rd = wq.write_port(), wq.read_port(domain="comb")
        w13s = [Signal(32, name=f"w13_{r}") for r in range(R)]
        wq_wp, wq_rp = Signal(range(W_CREDITS)), Signal(range(W_CREDITS))
        wq_n = Signal(range(W_CREDITS + 1))
        push = Signal()
        last = POST_LATENCY
        m.d.comb += push.eq(pv_[last] & pm_[last].ap)
        for r in range(R):
            # streamed scores go through as raw = s, shift 0: s6 = sat32(s) = s
            vis = stage(f"vis2_{r}", p1.pos <= qpos[r])
            if r < PR:
                raw = stage(f"raw{r}", Mux(smode, p1d[r], p1d[r][:dot_bits].as_signed() * p1.a))
                sh = stage(f"ssh{r}", Mux(smode, 0, -(qexp[r] + p1.e + fx.S_FRAC)), signed(10))
                rs = rshr_sat_staged(m, raw, sh, 33, 32, f"rs{r}")          # at stage 5
            else:                       # the streamed score itself, through as many stages
                rs = stage(f"rs4_{r}", stage(f"rs3_{r}", stage(f"rs2_{r}", stage(f"raw{r}", p1d[r][:32].as_signed()))))
            for i in range(3, 7):
                vis = stage(f"vis{i}_{r}", vis)
            s6 = stage(f"s{r}", sat(m, rs, 32))
            neg = Signal(unsigned(34), name=f"negd{r}")     # m - s >= 0 for a visible key
            m.d.comb += neg.eq(mrow[r] - s6)
            # s > m: the sign of m - s (one subtraction for both)
            m_s6[r] = (pv_[6] & ~pm_[6].ap & vis & neg[33], s6)
            y = rshr_pos(m, neg, Const(fx.S_FRAC - fx.EXP_LUT_BITS, 3), 35)
            # p = rshr(T[f], n), n = 4 h + l (n <= P_FRAC; else 0): the RAM at (l, f) gives z = T[f] >> l and
            # T[f]'s bit l - 1 (0 at l = 0), so p = (z >> 4 h) + (h ? z's bit 4 h - 1 : that bit)
            lb = EXP2_SH_LOW
            big7 = stage(f"big{r}", y[8:] > fx.P_FRAC)
            h7 = stage(f"nh{r}", y[8 + lb:8 + lb + 2])
            ok7 = stage(f"ok{r}", vis & pv_[6] & pm_[6].ap)
            rp = exp2s[r].read_port()
            m.d.comb += [rp.en.eq(1), rp.addr.eq(y[:fx.EXP_LUT_BITS + lb])]
            e8 = stage(f"e8_{r}", rp.data)
            big8, ok8, h8 = stage(f"big8_{r}", big7), stage(f"ok8_{r}", ok7), stage(f"n8h{r}", h7)
            z8, b8 = e8[:fx.P_FRAC + 1], e8[fx.P_FRAC + 1]
            zs = Array(z8 >> (4 * h) for h in range(4))[h8]
            rb8 = Array([b8] + [z8[4 * h - 1] for h in range(1, 4)])[h8]
            p9 = stage(f"p{r}", Mux(big8 | ~ok8, 0, zs + rb8), 16)
            l_p9[r] = p9                 # (the row's sum: written below, with its reset and state load)
            # rshr(u, 3 - E_v) as one right shift of u << W_BIAS by k = 3 - E_v + W_BIAS (rshr_biased_staged),
            # in steps of 2^W_STEP (round 29, FINAL's step): rshr(u, s) = rshr(u 2^c, s + c) exactly, so with
            # d = E_v - W_K0 = -k, c = d mod 2^W_STEP on A_v (A_v << c at stage 9, one DSP as before) the shift
            # is k4 = (k + c) / 2^W_STEP = -(d >> W_STEP) steps (0 .. 15, not 0 .. 63: two LUT6 4:1 layers
            # in the node's build).  k4 < 0 (a left shift past W_BIAS) as 0: u << W_BIAS > W_MAX as any
            # longer shift of u > 0 is
            d8 = Signal(signed(EXP_BITS + 1), name=f"wd{r}")
            m.d.comb += d8.eq(pm_[8].ve - W_K0)
            vas9 = stage(f"vas{r}", pm_[8].va << d8[:W_STEP], KV_A_BITS + (1 << W_STEP) - 1)
            # p A_v 2^c in U_BITS + 3: p <= EXP2_LUT[0] = 2^P_FRAC, A_v < 2^KV_A_BITS (round 28: the
            # product's 24th bit is never set)
            u10 = stage(f"u{r}", p9 * vas9, U_BITS + (1 << W_STEP) - 1)
            d9 = Signal(signed(EXP_BITS + 1), name=f"wd9_{r}")
            m.d.comb += d9.eq(pm_[9].ve - W_K0)
            wk4 = Signal(signed(EXP_BITS + 1 - W_STEP + 1), name=f"wk{r}")
            m.d.comb += wk4.eq(-(d9 >> W_STEP))
            wsh10 = stage(f"wsh{r}", Mux(wk4 < 0, 0, Mux(wk4 > W_KMAX, W_KMAX, wk4)), range(W_KMAX + 1))
            # w >= 0: the W_MAX bound is its saturation, at the shift's output register (round 29: the 32-bit
            # choice after it, in front of the w queue, was ~48 LUT a row with its 59-bit compare)
            wr13 = rshr_biased_staged(m, u10, wsh10, W_BIAS, f"wr{r}", step=W_STEP, primitive=self.primitive,
                                      bound=fx.W_MAX)
            m.d.comb += w13s[r].eq(wr13)
        m.d.comb += [wq_wr.en.eq(push), wq_wr.addr.eq(wq_wp), wq_wr.data.eq(Cat(*w13s)), wq_rd.addr.eq(wq_rp)]
        with m.If(push):
            m.d.sync += wq_wp.eq(Mux(wq_wp == W_CREDITS - 1, 0, wq_wp + 1))
        with m.If(pv_[6] & ~pm_[6].ap):
            m.d.sync += kdone.eq(kdone + 1)

        # --- P.V: one key per head_dim / lanes cycles; o += w vq as two 16-bit digits of w, each
        # times two packed INT4 elements per DSP ---------------------------------------------------
        # the key's V row: read (asynchronously) at its ring slot for the whole of its P.V run, no copy.
        # The runs take an APPLY pass's keys in order (the post keeps the pairs' order, a pair's keys one
        # after the other), so the n-th run's slot is n mod V_DEPTH: a counter (``v_nidx``, the next run's
        # slot; a pass's start empties it), not the key's index carried through the post and the w queue
        pv_run, pv_c = Signal(), Signal(range(C))
        w_cur = [Signal(32, name=f"wcur{r}") for r in range(PR)]          # w >= 0
        v_idx, v_nidx = Signal(5), Signal(5)
        rd_ok = Signal()
        pv_end = Signal()
        pv_go = Signal()
        m.d.comb += pv_go.eq(~smode & (wq_n != 0) & rd_ok & (~pv_run | pv_end))
        if C > 1:                       # pv_run & (pv_c == C - 1) as a register (pv_c -> credit was 8.06)
            m.d.sync += pv_end.eq(Mux(pv_go, 0, pv_run & ~pv_end & (pv_c == C - 2)))
        else:
            m.d.comb += pv_end.eq(pv_run)
        m.d.sync += rd_ok.eq((wq_n != 0) & ~pv_go)
        with m.If(pv_run):
            m.d.sync += pv_c.eq(pv_c + 1)
            with m.If(pv_end):
                m.d.sync += [pv_run.eq(0), pv_c.eq(0)]
        with m.If(pv_go):
            m.d.sync += [pv_run.eq(1), pv_c.eq(0), v_idx.eq(v_nidx), v_nidx.eq(v_nidx + 1),
                         wq_rp.eq(Mux(wq_rp == W_CREDITS - 1, 0, wq_rp + 1))]
            for r in range(PR):
                m.d.sync += w_cur[r].eq(wq_rd.data[32 * r:32 * (r + 1)])
        with m.If(start & ~cp.emit):
            m.d.sync += v_nidx.eq(0)
        # the V chunk of the next cycle's product chosen a cycle ahead into a register (``vch``): on
        # ``pv_go`` chunk 0 of the next run's row (``vring0`` at v_nidx), else chunk pv_c + 1 of the running
        # one (``pv_c1``, kept beside pv_c; whatever it is when the run ends).  (The ring's read, the
        # chunk choice and the packing table in one stage were 9.0 levels at prod_rows = 1: v_idx -> pva0.)
        vch = Signal(chunk_bits)
        vr0 = vring0.read_port(domain="comb")
        m.d.comb += vr0.addr.eq(v_nidx)
        if C > 1:
            vr = vring.read_port(domain="comb")
            m.d.comb += vr.addr.eq(v_idx)
            pv_c1 = Signal(range(C + 1), init=1)
            with m.If(pv_run):
                m.d.sync += pv_c1.eq(pv_c1 + 1)
            with m.If(pv_go | pv_end):
                m.d.sync += pv_c1.eq(1)
            nxt_c = Array([Const(0, chunk_bits)] + [vr.data[(c - 1) * chunk_bits:c * chunk_bits]
                                                     for c in range(1, C)])[pv_c1[:ceil_log2(C)]]
            m.d.sync += vch.eq(Mux(pv_go, vr0.data, nxt_c))
        else:
            m.d.sync += vch.eq(vr0.data)
        # streamed scores: the w queue's head leaves on ``w`` (key after key, word r = row r)
        w_pop = Signal()
        m.d.comb += [self.w.valid.eq(smode & (wq_n != 0)), self.w.payload.eq(wq_rd.data),
                     w_pop.eq(self.w.valid & self.w.ready)]
        with m.If(w_pop):
            m.d.sync += [wq_rp.eq(Mux(wq_rp == W_CREDITS - 1, 0, wq_rp + 1)), kdone.eq(kdone + 1)]
        m.d.sync += [wq_n.eq(wq_n + push - pv_go - w_pop), credit.eq(credit + (go & apply) - pv_go - w_pop)]

        # st word 2 + i (ATTN_Q STATE, never during a pass) goes down the same pipeline as one
        # chunk: w = the word on its row (0 on the others) times a unit INT4 at element i; the
        # write replaces o[i] and touches no other lane
        st_i = Signal(range(D + 2))
        m.d.comb += st_i.eq(self.st.word - 2)
        st_c = Array(Const(i // L, range(C)) for i in range(D))[st_i]
        st_l = Array(Const(i % L, range(L)) for i in range(D))[st_i]
        inj = Signal()
        m.d.comb += inj.eq(self.st.en & (self.st.word >= 2))
        # ow (ATTN_Q O): ``words`` elements of one row a cycle, slice s = elements s W .. s W + W - 1,
        # address s // (Ls / W) of the memories of group s mod (Ls / W); down the same stages (as
        # product chunk K x that address), replacing the product (no DSP: the words go straight into
        # the write-back adder)
        W, G = self.words, Ls // self.words
        wide = Signal()
        m.d.comb += wide.eq(self.ow.en)
        ow_c = Array(Const(x // G * K, range(C)) for x in range(D // W))[self.ow.slice]
        ow_g = Array(Const(x % G, range(Ls)) for x in range(D // W))[self.ow.slice]
        pairs = -(-L // 2)
        vchunk = vch
        a1 = []
        for t in range(pairs):
            lo = vchunk[2 * t * W_BITS:(2 * t + 1) * W_BITS].as_signed()
            hi = vchunk[(2 * t + 1) * W_BITS:(2 * t + 2) * W_BITS].as_signed() if 2 * t + 1 < L else Const(0, 4)
            unit = Mux(st_l == 2 * t, 1, Mux(st_l == 2 * t + 1, 1 << PACK_SHIFT, 0))
            # hi 2^PACK_SHIFT + lo without an adder: lo sign-extended below, hi - (lo < 0) above (a table
            # of hi and lo's sign: no carry chain; v_idx -> pva0 was 8.06 levels)
            ub = DSP_A_BITS - PACK_SHIFT
            hi_m = Array(Const(((v >> 1) - (1 << W_BITS) * (v >> W_BITS)) - (v & 1), signed(ub))
                         for v in range(1 << (W_BITS + 1)))[Cat(lo[-1], hi.as_unsigned())]
            packed = Cat(lo, lo[-1].replicate(PACK_SHIFT - W_BITS), hi_m).as_signed()
            a1.append(stage(f"pva{t}", Mux(inj, unit, packed), signed(DSP_A_BITS)))
        kill = Signal()          # ``clear`` or APPLY's ``first`` supersede state words in flight
        m.d.comb += kill.eq(self.clear | reset_lo)
        q1v, q1c, q1l = stage("pv1v", pv_run | ((inj | wide) & ~kill)), \
            stage("pv1c", Mux(wide, ow_c, Mux(inj, st_c, pv_c))), stage("pv1l", pv_end & ~inj & ~wide)
        q1s, q1n = stage("pv1s", inj | wide), stage("pv1n", Mux(wide, ow_g, st_l))
        q1r = stage("pv1r", Mux(wide, self.ow.row, self.st.row))
        # (the data: ``ow``'s W words, or a state word in each of the W places: the rows without products
        # take it into memory st_i mod Ls, word st_i mod W of that group)
        # (round 33, au33: the choice two bits a LUT6_2 on the node, ``mux2_pairs``: ``pv#d`` 256 LUT, one a bit)
        q1w, q1d = stage("pv1w", wide), stage("pv1d", mux2_pairs(m, self.st.en, self.st.data.replicate(W),
                                                                  self.ow.data, self.primitive, "pv0d")
                                               if NR else self.ow.data)
        q2v, q2c, q2l = stage("pv2v", q1v & ~(q1s & kill)), stage("pv2c", q1c), stage("pv2l", q1l)
        q2s, q2n, q2r = stage("pv2s", q1s), stage("pv2n", q1n), stage("pv2r", q1r)
        q2w, q2d = stage("pv2w", q1w), stage("pv2d", q1d)
        q3v, q3c, q3l = stage("pv3v", q2v & ~(q2s & kill)), stage("pv3c", q2c), stage("pv3l", q2l)
        q3s, q3n, q3r = stage("pv3s", q2s), stage("pv3n", q2n), stage("pv3r", q2r)
        q3w, q3d = stage("pv3w", q2w), stage("pv3d", q2d)
        m.d.comb += pv_busy.eq(q1v | q2v | q3v)
        if K == 1:
            q2a, q3a, q3b = q2c, q3c, [Const(1)]
        else:                           # a product chunk's address and memories
            q2a = Array(Const(c // K, range(Cs)) for c in range(C))[q2c]
            q3a = Array(Const(c // K, range(Cs)) for c in range(C))[q3c]
            q3m = Array(Const(c % K, range(K)) for c in range(C))[q3c]
            q3b = [q3m == b for b in range(K)]
        outing = state == OUT
        ec, el = Signal(range(Cs)), Signal(range(Ls))   # emit: o element ec * Ls + el
        row = Signal(range(R))                          # emit: the row
        eadv = Signal()
        for r in range(PR):             # rows past PR: o only from ``ow`` (their shared memories, below)
            src = Signal(32, name=f"pvw{r}")
            m.d.comb += src.eq(Mux(inj, Mux(self.st.row == r, self.st.data, 0), w_cur[r]))
            d0 = stage(f"pvd0_{r}", Cat(src[:16], Const(0, 1)).as_signed())
            d1 = stage(f"pvd1_{r}", src[16:32].as_signed(), signed(17))
            for t in range(pairs):
                fields = []
                for g, dg in enumerate((d0, d1)):
                    prod = stage(f"pvp{r}_{t}_{g}", a1[t] * dg, signed(DSP_A_BITS + 18))
                    lo_f = prod[:PACK_SHIFT].as_signed()
                    hi_f = (prod >> PACK_SHIFT) + prod[PACK_SHIFT - 1]
                    fields.append((lo_f, hi_f))
                for j in range(2):
                    lane = 2 * t + j
                    if lane >= L:
                        continue
                    inc = stage(f"pvi{r}_{lane}", fields[0][j] + (fields[1][j] << 16), signed(37))
                    # read o at stage 2, add and write it back at stage 3 (an element comes back
                    # only head_dim / lanes cycles later); chunk c's lane goes to memory
                    # (c mod K) L + lane at address c // K
                    for b in range(K):
                        js = b * L + lane
                        rd, wr = o_rd[r][js], o_wr[r][js]
                        flags = Array(oflag[r][a * Ls + js] for a in range(Cs))
                        fl3 = stage(f"pvf{r}_{js}", flags[q2a] & ~q2s)
                        m.d.comb += [rd.en.eq(Mux(outing, eadv, 1)), rd.addr.eq(Mux(outing, ec, q2a))]
                        k = js % W
                        # o + the product, or a state / ow word (its flag: 0 then).  (round 33, au33: as
                        # q3w ? the word : the product + (fl3 ? o : 0) -- the same, fl3 being 0 under every
                        # state / ow word (q3w implies q3s, and fl3 is registered with ~q2s) -- one LUT6_2 a
                        # bit on the carry chain on the node (``add_load``), where ABC9 mapped the two choices
                        # and the sum at ~2.3 LUT a bit: ``o#_#`` 757 logic LUT)
                        total = add_load(m, inc, rd.data, q3d[32 * k:32 * (k + 1)].as_signed(), q3w,
                                         signed(self.o_width), f"osum{r}_{js}", primitive=self.primitive, en=fl3)
                        ow_hit = (q3n == js // W) & (q3r == r)
                        m.d.comb += [wr.en.eq(q3v & Mux(q3w, ow_hit, q3b[b] & (~q3s | ((q3n == lane) & (q3r == r))))),
                                     wr.addr.eq(q3a), wr.data.eq(total)]
                        for a in range(Cs):
                            with m.If(wr.en & (wr.addr == a)):
                                m.d.sync += oflag[r][a * Ls + js].eq(1)
        if NR:                          # the rows without products: an ``ow`` group's words as they come
            xr = Signal(range(max(NR, 2)))
            m.d.comb += xr.eq(q3r - PR)
            # an ``ow`` group (q3n: the group) or a state word (``st`` words 2 .., q3n: its lane of product chunk
            # q3c, i.e. memory (q3c mod K) L + q3n): ATTN_Q STATE reaches every state row
            xw = Signal(Ls)
            for js in range(Ls):
                k = js % W
                m.d.comb += [xw[js].eq(q3v & (q3r >= PR) & Mux(q3w, q3n == js // W, q3s & q3b[js // L] & (q3n == js % L))),
                             x_rd[js].en.eq(eadv), x_rd[js].addr.eq((row - PR) * Cs + ec),
                             x_wr[js].en.eq(xw[js]),
                             x_wr[js].addr.eq(xr * Cs + q3a), x_wr[js].data.eq(q3d[32 * k:32 * (k + 1)].as_signed())]
            for x in range(NR):
                for a in range(Cs):
                    for gg in range(G_):
                        with m.If(xw[gg * W:(gg + 1) * W].any() & (q3r == PR + x) & (q3a == a)):
                            m.d.sync += xflag[x][a * G_ + gg].eq(1)
        with m.If(q3v & q3l):
            m.d.sync += kdone.eq(kdone + 1)

        with m.If(draining & (kdone == acc)):
            m.d.sync += state.eq(IDLE)

        # --- row maxima (``mx``: ATTN_SM MAX, a row's beat of MW scores a cycle, no command) -------------
        # 1: each word's visibility (position pos + j <= the row's); 2 .. : a max tree of the visible
        # words, a level a stage; last: m[row] = max(m[row] (INT32_MIN on ``first``), the tree's max)
        MW = self.max_words
        mxp = self.mx
        rsel = mxp.row[:max(ceil_log2(R), 1)]
        qsel = row_pick(qpos, rsel, "qsel_pick")
        # pos + j <= the row's position <=> the row's position - pos >= j: one subtraction, MW compares
        # with constants.  The row's position (a choice of R), pos and count are registered at stage 1
        # and the compares made there, in the tree's first level (MW > 1; the path
        # qpos -> row choice -> subtraction -> compares -> a word's flag was 9 levels in one stage)
        late = MW > 1
        if late:
            qsel, mpos = stage("mx1q", qsel), stage("mx1p", mxp.pos)
        else:
            mpos = mxp.pos
        # mxd = qsel - mpos >= j for j < MW: mxd >= 0 and (mxd >= 2^jb, or its low jb bits >= j)
        jb = ceil_log2(MW)
        if late:
            # the two flags as compares of the registers alone (carry chains, no subtraction before a
            # zero detect): mxd >= 0 is qsel >= pos, mxd >= 2^jb is qsel >= pos + 2^jb (that sum
            # registered at stage 1 beside pos); the low bits a jb-bit difference.  (The subtraction,
            # the OR of its high bits and the compares were 8.125 levels: mx1p -> mx2ok#.)
            mpos_hi = stage("mx1h", mxp.pos + (1 << jb))
            mx_ge0, mx_gehi = Signal(), Signal()
            mx_lo = Signal(jb)
            m.d.comb += [mx_ge0.eq(qsel >= mpos), mx_gehi.eq(qsel >= mpos_hi), mx_lo.eq(qsel[:jb] - mpos[:jb])]

            def mx_ge(j):
                return mx_ge0 & ((mx_gehi | (mx_lo >= j)) if j else 1)
        else:
            mxd = Signal(signed(POS_BITS + 2))
            m.d.comb += mxd.eq(qsel - mpos)
            mx_hi = mxd[jb:len(mxd) - 1].any()

            def mx_ge(j):
                return ~mxd[-1] & ((mx_hi | (mxd[:jb] >= j)) if jb and j else 1)
        mv, mrw, mfirst = stage("mx1v", mxp.en), stage("mx1r", rsel), stage("mx1f", mxp.first)
        lvl = []
        for j in range(MW):
            if late:                    # word j a key (en, j < count) registered, its visibility here
                ok = Signal(name=f"mxok{j}")
                m.d.comb += ok.eq(stage(f"mx1k{j}", mxp.en & (j < mxp.count)) & mx_ge(j))
            else:
                ok = stage(f"mxok{j}", mxp.en & (j < mxp.count) & mx_ge(j))
            lvl.append((ok, stage(f"mxs{j}", mxp.data[32 * j:32 * (j + 1)].as_signed())))
        mx_busy = [mv]
        # With two levels or more (MW > 2), stage 2 registers each word's visibility and value and the
        # first level's compares (va > vb of each pair, from stage 1's words), and stage 3 makes the
        # first level's picks and the second level (the picks are two LUT levels): as many stages as
        # before.  (Visibility, compare and pick in one stage were 8.125 levels: mx1p -> mxt0_#.)
        split = late and MW > 2
        pick0 = []
        if split:
            # (round 33, au33) stage 2 registers a word that is not visible as INT32_MIN (its flip-flops'
            # synchronous set / reset) and the first level's pick itself (a visible, b not or below); the
            # levels' values are then the maxima of their visible words, INT32_MIN where none is, so a
            # level past the first picks by the compare alone and every pick is a 2:1 choice of two bits a
            # LUT6_2 on the node (``mux2_pairs``; the picks with the flags were a LUT a bit, ``mxt#_#``
            # 1 248 LUT).  Where none is visible the tree's flag (``tok``) still says so.
            pick0 = [stage(f"mx2g{i // 2}", lvl[i][0] & (~lvl[i + 1][0] | greater(
                m, lvl[i][1], lvl[i + 1][1], f"mx1gt{i // 2}", self.primitive))) for i in range(0, MW - 1, 2)]
            lvl = [(stage(f"mx2ok{j}", ok), stage(f"mx2s{j}", Mux(ok, v, INT32_MIN), signed(32)))
                   for j, (ok, v) in enumerate(lvl)]
            mv, mrw, mfirst = stage("mx2v", mv), stage("mx2r", mrw), stage("mx2f", mfirst)
            mx_busy.append(mv)
        n = 0
        while len(lvl) > 1:
            nxt = []
            comb_ = split and n == 0            # the first level's picks, unregistered (stage 3)

            def out(name, value, shape=None):
                return value if comb_ else stage(name, value, shape)
            for i in range(0, len(lvl) - 1, 2):
                (oa, va), (ob, vb) = lvl[i], lvl[i + 1]
                # (round 30: the compares at half a LUT a bit on the node, ``greater``)
                if comb_:
                    pick_a = pick0[i // 2]
                elif split:
                    pick_a = greater(m, va, vb, f"mxt{n}_{i // 2}gt", self.primitive)
                else:
                    pick_a = oa & (~ob | greater(m, va, vb, f"mxt{n}_{i // 2}gt", self.primitive))
                v = mux2_pairs(m, pick_a, va.as_unsigned(), vb.as_unsigned(), self.primitive and split,
                               f"mxt{n}_{i // 2}m")
                nxt.append((out(f"mxt{n}_{i // 2}ok", oa | ob), out(f"mxt{n}_{i // 2}", v.as_signed(), signed(32))))
            if len(lvl) % 2:
                last_ = lvl[-1]
                nxt.append((out(f"mxt{n}_{len(lvl) // 2}ok", last_[0]),
                            out(f"mxt{n}_{len(lvl) // 2}", last_[1], signed(32))))
            if not comb_:
                mv, mrw, mfirst = stage(f"mxt{n}v", mv), stage(f"mxt{n}r", mrw), stage(f"mxt{n}f", mfirst)
                mx_busy.append(mv)
            lvl, n = nxt, n + 1
        tok, tmax = lvl[0]
        mbase = Signal(signed(32))
        m.d.comb += mbase.eq(Mux(mfirst, INT32_MIN, row_pick(mrow, mrw, "mbase_pick")))
        mnew = Signal(signed(32))
        m.d.comb += mnew.eq(Mux(tok & greater(m, tmax, mbase, "mnew_gt", self.primitive), tmax, mbase))
        # (the row's writes: below, with the resets and the state loads)
        # (``mx_any`` a register: the stages' valids shift one a cycle, so any of them holds a beat now iff ``en`` or
        # one of the stages before the last did a cycle ago -- one input of ``busy``, not one a stage: round 24,
        # the OR was 3.0 levels to the port, 9.0 joined through the mover's CHECK)
        m.d.sync += mx_any.eq(Cat(mxp.en, *mx_busy[:-1]).any())

        # a row's m: the pass's online maximum (s > m), the MAX tree's (``mnew``), resets by a pass's ``first``
        # and the state loads (never during a pass), in that priority (the last one wins)
        for r in range(R):
            s6_hit, s6 = m_s6[r]
            new_hit, reset_hit = mv & (mrw == r), reset_m | self.clear
            st_hit = self.st.en & (self.st.row == r) & (self.st.word == 0)
            if self.primitive:
                # (round 30) the four sources as one LUT6 a bit (``mux4``) by a select encoded from the row's
                # conditions, the write a clock enable: ABC9 mapped the priority chain at ~3.6 LUT a bit
                # (1 394 LUT for 12 rows of 32 bits)
                sel = Signal(2, name=f"m{r}_sel")
                m.d.comb += sel.eq(Mux(st_hit, 2, Mux(reset_hit, 3, Mux(new_hit, 1, 0))))
                nxt = mux4(m, sel, [s6.as_unsigned(), mnew.as_unsigned(), self.st.data[:32],
                                    Const(INT32_MIN & 0xFFFFFFFF, 32)], primitive=True, name=f"m{r}_next")
                with m.If(s6_hit | new_hit | reset_hit | st_hit):
                    m.d.sync += mrow[r].eq(nxt)
            else:
                with m.If(s6_hit):
                    m.d.sync += mrow[r].eq(s6)
                with m.If(new_hit):
                    m.d.sync += mrow[r].eq(mnew)
                with m.If(reset_hit):
                    m.d.sync += mrow[r].eq(INT32_MIN)
                with m.If(st_hit):
                    m.d.sync += mrow[r].eq(self.st.data)
        # a row's l: APPLY's sum (l + p), reset by a pass's ``first``, the state load, in that priority
        for r in range(R):
            ap_hit, reset_hit = pv_[9] & pm_[9].ap, reset_l | self.clear
            st_hit = self.st.en & (self.st.row == r) & (self.st.word == 1)
            if self.primitive:
                # (round 30b) the sum and the load's choice as one LUT6_2 a bit on the carry chain (``add_load``),
                # the reset the flip-flops' synchronous reset (below a load), the write a clock enable: ABC9
                # mapped them at ~1.7 LUT a bit (``l#`` 675 LUT, 12 rows of 34 bits)
                nxt = add_load(m, lacc[r], l_p9[r], self.st.data.as_signed(), st_hit, signed(self.l_width),
                               f"l{r}_next", primitive=True)
                with m.If(ap_hit | st_hit):
                    m.d.sync += lacc[r].eq(nxt)
                with m.If(reset_hit & ~st_hit):
                    m.d.sync += lacc[r].eq(0)
            else:
                with m.If(ap_hit):
                    m.d.sync += lacc[r].eq(lacc[r] + l_p9[r])
                with m.If(reset_hit):
                    m.d.sync += lacc[r].eq(0)
                with m.If(st_hit):
                    m.d.sync += lacc[r].eq(self.st.data.as_signed())
        # the other rows' states: the o flags' resets by a pass's ``first``
        for r in range(R):
            with m.If(reset_lo | self.clear):
                m.d.sync += [f.eq(0) for f in (oflag[r] if r < PR else xflag[r - PR])]

        # --- emit: a pipeline of word issue -> lane values -> sat32 -> x rcp -> shift -> out; it
        # advances while the output register is free or taken ---------------------------------------
        word = Signal(range(D + 2))
        final, maxm = Signal(), Signal()
        m.d.comb += [final.eq(cfg.mode == EmitMode.FINAL), maxm.eq(cfg.mode == EmitMode.MAX)]
        ovalid, olast = Signal(), Signal()
        odata = Signal(32 * W)
        m.d.comb += [eadv.eq(~ovalid | self.o.tready), self.o.tvalid.eq(ovalid), self.o.tdata.eq(odata),
                     self.o.tlast.eq(olast)]
        # FINAL: every row's reciprocal ahead of its words, one row per cycle through six stages
        prow, pdone = Signal(range(R + 1)), Signal(range(R + 1))
        with m.If(start):
            m.d.sync += [prow.eq(0), pdone.eq(0)]
        pgo = Signal()
        m.d.comb += pgo.eq(outing & final & (prow != cfg.rows))
        with m.If(pgo):
            m.d.sync += prow.eq(prow + 1)
        # sat32(l) of a row: the row's l chosen, then saturated (one saturation, not one a row)
        la = Signal(signed(32))
        # (one choice of l and one saturation for both of its readers: FINAL's reciprocals (row prow) and
        # STATE's word 1 (row ``row``, chosen at issue below); each reads it only in its own mode: round 25)
        l_sat = Signal(signed(32))
        rb = max(ceil_log2(R), 1)
        m.d.comb += l_sat.eq(sat(m, row_pick(lacc, Mux(final, prow[:rb], row), "lsel_pick"), 32))
        m.d.sync += la.eq(l_sat)
        lb, bb = Signal(signed(32)), Signal(range(33))
        m.d.sync += [lb.eq(la), bb.eq(bitlen(m, la[:31]))]
        bsh = Signal(signed(8))
        m.d.comb += bsh.eq(bb - fx.RCP_IDX_BITS)
        idx = rshr_staged(m, lb, bsh, 10, "rcpidx")
        # beside the index's three stages: b and whether l > 0 (the reciprocal, else 0)
        lpb = Signal()
        m.d.sync += lpb.eq(la > 0)
        lc, bc = Signal(), Signal(range(33))
        m.d.sync += [lc.eq(lpb), bc.eq(bb)]
        lc2, bc2 = Signal(), Signal(range(33))
        m.d.sync += [lc2.eq(lc), bc2.eq(bc)]
        lc3, bc3 = Signal(), Signal(range(33))
        m.d.sync += [lc3.eq(lc2), bc3.eq(bc2)]
        # the table at idx - 2^(RCP_IDX_BITS - 1) (idx in 2^9 .. 2^10 where l > 0; else the value is
        # unused): entries 0 .. 2^9 - 1 in a block RAM at idx's low 9 bits (round 28: its two halves in
        # LUTs were ~230 LUT; a RAMB18 now), and the choice by idx's bit 10 (idx = 2^10: the last entry)
        # in the next stage beside pos_c (the RAM's clock-to-out, that choice and pos_c's into ``rcp#``)
        RH = 1 << (fx.RCP_IDX_BITS - 1)
        assert len(fx.RCP_LUT) == RH + 1
        m.submodules.rcp = rcp_t = memory.Memory(shape=16, depth=RH, init=[int(x) for x in fx.RCP_LUT[:RH]],
                                                 attrs={"ram_style": "block"})
        rr = rcp_t.read_port()
        m.d.comb += [rr.en.eq(1), rr.addr.eq(idx[:fx.RCP_IDX_BITS - 1])]
        rsel_top = Signal(name="rcp_top")
        m.d.sync += rsel_top.eq(idx[fx.RCP_IDX_BITS])
        rr_val = Mux(rsel_top, int(fx.RCP_LUT[RH]), rr.data)
        # FINAL's shift b + FIN_OFS, b = bitlen(l) in 0 .. 31 (-5 .. 26): a shape that holds just that
        # range, and a left shift of at most -FIN_OFS (a narrow shifter; o x r = 0 when l <= 0)
        fin_ofs = fx.O_FRAC + fx.RCP_FRAC - fx.P_FRAC - fx.RCP_IDX_BITS - fx.X_FRAC
        # as k = that + fin_left (0 .. 31 at -5: bc itself), one shift of o x r << fin_left by k
        fin_left = max(0, -fin_ofs)
        # (round 28) s = b + FIN_OFS as s + c, a multiple of 2^FIN_STEP, with c = -s mod 2^FIN_STEP on the
        # reciprocal (r << c, once a row here, not in the words' shifters): the shifters take (s + c + fin_bias)
        # / 2^FIN_STEP, 0 .. 8 at -5 (a choice of 9, not 32), of o x (r << c) << fin_bias
        fstep = 1 << FIN_STEP
        fin_bias = fstep * (fin_left // fstep)
        fsh_shape = Shape.cast(range((31 + fin_ofs + fstep - 1 + fin_bias) // fstep + 1))
        fsh_c, fc_c, pos_c = Signal(fsh_shape), Signal(FIN_STEP), Signal()
        fcv = Signal(FIN_STEP)
        m.d.comb += fcv.eq(-(bc3 + fin_ofs))
        m.d.sync += [fsh_c.eq((bc3 + fin_ofs + fcv + fin_bias) >> FIN_STEP), fc_c.eq(fcv),
                     pos_c.eq(lc3)]
        pv_tag, pr_tag = pgo, prow
        for i in range(6):           # la, lb, the three shift stages, the table read
            nv, nr = Signal(name=f"pt{i}v"), Signal(range(R + 1), name=f"pt{i}r")
            m.d.sync += [nv.eq(pv_tag), nr.eq(pr_tag)]
            pv_tag, pr_tag = nv, nr
        rcp_bits = 16 + fstep - 1
        rcs = [Signal(rcp_bits, name=f"rcp{r}") for r in range(R)]
        fss = [Signal(fsh_shape, name=f"fsh{r}") for r in range(R)]
        for r in range(R):
            with m.If(pv_tag & (pr_tag == r)):
                m.d.sync += [rcs[r].eq(Mux(pos_c, rr_val << fc_c, 0)), fss[r].eq(fsh_c)]
        with m.If(pv_tag):
            m.d.sync += pdone.eq(pdone + 1)

        e_done = Signal()
        ready_row = ~final | (pdone > row)
        eissue = Signal()
        m.d.comb += eissue.eq(outing & ~e_done & ready_row & eadv)
        # FINAL: a slice of W words (lanes el .. el + W - 1 of address ec) an issue; STATE / MAX a word
        wl = ceil_log2(W)
        last_word = Signal()
        m.d.comb += last_word.eq(Mux(maxm, 1, Mux(final, word == D - W, word == D + 1)))
        last_row = row == cfg.rows - 1
        is_o = ~maxm & (final | (word >= 2))
        with m.If(eissue):
            m.d.sync += word.eq(word + Mux(final, W, 1))
            with m.If(is_o):
                m.d.sync += el.eq(el + Mux(final, W, 1))
                with m.If(el == Mux(final, Ls - W, Ls - 1)):
                    m.d.sync += [el.eq(0), ec.eq(ec + 1)]
            with m.If(last_word):
                m.d.sync += [word.eq(0), row.eq(row + 1), ec.eq(0), el.eq(0)]
                with m.If(last_row):
                    m.d.sync += [row.eq(0), e_done.eq(1)]
        with m.If(ovalid & self.o.tready & olast):
            m.d.sync += [state.eq(IDLE), e_done.eq(0)]

        # issue: the o memories read ec (all rows, all lanes); 1: (row, the group of el) of it; 2: sat32;
        # 3: x rcp (W products); 4, 5: the rounding shifts; out (STATE: word el mod W of the group)
        KIND_M, KIND_L, KIND_O, KIND_F = range(4)
        tag = data.StructLayout({"v": 1, "kind": 2, "last": 1, "ml": 32, "rcp": rcp_bits, "fsh": fsh_shape,
                                 "row": range(R), "el": range(Ls), "flag": W})
        x1, x2, x3, x4, x5 = (Signal(tag, name=f"x{i}") for i in range(1, 6))
        is_m = Signal()
        m.d.comb += is_m.eq(maxm | (~final & (word == 0)))
        kind = Mux(is_m, KIND_M, Mux(final, KIND_F, Mux(word == 1, KIND_L, KIND_O)))
        # the flags of the group of o element (row, ec * Ls + el): one word select of the flags laid
        # out at (row, ec, group) fields of W bits (a power-of-two mux tree, no index arithmetic)
        gbits, cbits = ceil_log2(G), len(ec)
        zero_w = Const(0, W)
        flag_words = [zero_w] * ((1 << (gbits + cbits)) * (1 << len(row)))
        for r in range(R):
            for c in range(Cs):
                for gg in range(G):
                    flag_words[(r << (cbits + gbits)) | (c << gbits) | gg] = Cat(
                        *(oflag[r][c * Ls + gg * W + k] for k in range(W)))
        egrp = el[wl:wl + gbits]
        flag_now = Cat(*flag_words).word_select(Cat(egrp, ec, row), W)
        ov2 = [Signal(signed(self.o_width), name=f"ov2_{k}") for k in range(W)]
        oc3 = [Signal(signed(32), name=f"oc3_{k}") for k in range(W)]
        # o x rcp as two registered halves (o's low 16 bits, its high 16 bits; a DSP48E2 each, as the
        # one product was mapped), summed at the shift's first stage (the DSPs' sum in the product's
        # stage was 8.44 levels)
        plo4 = [Signal(16 + rcp_bits, name=f"plo4_{k}") for k in range(W)]
        phi4 = [Signal(signed(17 + rcp_bits), name=f"phi4_{k}") for k in range(W)]
        # (FIN_X_BITS = 47, not the halves' 49: |sat32(o) x rcp| <= 2^46; round 28: FINAL's shift a bit narrower;
        # + c's bits, the reciprocal shifted left by c)
        prod4 = [Signal(signed(FIN_X_BITS + fstep - 1), name=f"prod4_{k}") for k in range(W)]
        m.d.comb += [prod4[k].eq((phi4[k] << 16) + plo4[k]) for k in range(W)]
        oc4, oc5 = Signal(signed(32)), Signal(signed(32))
        x1g = x1.el[wl:wl + gbits]
        x1_nr = Signal(name="x1_nr")                    # the row is one without products
        m.d.comb += x1_nr.eq(x1.row >= PR)
        lane_data = [Array(Array(o_rd[r][gg * W + k].data for gg in range(G)) for r in range(PR)) for k in range(W)]
        with m.If(eadv):
            m.d.sync += [x1.v.eq(eissue), x1.kind.eq(kind), x1.last.eq(last_word & last_row),
                         x1.ml.eq(Mux(is_m, row_pick(mrow, row, "ml_pick"), l_sat)), x1.rcp.eq(row_pick(rcs, row, "rcp_pick")),
                         x1.fsh.eq(row_pick(fss, row, "fsh_pick")),
                         x1.row.eq(row), x1.el.eq(el), x1.flag.eq(flag_now),
                         x2.eq(x1), x3.eq(x2), x4.eq(x3), x5.eq(x4),
                         oc4.eq(Array(oc3)[x3.el[:wl]] if W > 1 else oc3[0]), oc5.eq(oc4)]
            for k in range(W):
                prow_ = x1.row[:max(ceil_log2(PR), 1)] if PR > 1 else 0
                lane = lane_data[k][prow_][x1g] if G > 1 else lane_data[k][prow_][0]
                if NR:                  # the rows without products: their memories' read of (row, ec)
                    # (round 33, au33: two bits a LUT6_2 on the node, ``mux2_pairs``, and the flag's 0 the
                    # flip-flops' synchronous reset, below: ABC9 mapped the choice and the flag at a LUT a bit,
                    # ``ov#_#`` 425 LUT)
                    xl = Array(x_rd[gg * W + k].data for gg in range(G))[x1g] if G > 1 else x_rd[k].data
                    lane = mux2_pairs(m, x1_nr, xl.as_unsigned(), lane.as_unsigned(), self.primitive,
                                      f"ov1_{k}").as_signed()
                m.d.sync += [ov2[k].eq(lane),
                             oc3[k].eq(sat(m, ov2[k], 32)),
                             plo4[k].eq(oc3[k][:16] * x3.rcp.as_unsigned()),
                             phi4[k].eq(oc3[k][16:].as_signed() * x3.rcp.as_unsigned())]
        # o's word without its flag: 0 (the reset above the enable, so that it is the flip-flops' R: as the
        # enable's choice Yosys kept it in a LUT a bit)
        for k in range(W):
            with m.If(eadv & ~x1.flag[k]):
                m.d.sync += ov2[k].eq(0)
        sh7 = [rshr_biased_staged(m, prod4[k], x4.fsh, fin_bias, f"fin{k}", en=eadv, step=FIN_STEP,
                                  primitive=self.primitive) for k in range(W)]
        x6, x7 = Signal(tag), Signal(tag)
        oc6, oc7 = Signal(signed(32)), Signal(signed(32))
        okeep = Signal(4 * W)
        m.d.comb += self.o.tkeep.eq(okeep)
        with m.If(eadv):
            m.d.sync += [x6.eq(x5), oc6.eq(oc5), x7.eq(x6), oc7.eq(oc6), ovalid.eq(x7.v), olast.eq(x7.last),
                         okeep.eq(Mux(x7.kind == KIND_F, (1 << (4 * W)) - 1, 0xF))]
            with m.Switch(x7.kind):
                with m.Case(KIND_M, KIND_L):             # m or sat32(l), chosen at issue
                    m.d.sync += odata.eq(x7.ml)
                with m.Case(KIND_O):
                    m.d.sync += odata.eq(oc7)
                with m.Default():
                    m.d.sync += odata.eq(Cat(*(sat(m, sh7[k], 32) for k in range(W))))

        # the readies' registers (see ``kr_max``): n_sl = acc - sfree (keys in, pairs scored) and n_v
        # = acc - kdone (an APPLY pass's keys in, through P.V: its only kdone) as they are in a pass
        # over keys (``start`` of a pass empties them), and the next cycle's state, src and phase
        n_sl_n, n_v_n = Signal.like(n_sl), Signal.like(n_v)
        m.d.comb += [n_sl_n.eq(Mux(start & ~cp.emit, 0, n_sl + fire - Mux(s_end, Mux(s_has2, 2, 1), 0))),
                     n_v_n.eq(Mux(start & ~cp.emit, 0, n_v + (fire & apply) - (q3v & q3l)))]
        m.d.sync += [n_sl.eq(n_sl_n), n_v.eq(n_v_n)]
        # n_sl_n < K_SLOTS and n_v_n < V_DEPTH without the adders and compares in front of the readies
        # (kr_app -> kr_app was 8.06 levels: fire, the adder, the compare): each counter's compares for
        # every step it can take are registers (``sl_lt[d]`` = n_sl < K_SLOTS - d, ``v_lt[d]`` = n_v <
        # V_DEPTH - d, written from the next values), the cycle's step picks one (the counters stay in
        # 0 .. K_SLOTS / V_DEPTH: every step keeps them there, so no wrap to model, and a step down
        # always leaves room: sl_lt[d < 0] and v_lt[-1] are 1, no register)
        sl_lt = {d: Signal(init=int(0 < K_SLOTS - d), name=f"sl_lt{d}") for d in (0, 1)}
        v_lt = {d: Signal(init=int(0 < V_DEPTH - d), name=f"v_lt{d}") for d in (0, 1)}
        m.d.sync += [sl_lt[d].eq(n_sl_n < K_SLOTS - d) for d in (0, 1)]
        v_in, v_out = fire & apply, q3v & q3l
        # v_lt[d] = n_v + v_in - v_out < V_DEPTH - d as n_v's compares with the constants for each step (from
        # the register, beside the step), the step choosing one: no adder behind ``fire`` (round 24: at
        # prod_rows = 1, kr_app -> fire -> the adder -> the compare -> v_lt1 was 9.0 levels)
        for d in (0, 1):
            m.d.sync += v_lt[d].eq(Mux(start & ~cp.emit, int(0 < V_DEPTH - d),
                                       Mux(v_in & ~v_out, n_v < V_DEPTH - d - 1,
                                           Mux(v_out & ~v_in, n_v < V_DEPTH - d + 1, n_v < V_DEPTH - d))))
        sl_lt[-1] = sl_lt[-2] = v_lt[-1] = Const(1)
        sl_ok = Mux(fire, Mux(s_end, Mux(s_has2, sl_lt[-1], sl_lt[0]), sl_lt[1]),
                    Mux(s_end, Mux(s_has2, sl_lt[-2], sl_lt[-1]), sl_lt[0]))
        v_ok = Mux(v_in, Mux(v_out, v_lt[0], v_lt[1]), Mux(v_out, v_lt[-1], v_lt[0]))
        # a pass over keys next cycle: a command's, or this one's if its last key does not enter now; its room.
        # ``start`` chooses last (round 25: at prod_rows = 1 it was spread through the terms, state -> cmd.ready ->
        # start -> kr_app 8.0 levels).  Left out as they never count: an emit's end (in OUT only) and a
        # streamed score's ``last`` (a pass over streamed scores takes no keys)
        run_ok = Signal()
        m.d.comb += run_ok.eq((state == PASS) & ~cfg.src & ~(fire & kp.last) & sl_ok)
        m.d.sync += [kr_max.eq(Mux(start, ~cp.emit & ~cp.src & (cp.phase == AttnPass.MAX), run_ok & ~apply)),
                     kr_app.eq(Mux(start, ~cp.emit & ~cp.src & (cp.phase == AttnPass.APPLY), run_ok & apply & v_ok))]
        return m


@block("compute_attention", "Q.K^T, exp2 softmax state, P.V over streamed KV -> (m, l, o), maxima or rows",
       variants=({"max_keys": 65536}, {"head_dim": 32, "lanes": 4, "words": 8, "primitive": 1}),
       head_dim=16, rows=2, max_keys=64, lanes=0, primitive=0, words=1, max_words=0, prod_rows=0,
       ranges={"head_dim": Range(1, 256), "rows": Range(1, 64), "max_keys": Range(1, 1 << 20, pow2=True),
               "lanes": Range(0, 256), "primitive": Range(0, 1), "words": Range(1, 256, pow2=True),
               "max_words": Range(0, 256), "prod_rows": Range(0, 64)})
def _attention(head_dim, rows, max_keys, lanes, primitive, words, max_words, prod_rows):
    return AttentionUnit(head_dim, rows, max_keys, lanes=lanes or None, primitive=bool(primitive), words=words,
                         max_words=max_words or None, prod_rows=prod_rows or None)
