"""The rank client against real redis-server processes: every call bounded, failures typed."""
import time

import pytest

from mcf.sw.errors import UserError
from mcf.sw.kvtier.resp import TierTimeout, TierUnavailable, parse_url, rank_urls
from mcf.sw.kvtier.servers import free_port


def test_url_template_gives_each_rank_its_server():
    assert rank_urls("resp://kv-{rank}:6379", 3) == ["resp://kv-0:6379", "resp://kv-1:6379",
                                                     "resp://kv-2:6379"]
    assert rank_urls("redis://127.0.0.1:700{rank}", 2)[1] == "redis://127.0.0.1:7001"
    assert parse_url("redis://h:12/0") == ("h", 12, 0) and parse_url("resp://h") == ("h", 6379, 0)
    for bad in ("redis://h:6379", ["redis://a:1"], ["redis://a:1", "redis://a:1"], "http://x-{rank}:1",
                "redis://x-{rank}:port"):
        with pytest.raises(UserError):
            rank_urls(bad, 2)


def test_get_set_exists_missing(servers, clients):
    srv = servers(1)
    (c,) = clients(srv.urls)
    assert c.set_many([(b"a", b"1" * 1000), (b"b", b"2")]) == 1001
    assert c.exists_many([b"a", b"x", b"b"]) == [True, False, True]
    assert c.get_many([b"b", b"x", b"a"]) == [b"2", None, b"1" * 1000]   # missing: None at once
    assert c.get_many([]) == [] and c.exists_many([]) == []
    assert c.delete([b"a"]) == 1 and c.get_many([b"a"]) == [None]
    assert c.ping() < 1.0 and "used_memory" in c.info()


def test_killed_server_is_unavailable_at_once(servers, clients):
    srv = servers(1)
    (c,) = clients(srv.urls)
    c.set_many([(b"k", b"v")])
    srv.kill(0)
    t0 = time.monotonic()
    with pytest.raises(TierUnavailable):
        c.get_many([b"k"])
    assert time.monotonic() - t0 < 0.5


def test_read_that_never_returns_times_out(servers, clients):
    srv = servers(1)
    (c,) = clients(srv.urls, timeout_s=0.3)
    c.set_many([(b"k", b"v")])
    srv.pause(0)                                   # SIGSTOP: socket open, no answer ever
    t0 = time.monotonic()
    with pytest.raises(TierTimeout):
        c.get_many([b"k"])
    assert 0.25 < time.monotonic() - t0 < 1.5
    srv.resume(0)


def test_nobody_listening_is_unavailable(clients):
    (c,) = clients([f"redis://127.0.0.1:{free_port()}"])
    with pytest.raises(TierUnavailable):
        c.exists_many([b"k"])
