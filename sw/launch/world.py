"""The ranks of a run and the messages between them, with a bound on every wait.

``MpiWorld`` is a run started by ``mpirun -H board0,board1,... mcf node ...`` (mpi4py): rank =
node id, world size = number of nodes.  ``LocalWorld`` is the same run in one process (one
thread per node, queues between them): the reference the MPI run must match, and what a test
without MPI uses.

Every wait (a packet, the barrier, the gather, the broadcast) ends after ``timeout`` seconds
with ``LaunchTimeout``: a rank that died or hangs never keeps the others waiting forever.  Under
MPI the rank that times out calls ``MPI_Abort``, which ends every rank of the job.
"""
from __future__ import annotations

import os
import threading
import time

#: Environment variables an MPI launcher sets in every rank (MPICH/Hydra, Open MPI, Intel MPI).
MPI_ENV = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


class LaunchTimeout(TimeoutError):
    """A bounded wait of the launcher ran out (an OSError: the command prints one line)."""


class LaunchAborted(OSError):
    """Another rank failed and ended the run (a local run's MPI_Abort)."""


def launched_by_mpi() -> bool:
    return any(name in os.environ for name in MPI_ENV)


class World:
    """What a node's run needs from the others."""

    rank: int
    size: int
    timeout: float
    kind: str

    def send(self, dst: int, tag: tuple, payload: bytes) -> None:
        raise NotImplementedError

    def recv(self, src: int, tag: tuple) -> bytes:
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError

    def bcast(self, obj, root: int = 0):
        raise NotImplementedError

    def gather(self, obj, root: int = 0):
        raise NotImplementedError

    def finish(self) -> None:
        """Wait (bounded) until every message this rank sent has left."""

    def abort(self, code: int) -> None:
        """End the whole run (MPI_Abort); a local run has nothing to end."""

    def _deadline(self):
        return time.monotonic() + self.timeout

    def _late(self, what: str) -> LaunchTimeout:
        return LaunchTimeout(f"timed out after {self.timeout:g} s waiting for {what}")


# --- MPI ---------------------------------------------------------------------------------------
_TAG_MSG, _TAG_GATHER, _TAG_BCAST = 11, 12, 13


class MpiWorld(World):
    kind = "mpi"

    def __init__(self, timeout: float = 60.0, poll_s: float = 1e-4):
        try:
            from mpi4py import MPI
        except ImportError:
            raise OSError("mpi4py is not installed: `pip install mpi4py mpich` (see docs/board.md)") from None
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.timeout, self.poll_s = float(timeout), poll_s
        self._stash: dict[tuple, bytes] = {}
        self._sent: list = []

    def _wait(self, test, what: str):
        end = self._deadline()
        while True:
            done = test()
            if done:
                return done
            if time.monotonic() > end:
                raise self._late(what)
            time.sleep(self.poll_s)

    def send(self, dst: int, tag: tuple, payload: bytes) -> None:
        self._sent.append(self.comm.isend((tag, bytes(payload)), dest=dst, tag=_TAG_MSG))

    def _pump(self) -> None:
        status = self.MPI.Status()
        while self.comm.Iprobe(source=self.MPI.ANY_SOURCE, tag=_TAG_MSG, status=status):
            src = status.Get_source()
            tag, payload = self.comm.recv(source=src, tag=_TAG_MSG)
            self._stash[(src, tag)] = payload

    def recv(self, src: int, tag: tuple) -> bytes:
        key = (src, tuple(tag))

        def test():
            if key not in self._stash:
                self._pump()
            return key in self._stash
        self._wait(test, f"packet {tag} from rank {src}")
        return self._stash.pop(key)

    def barrier(self) -> None:
        req = self.comm.Ibarrier()
        self._wait(req.Test, "the barrier")

    def bcast(self, obj, root: int = 0):
        if self.rank == root:
            reqs = [self.comm.isend(obj, dest=r, tag=_TAG_BCAST) for r in range(self.size) if r != root]
            self._wait(lambda: all(r.Test() for r in reqs) or not reqs, "the broadcast to leave")
            return obj
        self._wait(lambda: self.comm.Iprobe(source=root, tag=_TAG_BCAST), f"the broadcast from rank {root}")
        return self.comm.recv(source=root, tag=_TAG_BCAST)

    def gather(self, obj, root: int = 0):
        if self.rank != root:
            req = self.comm.isend(obj, dest=root, tag=_TAG_GATHER)
            self._wait(req.Test, f"rank {root} to take this rank's result")
            return None
        out = [None] * self.size
        out[root] = obj
        for r in range(self.size):
            if r != root:
                self._wait(lambda: self.comm.Iprobe(source=r, tag=_TAG_GATHER), f"the result of rank {r}")
                out[r] = self.comm.recv(source=r, tag=_TAG_GATHER)
        return out

    def finish(self) -> None:
        reqs, self._sent = self._sent, []
        self._wait(lambda: all(r.Test() for r in reqs) or not reqs, "sent packets to leave")

    def abort(self, code: int) -> None:
        self.comm.Abort(code)


