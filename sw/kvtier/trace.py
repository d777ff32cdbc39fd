"""Request streams for ``mcf kv replay``: a trace file, or a synthetic stream with shared prefixes.

Trace file format (JSON Lines; one request per line; blank lines and lines starting with ``#``
are ignored)::

    {"t": 0.0,  "tokens": [151644, 8948, 198, ...]}
    {"t": 1.25, "segments": [[7, 2048], [90001, 312]]}

``t`` is the send offset in seconds from the start of the replay (>= 0; requests are replayed in
order of ``t``, ties in file order).  A prompt is either ``tokens`` (token ids in [0, vocab)) or
``segments``: a list of ``[seed, length]``; each segment expands to ``length`` token ids drawn by
NumPy's ``default_rng(seed).integers(0, vocab, length)``, so a shared system prompt is written as
the same first segment on many lines.  An optional ``"id"`` (string or integer) names the request
in the output; the default is its line number.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass

import numpy as np

from mcf.sw.errors import UserError

MAX_PROMPT_TOKENS = 1 << 20


@dataclass(frozen=True)
class Request:
    id: str
    t: float
    tokens: np.ndarray          # uint32 token ids

    @property
    def n(self) -> int:
        return int(self.tokens.size)


def segment_tokens(seed: int, length: int, vocab: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, length).astype(np.uint32)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def parse_request(obj, vocab: int, where: str) -> Request:
    if not isinstance(obj, dict):
        raise UserError(f"{where}: expected a JSON object")
    unknown = set(obj) - {"t", "tokens", "segments", "id"}
    if unknown:
        raise UserError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    t = obj.get("t")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
        raise UserError(f"{where}: t={t!r} must be a finite number of seconds >= 0")
    if ("tokens" in obj) == ("segments" in obj):
        raise UserError(f"{where}: give exactly one of tokens, segments")
    if "tokens" in obj:
        toks = obj["tokens"]
        if not isinstance(toks, list) or not toks or not all(_is_int(x) and 0 <= x < vocab for x in toks):
            raise UserError(f"{where}: tokens must be a non-empty list of integers in [0, {vocab})")
        tokens = np.asarray(toks, dtype=np.uint32)
    else:
        segs = obj["segments"]
        if not isinstance(segs, list) or not segs:
            raise UserError(f"{where}: segments must be a non-empty list of [seed, length]")
        parts = []
        for s in segs:
            if (not isinstance(s, list) or len(s) != 2 or not all(_is_int(x) for x in s)
                    or s[0] < 0 or s[1] < 1):
                raise UserError(f"{where}: segment {s!r} must be [seed >= 0, length >= 1]")
            parts.append(s)
        if sum(s[1] for s in parts) > MAX_PROMPT_TOKENS:
            raise UserError(f"{where}: prompt longer than {MAX_PROMPT_TOKENS} tokens")
        tokens = np.concatenate([segment_tokens(s[0], s[1], vocab) for s in parts])
    if tokens.size > MAX_PROMPT_TOKENS:
        raise UserError(f"{where}: prompt longer than {MAX_PROMPT_TOKENS} tokens")
    rid = obj.get("id", where.rsplit(" ", 1)[-1])
    if not isinstance(rid, (str, int)) or isinstance(rid, bool):
        raise UserError(f"{where}: id must be a string or an integer")
    return Request(str(rid), float(t), tokens)


def read_trace(path: str, vocab: int) -> list[Request]:
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise UserError(f"trace {path}: {e.strerror or e}") from None
    out = []
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            obj = json.loads(s)
        except json.JSONDecodeError as e:
            raise UserError(f"trace {path} line {i}: not JSON ({e.msg})") from None
        out.append(parse_request(obj, vocab, f"trace {path} line {i}"))
    if not out:
        raise UserError(f"trace {path}: no requests")
    return sorted(out, key=lambda r: r.t)


def write_trace(path: str, lines: list[dict]) -> None:
    """Write request objects (the format above) atomically."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".trace-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "w") as f:
            for obj in lines:
                f.write(json.dumps(obj, separators=(",", ":")) + "\n")
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def synthetic_lines(n: int, *, rate: float, prefixes: int, prefix_tokens: tuple, suffix_tokens: tuple,
                    seed: int = 0) -> list[dict]:
    """n requests, Poisson arrivals at ``rate`` requests/s; each is one of ``prefixes`` shared
    prefixes (a system prompt or document, lengths uniform in ``prefix_tokens``) followed by its
    own suffix (uniform in ``suffix_tokens``).  The first request of a prefix misses; later ones
    can hit.  Returns trace lines (``segments`` form)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 400_000:
        raise UserError(f"synthetic N={n!r}: must be an integer in [1, 400000]")
    if not (rate > 0 and math.isfinite(rate)):
        raise UserError(f"rate={rate}: must be > 0 requests/s")
    if isinstance(prefixes, bool) or not isinstance(prefixes, int) or not 1 <= prefixes <= 100_000:
        raise UserError(f"prefixes={prefixes!r}: must be an integer in [1, 100000]")
    for name, (lo, hi) in (("prefix tokens", prefix_tokens), ("suffix tokens", suffix_tokens)):
        if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
            raise UserError(f"{name} {lo}..{hi}: need 1 <= low <= high")
    rng = np.random.default_rng(seed)
    plen = rng.integers(prefix_tokens[0], prefix_tokens[1] + 1, prefixes)
    t = np.cumsum(rng.exponential(1.0 / rate, n))
    t -= t[0]
    which = rng.integers(0, prefixes, n)
    slen = rng.integers(suffix_tokens[0], suffix_tokens[1] + 1, n)
    base = 1_000_000 * (seed + 1)
    return [{"id": i, "t": round(float(t[i]), 6),
             "segments": [[base + int(which[i]), int(plen[which[i]])], [base + 500_000 + i, int(slen[i])]]}
            for i in range(n)]


def synthetic(n: int, vocab: int, **kw) -> list[Request]:
    return [parse_request(obj, vocab, f"synthetic request {i}")
            for i, obj in enumerate(synthetic_lines(n, **kw))]


def _umask() -> int:
    """The process umask (mkstemp creates 0600; a written output gets the usual mode)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
