"""GEMM_QK (attention scores QK^T on the MAC array, hw/compute/exec/movers.py ``GemmMover``)
on the execute unit of the tiny node with a 16 x 8 array and VL = 4 (so that, as at the Qwen size,
a tile's P scores of a row span several SPAD beats and go B = 2 banks at a time: the SPAD's wide
write), cocotb + Icarus, AxiRam as DDR with random pauses: runs of K segments in DDR
(``spec/kv.py``, as the KV writer stores them; one block, blocks of fewer keys than a tile at a
stride leaving gaps, blocks of more keys than a tile entered mid-block), query rows (token, head)
in the SPAD at 2-D strides, the scores STOREd and compared with the golden ``fixed.scores`` bit for
bit: several tiles and a tile sub-range, all-zero keys (A = 0), extreme exponents, saturating
scores; an ordinary GEMM after it; fields and runs GEMM_QK refuses (ILLEGAL_INSTRUCTION,
``isa.block_run_ok``) and a GEMM with its reserved bits (once kv) set."""
import cocotb
import numpy as np
import pytest

from mcf.hw.compute.exec.unit import ExecUnit
from mcf.sim.compute import ddr
from mcf.sim.runner import run_cocotb
from mcf.spec import isa
from mcf.spec.isa import SeqFault
from mcf.spec.kv import pack_segment
from mcf.spec.node import NodeConfig
from mcf.sw.golden import fixed as fx
from tests.hw.compute.exec.test_movers import Spad, bfp_rows, i32
from tests.hw.compute.exec.test_softmax import run_o_emit, run_softmax  # noqa: F401  (ATTN_SM, O / EMIT on the same build: one build)

CFG = NodeConfig.tiny(mac_rows=16, vec_lanes=4)
VL = CFG.vec_lanes
SEG = 0x20000


async def bench(dut):
    from mcf.sim.cocotb_util import params
    from mcf.sim.compute.exec_driver import ExecDriver
    p = params()
    drv = ExecDriver(dut, seed=p.get("seed", 1))
    await drv.start()
    return drv, Spad(drv, vl=VL), np.random.default_rng(p.get("seed", 1))


