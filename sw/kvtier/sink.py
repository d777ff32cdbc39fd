"""Where a loaded chunk goes: a ``KVSink``.

``place(chunk_index, rank, value_bytes)`` receives one chunk value (``spec/kv.py``: the chunk's
block layers 0 .. L-1) loaded by its owner ``rank``; calls may come in any order and from the
ranks' loader threads.  ``commit(prefix_chunks)`` is called once, after every placement, with the
number of leading chunks the request will use: prefill starts at token ``prefix_chunks * chunk``.
Placements of chunks >= prefix_chunks are discarded (that KV is recomputed).

Implemented today:

* ``GoldenCacheSink`` fills a golden-model ``FixedKVCache`` (``mcf.sw.golden``), so a prefill
  that continues from it can be compared bit for bit with a cold one.
* ``RankMemorySink`` keeps the bytes per rank, as each node's DDR would after the load: chunk c
  on rank c mod W only -- the owner-only layout MARS leaves after prefill.

The node runtime (``mcf.sw.runtime.kvprefix``, ``mcf run --kv-store``) loads into a
``RankMemorySink`` and then writes each value through its owner's DDR window into the pool slots
the lowering gives block c (``Lowered.loaded_kv``), and lowers the prefill to start at the first
missing chunk.
"""
from __future__ import annotations

import threading
from typing import Protocol

import numpy as np

from mcf.spec import kv


class KVSink(Protocol):
    def place(self, chunk_index: int, rank: int, value: bytes) -> None: ...

    def commit(self, prefix_chunks: int) -> None: ...


def chunk_values_from_cache(cache, chunk: int, count: int) -> dict:
    """Chunk values of chunks 0 .. count-1 from a golden cache (per layer KV4 triples
    [S, H_kv, ...]): what a cold prefill stores."""
    if count * chunk > cache.length:
        raise ValueError(f"{count} chunks of {chunk} tokens, the cache holds {cache.length} tokens")
    out = {}
    for c in range(count):
        sl = slice(c * chunk, (c + 1) * chunk)
        ks = [tuple(a[sl] for a in k) for k in cache.k]
        vs = [tuple(a[sl] for a in v) for v in cache.v]
        out[c] = kv.pack_chunk_value(ks, vs)
    return out


class GoldenCacheSink:
    """Builds a fresh ``FixedKVCache`` (length 0) from loaded chunk values."""

    def __init__(self, cache, cfg, chunk: int):
        if cache.length or cache.k:
            raise ValueError("GoldenCacheSink needs an empty cache")
        self.cache, self.cfg, self.chunk = cache, cfg, chunk
        self._chunks: dict = {}
        self._lock = threading.Lock()

    def place(self, chunk_index: int, rank: int, value: bytes) -> None:
        c = self.cfg
        layers = kv.unpack_chunk_value(value, self.chunk, c.head_dim, c.num_kv_heads, c.num_layers)
        with self._lock:
            self._chunks[chunk_index] = layers

    def commit(self, prefix_chunks: int) -> None:
        with self._lock:
            use = [self._chunks[i] for i in range(prefix_chunks)]
        if not use:
            return
        for li in range(self.cfg.num_layers):
            k = tuple(np.concatenate([ch[li][0][j] for ch in use]) for j in range(3))
            v = tuple(np.concatenate([ch[li][1][j] for ch in use]) for j in range(3))
            self.cache.k.append(k)
            self.cache.v.append(v)
        self.cache.length = prefix_chunks * self.chunk


class RankMemorySink:
    """Per rank: chunk -> bytes, as the rank's DDR holds them after the load."""

    def __init__(self, ranks: int):
        self.memory = [dict() for _ in range(ranks)]
        self.prefix = None
        self._lock = threading.Lock()

    def place(self, chunk_index: int, rank: int, value: bytes) -> None:
        with self._lock:
            self.memory[rank][chunk_index] = bytes(value)

    def commit(self, prefix_chunks: int) -> None:
        with self._lock:
            self.prefix = prefix_chunks
            for m in self.memory:
                for c in [c for c in m if c >= prefix_chunks]:
                    del m[c]
