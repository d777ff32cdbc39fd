"""Helpers for cocotb benches (they run inside the simulator): parameters, clock and reset,
pause generators, bounded waits, drivers for ``amaranth.lib.stream`` ports, and the AXI4
memory-side helpers of the DMA benches."""
from __future__ import annotations

import itertools
import json
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge, Timer, with_timeout
from cocotbext.axi import AxiRamRead, AxiRamWrite

from mcf.spec import ErrorCause


def params() -> dict:
    """The ``params`` that ``mcf.sim.runner.run_cocotb`` passed to this simulation."""
    return json.loads(os.environ.get("MCF_PARAMS", "{}"))


async def start(dut, period_ns: int = 10, reset_cycles: int = 4):
    """Start ``dut.clk`` and hold ``dut.rst`` for a few cycles (Amaranth's sync domain)."""
    cocotb.start_soon(Clock(dut.clk, period_ns, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, reset_cycles)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


def pauses(seed: int, probability: float = 0.3):
    """A cocotbext-axi pause generator: pause on a random ``probability`` of cycles."""
    rng = random.Random(seed)
    return (rng.random() < probability for _ in itertools.count())


async def bounded(coro, cycles_ns: float, what: str):
    """Await ``coro`` for at most ``cycles_ns`` of simulated time; fail with ``what`` otherwise."""
    from cocotb.triggers import SimTimeoutError
    try:
        return await with_timeout(coro, cycles_ns, "ns")
    except SimTimeoutError:
        raise AssertionError(f"timed out after {cycles_ns} ns waiting for {what}") from None


async def refused(push, cause: ErrorCause):
    """Await the driver push ``push``, which the node must refuse with ``cause``: the driver
    reports it (``PushRefused``), it does not pass silently."""
    from mcf.sw.driver import PushRefused
    try:
        await push
    except PushRefused as e:
        assert e.cause == cause, f"refused as {e.cause.name}, expected {cause.name}: {e}"
        return e
    raise AssertionError(f"the driver did not report a push refused as {cause.name}")


# --- amaranth.lib.stream ports ---------------------------------------------------------------
class StreamSource:
    def __init__(self, dut, name, clk, pause=None):
        self.payload = getattr(dut, f"{name}__payload")
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.clk, self.pause = clk, pause
        self.valid.value = 0

    async def send(self, items):
        for item in items:
            while self.pause is not None and next(self.pause):
                self.valid.value = 0
                await RisingEdge(self.clk)
            self.payload.value = item
            self.valid.value = 1
            while True:
                await ReadOnly()
                taken = bool(self.ready.value)
                await RisingEdge(self.clk)
                if taken:
                    break
            self.valid.value = 0


class StreamSink:
    def __init__(self, dut, name, clk, pause=None):
        self.payload = getattr(dut, f"{name}__payload")
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.clk, self.pause = clk, pause
        self.ready.value = 0

    async def recv(self, count):
        out = []
        while len(out) < count:
            self.ready.value = 0 if (self.pause is not None and next(self.pause)) else 1
            await ReadOnly()
            if self.valid.value and self.ready.value:
                out.append(int(self.payload.value))
            await RisingEdge(self.clk)
        self.ready.value = 0
        return out


async def write_port(dut, name, clk, writes):
    en, addr, data = (getattr(dut, f"{name}__{s}") for s in ("en", "addr", "data"))
    for a, d in writes:
        en.value, addr.value, data.value = 1, a, d
        await RisingEdge(clk)
    en.value = 0


# --- AXI4 memory side (DMA benches) --------------------------------------------------------
class FaultyRamRead(AxiRamRead):
    """``AxiRamRead`` that answers SLVERR for bursts starting in ``poison`` (a range)."""
    poison = range(0)

    async def _read(self, address, length):
        if address in self.poison:
            raise OSError("poisoned")
        return await super()._read(address, length)


class FaultyRamWrite(AxiRamWrite):
    """``AxiRamWrite`` that answers SLVERR for bursts starting in ``poison`` (a range)."""
    poison = range(0)

    async def _write(self, address, data):
        if address in self.poison:
            raise OSError("poisoned")
        return await super()._write(address, data)


class AxiBurstMonitor:
    """Checks every burst on one address channel of ``m_axi`` (``prefix`` "ar" or "aw": INCR,
    full-width beats, aligned, no 4 KiB crossing) and tracks bursts in flight."""

    def __init__(self, dut, prefix: str, bus_bytes: int):
        self.dut, self.p, self.bus_bytes = dut, prefix, bus_bytes
        self.bursts, self.in_flight, self.max_in_flight = [], 0, 0
        self.first_cycle = self.last_cycle = None
        self.errors = []
        self.cycle = 0

    def sig(self, name):
        return getattr(self.dut, f"m_axi__{name}").value

    async def run(self):
        p = self.p
        while True:
            await FallingEdge(self.dut.clk)
            self.cycle += 1
            if self.sig(f"{p}valid") and self.sig(f"{p}ready"):
                addr, beats = self.sig(f"{p}addr").to_unsigned(), self.sig(f"{p}len").to_unsigned() + 1
                size, burst = self.sig(f"{p}size").to_unsigned(), self.sig(f"{p}burst").to_unsigned()
                if burst != 1 or (1 << size) != self.bus_bytes or addr % self.bus_bytes:
                    self.errors.append(f"burst {addr:#x}: burst={burst} size={size}")
                if addr // 4096 != (addr + beats * self.bus_bytes - 1) // 4096:
                    self.errors.append(f"burst {addr:#x}+{beats} beats crosses 4 KiB")
                self.bursts.append((addr, beats))
                self.in_flight += 1
                if self.first_cycle is None:
                    self.first_cycle = self.cycle
            end = (self.sig("rvalid") and self.sig("rready") and self.sig("rlast")) if p == "ar" \
                else (self.sig("bvalid") and self.sig("bready"))
            if end:
                self.in_flight -= 1
                self.last_cycle = self.cycle
            self.max_in_flight = max(self.max_in_flight, self.in_flight)


async def reset_first(dut):
    """Assert reset before the first clock edge (no edge samples undriven inputs)."""
    dut.rst.value = 1
    await Timer(1, "ns")


async def drive_descriptors(dut, descs, rng, gap_p):
    """DMA descriptors into ``dut.desc`` (driven on falling edges, random gaps)."""
    dut.desc__valid.value = 0
    for d in descs:
        while rng.random() < gap_p:
            await FallingEdge(dut.clk)
        await FallingEdge(dut.clk)
        dut.desc__payload.value = d.pack()
        dut.desc__valid.value = 1
        while True:
            await Timer(1, "ns")           # ready may depend on the payload
            if dut.desc__ready.value:
                break
            await FallingEdge(dut.clk)
        await RisingEdge(dut.clk)
        dut.desc__valid.value = 0


def collect_done(dut, out: list):
    """Append ``(done_tag, resp_error)`` of every completion of a DMA engine to ``out``."""
    async def run():
        while True:
            await FallingEdge(dut.clk)
            if dut.done.value:
                out.append((dut.done_tag.value.to_unsigned(), int(dut.resp_error.value)))
    return cocotb.start_soon(run())


async def falling_edges(dut, n):
    for _ in range(n):
        await FallingEdge(dut.clk)


def report(p, figures: dict):
    """Write a benchmark's figures to ``params()["report"]`` (JSON) when it is set."""
    if p.get("report"):
        with open(p["report"], "w") as f:
            json.dump(figures, f)


# --- a NIC's route-table port and error strobes -----------------------------------------------
async def write_routes(dut, table):
    """Write ``{route_id: RouteEntry}`` through a NIC's ``route`` port."""
    dut.route__r_en.value = 0
    for rid, entry in sorted(table.items()):
        dut.route__addr.value = rid
        dut.route__w_data.value = entry.word()
        dut.route__w_en.value = 1
        await RisingEdge(dut.clk)
    dut.route__w_en.value = 0


async def read_route(dut, rid):
    """One route-table word read back through a NIC's ``route`` port."""
    dut.route__addr.value = rid
    dut.route__r_en.value = 1
    await RisingEdge(dut.clk)
    dut.route__r_en.value = 0
    await RisingEdge(dut.clk)
    return dut.route__r_data.value.to_unsigned()


class ErrorMonitor:
    """Counts the strobes of ``dut.errors`` per ``ErrorCause`` bit."""

    def __init__(self, dut):
        self.counts = [0] * len(ErrorCause)
        self.dut = dut
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            await RisingEdge(self.dut.clk)
            v = self.dut.errors.value.to_unsigned()
            for c in range(len(self.counts)):
                if v >> c & 1:
                    self.counts[c] += 1
