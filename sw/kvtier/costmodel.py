"""Load or recompute: the cost model of the paper's section 4, for MCF.

Terms (docs/kvtier.md, "Cost model"):

* ``s``  bytes per token the tier stores and moves: a chunk value (``spec/kv.py``: INT4 K and V
  with their scales, every layer, 64-byte aligned) divided by the chunk's tokens.  From the model.
* ``R``  prefill rate, tokens/s.  A ``PrefillCurve``: the time to prefill the first n tokens of a
  prompt, from the SimPy cluster model (``mcf simulate``) for the KR260 profile, from a measured
  run, or a constant; it carries its source label.  ``R(n) = n / T(n)``.
* ``B_r`` bandwidth of rank r's server, bytes/s, measured against the live server.
* ``T0`` fixed cost of a hit (lookup round trips, request set-up, unpacking, placement), fitted on
  one configuration (``fit_t0``) and validated on others.

A hit of p chunks (n = p * chunk tokens) is loaded iff the prefill it saves takes longer than the
load: ``T(n) > T0 + max_r (backlog_r + bytes_r / B_r)``, where rank r moves its owned chunks'
bytes_r in parallel with the others, and backlog_r is the predicted time of the operations the
rank has already queued on its server.  ``observe`` keeps B_r tracking what fetches achieve.  With one rank, no backlog and a constant R this is the paper's
``n / R > T0 + n * s / B``; ignoring T0 a hit pays iff ``B > B* = s * R``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mcf.spec import kv
from mcf.sw.errors import UserError

from .shard import owned


def chunk_value_bytes(cfg, chunk: int) -> int:
    """Bytes of one chunk value of model ``cfg`` (spec/kv.py)."""
    return kv.chunk_value_bytes(chunk, cfg.head_dim, cfg.num_kv_heads, cfg.num_layers)


def bytes_per_token(cfg, chunk: int) -> float:
    """s: stored bytes per token (scales and alignment included)."""
    return chunk_value_bytes(cfg, chunk) / chunk


@dataclass(frozen=True)
class PrefillCurve:
    """Cold prefill time as a function of tokens: ``step_end_s[t]`` is when the last node finished
    chunk step t of a cold prefill (chunks of ``chunk`` tokens); ``head_s`` the first token's LM
    head after the last step.  Inside a step time is interpolated linearly."""
    chunk: int
    step_end_s: tuple
    head_s: float
    source: str

    def __post_init__(self):
        e = np.asarray(self.step_end_s, dtype=float)
        if e.ndim != 1 or e.size < 1 or not np.all(np.isfinite(e)) or np.any(np.diff(np.r_[0.0, e]) <= 0):
            raise UserError("prefill curve: step end times must be finite and increasing from > 0")
        if not self.head_s >= 0:
            raise UserError(f"prefill curve: head time {self.head_s} must be >= 0")

    @classmethod
    def constant(cls, rate: float, chunk: int, max_tokens: int, source: str) -> "PrefillCurve":
        if not (rate > 0 and math.isfinite(rate)):
            raise UserError(f"prefill rate {rate}: must be > 0 tokens/s")
        steps = max(1, -(-int(max_tokens) // chunk))
        return cls(chunk, tuple((np.arange(1, steps + 1) * chunk / rate).tolist()), 0.0, source)

    @property
    def max_tokens(self) -> int:
        return len(self.step_end_s) * self.chunk

    def steps_s(self, n) -> np.ndarray | float:
        """Seconds of the chunk steps that prefill tokens 0 .. n-1 (no LM head)."""
        n_arr = np.asarray(n, dtype=float)
        if np.any(n_arr < 0) or np.any(n_arr > self.max_tokens):
            raise UserError(f"prefill curve ({self.source}) covers 0 .. {self.max_tokens} tokens, "
                            f"asked for {np.max(n_arr):.0f}")
        x = np.arange(len(self.step_end_s) + 1) * self.chunk
        y = np.r_[0.0, np.asarray(self.step_end_s, dtype=float)]
        out = np.interp(n_arr, x, y)
        return float(out) if out.ndim == 0 else out

    def time(self, n: int, cached: int = 0) -> float:
        """TTFT compute of a prompt of n tokens whose first ``cached`` tokens are loaded: the
        steps from ``cached`` on, then the LM head."""
        if not 0 <= cached < n:
            raise UserError(f"cached={cached} must be in [0, n={n})")
        return self.steps_s(n) - self.steps_s(cached) + self.head_s

    def rate(self, n) -> float:
        """R(n) = n / T(n), tokens per second (steps only)."""
        return float(n) / self.steps_s(n)


@dataclass
class CostModel:
    s: float                         # bytes per token
    chunk: int
    value_bytes: int                 # bytes of one chunk value (= s * chunk)
    bandwidth: tuple                 # B_r per rank, bytes/s
    t0: float                        # seconds
    prefill: PrefillCurve
    sources: dict = field(default_factory=dict)   # term -> label ("model: ...", "measured: ...")

    def __post_init__(self):
        if not self.bandwidth or any(not (b > 0) for b in self.bandwidth):
            raise UserError(f"bandwidth per rank must be > 0 bytes/s, got {list(self.bandwidth)}")
        if not self.t0 >= 0:
            raise UserError(f"T0={self.t0}: must be >= 0 s")
        if self.prefill.chunk != self.chunk:
            raise UserError(f"prefill curve chunk {self.prefill.chunk} != tier chunk {self.chunk}")

    @property
    def ranks(self) -> int:
        return len(self.bandwidth)

    @property
    def total_bandwidth(self) -> float:
        return float(sum(self.bandwidth))

    def observe(self, rank: int, nbytes: int, seconds: float, weight: float = 0.2) -> None:
        """Track rank's bandwidth online: blend in what a fetch of ``nbytes`` that took
        ``seconds`` achieved beyond T0 (fetches shorter than two T0 carry no bandwidth signal)."""
        if nbytes >= self.value_bytes and seconds > 2 * self.t0 and seconds > 0:
            b = list(self.bandwidth)
            b[rank] = (1 - weight) * b[rank] + weight * nbytes / (seconds - self.t0)
            self.bandwidth = tuple(b)

    def op_s(self, rank: int, nbytes: int) -> float:
        """Predicted seconds of one server operation moving ``nbytes`` on rank."""
        return self.t0 + nbytes / self.bandwidth[rank]

    def rank_bytes(self, chunks: int) -> list[int]:
        """Bytes rank r loads for a hit of ``chunks`` chunks (its owned ones)."""
        return [len(owned(r, self.ranks, chunks)) * self.value_bytes for r in range(self.ranks)]

    def transfer_s(self, chunks: int, backlog_s=None) -> float:
        back = backlog_s or [0.0] * self.ranks
        return max(b + x / bw for b, x, bw in zip(back, self.rank_bytes(chunks), self.bandwidth))

    def load_s(self, chunks: int, backlog_s=None) -> float:
        """T0 + the slowest rank's transfer, after ``backlog_s[r]`` seconds of work already
        queued on rank r's server."""
        return self.t0 + self.transfer_s(chunks, backlog_s)

    def recompute_s(self, chunks: int) -> float:
        """Prefill time a hit of ``chunks`` chunks saves."""
        return self.prefill.steps_s(chunks * self.chunk)

    def choose(self, chunks: int, backlog_s=None) -> str:
        if chunks <= 0:
            return "recompute"
        return "load" if self.recompute_s(chunks) > self.load_s(chunks, backlog_s) else "recompute"

    def b_star(self, n) -> float:
        """Break-even bandwidth ignoring T0: s * R(n)."""
        return self.s * self.prefill.rate(n)

    def breakeven_bandwidth(self, n) -> float:
        """Aggregate bandwidth a hit of n tokens needs to pay off with T0: n s / (T(n) - T0)."""
        slack = self.prefill.steps_s(n) - self.t0
        return math.inf if slack <= 0 else n * self.s / slack

    def min_tokens(self) -> float:
        """Below R * T0 tokens recompute wins at any bandwidth (paper 4)."""
        xs = np.arange(1, len(self.prefill.step_end_s) + 1) * self.chunk
        ok = self.prefill.steps_s(xs) > self.t0
        return float(xs[np.argmax(ok)]) if ok.any() else math.inf

    def rho(self, arrival_rate: float, mean_hit_tokens: float) -> float:
        """Utilisation of the tier: lambda * n * s / B (B the aggregate over ranks)."""
        return arrival_rate * mean_hit_tokens * self.s / self.total_bandwidth

    def describe(self) -> dict:
        n = self.prefill.max_tokens
        return {"s_bytes_per_token": self.s, "chunk": self.chunk, "chunk_value_bytes": self.value_bytes,
                "ranks": self.ranks, "bandwidth_Bps_per_rank": [float(b) for b in self.bandwidth],
                "bandwidth_Bps_total": self.total_bandwidth, "t0_s": self.t0,
                "prefill_rate_tokens_per_s_at_max": self.prefill.rate(n),
                "b_star_Bps_at_max": self.b_star(n), "min_hit_tokens": self.min_tokens(),
                "sources": dict(self.sources)}


def fit_t0(samples) -> float:
    """T0 from measured loads of one configuration: median of (measured - transfer model).
    ``samples``: [(measured_s, modelled_transfer_s)]."""
    d = [m - t for m, t in samples]
    if not d:
        raise UserError("T0 fit: no samples")
    return max(0.0, float(np.median(d)))
