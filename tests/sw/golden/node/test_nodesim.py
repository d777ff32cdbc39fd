"""The ISA simulator's node, instruction by instruction (sw/golden/node/nodesim.py): every effect
against hand-built words or the golden function it must equal, and every fault cause."""
from dataclasses import replace

import numpy as np
import pytest

from mcf.spec import isa, kv
from mcf.spec.isa import AttnLoad, AttnPass, EmitMode, PerfCounter, SeqFault, VecOp
from mcf.spec.node import NodeConfig
from mcf.spec.plan import ReplicaState
from mcf.sw.golden import fixed as fx
from mcf.sw.golden.node import ClusterSim
from mcf.sw.runtime import pack

CFG = NodeConfig.tiny()          # VL 8, P 4 x K 8, head_dim 16, att_rows 4
VL, D = CFG.vec_lanes, CFG.head_dim
DATA = 0x4000                    # offsets of test data in DDR


def node(cfg=CFG):
    c = ClusterSim(cfg, 1, ddr_bytes=1 << 17)
    c.open_window()
    return c, c.nodes[0]


def run(c, program):
    c.load_program(0, list(program) + [isa.End()])
    c.start()
    return c.run(max_cycles=1 << 20)


def put_rows(n, base, rows, exps=None, stride=None):
    rows = np.asarray(rows, np.int64)
    nb = rows.shape[1] // VL
    stride = stride or nb
    for r, row in enumerate(rows):
        n.spad[base + r * stride:base + r * stride + nb] = row.reshape(nb, VL)
        n.spad_exp[base + r * stride:base + r * stride + nb] = 0 if exps is None else exps[r]


def get_rows(n, base, count, width, stride=None):
    nb = width // VL
    stride = stride or nb
    m = np.stack([n.spad[base + r * stride:base + r * stride + nb].reshape(-1) for r in range(count)])
    return m, np.array([n.spad_exp[base + r * stride] for r in range(count)])


def bfp(rng, rows, width, exp_range=(-20, -5)):
    return rng.integers(-30000, 30000, (rows, width)), rng.integers(*exp_range, rows)


def test_load_store_plain_and_bfp_rows():
    c, n = node()
    base = n.ddr.phys_base
    words = np.arange(3 * VL, dtype=np.int64) - 7
    exp_word = 0x1F5                                   # low 8 bits 0xF5 = -11
    bfp_rows = np.concatenate([words[:2 * VL], [exp_word] + [0] * (VL - 1)])
    n.ddr.device_write(base + DATA, words.astype("<i4").tobytes())
    n.ddr.device_write(base + DATA + 256, bfp_rows.astype("<i4").tobytes())
    r = run(c, [isa.Load(ddr=base + DATA, spad=0, beats=3, row_beats=0),
                isa.Load(ddr=base + DATA + 256, spad=8, beats=2, row_beats=2),
                isa.Store(ddr=base + DATA + 512, spad=8, beats=2, row_beats=2),
                isa.Store(ddr=base + DATA + 1024, spad=0, beats=3, row_beats=0)])
    assert r.ok, r.message
    assert np.array_equal(n.spad[:3].reshape(-1), words) and not n.spad_exp[:3].any()
    assert list(n.spad_exp[8:10]) == [-11, -11]
    back = np.frombuffer(n.ddr.device_read(base + DATA + 512, 3 * VL * 4), "<i4")
    assert np.array_equal(back[:2 * VL], words[:2 * VL]) and back[2 * VL] == -11 and not back[2 * VL + 1:].any()
    assert n.ddr.device_read(base + DATA + 1024, 3 * VL * 4) == words.astype("<i4").tobytes()
    assert n.perf[PerfCounter.DDR_RD_BYTES] == 3 * VL * 4 * 2 and n.perf[PerfCounter.RETIRED_EX] == 5


def test_embed_equals_golden_and_refuses_ids_beyond_the_table(rng):
    c, n = node()
    base = n.ddr.phys_base
    w = fx.quantize_weight(rng.standard_normal((10, 16)), 8)
    n.ddr.device_write(base + DATA, pack.embed_table_bytes(w))
    ids = [3, 9, 0]
    n.ddr.device_write(base + 0x100, np.array(ids, "<i4").tobytes())
    prog = [isa.Embed(ids=base + 0x100, count=3, table=base + DATA, vocab=10, n=16, group_log2=3, w_exp=w.exp,
                      dst=4, dst_stride=3)]
    assert run(c, prog).ok
    assert np.array_equal(get_rows(n, 4, 3, 16, stride=3)[0], fx.embed(w, ids))
    n.ddr.device_write(base + 0x100, np.array([2, 10], "<i4").tobytes())
    r = run(c, [prog[0].replace(count=2)])
    assert r.status == "fault" and n.fault_cause == SeqFault.ILLEGAL_TOKEN and "token id 10 >= vocab 10" in r.message


