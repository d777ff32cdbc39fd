"""MARS plans executed by the golden model in the machine's execution model (docs/node.md): chunk c
computed by its node over the copies the plan's events give it and the blocks the plan fetches
for it is bit-identical to single-node fixed-point attention, for every scheme; a wrong plan (a
block sent by a node without a copy, a replica drained before its holder reads it) fails."""
from __future__ import annotations

import numpy as np
import pytest

from mcf.spec.plan import EventKind, EventPhase
from mcf.sw.golden import distributed as D
from mcf.sw.golden import fixed as fx
from mcf.sw.golden.fixed_model import FixedModel
from mcf.sw.golden.weights import random_weights
from mcf.sw.mars.planner import Event, PlanRequest, plan
from mcf.sw.mars.profile import load_profile
from mcf.sw.models import load_model

T = 32


@pytest.fixture(scope="module")
def tiny_attention():
    cfg = load_model("tiny")
    model = FixedModel(cfg, random_weights(cfg, 11), group_size=16)
    tokens = np.random.default_rng(5).integers(0, cfg.vocab_size, T)
    x = fx.embed(model.embed, tokens)
    attn = D.FixedAttn(*model.attention_inputs(0, x, np.arange(T)), group=cfg.num_heads // cfg.num_kv_heads)
    return cfg, attn, attn.single_node()


def make_plan(cfg, scheme, nodes, chunk, budget_tokens):
    # Tight for MARS (it must drain replicas); full replication and PD hold the whole prompt.
    budget = (T if scheme in ("full", "pd") else budget_tokens) * int(cfg.kv_token_bytes)
    return plan(PlanRequest(model=cfg, seq_len=T, nodes=nodes, profile=load_profile("kr260"),
                            scheme=scheme, chunk_size=chunk, budget_bytes=budget))


@pytest.mark.parametrize("scheme", ["mars", "ring", "zigzag", "full", "pd"])
@pytest.mark.parametrize("nodes,chunk,budget_tokens", [(4, 4, 16), (3, 8, 32), (2, 4, 24)])
def test_plan_attention_is_single_node_attention(tiny_attention, scheme, nodes, chunk, budget_tokens):
    cfg, attn, ref = tiny_attention
    p = make_plan(cfg, scheme, nodes, chunk, budget_tokens)
    assert int(p.chunk_tokens.sum()) == T
    if scheme == "mars":
        assert p.r_step[-1] == 1
    out = D.plan_prefill_attention(attn, p, p.chunk_tokens)
    assert np.array_equal(out, ref)


class Tampered:
    """A plan with some answers replaced."""

    def __init__(self, plan, **over):
        self._plan, self._over = plan, over

    def __getattr__(self, name):
        return self._over[name] if name in self._over else getattr(self._plan, name)


def test_a_block_sent_by_a_node_without_a_copy_fails(tiny_attention):
    cfg, attn, _ = tiny_attention
    p = make_plan(cfg, "mars", 4, 4, 16)
    c, b, nobody = next((t, b, x) for t in range(p.num_chunks) for b, _, d, _ in p.owner_fetches(t)
                        for x in range(p.nodes) if x not in p.holders(b, t) and x not in d)
    wrong = Tampered(p, owner_fetches=lambda t: [(b_, nobody if (t, b_) == (c, b) else s, d, n)
                                                 for b_, s, d, n in p.owner_fetches(t)])
    with pytest.raises(ValueError, match=f"step {c}: node {nobody} sends block {b}, of which it holds no copy"):
        D.plan_prefill_attention(attn, wrong, p.chunk_tokens)


def _plan_with_a_replica(cfg):
    """A MARS plan in which a node computes a chunk with a replica (not the owner's copy) of an
    earlier block, and that (node, block).  Whether the planner replicates follows the profile's
    measured costs (with the round-14 attention figures the 16-token budget replicates nothing), so
    a few budgets are tried; none replicating is a failure, not a skip."""
    for nodes, chunk, budget_tokens in [(4, 4, 16), (4, 4, 24), (3, 8, 32), (2, 4, 24)]:
        p = make_plan(cfg, "mars", nodes, chunk, budget_tokens)
        hit = next(((p.compute_node(c), b) for c in range(p.num_chunks) for b in range(c - 1)
                    if p.compute_node(c) in p.holders(b, c)[1:]), None)
        if hit is not None:
            return p, hit
    pytest.fail("no MARS plan of these shapes computes on a replica: the test needs one")


def test_a_replica_drained_too_early_fails(tiny_attention):
    cfg, attn, _ = tiny_attention
    p, (n, b) = _plan_with_a_replica(cfg)
    events = []
    for e in p.events:                       # the holder's own drain of b goes ...
        if e.block == b and n in e.nodes and e.kind in (EventKind.DRAIN, EventKind.INVALIDATE):
            if len(e.nodes) == 1:
                continue
            e = Event(e.step, e.phase, e.kind, e.block, tuple(x for x in e.nodes if x != n))
        events.append(e)
    events += [Event(b + 1, EventPhase.START, EventKind.DRAIN, b, (n,)),      # ... right after b is made
               Event(b + 1, EventPhase.END, EventKind.INVALIDATE, b, (n,))]
    events.sort(key=lambda e: (e.step, e.phase == EventPhase.END))
    with pytest.raises(ValueError, match=f"node {n} computes chunk \\d+ without a copy of block {b}"):
        D.plan_prefill_attention(attn, Tampered(p, events=events), p.chunk_tokens)
    no_drain = [e for e in events if not (e.kind == EventKind.DRAIN and e.block == b and e.nodes == (n,))]
    with pytest.raises(ValueError, match=f"invalidate of block {b} on node {n} \\(VALID\\)"):   # lifecycle
        D.plan_prefill_attention(attn, Tampered(p, events=no_drain), p.chunk_tokens)
