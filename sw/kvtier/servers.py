"""Local RESP servers: W ``redis-server`` processes on free loopback ports (the embedded default
of ``mcf kv replay`` and the servers the tests start).

Each server runs in a private ``mkdtemp`` directory with persistence off (``--save ''
--appendonly no``), bound to 127.0.0.1, optionally with a memory limit and LRU eviction (as the
paper's Valkey).  Start-up waits until PING answers (bounded); ``stop`` sends SIGTERM, then
SIGKILL after a bound, and removes the directory.  ``kill(r)`` (SIGKILL) and ``pause(r)``
(SIGSTOP: every read from it never returns) inject the failures of docs/kvtier.md.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from mcf.sw.errors import UserError

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
PORT_TRIES = 5


def redis_server_binary() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise UserError("redis-server not found: run `make setup` (scripts/ensure-simulators.sh "
                        "installs Debian's redis-server) or pass --url with your own servers")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ping(port: int, timeout: float) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class LocalServers:
    """``with LocalServers(W) as srv: srv.urls`` -> W servers, stopped on exit (even on error)."""

    def __init__(self, ranks: int, maxmemory_bytes: int | None = None, binary: str | None = None):
        if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
            raise UserError(f"ranks={ranks!r}: must be an integer >= 1")
        if maxmemory_bytes is not None and maxmemory_bytes < 1 << 20:
            raise UserError(f"server memory {maxmemory_bytes} bytes: at least 1 MiB")
        self.ranks = ranks
        self.maxmemory = maxmemory_bytes
        self.binary = binary or redis_server_binary()
        self.dir: str | None = None
        self.procs: list[subprocess.Popen] = []
        self.ports: list[int] = []
        self.state: list[str] = []

    @property
    def urls(self) -> list[str]:
        return [f"redis://127.0.0.1:{p}" for p in self.ports]

    def __enter__(self) -> "LocalServers":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _args(self, port: int, rdir: str) -> list[str]:
        a = [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", rdir,
             "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
             "--logfile", os.path.join(rdir, "server.log"), "--databases", "1"]
        if self.maxmemory:
            a += ["--maxmemory", str(self.maxmemory), "--maxmemory-policy", "allkeys-lru"]
        return a

    def _start_one(self, r: int) -> None:
        rdir = os.path.join(self.dir, f"rank{r}")
        os.makedirs(rdir, exist_ok=True)
        last = ""
        for _ in range(PORT_TRIES):
            port = free_port()
            proc = subprocess.Popen(self._args(port, rdir), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline and proc.poll() is None:
                if _ping(port, 0.2):
                    self.procs.append(proc)
                    self.ports.append(port)
                    self.state.append("up")
                    return
                time.sleep(0.01)
            _terminate(proc)
            try:
                with open(os.path.join(rdir, "server.log")) as f:
                    last = (f.read().strip().splitlines() or [""])[-1]
            except OSError:
                pass
        raise UserError(f"redis-server for rank {r} did not start ({PORT_TRIES} tries): {last}")

    def start(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="mcf-kvtier-")
        try:
            for r in range(self.ranks):
                self._start_one(r)
        except BaseException:
            self.stop()
            raise

    def kill(self, rank: int) -> None:
        """SIGKILL rank's server (it stays down)."""
        p = self.procs[rank]
        if self.state[rank] == "paused":
            os.kill(p.pid, signal.SIGCONT)
        if p.poll() is None:
            p.kill()
            p.wait(STOP_TIMEOUT_S)
        self.state[rank] = "killed"

    def pause(self, rank: int) -> None:
        """SIGSTOP: the server keeps its socket open and never answers until ``resume``."""
        if self.state[rank] == "up":
            os.kill(self.procs[rank].pid, signal.SIGSTOP)
            self.state[rank] = "paused"

    def resume(self, rank: int) -> None:
        if self.state[rank] == "paused":
            os.kill(self.procs[rank].pid, signal.SIGCONT)
            self.state[rank] = "up"

    def stop(self) -> None:
        for r, p in enumerate(self.procs):
            if self.state[r] == "paused":
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except OSError:
                    pass
            _terminate(p)
        self.procs, self.ports, self.state = [], [], []
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def _terminate(p: subprocess.Popen) -> None:
    if p.poll() is not None:
        return
    p.terminate()
    try:
        p.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(STOP_TIMEOUT_S)
