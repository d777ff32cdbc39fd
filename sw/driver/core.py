"""The one register-access interface of an MCF node (``mcf.spec.REGISTERS`` by name).

``Driver`` methods are coroutines over a *backend* that moves 32-bit words
(``read32(offset)``, ``write32(offset, value)``, ``pause()``).  In cocotb the backend awaits
the simulator; on a board the backends never suspend, and ``SyncDriver`` runs the very same
coroutines to completion without an event loop.  So the code the cocotb benches exercise is
the code that runs on the board.

Every wait goes through one mechanism, ``Driver.wait_for`` (``wait_until`` for one register):
a poll bounded in seconds (``timeout_s``, per driver and per call; the backend's clock:
wall time on a board, simulated time in cocotb) and optionally in polls (``max_polls``), whose
deadline restarts when the caller's ``progress`` mark moves (a long program that keeps
completing descriptors never times out, a stuck one does).  A timeout raises
``DriverTimeout`` with STATUS and every non-zero error counter in its message, and says so
when STATUS.busy stayed 1 without progress (the datapath is stuck).  Nothing here can hang.

Counters are read modulo their width: ``wait_desc_done(n)`` extends the 16-bit DESC_DONE
count in software (it must be read at least once per 65 535 completions: every wait does),
so a count that overshoots ``n`` returns, and ``n = 65536`` waits for the wrap.

A push the node refuses (queue full) or a descriptor it rejects (zero length, outside the
window, bad buffer, unaligned, too long) raises ``PushRefused`` naming the ``ErrorCause``: the
driver reads the cause's counters after each push (``check=False`` skips it).
"""
from __future__ import annotations

import functools
import inspect
import time

from mcf.spec import (DMA_DESCRIPTOR, REGISTERS, ROUTE_ENTRY, SPEC_VERSION, DmaDescriptor, DmaDir, ErrorCause,
                      LinkStatus, Meta)
from mcf.spec.eth import MAC_BITS, MAC_TABLE_ENTRIES
from mcf.spec.regmap import DATA_BITS, DESC_WORDS, ID_VALUE, META_WORDS, Register

from .sequencer import SequencerMethods

_WORD = (1 << DATA_BITS) - 1


class DriverError(OSError):
    """The node did not do what the driver asked (an I/O error: the mcf command prints it as
    one line)."""


class BusError(DriverError):
    """The register block answered SLVERR/DECERR."""


class DriverTimeout(DriverError, TimeoutError):
    """A bounded wait ran out (the message carries STATUS and the non-zero error counters)."""


class PushRefused(DriverError):
    """The node refused a push (its queue was full) or rejected a descriptor; ``cause`` is
    the ``ErrorCause`` whose counter moved."""

    def __init__(self, message: str, cause: ErrorCause):
        super().__init__(message)
        self.cause = cause


#: The counters a descriptor push can move (``ErrorCause`` order: the first failing check counts).
DESC_CAUSES = (ErrorCause.DESC_ZERO_LENGTH, ErrorCause.DESC_OUT_OF_WINDOW, ErrorCause.DESC_BAD_BUFFER,
               ErrorCause.DESC_UNALIGNED, ErrorCause.DESC_TOO_LONG, ErrorCause.DESC_QUEUE_FULL)
META_CAUSES = (ErrorCause.META_QUEUE_FULL,)
#: Default bound of a wait without progress, seconds of the backend's clock.
DEFAULT_TIMEOUT_S = 1.0


class NodeFault(DriverError):
    """The node's sequencer stopped on a fault (``cause``: ``SeqFault``, ``pc``: the
    instruction)."""

    def __init__(self, message: str, cause, pc: int):
        super().__init__(message)
        self.cause, self.pc = cause, pc


#: One DMA transfer: the spec's descriptor (the one definition), under the driver's name.
Descriptor = DmaDescriptor


def _reg(name: str) -> Register:
    return REGISTERS[name]


