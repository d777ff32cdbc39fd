"""The execute unit's movers (hw/compute/exec/movers.py), instruction by instruction, on the
ExecUnit of the tiny node under cocotb + Icarus: cocotbext-axi AxiRam as DDR with random pauses
on all five channels, instruction words fed one at a time.  Each coroutine puts operands in DDR,
LOADs them, runs the instruction, STOREs the results and compares them with the golden
fixed-point functions (``mcf.sw.golden.fixed``) computed from the same operands.

Covered: LOAD / STORE plain and BFP rows; GEMM with a tile sub-range, a partial last SPAD beat
(P < VL: lane enables, the neighbouring words kept), with and without bias, two group sizes;
every VEC op with b_rep / b_stride 0 / b_pair and an in-place destination; EMBED and its
ILLEGAL_TOKEN fault; KVW (the whole segment, padding included); ATTN_Q / ATTN_KV / ATTN_EMIT:
multi-block runs, a short last run, MAX over several runs, EMIT FINAL / STATE / MAX, MREF and
STATE loads, gated runs (readable and UNREADABLE_BLOCK) after DIR and receive-engine directory
writes; DIR check (readable runs pass and write nothing, an INVALID entry faults UNREADABLE_BLOCK;
its cycles and a write's against sim/compute/cost.py dir_cycles); refused instructions
(ILLEGAL_INSTRUCTION)."""
import cocotb
import numpy as np
import pytest

from mcf.hw.compute.exec.unit import ExecUnit
from mcf.sim.compute import ddr
from mcf.sim.compute.exec_driver import ExecDriver
from mcf.sim.cocotb_util import params
from mcf.sim.runner import run_cocotb
from mcf.spec import isa
from mcf.spec.isa import AttnLoad, AttnPass, EmitMode, SeqFault, VecOp
from mcf.spec.kv import scale_bytes, segment_bytes, unpack_segment
from mcf.spec.node import NodeConfig
from mcf.spec.plan import ReplicaState
from mcf.sw.golden import fixed as fx

CFG = NodeConfig.tiny()
VL = CFG.vec_lanes
BEAT = 4 * VL


def i32(x):
    return ((np.asarray(x, dtype=np.int64) + (1 << 31)) % (1 << 32)) - (1 << 31)


