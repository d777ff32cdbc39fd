"""Vector unit: the row-wise operations of a decoder layer, bit-exact with ``mcf.sw.golden.fixed``.

``lanes`` elements per cycle over a row of ``cmd.n`` elements (``max_n`` at most), in passes
over two row buffers (the operands) and one of wide products:

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

The operand buffers are block RAM (rows of thousands of elements: Qwen's 8 960): synchronous
read ports addressed with the index the pass reaches next (``i_nx``), so the beat of index
``i`` is on the read port in the cycle that uses it and a pass still takes n / lanes cycles.
A row of one beat (two for RoPE's partner read) waits one cycle after its load, the time
the block RAM needs to return what was just written.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.arith import abs_, bitlen, log2_exact, rshr, rshr_pos, sat
from mcf.hw.compute.common import VectorState
from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec import fixed as fx
from mcf.spec.fixed import EXP_BITS
from mcf.spec.isa import VecOp   # the VEC operations: one definition, the instruction set's

P_BITS = 36      # widest product before normalize: rmsnorm's rshr(m r, 14) * gain


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

    def __init__(self, max_n: int = 128, lanes: int = 1):
        log2_exact(lanes, "lanes")
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
        uses_b = Signal()
        m.d.comb += uses_b.eq((op == VecOp.RMSNORM) | (op == VecOp.MUL) | (op == VecOp.ROPE)
                              | (op == VecOp.RESIDUAL))

        m.submodules.abuf = abuf = memory.Memory(shape=32 * L, depth=NB, init=[])
        m.submodules.bbuf = bbuf = memory.Memory(shape=48 * L, depth=NB, init=[])
        aw, bw = abuf.write_port(), bbuf.write_port()
        ar = abuf.read_port()
        ar2 = abuf.read_port()       # RoPE: the partner beat
        br = bbuf.read_port()

        def lane(word, k, bits=32):
            return word[k * bits:(k + 1) * bits].as_signed()

        def tree(values, op2):
            values = list(values)
            while len(values) > 1:
                values = [op2(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                          for i in range(0, len(values), 2)]
            return values[0]

        def vmax(a, b):
            return Mux(a > b, a, b)

        IDLE, LOAD, SQ, RSQ, PROD, EMIT_N, EMIT_D = VectorState
        state = Signal(VectorState)
        i = Signal(range(NB + 1))
        i_nx = Signal(range(NB + 1))        # i of the next cycle: the buffers' read address
        m.d.comb += i_nx.eq(i)
        m.d.sync += i.eq(i_nx)
        hold = Signal()                     # one cycle after the load of a row of <= 2 beats
        nb = Signal(range(NB + 1))
        last_i = Signal()
        m.d.comb += [nb.eq(cfg.n >> lb), last_i.eq(i == nb - 1), self.busy.eq(state != IDLE)]
        ea, eb = Signal(signed(8)), Signal(signed(8))
        amax_a = Signal(32)
        amax_p = Signal(P_BITS)
        e_out = Signal(signed(10))

        m.d.comb += self.cmd.ready.eq(state == IDLE)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [cfg.eq(self.cmd.payload), state.eq(LOAD), amax_a.eq(0), amax_p.eq(0)]
            m.d.comb += i_nx.eq(0)

        # --- LOAD: both operands into the buffers; row max |a| ------------------------------
        load_ok = Signal()
        m.d.comb += load_ok.eq((state == LOAD) & self.a.valid & (~uses_b | self.b.valid))
        m.d.comb += [self.a.ready.eq(load_ok), self.b.ready.eq(load_ok & uses_b),
                     aw.en.eq(load_ok), aw.addr.eq(i), aw.data.eq(self.a.payload.x),
                     bw.en.eq(load_ok), bw.addr.eq(i), bw.data.eq(Cat(self.b.payload.x, self.b.payload.y))]
        mags = []
        for k in range(L):
            xk = lane(self.a.payload.x, k)
            mags.append(abs_(m, Cat(xk, xk[31]).as_signed()))
        mag_a = Signal(32)
        m.d.comb += mag_a.eq(tree(mags, vmax))
        m.d.sync += hold.eq(0)
        with m.If(load_ok):
            m.d.comb += i_nx.eq(i + 1)
            with m.If(mag_a > amax_a):
                m.d.sync += amax_a.eq(mag_a)
            with m.If(i == 0):
                m.d.sync += [ea.eq(self.a.payload.exp), eb.eq(self.b.payload.exp)]
            with m.If(last_i):
                m.d.comb += i_nx.eq(0)
                m.d.sync += hold.eq(nb <= 2)
                with m.If((op == VecOp.SILU) | (op == VecOp.RESIDUAL)):
                    m.d.sync += state.eq(EMIT_D)
                with m.Elif(op == VecOp.RMSNORM):
                    m.d.sync += state.eq(SQ)
                with m.Else():
                    m.d.sync += state.eq(PROD)

        # --- RMSNORM: s = max(0, bitlen(amax) - 15); m_i = sat16(rshr(x_i, s)); ss = sum m_i^2 --
        s_sh = Signal(range(33))
        bl_a = bitlen(m, amax_a)
        m.d.comb += s_sh.eq(Mux(bl_a > 15, bl_a - 15, 0))
        m.d.comb += [ar.addr.eq(i_nx), br.addr.eq(i_nx)]
        mants = [sat(m, rshr_pos(m, lane(ar.data, k), s_sh, 33), 16) for k in range(L)]
        sq = Signal(33 + lb)
        m.d.comb += sq.eq(tree([mk * mk for mk in mants], lambda a, b: a + b))
        ss = Signal(48)
        with m.If(state == LOAD):
            m.d.sync += ss.eq(0)
        with m.If((state == SQ) & ~hold):
            m.d.sync += ss.eq(ss + sq)
            m.d.comb += i_nx.eq(i + 1)
            with m.If(last_i):
                m.d.comb += i_nx.eq(0)
                m.d.sync += state.eq(RSQ)

        # rsqrt(v): c = bitlen(v) rounded up to even, idx = rshr(v, c - 10), r = LUT[idx - 256]
        v = Signal(49)
        eps_sh = rshr_pos(m, cfg.eps, s_sh * 2, 34)
        m.d.comb += v.eq(ss + eps_sh)
        bv = bitlen(m, v)
        c = Signal(range(52))
        m.d.comb += c.eq(bv + bv[0])
        idx = rshr(m, v, c - fx.RSQRT_IDX_BITS, max_left=10)
        m.submodules.rsqrt = rs_rom = memory.Memory(shape=16, depth=len(fx.RSQRT_LUT),
                                                    init=[int(x) for x in fx.RSQRT_LUT])
        rs = rs_rom.read_port(domain="comb")
        m.d.comb += rs.addr.eq(idx - (1 << (fx.RSQRT_IDX_BITS - 2)))
        r_q, k_q = Signal(17), Signal(range(32))
        with m.If(state == RSQ):
            m.d.sync += [r_q.eq(Mux(v > 0, rs.data, 0)), k_q.eq(c >> 1), state.eq(PROD)]

        # --- PROD: wide products p_i; row max |p| (EMIT_N computes them again) ------------------
        half = Signal(range(NB + 1))            # half a RoPE head, in beats
        m.d.comb += half.eq(cfg.n >> (lb + 1))
        upper = Signal()
        m.d.comb += [upper.eq(i >= half), ar2.addr.eq(Mux(i_nx >= half, i_nx - half, i_nx + half))]
        ps, pmags = [], []
        for k in range(L):
            ak = lane(ar.data, k)
            # BFP16 operands (MUL, ROPE, PRESCALE) are int16 mantissas, RoPE's cos / sin and the
            # RMSNORM gain int16: 16-bit multiplier inputs.  One multiplier per lane serves
            # RMSNORM (rshr(m r, 14) x gain), MUL (a x b), ROPE (a x cos) and PRESCALE (a x C_M).
            a16, a2_16 = ak[:16].as_signed(), lane(ar2.data, k)[:16].as_signed()
            bx16, by = lane(br.data, k)[:16].as_signed(), lane(br.data[32 * L:], k, 16)
            # |m r| < 2^15 2^16, so rshr(m r, 14) fits 19 bits (sign included)
            rms_t = rshr_pos(m, mants[k] * r_q, Const(fx.RSQRT_FRAC, 4), 40)
            mx, my = Signal(signed(20), name=f"mx{k}"), Signal(signed(17), name=f"my{k}")
            m.d.comb += [mx.eq(Mux(op == VecOp.RMSNORM, rms_t, a16)), my.eq(Mux(op == VecOp.PRESCALE, cfg.cm, bx16))]
            prod = Signal(signed(37), name=f"prod{k}")
            m.d.comb += prod.eq(mx * my)
            rope_t = Signal(signed(40), name=f"rope_t{k}")
            m.d.comb += rope_t.eq(Mux(upper, prod + a2_16 * by, prod - a2_16 * by))
            rope_p = rshr_pos(m, rope_t, Const(fx.ROPE_FRAC, 4), 41)
            p = Signal(signed(P_BITS), name=f"p{k}")
            with m.If(op == VecOp.TO_BFP):
                m.d.comb += p.eq(ak)
            with m.Elif(op == VecOp.ROPE):
                m.d.comb += p.eq(rope_p)
            with m.Elif((op == VecOp.RMSNORM) | (op == VecOp.MUL) | (op == VecOp.PRESCALE)):
                m.d.comb += p.eq(prod)
            ps.append(p)
            pmags.append(abs_(m, Cat(p, p[-1]).as_signed()))
        mag_p = Signal(P_BITS)
        m.d.comb += mag_p.eq(tree(pmags, vmax))
        with m.If((state == PROD) & ~hold):
            m.d.comb += i_nx.eq(i + 1)
            with m.If(mag_p > amax_p):
                m.d.sync += amax_p.eq(mag_p)
            with m.If(last_i):
                m.d.comb += i_nx.eq(0)
                m.d.sync += state.eq(EMIT_N)
                with m.If(op == VecOp.TO_BFP):
                    m.d.sync += e_out.eq(-fx.X_FRAC)
                with m.Elif(op == VecOp.RMSNORM):
                    m.d.sync += e_out.eq(-cfg.gain_exp - k_q)
                with m.Elif(op == VecOp.MUL):
                    m.d.sync += e_out.eq(ea + eb)
                with m.Elif(op == VecOp.ROPE):
                    m.d.sync += e_out.eq(ea)
                with m.Elif(op == VecOp.PRESCALE):
                    m.d.sync += e_out.eq(ea - cfg.ce)

        # --- EMIT_N: normalize (sh = max(0, bitlen(amax p) - 15)) -------------------------------
        bl_p = bitlen(m, amax_p)
        sh_p = Signal(range(P_BITS + 1))
        m.d.comb += sh_p.eq(Mux(bl_p > 15, bl_p - 15, 0))
        mant_o = [sat(m, rshr_pos(m, ps[k], sh_p, P_BITS + 1), 16) for k in range(L)]

        # --- EMIT_D: SILU and RESIDUAL straight from the operand buffers ------------------------
        nsig = fx.SIGMOID_RANGE << fx.SIGMOID_STEP_BITS
        m.submodules.sigmoid = sg_rom = memory.Memory(shape=16, depth=2 * nsig,
                                                      init=[int(x) for x in fx.SIGMOID_LUT])
        silus, resids = [], []
        for k in range(L):
            ak = lane(ar.data, k)
            sidx = rshr_pos(m, ak, Const(fx.X_FRAC - fx.SIGMOID_STEP_BITS, 4), 33)
            sg = sg_rom.read_port(domain="comb")
            m.d.comb += sg.addr.eq(sidx + nsig)
            sig = Signal(17, name=f"sig{k}")
            m.d.comb += sig.eq(Mux(sidx >= nsig, 1 << fx.P_FRAC, Mux(sidx < -nsig, 0, sg.data)))
            silus.append(sat(m, rshr_pos(m, ak * sig, Const(fx.P_FRAC, 4), 50), 32))
            resids.append(sat(m, ak + lane(br.data, k), 32))

        emitting = Signal()
        m.d.comb += emitting.eq(((state == EMIT_N) | (state == EMIT_D)) & ~hold)
        m.d.comb += [self.o.valid.eq(emitting), self.o.payload.last.eq(last_i)]
        with m.If(state == EMIT_N):
            m.d.comb += [self.o.payload.x.eq(Cat(*[Cat(mk, mk[15].replicate(16)) for mk in mant_o])),
                         self.o.payload.exp.eq(e_out + sh_p)]
        with m.Elif(op == VecOp.SILU):
            m.d.comb += self.o.payload.x.eq(Cat(*silus))
        with m.Else():
            m.d.comb += self.o.payload.x.eq(Cat(*resids))
        with m.If(emitting & self.o.ready):
            m.d.comb += i_nx.eq(i + 1)
            with m.If(last_i):
                m.d.comb += i_nx.eq(0)
                m.d.sync += state.eq(IDLE)
        return m


@block("compute_vector", "RMSNorm, RoPE, SiLU, BFP multiply / normalize, residual (lanes per cycle)",
       variants=({"lanes": 8},), max_n=128, lanes=1,
       ranges={"max_n": Range(1, 1 << 16), "lanes": Range(1, 256, pow2=True)})
def _vector(max_n, lanes):
    return VectorUnit(max_n, lanes)
