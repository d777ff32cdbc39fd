"""Cycle costs of the compute units, read off the RTL (and checked against simulation by
tests/compute/test_cost.py), and the cost of one decoder layer built from them.

Every unit here runs one job at a time and the layer schedule below runs the units one after
another (no overlap between units): an upper bound, as the real engine would overlap the
vector work of one row with the GEMM of the next.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from mcf.hw.compute.matrix import MatrixUnit

MATRIX_LATENCY = 7     # issue -> products -> partial -> scale -> accumulate -> requant -> o


@dataclass(frozen=True)
class Array:
    """The engine's shape: MAC array rows x lanes, tokens per weight pass, attention rows."""
    rows: int = 16
    lanes: int = 16
    max_tokens: int = 16
    att_rows: int = 8          # query rows of the attention unit (group heads x tokens)
    kv_lanes: int = 16         # KV writer lanes
    vec_lanes: int = 16        # vector unit lanes
    mac_utilization: float = 1.0   # measured steady-state issue rate (mcf bench compute)

    @property
    def macs_per_cycle(self) -> int:
        return self.rows * self.lanes


def matrix_cycles(arr: Array, tokens: int, n: int, out: int) -> float:
    """One linear layer: every weight beat is held for min(T, max_tokens) cycles."""
    passes = math.ceil(tokens / arr.max_tokens)
    issue = 0
    for p in range(passes):
        t = min(arr.max_tokens, tokens - p * arr.max_tokens)
        issue += math.ceil(out / arr.rows) * math.ceil(n / arr.lanes) * t
    return issue / arr.mac_utilization + passes * MATRIX_LATENCY


def vector_cycles(op: str, n: int, lanes: int = 1) -> int:
    """cmd + load [+ sum of squares + rsqrt (1)] [+ product pass] + emit, n / lanes beats each."""
    b = math.ceil(n / lanes)
    if op in ("SILU", "RESIDUAL"):
        return 1 + 2 * b
    if op == "RMSNORM":
        return 2 + 4 * b
    return 1 + 3 * b


def kv_writer_cycles(d: int, lanes: int) -> int:
    beats = math.ceil(d / lanes)
    return 2 * beats + 1


def attention_cycles(keys: int, rows: int, d: int, final: bool = True) -> int:
    """cmd + pass 1 (keys + 2) + pass 2 (keys + 4) + output (rows x (d + 1) final, d + 2 state)."""
    return 1 + (keys + 2) + (keys + 4) + rows * (d + 1 if final else d + 2)


def layer_cycles(cfg, tokens: int, context: int, arr: Array = Array()) -> dict:
    """Cycles of one decoder layer for ``tokens`` new tokens attending over ``context`` keys
    (prefill chunk: tokens = chunk, context = past + chunk; decode: tokens = 1)."""
    h, d, hq, hkv, inter = (cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads,
                            cfg.intermediate_size)
    T = tokens
    group = hq // hkv
    gemm = (matrix_cycles(arr, T, h, hq * d) + 2 * matrix_cycles(arr, T, h, hkv * d)
            + matrix_cycles(arr, T, hq * d, h) + 2 * matrix_cycles(arr, T, h, inter)
            + matrix_cycles(arr, T, inter, h))
    L = arr.vec_lanes

    def vc(op, n):
        return vector_cycles(op, n, L)

    vec = T * (2 * vc("RMSNORM", h) + 2 * vc("RESIDUAL", h)
               + (hq + 2 * hkv) * vc("TO_BFP", d) + (hq + hkv) * vc("ROPE", d)
               + hq * vc("PRESCALE", d) + vc("TO_BFP", hq * d)
               + vc("SILU", inter) + 2 * vc("TO_BFP", inter) + vc("MUL", inter))
    kv = T * 2 * hkv * kv_writer_cycles(d, arr.kv_lanes)
    tok_per_job = max(1, arr.att_rows // group)
    jobs = hkv * math.ceil(T / tok_per_job)
    att = jobs * attention_cycles(context, min(arr.att_rows, group * T), d)
    total = gemm + vec + kv + att
    return {"gemm": round(gemm), "vector": vec, "kv_writer": kv, "attention": att,
            "total": round(total)}


FORMULA = ("cycles/layer ~= T * P_layer / (rows * lanes * util)  [GEMM, P_layer = weights per layer]"
           " + T * (10 h + 7 inter + (4 Hq + 3 Hkv) * 3 d + 3 Hq d) / vec_lanes  [vector]"
           " + 2 T Hkv (2 d / kv_lanes + 1)  [KV writer]"
           " + Hkv * ceil(T / (att_rows / group)) * (2 S + att_rows (d + 1) + 7)  [attention]")


def matrix_for(arr: Array, max_inputs: int = 256, max_tiles: int = 64) -> MatrixUnit:
    return MatrixUnit(arr.rows, arr.lanes, arr.max_tokens, max_inputs, max_tiles)
