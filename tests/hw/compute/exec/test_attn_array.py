"""Attention of one GQA group as the array sequence (docs/attention-array.md steps 1-3) on the execute
unit: ``run_attn_array_ops`` is ``mcf bench compute``'s block attn:prefill-array -- the work of
attn:prefill (tests/hw/compute/exec/test_unit.py ``run_attn_ops``: the same keys, K / V segments of
``block_keys`` keys, query tokens at the last positions, jobs of ``att_rows // group`` tokens x the
group's heads, the same random draws) run per job as

    ATTN_Q QUERY; GEMM kv per K segment (score rows into SPAD); ATTN_SM MAX per segment;
    ATTN_SM APPLY per segment (w rows into SPAD, V scale words from DDR); GEMM_PV per V segment
    (wide, acc + wide, .., the last acc + sat32); ATTN_Q O (the sat32 o rows at GEMM_PV's own
    stride: 2 head_dim words apart after an acc); ATTN_EMIT FINAL

and the emitted rows are compared with ``fixed.attention`` bit for bit (the bench fails on a
mismatch).  Per instruction kind: count, cycles, MAC strobes, DDR bytes read.  Its test runs it at
the tiny sizes on GEMM_PV's build (tests/hw/compute/exec/test_pv.py ``test_pv_cocotb``)."""
import json
from collections import defaultdict

import cocotb
import numpy as np

from mcf.sim.compute import ddr
from mcf.spec import isa
from mcf.spec.isa import AttnLoad, AttnPass, EmitMode
from mcf.spec.node import NodeConfig
from mcf.sw.golden import fixed as fx
from tests.hw.compute.exec.test_movers import bfp_rows
from tests.hw.compute.exec.test_unit import write_kv_blocks


