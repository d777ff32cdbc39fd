"""Attention unit: Q.K^T over local KV blocks, softmax state, P.V (golden ``fixed.scores``,
``fixed.partial_state``, ``fixed.finalize``, ``fixed.encode_state``), bit for bit.

``rows`` query rows run side by side against one K/V stream: the ``group`` query heads of one
KV head (GQA: K and V are read once per group) times some tokens.  The loader maps rows to
(token, head); the unit only sees rows.

A job is ``cmd.keys`` keys, in two passes, because the fixed-point spec defines the softmax
with the row maximum of *all* visible keys (p = exp2(s - m) with the final m; no running-max
rescale, whose rounding would differ):
  pass 1 (``k``): s = sat32(rshr(dot(q, kq) * A_k, -(exp_q + E_k + S_FRAC))) per row, kept in
          a score buffer with its valid bit (key position <= row position, and the key's block
          readable in the local replica directory); m = max valid s (M_EMPTY if none);
  pass 2 (``v``): p = exp2(s - m) (LUT), l += p, w = sat32(rshr(p A_v, 15 - O_FRAC - E_v)),
          o += w * vq;
then ``o`` emits 32-bit words, per row: ``cmd.final`` = 0, the (m, l, o) state words
[m, l, o_0 .. o_d-1] (``encode_state``, for the NIC's SOFTMAX_MERGE); 1, the finalized row
o / l as X32 (``finalize``).  TLAST on the last word of the job.

``cmd.phase`` runs the decode protocol of docs/fixed-point.md section 7.4: FULL = both passes
with the local maximum; MAX = pass 1 only, emitting one word per row (the local maximum, for
ReduceOp.MAX); APPLY = pass 2 only, over the scores kept from the MAX job, with the global M
written through ``mref`` (``partial_state(..., m_ref=M)``).

``score_buffer=False`` drops the score buffer (``max_keys`` x rows x 33 bits, which at tens of
thousands of local keys would not fit the K26's block RAM): pass 2 then takes K again, beside V,
and recomputes each score with the same datapath (K read twice instead of a buffer; ``max_keys``
only sizes the counters).  APPLY then also takes K and V.

One key per cycle in each pass (rows x head_dim INT4 x int16 products in pass 1, rows x
head_dim int32 x INT4 in pass 2), then rows x (head_dim + 2) output cycles.
"""
from __future__ import annotations

import enum

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from mcf.hw.arith import bitlen, exp2_rom, log2_exact, rshr, rshr_pos, sat
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.compute.common import AttentionState, MemWriteSignature
from mcf.hw.compute.directory import ReplicaDirectory
from mcf.hw.registry import block
from mcf.spec import fixed as fx
from mcf.spec.fixed import EXP_BITS, INT32_MIN, KV_A_BITS, MANT_BITS, POS_BITS, W_BITS
from mcf.spec.plan import REPLICA_STATE_BITS


def q_layout(head_dim):
    return data.StructLayout({"mant": head_dim * MANT_BITS, "exp": signed(EXP_BITS), "pos": POS_BITS})


def k_layout(head_dim, block_bits):
    return data.StructLayout({"q": head_dim * W_BITS, "a": KV_A_BITS, "e": signed(EXP_BITS), "pos": POS_BITS,
                              "block": block_bits})


def v_layout(head_dim):
    return data.StructLayout({"q": head_dim * W_BITS, "a": KV_A_BITS, "e": signed(EXP_BITS)})


class Phase(enum.IntEnum):
    """``cmd.phase``: both passes, or the decode protocol's two halves (docs/fixed-point.md 7.4)."""
    FULL = 0        # scores, softmax state and P.V in one job
    MAX = 1         # pass 1 only: the rows' local maxima (the input of a ReduceOp.MAX round)
    APPLY = 2       # pass 2 only, against the global M written through ``mref``


def cmd_layout(max_keys):
    return data.StructLayout({"keys": range(1, max_keys + 1), "final": 1, "phase": 2})


