"""Local servers: start on free loopback ports, no persistence files, stopped on exit."""
import os

import pytest

from mcf.sw.errors import UserError
from mcf.sw.kvtier.resp import RankClient
from mcf.sw.kvtier.servers import LocalServers


def test_start_stop_leaves_nothing():
    with LocalServers(2, maxmemory_bytes=8 << 20) as srv:
        d, procs = srv.dir, list(srv.procs)
        assert len(set(srv.ports)) == 2 and os.path.isdir(d)
        c = RankClient(srv.urls[1], timeout_s=0.5)
        c.set_many([(b"k", b"v")])
        assert c.info("persistence")["aof_enabled"] == 0
        assert c._redis.config_get("save")["save"] == ""
        assert c._redis.config_get("maxmemory-policy")["maxmemory-policy"] == "allkeys-lru"
        c.close()
    assert all(p.poll() is not None for p in procs) and not os.path.exists(d)


def test_eviction_under_the_memory_limit():
    with LocalServers(1, maxmemory_bytes=2 << 20) as srv:
        c = RankClient(srv.urls[0], timeout_s=1.0)
        for i in range(16):
            c.set_many([(f"k{i}".encode(), bytes(256 << 10))])      # 4 MiB into 2 MiB
        assert c.exists_many([b"k0"]) == [False] and c.exists_many([b"k15"]) == [True]
        c.close()


def test_stop_after_pause_and_kill():
    srv = LocalServers(3).__enter__()
    procs = list(srv.procs)
    srv.pause(0)
    srv.kill(1)
    srv.stop()
    assert all(p.poll() is not None for p in procs)


def test_bad_parameters(monkeypatch):
    with pytest.raises(UserError):
        LocalServers(0)
    with pytest.raises(UserError):
        LocalServers(1, maxmemory_bytes=1000)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UserError, match="redis-server not found"):
        LocalServers(1)
