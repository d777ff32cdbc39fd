"""The glue's 4:1 choices as LUT6 instances (round 28, gl28).

ABC9's area model (a LUT3 .. LUT5 costs 3, a LUT6 5) maps a 4:1 choice of a wide word as a LUT3
shared by two outputs and a LUT5 an output (~1.5 LUT a bit) rather than one LUT6 a bit; measured on
a 16-way rotation of 1 024 bits (two radix-4 stages): 2 432 LUT inferred, 2 048 LUT6 instantiated
(Yosys keeps an instance as it is).  ``mux4`` builds a word's 4:1 choice either way: one
``LUT6`` instance a bit (``primitive``: I0, I1 the select, I2 .. I5 the four data bits; one logic
level) or Amaranth's plain choice (the Python simulator cannot run an instance).  ``shr_layers`` (round
29: one definition for the attention unit's shifts and EMBED's) builds a wide shift by a variable amount as
radix-4 layers of those choices.  ``add3`` (round 30) is a three-input adder at one LUT a bit: a LUT6_2
and the carry chain (CARRY4) a bit, where Yosys builds a + b + c from full adders and a second adder;
``greater`` a compare at half a LUT a bit (two bit pairs a LUT6_2 on the chain).

Simulations read the model ``lut6.v`` (``MODEL``), appended to a design's Verilog by
``mcf.hw.primitives.with_models`` beside the DSP48E2's; ``mcf synth`` drops it (``strip_models``:
everything from the first model's mark on), so Yosys maps the instances onto its own LUT6 cell."""

from pathlib import Path

from amaranth.hdl import Array, Cat, Const, Instance, Mux, Shape, Signal, signed

__all__ = ["MODEL", "MODEL_MARK", "MUX4_INIT", "MODEL_CELLS", "add3", "add_load", "carry_chain", "equal", "greater", "lut6", "lut6_2", "lut6_2_init", "lut6_init", "MUX2_PAIR_INIT", "mux2_pairs", "mux4", "mux4_shared", "muxf", "pick", "shr_layers"]

#: The cells hw/lut6.v models (``with_models`` appends it when a design instantiates one).
MODEL_CELLS = ("LUT6", "LUT6_2", "CARRY4", "MUXF7", "MUXF8", "MUXF9")

#: The LUT6 simulation model (hw/lut6.v) and its first line (where ``mcf synth`` cuts).
MODEL = Path(__file__).with_name("lut6.v")
MODEL_MARK = "// MCF simulation model of the AMD LUT6"

#: A LUT6's INIT for O = (I2, I3, I4, I5)[I0 + 2 I1]: bit a of INIT is the output at inputs a
#: (I0 its low bit), i.e. bit (2 + (a mod 4)) of a.
MUX4_INIT = sum(1 << a for a in range(64) if (a >> (2 + (a & 3))) & 1)


def lut6_init(fn):
    """A LUT6's INIT for ``fn(i0, .., i5)`` (0 / 1 each): bit a is the output at inputs a (I0 its low bit)."""
    return sum(1 << a for a in range(64) if fn(*((a >> k) & 1 for k in range(6))))


def lut6(m, fn, ins, name, cell: str | None = None):
    """One LUT6 instance of ``fn`` over up to 6 one-bit Values (the rest tied to 0), its output the
    Signal ``name``, the instance ``cell`` in ``m`` (``{name}_lut`` by default); the model hw/lut6.v in
    simulation.  (round 29: a hard boundary -- ABC9 keeps an instance as it is; one builder for the
    matrix unit's output bits and the RX engine's compares)"""
    if len(ins) > 6:
        raise ValueError(f"lut6 takes at most 6 inputs, not {len(ins)}")
    ins = list(ins) + [Const(0, 1)] * (6 - len(ins))
    o = Signal(name=name)
    m.submodules[cell or f"{name}_lut"] = Instance("LUT6", p_INIT=Const(lut6_init(fn), 64), o_O=o,
                                                   **{f"i_I{k}": v for k, v in enumerate(ins)})
    return o


