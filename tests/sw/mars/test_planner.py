"""MARS planner: closed forms checked against hand-derived numbers, and the search against brute force."""
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from mcf.sw.errors import UserError
from mcf.sw.mars.planner import (ALPHA_GRID, PlanRequest, _Instance, chunk_candidates, mars_target,
                                 owners_for, plan)
from mcf.sw.mars.profile import load_profile
from mcf.spec.topology import Topology
from mcf.sw.models.config import load_model

QWEN = load_model("qwen2.5-1.5b")
TINY = load_model("tiny")          # M_token = 2 * 2 layers * 2 kv heads * 16 * 0.5 B = 64 B
KR260 = load_profile("kr260")
FOUR_PORTS = KR260.with_(net_ports=4)   # a hypothetical 4-port node for ring / grid topologies


def test_kv_token_bytes_eq1():
    assert QWEN.kv_token_bytes == 2 * 28 * 2 * 128 * 0.5 == 7168
    assert TINY.kv_token_bytes == 64


def test_profile_derived_figures():
    eff = yaml.safe_load((Path(__file__).resolve().parents[3] / "sw/mars/profiles/kr260.yaml").read_text())
    assert KR260.p_node == pytest.approx(64 * 32 * 2 * 250e6 * eff["compute_efficiency"])
    assert KR260.bw_eff == pytest.approx(10e9 / 8 * 0.95)                # 1.1875 GB/s
    assert KR260.ddr_bandwidth_Bps == 8 * 2.4e9                          # 64-bit x 2400 MT/s
    assert KR260.net_ports == 1 and KR260.topology == "switch"


def test_owner_layouts():
    assert owners_for("contiguous", 8, 4).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert owners_for("round-robin", 6, 4).tolist() == [0, 1, 2, 3, 0, 1]
    assert owners_for("zigzag", 8, 4).tolist() == [0, 1, 2, 3, 3, 2, 1, 0]


def _inst(budget, alpha_nodes=4, S=64, B=16, scheme="mars"):
    req = PlanRequest(TINY, S, alpha_nodes, KR260, scheme=scheme, budget_bytes=budget,
                      chunk_size=B).resolved()
    return _Instance(req, B, Topology("switch", alpha_nodes))


def test_replica_factor_closed_forms_eq11_15_16():
    # S=64, B=16: C=4 blocks of 16 * 64 = 1024 B; N=4, S_node = 1536 B.
    # r_mem(t) = floor(4 * 1536 / (1024 (t + 1))) = floor(6 / (t + 1)) = 6, 3, 2, 1, 1 -> clamp 4, 3, 2, 1, 1
    inst = _inst(1536)
    assert mars_target(inst, math.inf).tolist() == [4, 3, 2, 1, 1]
    # r_reuse(t) = 1 + floor(0.5 * (4 - t)) = 3, 2, 2, 1, 1
    assert mars_target(inst, 0.5).tolist() == [3, 2, 2, 1, 1]
    assert mars_target(inst, 0.0).tolist() == [1, 1, 1, 1, 1]


def test_ring_and_full_volume_closed_forms_eq21_22():
    # 4 blocks of 1024 B on 4 nodes.  Ring: in step t every node receives the t history blocks
    # it does not own: 1024 * 3 * (0 + 1 + 2 + 3) = 18432.  Full replication: blocks 0..2 go to
    # the 3 other nodes once; block 3 is read by no later chunk, so it is not replicated: 9216.
    ring = plan(PlanRequest(TINY, 64, 4, KR260, scheme="ring", chunk_size=16))
    assert ring.comm_bytes == 18432 and ring.r_step.tolist() == [1] * 5
    full = plan(PlanRequest(TINY, 64, 4, KR260, scheme="full", chunk_size=16))
    assert full.comm_bytes == 9216 and full.fetch_bytes.sum() == 0
    mars = plan(PlanRequest(TINY, 64, 4, KR260, chunk_size=16, alpha=math.inf))
    assert mars.comm_bytes == 9216


