"""The execute unit (hw/compute/exec/unit.py) as a whole, cocotb + Icarus, AxiRam as DDR with
random pauses (two weight ports, ``NodeConfig.weight_ports``): ONE DECODER LAYER of the tiny model as an EX program (``mcf.sim.compute.exec_layer``:
EMBED, RMSNORM, GEMMs, RoPE, KVW into a KV pool in DDR, gated two-pass attention over every block
so far, MLP, residuals, STORE) for a prefill chunk of 8 tokens and then one decode token, equal
to ``FixedModel._layer`` bit for bit, the pool's blocks equal to the golden KV cache's bytes;
the unit's cycles and strobes per instruction kind (``mcf bench compute`` runs the same coroutine
without pauses and reports them).  ``run_axi_errors``: a DDR error response ends the instruction
with AXI_ERROR, after its transfers; the unit keeps working."""
import json
from collections import defaultdict

import cocotb
import numpy as np
import pytest

from mcf.hw.compute.dot_array import DotArray
from mcf.hw.compute.exec.unit import ExecUnit
from mcf.sim.benchmarks.compute import layer_figures
from mcf.sim.cocotb_util import params
from mcf.sim.compute import ddr
from mcf.sim.compute.exec_driver import ExecDriver
from mcf.sim.compute.exec_layer import SLOT, LayerProgram
from mcf.sim.runner import run_cocotb
from mcf.spec import isa
from mcf.spec.isa import SeqFault
from mcf.spec.kv import pack_block_layer
from mcf.spec.node import NodeConfig
from mcf.sw.golden import FixedModel, random_weights
from mcf.sw.golden import fixed as fx
from mcf.sw.models import load_model

CFG = NodeConfig.tiny()

#: Instruction kinds as the performance counters group them.
KIND = {isa.Opcode.GEMM: "gemm", isa.Opcode.VEC: "vec", isa.Opcode.ATTN_Q: "attn", isa.Opcode.ATTN_KV: "attn",
        isa.Opcode.ATTN_EMIT: "attn", isa.Opcode.KVW: "kvw", isa.Opcode.EMBED: "embed", isa.Opcode.LOAD: "ldst",
        isa.Opcode.STORE: "ldst", isa.Opcode.DIR: "dir"}


