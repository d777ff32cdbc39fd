"""GEMM_PV (attention PV on the MAC array, hw/compute/exec/movers.py ``GemmMover``) on the execute
unit of the tiny node with an 8 x 8 array and VL = 4 (head_dim 16 = two channel tiles; a tile's P
words span two SPAD beats), cocotb + Icarus, AxiRam as DDR with random pauses: V segments in DDR
(``spec/kv.py``), softmax weight rows w (token, head) in the SPAD at 2-D strides (the rows ATTN_SM
writes, here from the golden ``fixed.attn_weights``), o STOREd and compared with the golden
``fixed.state_sums``' exact o bit for bit: two V segments chained through the wide value (acc),
then wide or sat32; w = W_MAX keys, w words above W_MAX (taken as W_MAX), w = 0, V = -8; a channel
tile sub-range; runs of V blocks (``block_keys`` 12 and 20, gaps between the segments, the last
block partial), wide and sat32; fields GEMM_PV refuses (ILLEGAL_INSTRUCTION)."""
import cocotb
import numpy as np
import pytest

from mcf.hw.compute.exec.unit import ExecUnit
from mcf.sim.compute.jobs import pv_weights
from mcf.sim.runner import run_cocotb
from mcf.spec import isa
from mcf.spec.isa import SeqFault
from mcf.spec.kv import pack_segment
from mcf.spec.node import NodeConfig
from mcf.sw.golden import fixed as fx
from tests.hw.compute.exec.test_movers import Spad, i32

CFG = NodeConfig.tiny(mac_rows=8, vec_lanes=4)
VL, P, K, D = CFG.vec_lanes, CFG.mac_rows, CFG.mac_lanes, CFG.head_dim
SEG = (0x20000, 0x24000)


async def put_rows(sp, at, w, tokens, heads, stride):
    """Weight rows (t, h) -> SPAD at + t stride + h (row beats); zeros in the gaps."""
    rb = w.shape[1] // VL
    flat = np.zeros(tokens * stride * VL, np.int64)
    for t in range(tokens):
        for h in range(heads):
            x = (t * stride + h * rb) * VL
            flat[x:x + w.shape[1]] = w[t * heads + h]
    await sp.put(at, flat.reshape(-1, VL))