def test_compute_roofline_single_node_by_hand():
    # tiny: params per layer = 64*64 + 2*64*32 + 64*64 + 3*64*128 = 36864, L = 2.
    # One 16-token chunk on one node: dense 2 * 36864 * 2 * 16 = 2359296 ops, attention
    # 4 * 2 * 4 * 16 * 16 * 16 = 131072 ops: dense / P_node (64 x 32 MACs x 2 x 250 MHz x the
    # profile's measured compute_efficiency) + attention / P_attn (the same peak x the measured
    # rate of the profile's attention path: attention_array_efficiency for kr260's "array",
    # attention_efficiency for "unit"); the DDR side (36864 B of weights + 2048 B of KV at 19.2 GB/s x the
    # measured ddr_efficiency) 2.5 us: the slower of the two is the engine's time ...
    eff = yaml.safe_load((Path(__file__).resolve().parents[3] / "sw/mars/profiles/kr260.yaml").read_text())
    ddr_bps = 19.2e9 * eff["ddr_efficiency"]
    ddr = (36864 + 2048) / ddr_bps
    attn = eff["attention_array_efficiency" if eff["attention_path"] == "array" else "attention_efficiency"]
    comp = 2359296 / (64 * 32 * 2 * 250e6 * eff["compute_efficiency"])
    if eff["attention_path"] == "array" and eff.get("attention_array_key_cycles"):
        # the array's measured line: 131072 / 2 MACs in jobs of key_macs MACs per key over 16 keys
        comp += (131072 / 2 / (eff["attention_array_key_macs"] * 16)
                 * (eff["attention_array_job_cycles"] + eff["attention_array_key_cycles"] * 16) / 250e6)
    else:
        comp += 131072 / (64 * 32 * 2 * 250e6 * attn)
    p = plan(PlanRequest(TINY, 16, 1, KR260, chunk_size=16))
    assert p.t_comp[0] == pytest.approx(max(comp, ddr))
    # ... the PS's descriptor pushes: 2 layers x 3 DMA descriptors x (3 words + the strobe) x
    # 150 ns of AXI-Lite = 3.6 us; the chunk takes the slowest of engine and PS.
    ps = 2 * 3 * 4 * 150e-9
    assert p.t_ps[0] == pytest.approx(ps)
    head = 256 * 64 * 0.5 / ddr_bps                # LM head: weight-read bound
    sync = 8 / 250e6                               # one NIC packet time, no hops on one node
    assert p.ttft_s == pytest.approx(max(ps, comp, ddr) + head + sync)
    assert p.comm_bytes == 0


def test_search_equals_brute_force_over_its_space():
    for nodes, S, budget, topo in [(4, 200, 5000, "switch"), (6, 333, 10_000, "ring"),
                                   (8, 500, 6000, "grid"), (3, 100, 10**9, "switch")]:
        req = PlanRequest(TINY, S, nodes, FOUR_PORTS, budget_bytes=budget, topology=topo)
        best = plan(req)
        brute = []
        for B in chunk_candidates(req.resolved()):
            for a in ALPHA_GRID:
                try:
                    brute.append(plan(PlanRequest(TINY, S, nodes, FOUR_PORTS, budget_bytes=budget,
                                                  topology=topo, chunk_size=B, alpha=a)).ttft_s)
                except UserError:
                    pass
        assert best.ttft_s == pytest.approx(min(brute), rel=1e-9, abs=2e-6)


def test_fit_memory_matches_brute_force_holder_sets():
    """plan.memory against an independent count: every block held by order[owner][:r]."""
    for sharding in ("contiguous", "round-robin", "zigzag"):
        for topo in ("switch", "ring", "grid"):
            p = plan(PlanRequest(TINY, 300, 6, FOUR_PORTS, budget_bytes=6000, chunk_size=16,
                                 sharding=sharding, topology=topo, alpha=math.inf))
            t_order = Topology(topo, 6).order
            C = p.num_chunks
            for t in range(C + 1):
                mem = np.zeros(6)
                for b in range(min(t + 1, C)):
                    r = p.r_step[t] if b < t else p.r_step[t + 1]
                    for n in t_order[p.owner[b]][:r]:
                        mem[n] += p.block_bytes[b]
                assert np.array_equal(mem, p.memory[t]), (sharding, topo, t)
                assert mem.max() <= 6000


def test_eq8_b_star_is_smallest_hiding_chunk():
    p = plan(PlanRequest(QWEN, 16384, 8, KR260))
    cands = chunk_candidates(p.request)
    m, pr = QWEN, KR260
    for B in cands:
        flops = 4 * 28 * 12 * 128 * B * B
        if pr.attention_path == "array" and pr.attention_array_key_cycles > 0:     # the array's measured line
            t_attn = (flops / 2 / (pr.attention_array_key_macs * B)
                      * (pr.attention_array_job_cycles + pr.attention_array_key_cycles * B) / 250e6 / 8)
        else:
            t_attn = flops / (8 * 64 * 32 * 2 * 250e6 * pr.attention_path_efficiency)
        t_prop = B * 7168 / pr.bw_eff + 2e-6           # switch multicast: one pass, one hop
        if t_attn >= t_prop:
            assert p.b_eq8 == B
            break


