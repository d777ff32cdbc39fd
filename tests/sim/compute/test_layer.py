"""One decoder layer of the tiny model on the RTL units (Amaranth simulator), prefill of a
chunk then decode steps, bit for bit against ``FixedModel`` (golden): the layer output and
the INT4 KV cache the KV writer produced."""
import numpy as np
import pytest

from mcf.sim.compute import layer as rtl
from mcf.sw.golden import FixedModel, load_checkpoint, random_weights, write_checkpoint
from mcf.sw.golden import fixed as fx
from mcf.sw.models import load_model


@pytest.mark.slow
@pytest.mark.timeout(2400)      # ~80 s alone; far longer on a loaded machine
def test_tiny_layer_prefill_then_decode(tmp_path):
    # A small random-weight Qwen2 checkpoint, through the safetensors writer and reader.
    write_checkpoint(tmp_path / "ckpt", load_model("tiny"), random_weights(load_model("tiny"), seed=3), "F32")
    cfg, weights = load_checkpoint(tmp_path / "ckpt")
    model = FixedModel(cfg, weights, group_size=32)
    units = rtl.Units(cfg)
    gcache, rcache = model.new_cache(), rtl.RtlCache()
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.vocab_size, size=8 + 2)
    chunks = [tokens[:8], tokens[8:9], tokens[9:10]]       # prefill 8, then 2 decode steps
    start = 0
    for chunk in chunks:
        pos = np.arange(start, start + len(chunk))
        x = fx.embed(model.embed, chunk)
        want = model._layer(0, x, pos, gcache)
        got = rtl.layer(units, model.layers[0], x, pos, rcache)
        assert np.array_equal(got, want), f"tokens {start}..: layer output differs"
        for head in range(cfg.num_kv_heads):
            for ours, theirs in zip(rcache.k[head] + rcache.v[head],
                                    tuple(a[:, head] for a in gcache.k[0]) + tuple(a[:, head] for a in gcache.v[0])):
                assert np.array_equal(ours, theirs)
        start += len(chunk)