def _eq3(a0, b0, a1, b1, a2, b2):
    return int(a0 == b0 and a1 == b1 and a2 == b2)


EQ3_INIT = lut6_init(_eq3)


def equal(m, a, b, primitive: bool = False, name: str = "eq"):
    """``a == b`` (one width).  ``primitive`` (the node's build, round 29): a LUT6 instance
    (``EQ3_INIT``, the model hw/lut6.v) per three bit pairs and their AND plain -- ABC9 mapped the RX
    engine's 24-bit tag compares at ~20 LUT an entry (its area model takes smaller LUTs), 8 LUT6 +
    the AND here; else the plain compare.  (Round 30: here, from hw/node.py, for the NIC's slot keys too.)"""
    if len(a) != len(b):
        raise ValueError(f"equal: widths {len(a)} and {len(b)}")
    if not primitive:
        return a == b
    outs = []
    for k in range(0, len(a), 3):
        pairs = [(a[i], b[i]) for i in range(k, min(k + 3, len(a)))]
        pairs += [(Const(0, 1), Const(0, 1))] * (3 - len(pairs))
        outs.append(lut6(m, _eq3, [v for pair in pairs for v in pair], f"{name}_{k // 3}", cell=f"{name}_{k // 3}"))
    return Cat(*outs).all()


def mux4(m, sel, items, primitive: bool = False, name: str = "mux4"):
    """``items[sel]``: four Values of one width, ``sel`` two bits.  ``primitive``: a Signal driven by
    one LUT6 instance a bit (instances ``{name}_{bit}`` in ``m``); else the plain choice."""
    if len(items) != 4:
        raise ValueError(f"mux4 takes 4 items, not {len(items)}")
    if not primitive:
        return Array(items)[sel]
    width = len(items[0])
    if any(len(v) != width for v in items):
        raise ValueError("mux4: the items differ in width")
    s = Signal(2, name=f"{name}_sel")
    o = Signal(width, name=name)
    m.d.comb += s.eq(sel)
    for b in range(width):
        m.submodules[f"{name}_{b}"] = Instance(
            "LUT6", p_INIT=Const(MUX4_INIT, 64), i_I0=s[0], i_I1=s[1],
            i_I2=items[0][b], i_I3=items[1][b], i_I4=items[2][b], i_I5=items[3][b], o_O=o[b])
    return o


#: The slice's wide-function multiplexers above a LUT6's 4:1, by the select bit they take (sel[2], [3], [4]).
MUXF_CELLS = ("MUXF7", "MUXF8", "MUXF9")


