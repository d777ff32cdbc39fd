"""Prefill and decode of the cluster model against hand-derived numbers (Qwen2.5-1.5B INT4, KR260).

Hand figures: M_token = 2 x 28 layers x 2 KV heads x 128 x 0.5 B = 7168 B; params per layer =
2 x 1536^2 (Q, O) + 2 x 1536 x 256 (K, V) + 3 x 1536 x 8960 (MLP) = 46,792,704.
"""
import numpy as np
from pathlib import Path

import pytest
import yaml

from mcf.sim.cluster import make_plan, run
from mcf.sim.cluster.decode import simulate_decode
from mcf.sim.cluster.prefill import fetch_groups
from mcf.sw.mars.profile import load_profile
from mcf.spec.topology import Topology
from mcf.sw.models import load_model

M = "qwen2.5-1.5b"
MT = 7168
LAYER_PARAMS = 46_792_704
L = 28
# the two efficiencies as the engine bench measured and wrote them (`mcf bench compute --model
# qwen2.5-1.5b --write-profile`): inputs read from the YAML, not from the code under test
_YAML = yaml.safe_load((Path(__file__).resolve().parents[3] / "sw/mars/profiles/kr260.yaml").read_text())
P_NODE = 64 * 32 * 2 * 250e6 * _YAML["compute_efficiency"]
# attention at the measured rate of the profile's path (kr260: "array", the lowering's auto choice)
P_ATTN = 64 * 32 * 2 * 250e6 * _YAML["attention_array_efficiency" if _YAML["attention_path"] == "array"
                                     else "attention_efficiency"]
DDR = 19.2e9 * _YAML["ddr_efficiency"]


def attn_s(flops, keys):
    """Seconds of ``flops`` of attention whose jobs run over ``keys`` keys, by hand from the YAML: on the
    array with its measured line (attn:array-fit), flops / 2 / (key_macs x keys) jobs of job_cycles +
    key_cycles x keys cycles at 250 MHz; else at P_ATTN."""
    if _YAML["attention_path"] != "array" or not _YAML.get("attention_array_key_cycles"):
        return flops / P_ATTN
    jobs = flops / 2 / (_YAML["attention_array_key_macs"] * keys)
    return jobs * (_YAML["attention_array_job_cycles"] + _YAML["attention_array_key_cycles"] * keys) / 250e6
SETUP = 32 / 250e6


def test_model_figures_are_the_hand_ones():
    m = load_model(M)
    assert m.kv_token_bytes == MT and m.params_per_layer == LAYER_PARAMS


# the array's measured line in the keys is of the 64 x 32 array: an engine of another size or rate
# takes the one ratio (the line off)
NO_FIT = dict(attention_array_job_cycles=0.0, attention_array_key_cycles=0.0, attention_array_key_macs=0)


@pytest.mark.parametrize("engine,lags", [(dict(mac_rows=16, mac_lanes=16, **NO_FIT), False),
                                         (dict(compute_efficiency=0.84), False),
                                         ({}, None),
                                         (dict(compute_efficiency=1.0, attention_efficiency=1.0,
                                               attention_array_efficiency=1.0, **NO_FIT), True)])
def test_mars_prefill_ends_in_the_owner_only_layout(engine, lags):
    # 4096 tokens, B = 256 -> 16 blocks, round-robin owners on 4 nodes: 4 blocks each.
    # The plan's memory after step c counts the replicas step c propagates (eq. 8: they must be
    # there before step c + 1 uses them); the model samples each node's pool at its own step end.
    # On the 16 x 16 engine (and the 64 x 32 at 0.84 efficiency) a 256-token step outlasts the
    # propagation of its block, so the pool equals the plan at every step; on a faster engine
    # (64 x 32 at 100 %, attention on it at 100 % too) nodes 1-3 end step 0 before block 0's
    # replicas land: they arrive during
    # step 1, within eq. 8's one-step lookahead -- the pool lags the plan by at most one step,
    # never exceeds the budget, and ends owner-only.  The profile as measured (``{}``: GEMMs at
    # 0.988, attention at its path's measured rate) is held to the bounds only.
    S, B, N = 4096, 256, 4
    share = 4 * B * MT
    prof = load_profile("kr260").with_(**engine)
    r = run(M, S, N, "mars", prof, chunk=B, budget=2 * share, decode=None)
    sim, plan = r.prefill.memory_per_step, np.asarray(r.plan.memory)
    assert r.plan.r_step[0] > 1                            # it did replicate early on
    assert sim.max() > share                               # ... so memory rose above the share
    assert list(sim[-1]) == [share] * N
    assert sim.max() <= 2 * share
    prev = np.vstack([np.zeros((1, N)), plan[:-1]])
    assert ((sim >= np.minimum(prev, plan)) & (sim <= np.maximum(prev, plan))).all()
    if lags is False:                                      # slow enough: the pool is the plan at each step
        assert np.array_equal(sim, plan)
    elif lags:
        assert not np.array_equal(sim, plan)               # the lag this test bounds does occur


