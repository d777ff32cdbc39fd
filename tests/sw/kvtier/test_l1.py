"""L1: byte-bounded LRU."""
import threading

import pytest

from mcf.sw.errors import UserError
from mcf.sw.kvtier.l1 import LRU


def test_evicts_least_recently_used_by_bytes():
    l1 = LRU(10)
    l1.put("a", b"1234")
    l1.put("b", b"1234")
    assert l1.get("a") == b"1234"          # a is now the most recent
    l1.put("c", b"1234")                   # 12 > 10: evicts b
    assert "b" not in l1 and "a" in l1 and "c" in l1 and l1.size == 8
    l1.put("big", b"x" * 11)               # larger than the whole cache: not kept, nothing evicted
    assert "big" not in l1 and len(l1) == 2
    l1.put("a", b"123456")                 # replace: size follows
    assert l1.size == 10 and l1.get("zz") is None
    s = l1.stats()
    assert s["evictions"] == 1 and s["hits"] == 1 and s["misses"] == 1 and s["bytes"] == 10


def test_zero_capacity_keeps_nothing_and_bad_capacity_refused():
    l1 = LRU(0)
    l1.put("a", b"1")
    assert len(l1) == 0
    with pytest.raises(UserError):
        LRU(-1)


def test_threads_keep_the_bound():
    l1 = LRU(1000)

    def work(i):
        for j in range(300):
            l1.put((i, j), bytes(37))
            l1.get((i, j - 1))
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    assert l1.size <= 1000 and l1.size == 37 * len(l1)
