"""Asynchronous loads: placement by owner, and the paper's client failures -- each ends within
its bound in a fallback to recompute, counted."""
import time

import numpy as np
import pytest

from mcf.spec import kv
from mcf.sw.kvtier.keys import TierIdentity
from mcf.sw.kvtier.loader import AsyncLoader
from mcf.sw.kvtier.sink import RankMemorySink
from mcf.sw.kvtier.store import ShardedStore

CHUNK, D, H, L = 4, 16, 2, 2
VALUE = kv.chunk_value_bytes(CHUNK, D, H, L)


def value(c):
    rng = np.random.default_rng(c)
    mk = lambda: (rng.integers(-8, 8, (CHUNK, H, D)), rng.integers(0, 256, (CHUNK, H)),
                  rng.integers(-128, 128, (CHUNK, H)))
    return kv.pack_chunk_value([mk() for _ in range(L)], [mk() for _ in range(L)])


@pytest.fixture
def tier(servers, clients):
    made = []

    def build(ranks, chunks=9, timeout_s=0.3, deadline_s=1.0):
        srv = servers(ranks)
        st = ShardedStore(clients(srv.urls, timeout_s), TierIdentity("m", "w", 16, CHUNK), VALUE)
        keys = st.keys(np.arange(CHUNK * chunks + 1))
        st.store(keys, {c: value(c) for c in range(chunks)})
        ld = AsyncLoader(st, deadline_s=deadline_s)
        made.append((st, ld))
        return srv, st, ld, keys
    yield build
    for st, ld in made:
        ld.close()
        st.close()


def test_each_rank_places_its_owned_chunks(tier):
    srv, st, ld, keys = tier(3)
    sink = RankMemorySink(3)
    h = ld.submit(keys, 9, sink)
    res = h.result()
    assert res.prefix == 9 and res.status == ["ok"] * 3 and not res.timed_out
    assert res.l2_chunks == 9 and res.bytes == 9 * VALUE
    for r in range(3):
        assert sorted(sink.memory[r]) == [c for c in range(9) if c % 3 == r]
        assert all(sink.memory[r][c] == value(c) for c in sink.memory[r])


def test_lost_completion_falls_back_within_the_deadline(tier):
    srv, st, ld, keys = tier(3, deadline_s=0.4)
    ld.faults.drop_completion = {1}
    sink = RankMemorySink(3)
    t0 = time.monotonic()
    res = ld.submit(keys, 9, sink).result()
    assert 0.35 < time.monotonic() - t0 < 1.5
    assert res.timed_out and res.status[1] == "deadline" and res.prefix == 1   # chunk 1 is rank 1's
    assert ld.counters["deadline_misses"] == 1 and ld.counters["timeouts"] == 1
    assert sink.prefix == 1 and sum(len(m) for m in sink.memory) == 1        # only chunk 0 kept


def test_read_that_never_returns_falls_back_and_late_bytes_are_fenced(tier):
    srv, st, ld, keys = tier(3, timeout_s=1.0, deadline_s=0.3)
    srv.pause(2)                                   # rank 2's server stops answering mid-run
    sink = RankMemorySink(3)
    t0 = time.monotonic()
    h = ld.submit(keys, 9, sink)
    assert h.result(timeout=0.05) is None          # still out, deadline not reached: not blocking
    res = h.result()
    assert time.monotonic() - t0 < 0.8
    assert res.prefix == 2 and res.status[2] == "deadline"
    srv.resume(2)                                  # now its bytes arrive: too late
    deadline = time.monotonic() + 3
    while h.late_placements == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert h.late_placements >= 1
    assert all(c < 2 for m in sink.memory for c in m)


def test_socket_timeout_is_a_counted_timeout(tier):
    srv, st, ld, keys = tier(2, timeout_s=0.2, deadline_s=2.0)
    srv.pause(0)
    res = ld.submit(keys, 9, RankMemorySink(2)).result()
    assert res.status[0] == "timeout" and res.prefix == 0 and not res.timed_out
    assert st.counters["load_timeout"] == 1


def test_key_evicted_between_lookup_and_load(tier):
    srv, st, ld, keys = tier(2)
    assert st.lookup(keys).prefix == 9
    st.clients[0].delete([keys[4]])                 # evicted after the lookup said "hit"
    t0 = time.monotonic()
    res = ld.submit(keys, 9, RankMemorySink(2)).result()
    assert time.monotonic() - t0 < 0.5             # a GET of a missing key answers at once
    assert res.prefix == 4 and res.status == ["missing", "ok"]
    assert st.counters["load_missing"] == 1


def test_killed_server_mid_run(tier):
    srv, st, ld, keys = tier(3)
    srv.kill(1)
    res = ld.submit(keys, 9, RankMemorySink(3)).result()
    assert res.prefix == 1 and res.status[1] == "unavailable"
    assert st.counters["load_unavailable"] == 1


def test_corrupt_values_stop_the_prefix(tier):
    srv, st, ld, keys = tier(2)
    st.clients[1].set_many([(keys[3], bytes(VALUE - 64))])         # wrong size
    res = ld.submit(keys, 9, RankMemorySink(2)).result()
    assert res.prefix == 3 and res.status[1] == "bad_value"
    bad = bytearray(value(5))
    bad[-1] = 0xFF                                                  # right size, non-zero padding
    st.clients[1].set_many([(keys[3], value(3)), (keys[5], bytes(bad))])
    from mcf.sw.kvtier.sink import GoldenCacheSink
    from mcf.sw.golden import FixedKVCache
    from mcf.sw.models import ModelConfig
    cfg = ModelConfig("t", L, 32, 4, H, D, 64, 64)
    sink = GoldenCacheSink(FixedKVCache(), cfg, CHUNK)
    res = ld.submit(keys, 9, sink).result()
    assert res.prefix == 5 and res.status[1] == "bad_value" and sink.cache.length == 5 * CHUNK
    assert st.counters["bad_value"] >= 2