class AttentionUnit(wiring.Component):
    def __init__(self, head_dim: int = 16, rows: int = 2, max_keys: int = 64, block_bits: int = 8,
                 score_buffer: bool = True):
        log2_exact(max_keys, "max_keys")
        if rows < 1 or head_dim < 1:
            raise ValueError(f"rows={rows}, head_dim={head_dim}: must be >= 1")
        self.head_dim, self.rows, self.max_keys, self.block_bits = head_dim, rows, max_keys, block_bits
        self.score_buffer = bool(score_buffer)
        super().__init__({
            "q": In(MemWriteSignature(max(ceil_log2(rows), 1), q_layout(head_dim).size)),
            "cmd": In(stream.Signature(cmd_layout(max_keys))),
            "k": In(stream.Signature(k_layout(head_dim, block_bits))),
            "v": In(stream.Signature(v_layout(head_dim))),
            "o": Out(AXIStreamSignature(32)),
            # the runtime's write port into the local replica directory
            "dir_en": In(1), "dir_block": In(block_bits), "dir_state": In(REPLICA_STATE_BITS),
            # the global row maximum M (after a ReduceOp.MAX round), for an APPLY job
            "mref_en": In(1), "mref_row": In(max(ceil_log2(rows), 1)), "mref": In(signed(32)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        D, R, S = self.head_dim, self.rows, self.max_keys
        m.submodules.directory = dr = ReplicaDirectory(self.block_bits)
        m.d.comb += [dr.wr_en.eq(self.dir_en), dr.wr_block.eq(self.dir_block), dr.wr_state.eq(self.dir_state)]

        qrows = [Signal(q_layout(D), name=f"q{r}") for r in range(R)]
        for r in range(R):
            with m.If(self.q.en & (self.q.addr == r)):
                m.d.sync += qrows[r].eq(self.q.data)

        # States: idle -> keys (pass 1) -> drain1 -> values (pass 2) -> drain2 -> out
        IDLE, KEYS, VALS, OUT = AttentionState
        state = Signal(AttentionState)
        final, max_only = Signal(), Signal()
        keys = Signal(range(S + 1))
        j = Signal(range(S + 1))
        m.d.comb += [self.busy.eq(state != IDLE), self.cmd.ready.eq(state == IDLE)]
        start = Signal()
        m.d.comb += start.eq(self.cmd.valid & self.cmd.ready)
        with m.If(start):
            m.d.sync += [keys.eq(self.cmd.payload.keys), final.eq(self.cmd.payload.final),
                         max_only.eq(self.cmd.payload.phase == Phase.MAX), j.eq(0),
                         state.eq(Mux(self.cmd.payload.phase == Phase.APPLY, VALS, KEYS))]

        if self.score_buffer:
            score_w = R * 33        # per row: 32-bit score + valid
            m.submodules.sbuf = sbuf = memory.Memory(shape=score_w, depth=S, init=[])
            swr = sbuf.write_port()
            srd = sbuf.read_port()

        # --- pass 1: scores --------------------------------------------------------------------
        # Without a score buffer, pass 2 takes K again beside V and recomputes the scores.
        k_fire, joint = Signal(), Signal()
        if self.score_buffer:
            m.d.comb += self.k.ready.eq((state == KEYS) & (j < keys))
        else:
            m.d.comb += joint.eq((state == VALS) & (j < keys) & self.k.valid & self.v.valid)
            m.d.comb += self.k.ready.eq(((state == KEYS) & (j < keys)) | joint)
        m.d.comb += k_fire.eq(self.k.valid & self.k.ready)
        m.d.comb += [dr.lookup_en.eq(1), dr.lookup_block.eq(self.k.payload.block)]
        k1v, k1pass1 = Signal(), Signal()
        k1 = Signal(k_layout(D, self.block_bits))
        j1 = Signal(range(S))
        dot1 = [Signal(signed(21 + ceil_log2(D)), name=f"dot{r}") for r in range(R)]
        m.d.sync += [k1v.eq(k_fire), k1pass1.eq(k_fire & (state == KEYS)), k1.eq(self.k.payload), j1.eq(j)]
        for r in range(R):
            terms = [self.k.payload.q[4 * i:4 * i + 4].as_signed() * qrows[r].mant[16 * i:16 * i + 16].as_signed()
                     for i in range(D)]
            total = terms[0]
            for t in terms[1:]:
                total = total + t
            m.d.sync += dot1[r].eq(total)
        with m.If(k_fire):
            m.d.sync += j.eq(j + 1)

        mrow = [Signal(signed(32), name=f"m{r}", init=INT32_MIN) for r in range(R)]
        words = []
        for r in range(R):
            with m.If(start & (self.cmd.payload.phase != Phase.APPLY)):
                m.d.sync += mrow[r].eq(INT32_MIN)
            with m.If(self.mref_en & (self.mref_row == r)):
                m.d.sync += mrow[r].eq(self.mref)
            raw = dot1[r] * k1.a
            sh = Signal(signed(10), name=f"ssh{r}")
            m.d.comb += sh.eq(-(qrows[r].exp + k1.e + fx.S_FRAC))
            s = sat(m, rshr(m, raw, sh, max_left=33), 32)
            ok = Signal(name=f"ok{r}")
            m.d.comb += ok.eq(dr.readable & (k1.pos <= qrows[r].pos))
            words.append(Cat(s, ok))
            with m.If(k1pass1 & ok & (s > mrow[r])):
                m.d.sync += mrow[r].eq(s)
        if self.score_buffer:
            m.d.comb += [swr.en.eq(k1pass1), swr.addr.eq(j1), swr.data.eq(Cat(*words))]

        # --- pass 2: exp2, l, o ----------------------------------------------------------------
        v_fire = Signal()
        if self.score_buffer:
            m.d.comb += [self.v.ready.eq((state == VALS) & (j < keys)), srd.en.eq(1), srd.addr.eq(j)]
            scores1 = srd.data
        else:
            m.d.comb += self.v.ready.eq(joint)
            scores1 = Cat(*words)
        m.d.comb += v_fire.eq(self.v.valid & self.v.ready)
        with m.If(v_fire):
            m.d.sync += j.eq(j + 1)
        v1v, v2v = Signal(), Signal()
        v1, v2 = Signal(v_layout(D)), Signal(v_layout(D))
        m.d.sync += [v1v.eq(v_fire), v1.eq(self.v.payload), v2v.eq(v1v), v2.eq(v1)]
        m.submodules.exp2 = exp2 = exp2_rom()
        lacc = [Signal(signed(17 + ceil_log2(S) + 1), name=f"l{r}") for r in range(R)]
        oacc = [[Signal(signed(37 + ceil_log2(S) + 1), name=f"o{r}_{i}") for i in range(D)] for r in range(R)]
        for r in range(R):
            sword = scores1[33 * r:33 * r + 33]
            s_r, ok_r = sword[:32].as_signed(), sword[32]
            neg = Signal(unsigned(34), name=f"negd{r}")     # m - s >= 0
            m.d.comb += neg.eq(mrow[r] - s_r)
            y = rshr_pos(m, neg, Const(fx.S_FRAC - fx.EXP_LUT_BITS, 3), 35)
            rp = exp2.read_port()
            m.d.comb += [rp.en.eq(1), rp.addr.eq(y[:8])]
            n2, ok2 = Signal(range(64), name=f"n{r}"), Signal(name=f"ok2_{r}")
            big2 = Signal(name=f"big{r}")
            m.d.sync += [n2.eq(y[8:14]), big2.eq(y[8:] > 15), ok2.eq(ok_r & v1v)]
            p = Signal(16, name=f"p{r}")
            pr = rshr_pos(m, rp.data.as_unsigned(), n2, 18)
            m.d.comb += p.eq(Mux(big2 | ~ok2, 0, pr))
            wsh = Signal(signed(10), name=f"wsh{r}")
            m.d.comb += wsh.eq(fx.P_FRAC - fx.O_FRAC - v2.e)
            w = sat(m, rshr(m, p * v2.a, wsh, max_left=33), 32)
            with m.If(start):
                m.d.sync += lacc[r].eq(0)
                m.d.sync += [oacc[r][i].eq(0) for i in range(D)]
            with m.If(v2v):
                m.d.sync += lacc[r].eq(lacc[r] + p)
                for i in range(D):
                    m.d.sync += oacc[r][i].eq(oacc[r][i] + w * v2.q[4 * i:4 * i + 4].as_signed())

        # --- sequencing of the passes ---------------------------------------------------------
        drain = Signal(range(4))
        with m.If(state == KEYS):
            with m.If((j == keys) & ~k1v):
                m.d.sync += [state.eq(Mux(max_only, OUT, VALS)), j.eq(0)]
        with m.Elif(state == VALS):
            with m.If(j == keys):
                m.d.sync += drain.eq(drain + 1)
                with m.If(drain == 3):          # v1 -> v2 -> accumulators
                    m.d.sync += [drain.eq(0), state.eq(OUT)]

        # --- output: per row [m, l, o...] or finalize(o / l) ------------------------------------
        row = Signal(range(R))
        word = Signal(range(D + 2))
        phase = Signal()          # finalize: one cycle for the reciprocal LUT read
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
        with m.If(max_only):
            m.d.comb += out_word.eq(msel)
        with m.Elif(final):
            m.d.comb += out_word.eq(fin)
        with m.Elif(word == 0):
            m.d.comb += out_word.eq(msel)
        with m.Elif(word == 1):
            m.d.comb += out_word.eq(lcur)
        with m.Else():
            m.d.comb += out_word.eq(ocur)
        last_word = Mux(max_only, 1, Mux(final, word == D - 1, word == D + 1))
        emitting = Signal()
        m.d.comb += emitting.eq((state == OUT) & (~final | max_only | phase))
        m.d.comb += [self.o.tvalid.eq(emitting), self.o.tdata.eq(out_word), self.o.tkeep.eq(0xF),
                     self.o.tlast.eq(last_word & (row == R - 1))]
        with m.If((state == OUT) & final & ~max_only & ~phase):
            m.d.sync += phase.eq(1)
        with m.If(emitting & self.o.tready):
            m.d.sync += word.eq(word + 1)
            with m.If(last_word):
                m.d.sync += [word.eq(0), row.eq(row + 1), phase.eq(0)]
                with m.If(row == R - 1):
                    m.d.sync += [row.eq(0), state.eq(IDLE)]
        return m


@block("compute_attention", "Q.K^T, exp2 softmax state, P.V over local KV blocks -> (m, l, o) or rows",
       variants=({"score_buffer": 0, "max_keys": 65536},), head_dim=16, rows=2, max_keys=64,
       block_bits=8, score_buffer=1)
def _attention(head_dim, rows, max_keys, block_bits, score_buffer):
    return AttentionUnit(head_dim, rows, max_keys, block_bits, bool(score_buffer))
