"""The replay and the paper's three failure modes, against live servers:

1. a hit slower than a miss: the cost model chooses recompute (and the measured replay agrees);
2. synchronous loading under hit-heavy load (rho > 1) has no steady state; asynchronous loading
   with the cost model keeps latency bounded;
3. killed servers, reads that never return and lost completions: every request completes, the
   affected chunks are recomputed, and it is counted."""
import time

import numpy as np
import pytest

from mcf.sw.commands.kv import calibrate
from mcf.sw.kvtier.calibrate import filler
from mcf.sw.kvtier.costmodel import PrefillCurve, chunk_value_bytes
from mcf.sw.kvtier.keys import model_identity
from mcf.sw.kvtier.replay import Replay, ReplayConfig, parse_fault, percentile
from mcf.sw.kvtier.store import ShardedStore
from mcf.sw.kvtier.trace import Request
from mcf.sw.errors import UserError
from mcf.sw.models import load_model

CHUNK = 256


@pytest.fixture
def tier(servers, clients):
    made = []

    def build(ranks, model="small", timeout_s=0.3, cooldown_s=1.0):
        cfg = load_model(model)
        srv = servers(ranks, maxmemory_bytes=64 << 20)
        st = ShardedStore(clients(srv.urls, timeout_s), model_identity(cfg, "synthetic", CHUNK),
                          chunk_value_bytes(cfg, CHUNK), cooldown_s=cooldown_s)
        made.append(st)
        return cfg, srv, st
    yield build
    for st in made:
        st.close()


def stream(n, shared_chunks, gap, seed=0, vocab=2048):
    """n requests 'gap' seconds apart sharing one prefix of shared_chunks chunks, plus one own token."""
    rng = np.random.default_rng(seed)
    prefix = rng.integers(0, vocab, shared_chunks * CHUNK).astype(np.uint32)
    return [Request(str(i), i * gap, np.r_[prefix, np.uint32(i % vocab)].astype(np.uint32)) for i in range(n)]


def prime(st, requests):
    for r in requests[:1]:
        keys = st.keys(r.tokens)
        st.store(keys, {c: filler(keys[c], st.value_bytes) for c in range(len(keys))})
    for l1 in st.l1:
        for k in list(l1._d):
            l1.discard(k)


def run(reqs, st, cost, mode="async", policy="model", deadline=5.0, faults=(), srv=None, l1_reset=True,
        link=None):
    if l1_reset:
        for l1 in st.l1:
            for k in list(l1._d):
                l1.discard(k)
    st.counters.clear()
    st.down_until = [float("-inf")] * st.ranks
    cfg = ReplayConfig(mode=mode, policy=policy, deadline_s=deadline, faults=list(faults), link_Bps=link)
    return Replay(reqs, st, cost, cost.prefill, cfg, srv).run()


def test_hit_slower_than_miss_chooses_recompute(tier):
    cfg, srv, st = tier(2)
    reqs = stream(20, 8, 0.05)
    curve = PrefillCurve.constant(1e9, CHUNK, 9 * CHUNK, "given: a fast engine (1e9 tokens/s)")
    cost = calibrate(st, cfg, CHUNK, curve)
    assert cost.choose(8) == "recompute"
    prime(st, reqs)
    chosen = run(reqs, st, cost)
    model = chosen.summary()
    forced = run(reqs, st, cost, policy="always")
    always = forced.summary()
    assert model["loads"] == 0 and model["recomputes"] == 20 and model["tokens_from_store"] == 0
    assert always["loads"] == 20 and always["tokens_from_store"] == 20 * 8 * CHUNK
    # measured: every forced load took longer than the prefill it saved, and TTFT suffered
    assert all(r.load_s > 10 * curve.steps_s(8 * CHUNK) for r in forced.records)
    # TTFT after the lookup (both runs look up the same keys; a lookup queued behind the run's own
    # stores on a loaded machine is noise common to both policies, not the decision's cost)
    def after_lookup_p50(res):
        return float(np.median([r.ttft_s - r.lookup_s for r in res.records]))
    assert after_lookup_p50(forced) > after_lookup_p50(chosen)


