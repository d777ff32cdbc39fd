"""Helpers for cocotb test modules (run inside the simulator)."""
from __future__ import annotations

import itertools
import json
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout


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