@pytest.mark.parametrize("kw, needle", [
    (dict(seq_len=0), "seq=0"),
    (dict(nodes=0), "nodes=0"),
    (dict(nodes=300), "nodes=300"),
    (dict(budget_bytes=100), "budget=100"),
    (dict(topology="torus"), "torus"),
    (dict(scheme="ulysses"), "scheme="),
    (dict(chunk_size=10**6), "chunk=1000000"),
    (dict(topology="grid"), "net_ports=1"),
    (dict(scheme="full", budget_bytes=20_000_000), "full replication"),
])
def test_bad_parameters_name_the_bound(kw, needle):
    args = dict(model=QWEN, seq_len=16384, nodes=8, profile=KR260) | kw
    with pytest.raises(UserError, match=needle.replace("(", r"\(")):
        plan(PlanRequest(**args))


def test_cli_one_line_error_and_json(capsys):
    from mcf.sw import cli
    assert cli.main(["plan", "--seq", "-5", "--nodes", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mcf: error:") and "--seq" in err and "-5" in err
    assert cli.main(["plan", "--seq", "4096", "--nodes", "4", "--json"]) == 0
    import json
    j = json.loads(capsys.readouterr().out)
    for k in ("scheme", "chunk_size", "nodes", "budget_bytes", "chunks", "memory_per_node",
              "comm_bytes", "ttft_model_s", "events"):
        assert k in j
    assert set(j["chunks"][0]) >= {"index", "owner", "replica_factor", "replicas"}
    assert len(j["memory_per_node"]) == j["num_chunks"] + 1
    assert all(len(row) == 4 for row in j["memory_per_node"])


def test_deterministic():
    a = plan(PlanRequest(QWEN, 8192, 8, KR260, budget_bytes=20_000_000)).to_json()
    b = plan(PlanRequest(QWEN, 8192, 8, KR260, budget_bytes=20_000_000)).to_json()
    assert a == b


@pytest.mark.parametrize("nodes, S, budget, topo", [(4, 96, 4000, "switch"), (4, 128, 5000, "ring"),
                                                    (6, 96, 3500, "grid"), (5, 112, 4200, "ring")])
def test_search_near_exhaustive_optimum_over_all_schedules(nodes, S, budget, topo):
    """On a link slow enough that communication shows, the alpha-family search lands within 1 % of
    the best of *every* non-increasing schedule that fits the budget (enumerated)."""
    import itertools

    from mcf.sw.mars.planner import _evaluate, _ttft
    slow = FOUR_PORTS.with_(link_bandwidth_bps=2e6)
    req = PlanRequest(TINY, S, nodes, slow, budget_bytes=budget, chunk_size=16, topology=topo)
    found = plan(req)
    inst = _Instance(req.resolved(), 16, Topology(topo, nodes))
    best = math.inf
    for seq in itertools.combinations_with_replacement(range(nodes, 0, -1), inst.C - 1):
        r = np.array([seq[0], *seq, 1], dtype=np.int64)
        if inst.memory(r)[0].max() <= budget:
            best = min(best, _ttft(_evaluate(inst, r, None, "auto")))
    assert found.ttft_s >= best * (1 - 1e-9)          # nothing beats the exhaustive optimum
    assert found.ttft_s <= best * 1.01
    assert found.r_step.max() > 1                     # and replication does pay off here


def test_profile_validation_and_yaml(tmp_path):
    from mcf.sw.mars.profile import PROFILE_DIR, HardwareProfile
    with pytest.raises(UserError, match="link_efficiency"):
        KR260.with_(link_efficiency=1.5)
    with pytest.raises(UserError, match="pl_clock_hz"):
        KR260.with_(pl_clock_hz=-1.0)
    with pytest.raises(UserError, match="unknown field"):
        HardwareProfile.from_dict({**KR260.to_dict(), "warp_drive": 1})
    f = tmp_path / "mine.yaml"
    f.write_text("\n".join(f"{k}: {v}" for k, v in {**KR260.to_dict(), "net_ports": 4}.items()))
    assert load_profile(str(f)).net_ports == 4
    # every number in the shipped profile has its source beside it (same line or the comment above)
    lines = (PROFILE_DIR / "kr260.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if line and not line.startswith("#") and ":" in line and not line.startswith("name"):
            assert "#" in line or lines[i - 1].startswith("#"), line


def test_profile_attention_path():
    """The cluster model's attention path: p_attn is the measured unit rate by default, the measured
    array rate with attention_path=array; array without a measured figure, or an unknown path, is refused."""
    unit = KR260.with_(attention_path="unit", attention_array_efficiency=0.2)
    arr = unit.with_(attention_path="array")
    assert unit.p_attn == pytest.approx(64 * 32 * 2 * 250e6 * KR260.attention_efficiency)
    assert arr.p_attn == pytest.approx(64 * 32 * 2 * 250e6 * 0.2) and arr.p_node == unit.p_node
    with pytest.raises(UserError, match="needs a measured attention_array_efficiency"):
        KR260.with_(attention_path="array", attention_array_efficiency=0.0)
    with pytest.raises(UserError, match="attention_path='folded'"):
        KR260.with_(attention_path="folded")
    with pytest.raises(UserError, match="attention_array_efficiency"):
        KR260.with_(attention_array_efficiency=1.5)


def test_profile_attention_array_fit():
    """With the measured line of the array path (attention_array_job_cycles + _key_cycles x keys a job of
    _key_macs MACs per key), attention's seconds follow the keys a job runs over, by hand: 4 L H_q d x
    rows x keys FLOPs are rows x L x H_q / 6 jobs of 2 x 128 x 6 MACs per key; without keys, on the unit
    or without the fit, the one ratio; a half-given fit is refused."""
    fit = KR260.with_(attention_path="array", attention_array_efficiency=0.2, attention_array_job_cycles=300.0,
                      attention_array_key_cycles=6.0, attention_array_key_macs=1536)
    flops = 4.0 * 28 * 12 * 128 * 16 * 2048                     # 16 rows x 2048 keys, Qwen's L, H_q, d
    jobs = 16 * 28 * 12 / 6
    assert fit.attention_seconds(flops, 2048) == pytest.approx(jobs * (300 + 6 * 2048) / 250e6)
    assert fit.attention_efficiency_at(2048) == pytest.approx(1536 * 2048 / (300 + 6 * 2048) / 2048)
    keys = np.array([256.0, 2048.0])
    assert fit.attention_seconds(flops * keys / 2048, keys) == pytest.approx(
        jobs * (300 + 6 * keys) / 250e6)
    assert fit.attention_seconds(flops) == pytest.approx(flops / (64 * 32 * 2 * 250e6 * 0.2))
    assert fit.with_(attention_array_job_cycles=0.0, attention_array_key_cycles=0.0,
                     attention_array_key_macs=0).attention_seconds(flops, 2048) == pytest.approx(
        flops / (64 * 32 * 2 * 250e6 * 0.2))
    assert fit.with_(attention_path="unit").attention_seconds(flops, 2048) == pytest.approx(
        flops / (64 * 32 * 2 * 250e6 * KR260.attention_efficiency))
    assert fit.attention_seconds(0.0, 0) == 0
    for bad in (dict(attention_array_key_macs=0), dict(attention_array_key_cycles=0.0),
                dict(attention_array_job_cycles=-1.0)):
        with pytest.raises(UserError, match="attention_array_job_cycles"):
            fit.with_(**bad)


def test_cli_compare_mode(capsys):
    import json

    from mcf.sw import cli
    assert cli.main(["plan", "--model", "tiny", "--seq", "512", "--nodes", "2,4", "--scheme", "all",
                     "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["scheme"], r["nodes"]) for r in rows} == {(s, n) for s in
                                                         ("mars", "ring", "zigzag", "full", "pd", "passq")
                                                         for n in (2, 4)}
    assert cli.main(["plan", "--seq", "512", "--nodes", "2,4", "--plot", "x.png"]) == 2
    assert "--plot and --programs" in capsys.readouterr().err


def test_cli_plot(tmp_path, capsys):
    from mcf.sw import cli
    out = tmp_path / "fig4.png"
    assert cli.main(["plan", "--model", "tiny", "--seq", "1024", "--nodes", "4", "--budget", "40000",
                     "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
