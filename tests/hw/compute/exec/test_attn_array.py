"""Attention of one GQA group as the array sequence (docs/attention-array.md steps 1-3) on the execute
unit: ``run_attn_array_ops`` is ``mcf bench compute``'s block attn:prefill-array -- the work of
attn:prefill (tests/hw/compute/exec/test_unit.py ``run_attn_ops``: the same keys, query tokens at
the last positions, the same random
draws) in jobs of ``array_tokens(node)`` tokens x the group's heads (the lowering's: min(sm_rows,
max_tokens) // group, 2 at Qwen2.5-1.5B on the KR260 node), its KV stored as the KV pool keeps it: blocks of ``array_block_keys`` keys
(``mcf bench compute``: the preset's kv_block_keys, the cluster model's chunks of 2048; a run of fewer keys is
one block), K and V segments of block i at kv_at + 2 i seg and one seg further.  Per job,
over the whole run of blocks:

    ATTN_Q ROWS (the rows, their positions, emptied states: GEMM_QK reads the query from SPAD); ATTN_SM
    MAX with defer; GEMM_QK (score rows into SPAD, their row maxima into the
    unit's m); ATTN_SM APPLY (w rows into SPAD, V
    scale words block by block); GEMM_PV (sat32 o rows; when the keys exceed one GEMM_PV's
    activation buffer: runs of them, wide, acc + wide, .., acc + sat32); ATTN_Q O (the sat32 o rows
    at GEMM_PV's own stride: 2 head_dim words apart after an acc); ATTN_EMIT FINAL

and the emitted rows are compared with ``fixed.attention`` bit for bit (the bench fails on a
mismatch).  Per instruction kind: count, cycles, MAC strobes, DDR bytes read.  Its test runs it at
the tiny sizes on GEMM_PV's build (tests/hw/compute/exec/test_pv.py ``test_pv_cocotb``)."""
import json
from collections import defaultdict

import cocotb
import numpy as np

from mcf.sim.compute import ddr
from mcf.spec import isa
from mcf.sim.compute.jobs import pv_run_keys
from mcf.spec.isa import AttnLoad, AttnPass, EmitMode
from mcf.spec.node import NodeConfig
from mcf.sw.golden import fixed as fx
from tests.hw.compute.exec.test_movers import bfp_rows
from tests.hw.compute.exec.test_unit import write_kv_blocks


def array_tokens(node: NodeConfig) -> int:
    """Tokens of one array-path job (sw/mars/lower.py ``array_rows`` // the GQA group): the unit's
    state rows (``NodeConfig.sm_rows``) and GEMM_QK's max_tokens rows bound it."""
    return min(node.sm_rows, node.max_tokens) // node.group


