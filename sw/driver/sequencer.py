"""Driver methods for the node's sequencer (``spec/isa.py``, the SEQ_* registers of
``mcf.spec.regmap``): load a program, start it, wait for it (bounded, in seconds), read
semaphores, the replica directory and the performance counters.

``Driver`` inherits these; they use only ``read32`` / ``write32`` / ``read_fields`` /
``write_fields`` and ``backend.pause()``, so they run unchanged over the cocotb backend, a
board's ``/dev/mem`` and the ISA simulator's fake register backend.

A program's bytes are written into the node's DDR by the runtime (a DMA-memory object), not
here: ``load_program`` only tells the sequencer where they are.
"""
from __future__ import annotations

import time

from mcf.spec import ErrorCause, REGISTERS
from mcf.spec.isa import DDR_ALIGN, NUM_SEMS, PerfCounter, SeqFault
from mcf.spec.plan import ReplicaState
from mcf.spec.regmap import DMA_ADDR_BITS, PC_BITS

_WORD = (1 << 32) - 1


class SequencerMethods:
    """The sequencer half of ``Driver`` (see the module text)."""

    # --- configuration -------------------------------------------------------------------------
    async def seq_caps(self) -> dict[str, int]:
        return await self.read_fields("SEQ_CAPS")

    async def load_program(self, base: int, count: int) -> None:
        """Point the sequencer at ``count`` instructions at DDR byte address ``base``."""
        if isinstance(base, bool) or not isinstance(base, int) or base < 0 or base % DDR_ALIGN \
                or base >= 1 << DMA_ADDR_BITS:
            raise ValueError(f"program base {base!r}: a multiple of {DDR_ALIGN} below 2^{DMA_ADDR_BITS}")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count < 1 << PC_BITS:
            raise ValueError(f"program count {count!r}: 1 .. {(1 << PC_BITS) - 1} instructions")
        await self.write32("PROG_BASE_LO", base & _WORD)
        await self.write_fields("PROG_BASE_HI", addr_hi=base >> 32)
        await self.write_fields("PROG_COUNT", count=count)

    async def set_fault_mask(self, causes) -> None:
        """Error causes that stop a running program (an iterable of ``ErrorCause``)."""
        mask = 0
        for c in causes:
            mask |= 1 << int(ErrorCause(c))
        await self.write32("FAULT_MASK", mask)

    async def set_watchdog(self, cycles: int) -> None:
        """Cycles without progress before a running program faults WATCHDOG (0: never)."""
        await self.write32("WATCHDOG", _u32("watchdog", cycles))

    async def set_rx_wait(self, cycles: int) -> None:
        """Cycles an unexpected data packet waits for its RECV before it is dropped."""
        await self.write32("RX_WAIT", _u32("rx_wait", cycles))

    # --- running -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the loaded program; returns once the node has taken the start (bounded)."""
        await self.write_fields("SEQ_CONTROL", start=1)
        await self.wait_until("the sequencer to take the start",
                              lambda w: not REGISTERS["SEQ_STATUS"].decode(w)["start_pending"], "SEQ_STATUS")

    async def abort(self) -> None:
        await self.write_fields("SEQ_CONTROL", abort=1)

    async def seq_status(self) -> dict:
        st = await self.read_fields("SEQ_STATUS")
        st["fault_cause"] = _cause(st["fault_cause"])
        return st

    async def wait_done(self, timeout_s: float = 10.0) -> dict:
        """Wait until the running program completes END; returns SEQ_STATUS.  A fault raises
        ``NodeFault`` (a ``DriverError``) and running out of time ``DriverTimeout``, each with
        one line naming the node, the cause, what the queues wait on and the error counters."""
        from .core import DriverTimeout, NodeFault   # core imports this module
        deadline = time.monotonic() + timeout_s
        while True:
            st = await self.seq_status()
            if st["fault"]:
                raise NodeFault(await self.describe(st), st["fault_cause"],
                                (await self.read_fields("SEQ_FAULT_PC"))["pc"])
            if st["done"] and not st["running"] and not st["start_pending"]:
                return st
            if time.monotonic() >= deadline:
                raise DriverTimeout(f"timed out after {timeout_s:g} s waiting for the program: "
                                    + await self.describe(st))
            await self.backend.pause()

    async def describe(self, st: dict | None = None) -> str:
        """One line: node, state, fault cause and instruction, queue waits, non-zero errors."""
        st = st if st is not None else await self.seq_status()
        node = (await self.read_fields("NODE_ID"))["node_id"]
        pc = (await self.read_fields("SEQ_PC"))["pc"]
        if st["fault"]:
            fpc = (await self.read_fields("SEQ_FAULT_PC"))["pc"]
            state = f"fault {st['fault_cause'].name} at instruction {fpc}"
        else:
            state = "done" if st["done"] else "running" if st["running"] else "stopped"
        parts = [f"node {node}: {state}", f"{pc} dispatched"]
        waits = await self.queue_waits()
        if waits:
            parts.append("waiting: " + ", ".join(waits))
        errors = {c: v for c, v in (await self.read_errors()).items() if v}
        if errors:
            parts.append("errors: " + " ".join(f"{c.name}={v}" for c, v in errors.items()))
        return "; ".join(parts)

    async def queue_waits(self) -> list[str]:
        """What the queues wait on, in words (SEQ_WAIT and the semaphores' values)."""
        w = await self.read_fields("SEQ_WAIT")
        out = []
        for q in ("ex", "tx", "rx"):
            if w[f"{q}_sem_wait"]:
                sem = w[f"{q}_sem"]
                out.append(f"{q.upper()} on sem {sem} (= {await self.read_sem(sem)})")
        for name, text in (("rx_slot", "RX on a free receive slot"), ("ex_busy", "EX executing"),
                           ("tx_busy", "TX sending"), ("end", "END draining"), ("fetch", "fetch")):
            if w[name]:
                out.append(text)
        return out

    # --- state ---------------------------------------------------------------------------------
    async def read_sem(self, index: int) -> int:
        if not 0 <= index < NUM_SEMS:
            raise ValueError(f"semaphore {index}: 0 .. {NUM_SEMS - 1}")
        await self.write_fields("SEM_INDEX", index=index)
        return (await self.read_fields("SEM_DATA"))["value"]

    async def read_sems(self, count: int | None = None) -> list[int]:
        n = (await self.seq_caps())["num_sems"] if count is None else count
        return [await self.read_sem(i) for i in range(n)]

    async def read_directory(self, blocks) -> dict[int, ReplicaState]:
        """Replica-directory states of the KV block ids ``blocks`` (an iterable or a count)."""
        ids = range(blocks) if isinstance(blocks, int) else blocks
        out = {}
        for b in ids:
            await self.write_fields("DIR_INDEX", index=b)
            out[b] = ReplicaState((await self.read_fields("DIR_DATA"))["state"])
        return out

    async def read_counter(self, counter: PerfCounter) -> int:
        await self.write_fields("PERF_INDEX", index=int(counter))
        lo = await self.read32("PERF_LO")       # snapshots the high half
        return ((await self.read32("PERF_HI")) << 32) | lo

    async def read_perf(self) -> dict[PerfCounter, int]:
        """Every performance counter (64-bit, cleared at start)."""
        return {c: await self.read_counter(c) for c in PerfCounter}


def _cause(value: int):
    try:
        return SeqFault(value)
    except ValueError:
        return value


def _u32(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _WORD:
        raise ValueError(f"{name}={value!r}: a 32-bit cycle count")
    return value