def test_sync_under_hit_heavy_load_vs_async_bounded(tier):
    cfg, srv, st = tier(2)
    link = 10e6                  # each rank's path to its server: 10 MB/s (a slow shared network)
    shared = 8                   # 8 chunks of 74 kB: 4 per rank, 30 ms on the link
    curve0 = PrefillCurve.constant(1.0, CHUNK, (shared + 1) * CHUNK, "placeholder")
    cost = calibrate(st, cfg, CHUNK, curve0, link_Bps=link)
    load = cost.load_s(shared)
    assert load > 0.025
    # a given engine for which one hit is worth loading (recompute = 1.2 x load) ...
    rate = shared * CHUNK / (1.2 * load)
    cost.prefill = PrefillCurve.constant(rate, CHUNK, (shared + 1) * CHUNK, f"given: {rate:.4g} tokens/s")
    assert cost.choose(shared) == "load"
    # ... and hits arriving faster than the servers can deliver them: rho = lambda n s / B = 1.3
    # (servers and cluster together can: 1/load + 1/recompute > lambda)
    gap = shared * CHUNK * cost.s / cost.total_bandwidth / 1.3
    reqs = stream(48, shared, gap)
    prime(st, reqs)
    sync = run(reqs, st, cost, mode="sync", deadline=20 * load, link=link)
    asyn = run(reqs, st, cost, mode="async", deadline=20 * load, link=link)
    s, a = sync.summary(), asyn.summary()
    # (the claim is rho > 1; the measured rate of the arrivals comes out below the 1.3 asked for when the
    # machine is loaded -- 1.19 in one fresh-clone CI -- so 1.1 is the margin, not 1.2)
    assert s["rho"] > 1.1 and a["rho"] > 1.1
    assert s["completed"] == a["completed"] == 48

    def quarters(res):
        t = [r.ttft_s for r in res.records]
        return np.mean(t[:12]), np.mean(t[-12:])
    s_first, s_last = quarters(sync)
    a_first, a_last = quarters(asyn)
    assert s_last > 4 * s_first                       # the synchronous queue keeps growing
    assert a_last < 2 * a_first + 2 * load            # asynchronous: no growth
    assert s["ttft_p99_s"] > 3 * a["ttft_p99_s"]
    # async spills to recompute when the servers are behind: both choices are made
    assert a["loads"] > 5 and a["recomputes"] > 5 and s["loads"] > 20


def test_killed_rank_is_recomputed_and_counted(tier):
    cfg, srv, st = tier(3, cooldown_s=0.5)
    reqs = stream(24, 6, 0.1)
    cost = calibrate(st, cfg, CHUNK, PrefillCurve.constant(100.0, CHUNK, 7 * CHUNK, "given: 100 tokens/s"))
    prime(st, reqs)
    res = run(reqs, st, cost, faults=[parse_fault("kill-rank:1@1.0", 3)], srv=srv)
    s = res.summary()
    assert s["completed"] == 24
    after = [r for r in res.records if r.arrival > 1.0]
    before = [r for r in res.records if r.arrival < 0.9]
    assert all(r.loaded_chunks <= 1 for r in after)     # chunk 1 lives on the killed rank
    assert all(r.loaded_chunks == 6 for r in before)
    assert s["errors"].get("lookup_unavailable", 0) + s["errors"].get("skipped_down", 0) >= len(after)


def test_read_that_never_returns_and_lost_completions_fall_back(tier):
    cfg, srv, st = tier(3, timeout_s=0.2, cooldown_s=100.0)
    reqs = stream(16, 6, 0.1)
    cost = calibrate(st, cfg, CHUNK, PrefillCurve.constant(100.0, CHUNK, 7 * CHUNK, "given: 100 tokens/s"))
    prime(st, reqs)
    t0 = time.monotonic()
    res = run(reqs, st, cost, faults=[parse_fault("pause-rank:2@0.5", 3)], srv=srv)
    assert time.monotonic() - t0 < 5                    # one socket timeout, then the rank is skipped
    s = res.summary()
    assert s["completed"] == 16 and s["timeouts"] >= 1
    assert all(r.loaded_chunks <= 2 for r in res.records if r.arrival > 0.5)
    srv.resume(2)

    res = run(reqs, st, cost, deadline=0.05, faults=[parse_fault("lose-completions:0@0", 3)], srv=srv)
    s = res.summary()
    assert s["completed"] == 16 and s["loads"] == 16
    assert s["deadline_misses"] == 16 and s["lost_completions"] == 16 and s["fallbacks"] == 16
    assert all(r.loaded_chunks == 0 and r.load_s == pytest.approx(0.05) for r in res.records), [(r.decision, r.load_s, r.loaded_chunks, r.fallback) for r in res.records]


def test_percentile_is_linear_interpolation():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(101)), 99) == 99.0
    assert percentile([0.0, 10.0], 99) == pytest.approx(9.9)


@pytest.mark.parametrize("text", ["kill-rank:3@1", "nuke:0@1", "kill-rank:0", "kill-rank:a@1",
                                  "kill-rank:0@-1", "kill-rank:0@nan"])
def test_bad_faults_refused(text):
    with pytest.raises(UserError):
        parse_fault(text, 3)
