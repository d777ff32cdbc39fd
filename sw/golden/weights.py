"""Decoder weights as a dict of NumPy arrays under Hugging Face Qwen2 tensor names.

One naming scheme everywhere (the checkpoint's): ``model.embed_tokens.weight``,
``model.layers.{i}.self_attn.q_proj.weight`` ... ``model.norm.weight`` and, when the
embeddings are not tied, ``lm_head.weight``.  Linear weights are ``[out, in]`` as stored.
"""
from __future__ import annotations

import numpy as np

from mcf.sw.errors import UserError
from mcf.sw.models import ModelConfig


def layer_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Per-layer tensor suffix -> shape (Qwen2: q/k/v have biases, o_proj has none)."""
    h, d, i = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    qd, kvd = cfg.num_heads * d, cfg.num_kv_heads * d
    return {
        "input_layernorm.weight": (h,),
        "self_attn.q_proj.weight": (qd, h), "self_attn.q_proj.bias": (qd,),
        "self_attn.k_proj.weight": (kvd, h), "self_attn.k_proj.bias": (kvd,),
        "self_attn.v_proj.weight": (kvd, h), "self_attn.v_proj.bias": (kvd,),
        "self_attn.o_proj.weight": (h, qd),
        "post_attention_layernorm.weight": (h,),
        "mlp.gate_proj.weight": (i, h), "mlp.up_proj.weight": (i, h),
        "mlp.down_proj.weight": (h, i),
    }


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, cfg.hidden_size)}
    for li in range(cfg.num_layers):
        for suffix, shape in layer_shapes(cfg).items():
            shapes[f"model.layers.{li}.{suffix}"] = shape
    shapes["model.norm.weight"] = (cfg.hidden_size,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, cfg.hidden_size)
    return shapes


def check_weights(cfg: ModelConfig, weights: dict) -> None:
    """Raise a one-line UserError naming the first missing or mis-shaped tensor."""
    for name, shape in expected_shapes(cfg).items():
        if name not in weights:
            raise UserError(f"model {cfg.name}: missing tensor {name}")
        if tuple(weights[name].shape) != shape:
            raise UserError(f"model {cfg.name}: tensor {name} has shape {tuple(weights[name].shape)}, "
                            f"expected {shape}")


def random_weights(cfg: ModelConfig, seed: int = 0, std: float = 0.02,
                   bias_std: float = 0.1) -> dict[str, np.ndarray]:
    """Random float32 weights shaped like a checkpoint (norm gains around 1, small biases)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in expected_shapes(cfg).items():
        if name.endswith("norm.weight"):
            w = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        elif name.endswith(".bias"):
            w = bias_std * rng.standard_normal(shape, dtype=np.float32)
        else:
            w = std * rng.standard_normal(shape, dtype=np.float32)
        out[name] = w.astype(np.float32, copy=False)
    return out


def lm_head(cfg: ModelConfig, weights: dict) -> np.ndarray:
    return weights["model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"]


def token_ids(cfg: ModelConfig, tokens) -> np.ndarray:
    """``tokens`` as a flat int64 array of ids of ``cfg``'s vocabulary; none, or one outside it,
    is refused in one line (``UserError``)."""
    tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
    if tokens.size == 0:
        raise UserError("no tokens given")
    if tokens.min() < 0 or tokens.max() >= cfg.vocab_size:
        raise UserError(f"token ids must be in [0, {cfg.vocab_size})")
    return tokens
