"""The sharded store against real servers: lookup = brute force, owner-only storage, L1."""
import numpy as np
import pytest

from mcf.sw.kvtier.keys import TierIdentity
from mcf.sw.kvtier.shard import longest_prefix
from mcf.sw.kvtier.store import ShardedStore

VALUE = 192


def make_store(urls, clients, l1_bytes=0, chunk=4, **kw):
    return ShardedStore(clients(urls), TierIdentity("m", "w", 16, chunk), VALUE, l1_bytes, **kw)


def value(c):
    return bytes([c % 251]) * VALUE


def test_live_lookup_equals_brute_force(servers, clients):
    srv = servers(3)
    st = make_store(srv.urls, clients)
    rng = np.random.default_rng(5)
    try:
        for trial in range(40):
            tokens = rng.integers(0, 1000, int(rng.integers(1, 60)))
            keys = st.keys(tokens)
            present = list(rng.random(len(keys)) < rng.choice([0.5, 0.9, 1.0]))
            st.store(keys, {c: value(c) for c, ok in enumerate(present) if ok})
            look = st.lookup(keys)
            assert look.prefix == longest_prefix(present), (trial, present, look.hits)
            assert look.status == ["ok"] * 3
        # each chunk lives on its owner's server only
        keys = st.keys(np.arange(1000, 1041))
        st.store(keys, {c: value(c) for c in range(len(keys))})
        for r, client in enumerate(st.clients):
            assert client.exists_many(keys) == [c % 3 == r for c in range(len(keys))]
    finally:
        st.close()


def test_l1_serves_what_the_server_lost(servers, clients):
    srv = servers(2)
    st = make_store(srv.urls, clients, l1_bytes=10 * VALUE)
    try:
        keys = st.keys(np.arange(21))                            # 5 full chunks of 4
        st.store(keys, {c: value(c) for c in range(5)})
        for c in st.clients:
            c.flush()                                            # the servers forget everything
        assert st.lookup(keys).prefix == 5                       # L1 of each rank still has them
        f = st.fetch_rank(1, keys, 5)
        assert f.l1_chunks == 2 and f.l2_chunks == 0 and f.hits == 5
    finally:
        st.close()


def test_dead_rank_reports_no_hits_and_is_counted(servers, clients):
    srv = servers(3)
    now = [0.0]
    st = make_store(srv.urls, clients, cooldown_s=5.0, clock=lambda: now[0])
    try:
        keys = st.keys(np.arange(41))
        st.store(keys, {c: value(c) for c in range(10)})
        srv.kill(2)
        look = st.lookup(keys)
        assert look.hits[2] == 2 and look.prefix == 2 and look.status[2] == "unavailable"
        # rank 2 is skipped for the cooldown (one failure, not one per request), then tried again
        assert st.store(keys, {5: value(5)}) == ["ok", "ok", "down"]
        assert st.lookup(keys).status == ["ok", "ok", "down"]
        now[0] = 5.0
        assert st.store(keys, {5: value(5)}) == ["ok", "ok", "unavailable"]
        assert st.counters["lookup_unavailable"] == 1 and st.counters["store_unavailable"] == 1
        assert st.counters["skipped_down"] == 2
        with pytest.raises(ValueError):
            st.store(keys, {0: b"short"})
    finally:
        st.close()
