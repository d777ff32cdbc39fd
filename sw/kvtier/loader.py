"""Asynchronous loads: a request's chunks are fetched by their owner ranks in the background,
placed into a ``KVSink``, and the request learns its usable prefix -- within a deadline, always.

``AsyncLoader(store).submit(keys, count, sink, deadline_s)`` returns at once with a
``LoadHandle``; each rank's worker (one thread per rank, its own connection) fetches the rank's
owned chunks among 0 .. count-1 and places them.  ``handle.result()`` waits for the ranks'
completions, but never past the deadline: a rank whose completion has not arrived by then
(a lost completion, a server that stopped answering mid-read) counts as having loaded nothing,
and the prefix is the minimum over ranks of what arrived contiguously (the same rule as lookup,
``shard.contiguous_hits``).  Then the sink is fenced (a late worker's placement is dropped and
counted, so it can never overwrite KV that the prefill now computes) and committed.

A slow load delays only its own request: the engine keeps running the others and asks
``handle.done()`` / ``handle.result(timeout)`` when it wants.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from mcf.sw.errors import UserError

from .shard import cluster_prefix, owned
from .store import RankFetch, ShardedStore

DEFAULT_DEADLINE_S = 2.0


@dataclass
class LoadResult:
    count: int                       # chunks asked for
    prefix: int                      # chunks the request uses (prefill starts at prefix * chunk)
    hits: list                       # a_r per rank (what arrived contiguously)
    status: list                     # per rank: ok | missing | bad_value | timeout | unavailable |
                                     # error | deadline (no completion in time)
    l1_chunks: int = 0
    l2_chunks: int = 0
    bytes: int = 0
    seconds: float = 0.0
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.prefix == self.count


class _Fence:
    """Passes placements to the sink until closed; then drops them (counted)."""

    def __init__(self, sink):
        self.sink = sink
        self.lock = threading.Lock()
        self.open = True
        self.dropped = 0

    def place(self, c, r, v) -> bool:
        with self.lock:
            if not self.open:
                self.dropped += 1
                return False
            self.sink.place(c, r, v)
            return True

    def close(self) -> None:
        with self.lock:
            self.open = False


class LoadHandle:
    def __init__(self, loader: "AsyncLoader", count: int, sink, deadline_s: float):
        self.loader, self.count = loader, count
        self.t_start = time.perf_counter()
        self.deadline = time.monotonic() + deadline_s
        self.fence = _Fence(sink)
        self.sink = sink
        self._cond = threading.Condition()
        self._done: dict = {}            # rank -> RankFetch
        self._result: LoadResult | None = None
        self._final = threading.Lock()

    def _complete(self, fetch) -> None:
        with self._cond:
            self._done[fetch.rank] = fetch
            self._cond.notify_all()

    def done(self) -> bool:
        with self._cond:
            return self._result is not None or len(self._done) == self.loader.ranks

    def result(self, timeout: float | None = None) -> LoadResult:
        """Wait for the ranks' completions, at most until ``timeout`` (if given) and never past
        the deadline.  Returns None if ``timeout`` expired before the deadline and some rank is
        still out; otherwise the final result (computed once)."""
        with self._cond:
            if self._result is not None:
                return self._result
            limit = self.deadline if timeout is None else min(self.deadline, time.monotonic() + timeout)
            W = self.loader.ranks
            self._cond.wait_for(lambda: len(self._done) == W, timeout=max(0.0, limit - time.monotonic()))
            if len(self._done) < W and time.monotonic() < self.deadline:
                return None
        with self._final:
            if self._result is None:
                self._finalize()
            return self._result

    def _finalize(self) -> None:
        self.fence.close()                    # from here on no worker writes into the sink
        W = self.loader.ranks
        with self._cond:
            done = dict(self._done)
        hits, status = [], []
        res = LoadResult(self.count, 0, hits, status)
        for r in range(W):
            f = done.get(r)
            if f is None:
                first = owned(r, W, self.count)
                hits.append(first[0] if len(first) else self.count)
                status.append("deadline")
                res.timed_out = True
                continue
            hits.append(f.hits)
            status.append(f.status)
            res.l1_chunks += f.l1_chunks
            res.l2_chunks += f.l2_chunks
            res.bytes += f.bytes
        res.prefix = cluster_prefix(hits) if hits else 0
        self.sink.commit(res.prefix)
        res.seconds = time.perf_counter() - self.t_start
        self.loader._finished(res)
        with self._cond:
            self._result = res

    @property
    def late_placements(self) -> int:
        return self.fence.dropped


@dataclass
class Faults:
    """Test hooks reproducing the paper's client bugs (section 5.4)."""
    drop_completion: set = field(default_factory=set)   # ranks whose completion is lost


class AsyncLoader:
    def __init__(self, store: ShardedStore, deadline_s: float = DEFAULT_DEADLINE_S):
        if not deadline_s > 0:
            raise UserError(f"load deadline {deadline_s}: must be > 0 s")
        self.store = store
        self.deadline_s = float(deadline_s)
        self.faults = Faults()
        self._pools = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"kvtier-load{r}")
                       for r in range(store.ranks)]
        self._lock = threading.Lock()
        self.counters = {"loads": 0, "timeouts": 0, "deadline_misses": 0, "partial": 0}
        self.last_error = ""

    @property
    def ranks(self) -> int:
        return self.store.ranks

    def submit(self, keys: list, count: int, sink, deadline_s: float | None = None) -> LoadHandle:
        if not 0 <= count <= len(keys):
            raise UserError(f"load of {count} chunks with {len(keys)} keys")
        h = LoadHandle(self, count, sink, self.deadline_s if deadline_s is None else deadline_s)
        for r in range(self.ranks):
            self._pools[r].submit(self._work, h, r, keys)
        return h

    def _work(self, h: LoadHandle, r: int, keys: list) -> None:
        try:
            f = self.store.fetch_rank(r, keys, h.count)
        except Exception as e:     # noqa: BLE001 -- a worker must never lose its completion
            first = owned(r, self.ranks, h.count)
            f = RankFetch(r, hits=first[0] if len(first) else h.count, status="error")
            self.store.count(load_error=1)
            self.last_error = f"rank {r}: {type(e).__name__}: {e}"
        for c in sorted(f.values):
            try:
                if not h.fence.place(c, r, f.values[c]):
                    break
            except ValueError:     # SpecError included: bytes of the right size that do not decode
                self.store.count(bad_value=1)
                f.hits, f.status = min(f.hits, c), "bad_value"
                break
        if r in self.faults.drop_completion:
            return                             # the lost-completion bug: nobody is told
        h._complete(f)

    def _finished(self, res: LoadResult) -> None:
        with self._lock:
            self.counters["loads"] += 1
            self.counters["timeouts"] += int(res.timed_out)
            self.counters["deadline_misses"] += res.status.count("deadline")
            self.counters["partial"] += int(res.prefix < res.count)

    def load(self, keys: list, count: int, sink, deadline_s: float | None = None) -> LoadResult:
        """Synchronous use: submit and wait (bounded by the deadline)."""
        return self.submit(keys, count, sink, deadline_s).result()

    def close(self) -> None:
        """Waits for the workers (each bounded by the client's socket timeout)."""
        for p in self._pools:
            p.shutdown(wait=True)
