"""The fixed-point model: accuracy against the float reference, cache consistency."""
from __future__ import annotations

import numpy as np
import pytest

from mcf.sw.errors import UserError
from mcf.sw.golden.fixed_model import FixedModel
from mcf.sw.golden.float_model import FloatModel
from mcf.sw.golden.weights import random_weights


def cosine(a, b):
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.mark.parametrize("group", [16, 32])
def test_close_to_float(small_config, group):
    cfg = small_config(num_layers=2)
    w = random_weights(cfg, 11)
    tokens = np.random.default_rng(2).integers(0, cfg.vocab_size, 24)
    ref = FloatModel(cfg, w).forward(tokens)
    got = FixedModel(cfg, w, group).forward(tokens)
    c = cosine(ref, got)          # INT4 weights and KV on random Gaussian weights
    assert c.min() >= 0.95 and c.mean() >= 0.98


def test_decode_equals_prefill_bit_for_bit(small_config):
    cfg = small_config(num_layers=2, tie_word_embeddings=False)
    model = FixedModel(cfg, random_weights(cfg, 4), 16)
    tokens = np.random.default_rng(3).integers(0, cfg.vocab_size, 15)
    full = model.forward_x32(tokens)
    cache = model.new_cache()
    steps = [model.forward_x32(tokens[:6], cache)] + [model.forward_x32([t], cache) for t in tokens[6:]]
    assert np.array_equal(np.concatenate(steps), full)
    assert np.array_equal(model.forward_x32(tokens, logits="last"), full[-1:])
    assert full.dtype == np.int64 and np.abs(full).max() < 2 ** 31


def test_kv_cache_is_int4(small_config):
    cfg = small_config()
    model = FixedModel(cfg, random_weights(cfg, 4), 16)
    cache = model.new_cache()
    model.forward_x32([1, 2, 3], cache)
    kq, ka, ke = cache.k[0]
    assert kq.shape == (3, cfg.num_kv_heads, cfg.head_dim) and kq.min() >= -8 and kq.max() <= 7
    assert ((ka >= 128) & (ka <= 255)).all() and np.abs(ke).max() < 128


def test_bad_group_size(small_config):
    cfg = small_config()
    with pytest.raises(UserError, match="group size 48"):
        FixedModel(cfg, random_weights(cfg, 0), 48)


def test_trace_exposes_block_values(small_config):
    """The per-layer trace is what block benches consume: check its values chain up."""
    from mcf.sw.golden import fixed as fx
    cfg = small_config(num_layers=1)
    model = FixedModel(cfg, random_weights(cfg, 9), 16)
    trace = {}
    logits = model.forward_x32([4, 8, 15, 16], trace=trace)
    t0 = trace[0]
    assert np.array_equal(t0["x_in"], trace["embed"])
    assert np.array_equal(t0["x_mid"], fx.sat(t0["x_in"] + t0["o_proj"], 32))
    assert np.array_equal(t0["x_out"], fx.sat(t0["x_mid"] + t0["down"], 32))
    assert np.array_equal(fx.linear(trace["final_norm"], model.head), logits)
    assert t0["k"][0].dtype == np.int8 and t0["q"][0].shape == (4, cfg.num_heads, cfg.head_dim)
