"""Torch-free safetensors reader and checkpoint loader (files written by hand here)."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from mcf.sw.errors import UserError
from mcf.sw.golden import safetensors as st
from mcf.sw.golden.checkpoint import load_checkpoint
from mcf.sw.golden.weights import expected_shapes, random_weights


def hf_config(cfg, style="top"):
    d = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
         "num_hidden_layers": cfg.num_layers, "hidden_size": cfg.hidden_size,
         "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
         "intermediate_size": cfg.intermediate_size, "vocab_size": cfg.vocab_size,
         "rms_norm_eps": 1e-6, "tie_word_embeddings": cfg.tie_word_embeddings}
    if style == "top":
        d["rope_theta"] = cfg.rope_theta
    else:
        d["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    return d


def write_checkpoint(path, cfg, weights, dtype="F32", shards=1, style="top"):
    (path / "config.json").write_text(json.dumps(hf_config(cfg, style)))
    names = list(weights)
    if shards == 1:
        st.save_file(weights, path / "model.safetensors", dtype)
        return
    parts = np.array_split(np.arange(len(names)), shards)
    wmap = {}
    for i, idx in enumerate(parts):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        st.save_file({names[j]: weights[names[j]] for j in idx}, path / fname, dtype)
        wmap.update({names[j]: fname for j in idx})
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wmap}))


def test_bf16_bits_are_hand_checked(tmp_path):
    # 1.0 = 0x3F80, -2.5 = 0xC020, 0.15625 = 0x3E20 in bfloat16 (exact values)
    header = json.dumps({"x": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}}).encode()
    (tmp_path / "a.safetensors").write_bytes(struct.pack("<Q", len(header)) + header
                                              + struct.pack("<3H", 0x3F80, 0xC020, 0x3E20))
    assert st.load_file(tmp_path / "a.safetensors")["x"].tolist() == [1.0, -2.5, 0.15625]


@pytest.mark.parametrize("dtype,tol", [("F32", 0.0), ("F16", 1e-3), ("BF16", 1e-2)])
def test_roundtrip(tmp_path, dtype, tol, rng):
    x = rng.standard_normal((5, 7)).astype(np.float32)
    st.save_file({"x": x}, tmp_path / "a.safetensors", dtype)
    y = st.load_file(tmp_path / "a.safetensors")["x"]
    assert y.dtype == np.float32 and y.shape == (5, 7)
    assert np.abs(y - x).max() <= tol * np.abs(x).max()


@pytest.mark.parametrize("shards,style,dtype", [(1, "top", "F32"), (3, "params", "BF16"), (2, "top", "F16")])
def test_load_checkpoint(tmp_path, shards, style, dtype, small_config):
    cfg = small_config(tie_word_embeddings=(shards != 3), rope_theta=1e6)
    w = random_weights(cfg, 0)
    write_checkpoint(tmp_path, cfg, w, dtype, shards, style)
    got_cfg, got = load_checkpoint(tmp_path)
    assert got_cfg.rope_theta == 1e6 and got_cfg.tie_word_embeddings == cfg.tie_word_embeddings
    assert set(got) == set(expected_shapes(cfg))
    tol = {"F32": 0, "F16": 1e-3, "BF16": 1e-2}[dtype]
    for name in got:
        assert np.abs(got[name] - w[name]).max() <= tol * max(1.0, np.abs(w[name]).max())


def test_missing_tensor_is_named(tmp_path, small_config):
    cfg = small_config()
    w = random_weights(cfg, 0)
    del w["model.layers.1.mlp.up_proj.weight"]
    write_checkpoint(tmp_path, cfg, w)
    with pytest.raises(UserError, match=r"missing tensor model\.layers\.1\.mlp\.up_proj\.weight"):
        load_checkpoint(tmp_path)


def test_untied_needs_lm_head(tmp_path, small_config):
    cfg = small_config(tie_word_embeddings=False)
    w = random_weights(cfg, 0)
    del w["lm_head.weight"]
    write_checkpoint(tmp_path, cfg, w)
    with pytest.raises(UserError, match="lm_head.weight"):
        load_checkpoint(tmp_path)


def test_unsupported_architecture_is_named(tmp_path, small_config):
    cfg = small_config()
    write_checkpoint(tmp_path, cfg, random_weights(cfg, 0))
    d = json.loads((tmp_path / "config.json").read_text())
    d.update(architectures=["LlamaForCausalLM"], model_type="llama")
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(UserError, match="LlamaForCausalLM"):
        load_checkpoint(tmp_path)


def test_truncated_file(tmp_path):
    st.save_file({"x": np.ones(100, np.float32)}, tmp_path / "a.safetensors")
    data = (tmp_path / "a.safetensors").read_bytes()
    (tmp_path / "a.safetensors").write_bytes(data[:-10])
    with pytest.raises(UserError, match="truncated"):
        st.load_file(tmp_path / "a.safetensors")


def test_rope_scaling_is_rejected(tmp_path, small_config):
    cfg = small_config()
    write_checkpoint(tmp_path, cfg, random_weights(cfg, 0))
    d = json.loads((tmp_path / "config.json").read_text())
    d["rope_scaling"] = {"type": "yarn", "factor": 4.0}
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(UserError, match="yarn"):
        load_checkpoint(tmp_path)
