"""The one register-access interface of an MCF node (``mcf.spec.REGISTERS`` by name).

``Driver`` methods are coroutines over a *backend* that moves 32-bit words
(``read32(offset)``, ``write32(offset, value)``, ``pause()``).  In cocotb the backend awaits
the simulator; on a board the backends never suspend, and ``SyncDriver`` runs the very same
coroutines to completion without an event loop.  So the code the cocotb benches exercise is
the code that runs on the board.

Every wait is a bounded poll (``max_polls`` x ``backend.pause()``) that raises
``DriverTimeout``; nothing here can hang.
"""
from __future__ import annotations

import functools
import inspect

from mcf.spec import DMA_DESCRIPTOR, REGISTERS, ROUTE_ENTRY, DmaDescriptor, DmaDir, ErrorCause, Meta
from mcf.spec.regmap import DATA_BITS, DESC_WORDS, ID_VALUE, META_WORDS, Register

_WORD = (1 << DATA_BITS) - 1


class DriverError(OSError):
    """The node did not do what the driver asked (an I/O error: the mcf command prints it as
    one line)."""


class BusError(DriverError):
    """The register block answered SLVERR/DECERR."""


class DriverTimeout(DriverError, TimeoutError):
    """A bounded wait ran out."""


#: One DMA transfer: the spec's descriptor (the one definition), under the driver's name.
Descriptor = DmaDescriptor


def _reg(name: str) -> Register:
    return REGISTERS[name]