def array_program(node: NodeConfig, *, keys: int, bk: int, nt: int, t0: int, qpos0: int, kv_at: int, seg: int,
                  q_at: int, out_at: int, sc: int, wa: int, ow: int) -> list:
    """(kind, instruction) of one job of ``nt`` tokens x the group (tokens t0 .., positions qpos0 ..)
    over a run of KV blocks of ``bk`` keys: block i's K segment at kv_at + 2 i seg, its V segment one
    ``seg`` further."""
    vl, d, heads, P = node.vec_lanes, node.head_dim, node.group, node.mac_rows
    rb, kb, R = d // vl, keys // vl, nt * heads
    tok = heads * rb
    stride = 2 * seg // isa.DDR_ALIGN                        # between consecutive blocks' K (or V) segments
    rows = dict(tokens=nt, heads=heads, tok_stride=tok, head_stride=rb)
    sm = [(f"ATTN_SM:{phase.name}", isa.AttnSm(
        phase=phase, first=1, scores=sc, s_stride=kb, keys=keys, kpos0=0, seg=kv_at + seg, w=wa, w_stride=kb,
        tokens=nt, heads=heads, block_keys=bk, seg_stride=stride, defer=int(phase == AttnPass.MAX)))
        for phase in (AttnPass.MAX, AttnPass.APPLY)]
    # the MAX (defer) takes its maxima as the GEMM_QK after it writes the scores (the lowering's order)
    prog = [("ATTN_Q:ROWS", isa.AttnQ(what=AttnLoad.ROWS, spad=q_at + t0 * tok, qpos0=qpos0 + t0, **rows)),
            sm[0],
            ("GEMM_QK", isa.GemmQk(seg=kv_at, seg_stride=stride, block_keys=bk, tile0=0, tiles=-(-keys // P),
                                   tokens=nt, heads=heads, head_stride=rb, src=q_at + t0 * tok, src_stride=tok,
                                   dst=sc, dst_stride=kb)),
            sm[1]]
    run = pv_run_keys(node, keys, bk)
    nrun = -(-keys // run)
    o_stride = 2 * rb if nrun > 1 else rb                    # acc reads the wide rows: 2 d words apart
    for i in range(nrun):
        k0, n = i * run, min(run, keys - i * run)
        prog.append(("GEMM_PV", isa.GemmPv(seg=kv_at + (2 * (k0 // bk) + 1) * seg, keys=n, tile0=0, tiles=d // P,
                                           tokens=nt, heads=heads, head_stride=kb, src=wa + k0 // vl,
                                           src_stride=heads * kb, dst=ow, dst_stride=o_stride, acc=int(i > 0),
                                           wide=int(i < nrun - 1), block_keys=bk, seg_stride=stride)))
    prog.append(("ATTN_Q:O", isa.AttnQ(what=AttnLoad.O, spad=ow, qpos0=0, tokens=nt, heads=heads,
                                       tok_stride=heads * o_stride, head_stride=o_stride)))
    prog.append(("ATTN_EMIT", isa.AttnEmit(mode=EmitMode.FINAL, spad=out_at + t0 * tok, **rows)))
    return prog


async def _array_op(drv, node: NodeConfig, rng, name: str, *, keys: int, bk: int, abk: int, tokens: int,
                    per_job: int) -> dict:
    """attn:prefill-array's work over ``keys`` keys (drawn in blocks of ``bk``, stored in blocks of
    ``abk``; a run of fewer keys is one block) for the queries of ``tokens`` tokens at the last positions in
    jobs of ``per_job`` tokens: run, compared with ``fixed.attention`` bit for bit; its report entry."""
    vl, d, heads = node.vec_lanes, node.head_dim, node.group
    abk = min(abk, keys)
    assert per_job >= 1 and keys % bk == 0 and keys % abk == 0
    kv_at, x_at, y_at = 0x100000, 0x40000, 0x80000
    # the draws of run_attn_ops: the same KV (stored in blocks of abk keys) and the same prefill queries
    seg, kvs = write_kv_blocks(drv, rng, keys, bk, d, kv_at, abk)
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
    assert ow + R * 2 * rb <= node.spad_beats, f"{name}: the job's rows do not fit the SPAD"
    drv.ram.write(x_at, ddr.rows_bytes(q[0], vl, q[1]))
    await drv.must(isa.Load(ddr=x_at, spad=q_at, beats=tokens * heads * rb, row_beats=rb))
    kinds = defaultdict(lambda: defaultdict(int))
    for t0 in range(0, tokens, per_job):
        nt = min(per_job, tokens - t0)
        for kind, ins in array_program(node, keys=keys, bk=abk, nt=nt, t0=t0, qpos0=qpos0, kv_at=kv_at, seg=seg,
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
    assert np.array_equal(got, want), f"{name}: attention rows differ from fixed.attention"
    return {"name": name, "tokens": tokens, "heads": heads, "keys": keys, "block_keys": abk, "segment_bytes": seg,
            "jobs": -(-tokens // per_job), "rows_per_job": min(per_job, tokens) * heads,
            "visible_keys": int((kpos[None] <= qpos[:, None]).sum()),
            "per_kind": {k: dict(v) for k, v in kinds.items()}}


@cocotb.test()
async def run_attn_array_ops(dut):
    """attn:prefill-array on the unit of ``params()["node"]`` (``attn``: keys, block_keys (the draws),
    array_block_keys (the stored blocks), tokens, tokens_per_job (default ``array_tokens``); ``longer``:
    more key counts, each run after it as ``attn:prefill-array:<keys>`` for ``longer_tokens`` tokens
    (default: two jobs) over its own draws),
    against the DDR model when ``timing`` is given (else AxiRam with random pauses); the report
    (JSON) to ``attn_array_report``."""
    from mcf.sim.cocotb_util import params
    from mcf.sim.compute.exec_driver import ExecDriver
    from mcf.sim.ddr_model import DdrTiming
    p = params()
    node = NodeConfig(**p["node"])
    a = p["attn"]
    abk = a.get("array_block_keys", a["block_keys"])
    rng = np.random.default_rng(p.get("seed", 1))
    timing = DdrTiming(**p["timing"]) if p.get("timing") else None
    drv = ExecDriver(dut, ram_bytes=p.get("ram_bytes", 1 << 21), timing=timing, axi_period_ps=p.get("axi_period_ps"),
                     pause=0.0 if timing else 0.2)
    await drv.start()
    per_job = a.get("tokens_per_job") or array_tokens(node)
    ops = [await _array_op(drv, node, rng, "attn:prefill-array", keys=a["keys"], bk=a["block_keys"], abk=abk,
                           tokens=a["tokens"], per_job=per_job)]
    for keys in a.get("longer", ()):
        ops.append(await _array_op(drv, node, rng, f"attn:prefill-array:{keys}", keys=keys, bk=abk, abk=abk,
                                   tokens=a.get("longer_tokens", 2 * per_job), per_job=per_job))
    with open(p["attn_array_report"], "w") as f:
        json.dump({"ops": ops}, f)
