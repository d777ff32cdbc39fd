"""Fixed-point model of the decoder: the hardware's arithmetic (``fixed``) end to end.

``FixedModel(cfg, weights, group_size=128)`` quantises float weights offline (INT4 W4, int16
gains, X32 biases) and runs prefill / decode with an INT4 KV cache.  ``forward_x32`` returns
the X32 logits the hardware produces; ``forward`` the same as floats.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mcf.sw.errors import UserError
from mcf.sw.models import ModelConfig

from . import fixed as fx
from .weights import check_weights, lm_head


@dataclass
class FixedKVCache:
    """Per layer: K and V as KV4 triples (q [S, Hkv, d], A [S, Hkv], E [S, Hkv])."""
    k: list = field(default_factory=list)
    v: list = field(default_factory=list)
    length: int = 0

    def append(self, layer, k, v):
        if layer == len(self.k):
            self.k.append(k)
            self.v.append(v)
        else:
            self.k[layer] = tuple(np.concatenate([a, b]) for a, b in zip(self.k[layer], k))
            self.v[layer] = tuple(np.concatenate([a, b]) for a, b in zip(self.v[layer], v))
        return self.k[layer], self.v[layer]


def default_group(cfg: ModelConfig, largest: int = 128) -> int:
    """The INT4 group size the runtime and ``mcf golden generate`` use unless told: the largest
    power of two <= ``largest`` that divides hidden_size, intermediate_size and num_heads x head_dim."""
    g = largest
    while g > 1 and (cfg.hidden_size % g or cfg.intermediate_size % g or (cfg.num_heads * cfg.head_dim) % g):
        g //= 2
    return g


class FixedModel:
    def __init__(self, cfg: ModelConfig, weights: dict, group_size: int = 128):
        check_weights(cfg, weights)
        for n in (cfg.hidden_size, cfg.intermediate_size, cfg.num_heads * cfg.head_dim):
            if n % group_size:
                raise UserError(f"group size {group_size} does not divide {n} (model {cfg.name})")
        self.cfg, self.group_size = cfg, group_size
        self.layers = []
        for li in range(cfg.num_layers):
            p = f"model.layers.{li}."
            L = {}
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                L[name] = fx.quantize_weight(weights[p + f"self_attn.{name}.weight"], group_size)
            for name in ("q_proj", "k_proj", "v_proj"):
                L[name + ".bias"] = fx.quantize_x32(weights[p + f"self_attn.{name}.bias"])
            for name in ("gate_proj", "up_proj", "down_proj"):
                L[name] = fx.quantize_weight(weights[p + f"mlp.{name}.weight"], group_size)
            L["ln1"] = fx.quantize_gain(weights[p + "input_layernorm.weight"])
            L["ln2"] = fx.quantize_gain(weights[p + "post_attention_layernorm.weight"])
            self.layers.append(L)
        self.embed = fx.quantize_weight(weights["model.embed_tokens.weight"], group_size)
        self.head = self.embed if cfg.tie_word_embeddings else fx.quantize_weight(lm_head(cfg, weights), group_size)
        self.norm = fx.quantize_gain(weights["model.norm.weight"])

    def dequantized_weights(self, weights: dict) -> dict:
        """``weights`` with every INT4 matrix replaced by its dequantised value: running the
        float model on these isolates the datapath error from the weight-quantisation error."""
        out = dict(weights)
        for li, L in enumerate(self.layers):
            p = f"model.layers.{li}."
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                out[p + f"self_attn.{name}.weight"] = L[name].dequant().astype(np.float32)
            for name in ("gate_proj", "up_proj", "down_proj"):
                out[p + f"mlp.{name}.weight"] = L[name].dequant().astype(np.float32)
        out["model.embed_tokens.weight"] = self.embed.dequant().astype(np.float32)
        if not self.cfg.tie_word_embeddings:
            out["lm_head.weight"] = self.head.dequant().astype(np.float32)
        return out

    def new_cache(self) -> FixedKVCache:
        return FixedKVCache()

    def attention_inputs(self, li: int, x: np.ndarray, pos: np.ndarray):
        """X32 residual rows -> (q BFP16 prescaled, K4, V4) of layer ``li``."""
        cfg, L = self.cfg, self.layers[li]
        t, d = x.shape[0], cfg.head_dim
        h = fx.rmsnorm(x, *L["ln1"], cfg.rms_norm_eps)
        q = fx.linear(h, L["q_proj"], L["q_proj.bias"]).reshape(t, cfg.num_heads, d)
        k = fx.linear(h, L["k_proj"], L["k_proj.bias"]).reshape(t, cfg.num_kv_heads, d)
        v = fx.linear(h, L["v_proj"], L["v_proj.bias"]).reshape(t, cfg.num_kv_heads, d)
        cos, sin = fx.rope_table(d, cfg.rope_theta, pos)
        q = fx.prescale_query(fx.rope(fx.x32_to_bfp(q), cos, sin), d)
        k = fx.quantize_kv(fx.rope(fx.x32_to_bfp(k), cos, sin))
        v = fx.quantize_kv(fx.x32_to_bfp(v))
        return q, k, v

    def _layer(self, li, x, pos, cache, trace=None):
        cfg, L = self.cfg, self.layers[li]
        t = x.shape[0]
        q, k, v = self.attention_inputs(li, x, pos)
        k_all, v_all = cache.append(li, k, v)
        g = cfg.num_heads // cfg.num_kv_heads
        att = fx.attention(q, k_all, v_all, pos, np.arange(k_all[0].shape[0]), g)
        o = fx.linear(fx.x32_to_bfp(att.reshape(t, -1)), L["o_proj"])
        x_mid = fx.sat(x + o, 32)
        h = fx.rmsnorm(x_mid, *L["ln2"], cfg.rms_norm_eps)
        gate = fx.silu(fx.linear(h, L["gate_proj"]))
        up = fx.linear(h, L["up_proj"])
        act = fx.bfp_mul(fx.x32_to_bfp(gate), fx.x32_to_bfp(up))
        down = fx.linear(act, L["down_proj"])
        out = fx.sat(x_mid + down, 32)
        if trace is not None:
            trace[li] = {"x_in": x, "q": q, "k": k, "v": v, "attn": att, "o_proj": o, "x_mid": x_mid,
                         "ln2": h, "silu_gate": gate, "up": up, "act": act, "down": down, "x_out": out}
        return out

    def forward_x32(self, tokens, cache: FixedKVCache | None = None, logits: str = "all",
                    trace: dict | None = None) -> np.ndarray:
        """X32 logits [T, vocab] (``logits="last"``: [1, vocab]) for the new tokens.

        ``trace``, if a dict, receives every intermediate integer tensor per layer (keys
        x_in, q (BFP16, prescaled), k, v (KV4), attn, o_proj, x_mid, ln2, silu_gate, up, act,
        down, x_out) and "embed", "final_norm": the stimuli and expected values of block-level
        RTL benches."""
        cfg = self.cfg
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if tokens.size == 0:
            raise UserError("no tokens given")
        if tokens.min() < 0 or tokens.max() >= cfg.vocab_size:
            raise UserError(f"token ids must be in [0, {cfg.vocab_size})")
        cache = cache if cache is not None else self.new_cache()
        pos = np.arange(cache.length, cache.length + tokens.size)
        x = fx.embed(self.embed, tokens)
        if trace is not None:
            trace["embed"] = x
        for li in range(cfg.num_layers):
            x = self._layer(li, x, pos, cache, trace)
        cache.length += tokens.size
        if logits == "last":
            x = x[-1:]
        h = fx.rmsnorm(x, *self.norm, cfg.rms_norm_eps)
        if trace is not None:
            trace["final_norm"] = h
        return fx.linear(h, self.head)

    def forward(self, tokens, cache: FixedKVCache | None = None, logits: str = "all") -> np.ndarray:
        return self.forward_x32(tokens, cache, logits) * 2.0 ** -fx.X_FRAC
