"""Invariants of MARS plans over random parameters (hypothesis), checked by replaying the plan's
replica-directory events: memory within budget at every step, r(C) = 1 with an owner-only,
balanced final layout, no replica invalidated while a scheduled chunk still reads it, every block
a chunk reads local or fetched before it starts, no migration at the prefill -> decode boundary."""
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcf.spec.plan import EventKind, EventPhase, ReplicaState
from mcf.sw.mars.directory import LifecycleError, ReplicaDirectory, replay
from mcf.sw.mars.planner import Event, PlanRequest, owners_for, plan
from mcf.sw.mars.profile import load_profile
from mcf.sw.models.config import load_model

TINY = load_model("tiny")
PROFILE = load_profile("kr260").with_(net_ports=4)


@st.composite
def requests(draw):
    nodes = draw(st.integers(1, 12))
    S = draw(st.integers(1, 400))
    B = draw(st.sampled_from([16, 32, 64]))
    sharding = draw(st.sampled_from(["contiguous", "zigzag", "round-robin"]))
    topology = draw(st.sampled_from(["switch", "ring", "grid"]))
    C = -(-S // B)
    tok = np.full(C, B)
    tok[-1] = S - B * (C - 1)
    owners = owners_for(sharding, C, nodes)
    owner_need = np.bincount(owners, weights=tok * TINY.kv_token_bytes, minlength=nodes).max()
    total = S * TINY.kv_token_bytes
    # contiguous owners fill node by node, so their prefill peak is the final share as well
    budget = int(owner_need + draw(st.floats(0, 1.2)) * total)
    alpha = draw(st.sampled_from([None, 0.0, 0.1, 1.0, math.inf]))
    return PlanRequest(TINY, S, nodes, PROFILE, budget_bytes=budget, chunk_size=B,
                       sharding=sharding, topology=topology, alpha=alpha)


def check_plan(p):
    N, C = p.nodes, p.num_chunks
    budget = p.request.budget_bytes
    r = p.r_step
    assert r[-1] == 1 and (np.diff(r) <= 0).all() and r.min() >= 1 and r.max() <= N
    assert p.memory.max() <= budget
    invalidated: list[tuple[int, int, int]] = []          # (step, block, node)
    drained_at: dict[tuple[int, int], int] = {}

    def check(t, phase, d: ReplicaDirectory):
        if phase == EventPhase.START:
            # the memory the plan reports for step t = what the directory holds + block t's copies
            mem = d.memory.copy()
            for n in p.holders(t, t):
                mem[n] += p.block_bytes[t]
            assert np.array_equal(mem, p.memory[t]), t
            # every block chunk t reads is local or fetched (from a readable copy) before it starts
            fetched = {}
            for b, src, dsts, nbytes in p.fetches(t):
                assert d.readable(b, src) or (b, src) in fetched, (t, b, src)   # held, or forwarded
                assert nbytes == p.block_bytes[b]
                for n in dsts:
                    assert not d.readable(b, n)
                    fetched[(b, n)] = src
            for n in p.compute_nodes:
                for b in range(t):
                    assert d.readable(b, n) or (b, n) in fetched, (t, b, n)
            # copies used by decisions for later steps are VALID, never DRAINING
            if t + 1 < C:
                for b in range(t):
                    for n in p.holders(b, t + 1):
                        assert d.get(b, n) == ReplicaState.VALID
        else:
            for (b, n), s in d.state.items():
                if s == ReplicaState.DRAINING:
                    drained_at.setdefault((b, n), t)

    orig_apply = ReplicaDirectory.apply

    def apply(self, e: Event):
        if e.kind == EventKind.INVALIDATE:
            for n in e.nodes:
                invalidated.append((e.step, e.block, n))
        if e.kind == EventKind.OWNER:
            assert e.nodes == (int(p.owner[e.block]),)     # written where it stays: no migration
        assert e.kind != EventKind.HANDOFF
        orig_apply(self, e)

    ReplicaDirectory.apply = apply
    try:
        d = replay(p, check)
    finally:
        ReplicaDirectory.apply = orig_apply

    # nothing invalidated is read again: not a holder nor a fetch source in any later step
    for t, b, n in invalidated:
        for later in range(t + 1, C):
            assert n not in p.holders(b, later)
            assert all(src != n for bb, src, _, _ in p.fetches(later) if bb == b)
    # r(C) = 1: the decode-ready layout is owner-only and balanced
    for b in range(C):
        assert d.holders(b) == [int(p.owner[b])]
    final = np.bincount(p.owner, weights=p.block_bytes, minlength=N)
    assert np.array_equal(d.memory, final) and np.array_equal(p.memory[-1], final)
    # balanced at block granularity (zigzag hands each node two segments: up to two blocks apart)
    counts = np.bincount(p.owner, minlength=N)
    assert counts.max() - counts.min() <= (2 if p.request.sharding == "zigzag" else 1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_mars_invariants(req):
    check_plan(plan(req))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.sampled_from(["ring", "zigzag", "full", "passq"]))
def test_baseline_invariants(req, scheme):
    from dataclasses import replace
    req = replace(req, scheme=scheme, alpha=None, sharding=None, budget_bytes=10**9)
    check_plan(plan(req))


def test_pd_hands_off_at_the_boundary():
    """pd is the one scheme that migrates KV after prefill (and the invariant catches it)."""
    p = plan(PlanRequest(TINY, 256, 4, PROFILE, scheme="pd", chunk_size=16))
    kinds = {e.kind for e in p.events}
    assert EventKind.HANDOFF in kinds and p.handoff_bytes == 256 * TINY.kv_token_bytes
    d = replay(p)
    for b in range(p.num_chunks):
        assert d.holders(b) == [int(p.owner[b])] and p.owner[b] >= 2   # decode nodes 2, 3


def test_lifecycle_rejects_illegal_transitions():
    d = ReplicaDirectory(2, [10, 10])
    d.apply(Event(0, EventPhase.END, EventKind.OWNER, 0, (0,)))
    d.apply(Event(0, EventPhase.END, EventKind.REPLICATE, 0, (1,)))
    for bad in (Event(1, EventPhase.START, EventKind.DRAIN, 0, (0,)),          # owner copies never leave
                Event(1, EventPhase.END, EventKind.INVALIDATE, 0, (1,)),       # VALID -> INVALID skips DRAINING
                Event(1, EventPhase.END, EventKind.REPLICATE, 0, (1,))):       # already held
        try:
            d.apply(bad)
        except LifecycleError:
            continue
        raise AssertionError(f"accepted {bad}")
    d.apply(Event(1, EventPhase.START, EventKind.DRAIN, 0, (1,)))
    assert d.readable(0, 1) and not d.schedulable(0, 1)
    d.apply(Event(1, EventPhase.END, EventKind.INVALIDATE, 0, (1,)))
    assert d.holders(0) == [0] and d.memory.tolist() == [10, 0]
