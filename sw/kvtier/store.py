"""The sharded store: rank r keeps the chunks it owns (c mod W = r) in its L1 and on its own
server, looks them up and loads them.  Nothing here raises on a tier failure: a rank that times
out or cannot reach its server reports no hits (a_r = its first owned chunk), and the failure is
counted; the caller recomputes what was not found.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .keys import TierIdentity, chunk_keys, full_chunks
from .l1 import LRU
from .resp import RankClient, TierError, TierTimeout
from .shard import cluster_prefix, contiguous_hits, owned


@dataclass
class Lookup:
    count: int                       # chunks the prompt could be served (full chunks)
    hits: list                       # a_r per rank
    status: list                     # per rank: ok | timeout | unavailable | down
    seconds: float

    @property
    def prefix(self) -> int:
        return cluster_prefix(self.hits)


@dataclass
class RankFetch:
    rank: int
    values: dict = field(default_factory=dict)   # chunk -> bytes, rank's owned chunks < a_r
    hits: int = 0                                # a_r of what arrived
    status: str = "ok"
    l1_chunks: int = 0
    l2_chunks: int = 0
    bytes: int = 0
    seconds: float = 0.0
    from_l1: set = field(default_factory=set)     # chunks served by L1


class ShardedStore:
    """``cooldown_s``: after a timeout or an unreachable server, rank r skips its server (status
    ``down``, counted) for that long by ``clock`` -- a stopped server then costs one timeout, not
    one per request.  ``clock`` defaults to ``time.monotonic`` (the replay passes its virtual
    clock)."""

    def __init__(self, clients: list[RankClient], identity: TierIdentity, value_bytes: int,
                 l1_bytes: int = 0, cooldown_s: float = 1.0, clock=time.monotonic):
        self.clients = list(clients)
        self.cooldown_s = float(cooldown_s)
        self.clock = clock
        self.down_until = [float("-inf")] * len(self.clients)
        self.identity = identity
        self.chunk = identity.chunk
        self.value_bytes = int(value_bytes)
        self.l1 = [LRU(int(l1_bytes)) for _ in self.clients]
        self.counters = Counter()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=len(self.clients), thread_name_prefix="kvtier-rank")

    @property
    def ranks(self) -> int:
        return len(self.clients)

    def count(self, **kw) -> None:
        with self._lock:
            self.counters.update(kw)

    def _server_ok(self, r: int) -> bool:
        if self.clock() < self.down_until[r]:
            self.count(skipped_down=1)
            return False
        return True

    def _failed(self, r: int) -> None:
        self.down_until[r] = self.clock() + self.cooldown_s

    def keys(self, tokens) -> list[bytes]:
        return chunk_keys(tokens, self.identity)

    def full_chunks(self, n_tokens: int) -> int:
        return full_chunks(n_tokens, self.chunk)

    # --- lookup --------------------------------------------------------------------------------
    def lookup_rank(self, r: int, keys: list) -> tuple[int, str]:
        """(a_r, status): rank r checks its owned chunks in L1, the rest with one pipelined EXISTS."""
        count = len(keys)
        mine = list(owned(r, self.ranks, count))
        present = [keys[c] in self.l1[r] for c in mine]
        ask = [i for i, ok in enumerate(present) if not ok]
        status = "ok"
        if ask and not self._server_ok(r):
            status, present = "down", [False] * len(mine)
        elif ask:
            try:
                for i, ok in zip(ask, self.clients[r].exists_many([keys[mine[i]] for i in ask])):
                    present[i] = ok
            except TierTimeout:
                status, present = "timeout", [False] * len(mine)
                self._failed(r)
            except TierError:
                status, present = "unavailable", [False] * len(mine)
                self._failed(r)
        if status != "ok":
            self.count(**{f"lookup_{status}": 1})
        return contiguous_hits(r, self.ranks, count, present), status

    def lookup(self, keys: list) -> Lookup:
        """Every rank in parallel; the cluster prefix is the minimum of their a_r."""
        t0 = time.perf_counter()
        res = list(self._pool.map(lambda r: self.lookup_rank(r, keys), range(self.ranks)))
        return Lookup(len(keys), [a for a, _ in res], [s for _, s in res], time.perf_counter() - t0)

    # --- load ----------------------------------------------------------------------------------
    def fetch_rank(self, r: int, keys: list, count: int) -> RankFetch:
        """Rank r's owned chunks among 0 .. count-1, from L1 then one MGET, stopping at the first
        one that is missing or has the wrong size (counted ``bad_value``)."""
        t0 = time.perf_counter()
        mine = list(owned(r, self.ranks, count))
        out = RankFetch(r)
        vals = [self.l1[r].get(keys[c]) for c in mine]
        from_l1 = [v is not None for v in vals]
        ask = [i for i, v in enumerate(vals) if v is None]
        if ask and not self._server_ok(r):
            out.status = "down"
        elif ask:
            try:
                got = self.clients[r].get_many([keys[mine[i]] for i in ask])
                for i, v in zip(ask, got):
                    vals[i] = v
            except TierTimeout:
                out.status = "timeout"
                self._failed(r)
            except TierError:
                out.status = "unavailable"
                self._failed(r)
        if out.status != "ok":
            self.count(**{f"load_{out.status}": 1})
            vals = [v if l1 else None for v, l1 in zip(vals, from_l1)]
        present = []
        for i, c in enumerate(mine):
            v = vals[i]
            ok = v is not None and len(v) == self.value_bytes
            if not ok:
                # the first gap ends the rank's contiguous run: a key evicted or never stored
                # since the lookup (a GET of it answers nil at once), or a value of the wrong size
                if out.status == "ok":
                    out.status = "missing" if v is None else "bad_value"
                    self.count(**{"load_missing" if v is None else "bad_value": 1})
                break
            out.values[c] = v
            out.bytes += len(v)
            if from_l1[i]:
                out.l1_chunks += 1
                out.from_l1.add(c)
            else:
                out.l2_chunks += 1
                self.l1[r].put(keys[c], v)
            present.append(True)
        present += [False] * (len(mine) - len(present))
        out.hits = contiguous_hits(r, self.ranks, count, present)
        out.seconds = time.perf_counter() - t0
        return out

    # --- store ---------------------------------------------------------------------------------
    def store_rank(self, r: int, items: list) -> str:
        """Rank r stores (key, value) pairs it owns: L1 and its server.  -> status."""
        for k, v in items:
            self.l1[r].put(k, v)
        if not self._server_ok(r):
            return "down"
        try:
            n = self.clients[r].set_many(items)
            self.count(stored_chunks=len(items), stored_bytes=n)
            return "ok"
        except TierTimeout:
            self.count(store_timeout=1)
            self._failed(r)
            return "timeout"
        except TierError:
            self.count(store_unavailable=1)
            self._failed(r)
            return "unavailable"

    def store(self, keys: list, values: dict) -> list[str]:
        """``values``: chunk -> bytes (any subset of 0 .. len(keys)-1); each owner stores its own."""
        for c, v in values.items():
            if len(v) != self.value_bytes:
                raise ValueError(f"chunk {c}: value of {len(v)} bytes, the tier stores {self.value_bytes}")
        per = [[(keys[c], values[c]) for c in sorted(values) if c % self.ranks == r] for r in range(self.ranks)]
        return list(self._pool.map(lambda r: self.store_rank(r, per[r]) if per[r] else "ok", range(self.ranks)))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for c in self.clients:
            c.close()
