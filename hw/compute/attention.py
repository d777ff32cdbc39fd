"""Attention unit: Q.K^T over streamed KV, softmax state, P.V (golden ``fixed.scores``,
``fixed.partial_state``, ``fixed.finalize``, ``fixed.encode_state``), bit for bit, driven the
way the instruction set's ATTN_Q / ATTN_KV / ATTN_EMIT say (``spec/isa.py``).

The unit holds ``rows`` query rows (the GQA group's heads x some tokens: K and V are read once
per group) and, per row, a softmax state (m, l, o[head_dim]):

* **loads** (no command): ``q`` writes a query row (mantissas, exponent, position); ``clear``
  empties every row's state (m = M_EMPTY, l = o = 0: ATTN_Q QUERY does); ``st`` writes one
  state word of a row, word 0 = m, 1 = l, 2 + c = o[c] (ATTN_Q MREF writes word 0 of each row,
  ATTN_Q STATE every word).
* a **pass** (``cmd.emit = 0``) over a stream of keys that ends with ``k.last``.  A key is
  *visible* to row r iff its position <= the row's.  ``AttnPass.MAX`` takes ``k`` alone:
  s = sat32(rshr(dot(q, kq) A_k, -(e_q + E_k + S_FRAC))), m[r] = max(m[r], visible s)
  (``first``: m = INT32_MIN before).  ``AttnPass.APPLY`` takes ``k`` and ``v`` together,
  recomputes each score, p = exp2(s - m[r]) (LUT) on visible keys, l += p,
  w = sat32(rshr(p A_v, 15 - O_FRAC - E_v)), o += w vq (``first``: l = o = 0 before).
* an **emit** (``cmd.emit = 1``) of rows 0 .. ``cmd.rows`` - 1 on ``o`` (32-bit words, TLAST on
  the last) in ``EmitMode``: FINAL, head_dim X32 words per row (``finalize``, RCP LUT);
  STATE, head_dim + 2 words [m, sat32(l), sat32(o_c) ...] (``encode_state``); MAX, one word m.

l and o stay exact (``max_keys`` sizes them) across passes, so a state summed over several runs
of KV blocks (several APPLY passes without ``first``) is the golden single sum, saturated to
32 bits only when it leaves.  The golden softmax uses the row maximum of *all* visible keys (no
running-max rescale), hence the two passes: the program runs MAX over every run, then APPLY
over every run (or loads a global maximum, MREF, after a ReduceOp.MAX round: the decode
protocol of docs/fixed-point.md section 7.4).  APPLY reads K again beside V: no score buffer,
whatever the number of keys.

One key per cycle in each pass (rows x head_dim INT4 x int16 products for the scores, rows x
head_dim int32 x INT4 for P.V); a pass drains in 3 cycles after its last key; an emit takes
rows x (head_dim + 1) (FINAL), rows x (head_dim + 2) (STATE) or rows (MAX) cycles.
"""
from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from mcf.hw.arith import bitlen, exp2_rom, log2_exact, rshr, rshr_pos, sat
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.compute.common import AttentionState, MemWriteSignature
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
    return data.StructLayout({"mant": head_dim * MANT_BITS, "exp": signed(EXP_BITS), "pos": POS_BITS})


def k_layout(head_dim):
    return data.StructLayout({"q": head_dim * W_BITS, "a": KV_A_BITS, "e": signed(EXP_BITS), "pos": POS_BITS,
                              "last": 1})


def v_layout(head_dim):
    return data.StructLayout({"q": head_dim * W_BITS, "a": KV_A_BITS, "e": signed(EXP_BITS)})


def cmd_layout(rows):
    return data.StructLayout({
        "emit": 1,                      # 0: a pass over keys; 1: emit rows
        "phase": AttnPass,              # pass: MAX or APPLY
        "first": 1,                     # pass: reset m (MAX) or l and o (APPLY) first
        "mode": EmitMode,               # emit: FINAL, STATE or MAX
        "rows": range(1, rows + 1),     # emit: rows 0 .. rows - 1
    })


class StateWriteSignature(wiring.Signature):
    """One state word of one row: word 0 = m, 1 = l, 2 + c = o[c] (the producer drives all)."""

    def __init__(self, rows: int, head_dim: int):
        super().__init__({"en": Out(1), "row": Out(max(ceil_log2(rows), 1)),
                          "word": Out(range(head_dim + 2)), "data": Out(32)})


