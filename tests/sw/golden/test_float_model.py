"""The float reference against transformers' Qwen2ForCausalLM (torch, CPU, float32).

Random-weight checkpoints of several shapes are written with ``save_pretrained`` into
tmp_path and read back by our torch-free loader."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mcf.sw.golden.checkpoint import load_checkpoint  # noqa: E402
from mcf.sw.golden.float_model import FloatModel  # noqa: E402

SHAPES = {
    # GQA 4 q heads on 2 KV heads, tied embeddings (as Qwen2.5-1.5B)
    "gqa-tied": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=300, tie_word_embeddings=True, rope_theta=10000.0),
    # multi-head, untied LM head, head_dim != hidden / heads, large RoPE theta
    "mha-untied": dict(hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=4,
                       num_key_value_heads=4, head_dim=16, vocab_size=200, tie_word_embeddings=False,
                       rope_theta=1_000_000.0),
    # one KV head for six query heads
    "mqa": dict(hidden_size=96, intermediate_size=64, num_hidden_layers=1, num_attention_heads=6,
                num_key_value_heads=1, vocab_size=128, tie_word_embeddings=True, rope_theta=500000.0),
}


def make_checkpoint(path, shape: str, dtype=None, seed: int = 0, **save_kw):
    torch.manual_seed(seed)
    cfg = transformers.Qwen2Config(**SHAPES[shape])
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "bias" in name or "norm" in name:      # defaults are 0 / 1: make them matter
                p.add_(0.2 * torch.randn_like(p))
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(path, **save_kw)
    return transformers.Qwen2ForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].numpy()


def check_prefill_and_decode(path, shape):
    hf = make_checkpoint(path, shape)
    cfg, weights = load_checkpoint(path)
    ours = FloatModel(cfg, weights)
    tokens = list(np.random.default_rng(1).integers(0, cfg.vocab_size, 12))
    ref = hf_logits(hf, tokens)
    assert np.abs(ours.forward(tokens) - ref).max() <= 1e-4, shape

    # prefill 7 tokens, then decode one at a time with both caches
    cache = ours.new_cache()
    with torch.no_grad():
        out = hf(torch.tensor([tokens[:7]]), use_cache=True)
        assert np.abs(ours.forward(tokens[:7], cache) - out.logits[0].numpy()).max() <= 1e-4, shape
        past = out.past_key_values
        for tok in tokens[7:]:
            out = hf(torch.tensor([[tok]]), cache=past, use_cache=True)
            past = out.past_key_values
            step = ours.forward([tok], cache)
            assert step.shape == (1, cfg.vocab_size)
            assert np.abs(step - out.logits[0].numpy()).max() <= 1e-4, (shape, "decode")
    assert cache.length == len(tokens)


def check_half_precision(path, dtype):
    hf = make_checkpoint(path, "gqa-tied", dtype=getattr(torch, dtype), seed=3)
    cfg, weights = load_checkpoint(path)
    tokens = [3, 1, 4, 1, 5, 9, 2, 6]
    assert np.abs(FloatModel(cfg, weights).forward(tokens) - hf_logits(hf, tokens)).max() <= 1e-4, dtype


def check_sharded(path):
    hf = make_checkpoint(path, "mha-untied", seed=5, max_shard_size="20KB")
    assert (path / "model.safetensors.index.json").is_file()
    assert len(list(path.glob("*.safetensors"))) > 1
    cfg, weights = load_checkpoint(path)
    tokens = [7, 0, 199, 42]
    assert np.abs(FloatModel(cfg, weights).forward(tokens) - hf_logits(hf, tokens)).max() <= 1e-4


def test_matches_transformers(tmp_path):
    """One test on purpose: importing torch + transformers costs ~9 CPU seconds per pytest-xdist
    worker, so all cross-checks run where it was paid once."""
    for shape in sorted(SHAPES):                       # fp32 checkpoints, prefill + decode
        check_prefill_and_decode(tmp_path / shape, shape)
    for dtype in ("bfloat16", "float16"):              # half-precision checkpoints
        check_half_precision(tmp_path / dtype, dtype)
    check_sharded(tmp_path / "sharded")                # index.json + several shards
