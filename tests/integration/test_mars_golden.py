"""MARS plans executed by the golden model: attention computed the way a plan distributes it
(query rows split over the compute nodes, every history block read from the holder the plan
names) is bit-identical to single-node fixed-point attention, for every scheme."""
from __future__ import annotations

import numpy as np
import pytest

from mcf.sw.golden import distributed as D
from mcf.sw.golden import fixed as fx
from mcf.sw.golden.fixed_model import FixedModel
from mcf.sw.golden.weights import random_weights
from mcf.sw.mars.planner import PlanRequest, plan
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


@pytest.mark.parametrize("scheme", ["mars", "ring", "zigzag", "full", "pd"])
@pytest.mark.parametrize("nodes,chunk,budget_tokens", [(4, 4, 16), (3, 8, 32), (2, 4, 24)])
def test_plan_attention_is_single_node_attention(tiny_attention, scheme, nodes, chunk, budget_tokens):
    cfg, attn, ref = tiny_attention
    # Tight for MARS (it must drain replicas); full replication and PD hold the whole prompt.
    budget = (T if scheme in ("full", "pd") else budget_tokens) * int(cfg.kv_token_bytes)
    p = plan(PlanRequest(model=cfg, seq_len=T, nodes=nodes, profile=load_profile("kr260"),
                         scheme=scheme, chunk_size=chunk, budget_bytes=budget))
    assert int(p.chunk_tokens.sum()) == T
    if scheme == "mars":
        assert p.r_step[-1] == 1
    out = D.plan_prefill_attention(attn, p, p.chunk_tokens)
    assert np.array_equal(out, ref)