def array_program(node: NodeConfig, *, keys: int, bk: int, nt: int, t0: int, qpos0: int, kv_at: int, seg: int,
                  q_at: int, out_at: int, sc: int, wa: int, ow: int) -> list:
    """(kind, instruction) of one job of ``nt`` tokens x the group (tokens t0 .., positions qpos0 ..):
    K segment i at kv_at + 2 i seg, V segment i one ``seg`` further (run_attn_ops' layout)."""
    vl, d, heads, P = node.vec_lanes, node.head_dim, node.group, node.mac_rows
    rb, kb, nblk, R = d // vl, keys // vl, keys // bk, nt * heads
    tok = heads * rb
    rows = dict(tokens=nt, heads=heads, tok_stride=tok, head_stride=rb)
    prog = [("ATTN_Q:QUERY", isa.AttnQ(what=AttnLoad.QUERY, spad=q_at + t0 * tok, qpos0=qpos0 + t0, **rows))]
    for i in range(nblk):
        prog.append(("GEMM:kv", isa.Gemm(blob=kv_at + 2 * i * seg, n=d, total_tiles=bk // P, tile0=0, tiles=bk // P,
                                         tokens=nt, group_log2=0, w_exp=0, bias=0, src=q_at + t0 * tok,
                                         src_stride=tok, dst=sc + i * bk // vl, dst_stride=kb, kv=1, heads=heads,
                                         head_stride=rb)))
    for phase in (AttnPass.MAX, AttnPass.APPLY):
        for i in range(nblk):
            prog.append((f"ATTN_SM:{phase.name}", isa.AttnSm(
                phase=phase, first=int(i == 0), scores=sc + i * bk // vl, s_stride=kb, keys=bk, kpos0=i * bk,
                seg=kv_at + (2 * i + 1) * seg, w=wa + i * bk // vl, w_stride=kb, tokens=nt, heads=heads)))
    o_stride = 2 * rb if nblk > 1 else rb                    # acc reads the wide rows: 2 d words apart
    for i in range(nblk):
        prog.append(("GEMM_PV", isa.GemmPv(seg=kv_at + (2 * i + 1) * seg, keys=bk, tile0=0, tiles=d // P, tokens=nt,
                                           heads=heads, head_stride=kb, src=wa + i * bk // vl, src_stride=heads * kb,
                                           dst=ow, dst_stride=o_stride, acc=int(i > 0), wide=int(i < nblk - 1))))
    prog.append(("ATTN_Q:O", isa.AttnQ(what=AttnLoad.O, spad=ow, qpos0=0, tokens=nt, heads=heads,
                                       tok_stride=heads * o_stride, head_stride=o_stride)))
    prog.append(("ATTN_EMIT", isa.AttnEmit(mode=EmitMode.FINAL, spad=out_at + t0 * tok, **rows)))
    return prog


@cocotb.test()
async def run_attn_array_ops(dut):
    """attn:prefill-array on the unit of ``params()["node"]`` (``attn``: keys, block_keys, tokens),
    against the DDR model when ``timing`` is given (else AxiRam with random pauses); the report
    (JSON) to ``attn_array_report``."""
    from mcf.sim.cocotb_util import params
    from mcf.sim.compute.exec_driver import ExecDriver
    from mcf.sim.ddr_model import DdrTiming
    p = params()
    node = NodeConfig(**p["node"])
    a = p["attn"]
    vl, d, heads = node.vec_lanes, node.head_dim, node.group
    keys, bk, tokens = a["keys"], a["block_keys"], a["tokens"]
    per_job = node.att_rows // heads
    assert per_job >= 1 and keys % bk == 0
    rng = np.random.default_rng(p.get("seed", 1))
    timing = DdrTiming(**p["timing"]) if p.get("timing") else None
    drv = ExecDriver(dut, ram_bytes=p.get("ram_bytes", 1 << 21), timing=timing, axi_period_ps=p.get("axi_period_ps"),
                     pause=0.0 if timing else 0.2)
    await drv.start()
    nblk = keys // bk
    kv_at, x_at, y_at = 0x100000, 0x40000, 0x80000
    # the draws of run_attn_ops: the same KV and the same prefill queries
    seg, kvs = write_kv_blocks(drv, rng, keys, bk, d, kv_at)
    kpos = np.arange(keys)
    qpos0 = keys - tokens
    q = fx.prescale_query(bfp_rows(rng, tokens * heads, d), d)
    rb, kb = d // vl, keys // vl
    R = per_job * heads
    q_at = 0
    out_at = q_at + tokens * heads * rb
    sc = out_at + tokens * heads * rb
    wa = sc + R * kb
    ow = wa + R * kb
    assert ow + R * 2 * rb <= node.spad_beats, "attn:prefill-array: the job's rows do not fit the SPAD"
    drv.ram.write(x_at, ddr.rows_bytes(q[0], vl, q[1]))
    await drv.must(isa.Load(ddr=x_at, spad=q_at, beats=tokens * heads * rb, row_beats=rb))
    kinds = defaultdict(lambda: defaultdict(int))
    for t0 in range(0, tokens, per_job):
        nt = min(per_job, tokens - t0)
        for kind, ins in array_program(node, keys=keys, bk=bk, nt=nt, t0=t0, qpos0=qpos0, kv_at=kv_at, seg=seg,
                                       q_at=q_at, out_at=out_at, sc=sc, wa=wa, ow=ow):
            bytes0 = getattr(drv.ram, "read_bytes", 0)      # counted by the DDR model only
            res = await drv.must(ins, max_cycles=10_000_000)
            st = kinds[kind]
            st["count"] += 1
            st["cycles"] += res.cycles
            st["mac_beats"] += res.perf.get("mac_beats", 0)
            st["ddr_read_bytes"] += getattr(drv.ram, "read_bytes", 0) - bytes0
    await drv.must(isa.Store(ddr=y_at, spad=out_at, beats=tokens * heads * rb, row_beats=0))
    got = np.frombuffer(drv.ram.read(y_at, tokens * heads * d * 4), dtype="<i4").reshape(tokens, heads, d)
    qpos = qpos0 + np.arange(tokens)
    q3 = (q[0].reshape(tokens, heads, d), q[1].reshape(tokens, heads))
    want = fx.attention(q3, tuple(kvs[:3]), tuple(kvs[3:]), qpos, kpos, heads)
    assert np.array_equal(got, want), "attn:prefill-array: attention rows differ from fixed.attention"
    report = {"ops": [{"name": "attn:prefill-array", "tokens": tokens, "heads": heads, "keys": keys,
                       "block_keys": bk, "segment_bytes": seg, "jobs": -(-tokens // per_job),
                       "rows_per_job": min(per_job, tokens) * heads,
                       "visible_keys": int((kpos[None] <= qpos[:, None]).sum()),
                       "per_kind": {k: dict(v) for k, v in kinds.items()}}]}
    with open(p["attn_array_report"], "w") as f:
        json.dump(report, f)
