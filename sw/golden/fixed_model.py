"""Fixed-point model of the decoder: the hardware's arithmetic (``fixed``) end to end.

``FixedModel(cfg, weights, group_size=128)`` quantises float weights offline (INT4 W4, int16
gains, X32 biases) and runs prefill / decode with an INT4 KV cache.  ``forward_x32`` returns
the X32 logits the hardware produces; ``forward`` the same as floats.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field

import numpy as np

from mcf.sw.errors import UserError
from mcf.sw.models import ModelConfig
from mcf.sw.models.config import check_tensor_parallel, shard_config, shard_kv_head

from . import fixed as fx
from .weights import check_weights, lm_head, token_ids


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
            if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1 or n % group_size:
                g = math.gcd(cfg.hidden_size, cfg.intermediate_size, cfg.num_heads * cfg.head_dim)
                fits = [d for d in (1 << k for k in range(17)) if g % d == 0 and d <= 4096]
                raise UserError(f"group size {group_size} does not divide {n} (model {cfg.name}; "
                                f"sizes that fit: {', '.join(map(str, fits))}, or any divisor of {g})")
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
        tokens = token_ids(cfg, tokens)
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


# --- weight-sharded (tensor-parallel) decoding --------------------------------------------------
class TensorParallel:
    """The golden model of weight-sharded (Megatron-style) decoding on ``nodes`` nodes, the
    arithmetic the nodes' tensor-parallel programs execute (``mcf.sw.mars.lower_tp``).

    Node n holds query heads [n H/N, (n+1) H/N) with the KV heads they read and their KV cache
    (with more nodes than KV heads, N / H_kv nodes compute and cache the same KV head), the rows of Q/K/V (and biases), gate and up for them, and the matching *columns* of
    o_proj and down_proj; embedding, RMSNorm gains and LM head are replicated (the LM head runs on
    node 0 only).  The quantization is the unsharded ``FixedModel``'s (same q, S, E_w): Q/K/V,
    gate, up and attention are per row and head, hence exactly the unsharded values.  o_proj and
    down_proj are not: each node converts *its* slice of the row to BFP16 (its own row exponent),
    its GEMM rounds its partial accumulator once (``fx.linear``), and the NICs add the N X32
    partials (ReduceOp.SUM: 32-bit two's-complement addition, associative, so the order does not
    matter) -- ``fx.reduce_sum``.  The residual then adds the sum (saturating), as unsharded.

    ``shard(n)`` is node n's model as a ``FixedModel`` of ``shard_config`` (what the runtime
    packs into its DDR); ``forward_x32`` runs all shards with one KV cache per shard.  With one
    node this is ``FixedModel`` exactly."""

    def __init__(self, fm: FixedModel, nodes: int):
        cfg = fm.cfg
        check_tensor_parallel(cfg, nodes, fm.group_size)
        self.fm, self.nodes, self.cfg = fm, nodes, cfg
        self.shard_cfg = shard_config(cfg, nodes)
        self.shards = [self._shard(n) for n in range(nodes)]

    def _shard(self, n: int) -> FixedModel:
        cfg, sc, d = self.cfg, self.shard_cfg, self.cfg.head_dim
        q0, q1 = n * sc.num_heads * d, (n + 1) * sc.num_heads * d
        kv0 = shard_kv_head(cfg, self.nodes, n)
        k0, k1 = kv0 * d, (kv0 + sc.num_kv_heads) * d
        i0, i1 = n * sc.intermediate_size, (n + 1) * sc.intermediate_size
        s = FixedModel.__new__(FixedModel)
        s.cfg, s.group_size = sc, self.fm.group_size
        s.embed, s.head, s.norm = self.fm.embed, self.fm.head, self.fm.norm
        s.layers = []
        for L in self.fm.layers:
            S = {"ln1": L["ln1"], "ln2": L["ln2"],
                 "q_proj": L["q_proj"].rows(q0, q1), "q_proj.bias": L["q_proj.bias"][q0:q1],
                 "k_proj": L["k_proj"].rows(k0, k1), "k_proj.bias": L["k_proj.bias"][k0:k1],
                 "v_proj": L["v_proj"].rows(k0, k1), "v_proj.bias": L["v_proj.bias"][k0:k1],
                 "o_proj": L["o_proj"].cols(q0, q1),
                 "gate_proj": L["gate_proj"].rows(i0, i1), "up_proj": L["up_proj"].rows(i0, i1),
                 "down_proj": L["down_proj"].cols(i0, i1)}
            s.layers.append(S)
        return s

    def shard(self, n: int) -> FixedModel:
        return self.shards[n]

    def new_cache(self) -> list:
        return [FixedKVCache() for _ in range(self.nodes)]

    def _layer(self, li: int, x, pos, caches):
        t = x.shape[0]
        g = self.shard_cfg.num_heads // self.shard_cfg.num_kv_heads
        parts = []
        for s, cache in zip(self.shards, caches):
            q, k, v = s.attention_inputs(li, x, pos)
            k_all, v_all = cache.append(li, k, v)
            att = fx.attention(q, k_all, v_all, pos, np.arange(k_all[0].shape[0]), g)
            parts.append(fx.linear(fx.x32_to_bfp(att.reshape(t, -1)), s.layers[li]["o_proj"]))
        x_mid = fx.sat(x + fx.reduce_sum(parts).astype(np.int64), 32)
        parts = []
        for s in self.shards:
            L = s.layers[li]
            h = fx.rmsnorm(x_mid, *L["ln2"], self.cfg.rms_norm_eps)
            gate = fx.silu(fx.linear(h, L["gate_proj"]))
            act = fx.bfp_mul(fx.x32_to_bfp(gate), fx.x32_to_bfp(fx.linear(h, L["up_proj"])))
            parts.append(fx.linear(act, L["down_proj"]))
        return fx.sat(x_mid + fx.reduce_sum(parts).astype(np.int64), 32)

    def forward_x32(self, tokens, caches: list | None = None, logits: str = "all") -> np.ndarray:
        """X32 logits [T, vocab] (``logits="last"``: [1, vocab]) of the new tokens; ``caches``
        (``new_cache()``) carries the per-shard KV caches between calls."""
        cfg = self.cfg
        tokens = token_ids(cfg, tokens)
        caches = caches if caches is not None else self.new_cache()
        pos = np.arange(caches[0].length, caches[0].length + tokens.size)
        x = fx.embed(self.fm.embed, tokens)
        for li in range(cfg.num_layers):
            x = self._layer(li, x, pos, caches)
        for c in caches:
            c.length += tokens.size
        if logits == "last":
            x = x[-1:]
        return fx.linear(fx.rmsnorm(x, *self.fm.norm, cfg.rms_norm_eps), self.fm.head)
