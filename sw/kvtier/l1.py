"""L1: a bounded in-memory LRU of chunk values on each rank's PS (in front of its server)."""
from __future__ import annotations

import threading
from collections import OrderedDict

from mcf.sw.errors import UserError


class LRU:
    """Byte-bounded least-recently-used map key -> bytes.  A value larger than the capacity is
    not kept.  Thread-safe; counts hits, misses, insertions and evictions."""

    def __init__(self, capacity_bytes: int):
        if isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, int) or capacity_bytes < 0:
            raise UserError(f"L1 capacity {capacity_bytes!r}: must be an integer >= 0 bytes")
        self.capacity = capacity_bytes
        self.size = 0
        self._d: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = self.inserts = self.evictions = 0

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._d

    def get(self, key):
        with self._lock:
            v = self._d.get(key)
            if v is None:
                self.misses += 1
                return None
            self._d.move_to_end(key)
            self.hits += 1
            return v

    def put(self, key, value: bytes) -> None:
        n = len(value)
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self.size -= len(old)
            if n > self.capacity:
                return
            while self.size + n > self.capacity:
                _, ev = self._d.popitem(last=False)
                self.size -= len(ev)
                self.evictions += 1
            self._d[key] = value
            self.size += n
            self.inserts += 1

    def discard(self, key) -> None:
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self.size -= len(old)

    def stats(self) -> dict:
        with self._lock:
            return {"capacity_bytes": self.capacity, "bytes": self.size, "entries": len(self._d),
                    "hits": self.hits, "misses": self.misses, "inserts": self.inserts,
                    "evictions": self.evictions}
