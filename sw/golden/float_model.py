"""Float reference of the Qwen2 / Qwen2.5 decoder in NumPy (float32, like transformers on CPU).

``FloatModel(cfg, weights).forward(tokens, cache)`` runs a prefill or a decode step: new
tokens are appended to the ``KVCache`` and logits are returned for every new position
(``logits="last"`` skips the LM head for all but the last one, which is what a long
prefill needs).  Attention is grouped-query (H_q query heads share H_kv key/value heads),
causal, with RoPE in the rotate-half convention of Hugging Face.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mcf.sw.models import ModelConfig

from .weights import check_weights, lm_head, token_ids


def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
    """theta^(-2j/d), j < d/2, rounded to float32 as transformers does."""
    d = cfg.head_dim
    return (1.0 / (cfg.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))).astype(np.float32)


def rope_cos_sin(cfg: ModelConfig, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin of shape [T, d/2] (the angle product in float32, as transformers computes it)."""
    ang = np.asarray(positions, dtype=np.float32)[:, None] * rope_inv_freq(cfg)[None, :]
    ang = ang.astype(np.float64)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x: [T, H, d]; rotate-half: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    var = np.mean(x * x, axis=-1, keepdims=True)
    return (x / np.sqrt(var + eps)) * w


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                     q_pos: np.ndarray, k_pos: np.ndarray) -> np.ndarray:
    """Grouped-query causal attention.  q [T, Hq, d], k/v [S, Hkv, d] -> [T, Hq, d].

    Key j is visible to query t iff k_pos[j] <= q_pos[t]."""
    t, hq, d = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    # [Hkv, g*T, d] so one batched matmul covers every query head of a KV group.
    qg = q.reshape(t, hkv, g, d).transpose(1, 2, 0, 3).reshape(hkv, g * t, d)
    scores = qg @ k.transpose(1, 2, 0) * np.float32(1.0 / np.sqrt(d))
    mask = k_pos[None, :] > np.tile(q_pos, g)[:, None]
    scores = np.where(mask[None], -np.inf, scores)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    out = p @ v.transpose(1, 0, 2)                      # [Hkv, g*T, d]
    return out.reshape(hkv, g, t, d).transpose(2, 0, 1, 3).reshape(t, hq, d)


@dataclass
class KVCache:
    """Per-layer keys (after RoPE) and values, [S, H_kv, d] each, float32."""
    k: list = field(default_factory=list)
    v: list = field(default_factory=list)
    length: int = 0

    def append(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if layer == len(self.k):
            self.k.append(k)
            self.v.append(v)
        else:
            self.k[layer] = np.concatenate([self.k[layer], k])
            self.v[layer] = np.concatenate([self.v[layer], v])
        return self.k[layer], self.v[layer]


class FloatModel:
    def __init__(self, cfg: ModelConfig, weights: dict):
        check_weights(cfg, weights)
        self.cfg = cfg
        self.w = {k: np.asarray(v, dtype=np.float32) for k, v in weights.items()}

    def new_cache(self) -> KVCache:
        return KVCache()

    def _layer(self, li: int, x: np.ndarray, pos: np.ndarray, cache: KVCache,
               cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        cfg, w = self.cfg, self.w
        p = f"model.layers.{li}."
        t, d = x.shape[0], cfg.head_dim
        h = rms_norm(x, w[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        q = h @ w[p + "self_attn.q_proj.weight"].T + w[p + "self_attn.q_proj.bias"]
        k = h @ w[p + "self_attn.k_proj.weight"].T + w[p + "self_attn.k_proj.bias"]
        v = h @ w[p + "self_attn.v_proj.weight"].T + w[p + "self_attn.v_proj.bias"]
        q = apply_rope(q.reshape(t, cfg.num_heads, d), cos, sin)
        k = apply_rope(k.reshape(t, cfg.num_kv_heads, d), cos, sin)
        v = v.reshape(t, cfg.num_kv_heads, d)
        k_all, v_all = cache.append(li, k, v)
        att = causal_attention(q, k_all, v_all, pos, np.arange(k_all.shape[0]))
        x = x + att.reshape(t, -1) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        return x + (silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T

    def forward(self, tokens, cache: KVCache | None = None, logits: str = "all") -> np.ndarray:
        """Logits [T, vocab] for the new tokens (``logits="last"``: [1, vocab])."""
        cfg = self.cfg
        tokens = token_ids(cfg, tokens)
        cache = cache if cache is not None else self.new_cache()
        pos = np.arange(cache.length, cache.length + tokens.size)
        cos, sin = rope_cos_sin(cfg, pos)
        x = self.w["model.embed_tokens.weight"][tokens]
        for li in range(cfg.num_layers):
            x = self._layer(li, x, pos, cache, cos, sin)
        cache.length += tokens.size
        if logits == "last":
            x = x[-1:]
        x = rms_norm(x, self.w["model.norm.weight"], cfg.rms_norm_eps)
        return x @ lm_head(cfg, self.w).T
