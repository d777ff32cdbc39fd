"""Vector unit: the row-wise operations of a decoder layer, bit-exact with ``mcf.sw.golden.fixed``.

``lanes`` elements per cycle over a row of ``cmd.n`` elements (``max_n`` at most), in passes
over two row buffers (the operands):

  op          golden                  operands (a, b)                      result
  TO_BFP      x32_to_bfp              a = X32                              BFP16 row
  RMSNORM     rmsnorm                 a = X32, b.x = gain                  BFP16 row
  SILU        silu                    a = X32                              X32
  MUL         bfp_mul                 a, b = BFP16 mantissas (+ exp)       BFP16 row
  ROPE        rope (one head)         a = BFP16 head, b = (cos, sin)[i mod d/2]  BFP16 head
  PRESCALE    prescale_query          a = BFP16, cmd.cm / cmd.ce           BFP16 row
  RESIDUAL    sat32(x + y)            a, b = X32                           X32

Every BFP16 result goes through the same ``normalize`` stage (row max |p|, shift
sh = max(0, bitlen - 15), mant = sat16(rshr(p, sh)), exp = e + sh), which needs the whole
row before the first output: load (n / lanes cycles), product pass (n / lanes, the row max of
the products), emit (n / lanes, the products computed again from the operands and
normalized); RMSNORM adds the sum-of-squares pass and the rsqrt LUT.  Exponents travel with
the data (``exp`` of the first element of a row).

The operand buffers are block RAM (rows of thousands of elements: Qwen's 8 960) with
synchronous read ports.  Every pass issues one index a cycle into one 11-stage pipeline of at
most 8 LUT levels a stage (docs/timing.md; the stages in docs/compute.md, Vector unit) that
stalls as a whole while the output waits; the output is a register.  The row constants (s, eps
>> 2s, rsqrt, sh) are registers that settle while a pass drains.  Cycles: ``vector_cycles`` in
``mcf.sim.compute.cost``.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.arith import bitlen, log2_exact, sat
from mcf.hw.arith import sat_top as arith_sat_top
from mcf.hw.compute.common import VectorState
from mcf.hw.lut import carry_chain, lut6_2, lut6_2_init, mux2_pairs, muxf
from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec import fixed as fx
from mcf.spec.fixed import EXP_BITS
from mcf.spec.isa import VecOp   # the VEC operations: one definition, the instruction set's

P_BITS = 36      # widest product before normalize: rmsnorm's rshr(m r, 14) * gain
NORM_BITS = 16   # normalize's rshr(p, sh) lies in [-2^15, 2^15]: 17 bits
FINE_BITS = 2    # normalize's shift in two steps: by its multiple of 2^FINE_BITS, then by the rest
COARSE_BITS = 5 - FINE_BITS     # the first step's amount: s[FINE_BITS:5] (s < 32)


def coarse_shift(m, x, s, width: int, primitive: bool = False, name: str = "cs"):
    """``(x >> (s << FINE_BITS))[:width]`` of a signed ``x`` (``s`` COARSE_BITS = 3 bits: an 8-way
    choice a bit).  ``primitive`` (round 28b, vt28b): ABC9 maps the 8-way choice at ~3 LUT a bit; as
    a 2-way choice by s's top bit over ``width`` + 3 * 2^FINE_BITS bits, then a 4:1 choice a bit
    (hw/lut.py's LUT6 instances) by its two low bits, it took ~1 + 1.6 (the 2-way layer's bits
    are shared by the 4:1 choices of 4 output bits); since round 32 ``mcf.hw.lut.muxf``, 2."""
    if not primitive:
        return (x >> Cat(Const(0, FINE_BITS), s))[:width]
    step = 1 << FINE_BITS
    ext = Cat(x, x[-1].replicate(8 * step + width))     # x sign-extended: every bit index below is in range
    # (round 32) the 8-way choice as two 4:1 LUT6 under a MUXF7 a bit (``muxf``): 2 LUT a bit, where round
    # 28b's 2-way layer and 4:1 took ~2.6
    return muxf(m, s, [ext[k * step:k * step + width] for k in range(8)], primitive=True, name=name)


def cmd_layout(max_n):
    return data.StructLayout({
        "op": 3, "n": range(1, max_n + 1),
        "gain_exp": signed(8),        # RMSNORM: gain exponent
        "eps": 32,                    # RMSNORM: eps_constant(n, eps)
        "cm": 16, "ce": signed(8),    # PRESCALE: score_constant(d)
    })


def a_layout(lanes=1):
    return data.StructLayout({"x": 32 * lanes, "exp": signed(EXP_BITS)})          # lanes x int32


def b_layout(lanes=1):
    return data.StructLayout({"x": 32 * lanes, "y": 16 * lanes, "exp": signed(EXP_BITS)})


def o_layout(lanes=1):
    return data.StructLayout({"x": 32 * lanes, "exp": signed(EXP_BITS), "last": 1})


class VectorUnit(wiring.Component):
    """``lanes`` elements per beat and per cycle on every pass (row lengths, and half a RoPE
    head, must be multiples of ``lanes``); element k of a beat is bits [32k +: 32] of ``x``."""

    def __init__(self, max_n: int = 128, lanes: int = 1, primitive: bool = False):
        log2_exact(lanes, "lanes")
        self.primitive = primitive      # normalize's coarse shifts as LUT6 instances (round 28b)
        if max_n % lanes:
            raise ValueError(f"lanes={lanes} does not divide max_n={max_n}")
        self.max_n, self.lanes = max_n, lanes
        super().__init__({
            "cmd": In(stream.Signature(cmd_layout(max_n))),
            "a": In(stream.Signature(a_layout(lanes))),
            "b": In(stream.Signature(b_layout(lanes))),
            "o": Out(stream.Signature(o_layout(lanes))),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        N, L = self.max_n, self.lanes
        NB = N // L
        lb = L.bit_length() - 1
        cfg = Signal(cmd_layout(N))
        op = cfg.op
        is_ = {o: Signal(name=f"is_{o.name.lower()}") for o in VecOp}   # op decoded once, registered
        uses_b = Signal()

        m.submodules.abuf = abuf = memory.Memory(shape=32 * L, depth=NB, init=[])
        m.submodules.bbuf = bbuf = memory.Memory(shape=48 * L, depth=NB, init=[])
        aw, bw = abuf.write_port(), bbuf.write_port()
        ar = abuf.read_port()
        ar2 = abuf.read_port()       # RoPE: the partner beat
        br = bbuf.read_port()

        def lane(word, k, bits=32):
            return word[k * bits:(k + 1) * bits].as_signed()

        def vor(a, b):
            return a | b

        def tree(values, op2):
            values = list(values)
            while len(values) > 1:
                values = [op2(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                          for i in range(0, len(values), 2)]
            return values[0]

        def reg(value, name, shape=None):
            """A pipeline register (no reset) of ``value``: loaded while the passes advance."""
            r = Signal(shape if shape is not None else value.shape(), name=name, reset_less=True)
            pipe.append(r.eq(value))
            return r

        pipe = []                           # every pass register, loaded when ``adv``

        def choose(sel, one, zero, shape, name):
            """``Mux(sel, one, zero)`` in ``shape`` (round 33, au33): on the node two bits a LUT6_2 (``mux2_pairs``,
            the select shared), where ABC9 maps a LUT3 a bit: the multipliers' 2:1 operands (``dsp@`` 409,
            ``my#_#`` 129 LUT)"""
            ops = [Signal(shape, name=f"{name}_{t}") for t in "10"]
            m.d.comb += [ops[0].eq(one), ops[1].eq(zero)]
            v = mux2_pairs(m, sel, ops[0].as_unsigned(), ops[1].as_unsigned(), self.primitive, name)
            return v.as_signed() if shape.signed else v

        def silu_or_sum(silu, h, l, a, b, name):
            """``silu ? (h + l)[1:33] : sat32(a + b)`` (h, l unsigned, a, b signed 32; round 33, au33): SiLU's and
            RESIDUAL's sums on one carry chain of 34 bits, RESIDUAL's operands a bit up (2 a + 2 b: its sum is
            bits 1 .. 33, SiLU's bits 1 .. 32), bit i's LUT6_2 choosing both operands' bits by ``silu`` (O6 the
            propagate, O5 the DI), then sat32 two bits a LUT6_2 (``mux2_pairs`` by the overflow: the sum's bits 32
            and 33 differ): ~51 LUT a lane, where ABC9 mapped the two adders, the clamp and the choice at ~82
            (``x#_#_#`` 656)"""
            n = 34
            ops = [Signal(n, name=f"{name}_{t}") for t in ("h", "l", "a", "b")]
            m.d.comb += [ops[0].eq(h), ops[1].eq(l), ops[2].eq(Cat(Const(0, 1), a.as_signed()).as_signed()),
                         ops[3].eq(Cat(Const(0, 1), b.as_signed()).as_signed())]
            sel = Signal(name=f"{name}_sel")
            m.d.comb += sel.eq(silu)
            init = lut6_2_init(lambda s_, h_, l_, a_, b_: (h_ if s_ else a_) ^ (l_ if s_ else b_),
                               lambda s_, h_, l_, a_, b_: h_ if s_ else a_)
            prop, di = Signal(n, name=f"{name}_p"), Signal(n, name=f"{name}_x")
            for i in range(n):
                lut6_2(m, init, [sel, ops[0][i], ops[1][i], ops[2][i], ops[3][i]], prop[i], di[i], f"{name}_l{i}")
            total, _ = carry_chain(m, prop, di, name)
            # the clamp (RESIDUAL only): bits 32 and 33 differ -> the bound of bit 33's sign
            ovf, sign = Signal(name=f"{name}_ovf"), total[33]
            m.d.comb += ovf.eq(~sel & (total[32] ^ sign))
            return mux2_pairs(m, ovf, Cat((~sign).replicate(31), sign), total[1:33], True, f"{name}_sat")

        def free(value, name, shape=None):
            """A register loaded every cycle (the settling chains of the row constants)."""
            r = Signal(shape if shape is not None else value.shape(), name=name, reset_less=True)
            m.d.sync += r.eq(value)
            return r

        def bitlen2(x, name):
            """bitlen(x) two cycles later: 6-bit groups (one LUT per result bit), then the
            highest non-zero group."""
            groups = [(g, x[g:g + 6]) for g in range(0, len(x), 6)]
            gl = [free(bitlen(m, xg), f"{name}_gl{g}") for g, xg in groups]
            nz = [free(xg != 0, f"{name}_nz{g}") for g, xg in groups]
            n = Signal(range(len(x) + 1), name=f"{name}_n")
            for (g, _), glg, nzg in zip(groups, gl, nz):
                with m.If(nzg):
                    m.d.comb += n.eq(g + glg)
            return free(n, name)

        def shift_amount(s, width, name):
            """rshr_pos's clamped shift s - 1 and s == 0 for an x of ``width`` bits, registered."""
            cap = width + 1
            sc = Signal(range(cap + 1), name=f"{name}_sc")
            m.d.comb += sc.eq(Mux(s > cap, cap, s))
            return free(sc - 1, f"{name}_sc1", range(cap + 1)), free(sc == 0, f"{name}_sc0")

        def round_shifted(x, shr, sc0, width):
            """rshr_pos's second half: x >> (s - 1) is ``shr``; ((shr + 1) >> 1), x for s = 0."""
            out = Signal(signed(width))
            pre = Signal(signed(len(shr) + 1))
            m.d.comb += [pre.eq(shr + 1), out.eq(Mux(sc0, x, pre >> 1))]
            return out

        def cneg(x, neg, name):
            """``-x`` if ``neg`` else ``x`` as (x ^ neg) + neg: the XOR in the adder's own LUTs
            (one LUT a bit, where a negation and a choice take two); one bit wider than x."""
            out = Signal(signed(len(x) + 1), name=name)
            m.d.comb += out.eq((x.as_unsigned() ^ neg.replicate(len(x))).as_signed() + neg)
            return out

        def abs_bits(x, name):
            """|x| of a signed x in len(x) unsigned bits (|-2^(n-1)| = 2^(n-1) fits)."""
            return cneg(x, x[-1], name)[:len(x)]

        def sat_top(x, bits, name):
            """golden sat(x, bits) of a signed x: clamped when its bits from bits - 1 up are not
            all its sign (no comparators: x a bit or two wider than the result)."""
            out = Signal(signed(bits), name=name)
            m.d.comb += out.eq(arith_sat_top(x, bits))
            return out

        def norm_window(x, s, name):
            """normalize's rshr(x, s) for a row of max |x| < 2^(15 + s) (s = max(0, bitlen - 15)),
            by way of w = (2 x) >> s, which lies in [-2^16, 2^16) (17 bits; 2 x for s = 0, whose
            rounding gives x back).  ``s`` < 32.  First step (registered): the shift by s's multiple
            of 2^FINE_BITS, 2^FINE_BITS - 1 bits more than w kept."""
            v = coarse_shift(m, Cat(Const(0, 1), x).as_signed(), s[FINE_BITS:5], NORM_BITS + (1 << FINE_BITS),
                             self.primitive, f"{name}_cs")
            return reg(v.as_signed(), name)

        def norm_round(v, s):
            """... second: w = v >> (s mod 2^FINE_BITS); sat16((w + 1) >> 1), in [-2^15, 2^15] before the
            clamp (which only ever takes 2^15 to 2^15 - 1)."""
            w = Signal(signed(NORM_BITS + 1))
            m.d.comb += w.eq(v >> s[:FINE_BITS])
            r = Signal(signed(NORM_BITS + 2))
            m.d.comb += r.eq(w + 1)
            return sat_top(r >> 1, 16, None)

        def rshr_const(x, s, width):
            out = Signal(signed(width))
            m.d.comb += out.eq(((x >> (s - 1)) + 1) >> 1)
            return out

        IDLE, LOAD, SQ, RSQ, PROD, EMIT_N, EMIT_D = VectorState
        state = Signal(VectorState)
        m.d.comb += self.busy.eq(state != IDLE)
        i = Signal(range(NB + 1))           # the load's write index, then each pass's read index
        nbm1 = Signal(range(NB))            # beats - 1
        half = Signal(range(NB + 1))        # half a RoPE head, in beats
        last_i = Signal()
        m.d.comb += last_i.eq(i == nbm1)
        ea, eb = Signal(signed(8)), Signal(signed(8))
        amax_a = Signal(32)
        amax_p = Signal(P_BITS)
        e_out = Signal(signed(10))
        ss = Signal(48)
        r_q, k_q = Signal(17), Signal(range(32))      # RMSNORM: rsqrt and its exponent

        m.d.comb += self.cmd.ready.eq(state == IDLE)
        with m.If(self.cmd.valid & self.cmd.ready):
            pl = self.cmd.payload
            m.d.sync += [cfg.eq(pl), state.eq(LOAD), amax_a.eq(0), amax_p.eq(0), ss.eq(0), i.eq(0),
                         nbm1.eq((pl.n >> lb) - 1), half.eq(pl.n >> (lb + 1)),
                         uses_b.eq((pl.op == VecOp.RMSNORM) | (pl.op == VecOp.MUL) | (pl.op == VecOp.ROPE)
                                   | (pl.op == VecOp.RESIDUAL))]
            m.d.sync += [is_[o].eq(pl.op == o) for o in VecOp]

        # --- LOAD: both operands into the buffers; row max |a| in a 3-stage pipeline -------------
        load_ok = Signal()
        ldrain = Signal()                   # RMSNORM: the row max settles before SQ
        m.d.comb += load_ok.eq((state == LOAD) & ~ldrain & self.a.valid & (~uses_b | self.b.valid))
        m.d.comb += [self.a.ready.eq(load_ok), self.b.ready.eq(load_ok & uses_b),
                     aw.en.eq(load_ok), aw.addr.eq(i), aw.data.eq(self.a.payload.x),
                     bw.en.eq(load_ok), bw.addr.eq(i), bw.data.eq(Cat(self.b.payload.x, self.b.payload.y))]
        lv = Signal(5)                      # the load pipeline's valid bits (the last two: settling)
        m.d.sync += lv.eq(Cat(load_ok, lv[:-1]))
        a_in = free(self.a.payload.x, "a_in")
        mags = [free(abs_bits(lane(a_in, k), f"abs_a{k}"), f"mag_a{k}")
                for k in range(L)]
        # only bitlen(max |a|) is used, and that is bitlen(OR |a|): an OR, not a max, of the lanes
        quarter = [tree(mags[j:j + max(L // 2, 1)], vor) for j in range(0, L, max(L // 2, 1))]
        mq = [free(q, f"mag_aq{j}", 32) for j, q in enumerate(quarter)]
        with m.If(lv[2]):
            m.d.sync += amax_a.eq(tree(mq + [amax_a], vor))
        with m.If(load_ok):
            m.d.sync += i.eq(i + 1)
            with m.If(i == 0):
                m.d.sync += [ea.eq(self.a.payload.exp), eb.eq(self.b.payload.exp)]
            with m.If(last_i):
                m.d.sync += i.eq(0)
                with m.If(is_[VecOp.SILU] | is_[VecOp.RESIDUAL]):
                    m.d.sync += state.eq(EMIT_D)
                with m.Elif(is_[VecOp.RMSNORM]):
                    m.d.sync += ldrain.eq(1)
                with m.Else():
                    m.d.sync += state.eq(PROD)
        with m.If(ldrain & (lv == 0)):
            m.d.sync += [ldrain.eq(0), state.eq(SQ)]

        # row constants, settling while the passes run: s = max(0, bitlen(amax_a) - 15) ...
        bl_a = bitlen2(amax_a, "bl_a")
        s_sh = free(Mux(bl_a > 15, bl_a - 15, 0), "s_sh", range(33))       # <= 17
        # ... eps_sh = rshr_pos(eps, 2 s, 34) (RSQ)
        sc1_e, sc0_e = shift_amount(s_sh * 2, 33, "se")
        eps33 = Cat(cfg.eps, Const(0, 1)).as_signed()
        eps_sh = free(round_shifted(free(eps33, "eps33"), free(eps33 >> sc1_e, "eps_shr"),
                                    free(sc0_e, "se_sc0q"), 34), "eps_sh")

        # --- the passes: issue i, one stall-all pipeline (advances unless the output waits) ---
        o_valid = Signal()
        adv = Signal()
        m.d.comb += adv.eq(~o_valid | self.o.ready)
        issued = Signal()                   # the pass has issued its last index
        passing = Signal()
        m.d.comb += passing.eq((state == SQ) | (state == PROD) | (state == EMIT_N) | (state == EMIT_D))
        issue = Signal()
        m.d.comb += issue.eq(passing & ~issued & adv)
        m.d.comb += [ar.addr.eq(i), ar.en.eq(adv), br.en.eq(adv), ar2.en.eq(adv)]
        with m.If(issue):
            m.d.sync += i.eq(i + 1)
            with m.If(last_i):
                m.d.sync += [i.eq(0), issued.eq(1)]
        D = 11
        v = Signal(D)                       # v[s]: stage s holds a beat (v[0] unused)
        lastv = Signal(D)
        upv = Signal(D)
        pipe += [v.eq(Cat(Const(0, 1), issue, v[1:-1])), lastv.eq(Cat(Const(0, 1), last_i, lastv[1:-1])),
                 upv.eq(Cat(Const(0, 1), i >= half, upv[1:-1]))]

        # stage 2: a's read port registered.  b and RoPE's partner are read two stages later
        # (their addresses, not the words, carried): their ports' data are stage 3's
        i2 = reg(reg(i, "i1"), "i2")
        m.d.comb += [br.addr.eq(i2), ar2.addr.eq(Mux(upv[2], i2 - half, i2 + half))]
        a2 = [reg(lane(ar.data, k), f"a2_{k}") for k in range(L)]
        nsig = fx.SIGMOID_RANGE << fx.SIGMOID_STEP_BITS
        sqs, mx6, my6, a7, x32_6, rp_x = [], [], [], [], [], []
        # RoPE's partner x' and sin with its sign (x cos + x' sin in the upper half, x cos - x' sin
        # in the lower) at stage 4, the operands of multiplier M2
        q4s, by4s = [], []
        for k in range(L):
            q3, by3 = lane(ar2.data, k)[:16].as_signed(), lane(br.data[32 * L:], k, 16)
            q4s.append(reg(q3, f"q4_{k}"))
            by4s.append(reg(cneg(by3, ~upv[3], f"nsin{k}"), f"by4_{k}", signed(17)))
        in_sq = free(state == SQ, "in_sq")      # RMSNORM's SQ pass (M1 squares m)
        for k in range(L):
            # stage 3: RMSNORM's x >> (s - 1); SiLU's table index
            a3 = reg(a2[k], f"a3_{k}")
            v3 = norm_window(a2[k], s_sh, f"v3_{k}")
            sidx = rshr_const(a2[k], fx.X_FRAC - fx.SIGMOID_STEP_BITS, 33)
            # the sigmoid table, one block RAM per lane (a 1 024-entry table as logic is 9-10
            # LUT levels deep): read with stage 2's index, its data at stage 3
            sg_rom = memory.Memory(shape=16, depth=2 * nsig, init=[int(x) for x in fx.SIGMOID_LUT])
            m.submodules[f"sigmoid{k}"] = sg_rom
            sg = sg_rom.read_port()
            m.d.comb += [sg.addr.eq(sidx + nsig), sg.en.eq(adv)]
            # idx >= nsig / idx < -nsig (nsig a power of two) from idx >> log2(nsig): no comparators
            above = sidx[log2_exact(nsig, "nsig"):]
            sg_hi3 = reg(~sidx[-1] & above.any(), f"sg_hi3_{k}")
            sg_lo3 = reg(sidx[-1] & ~above.all(), f"sg_lo3_{k}")
            # stage 4: m = sat16(rshr(x, s)); the sigmoid
            # (SiLU's x_hi in its place: M1's first operand, chosen in the rounding's LUTs)
            mant4 = reg(Mux(is_[VecOp.SILU], a3[16:], norm_round(v3, s_sh)), f"mant4_{k}", signed(16))
            sig4 = reg(Mux(sg_hi3, 1 << fx.P_FRAC, Mux(sg_lo3, 0, sg.data)), f"sig4_{k}", 17)
            a4 = reg(a3, f"a4_{k}")
            # stage 5: two multipliers a lane, each shared by operations that never run at once.
            # M1: m^2 (RMSNORM's SQ pass), m r (its PROD / EMIT passes), SiLU's high half;
            # M2: SiLU's low half, RoPE's x' (+-sin) (2 stages early: q4 x by4s, carried to 7)
            x1 = Signal(signed(16), name=f"m1x{k}")
            y1 = Signal(signed(18), name=f"m1y{k}")
            m.d.comb += [x1.eq(mant4),
                         y1.eq(Mux(is_[VecOp.SILU], sig4, Mux(in_sq, mant4, r_q)))]
            p1_5 = reg(x1 * y1, f"m1p5_{k}", signed(34))
            x2 = Signal(signed(17), name=f"m2x{k}")
            y2 = Signal(signed(18), name=f"m2y{k}")
            m.d.comb += [x2.eq(choose(is_[VecOp.ROPE], q4s[k], a4[:16], signed(17), f"m2xs{k}")),
                         y2.eq(choose(is_[VecOp.ROPE], by4s[k], sig4, signed(18), f"m2ys{k}"))]
            p2_5 = reg(x2 * y2, f"m2p5_{k}", signed(35))
            sq5 = p1_5[:32]                     # m^2 >= 0, < 2^30
            mr5 = sh5 = p1_5                    # |m r|, |x_hi sig| < 2^32
            sl5 = p2_5[:33]                     # x_lo sig >= 0, < 2^31
            rp_x.append(p2_5)                   # |x' sin| <= 2^30
            a5 = reg(a4, f"a5_{k}")
            bx3 = lane(br.data, k)
            bx4 = reg(bx3, f"bx4_{k}")
            bx5 = reg(bx4, f"bx5_{k}")
            sqs.append(sq5)
            # stage 6: the multiplier operands; SiLU and RESIDUAL results
            t = rshr_const(mr5, fx.RSQRT_FRAC, 40)
            mx6.append(reg(Mux(is_[VecOp.RMSNORM], t, a5[:16].as_signed()), f"mx6_{k}", signed(20)))
            my6.append(reg(choose(is_[VecOp.PRESCALE], cfg.cm, bx5[:16].as_signed(), signed(17), f"my6s{k}"),
                           f"my6_{k}", signed(17)))
            # SiLU: rshr(x sig, 15) = ((x sig >> 14) + 1) >> 1, x sig = (x_hi sig << 16) + x_lo sig,
            # so x sig >> 14 = (x_hi sig << 2) + (x_lo sig >> 14): no adder below bit 14.  Its sat32
            # never clamps (0 <= sig <= 2^15: |rshr(x sig, 15)| <= |x|), so it has none.
            # the rounding's + 1 rides in the low bits of x_hi sig << 2 (zeros): one adder
            lo_sh = 16 - (fx.P_FRAC - 1)
            silu_r = Signal(signed(33), name=f"silu_r{k}")
            m.d.comb += silu_r.eq(Cat(Const(1, lo_sh), sh5)[:33] + (sl5 >> (fx.P_FRAC - 1)))
            rsum = Signal(signed(33), name=f"rsum{k}")
            m.d.comb += rsum.eq(a5 + bx5)
            # the X32 result (SiLU or RESIDUAL), chosen here: one register for EMIT_D
            if self.primitive:
                x32 = silu_or_sum(is_[VecOp.SILU], Cat(Const(1, lo_sh), sh5)[:33], sl5 >> (fx.P_FRAC - 1),
                                  a5, bx5, f"x32s{k}")
            else:
                x32 = Mux(is_[VecOp.SILU], silu_r[1:33], sat_top(rsum, 32, f"rsat{k}"))
            x32_6.append(reg(x32, f"x32_6_{k}", 32))
            a7.append(reg(reg(a5, f"a6_{k}"), f"a7_{k}"))

        # RMSNORM: the sum of squares (stage 6: pairs of lanes, stage 7: the accumulator)
        half_l = max(L // 2, 1)
        sq6 = [reg(tree(sqs[j:j + half_l], lambda a, b: a + b), f"sq6_{j}", 33 + lb)
               for j in range(0, L, half_l)]
        with m.If((state == SQ) & v[6]):
            m.d.sync += ss.eq(ss + tree(sq6, lambda a, b: a + b))

        # rsqrt(v): c = bitlen(v) rounded up to even, idx = rshr(v, c - 10), r = LUT[idx - 256];
        # a settling chain from ss, read RSQ_CYCLES after the last square
        vq = free(ss + eps_sh, "v_q", 49)
        bv = bitlen2(vq, "bv")
        c = free(bv + bv[0], "c", range(52))
        sr = Signal(signed(8))
        m.d.comb += sr.eq(c - fx.RSQRT_IDX_BITS)
        neg = free(sr < 0, "rs_neg")
        left = free(Mux(sr < 0, Mux(-sr > 10, 10, -sr), 0), "rs_left", range(11))
        sc1_r, sc0_r = shift_amount(Mux(sr < 0, 0, sr), 50, "sr")
        v50 = Cat(vq, Const(0, 1)).as_signed()
        v50_q = free(v50, "v50_q")
        shr_v = free(v50_q >> sc1_r, "shr_v", signed(50))
        shl_v = free(v50_q << left, "shl_v", signed(61))
        neg_q, sc0_rq = free(neg, "rs_neg_q"), free(sc0_r, "sr_sc0q")
        v50_qq = free(v50_q, "v50_qq")
        idx = Signal(signed(61))
        m.d.comb += idx.eq(Mux(neg_q, shl_v, round_shifted(v50_qq, shr_v, sc0_rq, 50)))
        m.submodules.rsqrt = rs_rom = memory.Memory(shape=16, depth=len(fx.RSQRT_LUT),
                                                    init=[int(x) for x in fx.RSQRT_LUT])
        rs = rs_rom.read_port()                 # block RAM: the table's data the cycle after
        m.d.comb += rs.addr.eq(idx - (1 << (fx.RSQRT_IDX_BITS - 2)))
        vpos = free(vq != 0, "vpos")
        RSQ_CYCLES = 8
        rc = Signal(range(RSQ_CYCLES))
        with m.If(state == RSQ):
            m.d.sync += rc.eq(rc + 1)
            with m.If(rc == RSQ_CYCLES - 1):
                m.d.sync += [rc.eq(0), r_q.eq(Mux(vpos, rs.data, 0)), k_q.eq(c >> 1), state.eq(PROD)]

        # --- stage 7: the products; stage 8: p; PROD: |p| (9), lanes' max (10), row max (11) ---
        ps = []
        for k in range(L):
            prod7 = reg(mx6[k] * my6[k], f"prod7_{k}", signed(37))
            rp7 = reg(reg(rp_x[k], f"rp6_{k}", signed(33)), f"rp7_{k}", signed(33))
            # RoPE: x cos and x' (+-sin) of 16-bit operands are each at most 2^30 in magnitude, so
            # their sum lies in 33 bits (prod7's low 33 bits are x cos)
            rope_t = Signal(signed(33), name=f"rope_t{k}")
            m.d.comb += rope_t.eq(prod7[:33].as_signed() + rp7)
            p = Signal(signed(P_BITS), name=f"p{k}")
            with m.If(is_[VecOp.TO_BFP]):
                m.d.comb += p.eq(a7[k])
            with m.Elif(is_[VecOp.ROPE]):
                m.d.comb += p.eq(rshr_const(rope_t, fx.ROPE_FRAC, 34))
            with m.Else():
                m.d.comb += p.eq(prod7)
            ps.append(reg(p, f"p8_{k}"))
        pmag = [reg(abs_bits(p, f"abs_p{k}"), f"pmag9_{k}") for k, p in enumerate(ps)]
        pq = [reg(tree(pmag[j:j + half_l], vor), f"pmag10_{j}", P_BITS) for j in range(0, L, half_l)]
        with m.If((state == PROD) & v[10]):
            m.d.sync += amax_p.eq(tree(pq + [amax_p], vor))
        # normalize: sh = max(0, bitlen(amax p) - 15), settling while PROD drains
        bl_p = bitlen2(amax_p, "bl_p")
        sh_p = free(Mux(bl_p > 15, bl_p - 15, 0), "sh_p", range(P_BITS + 1))     # <= 21
        exp_o = free(e_out + sh_p, "exp_o", signed(EXP_BITS))
        v9 = [norm_window(p, sh_p, f"v9_{k}") for k, p in enumerate(ps)]
        mant_o = [norm_round(v, sh_p) for v in v9]

        # --- pass ends ----------------------------------------------------------------------
        with m.If(issued & (((state == SQ) & (v[1:7] == 0)) | ((state == PROD) & (v[1:11] == 0)))):
            m.d.sync += issued.eq(0)
            with m.If(state == SQ):
                m.d.sync += state.eq(RSQ)
            with m.Else():
                m.d.sync += state.eq(EMIT_N)
                with m.If(is_[VecOp.TO_BFP]):
                    m.d.sync += e_out.eq(-fx.X_FRAC)
                with m.Elif(is_[VecOp.RMSNORM]):
                    m.d.sync += e_out.eq(-cfg.gain_exp - k_q)
                with m.Elif(is_[VecOp.MUL]):
                    m.d.sync += e_out.eq(ea + eb)
                with m.Elif(is_[VecOp.ROPE]):
                    m.d.sync += e_out.eq(ea)
                with m.Elif(is_[VecOp.PRESCALE]):
                    m.d.sync += e_out.eq(ea - cfg.ce)

        # --- the output register: EMIT_N from stage 9, EMIT_D from stage 6 ----------------------
        o_x = Signal(32 * L)
        o_exp = Signal(signed(EXP_BITS))
        o_last = Signal()
        emit_n = state == EMIT_N
        emit_d = state == EMIT_D
        with m.If(adv):
            m.d.sync += [o_valid.eq((emit_n & v[9]) | (emit_d & v[6])),
                         o_last.eq(Mux(emit_n, lastv[9], lastv[6])),
                         o_exp.eq(Mux(emit_n, exp_o, 0))]
            with m.If(emit_n):
                m.d.sync += o_x.eq(Cat(*[Cat(mk, mk[15].replicate(16)) for mk in mant_o]))
            with m.Else():
                m.d.sync += o_x.eq(Cat(*x32_6))
        m.d.comb += [self.o.valid.eq(o_valid), self.o.payload.x.eq(o_x), self.o.payload.exp.eq(o_exp),
                     self.o.payload.last.eq(o_last)]
        with m.If(o_valid & self.o.ready & o_last):
            m.d.sync += [state.eq(IDLE), issued.eq(0)]

        with m.If(adv):
            m.d.sync += pipe
        return m


@block("compute_vector", "RMSNorm, RoPE, SiLU, BFP multiply / normalize, residual (lanes per cycle)",
       variants=({"lanes": 8},), max_n=128, lanes=1,
       ranges={"max_n": Range(1, 1 << 16), "lanes": Range(1, 256, pow2=True)})
def _vector(max_n, lanes):
    return VectorUnit(max_n, lanes)
