"""Fixtures of the prefix KV tier tests: real redis-server processes on free loopback ports, in
a private temporary directory, stopped at the end of each test even when it fails."""
from __future__ import annotations

import pytest

from mcf.sw.kvtier.resp import RankClient
from mcf.sw.kvtier.servers import LocalServers


@pytest.fixture
def servers():
    """servers(W, maxmemory_bytes=None) -> a started LocalServers (stopped after the test)."""
    made = []

    def start(ranks, **kw):
        s = LocalServers(ranks, **kw)
        made.append(s)
        s.start()
        return s
    yield start
    for s in made:
        s.stop()


@pytest.fixture
def clients():
    """clients(urls, timeout_s=0.5) -> [RankClient] (closed after the test)."""
    made = []

    def connect(urls, timeout_s=0.5):
        cs = [RankClient(u, timeout_s=timeout_s, connect_timeout_s=0.5) for u in urls]
        made.extend(cs)
        return cs
    yield connect
    for c in made:
        c.close()