@pytest.mark.parametrize("chunk_kv,blocks_per_pair", [("plan", lambda C: C * (C - 1) // 2),
                                                      ("allgather", lambda C: C * (C + 1) // 2)])
def test_ring_volume_is_eq21(chunk_kv, blocks_per_pair):
    # eq. 21 with r = 1, h_ring = 1: M_chunk (N - 1) C (C + 1) / 2.  The plan moves only history
    # blocks (chunk c reads c - 1 earlier blocks); the chunk all-gather adds the c-th.
    S, B, N = 2048, 256, 4
    C = S // B
    r = run(M, S, N, "ring", chunk=B, decode=None, chunk_kv=chunk_kv)
    assert r.prefill.comm_bytes == B * MT * (N - 1) * blocks_per_pair(C)
    assert list(r.prefill.memory_per_step[-1]) == [2 * B * MT] * N     # contiguous, 2 blocks each


@pytest.mark.parametrize("scheme,budget", [("mars", 2 * 4096 * MT // 4), ("pd", None), ("ring", None),
                                           ("zigzag", None), ("full", None)])
def test_fetch_groups_carry_exactly_the_plans_fetches(scheme, budget):
    p = make_plan(M, 4096, 4, scheme, chunk=256, budget=budget)
    for t in range(p.num_chunks):
        want, got = {}, {}
        for b, s, dsts, nb in p.fetches(t):
            assert scheme not in ("ring", "zigzag") or len(dsts) == 1
            for d in dsts:
                want[(s, d)] = want.get((s, d), 0) + nb
        for s, dsts, nb, ntok, blocks in fetch_groups(p, t):
            assert ntok * MT == nb
            hops = zip((s,) + dsts, dsts) if scheme in ("ring", "zigzag") else ((s, d) for d in dsts)
            for a, d in hops:                           # ring: the block walks hop by hop
                got[(a, d)] = got.get((a, d), 0) + nb
        assert got == want, t


def test_simulated_comm_equals_the_plans_for_every_scheme():
    for scheme in ("mars", "ring", "zigzag", "full", "pd"):
        r = run(M, 2048, 4, scheme, chunk=256, decode=None)
        assert r.prefill.comm_bytes == r.plan.comm_bytes, scheme


def test_single_chunk_prefill_is_compute_bound():
    # N = 2, one chunk of 1024 tokens: each node does 512 rows of dense layers and attends over
    # (1024 + 1) / 2 causal keys; then the LM head of the first token streams its weights (DDR).
    rows = 512
    dense = 2 * LAYER_PARAMS * L * rows
    attn = 4 * L * 12 * 128 * rows * 512.5
    head_ddr = 151936 * 1536 * 0.5 / DDR
    r = run(M, 1024, 2, "mars", chunk=1024, decode=None)
    assert r.prefill.ttft_s == pytest.approx(dense / P_NODE + attn_s(attn, 512.5) + head_ddr + 3 * SETUP, rel=1e-9)


def test_pd_hands_the_kv_to_the_decode_group():
    r = run(M, 2048, 4, "pd", chunk=256, decode=None)
    assert list(r.prefill.memory_per_step[-1]) == [0, 0, 1024 * MT, 1024 * MT]
    assert r.prefill.comm_by_kind["handoff"] == 2048 * MT


def test_decode_one_node_is_capped_by_weight_streaming():
    prof, m = load_profile("kr260"), load_model(M)
    d = simulate_decode(m, prof, Topology("switch", 1), [0.0])
    weights = (LAYER_PARAMS * L + 151936 * 1536) * 0.5
    assert d.token_s == pytest.approx(weights / DDR, rel=1e-3)
    assert d.tokens_per_s == pytest.approx(DDR / weights, rel=1e-3)     # ~17.4 tokens/s


def test_one_board_decode_against_its_ddr_roofline():
    """Issue 14: one board's decode token time vs its bytes (all weights, the LM head, 4K tokens of
    KV, by hand) at the DDR4's 19.2 GB/s peak.  Each layer streams its weights at the measured
    ddr_efficiency (0.93: four HP ports at 300 MHz carry 76.8 B per engine cycle, the DDR's peak,
    which refresh cuts to 73.4; measured 71.6), then attends over 4K keys at the measured rate of
    the profile's attention path (kr260: the array's, measured on a prefill chunk: a model for a
    decode token's 6 query rows); the LM head streams last; every engine operation pays
    the set-up.  The weights stream at >= 0.9 of the roofline; the token does not (attention)."""
    prof, m = load_profile("kr260"), load_model(M)
    d = simulate_decode(m, prof, Topology("switch", 1), [4096.0])
    nbytes = (LAYER_PARAMS * L + 151936 * 1536) * 0.5 + 4096 * MT
    assert d.ddr_roofline_fraction == pytest.approx(nbytes / 19.2e9 / d.token_s, rel=1e-6)
    weights = L * (LAYER_PARAMS * 0.5 / DDR + SETUP)
    attention = L * (attn_s(4 * 12 * 128 * 4096, 4096) + SETUP)  # compute-bound: 4K x 7 KB of KV is < 2 ms of DDR
    head = 151936 * 1536 * 0.5 / DDR + SETUP
    assert d.token_s == pytest.approx(weights + attention + head, rel=1e-9)
    assert 0.9 <= _YAML["ddr_efficiency"] < 1 - 350e-9 / 7.8e-6     # tRFC / tREFI: the DDR refreshes
    assert d.ddr_roofline_fraction < _YAML["ddr_efficiency"]   # attention: below the weight streaming's own figure


def test_decode_variants_on_four_nodes():
    prof, m = load_profile("kr260"), load_model(M)
    topo = Topology("switch", 4)
    kv = [4096.0] * 4
    kvs = simulate_decode(m, prof, topo, kv, "kv-stationary")
    tp = simulate_decode(m, prof, topo, kv, "tensor-parallel")
    pq = simulate_decode(m, prof, topo, kv, "pass-q")
    weights = (LAYER_PARAMS * L + 151936 * 1536) * 0.5
    assert kvs.tokens_per_s < DDR / weights                 # root streams all the weights
    assert DDR / weights < tp.tokens_per_s < 4 * DDR / weights
    assert pq.tokens_per_s < kvs.tokens_per_s               # the query walks the ring serially
    assert kvs.comm_bytes_per_token > 0


def test_lookahead_and_topologies_run():
    for topo in ("ring", "grid"):
        prof = load_profile("kr260").with_(net_ports=4)
        p = make_plan(M, 2048, 4, "mars", prof, chunk=256, topology=topo, budget=2 * 2048 * MT // 4)
        r = run(M, 2048, 4, plan=p, decode="kv-stationary", lookahead=0)
        assert r.prefill.comm_bytes == p.comm_bytes
        assert np.isfinite(r.prefill.ttft_s) and r.decode.tokens_per_s > 0


@pytest.mark.parametrize("scheme,budget", [("mars", 2 * 4096 * MT // 4), ("pd", None), ("ring", None),
                                           ("full", None)])
def test_executing_the_lowered_programs_moves_what_the_plan_says(scheme, budget):
    """The per-node programs (Meta descriptors from mcf.sw.mars.metaprog) and the plan agree on
    every byte and every memory step; timing may differ only by message grouping."""
    a = run(M, 4096, 4, scheme, chunk=256, budget=budget, decode=None)
    b = run(M, 4096, 4, scheme, chunk=256, budget=budget, decode=None, programs=True)
    assert b.prefill.comm_bytes == a.prefill.comm_bytes == a.plan.comm_bytes
    assert b.prefill.comm_by_kind == a.prefill.comm_by_kind
    assert np.array_equal(b.prefill.memory_per_step, a.prefill.memory_per_step)
    # (the array's fixed cycles a job are paid once per op: another grouping of the keys moves the TTFT more)
    assert b.prefill.ttft_s == pytest.approx(a.prefill.ttft_s, rel=0.05)
