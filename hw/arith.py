"""Helpers every block shares: the build-time ``log2_exact`` that checks a size, the exp2 ROM
(the NIC's softmax merge and the attention unit read the same table), and the fixed-point
primitives of the compute units, each the RTL twin of one of ``mcf.sw.golden.fixed``
(``sat``, ``rshr``, ``bitlen``), which build combinational logic into a module and return
the result value."""
from __future__ import annotations

from amaranth import Cat, Const, Mux, Shape, Signal, signed, unsigned
from amaranth.hdl import Value
from amaranth.lib import memory
from amaranth.utils import ceil_log2

from mcf.spec.fixed import EXP2_LUT, EXP_LUT_BITS, P_FRAC


def log2_exact(value: int, what: str) -> int:
    """log2 of a power of two; ``ValueError("<what>=<value>: must be a power of two")`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value & (value - 1):
        raise ValueError(f"{what}={value}: must be a power of two")
    return value.bit_length() - 1


def exp2_rom() -> memory.Memory:
    """The exp2 table (``mcf.spec.fixed.EXP2_LUT``: 2^(-f/256) in Q.15, f = 0..255) as a ROM;
    take a ``read_port()`` (registered) or ``read_port(domain="comb")`` (asynchronous)."""
    return memory.Memory(shape=P_FRAC + 1, depth=1 << EXP_LUT_BITS, init=[int(x) for x in EXP2_LUT])


def sat(m, x: Value, bits: int) -> Signal:
    """Clamp ``x`` (signed, or unsigned read as non-negative) to ``bits`` bits signed (golden ``sat``):
    ``sat_top`` (an OR and an AND of x's bits from bits - 1 up, no compares against constants); a
    value of at most ``bits`` bits is never clamped."""
    out = Signal(signed(bits))
    x = x if x.shape().signed else Cat(x, Const(0, 1)).as_signed()
    m.d.comb += out.eq(sat_top(x, bits) if len(x) > bits else x)
    return out


def sat_top(x: Value, bits: int) -> Value:
    """Golden ``sat(x, bits)`` of a signed ``x`` wider than ``bits``, without comparators: clamped to
    the sign's bound when x's bits from bits - 1 up are neither all zeros nor all ones (an OR and an
    AND of them) (comb value, signed ``bits``)."""
    top, sign = x[bits - 1:], x[len(x) - 1]
    return Mux(top.any() & ~top.all(), Cat((~sign).replicate(bits - 1), sign), x[:bits]).as_signed()


def add_plus_one(m, a: Value, b: Value, shape, name: str, keep: bool = False) -> Value:
    """a + b + 1 as one adder (``shape`` wide): ((2 a + 1) + (2 b + 1)) >> 1, the one as the carry
    chain's carry in, the chain one bit longer (a signal ``name``, kept through synthesis if ``keep``)."""
    shape = Shape.cast(shape)
    wide = Signal(signed(shape.width + 1) if shape.signed else unsigned(shape.width + 1), name=name,
                  attrs={"keep": 1} if keep else {})
    odd = [Cat(Const(1, 1), x).as_signed() if x.shape().signed else Cat(Const(1, 1), x) for x in (a, b)]
    m.d.comb += wide.eq(odd[0] + odd[1])
    return wide[1:].as_signed() if shape.signed else wide[1:]


def add_tree(m, terms, name: str, width: int | None = None, carry: bool = False, primitive: bool = False) -> Value:
    """The sum of ``terms`` as a balanced tree of two-input adders, each its own signal kept through
    synthesis (``keep``): Yosys would otherwise merge a chain of additions into one multi-operand
    ``$macc`` and build it from full adders in LUTs (two LUTs for every three bits in; an adder on a
    carry chain reduces two bits with one).  Each adder is one bit wider than its wider operand,
    at most ``width`` bits (the caller's bound on the sum, which must hold for every partial sum:
    unsigned terms have unsigned partial sums, so any ``width`` holding the total does) (comb value).
    ``carry``: every adder adds one more, its carry in (``add_plus_one``; the sum is the terms' +
    len(terms) - 1).  ``primitive`` (round 30): the tree takes three terms an adder where it can
    (``mcf.hw.lut.add3``: a LUT6_2 and the carry chain a bit, one LUT a bit for three bits in; a carry
    adds two there), two where one pair is left."""
    terms = list(terms)
    level = 0
    if primitive:
        from mcf.hw.lut import add3
        while len(terms) > 1:
            nxt, i = [], 0
            while i < len(terms):
                group = terms[i:i + 3]
                if len(group) == 3:
                    signed_ = any(x.shape().signed for x in group)
                    n = max(len(x) + (signed_ and not x.shape().signed) for x in group) + 2
                    n = min(n, width or n)
                    nxt.append(add3(m, *group, signed(n) if signed_ else unsigned(n), f"{name}_{level}_{i // 3}t",
                                    primitive=True, cin=2 if carry else 0))
                elif len(group) == 2:
                    nxt.append(add_tree(m, group, f"{name}_{level}_{i // 3}", width, carry))
                else:
                    nxt.append(group[0])
                i += len(group)
            terms = nxt
            level += 1
        return terms[0]
    while len(terms) > 1:
        nxt = []
        for i in range(0, len(terms) - 1, 2):
            a, b = terms[i], terms[i + 1]
            n = max(len(a) + a.shape().signed * (not b.shape().signed),
                    len(b) + b.shape().signed * (not a.shape().signed)) + 1
            shape = signed(min(n, width or n)) if a.shape().signed or b.shape().signed \
                else unsigned(min(n, width or n))
            if carry:
                s = add_plus_one(m, a, b, shape, f"{name}_{level}_{i // 2}c", keep=True)
            else:
                s = Signal(shape, name=f"{name}_{level}_{i // 2}", attrs={"keep": 1})
                m.d.comb += s.eq(a + b)
            nxt.append(s)
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
        level += 1
    return terms[0]


def rshr_pos(m, x: Value, s: Value, width: int) -> Signal:
    """Round-half-up right shift by a non-negative ``s``: (x + 2^(s-1)) >> s, x for s = 0.

    Written as ((x >> (s-1)) + 1) >> 1, which equals it for s >= 1 and needs neither a
    variable left shift nor a wide adder; shifts past the width of x give 0 or -1 + 1 >> 1 = 0,
    as the golden model's ``rshr`` does for shifts beyond 62."""
    xs = _rshr_pos_operand(x)
    sc1, zero = rshr_pos_controls(len(xs), s)
    return rshr_pos_apply(m, xs, sc1, zero, width)


def _rshr_pos_operand(x: Value) -> Value:
    return x if x.shape().signed else Cat(x, Const(0, 1)).as_signed()


def rshr_pos_controls(x_bits: int, s: Value):
    """``rshr_pos``'s shift controls for an operand of ``x_bits`` bits (signed, as it takes it): the
    capped shift minus one (wraps at s = 0, where it is unused) and s = 0.  A caller may register
    them a stage before ``rshr_pos_apply``."""
    cap = x_bits + 1
    sc = Mux(s > cap, cap, s)
    return (sc - 1)[:len(Const(cap))], sc == 0


def rshr_pos_apply(m, x: Value, sc1: Value, zero: Value, width: int) -> Signal:
    """``rshr_pos`` of ``x`` from its controls (``rshr_pos_controls``)."""
    xs = _rshr_pos_operand(x)
    out = Signal(signed(width))
    pre = Signal(signed(len(xs) + 1))
    m.d.comb += pre.eq((xs >> sc1) + 1)
    m.d.comb += out.eq(Mux(zero, xs, pre >> 1))
    return out


def rshr(m, x: Value, s: Value, max_left: int) -> Signal:
    """Golden ``rshr`` with a signed shift ``s``: rounding right shift for s > 0, left shift
    by -s otherwise.  ``max_left`` bounds the left shift: callers saturate the result to
    fewer bits than that, so a longer shift of a non-zero value saturates all the same."""
    xs = x if x.shape().signed else Cat(x, Const(0, 1)).as_signed()
    right = Signal(unsigned(max(len(s) - 1, 1)))
    left = Signal(range(max_left + 1))
    neg = Signal()
    m.d.comb += [neg.eq(s < 0), right.eq(Mux(neg, 0, s))]
    m.d.comb += left.eq(Mux(neg, Mux(-s > max_left, max_left, -s), 0))
    r = rshr_pos(m, xs, right, len(xs))
    out = Signal(signed(len(xs) + max_left + 1))
    m.d.comb += out.eq(Mux(neg, xs << left, r))
    return out


def top_bit(bits: Value) -> Value:
    """Golden ``bitlen`` of a non-negative value: the position of its highest one plus one (0 -> 0),
    as a tree of 2:1 choices on halves (ceil(log2 n) levels, not a priority chain) (comb value)."""
    n = len(bits)
    if n == 1:
        return bits[0]
    h = 1 << (ceil_log2(n) - 1)
    return Mux(bits[h:].any(), top_bit(bits[h:]) + h, top_bit(bits[:h]))


def bitlen(m, x: Value, name: str | None = None) -> Signal:
    """``top_bit(x)`` in a signal of ``range(len(x) + 1)`` (comb)."""
    n = Signal(range(len(x) + 1), name=name)
    m.d.comb += n.eq(top_bit(x))
    return n


def abs_(m, x: Value) -> Signal:
    out = Signal(unsigned(len(x)))
    m.d.comb += out.eq(Mux(x < 0, -x, x))
    return out


def stage(m, value, name: str, shape=None) -> Signal:
    """``value`` registered every cycle (no enable), in a signal named ``name`` of ``shape`` (the
    value's own unless given: a layout's view stays a view): one stage of a free-running pipeline."""
    if shape is None:
        shape = value.shape() if hasattr(value, "shape") else Value.cast(value).shape()
    r = Signal(shape, name=name)
    m.d.sync += r.eq(value)
    return r


def write_indexed(m, signals, index, value, enable=None):
    """``signals[index] <= value`` (sync), one comparator per element: an Array on the left
    would give case statements without a default, which the lint rejects."""
    for i, s in enumerate(signals):
        cond = index == i
        if enable is not None:
            cond = cond & enable
        with m.If(cond):
            m.d.sync += s.eq(value)