class Spad:
    """SPAD through DDR: LOAD rows in, STORE rows out (``scratch`` is a DDR staging area; ``vl``:
    the build's words per SPAD beat)."""

    def __init__(self, drv, scratch=0x80000, vl=VL):
        self.drv, self.scratch, self.vl = drv, scratch, vl

    async def put(self, spad, values, exps=None):
        v = np.asarray(values, dtype=np.int64)
        rows, n = v.shape
        self.drv.ram.write(self.scratch, ddr.rows_bytes(v, self.vl, exps))
        await self.drv.must(isa.Load(ddr=self.scratch, spad=spad, beats=rows * n // self.vl,
                                     row_beats=0 if exps is None else n // self.vl))

    async def get(self, spad, rows, n, bfp=False):
        await self.drv.must(isa.Store(ddr=self.scratch, spad=spad, beats=rows * n // self.vl,
                                      row_beats=n // self.vl if bfp else 0))
        nbytes = rows * (n + (self.vl if bfp else 0)) * 4
        return ddr.read_rows(self.drv.ram.read(self.scratch, nbytes), rows, n, self.vl, bfp)

    async def put_bfp(self, spad, x):
        m, e = x
        await self.put(spad, m, e)

    async def get_bfp(self, spad, rows, n):
        v, e = await self.get(spad, rows, n, bfp=True)
        return i32(v), e


def bfp_rows(rng, rows, n, scale=6):
    x = fx.quantize_x32(rng.standard_normal((rows, n)) * 2.0 ** rng.integers(-4, scale, size=(rows, 1)))
    return fx.x32_to_bfp(x)


def x32_rows(rng, rows, n):
    return fx.quantize_x32(rng.standard_normal((rows, n)) * 2.0 ** rng.integers(-4, 8, size=(rows, 1)))


async def bench(dut):
    p = params()
    drv = ExecDriver(dut, seed=p.get("seed", 1))
    await drv.start()
    return drv, Spad(drv), np.random.default_rng(p.get("seed", 1))


@cocotb.test()
async def run_load_store(dut):
    """LOAD / STORE round trips, plain words and BFP rows (exponent beats in DDR)."""
    drv, sp, rng = await bench(dut)
    words = rng.integers(-2**31, 2**31, size=(5, 16))
    drv.ram.write(0x1000, ddr.words_bytes(words))
    await drv.must(isa.Load(ddr=0x1000, spad=100, beats=10, row_beats=0))
    await drv.must(isa.Store(ddr=0x2000, spad=100, beats=10, row_beats=0))
    assert drv.ram.read(0x2000, 10 * BEAT) == ddr.words_bytes(words)
    m, e = bfp_rows(rng, 3, 24)
    drv.ram.write(0x3000, ddr.rows_bytes(m, VL, e))
    await drv.must(isa.Load(ddr=0x3000, spad=200, beats=9, row_beats=3))
    drv.ram.write(0x4000, bytes(range(256)) * 2)                   # garbage under the result
    await drv.must(isa.Store(ddr=0x4000, spad=200, beats=9, row_beats=3))
    got_m, got_e = ddr.read_rows(drv.ram.read(0x4000, 12 * BEAT), 3, 24, VL, bfp=True)
    assert np.array_equal(got_m, m) and np.array_equal(got_e, e)
    # a BFP row read plain: the exponents stayed with the beats
    await drv.must(isa.Store(ddr=0x5000, spad=200, beats=9, row_beats=1))
    w = np.frombuffer(drv.ram.read(0x5000, 18 * BEAT), dtype="<i4").reshape(9, 2, VL)
    assert np.array_equal(w[:, 1, 0], np.repeat(e, 3))
    # refused: zero beats, a remainder of rows, past the SPAD
    for bad in (isa.Load(ddr=0x1000, spad=0, beats=0, row_beats=0),
                isa.Load(ddr=0x1000, spad=0, beats=10, row_beats=3),
                isa.Store(ddr=0x1000, spad=CFG.spad_beats - 2, beats=3, row_beats=0)):
        assert (await drv.run(bad)).fault == SeqFault.ILLEGAL_INSTRUCTION, bad


@cocotb.test()
async def run_gemm(dut):
    """GEMMs on the 4 x 8 array: a tile sub-range, partial SPAD beats, bias or not, G 32 / 64, and weights
    large enough for a negative w_exp (the instruction's signed field, round 32)."""
    drv, sp, rng = await bench(dut)
    P, K = CFG.mac_rows, CFG.mac_lanes
    cases = [  # n, out, group, tokens, tile0, tiles, bias, weight scale
        (64, 32, 32, 3, 4, 3, True, 0.1),       # sub-range, 12 words: a half-written beat
        (64, 16, 64, 8, 0, 4, False, 0.1),
        (128, 8, 32, 1, 0, 2, True, 0.1),       # decode: one token
        (64, 8, 32, 2, 0, 2, True, 1e6),        # w_exp -4
    ]
    for c, (n, out, group, tokens, tile0, tiles, bias, scale) in enumerate(cases):
        w = fx.quantize_weight(rng.standard_normal((out, n)) * scale, group)
        assert (w.exp < 0) == (scale > 1)
        b = fx.quantize_x32(rng.standard_normal(out) * 4) if bias else None
        blob, lay = ddr.gemm_blob(w, b, P, K)
        drv.ram.write(0x10000, blob)
        x = bfp_rows(rng, tokens, n)
        await sp.put_bfp(0, x)
        sentinel = rng.integers(-2**31, 2**31, size=(tokens, 16))
        await sp.put(400, sentinel)                        # dst rows: 2 beats each, prefilled
        src_stride, dst_stride = n // VL, 2
        o = await drv.must(isa.Gemm(blob=0x10000, n=n, total_tiles=lay.tiles, tile0=tile0, tiles=tiles,
                                    tokens=tokens, group_log2=group.bit_length() - 1, w_exp=w.exp, bias=int(bias),
                                    src=0, src_stride=src_stride, dst=400, dst_stride=dst_stride))
        rows = slice(tile0 * P, (tile0 + tiles) * P)
        sub = fx.QLinear(w.q[rows], w.scale[rows], w.exp, group)
        want = fx.linear(x, sub, None if b is None else b[rows])
        got, _ = await sp.get(400, tokens, 16)
        expect = sentinel.copy()
        expect[:, :tiles * P] = want
        assert np.array_equal(i32(got), i32(expect)), f"case {c}"
        assert o.perf["mac_beats"] == tiles * (n // K) * tokens, f"case {c}: {o.perf}"
    # refused: tokens > max, a misaligned sub-range, G below the lanes
    blob_args = dict(blob=0x10000, n=64, total_tiles=8, tiles=1, group_log2=5, w_exp=0, bias=0, src=0, src_stride=8,
                     dst=400, dst_stride=2)
    for bad in (dict(tile0=0, tokens=9), dict(tile0=1, tokens=1), dict(tile0=0, tokens=1, group_log2=2)):
        ins = isa.Gemm(**{**blob_args, **bad})
        assert (await drv.run(ins)).fault == SeqFault.ILLEGAL_INSTRUCTION, bad


@cocotb.test()
async def run_vec(dut):
    """Every VEC op: b rows shared (b_stride 0), repeated (b_rep), (cos | sin) pairs, in place."""
    drv, sp, rng = await bench(dut)
    n, rows = 32, 3
    nb = n // VL
    # RMSNORM: gains in one b row for every row
    x = x32_rows(rng, rows, n)
    gain, gexp = fx.quantize_gain(rng.standard_normal(n) * 0.3 + 1)
    eps = fx.eps_constant(n, 1e-6)
    await sp.put(0, x)
    await sp.put(100, gain[None])
    await drv.must(isa.Vec(vop=VecOp.RMSNORM, n=n, rows=rows, a=0, a_stride=nb, b=100, b_stride=0, b_rep=1, b_pair=0,
                           dst=200, dst_stride=nb, imm0=eps, imm1=gexp))
    assert all(np.array_equal(u, v) for u, v in zip(await sp.get_bfp(200, rows, n), fx.rmsnorm(x, gain, gexp, 1e-6)))
    # TO_BFP, SILU (X32), RESIDUAL in place
    await drv.must(isa.Vec(vop=VecOp.TO_BFP, n=n, rows=rows, a=0, a_stride=nb, b=0, b_stride=0, b_rep=1, b_pair=0,
                           dst=300, dst_stride=nb, imm0=0, imm1=0))
    assert all(np.array_equal(u, v) for u, v in zip(await sp.get_bfp(300, rows, n), fx.x32_to_bfp(x)))
    await drv.must(isa.Vec(vop=VecOp.SILU, n=n, rows=rows, a=0, a_stride=nb, b=0, b_stride=0, b_rep=1, b_pair=0,
                           dst=400, dst_stride=nb, imm0=0, imm1=0))
    assert np.array_equal(i32((await sp.get(400, rows, n))[0]), fx.silu(x))
    y = x32_rows(rng, rows, n)
    await sp.put(500, y)
    await drv.must(isa.Vec(vop=VecOp.RESIDUAL, n=n, rows=rows, a=0, a_stride=nb, b=500, b_stride=nb, b_rep=1,
                           b_pair=0, dst=0, dst_stride=nb, imm0=0, imm1=0))
    assert np.array_equal(i32((await sp.get(0, rows, n))[0]), fx.sat(x + y, 32))
    # MUL of two BFP rows
    a, b = bfp_rows(rng, rows, n), bfp_rows(rng, rows, n)
    await sp.put_bfp(600, a)
    await sp.put_bfp(700, b)
    await drv.must(isa.Vec(vop=VecOp.MUL, n=n, rows=rows, a=600, a_stride=nb, b=700, b_stride=nb, b_rep=1, b_pair=0,
                           dst=600, dst_stride=nb, imm0=0, imm1=0))
    assert all(np.array_equal(u, v) for u, v in zip(await sp.get_bfp(600, rows, n), fx.bfp_mul(a, b)))
    # ROPE: 2 tokens x 3 heads of d = 16, one table row per token (b_rep = heads)
    d, tokens, heads = 16, 2, 3
    q = bfp_rows(rng, tokens * heads, d)
    cos, sin = fx.rope_table(d, 1e4, [5, 11])
    await sp.put_bfp(800, q)
    await sp.put(900, ddr.rope_rows(cos, sin))
    await drv.must(isa.Vec(vop=VecOp.ROPE, n=d, rows=tokens * heads, a=800, a_stride=d // VL, b=900,
                           b_stride=d // VL, b_rep=heads, b_pair=1, dst=1000, dst_stride=d // VL, imm0=0, imm1=0))
    wm, we = fx.rope((q[0].reshape(tokens, heads, d), q[1].reshape(tokens, heads)), cos, sin)
    gm, ge = await sp.get_bfp(1000, tokens * heads, d)
    assert np.array_equal(gm, wm.reshape(-1, d)) and np.array_equal(ge, we.reshape(-1))
    # PRESCALE
    cm, ce = fx.score_constant(d)
    await drv.must(isa.Vec(vop=VecOp.PRESCALE, n=d, rows=tokens * heads, a=1000, a_stride=d // VL, b=0, b_stride=0,
                           b_rep=1, b_pair=0, dst=1100, dst_stride=d // VL, imm0=cm, imm1=ce))
    pm, pe = fx.prescale_query((gm, ge), d)
    assert all(np.array_equal(u, v) for u, v in zip(await sp.get_bfp(1100, tokens * heads, d), (pm, pe)))
    # refused: n not a multiple of VL, ROPE with an odd half, b_rep 0
    base = dict(rows=1, a=0, a_stride=1, b=0, b_stride=0, b_rep=1, b_pair=0, dst=0, dst_stride=1, imm0=0, imm1=0)
    for bad in (dict(vop=VecOp.TO_BFP, n=12), dict(vop=VecOp.ROPE, n=24), dict(vop=VecOp.MUL, n=8, b_rep=0)):
        assert (await drv.run(isa.Vec(**{**base, **bad}))).fault == SeqFault.ILLEGAL_INSTRUCTION, bad


@cocotb.test()
async def run_embed(dut):
    """EMBED rows of a W4 table (G = 16 and 32) -> X32, the matrix exponent moved so that the products are
    shifted right (by 9, rounding) and left (by 5); (round 31b) not shifted, shifted right by the product's width
    and past it (zeros) and left by 16 (w_exp 0: saturated), and negative w_exp (-1, -24: the instruction's signed
    field, round 31b); an id >= vocab faults before any table read."""
    drv, sp, rng = await bench(dut)
    for group, n, e_off, to in ((16, 64, 8, None), (32, 32, -6, None), (16, 32, 0, 0), (16, 32, 0, 21),
                                (16, 32, 0, 25), (32, 32, 0, -16),
                                (16, 32, 0, -1 - fx.X_FRAC), (32, 32, 0, -24 - fx.X_FRAC)):
        vocab = 40
        w = fx.quantize_weight(rng.standard_normal((vocab, n)), group)
        w = fx.QLinear(w.q, w.scale, w.exp + e_off if to is None else fx.X_FRAC + to, group)
        drv.ram.write(0x20000, ddr.embed_table(w))
        ids = rng.integers(0, vocab, size=5)
        drv.ram.write(0x1F000, ddr.words_bytes(ids))
        await drv.must(isa.Embed(ids=0x1F000, count=5, table=0x20000, vocab=vocab, n=n, group_log2=group.bit_length() - 1,
                                 w_exp=w.exp, dst=300, dst_stride=n // VL + 1))
        got = []
        for t in range(5):
            got.append((await sp.get(300 + t * (n // VL + 1), 1, n))[0][0])
        assert np.array_equal(i32(got), fx.embed(w, ids)), group
    drv.ram.write(0x1F000, ddr.words_bytes([1, 40, 2]))
    bad = isa.Embed(ids=0x1F000, count=3, table=0x20000, vocab=40, n=32, group_log2=5, w_exp=0, dst=0, dst_stride=4)
    assert (await drv.run(bad)).fault == SeqFault.ILLEGAL_TOKEN
    drv.ram.write(0x1F000, ddr.words_bytes([-1]))
    assert (await drv.run(bad.replace(count=1))).fault == SeqFault.ILLEGAL_TOKEN
    assert (await drv.run(bad.replace(count=9))).fault == SeqFault.ILLEGAL_INSTRUCTION


@cocotb.test()
async def run_kvw(dut):
    """KVW: BFP16 rows -> one KV4 segment, scales and zero padding included (DDR prefilled)."""
    drv, sp, rng = await bench(dut)
    d = CFG.head_dim
    for rows in (1, 5, 8):
        m, e = bfp_rows(rng, rows, d)
        m[0] = 0                                  # an all-zero row: A = E = 0
        await sp.put_bfp(0, (m, e))
        size = segment_bytes(rows, d)
        drv.ram.write(0x30000, b"\xa5" * size)
        await drv.must(isa.Kvw(src=0, rows=rows, row_stride=d // VL, seg=0x30000))
        q, a, big_e = fx.quantize_kv((m, e))
        assert drv.ram.read(0x30000, size) == ddr.segment(q, a, big_e), rows
        unpack_segment(drv.ram.read(0x30000, size), rows, d)          # padding is zero
    assert (await drv.run(isa.Kvw(src=0, rows=9, row_stride=2, seg=0x30000))).fault == SeqFault.ILLEGAL_INSTRUCTION


def kv_blocks(rng, blocks, keys, d):
    """``blocks`` K and V segments of ``keys`` tokens: KV4 triples and their bytes."""
    out = []
    for _ in range(blocks):
        k = fx.quantize_kv(bfp_rows(rng, keys, d))
        v = fx.quantize_kv(bfp_rows(rng, keys, d))
        out.append((k, v))
    return out


@cocotb.test()
async def run_attention(dut):
    """Two-pass attention over runs of KV blocks in DDR against ``fixed.attention`` /
    ``partial_state`` / ``finalize``; the decode protocol's MAX, MREF, STATE; gated runs."""
    drv, sp, rng = await bench(dut)
    d, heads = CFG.head_dim, CFG.group
    tokens = CFG.att_rows // heads
    R = tokens * heads
    qpos0 = 9
    qm, qe = bfp_rows(rng, R, d)
    q = fx.prescale_query((qm, qe), d)
    await sp.put_bfp(0, q)
    tok_stride, head_stride = heads * d // VL, d // VL
    await drv.must(isa.AttnQ(what=AttnLoad.QUERY, spad=0, tokens=tokens, heads=heads, tok_stride=tok_stride,
                             head_stride=head_stride, qpos0=qpos0))
    # run 1: 3 blocks of 4 keys (positions 0..11, a stride of 64 bytes between segments' room);
    # run 2: 1 short block of 3 keys (positions 12..14)
    keys, blocks = 4, 3
    seg = isa.pad(segment_bytes(keys, d))
    stride = 2 * seg + 64                                # K, V, a gap between blocks
    run1 = kv_blocks(rng, blocks, keys, d)
    for i, (k, v) in enumerate(run1):
        drv.ram.write(0x40000 + i * stride, ddr.segment(*k))
        drv.ram.write(0x40000 + i * stride + seg, ddr.segment(*v))
    run2 = kv_blocks(rng, 1, 3, d)
    drv.ram.write(0x48000, ddr.segment(*run2[0][0]))
    drv.ram.write(0x48000 + 0x1000, ddr.segment(*run2[0][1]))
    kv1 = dict(seg=0x40000, v_off=seg // 64, seg_stride=stride // 64, blocks=blocks, keys=keys, kpos0=0,
               pos_stride=keys, block0=10, block_stride=2, gated=0)
    kv2 = dict(seg=0x48000, v_off=0x1000 // 64, seg_stride=0, blocks=1, keys=3, kpos0=keys * blocks, pos_stride=0,
               block0=20, block_stride=0, gated=0)
    for phase in (AttnPass.MAX, AttnPass.APPLY):
        await drv.must(isa.AttnKV(phase=phase, first=1, **kv1))
        await drv.must(isa.AttnKV(phase=phase, first=0, **kv2))
    blocks_all = run1 + run2
    kq = np.concatenate([k[0] for k, _ in blocks_all])[:, None]
    ka = np.concatenate([k[1] for k, _ in blocks_all])[:, None]
    ke = np.concatenate([k[2] for k, _ in blocks_all])[:, None]
    vq = np.concatenate([v[0] for _, v in blocks_all])[:, None]
    va = np.concatenate([v[1] for _, v in blocks_all])[:, None]
    ve = np.concatenate([v[2] for _, v in blocks_all])[:, None]
    qpos = qpos0 + np.arange(tokens)
    kpos = np.arange(len(kq))
    q3 = (q[0].reshape(tokens, heads, d), q[1].reshape(tokens, heads))
    want = fx.attention(q3, (kq, ka, ke), (vq, va, ve), qpos, kpos, heads)          # [T, H, d]
    await drv.must(isa.AttnEmit(mode=EmitMode.FINAL, spad=100, tokens=tokens, heads=heads, tok_stride=tok_stride,
                                head_stride=head_stride))
    got = i32((await sp.get(100, R, d))[0])
    assert np.array_equal(got, want.reshape(R, d)), "FINAL rows"
    s = fx.scores(q3, kq, ka, ke, heads)
    valid = np.broadcast_to(fx.causal_mask(qpos, kpos)[None], s.shape)
    st = fx.partial_state(s, valid, vq, va, ve, heads)                              # [H, T]
    words = fx.encode_state(st).transpose(1, 0, 2).reshape(R * (d + 2))             # rows (t, j)
    await drv.must(isa.AttnEmit(mode=EmitMode.STATE, spad=200, tokens=tokens, heads=heads, tok_stride=0,
                                head_stride=0))
    nw = R * (d + 2)
    got = (await sp.get(200, -(-nw // VL), VL))[0].reshape(-1)[:nw]
    assert np.array_equal(i32(got), words), "STATE words"
    sp_max = 300
    await sp.put(sp_max, np.full((1, VL), 77))                                      # words past R stay
    await drv.must(isa.AttnEmit(mode=EmitMode.MAX, spad=sp_max, tokens=tokens, heads=heads, tok_stride=0, head_stride=0))
    got = i32((await sp.get(sp_max, 1, VL))[0][0])
    assert np.array_equal(got[:R], st.m.T.reshape(-1)) and (got[R:] == 77).all(), "MAX words"

    # decode protocol: a global M (>= the local one) through MREF, then APPLY -> STATE
    m_glob = st.m.T.reshape(-1) + rng.integers(0, 3000, size=R)
    await sp.put(sp_max, np.concatenate([m_glob, np.zeros(VL - R, np.int64)])[None])
    await drv.must(isa.AttnQ(what=AttnLoad.QUERY, spad=0, tokens=tokens, heads=heads, tok_stride=tok_stride,
                             head_stride=head_stride, qpos0=qpos0))
    await drv.must(isa.AttnQ(what=AttnLoad.MREF, spad=sp_max, tokens=tokens, heads=heads, tok_stride=0, head_stride=0,
                             qpos0=0))
    await drv.must(isa.AttnKV(phase=AttnPass.APPLY, first=1, **kv1))
    await drv.must(isa.AttnKV(phase=AttnPass.APPLY, first=0, **kv2))
    await drv.must(isa.AttnEmit(mode=EmitMode.STATE, spad=200, tokens=tokens, heads=heads, tok_stride=0, head_stride=0))
    st2 = fx.partial_state(s, valid, vq, va, ve, heads, m_ref=m_glob.reshape(tokens, heads).T)
    got = (await sp.get(200, -(-nw // VL), VL))[0].reshape(-1)[:nw]
    assert np.array_equal(i32(got), fx.encode_state(st2).transpose(1, 0, 2).reshape(-1)), "MREF state"
    # a merged state loaded (STATE) and finalized
    await drv.must(isa.AttnQ(what=AttnLoad.STATE, spad=200, tokens=tokens, heads=heads, tok_stride=0, head_stride=0,
                             qpos0=0))
    await drv.must(isa.AttnEmit(mode=EmitMode.FINAL, spad=100, tokens=tokens, heads=heads, tok_stride=tok_stride,
                                head_stride=head_stride))
    got = i32((await sp.get(100, R, d))[0])
    assert np.array_equal(got, fx.finalize(st2).reshape(R, d)), "STATE -> FINAL"

    # gated: the directory (DIR and the receive engine's port) decides
    gated = {**kv1, "gated": 1}
    await drv.must(isa.Dir(block=10, count=3, stride=2, state=ReplicaState.VALID))
    await drv.dir_write(14, int(ReplicaState.DRAINING))                   # still readable
    assert [await drv.dir_read(b) for b in (10, 12, 14, 16)] == [1, 1, 2, 0]
    await drv.must(isa.AttnKV(phase=AttnPass.MAX, first=1, **gated))
    await drv.must(isa.Dir(block=12, count=1, stride=0, state=ReplicaState.INVALID))
    out = await drv.run(isa.AttnKV(phase=AttnPass.APPLY, first=1, **gated))
    assert out.fault == SeqFault.UNREADABLE_BLOCK
    # DIR check (no write; the readability rule of the gate): 10 VALID, 12 INVALID, 14 DRAINING, 16 never written
    chk = dict(state=ReplicaState.INVALID, check=1)                      # state: ignored by a check
    assert (await drv.run(isa.Dir(block=10, count=3, stride=2, **chk))).fault == SeqFault.UNREADABLE_BLOCK
    await drv.must(isa.Dir(block=12, count=1, stride=0, state=ReplicaState.VALID))
    cyc = {"check": (await drv.must(isa.Dir(block=10, count=3, stride=2, **chk))).cycles}
    assert [await drv.dir_read(b) for b in (10, 12, 14, 16)] == [1, 1, 2, 0]   # nothing written
    for blk, count in ((10, 4), (16, 1)):                                 # the last entry / the only one
        assert (await drv.run(isa.Dir(block=blk, count=count, stride=2, **chk))).fault == SeqFault.UNREADABLE_BLOCK
    await drv.must(isa.Dir(block=14, count=1, stride=0, **chk))
    cyc["write"] = (await drv.must(isa.Dir(block=30, count=5, stride=1, state=ReplicaState.VALID))).cycles
    from mcf.sim.compute.cost import dir_cycles
    model = {"check": dir_cycles(3, True), "write": dir_cycles(5, False)}
    assert cyc == model, f"DIR cycles {cyc}, model {model}"
    # refused: rows beyond the unit's state rows (sm_rows), a directory id out of range, keys beyond the scale
    # table
    bad = [isa.AttnQ(what=AttnLoad.QUERY, spad=0, tokens=CFG.sm_rows // heads + 1, heads=heads, tok_stride=1,
                     head_stride=1, qpos0=0),
           isa.AttnKV(phase=AttnPass.MAX, first=1, **{**gated, "block0": CFG.dir_entries - 1}),
           isa.AttnKV(phase=AttnPass.MAX, first=1, **{**kv1, "keys": CFG.kv_block_keys + 1}),
           isa.Dir(block=CFG.dir_entries - 2, count=2, stride=2, state=ReplicaState.VALID),
           isa.Dir(block=CFG.dir_entries - 2, count=2, stride=2, state=ReplicaState.VALID, check=1),
           isa.Dir(block=10, count=0, stride=2, state=ReplicaState.VALID, check=1)]
    for ins in bad:
        assert (await drv.run(ins)).fault == SeqFault.ILLEGAL_INSTRUCTION, ins


@cocotb.test()
async def run_refusals(dut):
    """Words the EX queue must refuse: a TX opcode, opcode 0, reserved bits; END and SYNC complete."""
    drv, sp, rng = await bench(dut)
    await drv.must(isa.End())
    await drv.must(isa.Sync(on=isa.Queue.EX))

    class Raw:                              # a raw word through the driver
        def __init__(self, word):
            self.word = word

        def encode(self):
            return self.word
    send = isa.Send(ddr=0, length=4, stage=0, mop=isa.Op.TENSOR, collective=0, reduce_op=0, dst=0, route_id=0, tag=0, seq=0)
    for word in (send.encode(), 0, isa.End().encode() | (1 << 255), isa.Load(ddr=0, spad=0, beats=1,
                                                                              row_beats=0).encode() | (1 << 250)):
        assert (await drv.run(Raw(word))).fault == SeqFault.ILLEGAL_INSTRUCTION, hex(word)
    await drv.must(isa.End())


@pytest.mark.cocotb
def test_movers_cocotb(build_dir):
    run_cocotb(ExecUnit(CFG), __name__, build_dir,
               testcase=["run_load_store", "run_gemm", "run_vec", "run_embed", "run_kvw", "run_attention",
                         "run_refusals"],
               params={"seed": 3})