class Driver:
    """Asynchronous driver: ``await drv.write32("NODE_ID", 3)``."""

    def __init__(self, backend, max_polls: int = 10_000):
        self.backend = backend
        self.max_polls = max_polls

    # --- words and fields ----------------------------------------------------------------
    async def read32(self, name: str) -> int:
        return await self.backend.read32(_reg(name).offset)

    async def write32(self, name: str, value: int) -> None:
        if not 0 <= value <= _WORD:
            raise ValueError(f"{name}: {value:#x} is not a 32-bit word")
        await self.backend.write32(_reg(name).offset, value)

    async def read_fields(self, name: str) -> dict[str, int]:
        return _reg(name).decode(await self.read32(name))

    async def write_fields(self, name: str, **fields) -> None:
        """Write a whole register from its fields (the others 0; ``Register.encode``)."""
        await self.write32(name, _reg(name).encode(**{k: int(v) for k, v in fields.items()}))

    async def update_fields(self, name: str, **fields) -> None:
        """Read-modify-write of some fields."""
        current = _reg(name).decode(await self.read32(name))
        current.update(fields)
        await self.write_fields(name, **current)

    async def wait_until(self, what: str, predicate, name: str) -> int:
        """Poll register ``name`` until ``predicate(word)``; bounded by ``max_polls``."""
        for _ in range(self.max_polls):
            word = await self.read32(name)
            if predicate(word):
                return word
            await self.backend.pause()
        raise DriverTimeout(f"timed out after {self.max_polls} polls waiting for {what}")

    # --- node set-up -------------------------------------------------------------------------
    async def check_id(self) -> None:
        got = await self.read32("ID")
        if got != ID_VALUE:
            raise DriverError(f"no MCF node here: ID reads {got:#010x}, expected {ID_VALUE:#010x}")

    async def configure(self, node_id: int, num_nodes: int, window_base: int | None = None,
                        window_size: int | None = None, irq_enable: int = 0, memory=None) -> None:
        """Node id, cluster size, interrupts and the DMA window: from ``memory`` (a
        ``DmaMemory``: the window is exactly its region) or from ``window_base``/``window_size``
        (simulation, where DDR is a bus model)."""
        if memory is not None:
            if window_base is not None or window_size is not None:
                raise ValueError("configure: give memory= or window_base/window_size, not both")
            window_base, window_size = memory.phys_base, memory.size
        elif window_base is None or window_size is None:
            raise ValueError("configure: the DMA window needs memory= or window_base and window_size")
        await self.write_fields("NODE_ID", node_id=node_id)
        await self.write_fields("NUM_NODES", num_nodes=num_nodes)
        await self.set_window(window_base, window_size)
        await self.write32("IRQ_ENABLE", irq_enable)

    async def set_window(self, base: int, size: int) -> None:
        top = 1 << DMA_DESCRIPTOR["addr"].width
        if not (0 <= base < top and 0 <= size <= top - base):
            raise ValueError(f"DMA window {base:#x}+{size:#x} exceeds the {top:#x} address space")
        await self.write32("DMA_WINDOW_BASE_LO", base & _WORD)
        await self.write_fields("DMA_WINDOW_BASE_HI", base_hi=base >> DATA_BITS)
        await self.write32("DMA_WINDOW_SIZE_LO", size & _WORD)
        await self.write_fields("DMA_WINDOW_SIZE_HI", size_hi=size >> DATA_BITS)

    async def cycles(self) -> int:
        """The node's free-running 64-bit cycle counter (HI, LO, HI: a torn read retries)."""
        for _ in range(4):
            hi = await self.read32("CYCLES_HI")
            lo = await self.read32("CYCLES_LO")
            if await self.read32("CYCLES_HI") == hi:
                return (hi << DATA_BITS) | lo
        raise DriverError("CYCLES_HI changed on every read: the counter is not a counter")

    async def enable(self, on: bool = True) -> None:
        await self.update_fields("CONTROL", enable=int(on), clear_counters=0)

    async def status(self) -> dict[str, int]:
        return await self.read_fields("STATUS")

    # --- queues ------------------------------------------------------------------------------
    async def push_meta(self, meta: Meta, wait: bool = True) -> None:
        """Stage ``meta`` in META_W0..3 and push it; waits (bounded) for queue space unless
        ``wait=False`` (then a full queue refuses it and counts META_QUEUE_FULL)."""
        word = meta.to_int()
        for i in range(META_WORDS):
            await self.write32(f"META_W{i}", (word >> (DATA_BITS * i)) & _WORD)
        if wait:
            await self.wait_until("space in the metadata queue",
                                  lambda w: not _reg("STATUS").decode(w)["meta_queue_full"], "STATUS")
        await self.write_fields("META_PUSH", push=1)

    async def push_descriptor(self, desc: Descriptor, wait: bool = True) -> None:
        """Stage and push a DMA descriptor (the hardware validates it: see ErrorCause)."""
        word = desc.pack()
        for i in range(DESC_WORDS):
            await self.write32(f"DESC_W{i}", (word >> (DATA_BITS * i)) & _WORD)
        if wait:
            await self.wait_until("space in the descriptor queue",
                                  lambda w: not _reg("STATUS").decode(w)["desc_queue_full"], "STATUS")
        await self.write_fields("DESC_PUSH", push=1)

    async def load_from(self, memory, offset: int, length: int, buffer: int = 0, tag: int = 0,
                        wait: bool = True) -> None:
        """LOAD ``length`` bytes at ``offset`` of ``memory`` (a ``DmaMemory``) into ping-pong
        ``buffer``: the range is flushed first, so the PL reads what the CPU wrote."""
        memory.flush(offset, length)
        await self.push_descriptor(Descriptor(memory.phys(offset), length, buffer, DmaDir.LOAD, tag), wait)

    async def store_to(self, memory, offset: int, length: int, tag: int = 0, wait: bool = True) -> None:
        """STORE the next ``length`` bytes the node delivers to ``offset`` of ``memory``.  When
        DESC_DONE says it completed, read it with ``memory.fetch`` (invalidate, then read)."""
        memory.invalidate(offset, length)      # no dirty line of the range may be written back over it
        await self.push_descriptor(Descriptor(memory.phys(offset), length, 0, DmaDir.STORE, tag), wait)

    async def wait_desc_done(self, count: int) -> dict[str, int]:
        """Wait until DESC_DONE.count reaches ``count`` (mod 2^16); returns the fields."""
        width = _reg("DESC_DONE").field("count").width
        target = count % (1 << width)
        word = await self.wait_until(f"{count} completed descriptors",
                                     lambda w: _reg("DESC_DONE").decode(w)["count"] == target, "DESC_DONE")
        return _reg("DESC_DONE").decode(word)

    # --- route table -------------------------------------------------------------------------
    async def write_route(self, route_id: int, entry: dict) -> None:
        word = ROUTE_ENTRY.pack({"reserved": 0, **entry})
        await self.write_fields("ROUTE_INDEX", index=route_id)
        await self.write32("ROUTE_DATA", word)

    async def read_route(self, route_id: int) -> dict[str, int]:
        await self.write_fields("ROUTE_INDEX", index=route_id)
        return ROUTE_ENTRY.unpack(await self.read32("ROUTE_DATA"))

    # --- errors and interrupts -----------------------------------------------------------
    async def read_errors(self) -> dict[ErrorCause, int]:
        return {c: await self.read32(f"ERR_{c.name}") for c in ErrorCause}

    async def clear_errors(self) -> None:
        await self.update_fields("CONTROL", clear_counters=1)

    async def irq_pending(self) -> dict[str, int]:
        return await self.read_fields("IRQ_STATUS")

    async def irq_clear(self, mask: int) -> None:
        await self.write32("IRQ_STATUS", mask)

    # --- programs ------------------------------------------------------------------------
    async def execute(self, program) -> None:
        """Run a node program: ``Meta`` items go to the metadata queue, ``Descriptor``
        items to the DMA queue, ``(route_id, entry)`` pairs to the route table."""
        for op in program:
            if isinstance(op, Meta):
                await self.push_meta(op)
            elif isinstance(op, Descriptor):
                await self.push_descriptor(op)
            elif isinstance(op, tuple) and len(op) == 2:
                await self.write_route(*op)
            else:
                raise ValueError(f"unknown program item {op!r}")


def run_sync(coro):
    """Run a coroutine that never suspends (a synchronous backend) to completion."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("the backend suspended: use Driver (async) with an asynchronous backend")


class SyncDriver:
    """``Driver`` for a synchronous backend: the same methods, called without ``await``."""

    def __init__(self, backend, max_polls: int = 10_000):
        self._driver = Driver(backend, max_polls)
        self.backend = backend

    def __getattr__(self, name):
        attr = getattr(self._driver, name)
        if inspect.iscoroutinefunction(attr):
            @functools.wraps(attr)
            def call(*args, **kwargs):
                return run_sync(attr(*args, **kwargs))
            return call
        return attr