# --- one process -------------------------------------------------------------------------------
class _Fabric:
    """Shared state of a LocalWorld: one mailbox per rank, a barrier, gather/bcast slots."""

    def __init__(self, size: int, timeout: float):
        self.size, self.timeout = size, timeout
        self.cond = threading.Condition()
        self.boxes: list[dict] = [dict() for _ in range(size)]
        self.barrier = threading.Barrier(size)
        self.slots: dict = {}
        self.aborted: int | None = None


class LocalWorld(World):
    kind = "local"

    def __init__(self, fabric: _Fabric, rank: int):
        self.f, self.rank, self.size, self.timeout = fabric, rank, fabric.size, fabric.timeout

    @staticmethod
    def create(size: int, timeout: float = 60.0) -> list["LocalWorld"]:
        fabric = _Fabric(size, float(timeout))
        return [LocalWorld(fabric, r) for r in range(size)]

    def _wait_for(self, pred, what: str):
        end = self._deadline()
        with self.f.cond:
            while not pred():
                if self.f.aborted is not None:
                    raise LaunchAborted(f"rank {self.f.aborted} failed and ended the run")
                left = end - time.monotonic()
                if left <= 0:
                    raise self._late(what)
                self.f.cond.wait(min(left, 0.5))

    def send(self, dst: int, tag: tuple, payload: bytes) -> None:
        with self.f.cond:
            self.f.boxes[dst][(self.rank, tuple(tag))] = bytes(payload)
            self.f.cond.notify_all()

    def recv(self, src: int, tag: tuple) -> bytes:
        key, box = (src, tuple(tag)), self.f.boxes[self.rank]
        self._wait_for(lambda: key in box, f"packet {tag} from rank {src}")
        with self.f.cond:
            return box.pop(key)

    def barrier(self) -> None:
        try:
            self.f.barrier.wait(self.timeout)
        except threading.BrokenBarrierError:
            if self.f.aborted is not None:
                raise LaunchAborted(f"rank {self.f.aborted} failed and ended the run") from None
            raise self._late("the barrier") from None

    def abort(self, code: int) -> None:
        """Wake every other rank of this process with LaunchAborted (MPI_Abort's counterpart)."""
        with self.f.cond:
            if self.f.aborted is None:
                self.f.aborted = self.rank
            self.f.cond.notify_all()
        self.f.barrier.abort()

    def bcast(self, obj, root: int = 0):
        key = ("bcast", root)
        if self.rank == root:
            with self.f.cond:
                self.f.slots[key] = obj
                self.f.cond.notify_all()
            return obj
        self._wait_for(lambda: key in self.f.slots, f"the broadcast from rank {root}")
        return self.f.slots[key]

    def gather(self, obj, root: int = 0):
        with self.f.cond:
            self.f.slots[("gather", self.rank)] = obj
            self.f.cond.notify_all()
        if self.rank != root:
            return None
        self._wait_for(lambda: all(("gather", r) in self.f.slots for r in range(self.size)),
                       "the results of every rank")
        return [self.f.slots[("gather", r)] for r in range(self.size)]