def gemm_pv(seg, keys, tokens, heads, src, stride, dst, dst_stride, acc, wide, tile0=0, tiles=D // P):
    return isa.GemmPv(seg=seg, keys=keys, tile0=tile0, tiles=tiles, tokens=tokens, heads=heads,
                      head_stride=keys // VL, src=src, src_stride=stride, dst=dst, dst_stride=dst_stride,
                      acc=acc, wide=wide)


@cocotb.test()
async def run_pv(dut):
    from mcf.sim.cocotb_util import params
    from mcf.sim.compute.exec_driver import ExecDriver
    p = params()
    drv = ExecDriver(dut, seed=p.get("seed", 1))
    await drv.start()
    sp = Spad(drv, vl=VL)
    rng = np.random.default_rng(p.get("seed", 1))
    tokens, heads = 2, 3
    R = tokens * heads
    k1, k2 = 24, 16                                        # two V segments (multiples of K = 8)
    for c, wide in enumerate((True, False)):
        w, (vq, va, ve), o = pv_weights(rng, R, k1 + k2, D, extreme=True, scales=True)
        assert (w == fx.W_MAX).any() and (w == 0).any() and (vq == -8).any()
        if c == 0:
            w = np.where(w == fx.W_MAX, fx.INT32_MAX, w)   # words above W_MAX count as W_MAX
        cut = [(0, k1), (k1, k1 + k2)]
        srcs, strides = (0, 100), (heads * k1 // VL + 4, heads * k2 // VL + 2)
        for i, (a, b) in enumerate(cut):
            drv.ram.write(SEG[i], pack_segment(vq[a:b], va[a:b], ve[a:b]))
            await put_rows(sp, srcs[i], w[:, a:b], tokens, heads, strides[i])
        dst, dstr = 200, 2 * D // VL                          # a wide row: 2 head_dim words
        res = await drv.must(gemm_pv(SEG[0], k1, tokens, heads, srcs[0], strides[0], dst, dstr, 0, 1))
        assert res.perf["mac_beats"] == (D // P) * 2 * (k1 // K) * R, res.perf
        await drv.must(gemm_pv(SEG[1], k2, tokens, heads, srcs[1], strides[1], dst, dstr, 1, int(wide)))
        got, _ = await sp.get(dst, R, 2 * D)
        got = np.asarray(got, np.int64)
        if wide:
            val = (got[:, :D] & 0xFFFFFFFF) + (got[:, D:] << 32)
            assert np.array_equal(val, o), f"case {c}: wide o differs from fixed.state_sums"
            assert (np.abs(o) > fx.INT32_MAX).any()
        else:
            assert np.array_equal(i32(got[:, :D]), fx.sat(o, 32)), f"case {c}: sat32 o"
            assert (np.abs(o) < fx.INT32_MAX).any() and (np.abs(o) > fx.INT32_MAX).any()
    # a channel tile sub-range (tile 1 of 2), one segment, sat32
    w, (vq, va, ve), o = pv_weights(rng, R, k1, D, scales=True)
    drv.ram.write(SEG[0], pack_segment(vq, va, ve))
    await put_rows(sp, 0, w, tokens, heads, heads * k1 // VL)
    await drv.must(gemm_pv(SEG[0], k1, tokens, heads, 0, heads * k1 // VL, 300, P // VL, 0, 0, tile0=1, tiles=1))
    got, _ = await sp.get(300, R, P)
    assert np.array_equal(i32(got), fx.sat(o[:, P:], 32)), "tile sub-range"
    # runs of V blocks: 48 keys in blocks of 12 (sat32) and of 20 (20 + 20 + 8, wide), 64-byte gaps
    from tests.hw.compute.exec.test_scores import write_run
    w, (vq, va, ve), o = pv_weights(rng, R, 48, D, extreme=True, scales=True)
    await put_rows(sp, 0, w, tokens, heads, heads * 48 // VL)
    for bk, stride, wide in ((12, 256, 0), (20, 320, 1)):
        write_run(drv.ram, SEG[1], stride, vq, va, ve, bk)
        ins = gemm_pv(SEG[1], 48, tokens, heads, 0, heads * 48 // VL, 400, 2 * D // VL, 0, wide)
        await drv.must(ins.replace(block_keys=bk, seg_stride=stride // isa.DDR_ALIGN))
        got = np.asarray((await sp.get(400, R, 2 * D))[0], np.int64)
        val = (got[:, :D] & 0xFFFFFFFF) + (got[:, D:] << 32) if wide else i32(got[:, :D])
        assert np.array_equal(val, o if wide else fx.sat(o, 32)), f"blocks of {bk} keys: o differs"
    # refused
    ok = dict(seg=SEG[0], keys=k1, tile0=0, tiles=2, tokens=2, heads=3, head_stride=k1 // VL, src=0,
              src_stride=3 * k1 // VL, dst=300, dst_stride=8, acc=0, wide=0)
    for bad in (dict(keys=12), dict(keys=CFG.intermediate_size), dict(tile0=1), dict(tokens=3), dict(dst=2040),
                dict(acc=1, dst=2048 - 6 * 8 + 4), dict(acc=1, dst_stride=4)):
        assert (await drv.run(isa.GemmPv(**{**ok, **bad}))).fault == SeqFault.ILLEGAL_INSTRUCTION, bad
    await drv.must(isa.GemmPv(**ok))


@pytest.mark.cocotb
def test_pv_cocotb(build_dir, tmp_path):
    """GEMM_PV, then on the same build attn:prefill-array at small sizes (tests/hw/compute/exec/
    test_attn_array.py: 2 tokens x 2 heads over 96 keys stored as 24 blocks of 4 keys, one job of 2
    tokens: one GEMM_QK over the run, one ATTN_SM MAX and APPLY, two GEMM_PV (64 keys fill the
    activation buffer, wide then acc + sat32), ATTN_Q O reading their rows 2 head_dim words apart;
    bit-exact against fixed.attention inside the coroutine); then its longer run (mcf bench compute's
    second point of attn:array-fit): one job of 4 tokens over 128 keys in blocks of 4 (8 rows: the
    unit's sm_rows, twice its att_rows), bit-exact too."""
    import json
    report = tmp_path / "array.json"
    run_cocotb(ExecUnit(CFG), [__name__, "tests.hw.compute.exec.test_attn_array"], build_dir,
               testcase=["run_pv", "run_attn_array_ops"],
               params={"seed": 3, "node": CFG.as_dict(),
                       "attn": {"keys": 96, "block_keys": 32, "array_block_keys": 4, "tokens": 2, "longer": [128],
                                "longer_tokens": 4},
                       "attn_array_report": str(report)})
    ops = json.loads(report.read_text())["ops"]
    op = ops[0]
    assert op["jobs"] == 1 and op["rows_per_job"] == 4 and op["visible_keys"] == 95 + 96
    kinds = op["per_kind"]
    assert {k: v["count"] for k, v in kinds.items()} == {
        "ATTN_Q:ROWS": 1, "GEMM_QK": 1, "ATTN_SM:MAX": 1, "ATTN_SM:APPLY": 1, "GEMM_PV": 2,
        "ATTN_Q:O": 1, "ATTN_EMIT": 1}
    # GEMM_QK: (96 / P) tiles x (D / K) beats x 4 rows; GEMM_PV: (D / P) x 2 digits x (96 / K) x 4 rows
    assert kinds["GEMM_QK"]["mac_beats"] == (96 // P) * (D // K) * 4
    assert kinds["GEMM_PV"]["mac_beats"] == (D // P) * 2 * (96 // K) * 4
    # the longer run: one job of 4 tokens x 2 heads over 128 keys (GEMM_PV in 2 runs of 64), its MACs
    # as above at 128 keys and 8 rows; a job over more keys takes more cycles
    lo = ops[1]
    assert (lo["name"], lo["keys"], lo["jobs"], lo["rows_per_job"], lo["visible_keys"]) == (
        "attn:prefill-array:128", 128, 1, 8, 125 + 126 + 127 + 128)
    assert {k: v["count"] for k, v in lo["per_kind"].items()} == {
        "ATTN_Q:ROWS": 1, "GEMM_QK": 1, "ATTN_SM:MAX": 1, "ATTN_SM:APPLY": 1, "GEMM_PV": 2,
        "ATTN_Q:O": 1, "ATTN_EMIT": 1}
    assert lo["per_kind"]["GEMM_QK"]["mac_beats"] == (128 // P) * (D // K) * 8
    assert lo["per_kind"]["GEMM_PV"]["mac_beats"] == (D // P) * 2 * (128 // K) * 8
    cyc = [sum(v["cycles"] for v in o["per_kind"].values()) / o["jobs"] for o in ops]
    assert cyc[1] > cyc[0]


# --- the rate at a model's shapes against the DDR model (``mcf bench compute --model``: attn:pv-array) -----
@cocotb.test()
async def run_pv_ops(dut):
    """One GEMM_PV on the unit of ``params()["node"]`` against the DDR model: ``tokens`` x the node's
    GQA group weight rows (int32 words, LOADed) over one V segment of ``keys`` keys in DDR, all
    channel tiles, sat32 rows STOREd and compared with ``fixed.state_sums``' o bit for bit; the
    instruction's cycles, MAC strobes, the cycles from the first MAC strobe to the last, the DDR
    bytes it read."""
    import json
    from mcf.sim.compute import ddr
    from mcf.sim.compute.exec_driver import ExecDriver
    from mcf.sim.cocotb_util import params
    from mcf.sim.ddr_model import DdrTiming
    from mcf.spec.kv import segment_bytes
    p = params()
    node = NodeConfig(**p["node"])
    q = p["pv"]
    vl, P, K, d, heads, tokens, keys = (node.vec_lanes, node.mac_rows, node.mac_lanes, node.head_dim, node.group,
                                        q["tokens"], q["keys"])
    R = tokens * heads
    rng = np.random.default_rng(p.get("seed", 1))
    drv = ExecDriver(dut, ram_bytes=p["ram_bytes"], timing=DdrTiming(**p["timing"]), axi_period_ps=p.get("axi_period_ps"))
    await drv.start()
    seg_at, w_at, y_at = 0x100000, 0x40000, 0x80000
    w, (vq, va, ve), o = pv_weights(rng, R, keys, d, scales=True)
    drv.ram.write(seg_at, pack_segment(vq, va, ve))
    rb = keys // vl
    drv.ram.write(w_at, ddr.rows_bytes(w, vl))
    await drv.must(isa.Load(ddr=w_at, spad=0, beats=R * rb, row_beats=0))
    dst, dst_stride = R * rb, d // vl
    bytes0 = drv.ram.read_bytes
    drv.mac_first = None
    res = await drv.must(isa.GemmPv(seg=seg_at, keys=keys, tile0=0, tiles=d // P, tokens=tokens, heads=heads,
                                    head_stride=rb, src=0, src_stride=heads * rb, dst=dst, dst_stride=dst_stride,
                                    acc=0, wide=0), max_cycles=10_000_000)
    rd = drv.ram.read_bytes - bytes0
    span = drv.mac_last - drv.mac_first + 1
    await drv.must(isa.Store(ddr=y_at, spad=dst, beats=R * dst_stride, row_beats=0))
    got = np.frombuffer(drv.ram.read(y_at, R * d * 4), dtype="<i4").reshape(R, d)
    assert np.array_equal(got, fx.sat(o, 32)), "GEMM_PV differs from fixed.state_sums"
    assert res.perf["mac_beats"] == (d // P) * 2 * (keys // K) * R
    ops = [{"name": "attn:pv-array", "tokens": tokens, "heads": heads, "rows": R, "keys": keys, "head_dim": d,
            "cycles": res.cycles, "mac_beats": res.perf["mac_beats"], "mac_span_cycles": span, "ddr_read_bytes": rd,
            "segment_bytes": segment_bytes(keys, d)}]
    # a run of two segments (the same one twice): the first writes the wide o, the second adds it (acc)
    # and writes sat32 -- the cycles of each
    for name, acc, wide in (("attn:pv-array:wide", 0, 1), ("attn:pv-array:acc", 1, 0)):
        bytes0 = drv.ram.read_bytes
        drv.mac_first = None
        res = await drv.must(isa.GemmPv(seg=seg_at, keys=keys, tile0=0, tiles=d // P, tokens=tokens, heads=heads,
                                        head_stride=rb, src=0, src_stride=heads * rb, dst=dst,
                                        dst_stride=2 * dst_stride, acc=acc, wide=wide), max_cycles=10_000_000)
        ops.append({**ops[0], "name": name, "cycles": res.cycles, "mac_beats": res.perf["mac_beats"],
                    "mac_span_cycles": drv.mac_last - drv.mac_first + 1, "ddr_read_bytes": drv.ram.read_bytes - bytes0})
    await drv.must(isa.Store(ddr=y_at, spad=dst, beats=R * 2 * dst_stride, row_beats=0))
    got = np.frombuffer(drv.ram.read(y_at, R * 2 * d * 4), dtype="<i4").reshape(R, 2 * d)[:, :d]
    assert np.array_equal(got, fx.sat(o + o, 32)), "GEMM_PV over a run of two segments (wide, acc) differs"
    with open(p["pv_report"], "w") as f:
        json.dump({"ops": ops}, f)
