"""The RESP client of one rank: a thin wrapper around redis-py in which every call is bounded.

One server per rank (Redis or Valkey, the RESP protocol): the URL template's ``{rank}`` becomes
the rank, e.g. ``redis://kv-{rank}:6379`` or ``redis://10.0.0.9:700{rank}``; ``resp://`` is
accepted as a synonym of ``redis://``.  Rank r only ever talks to server r (``shard``).

Every operation has a connect timeout and a socket timeout (a read that never returns raises
``TierTimeout`` after ``timeout_s``), redis-py's own retries are off (a retry would multiply the
bound), and every failure is one of two exceptions the callers count: ``TierTimeout`` (no answer
in time) and ``TierUnavailable`` (refused, reset, killed, protocol error).  A key that is not
there is not an error: ``get_many`` returns None for it.
"""
from __future__ import annotations

import time
from urllib.parse import urlsplit

from mcf.sw.errors import UserError

DEFAULT_TIMEOUT_S = 1.0
DEFAULT_CONNECT_TIMEOUT_S = 0.5


class TierError(Exception):
    """A tier operation failed; the caller falls back to recompute and counts it."""


class TierTimeout(TierError):
    pass


class TierUnavailable(TierError):
    pass


def rank_urls(urls, ranks: int) -> list[str]:
    """One URL per rank from a template with ``{rank}`` (a string) or an explicit list."""
    if isinstance(urls, str):
        if "{rank}" not in urls:
            raise UserError(f"url {urls!r}: a template needs {{rank}} (one server per rank)")
        out = [urls.replace("{rank}", str(r)) for r in range(ranks)]
    else:
        out = list(urls)
        if len(out) != ranks:
            raise UserError(f"{len(out)} server URLs for {ranks} ranks")
    for u in out:
        parse_url(u)
    if len(set(out)) != len(out):
        raise UserError("two ranks share a server URL: each rank needs its own server")
    return out


def parse_url(url: str) -> tuple[str, int, int]:
    """-> (host, port, db) of a ``redis://`` / ``resp://`` URL (UserError otherwise)."""
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError as e:
        raise UserError(f"url {url!r}: {e}") from None
    if u.scheme not in ("redis", "resp") or not u.hostname:
        raise UserError(f"url {url!r}: expected redis://HOST:PORT or resp://HOST:PORT")
    db = u.path.strip("/") or "0"
    if not db.isdigit():
        raise UserError(f"url {url!r}: database {db!r} must be a number")
    return u.hostname, port or 6379, int(db)


class RankClient:
    """Rank r's connection to its server.  Thread-safe (redis-py's connection pool); at most
    ``max_connections`` sockets."""

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S, max_connections: int = 4):
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
        if not (timeout_s > 0 and connect_timeout_s > 0):
            raise UserError(f"timeouts must be > 0 (got {timeout_s}, {connect_timeout_s})")
        self.url = url
        self.timeout_s = float(timeout_s)
        host, port, db = parse_url(url)
        self._redis = redis.Redis(host=host, port=port, db=db, socket_timeout=timeout_s,
                                  socket_connect_timeout=connect_timeout_s,
                                  retry=Retry(NoBackoff(), 0), max_connections=max_connections,
                                  socket_keepalive=True, health_check_interval=0)
        self._errors = (redis.exceptions.RedisError, OSError)
        self._timeouts = (redis.exceptions.TimeoutError, TimeoutError)

    def _call(self, what: str, fn):
        try:
            return fn()
        except self._timeouts as e:
            raise TierTimeout(f"{self.url}: {what}: no answer within {self.timeout_s:g} s ({e})") from None
        except self._errors as e:
            raise TierUnavailable(f"{self.url}: {what}: {type(e).__name__}: {e}") from None

    def ping(self) -> float:
        t0 = time.perf_counter()
        self._call("PING", self._redis.ping)
        return time.perf_counter() - t0

    def exists_many(self, keys) -> list[bool]:
        """One round trip (pipelined EXISTS per key)."""
        keys = list(keys)
        if not keys:
            return []

        def run():
            p = self._redis.pipeline(transaction=False)
            for k in keys:
                p.exists(k)
            return p.execute()
        return [bool(x) for x in self._call(f"EXISTS x{len(keys)}", run)]

    def get_many(self, keys) -> list:
        """MGET: one round trip; None where a key is missing (evicted, never stored)."""
        keys = list(keys)
        if not keys:
            return []
        return list(self._call(f"MGET x{len(keys)}", lambda: self._redis.mget(keys)))

    def set_many(self, items) -> int:
        """Pipelined SETs of (key, value); returns the bytes written."""
        items = list(items)
        if not items:
            return 0

        def run():
            p = self._redis.pipeline(transaction=False)
            for k, v in items:
                p.set(k, v)
            return p.execute()
        self._call(f"SET x{len(items)}", run)
        return sum(len(v) for _, v in items)

    def delete(self, keys) -> int:
        keys = list(keys)
        return int(self._call("DEL", lambda: self._redis.delete(*keys))) if keys else 0

    def flush(self) -> None:
        self._call("FLUSHDB", self._redis.flushdb)

    def info(self, section: str = "memory") -> dict:
        return dict(self._call(f"INFO {section}", lambda: self._redis.info(section)))

    def close(self) -> None:
        try:
            self._redis.close()
            self._redis.connection_pool.disconnect()
        except self._errors:
            pass