def write_run(ram, at, stride, q, a, e, bk):
    """The keys (q, A, E) as a run of K segments of ``bk`` keys (the last one may hold fewer), block b's
    at ``at + b stride``; the gaps between them hold 0xA5 bytes (never read)."""
    from mcf.spec.kv import segment_bytes
    keys = q.shape[0]
    nblk = -(-keys // bk)
    assert nblk == 1 or stride >= segment_bytes(bk, q.shape[1])
    ram.write(at, bytes([0xA5]) * (nblk * stride))
    for b in range(nblk):
        k = slice(b * bk, min((b + 1) * bk, keys))
        qb, ab, eb = q[k], a[k], e[k]
        if qb.shape[0] < bk:                    # the pool's block is whole: zero keys after the last token
            pad = bk - qb.shape[0]
            qb, ab, eb = (np.concatenate([qb, np.zeros((pad, q.shape[1]), q.dtype)]),
                          np.concatenate([ab, np.zeros(pad, a.dtype)]), np.concatenate([eb, np.zeros(pad, e.dtype)]))
        ram.write(at + b * stride, pack_segment(qb, ab, eb))


def gemm_qk(seg, tile0, tiles, tokens, heads, src, src_stride, dst, dst_stride, bk, seg_stride=0):
    d = CFG.head_dim
    return isa.GemmQk(seg=seg, seg_stride=seg_stride // isa.DDR_ALIGN, block_keys=bk, tile0=tile0, tiles=tiles,
                      tokens=tokens, heads=heads, head_stride=d // VL, src=src, src_stride=src_stride, dst=dst,
                      dst_stride=dst_stride)


def kv_keys(rng, keys, d, e_max, extreme):
    """KV4 keys (q, A, E) with some all-zero keys; ``extreme``: the largest products and A, E at
    both ends (left shifts kept to e + E + 12 <= 29; tests/hw/compute/test_matrix.py takes the
    matrix unit to E = 127)."""
    q, a, e = fx.quantize_kv(bfp_rows(rng, keys, d))
    a[rng.random(keys) < 0.2] = 0
    if extreme:
        q[::3], a[::3] = -8, 255
        e[:] = rng.choice([-128, -90, -30, 0], size=keys)
        e[::3] = 17 - e_max
        e[1::3] = -128
    return q, a, e


@cocotb.test()
async def run_scores(dut):
    drv, sp, rng = await bench(dut)
    P, d = CFG.mac_rows, CFG.head_dim
    rb = d // VL                                            # SPAD beats of one head's row
    cases = [  # tokens, heads, keys, tile0, tiles, extreme, dst alignment, block keys, block stride (bytes)
        (3, 2, 64, 0, 4, False, 0, 64, 0),
        (2, 4, 80, 2, 3, True, 0, 80, 0),      # a tile sub-range (scale and rows offsets)
        (1, 8, 32, 0, 2, True, 1, 32, 0),      # decode: one token, 8 heads; dst off the banks: beat by beat
        (2, 3, 64, 0, 4, True, 0, 4, 192),     # blocks of 4 keys (128-byte segments, 64-byte gaps): 4 a tile
        (1, 4, 96, 1, 5, False, 0, 48, 1024),  # blocks of 48 keys (3 tiles) from key 16 of block 0 on
        (2, 2, 46, 1, 2, False, 1, 12, 256),   # 12-key blocks from key 4 of block 1 on; the last one 10 keys
    ]
    for c, (tokens, heads, keys, tile0, tiles, extreme, skew, bk, stride) in enumerate(cases):
        # query rows (t, h) at src + t (heads + 1) rb + h rb: a gap row between tokens
        slots = tokens * (heads + 1)
        qm, qe = bfp_rows(rng, slots, d)
        if extreme:
            qm[0] = -32768
        await sp.put(0, qm, qe)
        kq, ka, ke = kv_keys(rng, keys, d, int(qe.max()), extreme)
        write_run(drv.ram, SEG, stride, kq, ka, ke, bk)
        out_beats = tiles * P // VL
        dst = -(-slots * rb // 2) * 2 + skew
        o = await drv.must(gemm_qk(SEG, tile0, tiles, tokens, heads, 0, (heads + 1) * rb, dst, out_beats, bk, stride))
        rows = [t * (heads + 1) + h for t in range(tokens) for h in range(heads)]
        qm3 = qm[rows].reshape(tokens, heads, d)
        qe3 = qe[rows].reshape(tokens, heads)
        k = slice(tile0 * P, (tile0 + tiles) * P)
        pad = (tile0 + tiles) * P - keys                # keys past the last token: the block's zero keys
        kq, ka, ke = (np.concatenate([x, np.zeros((pad, *x.shape[1:]), x.dtype)]) for x in (kq, ka, ke))
        s = fx.scores((qm3, qe3), kq[k, None], ka[k, None], ke[k, None], heads)     # [heads, tokens, keys]
        want = s.transpose(1, 0, 2).reshape(tokens * heads, tiles * P)           # row t heads + h
        got, _ = await sp.get(dst, tokens * heads, tiles * P)
        assert np.array_equal(i32(got), i32(want)), f"case {c}"
        assert o.perf["mac_beats"] == tiles * (d // CFG.mac_lanes) * tokens * heads, f"case {c}: {o.perf}"
        if extreme:
            assert (np.abs(want) >= 2 ** 31 - 1).any() and (want == 0).any(), f"case {c}: not extreme"
    # an ordinary GEMM after kv ones
    n, out, group = 32, 8, 32
    w = fx.quantize_weight(rng.standard_normal((out, n)) * 0.1, group)
    blob, lay = ddr.gemm_blob(w, None, P, CFG.mac_lanes)
    drv.ram.write(0x10000, blob)
    x = bfp_rows(rng, 2, n)
    await sp.put(0, *x)
    out_beats = lay.tiles * P // VL
    await drv.must(isa.Gemm(blob=0x10000, n=n, total_tiles=lay.tiles, tile0=0, tiles=lay.tiles, tokens=2,
                            group_log2=5, w_exp=w.exp, bias=0, src=0, src_stride=n // VL, dst=100,
                            dst_stride=out_beats))
    got, _ = await sp.get(100, 2, lay.tiles * P)
    assert np.array_equal(i32(got)[:, :out], fx.linear(x, w)), "GEMM after kv"
    # refused: no rows / tiles / block keys, rows beyond max tokens, runs block_run_ok rejects (a block's
    # scale words not whole 8-byte bus beats; the first key's scale word off a beat)
    bus, word = CFG.data_width // 8, CFG.weight_ports * CFG.data_width // 8
    qk = dict(seg=SEG, seg_stride=4, block_keys=32, tile0=0, tiles=2, tokens=2, heads=2, head_stride=rb, src=0,
              src_stride=8, dst=200, dst_stride=8)
    for bad in (dict(heads=0), dict(tokens=0), dict(tiles=0), dict(block_keys=0), dict(tokens=3, heads=3),
                dict(block_keys=6), dict(block_keys=10, tile0=1), dict(dst=CFG.spad_beats - 4)):
        args = {**qk, **bad}
        assert bad.get("block_keys") is None or not isa.block_run_ok(
            args["block_keys"], args["tile0"] * P, args["tiles"] * P, d, bus, word), bad
        assert (await drv.run(isa.GemmQk(**args))).fault == SeqFault.ILLEGAL_INSTRUCTION, bad
    assert isa.block_run_ok(12, P, 2 * P, d, bus, word)           # the 12-key run above passes
    # a GEMM with a bit of its reserved field (where kv was) set

    class Raw:
        def __init__(self, word):
            self.word = word

        def encode(self):
            return self.word
    res_at = isa.LAYOUTS[isa.Opcode.GEMM].offsets["res"]
    ok = isa.Gemm(blob=0x10000, n=n, total_tiles=1, tile0=0, tiles=1, tokens=2, group_log2=5, w_exp=0, bias=0,
                  src=0, src_stride=n // VL, dst=100, dst_stride=P // VL)
    await drv.must(ok)
    assert (await drv.run(Raw(ok.encode() | 1 << res_at))).fault == SeqFault.ILLEGAL_INSTRUCTION


@pytest.mark.cocotb
def test_scores_cocotb(build_dir):
    """GEMM_QK, and the softmax pass after it (tests/hw/compute/exec/test_softmax.py: ATTN_SM,
    ATTN_Q O; ``run_o_emit``: strided O and FINAL rows, their cycles, over 4 tokens x 2 heads = the
    unit's sm_rows = 8 state rows, twice its att_rows) on the same build of the unit."""
    run_cocotb(ExecUnit(CFG), __name__, build_dir, testcase=["run_scores", "run_softmax", "run_o_emit"],
               params={"seed": 5, "oe_tokens": 4})


# --- the rate at a model's shapes against the DDR model (``mcf bench compute --model``: attn:qk-array) -----
@cocotb.test()
async def run_qk_ops(dut):
    """One GEMM_QK on the unit of ``params()["node"]`` against the DDR model: ``tokens`` x the
    node's GQA group query rows (BFP16, LOADed) against one K segment of ``keys`` keys in DDR,
    the scores STOREd and compared with ``fixed.scores`` bit for bit; the instruction's cycles,
    MAC strobes, the cycles from the first MAC strobe to the last, the DDR bytes it read."""
    import json
    from mcf.sim.compute.exec_driver import ExecDriver
    from mcf.sim.cocotb_util import params
    from mcf.sim.ddr_model import DdrTiming
    from mcf.spec.kv import segment_bytes
    p = params()
    node = NodeConfig(**p["node"])
    q = p["qk"]
    vl, P, d, heads, tokens, keys = node.vec_lanes, node.mac_rows, node.head_dim, node.group, q["tokens"], q["keys"]
    rng = np.random.default_rng(p.get("seed", 1))
    drv = ExecDriver(dut, ram_bytes=p["ram_bytes"], timing=DdrTiming(**p["timing"]), axi_period_ps=p.get("axi_period_ps"))
    await drv.start()
    seg_at, x_at, y_at = 0x100000, 0x40000, 0x80000
    kq, ka, ke = fx.quantize_kv(bfp_rows(rng, keys, d))
    drv.ram.write(seg_at, pack_segment(kq, ka, ke))
    qm, qe = fx.prescale_query(bfp_rows(rng, tokens * heads, d), d)
    rb = d // vl
    drv.ram.write(x_at, ddr.rows_bytes(qm, vl, qe))
    await drv.must(isa.Load(ddr=x_at, spad=0, beats=tokens * heads * rb, row_beats=rb))
    dst, dst_stride = tokens * heads * rb, keys // vl
    bytes0 = drv.ram.read_bytes
    drv.mac_first = None
    res = await drv.must(isa.GemmQk(seg=seg_at, seg_stride=0, block_keys=keys, tile0=0, tiles=keys // P,
                                    tokens=tokens, heads=heads, head_stride=rb, src=0, src_stride=heads * rb, dst=dst,
                                    dst_stride=dst_stride), max_cycles=10_000_000)
    rd = drv.ram.read_bytes - bytes0
    span = drv.mac_last - drv.mac_first + 1
    await drv.must(isa.Store(ddr=y_at, spad=dst, beats=tokens * heads * dst_stride, row_beats=0))
    got = np.frombuffer(drv.ram.read(y_at, tokens * heads * keys * 4), dtype="<i4").reshape(tokens * heads, keys)
    s = fx.scores((qm.reshape(tokens, heads, d), qe.reshape(tokens, heads)), kq[:, None], ka[:, None], ke[:, None],
                  heads)
    assert np.array_equal(got, s.transpose(1, 0, 2).reshape(tokens * heads, keys)), "GEMM_QK differs from fixed.scores"
    assert res.perf["mac_beats"] == keys // P * (d // node.mac_lanes) * tokens * heads
    with open(p["qk_report"], "w") as f:
        json.dump({"ops": [{"name": "attn:qk-array", "tokens": tokens, "heads": heads, "rows": tokens * heads,
                            "keys": keys, "head_dim": d, "cycles": res.cycles, "mac_beats": res.perf["mac_beats"],
                            "mac_span_cycles": span, "ddr_read_bytes": rd,
                            "segment_bytes": segment_bytes(keys, d)}]}, f)
