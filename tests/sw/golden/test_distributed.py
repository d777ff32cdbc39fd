"""Distributed attention equals single-node attention: bit-exact in fixed point, <= 1e-5 in
float, for N in {1, 2, 3, 4, 8}, several chunk sizes and every layout."""
from __future__ import annotations

import numpy as np
import pytest

from mcf.sw.golden import distributed as D
from mcf.sw.golden import fixed as fx
from mcf.sw.golden.fixed_model import FixedModel
from mcf.sw.golden.float_model import causal_attention
from mcf.sw.golden.weights import random_weights

T = 29
NODES = [1, 2, 3, 4, 8]


@pytest.fixture(scope="module")
def fixed_inputs():
    """Attention inputs of layer 1 of a small fixed-point model (real q/k/v, GQA 4 on 2)."""
    from mcf.sw.models import ModelConfig
    cfg = ModelConfig(name="t", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
                      intermediate_size=128, vocab_size=256, rope_theta=10000.0)
    model = FixedModel(cfg, random_weights(cfg, 7), group_size=16)
    tokens = np.random.default_rng(0).integers(0, 256, T)
    x = fx.embed(model.embed, tokens)
    x = model._layer(0, x, np.arange(T), model.new_cache())
    attn = D.FixedAttn(*model.attention_inputs(1, x, np.arange(T)), group=2)
    return attn, attn.single_node()


@pytest.fixture(scope="module")
def float_inputs():
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((T, 6, 8)), rng.standard_normal((T, 2, 8)), rng.standard_normal((T, 2, 8))
    return D.FloatAttn(q, k, v), causal_attention(q, k, v, np.arange(T), np.arange(T))


def test_float_single_node_matches_model_attention(float_inputs):
    attn, ref = float_inputs
    assert np.abs(attn.single_node() - ref).max() <= 1e-5


def test_fixed_single_node_is_the_model_attention(fixed_inputs):
    attn, ref = fixed_inputs
    assert ref.shape == (T, 4, 16) and ref.dtype == np.int64 and np.abs(ref).max() > 1000


@pytest.mark.parametrize("n", NODES)
@pytest.mark.parametrize("layout", ["ring", "zigzag"])
def test_ring_layouts(fixed_inputs, float_inputs, n, layout):
    shards = (D.contiguous_shards if layout == "ring" else D.zigzag_shards)(T, n)
    assert sorted(np.concatenate(shards).tolist()) == list(range(T))
    attn, ref = fixed_inputs
    assert np.array_equal(D.ring_attention(attn, shards), ref)
    fattn, fref = float_inputs
    assert np.abs(D.ring_attention(fattn, shards) - fref).max() <= 1e-5


@pytest.mark.parametrize("n", NODES)
@pytest.mark.parametrize("chunk", [2, 5, 8, T])
def test_chunked_prefill_any_placement(fixed_inputs, float_inputs, n, chunk):
    rng = np.random.default_rng(100 * n + chunk)
    n_chunks = -(-T // chunk)
    attn, ref = fixed_inputs
    fattn, fref = float_inputs
    for _ in range(2 if chunk >= 5 else 1):
        placement = D.random_placement(n_chunks, n, rng)
        assert all(placement.owner[b] in placement.holders(b, c) for c in range(n_chunks) for b in range(c))
        assert np.array_equal(D.chunked_prefill_attention(attn, chunk, placement, rng), ref)
        assert np.abs(D.chunked_prefill_attention(fattn, chunk, placement, rng) - fref).max() <= 1e-5


def test_replicas_drain_to_owner_only():
    placement = D.random_placement(6, 4, np.random.default_rng(0))
    assert any(placement.replicas)
    assert all(placement.holders(b, 6 + 1) == [placement.owner[b]] for b in range(6))


@pytest.mark.parametrize("n", NODES)
@pytest.mark.parametrize("block", [1, 5, 16])
def test_kv_stationary_decode(fixed_inputs, float_inputs, n, block):
    owners = D.block_owners(T, block, n, np.random.default_rng(n * block).integers(0, n, -(-T // block)))
    attn, ref = fixed_inputs
    assert np.array_equal(D.decode_attention(attn, owners, n), ref[-1:])
    fattn, fref = float_inputs
    assert np.abs(D.decode_attention(fattn, owners, n) - fref[-1:]).max() <= 1e-5


@pytest.mark.parametrize("n", [2, 4, 8])
def test_one_pass_decode_is_deterministic_and_close(fixed_inputs, n):
    attn, ref = fixed_inputs
    owners = D.block_owners(T, 3, n)
    a = D.decode_one_pass(attn, owners, n)
    assert np.array_equal(a, D.decode_one_pass(attn, owners, n))
    # rounding of the rescaled partials: a few X32 LSBs relative to outputs of ~2^14
    assert np.abs(a - ref[-1:]).max() <= 64
    if n == 1:
        assert np.array_equal(a, ref[-1:])


def test_decode_states_survive_the_wire(fixed_inputs):
    """States as little-endian int32 packets, reduced by the NIC functions, still exact."""
    attn, ref = fixed_inputs
    owners = D.block_owners(T, 4, 3)
    qi = np.array([T - 1])
    shards = [np.flatnonzero(owners == i) for i in range(3)]
    m = fx.reduce_max([np.frombuffer(attn.local_max(qi, s).astype("<i4").tobytes(), "<i4") for s in shards])
    packets = [attn.state(qi, s, m.reshape(-1, 1)).astype("<i4").tobytes() for s in shards]
    words = [np.frombuffer(p, "<i4").reshape(4, 1, 18) for p in packets]
    assert np.array_equal(attn.finalize(fx.fold_states(words)), ref[-1:])


@pytest.mark.parametrize("n", NODES)
@pytest.mark.parametrize("chunk", [3, 8, T])
def test_mars_execution_model(fixed_inputs, float_inputs, n, chunk):
    """Each chunk computed by its node over the copies the placement gives it (held or fetched)."""
    rng = np.random.default_rng(7 * n + chunk)
    sizes = [chunk] * (T // chunk) + ([T % chunk] if T % chunk else [])
    placement = D.random_placement(len(sizes), n, rng)
    attn, ref = fixed_inputs
    assert np.array_equal(D.plan_prefill_attention(attn, placement, sizes), ref)
    fattn, fref = float_inputs
    assert np.abs(D.plan_prefill_attention(fattn, placement, sizes) - fref).max() <= 1e-5


def test_plan_reading_from_a_non_holder_is_an_error(fixed_inputs):
    attn, _ = fixed_inputs
    placement = D.Placement(owner=[0, 1], replicas=[[], []], compute=[0, 1], n_nodes=2)

    class Broken:
        compute_node = staticmethod(placement.compute_node)
        events = placement.events

        @staticmethod
        def owner_fetches(c):                    # node 1 needs block 0 and claims node 1 sends it
            return [(0, 1, [1], 0)] if c == 1 else []

    with pytest.raises(ValueError, match="node 1 sends block 0, of which it holds no copy"):
        D.plan_prefill_attention(attn, Broken, [15, 14])

    class Forgetful(Broken):                     # node 1 computes chunk 1 without block 0
        @staticmethod
        def owner_fetches(c):
            return []

    with pytest.raises(ValueError, match="node 1 computes chunk 1 without a copy of block 0"):
        D.plan_prefill_attention(attn, Forgetful, [15, 14])