@cocotb.test()
async def run_layer(dut):
    p = params()
    rng = np.random.default_rng(p.get("seed", 1))
    cfg = load_model("tiny")
    model = FixedModel(cfg, random_weights(cfg, seed=p.get("seed", 1)), group_size=32)
    node = CFG.replace(weight_ports=p.get("weight_ports", 1), vec_lanes=p.get("vec_lanes", CFG.vec_lanes))
    plan = LayerProgram(model, node)
    drv = ExecDriver(dut, ram_bytes=1 << (plan.ddr_bytes - 1).bit_length(), seed=p.get("seed", 1),
                     pause=p.get("pause", 0.2), axi_period_ps=p.get("axi_period_ps"))
    assert len(drv.weight_ports) == (node.weight_ports if node.weight_ports > 1 else 0)
    for addr, data in plan.image.items():
        drv.ram.write(addr, data)
    await drv.start()
    tokens = rng.integers(0, cfg.vocab_size, size=9)
    gcache = model.new_cache()
    stats = defaultdict(lambda: defaultdict(int))
    total = defaultdict(int)
    for block, (p0, count) in enumerate(((0, 8), (8, 1))):
        ids = tokens[p0:p0 + count]
        drv.ram.write(plan.addr["ids"], ddr.words_bytes(ids))
        for ins in plan.chunk(p0, count):
            out = await drv.must(ins)
            if ins.OPCODE == isa.Opcode.GEMM:      # the MAC strobe: one per weight beat x token
                assert out.perf["mac_beats"] == ins.tiles * (ins.n // CFG.mac_lanes) * ins.tokens, ins
            st = stats[f"{'prefill' if count > 1 else 'decode'}:{isa.Opcode(ins.OPCODE).name}"]
            st["count"] += 1
            st["cycles"] += out.cycles
            for k, v in out.perf.items():
                st[k] += v
                total[k] += v
            total["cycles"] += out.cycles
        x = fx.embed(model.embed, ids)
        pos = np.arange(p0, p0 + count)
        _, k, v = model.attention_inputs(0, x, pos)
        want = model._layer(0, x, pos, gcache)
        got = np.frombuffer(drv.ram.read(plan.addr["out"], count * cfg.hidden_size * 4), dtype="<i4").reshape(count, -1)
        assert np.array_equal(got, want), f"chunk at {p0}: layer output differs"
        kv_bytes = drv.ram.read(plan.addr["kv"] + block * SLOT, plan.block_bytes(block))
        assert kv_bytes == pack_block_layer(k, v), f"chunk at {p0}: KV block differs from the golden cache"
    if p.get("report"):
        with open(p["report"], "w") as f:
            json.dump({"per_kind": {k: dict(v) for k, v in stats.items()}, "total": dict(total)}, f)


@cocotb.test()
async def run_axi_errors(dut):
    """SLVERR on reads (LOAD) and writes (STORE, KVW): the instruction completes its transfers
    and faults AXI_ERROR; then the unit runs the next instruction normally."""
    drv = ExecDriver(dut, seed=5, axi_period_ps=params().get("axi_period_ps"))
    await drv.start()
    poison = range(0x8000, 0x9000)
    read_if, write_if = drv.ram.read_if, drv.ram.write_if
    real_read, real_write = read_if._read, write_if._write

    async def bad_read(address, length):
        if address in poison:
            raise OSError("poisoned")
        return await real_read(address, length)

    async def bad_write(address, data):
        if address in poison:
            raise OSError("poisoned")
        return await real_write(address, data)

    read_if._read, write_if._write = bad_read, bad_write
    drv.ram.write(0x1000, bytes(range(256)))
    assert (await drv.run(isa.Load(ddr=0x8000, spad=0, beats=4, row_beats=0))).fault == SeqFault.AXI_ERROR
    assert (await drv.run(isa.Store(ddr=0x8000, spad=0, beats=4, row_beats=0))).fault == SeqFault.AXI_ERROR
    assert (await drv.run(isa.Kvw(src=0, rows=2, row_stride=2, seg=0x8000))).fault == SeqFault.AXI_ERROR
    beats = 256 // (4 * params().get("vec_lanes", CFG.vec_lanes))
    await drv.must(isa.Load(ddr=0x1000, spad=0, beats=beats, row_beats=0))
    await drv.must(isa.Store(ddr=0x2000, spad=0, beats=beats, row_beats=0))
    assert drv.ram.read(0x2000, 256) == bytes(range(256))


def test_construction():
    unit = ExecUnit(CFG)
    assert unit.g.vl == CFG.vec_lanes and len(unit.m_axi.arid) == 2 and len(unit.m_axi.araddr) == isa.DDR_ADDR_BITS
    assert set(unit.movers) == {"dir", "ldst", "embed", "gemm", "vec", "attn", "kvw"}
    with pytest.raises(ValueError, match="^execute unit: mac_rows=6 must be a power of two$"):
        ExecUnit(CFG.replace(mac_rows=6))
    with pytest.raises(ValueError, match="^execute unit: head_dim=24 must be a power of two$"):
        ExecUnit(CFG.replace(head_dim=24))


def test_qwen_shapes_elaborate():
    """The unit of the Qwen2.5-1.5B node builds (the lint test converts and lints it)."""
    unit = ExecUnit(NodeConfig.qwen2_5_1_5b())
    matrix = unit.movers["gemm"].matrix
    assert unit.g.max_n == 8960 and matrix.macs_per_cycle == 64 * 32 and matrix.packed
    # issue 14: >= 1000 DSP48E2 for products (two INT4 x 16-bit products each)
    assert DotArray(matrix.mac_rows, matrix.mac_lanes).multipliers == 1024


#: The weight loaders' own clock in the cocotb test: the Qwen node's 300 / 250 MHz, so the engine's
#: 10 ns is ~8.333 ns there (8.334: cocotb's clock wants an even period) (a non-integer ratio: the two clocks' edges drift through every phase).
AXI_PERIOD_PS = 8_334


@pytest.mark.cocotb
def test_unit_cocotb(build_dir):
    """With two weight ports (NodeConfig.weight_ports) ON THEIR OWN CLOCK (weight_clock_hz, the
    Qwen node's 300 MHz against the engine's 250): the weights of every GEMM spread over two
    loaders, each on its own AXI4 master in the ``axi`` domain, crossed in the loaders' dual-clock
    buffers, words of 2 x 2 bus beats taken back in turn, every channel paused at random; the
    one-clock units run the same layers inside the node benches (tests/hw/test_node.py: one and two
    loaders; tests/sim/rtlcluster: two) and ``mcf bench compute``.  With VL = 4 lanes (half the
    array's 8): the SPAD in two banks, the GEMM mover filling the token buffer from two beats at a
    time while the matrix runs, as the Qwen node does (VL 8, 32 lanes, four banks)."""
    report = build_dir.parent / "layer.json"
    cfg = CFG.replace(weight_ports=2, hp_ports=3, vec_lanes=4, weight_clock_hz=300_000_000)
    unit = ExecUnit(cfg)
    assert [n for n in unit.signature.members if n.startswith("m_axi")] == ["m_axi", "m_axi_w0", "m_axi_w1"]
    assert unit.g.spad_banks == 2 and unit.g.weight_beats == 4 and unit.g.weight_cdc
    run_cocotb(unit, __name__, build_dir, testcase=["run_layer", "run_axi_errors"],
               params={"seed": 3, "report": str(report), "weight_ports": 2, "vec_lanes": 4,
                       "axi_period_ps": AXI_PERIOD_PS})
    fig = layer_figures(json.loads(report.read_text()), CFG)       # what `mcf bench compute` prints
    assert fig["prefill"]["instructions"] > 50 and fig["decode"]["cycles"] < fig["prefill"]["cycles"]
    assert 0 < fig["decode"]["mac_utilization"] < fig["prefill"]["mac_utilization"] <= 1
    assert fig["prefill"]["gemm_mac_utilization"] >= fig["prefill"]["mac_utilization"]



# --- the engine's figures at a model's shapes against the DDR model (``mcf bench compute --model``) -----
@cocotb.test()
async def run_gemm_ops(dut):
    """GEMMs of ``params()["ops"]`` (name, n, tiles, tokens) on the unit of ``params()["node"]``
    against the DDR model (``params()["timing"]``): random INT4 weights (group G), random BFP
    activation rows LOADed into the SPAD, the GEMM, its output STOREd and compared with the golden
    ``fixed.linear`` bit for bit; per op the instruction's cycles, MAC strobes, the cycles from the
    first MAC strobe to the last, and the DDR bytes read during the GEMM."""
    from mcf.sim.ddr_model import DdrTiming
    p = params()
    node = NodeConfig(**p["node"])
    vl, P, K = node.vec_lanes, node.mac_rows, node.mac_lanes
    timing = DdrTiming(**p["timing"])
    rng = np.random.default_rng(p.get("seed", 1))
    drv = ExecDriver(dut, ram_bytes=p["ram_bytes"], timing=timing, axi_period_ps=p.get("axi_period_ps"))
    await drv.start()
    out = []
    blob_at, x_at, y_at = 0x100000, 0x40000, 0x80000
    for op in p["ops"]:
        n, tiles, tokens, group = op["n"], op["tiles"], op["tokens"], op["group"]
        w = fx.quantize_weight(rng.standard_normal((tiles * P, n)) * 0.05, group)
        b = fx.quantize_x32(rng.standard_normal(tiles * P) * 4)
        blob, lay = ddr.gemm_blob(w, b, P, K)
        drv.ram.write(blob_at, blob)
        xm, xe = fx.x32_to_bfp(fx.quantize_x32(rng.standard_normal((tokens, n))))
        drv.ram.write(x_at, ddr.rows_bytes(xm, vl, xe))
        await drv.must(isa.Load(ddr=x_at, spad=0, beats=tokens * n // vl, row_beats=n // vl))
        dst, dst_stride = tokens * n // vl, tiles * P // vl
        bytes0 = drv.ram.read_bytes
        drv.mac_first = None
        res = await drv.must(isa.Gemm(blob=blob_at, n=n, total_tiles=tiles, tile0=0, tiles=tiles, tokens=tokens,
                                      group_log2=group.bit_length() - 1, w_exp=w.exp, bias=1, src=0,
                                      src_stride=n // vl, dst=dst, dst_stride=dst_stride),
                             max_cycles=50_000_000)
        rd = drv.ram.read_bytes - bytes0
        span = drv.mac_last - drv.mac_first + 1
        await drv.must(isa.Store(ddr=y_at, spad=dst, beats=tokens * dst_stride, row_beats=0))
        got = np.frombuffer(drv.ram.read(y_at, tokens * tiles * P * 4), dtype="<i4").reshape(tokens, -1)
        assert np.array_equal(got, fx.linear((xm, xe), w, b)), f"{op['name']}: GEMM output differs from fixed.linear"
        assert res.perf["mac_beats"] == tiles * (n // K) * tokens
        out.append({**op, "cycles": res.cycles, "mac_beats": res.perf["mac_beats"], "mac_span_cycles": span,
                    "ddr_read_bytes": rd, "weight_bytes": lay.tiles * lay.w_tile})
    with open(p["report"], "w") as f:
        json.dump({"ops": out, "ddr_model": {"read_bytes": drv.ram.read_bytes,
                                             "max_outstanding": [drv.ram.max_outstanding(k)
                                                                 for k in range(len(drv.ram.ports))]}}, f)


def write_kv_blocks(drv, rng, keys: int, bk: int, d: int, kv_at: int, store_keys: int | None = None):
    """keys // bk random KV blocks of bk keys (the draws), stored in the driver's RAM as blocks of
    ``store_keys`` keys (default bk; it divides keys): stored block i's K segment at kv_at + 2 i seg,
    its V segment one seg further.  Returns (seg, [kq, ka, ke, vq, va, ve] of all the keys, each
    [keys, 1, ...]: one KV head)."""
    from mcf.spec.kv import segment_bytes
    from tests.hw.compute.exec.test_movers import bfp_rows
    sk = store_keys or bk
    assert keys % sk == 0
    seg = isa.pad(segment_bytes(sk, d))
    blocks = [(fx.quantize_kv(bfp_rows(rng, bk, d)), fx.quantize_kv(bfp_rows(rng, bk, d))) for _ in range(keys // bk)]
    kvs = [np.concatenate([blk[s][f] for blk in blocks]) for s in range(2) for f in range(3)]
    for i in range(keys // sk):
        k = slice(i * sk, (i + 1) * sk)
        drv.ram.write(kv_at + 2 * i * seg, ddr.segment(*(x[k] for x in kvs[:3])))
        drv.ram.write(kv_at + (2 * i + 1) * seg, ddr.segment(*(x[k] for x in kvs[3:])))
    return seg, [x[:, None] for x in kvs]


@cocotb.test()
async def run_attn_ops(dut):
    """One attention block of one GQA group (``node.group`` query heads on one KV head) against the
    DDR model: ``keys`` keys of INT4 KV (K and V segments of ``block_keys`` keys in DDR, positions
    0 .. keys - 1) and the queries of a prefill chunk of ``tokens`` tokens at the last positions, then
    one decode token (the last position): per job of ``att_rows // group`` tokens x ``group`` heads
    ATTN_Q QUERY, ATTN_KV MAX over every block, ATTN_KV APPLY over every block, ATTN_EMIT FINAL;
    the emitted rows equal ``fixed.attention`` bit for bit.  Per instruction kind: count, cycles,
    DDR bytes read (K is read by both passes, V by APPLY: once per group, not once per head)."""
    from mcf.sim.ddr_model import DdrTiming
    from mcf.spec.isa import AttnLoad, AttnPass, EmitMode
    from tests.hw.compute.exec.test_movers import bfp_rows
    p = params()
    node = NodeConfig(**p["node"])
    a = p["attn"]
    vl, d, heads = node.vec_lanes, node.head_dim, node.group
    keys, bk = a["keys"], a["block_keys"]
    per_job = node.att_rows // heads
    assert per_job >= 1 and keys % bk == 0
    rng = np.random.default_rng(p.get("seed", 1))
    drv = ExecDriver(dut, ram_bytes=p["ram_bytes"], timing=DdrTiming(**p["timing"]), axi_period_ps=p.get("axi_period_ps"))
    await drv.start()
    nblk = keys // bk
    kv_at, x_at, y_at = 0x100000, 0x40000, 0x80000
    seg, kvs = write_kv_blocks(drv, rng, keys, bk, d, kv_at)
    kpos = np.arange(keys)
    run = dict(seg=kv_at, v_off=seg // isa.DDR_ALIGN, seg_stride=2 * seg // isa.DDR_ALIGN,
               blocks=nblk, keys=bk, kpos0=0, pos_stride=bk, block0=0, block_stride=0, gated=0)
    out = []
    for name, tokens in (("attn:prefill", a["tokens"]), ("attn:decode", 1)):
        qpos0 = keys - tokens
        q = fx.prescale_query(bfp_rows(rng, tokens * heads, d), d)
        drv.ram.write(x_at, ddr.rows_bytes(q[0], vl, q[1]))
        rb = d // vl                                            # SPAD beats of one head's row
        await drv.must(isa.Load(ddr=x_at, spad=0, beats=tokens * heads * rb, row_beats=rb))
        dst = tokens * heads * rb
        tok_stride = heads * rb
        kinds = defaultdict(lambda: defaultdict(int))
        for t0 in range(0, tokens, per_job):
            nt = min(per_job, tokens - t0)
            prog = [("ATTN_Q", isa.AttnQ(what=AttnLoad.QUERY, spad=t0 * tok_stride, tokens=nt, heads=heads,
                                         tok_stride=tok_stride, head_stride=rb, qpos0=qpos0 + t0)),
                    ("ATTN_KV:MAX", isa.AttnKV(phase=AttnPass.MAX, first=1, **run)),
                    ("ATTN_KV:APPLY", isa.AttnKV(phase=AttnPass.APPLY, first=1, **run)),
                    ("ATTN_EMIT", isa.AttnEmit(mode=EmitMode.FINAL, spad=dst + t0 * tok_stride, tokens=nt,
                                               heads=heads, tok_stride=tok_stride, head_stride=rb))]
            for kind, ins in prog:
                bytes0 = drv.ram.read_bytes
                res = await drv.must(ins, max_cycles=10_000_000)
                st = kinds[kind]
                st["count"] += 1
                st["cycles"] += res.cycles
                st["ddr_read_bytes"] += drv.ram.read_bytes - bytes0
                st["rows"] += nt * heads
        await drv.must(isa.Store(ddr=y_at, spad=dst, beats=tokens * heads * rb, row_beats=0))
        got = np.frombuffer(drv.ram.read(y_at, tokens * heads * d * 4), dtype="<i4").reshape(tokens, heads, d)
        qpos = qpos0 + np.arange(tokens)
        q3 = (q[0].reshape(tokens, heads, d), q[1].reshape(tokens, heads))
        want = fx.attention(q3, tuple(kvs[:3]), tuple(kvs[3:]), qpos, kpos, heads)
        assert np.array_equal(got, want), f"{name}: attention rows differ from fixed.attention"
        out.append({"name": name, "tokens": tokens, "heads": heads, "keys": keys, "block_keys": bk,
                    "segment_bytes": seg, "visible_keys": int((kpos[None] <= qpos[:, None]).sum()),
                    "per_kind": {k: dict(v) for k, v in kinds.items()}})
    with open(p["attn_report"], "w") as f:
        json.dump({"ops": out}, f)
