"""The prefix KV tier on the node runtime: ``mcf run ... --kv-store URL`` on every backend.

Before the run (the PS side, in the ``mcf`` process, as on a board): the prompt's full chunks
are keyed (``mcf.sw.kvtier.keys``: model, weights, group size, chunk, KV format), each rank r =
node r looks up the chunks it owns (c mod W) on its own server, the cluster takes the minimum
(the longest cached prefix) and the ranks load their owned chunks of it in parallel within a
deadline (``AsyncLoader``; a rank that fails or is late shortens the prefix, counted).  The
runtime then plans the prefill with the loaded chunks on their owners only (MARS's converged
schedule), lowers it with ``prefix`` = the loaded chunks (``mcf.sw.mars.lower``: no compute for
them, the owner sets their directory entries VALID) and, before starting the nodes, writes every
loaded chunk through the owner's DDR window (the DMA-memory object) into the pool slot where the
prefill's KV writer would have written it (``Lowered.loaded_kv``).

After the prefill each owner reads the chunks the run computed (full chunks only, never the
prompt's last token) back from its DDR window and stores them on its server, so the next run of
a prompt with this prefix loads them.  Nothing here raises on a tier failure: what could not be
looked up, loaded or stored is recomputed next time, and the report counts it.
"""
from __future__ import annotations

import time

from mcf.sw.errors import UserError
from mcf.sw.kvtier.costmodel import chunk_value_bytes
from mcf.sw.kvtier.keys import chunk_keys, full_chunks, model_identity, weights_fingerprint
from mcf.sw.kvtier.loader import DEFAULT_DEADLINE_S, AsyncLoader
from mcf.sw.kvtier.resp import RankClient, rank_urls
from mcf.sw.kvtier.sink import RankMemorySink
from mcf.sw.kvtier.store import ShardedStore

IO_TIMEOUT_S = 1.0


def parse_store(text: str, ranks: int) -> list[str]:
    """``--kv-store``: a URL template with ``{rank}`` or ``ranks`` comma-separated URLs."""
    if not isinstance(text, str) or not text.strip():
        raise UserError("--kv-store: a redis:// URL template with {rank} or one URL per node, comma-separated")
    text = text.strip()
    urls = text if "{rank}" in text else [u.strip() for u in text.split(",")]
    try:
        return rank_urls(urls, ranks)
    except UserError as e:
        raise UserError(f"--kv-store: {e}") from None


class PrefixTier:
    """One run's view of the tier: ``load`` before the plan, ``store`` after the prefill."""

    def __init__(self, urls: list[str], model, weights: dict, chunk: int, group: int, *,
                 io_timeout_s: float = IO_TIMEOUT_S, deadline_s: float = DEFAULT_DEADLINE_S):
        self.urls = list(urls)
        self.chunk = int(chunk)
        self.identity = model_identity(model, weights_fingerprint(weights), self.chunk, group)
        self.value_bytes = chunk_value_bytes(model, self.chunk)
        clients = [RankClient(u, timeout_s=io_timeout_s, connect_timeout_s=io_timeout_s) for u in self.urls]
        self.store = ShardedStore(clients, self.identity, self.value_bytes)
        self.loader = AsyncLoader(self.store, deadline_s=deadline_s)
        self.stats: dict = {"chunk": self.chunk, "ranks": len(self.urls), "chunk_value_bytes": self.value_bytes}

    @property
    def ranks(self) -> int:
        return len(self.urls)

    def keys(self, prompt) -> list[bytes]:
        return chunk_keys(prompt, self.identity)

    def load(self, prompt) -> tuple[int, dict]:
        """-> (prefix chunks, {chunk: value}) for chunks 0 .. prefix-1 (bounded by the deadline)."""
        keys = self.keys(prompt)
        t0 = time.perf_counter()
        look = self.store.lookup(keys)
        sink = RankMemorySink(self.ranks)
        res = self.loader.load(keys, look.prefix, sink)
        values = {c: v for m in sink.memory for c, v in m.items() if c < res.prefix}
        self.stats.update({
            "full_chunks": len(keys), "lookup_prefix_chunks": look.prefix, "lookup_status": look.status,
            "prefix_chunks": res.prefix, "prefix_tokens": res.prefix * self.chunk, "load_status": res.status,
            "loaded_bytes": sum(len(v) for v in values.values()), "load_timed_out": res.timed_out,
            "load_seconds": time.perf_counter() - t0})
        return res.prefix, values

    def save(self, prompt, values: dict) -> None:
        """Each owner stores the chunk values the run computed (``values``: chunk -> bytes)."""
        status = self.store.store(self.keys(prompt), values) if values else ["ok"] * self.ranks
        self.stats.update({"stored_chunks": len(values), "store_status": status,
                           "tier_counters": dict(self.store.counters), "loader_counters": dict(self.loader.counters)})

    def close(self) -> None:
        self.loader.close()
        self.store.close()


def stored_chunks(n_tokens: int, chunk: int, prefix: int) -> range:
    """Chunks a run computes and the tier may keep: the full chunks after the loaded prefix."""
    return range(prefix, full_chunks(n_tokens, chunk))