class AttentionUnit(wiring.Component):
    def __init__(self, head_dim: int = 16, rows: int = 2, max_keys: int = 64):
        log2_exact(max_keys, "max_keys")
        if rows < 1 or head_dim < 1:
            raise ValueError(f"rows={rows}, head_dim={head_dim}: must be >= 1")
        self.head_dim, self.rows, self.max_keys = head_dim, rows, max_keys
        kb = ceil_log2(max_keys)
        # Exact widths: l <= 2^15 keys (+ a loaded int32), |w vq| <= 2^34 per key (+ a loaded int32).
        self.l_width = max(32, 16 + kb) + 2
        self.o_width = 38 + kb
        super().__init__({
            "q": In(MemWriteSignature(max(ceil_log2(rows), 1), q_layout(head_dim).size)),
            "st": In(StateWriteSignature(rows, head_dim)),
            "clear": In(1),
            "cmd": In(stream.Signature(cmd_layout(rows))),
            "k": In(stream.Signature(k_layout(head_dim))),
            "v": In(stream.Signature(v_layout(head_dim))),
            "o": Out(AXIStreamSignature(32)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        D, R = self.head_dim, self.rows

        qrows = [Signal(q_layout(D), name=f"q{r}") for r in range(R)]
        for r in range(R):
            with m.If(self.q.en & (self.q.addr == r)):
                m.d.sync += qrows[r].eq(self.q.data)

        IDLE, PASS, DRAIN, OUT = AttentionState
        state = Signal(AttentionState)
        cfg = Signal(cmd_layout(R))
        apply = Signal()
        m.d.comb += [apply.eq(cfg.phase == AttnPass.APPLY), self.busy.eq(state != IDLE),
                     self.cmd.ready.eq(state == IDLE)]
        start = Signal()
        m.d.comb += start.eq(self.cmd.valid & self.cmd.ready)
        cp = self.cmd.payload
        reset_m, reset_lo = Signal(), Signal()
        m.d.comb += [reset_m.eq(start & ~cp.emit & cp.first & (cp.phase == AttnPass.MAX)),
                     reset_lo.eq(start & ~cp.emit & cp.first & (cp.phase == AttnPass.APPLY))]
        with m.If(start):
            m.d.sync += [cfg.eq(cp), state.eq(Mux(cp.emit, OUT, PASS))]

        # --- keys: MAX takes k alone, APPLY takes k and v together ---------------------------------
        fire = Signal()
        with m.If(state == PASS):
            with m.If(apply):
                m.d.comb += [fire.eq(self.k.valid & self.v.valid), self.k.ready.eq(fire), self.v.ready.eq(fire)]
            with m.Else():
                m.d.comb += [fire.eq(self.k.valid), self.k.ready.eq(1)]
        drain = Signal(range(3))
        with m.If(fire & self.k.payload.last):
            m.d.sync += [state.eq(DRAIN), drain.eq(0)]
        with m.If(state == DRAIN):
            m.d.sync += drain.eq(drain + 1)
            with m.If(drain == 2):
                m.d.sync += state.eq(IDLE)

        # --- stage 1: dot products, then the scores (comb) ---------------------------------------
        k1v = Signal()
        k1 = Signal(k_layout(D))
        v1 = Signal(v_layout(D))
        m.d.sync += [k1v.eq(fire), k1.eq(self.k.payload), v1.eq(self.v.payload)]
        dot1 = [Signal(signed(MANT_BITS + W_BITS + ceil_log2(D) + 1), name=f"dot{r}") for r in range(R)]
        for r in range(R):
            terms = [self.k.payload.q[W_BITS * i:W_BITS * (i + 1)].as_signed()
                     * qrows[r].mant[MANT_BITS * i:MANT_BITS * (i + 1)].as_signed() for i in range(D)]
            total = terms[0]
            for t in terms[1:]:
                total = total + t
            m.d.sync += dot1[r].eq(total)

        mrow = [Signal(signed(32), name=f"m{r}", init=INT32_MIN) for r in range(R)]
        lacc = [Signal(signed(self.l_width), name=f"l{r}") for r in range(R)]
        oacc = [[Signal(signed(self.o_width), name=f"o{r}_{i}") for i in range(D)] for r in range(R)]

        # --- stage 2 (APPLY): exp2 LUT read; stage 3: p, w and the accumulators -------------------
        m.submodules.exp2 = exp2 = exp2_rom()
        a2v = Signal()
        v2 = Signal(v_layout(D))
        m.d.sync += [a2v.eq(k1v & apply), v2.eq(v1)]
        for r in range(R):
            raw = dot1[r] * k1.a
            sh = Signal(signed(10), name=f"ssh{r}")
            m.d.comb += sh.eq(-(qrows[r].exp + k1.e + fx.S_FRAC))
            s = sat(m, rshr(m, raw, sh, max_left=33), 32)
            vis = Signal(name=f"vis{r}")
            m.d.comb += vis.eq(k1.pos <= qrows[r].pos)
            with m.If(k1v & ~apply & vis & (s > mrow[r])):
                m.d.sync += mrow[r].eq(s)

            neg = Signal(unsigned(34), name=f"negd{r}")     # m - s >= 0 for a visible key
            m.d.comb += neg.eq(mrow[r] - s)
            y = rshr_pos(m, neg, Const(fx.S_FRAC - fx.EXP_LUT_BITS, 3), 35)
            rp = exp2.read_port()
            m.d.comb += [rp.en.eq(1), rp.addr.eq(y[:fx.EXP_LUT_BITS])]
            n2, ok2, big2 = Signal(range(64), name=f"n{r}"), Signal(name=f"ok2_{r}"), Signal(name=f"big{r}")
            m.d.sync += [n2.eq(y[8:14]), big2.eq(y[8:] > fx.P_FRAC), ok2.eq(vis & k1v & apply)]
            p = Signal(16, name=f"p{r}")
            m.d.comb += p.eq(Mux(big2 | ~ok2, 0, rshr_pos(m, rp.data.as_unsigned(), n2, 18)))
            wsh = Signal(signed(10), name=f"wsh{r}")
            m.d.comb += wsh.eq(fx.P_FRAC - fx.O_FRAC - v2.e)
            w = sat(m, rshr(m, p * v2.a, wsh, max_left=33), 32)
            with m.If(a2v):
                m.d.sync += lacc[r].eq(lacc[r] + p)
                for i in range(D):
                    m.d.sync += oacc[r][i].eq(oacc[r][i] + w * v2.q[W_BITS * i:W_BITS * (i + 1)].as_signed())

            # resets by a pass's ``first`` and the state loads (never during a pass)
            with m.If(reset_m | self.clear):
                m.d.sync += mrow[r].eq(INT32_MIN)
            with m.If(reset_lo | self.clear):
                m.d.sync += [lacc[r].eq(0)] + [oacc[r][i].eq(0) for i in range(D)]
            with m.If(self.st.en & (self.st.row == r)):
                with m.Switch(self.st.word):
                    with m.Case(0):
                        m.d.sync += mrow[r].eq(self.st.data)
                    with m.Case(1):
                        m.d.sync += lacc[r].eq(self.st.data.as_signed())
                    for i in range(D):
                        with m.Case(2 + i):
                            m.d.sync += oacc[r][i].eq(self.st.data.as_signed())

        # --- emit: per row finalize(o / l), [m, l, o...] or m ------------------------------------
        row = Signal(range(R))
        word = Signal(range(D + 2))
        phase = Signal()          # FINAL: one cycle per row for the reciprocal LUT read
        final, maxm = Signal(), Signal()
        m.d.comb += [final.eq(cfg.mode == EmitMode.FINAL), maxm.eq(cfg.mode == EmitMode.MAX)]
        lsat = Array(sat(m, lacc[r], 32) for r in range(R))
        osat = Array(Array(sat(m, oacc[r][i], 32) for i in range(D)) for r in range(R))
        msel = Array(mrow)[row]
        lcur = Signal(signed(32))
        m.d.comb += lcur.eq(lsat[row])
        b = Signal(range(33))
        m.d.comb += b.eq(bitlen(m, lcur[:31]))
        idx = Signal(signed(48))
        m.d.comb += idx.eq(rshr(m, lcur, b - fx.RCP_IDX_BITS, max_left=10))
        m.submodules.rcp = rcp = memory.Memory(shape=16, depth=len(fx.RCP_LUT), init=[int(x) for x in fx.RCP_LUT])
        rr = rcp.read_port()
        m.d.comb += [rr.en.eq(1), rr.addr.eq(idx - (1 << (fx.RCP_IDX_BITS - 1)))]
        fsh = Signal(signed(8))
        m.d.comb += fsh.eq(b + fx.O_FRAC + fx.RCP_FRAC - fx.P_FRAC - fx.RCP_IDX_BITS - fx.X_FRAC)
        rcur = Mux(lcur > 0, rr.data, 0)
        oidx = Signal(range(D))
        m.d.comb += oidx.eq(Mux(final, word, word - 2))
        ocur = osat[row][oidx]
        fin = sat(m, rshr(m, ocur * rcur, fsh, max_left=33), 32)
        out_word = Signal(32)
        with m.If(maxm):
            m.d.comb += out_word.eq(msel)
        with m.Elif(final):
            m.d.comb += out_word.eq(fin)
        with m.Elif(word == 0):
            m.d.comb += out_word.eq(msel)
        with m.Elif(word == 1):
            m.d.comb += out_word.eq(lcur)
        with m.Else():
            m.d.comb += out_word.eq(ocur)
        last_word = Signal()
        m.d.comb += last_word.eq(Mux(maxm, 1, Mux(final, word == D - 1, word == D + 1)))
        last_row = row == cfg.rows - 1
        emitting = Signal()
        m.d.comb += emitting.eq((state == OUT) & (~final | phase))
        m.d.comb += [self.o.tvalid.eq(emitting), self.o.tdata.eq(out_word), self.o.tkeep.eq(0xF),
                     self.o.tlast.eq(last_word & last_row)]
        with m.If((state == OUT) & final & ~phase):
            m.d.sync += phase.eq(1)
        with m.If(emitting & self.o.tready):
            m.d.sync += word.eq(word + 1)
            with m.If(last_word):
                m.d.sync += [word.eq(0), row.eq(row + 1), phase.eq(0)]
                with m.If(last_row):
                    m.d.sync += [row.eq(0), state.eq(IDLE)]
        return m


@block("compute_attention", "Q.K^T, exp2 softmax state, P.V over streamed KV -> (m, l, o), maxima or rows",
       variants=({"max_keys": 65536},), head_dim=16, rows=2, max_keys=64,
       ranges={"head_dim": Range(1, 256), "rows": Range(1, 64), "max_keys": Range(1, 1 << 20, pow2=True)})
def _attention(head_dim, rows, max_keys):
    return AttentionUnit(head_dim, rows, max_keys)