class Driver(SequencerMethods):
    """Asynchronous driver: ``await drv.write32("NODE_ID", 3)``.  The sequencer's methods
    (``load_program``, ``start``, ``wait_done``, ``read_perf`` ...) are ``SequencerMethods``'.

    ``timeout_s``: how long a wait may go without progress, in seconds of the backend's clock
    (``backend.now()``; default ``backend.default_timeout_s`` or 1 s); ``max_polls``: an
    optional bound on the polls of one wait besides it (simulation benches use it)."""

    def __init__(self, backend, timeout_s: float | None = None, max_polls: int | None = None):
        self.backend = backend
        self.timeout_s = float(timeout_s if timeout_s is not None
                               else getattr(backend, "default_timeout_s", DEFAULT_TIMEOUT_S))
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s}: must be > 0 seconds")
        if max_polls is not None and max_polls < 1:
            raise ValueError(f"max_polls={max_polls}: must be >= 1")
        self.max_polls = max_polls
        self._now = getattr(backend, "now", time.monotonic)
        self._done_raw = 0          # DESC_DONE.count as last read
        self._done_total = 0        # ... extended beyond its 16 bits
        self._counters: dict[ErrorCause, int] = {}   # push-cause counters as last read

    # --- words and fields ----------------------------------------------------------------
    async def read32(self, name: str) -> int:
        return await self.backend.read32(_reg(name).offset)

    async def write32(self, name: str, value: int) -> None:
        if not 0 <= value <= _WORD:
            raise ValueError(f"{name}: {value:#x} is not a 32-bit word")
        if name == "CONTROL":
            self._counters.clear()       # clear_counters zeroes what the push checks remember
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

    # --- bounded waits: the one mechanism ---------------------------------------------------
    async def wait_for(self, what: str, poll, *, timeout_s: float | None = None, progress=None,
                       max_polls: int | None = None, describe=None):
        """Await ``poll()`` -> ``(done, value)`` until ``done``; returns ``value``.

        Bounded by ``timeout_s`` seconds (the driver's by default) *without progress*:
        ``progress(value)`` is a mark whose change restarts the clock (None: a plain
        deadline), and by ``max_polls`` polls.  On timeout: ``DriverTimeout`` naming ``what``,
        the caller's ``await describe(value)`` (one line, if given), STATUS, the non-zero error
        counters, and a stuck busy bit.  ``poll`` may raise (a fault ends the wait)."""
        limit = self.timeout_s if timeout_s is None else float(timeout_s)
        if not limit > 0:
            raise ValueError(f"timeout_s={timeout_s}: must be > 0 seconds")
        cap = self.max_polls if max_polls is None else max_polls
        start = last_move = self._now()
        polls, mark = 0, None
        while True:
            done, value = await poll()
            polls += 1
            if done:
                return value
            now = self._now()
            if progress is not None:
                new = progress(value)
                if polls == 1 or new != mark:
                    mark, last_move = new, now
            if now - last_move >= limit or (cap is not None and polls >= cap):
                detail = await describe(value) if describe is not None else None
                raise DriverTimeout(await self._timeout_message(what, now - start, now - last_move, polls,
                                                                progress is not None, detail))
            await self.backend.pause()

    async def wait_until(self, what: str, predicate, name: str, *, timeout_s: float | None = None,
                         progress=None) -> int:
        """Poll register ``name`` until ``predicate(word)``; returns the word (``wait_for``)."""
        async def poll():
            word = await self.read32(name)
            return bool(predicate(word)), word
        return await self.wait_for(what, poll, timeout_s=timeout_s, progress=progress)

    async def _timeout_message(self, what: str, waited: float, still: float, polls: int,
                               tracked: bool, detail: str | None = None) -> str:
        head = (f"timed out waiting for {what}: {waited:.3g} s, {polls} polls"
                + (f", no progress for the last {still:.3g} s" if tracked else ""))
        if detail:
            head = f"{head}; {detail}"
        try:
            st = await self.status()
            errors = {c: n for c, n in (await self.read_errors()).items() if n}
        except DriverError as e:          # the bus itself fails: say so instead
            return f"{head}; STATUS unreadable ({e})"
        parts = [head, "STATUS " + " ".join(f"{k}={v}" for k, v in st.items()),
                 "errors " + (", ".join(f"{c.name}={n}" for c, n in errors.items()) or "none")]
        if st.get("busy"):
            parts.append("STATUS.busy stuck at 1: a DMA transfer or packet never completes")
        return "; ".join(parts)

    async def wait_idle(self, timeout_s: float | None = None) -> dict[str, int]:
        """Wait until the node is idle: STATUS.busy 0 and both queues empty (progress: the
        completion count and the queue levels); a busy bit that stays 1 raises."""
        async def poll():
            st = await self.status()
            done = await self.read_fields("DESC_DONE")
            self._extend(done["count"])
            levels = (await self.read_fields("META_LEVEL"))["level"], (await self.read_fields("DESC_LEVEL"))["level"]
            idle = not st["busy"] and st["meta_queue_empty"] and st["desc_queue_empty"]
            return idle, (st, self._done_total, levels)
        value = await self.wait_for("the node to go idle", poll, timeout_s=timeout_s,
                                    progress=lambda v: (v[1], v[2]))
        return value[0]

    # --- node set-up -------------------------------------------------------------------------
    async def check_id(self) -> int:
        """An MCF node of this register map: ID and VERSION checked; returns VERSION."""
        got = await self.read32("ID")
        if got != ID_VALUE:
            raise DriverError(f"no MCF node here: ID reads {got:#010x}, expected {ID_VALUE:#010x}")
        version = await self.read32("VERSION")
        if version != SPEC_VERSION:
            raise DriverError(f"the node was built from spec {version:#010x}, this mcf is spec {SPEC_VERSION:#010x} "
                              f"(the VERSION fingerprint of the wire format, registers and instruction set): "
                              f"build and load a bitstream from this checkout")
        return version

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
    async def push_meta(self, meta: Meta, wait: bool = True, check: bool = True) -> None:
        """Stage ``meta`` in META_W0..3 and push it; waits (bounded) for queue space unless
        ``wait=False``.  A push the node refuses (full queue: META_QUEUE_FULL counts it)
        raises ``PushRefused`` unless ``check=False``."""
        word = meta.to_int()
        for i in range(META_WORDS):
            await self.write32(f"META_W{i}", (word >> (DATA_BITS * i)) & _WORD)
        if wait:
            await self.wait_until("space in the metadata queue",
                                  lambda w: not _reg("STATUS").decode(w)["meta_queue_full"], "STATUS")
        await self._push("META_PUSH", META_CAUSES, f"Meta op={getattr(meta.op, 'name', meta.op)} dst={meta.dst}", check)

    async def push_descriptor(self, desc: Descriptor, wait: bool = True, check: bool = True) -> None:
        """Stage and push a DMA descriptor; waits (bounded) for queue space unless
        ``wait=False``.  The hardware validates it: a rejected or refused one raises
        ``PushRefused`` naming the ``ErrorCause`` unless ``check=False``."""
        word = desc.pack()
        for i in range(DESC_WORDS):
            await self.write32(f"DESC_W{i}", (word >> (DATA_BITS * i)) & _WORD)
        if wait:
            await self.wait_until("space in the descriptor queue",
                                  lambda w: not _reg("STATUS").decode(w)["desc_queue_full"], "STATUS")
        what = (f"descriptor {desc.dir.name} addr={desc.addr:#x} length={desc.length} "
                f"buffer={desc.buffer} tag={desc.tag}")
        await self._push("DESC_PUSH", DESC_CAUSES, what, check)

    async def load_from(self, memory, offset: int, length: int, buffer: int = 0, tag: int = 0,
                        wait: bool = True, check: bool = True) -> None:
        """LOAD ``length`` bytes at ``offset`` of ``memory`` (a ``DmaMemory``) into ping-pong
        ``buffer``: the range is flushed first, so the PL reads what the CPU wrote."""
        memory.flush(offset, length)
        await self.push_descriptor(Descriptor(memory.phys(offset), length, buffer, DmaDir.LOAD, tag), wait, check)

    async def store_to(self, memory, offset: int, length: int, tag: int = 0, wait: bool = True,
                       check: bool = True) -> None:
        """STORE the next ``length`` bytes the node delivers to ``offset`` of ``memory``.  When
        DESC_DONE says it completed, read it with ``memory.fetch`` (invalidate, then read)."""
        memory.invalidate(offset, length)      # no dirty line of the range may be written back over it
        await self.push_descriptor(Descriptor(memory.phys(offset), length, 0, DmaDir.STORE, tag), wait, check)

    async def _push(self, register: str, causes, what: str, check: bool) -> None:
        """Pulse ``register``; with ``check``, read ``causes``' counters around it (the values
        after the last push are kept, so one read each per push) and report a move."""
        if not check:
            await self.write_fields(register, push=1)
            self._counters.clear()       # an unchecked push may move them
            return
        before = {}
        for c in causes:
            before[c] = self._counters[c] if c in self._counters else await self.read32(f"ERR_{c.name}")
        await self.write_fields(register, push=1)
        after = {c: await self.read32(f"ERR_{c.name}") for c in causes}
        self._counters.update(after)
        for c in causes:
            if after[c] != before[c]:
                raise PushRefused(f"the node refused {what}: {c.name} (ERR_{c.name} {before[c]} -> {after[c]})", c)
            if after[c] == _WORD:
                raise PushRefused(f"cannot tell whether the node took {what}: ERR_{c.name} is saturated "
                                  "(clear the error counters)", c)

    def _extend(self, raw: int) -> int:
        """DESC_DONE.count ``raw`` as a count beyond its 16 bits (modulo arithmetic on the
        difference from the last read)."""
        width = _reg("DESC_DONE").field("count").width
        self._done_total += (raw - self._done_raw) % (1 << width)
        self._done_raw = raw
        return self._done_total

    async def desc_done_total(self) -> int:
        """Descriptors completed since reset (DESC_DONE.count extended beyond 16 bits)."""
        return self._extend((await self.read_fields("DESC_DONE"))["count"])

    async def wait_desc_done(self, count: int, timeout_s: float | None = None) -> dict[str, int]:
        """Wait until ``count`` descriptors have completed since reset (at or beyond: a count
        that overshoots returns; 65536 waits for the 16-bit counter's wrap); returns the
        DESC_DONE fields.  The timeout counts from the last completion seen."""
        if count < 0:
            raise ValueError(f"count={count}: must be >= 0")

        async def poll():
            fields = await self.read_fields("DESC_DONE")
            return self._extend(fields["count"]) >= count, fields
        return await self.wait_for(f"{count} completed descriptors", poll, timeout_s=timeout_s,
                                   progress=lambda f: self._done_total)

    # --- route table -------------------------------------------------------------------------
    async def write_route(self, route_id: int, entry: dict) -> None:
        word = ROUTE_ENTRY.pack({"reserved": 0, **entry})
        await self.write_fields("ROUTE_INDEX", index=route_id)
        await self.write32("ROUTE_DATA", word)

    async def read_route(self, route_id: int) -> dict[str, int]:
        await self.write_fields("ROUTE_INDEX", index=route_id)
        return ROUTE_ENTRY.unpack(await self.read32("ROUTE_DATA"))

    # --- 10GBASE-R port ------------------------------------------------------------------------
    async def write_mac(self, index: int, mac: int) -> None:
        """Store MAC address ``mac`` (48-bit, first byte on the wire most significant) at
        entry ``index`` of the port's MAC table (a node id or a destination-group tag)."""
        if not 0 <= index < MAC_TABLE_ENTRIES:
            raise ValueError(f"MAC table index {index} out of range [0, {MAC_TABLE_ENTRIES - 1}]")
        if not 0 <= mac < (1 << MAC_BITS):
            raise ValueError(f"MAC address {mac:#x} is not 48 bits")
        await self.write_fields("ETH_MAC_INDEX", index=index)
        await self.write32("ETH_MAC_LO", mac & _WORD)
        await self.write_fields("ETH_MAC_HI", mac_hi=mac >> DATA_BITS)
        await self.write_fields("ETH_MAC_WRITE", write=1)

    async def link_status(self) -> dict[LinkStatus, bool]:
        word = await self.read32("ETH_STATUS")
        return {s: bool((word >> s) & 1) for s in LinkStatus}

    async def wait_link_up(self) -> dict[LinkStatus, bool]:
        """Wait (bounded) until ETH_STATUS.link_up; the timeout names what is missing."""
        try:
            await self.wait_until("the 10GBASE-R link", lambda w: (w >> LinkStatus.LINK_UP) & 1, "ETH_STATUS")
        except DriverTimeout:
            status = await self.link_status()
            raise DriverTimeout("timed out waiting for the 10GBASE-R link: " + ", ".join(
                f"{s.name.lower()}={int(v)}" for s, v in status.items())) from None
        return await self.link_status()

    async def read_seq_gaps(self, clear: bool = False) -> int:
        """Frames lost on the receive link (gaps in the link sequence number).  ``clear``
        subtracts exactly the value read (ETH_SEQ_GAPS is RSUB), so a gap that arrives
        between the read and the write is kept, never lost."""
        missing = await self.read32("ETH_SEQ_GAPS")
        if clear and missing:
            await self.write32("ETH_SEQ_GAPS", missing)
        return missing

    # --- errors and interrupts -----------------------------------------------------------
    async def read_errors(self) -> dict[ErrorCause, int]:
        return {c: await self.read32(f"ERR_{c.name}") for c in ErrorCause}

    async def clear_errors(self) -> None:
        await self.update_fields("CONTROL", clear_counters=1)
        self._counters.clear()

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

    def __init__(self, backend, timeout_s: float | None = None, max_polls: int | None = None):
        self._driver = Driver(backend, timeout_s, max_polls)
        self.backend = backend

    def __getattr__(self, name):
        attr = getattr(self._driver, name)
        if inspect.iscoroutinefunction(attr):
            @functools.wraps(attr)
            def call(*args, **kwargs):
                return run_sync(attr(*args, **kwargs))
            return call
        return attr