def test_gemm_equals_golden_linear_with_bias_and_a_tile_range(rng):
    c, n = node()
    base = n.ddr.phys_base
    out, width, G, T = 12, 32, 16, 3
    w = fx.quantize_weight(rng.standard_normal((out, width)), G)
    bias = fx.quantize_x32(rng.standard_normal(out))
    lay = isa.BlobLayout(n=width, tiles=3, rows=CFG.mac_rows, lanes=CFG.mac_lanes, group=G)
    n.ddr.device_write(base + DATA, pack.blob_bytes(w, lay, bias))
    x = bfp(rng, T, width)
    put_rows(n, 0, x[0], x[1], stride=5)
    g = dict(blob=base + DATA, n=width, total_tiles=3, tile0=0, tokens=T, group_log2=4, w_exp=w.exp,
             src=0, src_stride=5, dst=20, dst_stride=2)
    assert run(c, [isa.Gemm(tiles=3, bias=1, **g)]).ok
    assert np.array_equal(get_rows(n, 20, T, 16, stride=2)[0][:, :out], fx.linear(x, w, bias))
    assert n.perf[PerfCounter.MAC_BEATS] == 3 * (width // CFG.mac_lanes) * T
    assert run(c, [isa.Gemm(tiles=2, bias=0, **{**g, "dst": 40})]).ok      # the first 8 rows, no bias
    assert np.array_equal(get_rows(n, 40, T, 8, stride=2)[0], fx.linear(x, w)[:, :8])
    r = run(c, [isa.Gemm(tiles=1, bias=0, **{**g, "tile0": 2})])          # scale region offset 32: unaligned
    assert r.status == "fault" and n.fault_cause == SeqFault.ILLEGAL_INSTRUCTION and "tile0=2" in r.message


def test_gemm_qk_equals_golden_scores_over_a_tile_range(rng):
    """GEMM_QK over one K segment (spec/kv.py; block_keys = its n): rows (t, h) at 2-D strides, the
    expected values from fx.scores on the keys themselves (not through the segment bytes)."""
    c, n = node()
    base = n.ddr.phys_base
    P, T, H, total = CFG.mac_rows, 2, 3, 12
    keys = total * P
    kq, ka, ke = fx.quantize_kv(bfp(rng, keys, D))
    ka[rng.random(keys) < 0.2] = 0                          # all-zero keys
    ke[::5] = -40                                           # small scores, rounded to 0
    n.ddr.device_write(base + DATA, kv.pack_segment(kq, ka, ke))
    rb = D // VL
    qm, qe = bfp(rng, T * (H + 1), D)                       # a gap row between tokens
    put_rows(n, 0, qm, qe, stride=rb)
    rows = [t * (H + 1) + h for t in range(T) for h in range(H)]
    g = dict(seg=base + DATA, seg_stride=0, block_keys=keys, tokens=T, src=0, src_stride=(H + 1) * rb, dst=40,
             dst_stride=6, heads=H, head_stride=rb)
    for tile0, tiles in ((0, total), (8, 4), (3, 1)):
        n.perf[:] = 0
        assert run(c, [isa.GemmQk(tile0=tile0, tiles=tiles, **g)]).ok
        k = slice(tile0 * P, (tile0 + tiles) * P)
        want = fx.scores((qm[rows].reshape(T, H, D), qe[rows].reshape(T, H)), kq[k, None], ka[k, None],
                         ke[k, None], H).transpose(1, 0, 2).reshape(T * H, tiles * P)
        got = np.stack([n.spad.reshape(-1)[(40 + r * 6) * VL:][:tiles * P] for r in range(T * H)])
        assert np.array_equal(got, want), (tile0, tiles)
        assert (want != 0).any() and (want == 0).any()
        assert n.perf[PerfCounter.MAC_BEATS] == tiles * (D // CFG.mac_lanes) * T * H
        assert n.perf[PerfCounter.DDR_RD_BYTES] == tiles * P * (2 + D // 2)
    for bad, text in ((dict(tiles=0), "tiles="), (dict(heads=0), "rows"), (dict(heads=CFG.max_tokens), "rows"),
                      (dict(block_keys=0), "block_keys=")):
        r = run(c, [isa.GemmQk(**{"tile0": 0, "tiles": 1, **g, **bad})])
        assert r.status == "fault" and n.fault_cause == SeqFault.ILLEGAL_INSTRUCTION and text in r.message, bad


def test_array_attention_over_a_block_run_equals_golden_attention(rng):
    """The array sequence over a run of 3 blocks of 4 keys (K and V segments 1 KB apart, fewer keys
    than a tile): GEMM_QK (2 tiles of 8: keys 12-15 are a 4th block, written but beyond every
    query's position), ATTN_SM MAX / APPLY (the V scale words of each key's block), GEMM_PV over
    the run (16 keys, sat32 rows 2 beats apart), ATTN_Q O reading those strided rows, ATTN_EMIT
    FINAL: the golden attention over the 12 keys, bit for bit; the scores against fx.scores, the
    PV rows against the golden o.  Blocks of 5 keys (40-byte rows, not whole words of the tiny
    node's weight stream) are refused as the RTL refuses them (spec.isa.block_run_ok)."""
    cfg = NodeConfig.tiny(mac_rows=8)                     # GEMM_PV built: P 8 >= VL 8
    c, n = node(cfg)
    base = n.ddr.phys_base
    bk, blocks, S, pad = 4, 3, 12, 16
    q = fx.prescale_query(bfp(rng, 4, D, (-12, -8)), D)
    (_, _), k4 = kv_rows(rng, (blocks + 1) * bk)
    (_, _), v4 = kv_rows(rng, (blocks + 1) * bk)
    seg = kv.segment_bytes(bk, D)
    for i in range(blocks + 1):
        sl = slice(i * bk, (i + 1) * bk)
        n.ddr.device_write(base + DATA + i * 1024, kv.pack_segment(k4[0][sl], k4[1][sl], k4[2][sl]))
        n.ddr.device_write(base + DATA + i * 1024 + seg, kv.pack_segment(v4[0][sl], v4[1][sl], v4[2][sl]))
    put_rows(n, 0, q[0], q[1], stride=2)                  # row (t, j) at 2 (2 t + j)
    rows = dict(tokens=2, heads=2, tok_stride=4, head_stride=2)
    run_ = dict(block_keys=bk, seg_stride=1024 // 64)
    SC, W, OW = 40, 80, 120
    prog = [isa.AttnQ(what=AttnLoad.QUERY, spad=0, qpos0=10, **rows),
            isa.GemmQk(seg=base + DATA, tile0=0, tiles=2, tokens=2, heads=2, head_stride=2, src=0, src_stride=4,
                       dst=SC, dst_stride=pad // VL, **run_)]
    sm = dict(scores=SC, s_stride=pad // VL, keys=pad, kpos0=0, seg=base + DATA + seg, w=W, w_stride=pad // VL,
              tokens=2, heads=2, **run_)
    prog += [isa.AttnSm(phase=AttnPass.MAX, first=1, **sm), isa.AttnSm(phase=AttnPass.APPLY, first=1, **sm),
             isa.GemmPv(seg=base + DATA + seg, keys=pad, tile0=0, tiles=D // 8, tokens=2, heads=2,
                        head_stride=pad // VL, src=W, src_stride=2 * pad // VL, dst=OW, dst_stride=2 * D // VL,
                        acc=0, wide=0, **run_),
             isa.AttnQ(what=AttnLoad.O, spad=OW, qpos0=0, tokens=2, heads=2, tok_stride=4 * D // VL,
                       head_stride=2 * D // VL),
             isa.AttnEmit(mode=EmitMode.FINAL, spad=200, **rows)]
    r = run(c, prog)
    assert r.ok, r.message
    k = tuple(a[:pad] for a in k4)
    want_s = fx.scores((q[0][:, None], q[1][:, None]), *(a[:, None] for a in k), 1)[0]      # [4, 16]
    got_s = np.stack([n.spad.reshape(-1)[(SC + i * pad // VL) * VL:][:pad] for i in range(4)])
    assert np.array_equal(got_s, want_s)
    qpos, kpos = np.repeat([10, 11], 2), np.arange(S)
    st = golden_rows(q, tuple(a[:S] for a in k4), tuple(a[:S] for a in v4), qpos, kpos)
    assert np.array_equal(get_rows(n, OW, 4, D, stride=2 * D // VL)[0], st.o[:, 0])
    assert np.array_equal(get_rows(n, 200, 4, D, stride=2)[0], fx.finalize(st)[0])
    # reads: scales + rows of 16 keys (GEMM_QK), V scales (APPLY), V rows (GEMM_PV)
    assert n.perf[PerfCounter.DDR_RD_BYTES] == pad * (2 + D // 2) + 2 * pad + pad * D // 2
    assert not isa.block_run_ok(5, 0, pad, D, cfg.data_bytes, cfg.weight_word_bytes)
    c, n = node(cfg)
    r = run(c, [isa.AttnQ(what=AttnLoad.QUERY, spad=0, qpos0=10, **rows), replace(prog[1], block_keys=5)])
    assert not r.ok and "ILLEGAL_INSTRUCTION" in r.message and "block_run_ok" in r.message


def test_gemm_beyond_max_group_is_illegal_as_in_the_rtl(rng):
    """The execute unit takes weight groups G <= max_group and builds the scores path (GEMM_QK)
    only when head_dim <= max_group (hw GemmMover.has_kv): ILLEGAL_INSTRUCTION on the node, here
    too."""
    from mcf.hw.compute.exec.unit import ExecUnit
    small = CFG.replace(max_group=8)                        # head_dim 16 > 8
    assert ExecUnit(CFG).movers["gemm"].has_kv and not ExecUnit(small).movers["gemm"].has_kv
    P, width, G = CFG.mac_rows, 32, 16
    kq, ka, ke = fx.quantize_kv(bfp(rng, P, D))
    w = fx.quantize_weight(rng.standard_normal((P, width)), G)
    lay = isa.BlobLayout(n=width, tiles=1, rows=P, lanes=CFG.mac_lanes, group=G)
    for cfg, ok in ((CFG, True), (small, False)):
        c, n = node(cfg)
        base = n.ddr.phys_base
        n.ddr.device_write(base + DATA, kv.pack_segment(kq, ka, ke))
        n.ddr.device_write(base + 2 * DATA, pack.blob_bytes(w, lay, None))
        put_rows(n, 0, *bfp(rng, 1, width))
        scores = isa.GemmQk(seg=base + DATA, seg_stride=0, block_keys=P, tile0=0, tiles=1, tokens=1, heads=1,
                            head_stride=0, src=0, src_stride=0, dst=40, dst_stride=1)
        linear = isa.Gemm(blob=base + 2 * DATA, n=width, total_tiles=1, tile0=0, tiles=1, tokens=1, group_log2=4,
                          w_exp=w.exp, bias=0, src=0, src_stride=4, dst=40, dst_stride=1)
        for ins, text in ((scores, "head_dim 16 exceeds the matrix unit's max_group=8"),
                          (linear, "G=16 exceeds the matrix unit's max_group=8")):
            r = run(c, [ins])
            assert r.ok if ok else (r.status == "fault" and n.fault_cause == SeqFault.ILLEGAL_INSTRUCTION
                                    and text in r.message), (cfg.max_group, r.message)


def test_gemm_pv_equals_golden_state_sums_over_two_segments(rng):
    """GEMM_PV over two V segments (spec/kv.py) chained through the wide value (acc), then wide or
    sat32, and a channel tile sub-range: o from fx.state_sums over all the keys at once (the
    weights from fx.attn_weights); words above W_MAX count as W_MAX; every refusal."""
    from mcf.sim.compute.jobs import pv_weights
    cfg = NodeConfig.tiny(mac_rows=8, vec_lanes=4)        # GEMM_PV needs P >= VL
    vl, P, K = cfg.vec_lanes, cfg.mac_rows, cfg.mac_lanes
    c, n = node(cfg)
    base = n.ddr.phys_base
    T, H, k1, k2 = 2, 3, 32, 24
    R = T * H

    def put(at, w, stride):
        rb = w.shape[1] // vl
        for t in range(T):
            for h in range(H):
                n.spad[at + t * stride + h * rb:at + t * stride + (h + 1) * rb] = w[t * H + h].reshape(rb, vl)

    def rows(at, width, stride):
        return np.stack([n.spad[at + r * stride:at + r * stride + width // vl].reshape(-1) for r in range(R)])

    for wide in (1, 0):
        w, (vq, va, ve), o = pv_weights(rng, R, k1 + k2, D, extreme=True, scales=True)
        w = np.where(w == fx.W_MAX, fx.INT32_MAX, w)
        segs = (base + DATA, base + DATA + 0x2000)
        for i, (a, b, at) in enumerate(((0, k1, 0), (k1, k1 + k2, 100))):
            n.ddr.device_write(segs[i], kv.pack_segment(vq[a:b], va[a:b], ve[a:b]))
            put(at, w[:, a:b], H * (b - a) // vl + 2)
        g = dict(tile0=0, tiles=D // P, tokens=T, heads=H, dst=200, dst_stride=2 * D // vl)
        n.perf[:] = 0
        assert run(c, [isa.GemmPv(seg=segs[0], keys=k1, head_stride=k1 // vl, src=0, src_stride=H * k1 // vl + 2,
                                  acc=0, wide=1, **g),
                       isa.GemmPv(seg=segs[1], keys=k2, head_stride=k2 // vl, src=100,
                                  src_stride=H * k2 // vl + 2, acc=1, wide=wide, **g)]).ok
        got = rows(200, 2 * D, 2 * D // vl)
        if wide:
            assert np.array_equal((got[:, :D] & 0xFFFFFFFF) + (got[:, D:] << 32), o)
        else:
            assert np.array_equal(got[:, :D], fx.sat(o, 32))
        assert (np.abs(o) > fx.INT32_MAX).any() and (np.abs(o) < fx.INT32_MAX).any()
        assert n.perf[PerfCounter.MAC_BEATS] == (D // P) * 2 * (k1 + k2) // K * R
        assert n.perf[PerfCounter.DDR_RD_BYTES] == (k1 + k2) * D // 2
    g = dict(seg=segs[0], keys=k1, tokens=T, heads=H, head_stride=k1 // vl, src=0, src_stride=H * k1 // vl + 2,
             dst=300, dst_stride=P // vl, acc=0, wide=0)
    w, (vq, va, ve), o = pv_weights(rng, R, k1, D, scales=True)
    n.ddr.device_write(segs[0], kv.pack_segment(vq, va, ve))
    put(0, w, H * k1 // vl + 2)
    assert run(c, [isa.GemmPv(tile0=1, tiles=1, **g)]).ok
    assert np.array_equal(rows(300, P, P // vl), fx.sat(o[:, P:], 32))
    for bad, text in ((dict(keys=12), "keys="), (dict(keys=cfg.intermediate_size), "keys="),
                      (dict(tiles=0), "channel tiles"), (dict(tile0=1, tiles=2), "channel tiles"),
                      (dict(heads=0), "rows"), (dict(tokens=3), "rows"), (dict(dst=cfg.spad_beats - 4), "dst"),
                      (dict(acc=1, dst=cfg.spad_beats - 6 * 8 + 4, dst_stride=8), "dst"),
                      (dict(acc=1, dst_stride=4), "overlaps")):
        r = run(c, [isa.GemmPv(**{"tile0": 0, "tiles": 2, **g, **bad})])
        assert r.status == "fault" and n.fault_cause == SeqFault.ILLEGAL_INSTRUCTION and text in r.message, bad
    r = run(node()[0], [isa.GemmPv(tile0=0, tiles=1, **g)])            # the default tiny node: P 4 < VL 8
    assert r.status == "fault" and "not built" in r.message


@pytest.mark.parametrize("vop", list(VecOp))
def test_vec_equals_golden(vop, rng):
    c, n = node()
    rows, width = 4, 16
    a_x32 = rng.integers(-(1 << 22), 1 << 22, (rows, width))
    a_bfp = bfp(rng, rows, width)
    b_bfp = bfp(rng, 2, width)
    extra = {}
    if vop == VecOp.TO_BFP:
        put_rows(n, 0, a_x32)
        want = fx.x32_to_bfp(a_x32)
    elif vop == VecOp.RMSNORM:
        gain, gexp = fx.quantize_gain(1 + 0.1 * rng.standard_normal(width))
        put_rows(n, 0, a_x32)
        put_rows(n, 40, gain[None])
        extra = dict(b=40, b_stride=0, imm0=fx.eps_constant(width, 1e-6), imm1=gexp)
        want = fx.rmsnorm(a_x32, gain, gexp, 1e-6)
    elif vop == VecOp.SILU:
        put_rows(n, 0, a_x32)
        want = (fx.silu(a_x32), np.zeros(rows, int))
    elif vop == VecOp.MUL:
        put_rows(n, 0, *a_bfp)
        put_rows(n, 40, *b_bfp)
        extra = dict(b=40, b_stride=2, b_rep=2)           # rows 0, 1 x b row 0; rows 2, 3 x b row 1
        sel = [0, 0, 1, 1]
        want = fx.bfp_mul(a_bfp, (b_bfp[0][sel], b_bfp[1][sel]))
    elif vop == VecOp.ROPE:
        put_rows(n, 0, *a_bfp)
        cos, sin = fx.rope_table(width, 10000.0, [5, 9])
        put_rows(n, 40, np.frombuffer(pack.rope_bytes(width, 10000.0, 10), "<i4").reshape(10, width)[[5, 9]])
        extra = dict(b=40, b_stride=2, b_rep=2, b_pair=1)
        want = fx.rope((a_bfp[0].reshape(2, 2, width), a_bfp[1].reshape(2, 2)), cos, sin)
        want = (want[0].reshape(rows, width), want[1].reshape(rows))
    elif vop == VecOp.PRESCALE:
        put_rows(n, 0, *a_bfp)
        cm, ce = fx.score_constant(D)
        extra = dict(imm0=cm, imm1=ce)
        want = fx.prescale_query(a_bfp, D)
    else:
        b_x32 = rng.integers(-(1 << 31), 1 << 31, (1, width))
        put_rows(n, 0, rng.integers(-(1 << 31), 1 << 31, (rows, width)))
        a_x32 = get_rows(n, 0, rows, width)[0]
        put_rows(n, 40, b_x32)
        extra = dict(b=40, b_stride=0)
        want = (fx.sat(a_x32 + b_x32, 32), np.zeros(rows, int))
    fields = dict(vop=vop, n=width, rows=rows, a=0, a_stride=2, b=0, b_stride=0, b_rep=1, b_pair=0,
                  dst=20, dst_stride=2, imm0=0, imm1=0)
    assert run(c, [isa.Vec(**{**fields, **extra})]).ok
    got_m, got_e = get_rows(n, 20, rows, width)
    assert np.array_equal(got_m, want[0]) and np.array_equal(got_e, want[1])


def kv_rows(rng, tokens):
    """BFP16 K or V rows of one KV head and their KV4 quantization."""
    m, e = bfp(rng, tokens, D, (-14, -8))
    return (m, e), fx.quantize_kv((m, e))


def test_kvw_writes_the_spec_segment(rng):
    c, n = node()
    base = n.ddr.phys_base
    (m, e), (q, a, ke) = kv_rows(rng, 3)
    put_rows(n, 0, m, e, stride=4)
    n.ddr.device_write(base + DATA, b"\xff" * 256)           # the padding is written too
    assert run(c, [isa.Kvw(src=0, rows=3, row_stride=4, seg=base + DATA)]).ok
    assert n.ddr.device_read(base + DATA, kv.segment_bytes(3, D)) == kv.pack_segment(q, a, ke)


def attention_setup(rng, keys_per_block=(3, 3), gated=True):
    """A node with R = 2 tokens x 2 heads query rows in SPAD and two KV blocks in DDR."""
    c, n = node()
    base = n.ddr.phys_base
    S = sum(keys_per_block)
    q = fx.prescale_query(bfp(rng, 4, D, (-12, -8)), D)
    (_, _), k4 = kv_rows(rng, S)
    (_, _), v4 = kv_rows(rng, S)
    put_rows(n, 0, q[0], q[1], stride=2)                       # row (t, j) at 2 (2 t + j)
    seg = kv.segment_bytes(keys_per_block[0], D)
    start = 0
    for i, nk in enumerate(keys_per_block):
        blk = base + DATA + i * 1024
        sl = slice(start, start + nk)
        n.ddr.device_write(blk, kv.pack_segment(k4[0][sl], k4[1][sl], k4[2][sl]))
        n.ddr.device_write(blk + seg, kv.pack_segment(v4[0][sl], v4[1][sl], v4[2][sl]))
        start += nk
    n.directory[[5, 7]] = ReplicaState.VALID
    run_kw = dict(seg=base + DATA, v_off=seg // 64, seg_stride=1024 // 64, blocks=2, keys=keys_per_block[0],
                  pos_stride=keys_per_block[0], block0=5, block_stride=2, gated=int(gated))
    return c, n, q, k4, v4, run_kw


def golden_rows(q, k4, v4, qpos, kpos, m_ref=None):
    """Golden state of the 4 query rows (one KV head) over the keys: [R] m, l, o words."""
    s = fx.scores((q[0][:, None], q[1][:, None]), *(a[:, None] for a in k4), 1)[0]
    valid = fx.causal_mask(qpos, kpos)
    st = fx.partial_state(s[:, None], valid[:, None], *(a[:, None] for a in v4), 4,
                          None if m_ref is None else np.asarray(m_ref)[:, None])
    return st


def test_attention_two_passes_equal_golden_attention(rng):
    c, n, q, k4, v4, kw = attention_setup(rng)
    rows = dict(tokens=2, heads=2, tok_stride=4, head_stride=2)
    prog = [isa.AttnQ(what=AttnLoad.QUERY, spad=0, qpos0=3, **rows),
            isa.AttnKV(phase=AttnPass.MAX, kpos0=0, first=1, **kw),
            isa.AttnKV(phase=AttnPass.APPLY, kpos0=0, first=1, **kw),
            isa.AttnEmit(mode=EmitMode.FINAL, spad=40, **rows),
            isa.AttnEmit(mode=EmitMode.STATE, spad=60, **rows),
            isa.AttnEmit(mode=EmitMode.MAX, spad=80, **rows)]
    r = run(c, prog)
    assert r.ok, r.message
    qpos, kpos = np.repeat([3, 4], 2), np.arange(6)
    st = golden_rows(q, k4, v4, qpos, kpos)
    want = fx.finalize(st)[0]                                   # [R, d]
    assert np.array_equal(get_rows(n, 40, 4, D, stride=2)[0], want)
    words = n.spad.reshape(-1)
    assert np.array_equal(words[60 * VL:60 * VL + 4 * (D + 2)].reshape(4, D + 2), fx.encode_state(st)[:, 0])
    assert np.array_equal(words[80 * VL:80 * VL + 4], st.m[:, 0])
    # the same rows split into one run per block (first only on the first): the same bits
    c2, n2, *_ = attention_setup(np.random.default_rng(1234))
    one = {**kw, "blocks": 1}
    second = {**one, "seg": kw["seg"] + 1024, "block0": 7}
    prog2 = [prog[0], isa.AttnKV(phase=AttnPass.MAX, kpos0=0, first=1, **one),
             isa.AttnKV(phase=AttnPass.MAX, kpos0=3, first=0, **second),
             isa.AttnKV(phase=AttnPass.APPLY, kpos0=0, first=1, **one),
             isa.AttnKV(phase=AttnPass.APPLY, kpos0=3, first=0, **second), prog[3]]
    assert run(c2, prog2).ok
    assert np.array_equal(get_rows(n2, 40, 4, D, stride=2)[0], want)


def test_state_with_a_reference_maximum_and_merged_states(rng):
    c, n, q, k4, v4, kw = attention_setup(rng)
    rows = dict(tokens=2, heads=2, tok_stride=4, head_stride=2)
    m_ref = np.array([900_000, 800_000, 700_000, 1_000_000])
    n.spad.reshape(-1)[100 * VL:100 * VL + 4] = m_ref
    st_words = rng.integers(0, 1 << 20, (4, D + 2))
    n.spad.reshape(-1)[120 * VL:120 * VL + 4 * (D + 2)] = st_words.reshape(-1)
    prog = [isa.AttnQ(what=AttnLoad.QUERY, spad=0, qpos0=3, **rows),
            isa.AttnQ(what=AttnLoad.MREF, spad=100, qpos0=0, **rows),
            isa.AttnKV(phase=AttnPass.APPLY, kpos0=0, first=1, **kw),
            isa.AttnEmit(mode=EmitMode.STATE, spad=60, **rows),
            isa.AttnQ(what=AttnLoad.STATE, spad=120, qpos0=0, **rows),
            isa.AttnEmit(mode=EmitMode.FINAL, spad=40, **rows)]
    assert run(c, prog).ok
    st = golden_rows(q, k4, v4, np.repeat([3, 4], 2), np.arange(6), m_ref)
    words = n.spad.reshape(-1)
    assert np.array_equal(words[60 * VL:60 * VL + 4 * (D + 2)].reshape(4, D + 2), fx.encode_state(st)[:, 0])
    loaded = fx.decode_state(st_words[:, None])
    assert np.array_equal(get_rows(n, 40, 4, D, stride=2)[0], fx.finalize(loaded)[0])


def test_the_directory_gates_attention(rng):
    c, n, q, k4, v4, kw = attention_setup(rng)
    rows = dict(tokens=2, heads=2, tok_stride=4, head_stride=2)
    prog = [isa.Dir(block=5, count=2, stride=2, state=ReplicaState.DRAINING),
            isa.AttnQ(what=AttnLoad.QUERY, spad=0, qpos0=3, **rows),
            isa.AttnKV(phase=AttnPass.MAX, kpos0=0, first=1, **kw)]
    assert run(c, prog).ok                                      # DRAINING copies stay readable
    assert list(n.directory[[5, 7]]) == [ReplicaState.DRAINING] * 2
    r = run(c, [isa.Dir(block=7, count=1, stride=0, state=ReplicaState.INVALID)] + prog[1:])
    assert r.status == "fault" and n.fault_cause == SeqFault.UNREADABLE_BLOCK and "block 7" in r.message
    assert run(c, [prog[1], isa.AttnKV(phase=AttnPass.MAX, kpos0=0, first=1, **{**kw, "gated": 0})]).ok


def test_dir_check_faults_an_unreadable_run_and_writes_nothing():
    """DIR check = 1 (the array path's directory check): VALID / DRAINING entries pass and stay as they
    were, an INVALID one (never written, or written INVALID) faults UNREADABLE_BLOCK naming it; count 0
    or an id past the directory is an illegal instruction, as for a write."""
    c, n = node()
    chk = dict(state=ReplicaState.INVALID, check=1)         # state: ignored by a check
    writes = [isa.Dir(block=4, count=3, stride=3, state=ReplicaState.VALID),
              isa.Dir(block=7, count=1, stride=0, state=ReplicaState.DRAINING)]
    assert run(c, writes + [isa.Dir(block=4, count=3, stride=3, **chk)]).ok
    assert list(n.directory[[4, 7, 10]]) == [ReplicaState.VALID, ReplicaState.DRAINING, ReplicaState.VALID]
    assert [e[1] for e in n.dir_log] == [4, 7, 10, 7]           # the writes only
    for prog, blk in (([isa.Dir(block=4, count=4, stride=3, **chk)], 13),
                      ([isa.Dir(block=10, count=1, stride=0, state=ReplicaState.INVALID),
                        isa.Dir(block=4, count=3, stride=3, **chk)], 10)):
        r = run(c, writes + prog)
        assert r.status == "fault" and n.fault_cause == SeqFault.UNREADABLE_BLOCK and f"block {blk} " in r.message
    for bad in (isa.Dir(block=4, count=0, stride=3, **chk), isa.Dir(block=CFG.dir_entries - 2, count=2, stride=2, **chk)):
        r = run(c, writes + [bad])
        assert r.status == "fault" and n.fault_cause == SeqFault.ILLEGAL_INSTRUCTION
    assert isa.decode(isa.Dir(block=4, count=3, stride=3, **chk).encode()).check == 1
    assert isa.decode(writes[0].encode()).check == 0


@pytest.mark.parametrize("program,cause,text", [
    (lambda b: [isa.Load(ddr=b + (1 << 17), spad=0, beats=1, row_beats=0)], SeqFault.OUT_OF_WINDOW, "outside the DMA window"),
    (lambda b: [isa.Load(ddr=b, spad=CFG.spad_beats - 1, beats=2, row_beats=0)], SeqFault.ILLEGAL_INSTRUCTION, "SPAD"),
    (lambda b: [isa.Sync(on=isa.Queue.EX, sig=1, sig_sem=CFG.num_sems)] if CFG.num_sems < 32 else
     [isa.Kvw(src=0, rows=CFG.max_tokens + 1, row_stride=1, seg=b)], SeqFault.ILLEGAL_INSTRUCTION, ""),
    (lambda b: [isa.Sync(on=isa.Queue.EX, sig=1, sig_sem=3)] * 3, None, ""),
])
def test_faults_name_their_cause(program, cause, text):
    c, n = node()
    r = run(c, program(n.ddr.phys_base))
    if cause is None:
        assert r.ok and n.sems[3] == 3
        return
    assert r.status == "fault" and n.fault_cause == cause and text in r.message


def test_illegal_words_and_overrun():
    c, n = node()
    base = n.ddr.phys_base
    n.ddr.device_write(base, (63).to_bytes(32, "little"))       # no such opcode
    n.prog_base, n.prog_count = base, 1
    c.start()
    r = c.run()
    assert r.status == "fault" and n.fault_cause == SeqFault.ILLEGAL_INSTRUCTION and "#0" in r.message
    c.load_program(0, [isa.Sync(on=isa.Queue.EX)])              # no END
    c.start()
    assert c.run().status == "fault" and n.fault_cause == SeqFault.PROGRAM_OVERRUN
