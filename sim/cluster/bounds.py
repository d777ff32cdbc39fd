"""Roofline lower bounds on TTFT and decode tokens/s of the modelled hardware.

Bounds assume perfect overlap and perfect balance, so any execution (any scheme, any plan) of a
prefill of S tokens on N nodes takes at least the largest of them.
"""
from __future__ import annotations

from . import costs


def prefill_bounds(model, profile, seq: int, nodes: int, chunks: int | None = None) -> dict:
    """Lower bounds (seconds) on the prefill of ``seq`` tokens on ``nodes`` nodes.

    * compute: all FLOPs (dense 2 x params x S, causal attention 4 L H_q d x S(S+1)/2, LM head
      of the first token) over the aggregate sustained throughput: the dense layers and the head
      at N x P_node (the MAC array), attention at N x P_attn (the profile's attention path).
    * ddr: every node that computes streams the layer weights at least once (``ddr_once``); with
      the plan's C chunks, C times (``ddr_chunked``: the dense layers of a chunk need every weight).
    * link: with the query rows spread over all nodes, every node attends to every earlier key,
      so it must receive at least the KV it did not produce: (1 - 1/N) x S x M_token through its
      ports (profile ``net_ports`` x BW_eff).
    """
    S, N = seq, nodes
    dense = costs.dense_flops(model, S)
    attn = costs.attn_flops(model, 1, 1) * S * (S + 1) / 2
    head = costs.head_flops(model)
    flops = dense + attn + head
    # attention at its best rate: jobs over the whole prompt's keys (the array's fixed part a job amortized most)
    t_compute = ((dense + head) / profile.p_node + float(profile.attention_seconds(attn, S))) / N
    w = costs.weight_bytes(model)
    t_ddr_once = (w + costs.head_bytes(model)) / profile.ddr_Bps
    out = {
        "flops": flops,
        "dense_flops": dense,
        "attn_flops": attn,
        "compute_s": t_compute,
        "ddr_once_s": t_ddr_once,
        "link_s": (1 - 1 / N) * S * model.kv_token_bytes / (profile.net_ports * profile.bw_eff)
        if N > 1 else 0.0,
    }
    if chunks:
        out["ddr_chunked_s"] = chunks * w / profile.ddr_Bps
    out["lower_bound_s"] = max(out["compute_s"], out["ddr_once_s"], out["link_s"])
    return out


def overlap_ratio(model, profile, nodes: int, chunk: int) -> float:
    """Ring streaming time over attention time for one step (eq. 6 vs eq. 7 with r = 1):

    each history block of B x M_token bytes crosses one link per ring hop while the N nodes do
    4 L H_q d x B x B FLOPs against it.  Independent of the context length: below 1 the ring hides
    its communication behind attention, above 1 it is exposed (where replication can pay off).
    """
    t_link = chunk * model.kv_token_bytes / profile.bw_eff
    t_attn = float(profile.attention_seconds(costs.attn_flops(model, chunk, chunk), chunk)) / nodes
    return t_link / t_attn


def decode_bound_tokens_per_s(model, profile, shards: int = 1) -> dict:
    """A node holding 1/shards of the weights is capped by DDR bandwidth / weight bytes per token
    (and by its engine)."""
    w = (costs.weight_bytes(model) + costs.head_bytes(model)) / shards
    f = (costs.dense_flops(model, 1) + costs.head_flops(model)) / shards
    return {"weight_bytes_per_token": w, "ddr_tokens_per_s": profile.ddr_Bps / w,
            "ddr_peak_tokens_per_s": profile.ddr_bandwidth_Bps / w,
            "compute_tokens_per_s": profile.p_node / f}