def muxf(m, sel, items, primitive: bool = False, name: str = "muxf"):
    """``items[sel]``: 8, 16 or 32 Values of one width, ``sel`` 3, 4 or 5 bits (round 32).  ``primitive``:
    a Signal a bit built as a slice builds a wide choice -- 4:1 LUT6 instances on ``sel[:2]`` (``mux4``'s
    INIT), their outputs paired by MUXF7 cells on ``sel[2]``, those by MUXF8 on ``sel[3]``, by MUXF9 on
    ``sel[4]`` (instances ``{name}_{bit}_{k}``, ``{name}_{bit}_f{7,8,9}_{k}``): 2, 4 or 8 LUT a bit (the
    MUXF cells are not LUTs; a quarter of a level each in ``mcf.sw.timing``), where ``mux4`` layers take 3,
    5 or 11 (their top 2:1 a LUT of its own) and ABC9 more; else the plain choice."""
    n = len(items)
    if n not in (8, 16, 32) or len(sel) != n.bit_length() - 1:
        raise ValueError(f"muxf takes 8, 16 or 32 items and the select's bits, not {n} and {len(sel)}")
    if not primitive:
        return Array(items)[sel]
    width = len(items[0])
    if any(len(v) != width for v in items):
        raise ValueError("muxf: the items differ in width")
    s = Signal(len(sel), name=f"{name}_sel")
    o = Signal(width, name=name)
    m.d.comb += s.eq(sel)
    for b in range(width):
        level = []
        for k in range(n // 4):
            x = Signal(name=f"{name}_{b}_{k}")
            m.submodules[f"{name}_{b}_{k}"] = Instance(
                "LUT6", p_INIT=Const(MUX4_INIT, 64), i_I0=s[0], i_I1=s[1], i_I2=items[4 * k][b],
                i_I3=items[4 * k + 1][b], i_I4=items[4 * k + 2][b], i_I5=items[4 * k + 3][b], o_O=x)
            level.append(x)
        for depth, cell in enumerate(MUXF_CELLS[:len(sel) - 2]):
            up = []
            for k in range(0, len(level), 2):
                x = Signal(name=f"{name}_{b}_f{7 + depth}_{k // 2}") if len(level) > 2 else o[b]
                m.submodules[f"{name}_{b}_f{7 + depth}_{k // 2}"] = Instance(
                    cell, i_I0=level[k], i_I1=level[k + 1], i_S=s[2 + depth], o_O=x)
                up.append(x)
            level = up
    return o


def pick(m, values, index, primitive: bool = False, name: str = "pick"):
    """values[index], 0 beyond the array: a balanced tree of 2:1 multiplexers on the index bits,
    low bits first.  ``primitive`` (the node's build, round 29): the index's low bit pairs as
    radix-4 layers of LUT6 instances (``mcf.hw.lut.mux4``, one LUT6 a bit of a 4:1 choice, where
    ABC9 maps a wide 4:1 at ~1.5 LUT a bit), an odd top bit plain; the same choice.  (Round 32: the
    first three to five index bits one ``mcf.hw.lut.muxf`` a group, 4:1 LUT6 under the slice's MUXF7 /
    F8 / F9: a 16-way choice 4 LUT a bit, not 5.)"""
    width = len(values[0])
    level = list(values) + [Const(0, width)] * ((1 << len(index)) - len(values))
    b = 0
    if primitive and len(index) >= 3:
        b = min(len(index), 5)
        level = [Const(0, width) if all(isinstance(v, Const) for v in level[k:k + (1 << b)]) else
                 muxf(m, index[:b], level[k:k + (1 << b)], primitive=True, name=f"{name}f_{k >> b}")
                 for k in range(0, len(level), 1 << b)]
    while primitive and len(index) - b >= 2:
        level = [Const(0, width) if all(isinstance(v, Const) for v in level[k:k + 4]) else
                 mux4(m, index[b:b + 2], level[k:k + 4], primitive=True, name=f"{name}{b}_{k // 4}")
                 for k in range(0, len(level), 4)]
        b += 2
    for bit in range(b, len(index)):
        level = [Mux(index[bit], level[k + 1], level[k]) for k in range(0, len(level), 2)]
    return level[0]


def shr_layers(m, x, low: int, k, step: int, name: str, nonneg: bool = False, out_bits: int | None = None):
    """``Cat(low zeros, x) >> (k 2^step)`` (arithmetic, x signed) as radix-4 layers of LUT6 4:1 choices (``mux4``, one
    instance a bit a layer; a last single bit of k a plain 2:1 choice).  A bit whose four choices are one
    and the same bit (the sign past the top, the zeros below x << bias) is passed on, not instantiated.
    ``nonneg`` (round 29): x's sign bit is known 0 (an unsigned x widened), so it is the zeros' bit: the
    choices that only read zeros past the top are passed on too.  ``out_bits`` (round 29): only the
    result's low ``out_bits`` bits, each layer's bits that none of them reads not instantiated."""
    zero = Const(0, 1)
    bits = [zero] * low + [x[b] for b in range(len(x) - 1)] + [zero if nonneg else x[len(x) - 1]]
    W = len(bits)
    layers = [(1 << (j + step), 1 << min(2, len(k) - j)) for j in range(0, len(k), 2)]
    need = [set(range(min(W, out_bits if out_bits is not None else W)))]
    for unit, ways in reversed(layers[1:]):
        need.insert(0, {min(b + i * unit, W - 1) for b in need[0] for i in range(ways)})
    for (unit, ways), needed, j in zip(layers, need, range(0, len(k), 2)):
        nsel = ways.bit_length() - 1
        choices = [[bits[min(b + i * unit, W - 1)] for i in range(ways)] for b in range(W)]
        live = [b for b in range(W) if b in needed and any(c is not choices[b][0] for c in choices[b])]
        nxt = [choices[b][0] for b in range(W)]
        if live:
            items = [Cat(*(choices[b][i] for b in live)) for i in range(ways)]
            if nsel == 2:
                out = mux4(m, k[j:j + 2], items, primitive=True, name=f"{name}_m{j // 2}")
            else:
                out = Signal(len(live), name=f"{name}_m{j // 2}")
                m.d.comb += out.eq(Mux(k[j], items[1], items[0]))
            for i, b in enumerate(live):
                nxt[b] = out[i]
        bits = nxt
    return Cat(*bits[:len(need[-1])])


def carry_chain(m, s, di, name: str, cyinit: int = 0):
    """A CARRY4 chain over ``len(s)`` bits (round 30b: one builder for add3, greater, add_load and the
    semaphores' adders): bit i's select ``s[i]`` (the propagate), data ``di[i]`` (the generate), the carry
    into bit 0 ``cyinit``; instances ``{name}_c<j>``, carries ``{name}_co<j>``.  Returns (the sum bits
    O = s ^ the carry into each bit, a Signal ``{name}_sum``; the carry out of the last bit)."""
    n = len(s)
    n4 = 4 * ((n + 3) // 4)
    s_, di_ = Cat(s, Const(0, n4 - n)), Cat(di, Const(0, n4 - n))
    total = Signal(n4, name=f"{name}_sum")
    carry, cos = Const(0, 1), []
    for j in range(0, n, 4):
        co = Signal(4, name=f"{name}_co{j // 4}")
        m.submodules[f"{name}_c{j // 4}"] = Instance(
            "CARRY4", i_CI=carry, i_CYINIT=Const(cyinit, 1) if j == 0 else Const(0, 1),
            i_DI=di_[j:j + 4], i_S=s_[j:j + 4], o_O=total[j:j + 4], o_CO=co)
        carry = co[3]
        cos.append(co)
    return total[:n], cos[(n - 1) // 4][(n - 1) % 4]


def _widen(m, values, n: int, name: str):
    """Each of ``values`` extended (or cut) to ``n`` bits, its sign kept: Signals ``{name}_op<k>`` (the
    operands of add3 / add_load, a bit each per LUT)."""
    ops = []
    for k, x in enumerate(values):
        w = Signal(signed(n) if x.shape().signed else n, name=f"{name}_op{k}")
        m.d.comb += w.eq(x)
        ops.append(w)
    return ops


#: add3's LUT6_2 (I5 = 1): O6 = I0 ^ I1 ^ I2 ^ I3 (the carry chain's propagate: the three bits' sum
#: bit and the bit below's carry-save carry), O5 = maj(I0, I1, I2) (this bit's carry-save carry).
ADD3_INIT = (sum(1 << (32 + a) for a in range(32) if bin(a & 15).count("1") & 1)
             | sum(1 << a for a in range(32) if bin(a & 7).count("1") >= 2))


def add3(m, a, b, c, shape, name: str, primitive: bool = False, cin: int = 0):
    """a + b + c + ``cin`` (0, 1 or 2) in ``shape`` (the caller's bound: the sum must fit it), a Signal
    ``name``.  ``primitive`` (round 30): one LUT6_2 a bit and a CARRY4 chain -- the carry-save form
    s_i = a_i ^ b_i ^ c_i, k_i = maj(a_i, b_i, c_i) added as s + 2 k on the chain: bit i's LUT gives the
    propagate s_i ^ k_(i-1) from its three bits and the bit below's k (that LUT's O5), whose k is also
    the chain's DI; the two carries in are the chain's CYINIT and k_(-1).  Two LUT levels (k ripples one
    LUT) and the chain, one LUT a bit; Yosys maps the plain a + b + c at ~2 LUT a bit.  Else the plain
    sum (a signal kept through synthesis)."""
    shape = Shape.cast(shape)
    o = Signal(shape, name=name, attrs={} if primitive else {"keep": 1})
    if cin not in (0, 1, 2):
        raise ValueError(f"add3: cin={cin} must be 0, 1 or 2")
    if not primitive:
        m.d.comb += o.eq(a + b + c + cin)
        return o
    n = shape.width
    ops = _widen(m, (a, b, c), n, name)
    # (the carries one signal a bit: bit i's LUT reads bit i - 1's, and a vector read by its own bits is a
    # combinational loop to Verilator's scheduler, UNOPTFLAT)
    prop, k = Signal(n, name=f"{name}_p"), [Signal(name=f"{name}_k{i}") for i in range(n)]
    k_in = [Const(cin >= 2, 1)] + k[:n - 1]
    for i in range(n):
        m.submodules[f"{name}_l{i}"] = Instance(
            "LUT6_2", p_INIT=Const(ADD3_INIT, 64), i_I0=ops[0][i], i_I1=ops[1][i], i_I2=ops[2][i], i_I3=k_in[i],
            i_I4=Const(0, 1), i_I5=Const(1, 1), o_O6=prop[i], o_O5=k[i])
    total, _ = carry_chain(m, prop, Cat(*k_in), name, cyinit=int(cin >= 1))
    m.d.comb += o.eq(total)
    return o


def greater(m, a, b, name: str, primitive: bool = False):
    """``a > b`` (one width, both signed or both unsigned), a Signal ``name``.  ``primitive`` (round 30):
    two bit pairs a LUT -- a LUT6_2 per pair of bits, O6 their equality (the carry chain's propagate), O5
    a's pair above b's (its DI; the top pair's sign bits inverted when signed) -- and a CARRY4 chain from
    the low pair up: half a LUT a bit, where Yosys's compare (a subtraction on the chain) takes one.
    Else the plain compare."""
    if len(a) != len(b) or a.shape().signed != b.shape().signed:
        raise ValueError(f"greater: {a.shape()} and {b.shape()}")
    o = Signal(name=name)
    if not primitive:
        m.d.comb += o.eq(a > b)
        return o
    n, sgn = len(a), a.shape().signed
    ua, ub = a.as_unsigned(), b.as_unsigned()
    pairs = (n + 1) // 2
    eqs, gts = Signal(pairs, name=f"{name}_eq"), Signal(pairs, name=f"{name}_gt")
    for j in range(pairs):
        lo, hi = 2 * j, min(2 * j + 1, n - 1)
        top = sgn and hi == n - 1
        if hi == lo:                                  # a single top bit: I1, I3 tied low
            ins = [ua[lo], Const(0, 1), ub[lo], Const(0, 1)]
        else:
            ins = [ua[lo], ua[hi], ub[lo], ub[hi]]

        def value(x0, x1, inv):                       # the pair's value (its top bit inverted: signed)
            return x0 + 2 * (x1 ^ inv) if hi != lo else x0 ^ inv

        init = 0
        for x in range(32):                            # I0 .. I4 (I4 tied low), I5 = 1
            i0, i1, i2, i3 = (x >> 0) & 1, (x >> 1) & 1, (x >> 2) & 1, (x >> 3) & 1
            va, vb = value(i0, i1, int(top)), value(i2, i3, int(top))
            init |= int(va == vb) << (32 + x)
            init |= int(va > vb) << x
        m.submodules[f"{name}_l{j}"] = Instance(
            "LUT6_2", p_INIT=Const(init, 64), i_I0=ins[0], i_I1=ins[1], i_I2=ins[2], i_I3=ins[3],
            i_I4=Const(0, 1), i_I5=Const(1, 1), o_O6=eqs[j], o_O5=gts[j])
    _, above = carry_chain(m, eqs, gts, name)
    m.d.comb += o.eq(above)
    return o


def add_load(m, a, b, d, load, shape, name: str, primitive: bool = False, en=None):
    """``load ? d : a + (en ? b : 0)`` in ``shape`` (the caller's bound), a Signal ``name`` (``en`` None: b
    always).  ``primitive`` (round 30b): one LUT6_2 a bit on a CARRY4 chain -- the chain adds x + y with x =
    load ? d : a and y = load ? 0 : en & b, bit i's LUT giving the propagate x_i ^ y_i (O6, from a_i, b_i, d_i,
    load and en) and x_i (O5, the chain's DI) -- where ABC9 maps the adder and the load's choice at ~1.7 LUT a
    bit (the attention unit's row sums ``l#``; round 31, with ``en``: the matrix unit's pv y, ``pv_y``).
    Else the plain choice of the sum."""
    shape = Shape.cast(shape)
    o = Signal(shape, name=name)
    if not primitive:
        m.d.comb += o.eq(Mux(load, d, a + (b if en is None else Mux(en, b, 0))))
        return o
    n = shape.width
    ops = _widen(m, (a, b, d), n, name)
    ld = Signal(name=f"{name}_ld")
    m.d.comb += ld.eq(load)
    if en is None:
        gate = Const(0, 1)
    else:
        gate = Signal(name=f"{name}_en")
        m.d.comb += gate.eq(en)

    def fn(i0, i1, i2, i3, i4):              # I0 a_i, I1 b_i, I2 d_i, I3 load, I4 en (without en: not read)
        x = i2 if i3 else i0
        y = 0 if i3 else i1 & (i4 if en is not None else 1)
        return x ^ y, x
    init = 0
    for v in range(32):
        o6, o5 = fn(*((v >> k) & 1 for k in range(5)))
        init |= (o6 << (32 + v)) | (o5 << v)
    prop, di = Signal(n, name=f"{name}_p"), Signal(n, name=f"{name}_x")
    for i in range(n):
        m.submodules[f"{name}_l{i}"] = Instance(
            "LUT6_2", p_INIT=Const(init, 64), i_I0=ops[0][i], i_I1=ops[1][i], i_I2=ops[2][i], i_I3=ld,
            i_I4=gate, i_I5=Const(1, 1), o_O6=prop[i], o_O5=di[i])
    total, _ = carry_chain(m, prop, di, name)
    m.d.comb += o.eq(total)
    return o


def lut6_2_init(o6, o5):
    """A LUT6_2's INIT (I5 = 1): O6 = ``o6(i0, .., i4)``, O5 = ``o5(i0, .., i4)`` (each 0 / 1)."""
    return lut6_init(lambda *i: o6(*i[:5]) if i[5] else o5(*i[:5]))


def lut6_2(m, init, ins, o6, o5, name):
    """One LUT6_2 instance ``name`` in ``m`` over up to 5 one-bit Values (the rest tied to 0), I5 = 1."""
    ins = list(ins) + [Const(0, 1)] * (5 - len(ins))
    m.submodules[name] = Instance("LUT6_2", p_INIT=Const(init, 64), i_I5=Const(1, 1), o_O6=o6, o_O5=o5,
                                  **{f"i_I{k}": v for k, v in enumerate(ins)})


def mux4_shared(m, sel, choices, name: str):
    """One bit per entry of ``choices`` (four one-bit Values each, Python objects: one object a signal, a
    ``Const`` folded into the INIT), the one ``sel`` (two bits) picks (round 31): a bit whose four are one
    object is that object; two bits whose choices together read at most three signals are one LUT6_2
    instance (I0, I1 the select, I2 .. I4 the signals; O6 the first bit, O5 the second), the rest a LUT6
    each.  A shifter's first layer reads the same few bits of x and its constants (zeros below x, the
    sign above) across bits a layer's step apart: about half a LUT a bit, not one."""
    s = Signal(2, name=f"{name}_sel")
    m.d.comb += s.eq(sel)
    sigs = lambda chs: list({id(c): c for ch in chs for c in ch if not isinstance(c, Const)}.values())
    n = len(choices)
    outs, done = [None] * n, [False] * n

    def fn(ch, ins):                       # the bit's function of (s0, s1, ins...)
        idx = {id(c): i for i, c in enumerate(ins)}
        return lambda s0, s1, *v: (lambda c: c.value if isinstance(c, Const) else v[idx[id(c)]])(ch[s0 + 2 * s1])
    for j in range(n):
        if done[j]:
            continue
        done[j] = True
        if all(c is choices[j][0] for c in choices[j]):
            outs[j] = choices[j][0]
            continue
        partner = next((i for i in range(j + 1, n) if not done[i] and not all(c is choices[i][0] for c in choices[i])
                        and len(sigs([choices[j], choices[i]])) <= 3), None)
        if partner is None:
            ins = sigs([choices[j]])
            outs[j] = lut6(m, lambda s0, s1, *v, f=fn(choices[j], ins): f(s0, s1, *v), [s[0], s[1], *ins],
                           f"{name}_{j}", cell=f"{name}_{j}")
            continue
        done[partner] = True
        ins = sigs([choices[j], choices[partner]])
        f6, f5 = fn(choices[j], ins), fn(choices[partner], ins)
        outs[j], outs[partner] = Signal(name=f"{name}_{j}"), Signal(name=f"{name}_{partner}")
        pad = [Const(0, 1)] * (3 - len(ins))
        lut6_2(m, lut6_2_init(lambda s0, s1, *v: f6(s0, s1, *v[:len(ins)]),
                                lambda s0, s1, *v: f5(s0, s1, *v[:len(ins)])),
                [s[0], s[1], *ins, *pad], outs[j], outs[partner], f"{name}_{j}")
    return outs


#: ``mux2_pairs``' LUT6_2: two bits' 2:1 choice, I0 the select, (I1, I2) and (I3, I4) the bits' (chosen, else)
MUX2_PAIR_INIT = lut6_2_init(lambda s, c0, f0, c1, f1: c0 if s else f0, lambda s, c0, f0, c1, f1: c1 if s else f1)


def mux2_pairs(m, sel, ones, zeros, primitive: bool = False, name: str = "mux2"):
    """``sel ? ones : zeros`` bit by bit (round 32, mx32: the matrix unit's accumulator top C bits for the
    next add, the file's word or P's own bits fed back; its activation buffer's two fields).  ``primitive``: two bits a
    LUT6_2 instance (the select shared), half a LUT a bit where ABC9 maps a LUT3 a bit; an odd last bit a
    plain choice.  Else the plain choice."""
    if not primitive:
        return Mux(sel, ones, zeros)
    n = len(ones)
    outs = [Signal(name=f"{name}{k}") for k in range(n)]
    for k in range(0, n - 1, 2):
        lut6_2(m, MUX2_PAIR_INIT, [sel, ones[k], zeros[k], ones[k + 1], zeros[k + 1]], outs[k], outs[k + 1],
               f"{name}{k}_lut")
    if n % 2:
        m.d.comb += outs[-1].eq(Mux(sel, ones[-1], zeros[-1]))
    return Cat(*outs)
