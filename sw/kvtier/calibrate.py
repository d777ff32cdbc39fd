"""Measure B per rank and fit T0 against live servers (the cost model's measured terms).

A load is timed the way each rank sees it: rank r's fetch of its owned chunks (L1 empty, one
MGET), and the hit's load time is the slowest rank's.  On the cluster every rank is its own
board, so the ranks' fetches run on separate CPUs; here they are timed one after another so
that W ranks on a 2-core machine do not measure each other's CPU contention.
"""
from __future__ import annotations

import os
import time

import numpy as np

from mcf.sw.errors import UserError

from .costmodel import fit_t0
from .shard import owned

CALIB_PREFIX = b"mcfkv:calib:"


def filler(key: bytes, size: int, _cache={}) -> bytes:
    """A value of ``size`` bytes that starts with its key (so a replay can check it got the
    right chunk) followed by random bytes (drawn once per size)."""
    body = _cache.get(size)
    if body is None:
        body = _cache[size] = os.urandom(size)
    if size < len(key):
        raise UserError(f"chunk value of {size} bytes is shorter than a key")
    return key + body[len(key):]


def measure_bandwidth(store, chunks: int = 8, repeats: int = 5) -> list[float]:
    """B_r in bytes/s: median time of an MGET of ``chunks`` chunk values on rank r's server."""
    out = []
    for r, c in enumerate(store.clients):
        keys = [CALIB_PREFIX + f"{r}:{i}".encode() for i in range(chunks)]
        c.set_many([(k, filler(k, store.value_bytes)) for k in keys])
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            got = c.get_many(keys)
            ts.append(time.perf_counter() - t0)
            if any(v is None or len(v) != store.value_bytes for v in got):
                raise UserError(f"rank {r}: calibration values did not come back (server memory too small?)")
        c.delete(keys)
        out.append(chunks * store.value_bytes / float(np.median(ts)))
    return out


def time_load(store, keys: list, count: int) -> float:
    """Seconds of a hit of ``count`` chunks: the slowest rank's fetch (L1 cleared first)."""
    worst = 0.0
    for r in range(store.ranks):
        for c in owned(r, store.ranks, count):
            store.l1[r].discard(keys[c])
        f = store.fetch_rank(r, keys, count)
        if f.hits < count and f.status != "ok":
            raise UserError(f"rank {r}: load failed during calibration ({f.status})")
        worst = max(worst, f.seconds)
    return worst


def load_samples(store, model_transfer, count: int, repeats: int = 5, tag: bytes = b"") -> list:
    """[(measured_s, modelled_transfer_s)] for ``repeats`` hits of ``count`` chunks stored under
    calibration keys (removed afterwards)."""
    keys = [CALIB_PREFIX + tag + f"load:{c}".encode() for c in range(count)]
    store.store(keys, {c: filler(keys[c], store.value_bytes) for c in range(count)})
    try:
        return [(time_load(store, keys, count), model_transfer(count)) for _ in range(repeats)]
    finally:
        for r, cl in enumerate(store.clients):
            cl.delete([keys[c] for c in owned(r, store.ranks, count)])
            for c in owned(r, store.ranks, count):
                store.l1[r].discard(keys[c])


def fit_on(store, model_transfer, count: int, repeats: int = 5) -> tuple[float, list]:
    """T0 fitted on one configuration (this store's ranks, ``count`` chunks)."""
    samples = load_samples(store, model_transfer, count, repeats, b"fit:")
    return fit_t0(samples), samples
