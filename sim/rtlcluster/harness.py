"""The cocotb side of the RTL cluster (``ClusterTop``): what each node's board would be.

Per node k:

* **DDR**: cocotbext-axi ``AxiRam`` on every AXI4 master of the node (``m_axi__k``, and
  ``m_axi1__k``, ... for further HP ports: the shared build has two, weight loader k on HP port
  k, ``NodeConfig.ddr_masters``), each its own slave with its own pauses, all sharing one
  ``PhysicalDdr``: the node's DMA window
  ``[phys_base, phys_base + size)`` of its physical address space.  An access outside it reaches
  no memory: the AXI slave answers SLVERR and ``PhysicalDdr.violations`` records it (the node's
  own firewall should never let one through; the harness checks).
* **PS**: an ``AxiLiteMaster`` on ``s_axil__k`` under ``mcf.sw.driver.Driver`` over
  ``CocotbBackend`` (the very code that runs on a board), and ``SimDmaMemory``, the runtime's view
  of the window (``DmaMemory``: ``phys_base``, ``size``, ``write``/``read``, ``flush``/
  ``invalidate``).  Like the board's HP port, it is not coherent: the CPU's copy and DDR are
  apart until ``flush`` (CPU -> DDR) or ``invalidate`` (DDR -> CPU), so a runtime that forgets
  one fails here as it would on the board.

And the switch: its forwarding table (``configure_switch``), fault injection (``inject``), its
counters and per-link byte counts (``link_bytes``).  Random pauses on the DDR channels are
optional (``pause_probability``).  ``watchdog`` bounds the wall-clock time of a run.  The top
may have more node slots than the run uses (one build serves runs of several sizes): the idle
slots get no PS and no DDR, their inputs held at 0.
"""
from __future__ import annotations

import itertools
import logging
import random
import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

from mcf.spec.node import NodeConfig
from mcf.sw.driver import Driver
from mcf.sw.driver.cocotb_backend import CocotbBackend
from mcf.sw.driver.memory import HostMemory

from .switch import forwarding_table


class WallClockExceeded(AssertionError):
    """A run went past its wall-clock bound."""


class PhysicalDdr:
    """A node's physical address space as cocotbext-axi's memory (``mem=``): bytes only inside
    the window; any access outside raises (the AXI slave answers SLVERR) and is recorded."""

    def __init__(self, phys_base: int, size: int, addr_bits: int):
        if phys_base < 0 or size <= 0 or phys_base + size > 1 << addr_bits:
            raise ValueError(f"window {phys_base:#x}+{size:#x} outside a {addr_bits}-bit address space")
        self.phys_base, self.size = phys_base, size
        self.ddr = bytearray(size)
        self.violations: list[tuple[str, int, int]] = []
        self._len = 1 << addr_bits

    def __len__(self) -> int:
        return self._len

    def _span(self, key: slice, what: str) -> tuple[int, int]:
        start, stop = key.start, key.stop
        if not (self.phys_base <= start <= stop <= self.phys_base + self.size):
            self.violations.append((what, start, stop - start))
            raise OSError(f"{what} of {start:#x}+{stop - start:#x} outside the DDR window")
        return start - self.phys_base, stop - self.phys_base

    def __getitem__(self, key: slice) -> bytes:
        a, b = self._span(key, "read")
        return bytes(self.ddr[a:b])

    def __setitem__(self, key: slice, data) -> None:
        a, b = self._span(key, "write")
        self.ddr[a:b] = data


class SimDmaMemory(HostMemory):
    """The runtime's DMA memory over a ``PhysicalDdr``: ``HostMemory`` (a CPU view apart from DDR,
    joined by ``flush`` and ``invalidate``, as on the board's non-coherent HP port) whose DDR is
    the simulated node's memory."""

    def __init__(self, ddr: PhysicalDdr):
        super().__init__(ddr.size, ddr.phys_base, ddr=ddr.ddr)


def _exists(dut, name: str) -> bool:
    try:
        getattr(dut, name)
    except AttributeError:
        return False
    return True


def hp_prefixes(dut, node: int) -> list[str]:
    """The AXI4 master prefixes of ``node`` in the top, HP port 0 first: ``m_axi__k`` then
    ``m_axi1__k``, ``m_axi2__k``, ... (a Node with ports ``m_axi``, ``m_axi1``, ...), or
    ``m_axi__k__p`` (a Node with an array ``m_axi``)."""
    if _exists(dut, f"m_axi__{node}__arvalid"):
        return [f"m_axi__{node}"] + [f"m_axi{p}__{node}" for p in itertools.takewhile(
            lambda p: _exists(dut, f"m_axi{p}__{node}__arvalid"), itertools.count(1))]
    found = [f"m_axi__{node}__{p}" for p in itertools.takewhile(
        lambda p: _exists(dut, f"m_axi__{node}__{p}__arvalid"), itertools.count())]
    if not found:
        raise AttributeError(f"the top has no AXI4 master of node {node} (m_axi__{node}__…)")
    return found


class NodePort:
    """One node of the cluster as its PS sees it: ``driver``, ``memory`` (DMA window), ``ddr``."""

    def __init__(self, index: int, driver: Driver, memory: SimDmaMemory, ddr: PhysicalDdr, rams: list):
        self.index, self.driver, self.memory, self.ddr, self.rams = index, driver, memory, ddr, rams


#: Cycles between two polls of the PS's waits (``CocotbBackend.pause``).  Every figure a run reports
#: comes from the nodes' own counters (CYCLES, RETIRED_EX, ...), not from when the PS saw them done,
#: so the interval changes no result; each poll is several AXI-Lite reads, each a handful of cocotb
#: coroutine steps in Python, which is where a cluster run spends its CPU (cocotb's profile of the
#: 2-node tiny run: 30 056 reads in 100 k cycles at 8 cycles).  Measured on that run (prefill of 16
#: tokens + 2 decode steps, warm build): 68.5 s CPU of the simulator at 8 cycles, 61.4 s at 128, the
#: same TTFT (70 840 cycles).  A wait ends at most this many cycles after the node is done.
POLL_CYCLES = 128


class ClusterHarness:
    def __init__(self, dut, nodes: int, config: NodeConfig, *, phys_base: int = 0x1000_0000,
                 window_bytes: int = 1 << 20, pause_probability: float = 0.0, seed: int = 1,
                 max_polls: int = 100_000, poll_cycles: int = POLL_CYCLES):
        self.dut, self.n, self.config = dut, nodes, config
        self.period_ns = 1e9 / config.clock_hz
        self.nodes: list[NodePort] = []
        for k in range(nodes):
            getattr(dut, f"s_axil__{k}__awvalid")            # the port exists
            ddr = PhysicalDdr(phys_base, window_bytes, config.ddr_addr_bits)
            rams = [AxiRam(AxiBus.from_prefix(dut, prefix, bus_separator="__"), dut.clk, dut.rst, mem=ddr)
                    for prefix in hp_prefixes(dut, k)]
            if pause_probability:
                rng = random.Random(seed * 1000 + k)
                for ram in rams:
                    for ch in (ram.write_if.aw_channel, ram.write_if.w_channel, ram.write_if.b_channel,
                               ram.read_if.ar_channel, ram.read_if.r_channel):
                        ch.set_pause_generator(_pauses(rng.randrange(1 << 30), pause_probability))
            master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, f"s_axil__{k}", bus_separator="__"),
                                   dut.clk, dut.rst)
            for model in [master] + rams:        # one log line per bus transaction is too many
                for obj in (model, getattr(model, "write_if", None), getattr(model, "read_if", None)):
                    if obj is not None and hasattr(obj, "log"):
                        obj.log.setLevel(logging.WARNING)
            driver = Driver(CocotbBackend(master, dut.clk, poll_cycles=poll_cycles), max_polls=max_polls)
            self.nodes.append(NodePort(k, driver, SimDmaMemory(ddr), ddr, rams))
        self.slots = sum(1 for _ in itertools.takewhile(lambda k: _exists(dut, f"s_axil__{k}__awvalid"),
                                                           itertools.count()))
        if not 1 <= nodes <= self.slots:
            raise ValueError(f"nodes={nodes}: the top has {self.slots} node slots")
        for k in range(self.slots):
            getattr(dut, f"switch_drop_at__{k}").value = 0
            getattr(dut, f"switch_corrupt_at__{k}").value = 0
        for k in range(nodes, self.slots):       # idle slots: no PS, DDR answers nothing
            for name in ("awvalid", "wvalid", "arvalid", "bready", "rready"):
                getattr(dut, f"s_axil__{k}__{name}").value = 0
            for prefix in hp_prefixes(dut, k):
                for name in ("awready", "wready", "bvalid", "arready", "rvalid"):
                    getattr(dut, f"{prefix}__{name}").value = 0
        dut.switch_table__en.value = 0

    # --- time ---------------------------------------------------------------------------------
    async def start(self, reset_cycles: int = 8) -> None:
        """Start the node clock and hold reset."""
        cocotb.start_soon(Clock(self.dut.clk, self.period_ns, unit="ns").start())
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, reset_cycles)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    def cycle(self) -> int:
        """Node-clock cycles since time 0."""
        return int(get_sim_time("ns") / self.period_ns)

    def watchdog(self, seconds: float, what: str = "the run", check_every: int = 2000):
        """A task that fails the test once ``seconds`` of wall-clock time have passed."""
        deadline = time.monotonic() + seconds

        async def run():
            while True:
                await ClockCycles(self.dut.clk, check_every)
                if time.monotonic() > deadline:
                    raise WallClockExceeded(f"{what} exceeded its wall-clock bound of {seconds:g} s "
                                            f"at cycle {self.cycle()}")
        return cocotb.start_soon(run())

    # --- switch -------------------------------------------------------------------------------
    async def configure_switch(self, route_tables: list[dict[int, dict]]) -> dict[int, int]:
        """Fill the switch's forwarding table from the nodes' route tables; returns it."""
        table = forwarding_table(route_tables, self.config.route_entries)
        dut = self.dut
        for rid, mask in sorted(table.items()):
            dut.switch_table__addr.value, dut.switch_table__data.value = rid, mask
            dut.switch_table__en.value = 1
            await RisingEdge(dut.clk)
        dut.switch_table__en.value = 0
        await RisingEdge(dut.clk)
        return table

    def inject(self, drop_at: dict[int, int] | None = None, corrupt_at: dict[int, int] | None = None):
        """Drop / corrupt the k-th packet (1-based) that node n sends: ``{n: k}``."""
        for n, k in (drop_at or {}).items():
            getattr(self.dut, f"switch_drop_at__{n}").value = k
        for n, k in (corrupt_at or {}).items():
            getattr(self.dut, f"switch_corrupt_at__{n}").value = k

    def _read(self, name: str) -> int:
        return int(getattr(self.dut, name).value)

    def switch_counters(self) -> dict:
        return {
            "dropped": self._read("switch_dropped"), "corrupted": self._read("switch_corrupted"),
            "unrouted": self._read("switch_unrouted"),
            "packets_in": [self._read(f"switch_in_packets__{k}") for k in range(self.n)],
            "packets_out": [self._read(f"switch_out_packets__{k}") for k in range(self.n)],
        }

    def link_bytes(self) -> dict[str, int]:
        """MCF bytes (header + payload) on every link: ``"k->switch"`` and ``"switch->k"``."""
        out = {}
        for k in range(self.n):
            out[f"{k}->switch"] = self._read(f"switch_in_bytes__{k}")
            out[f"switch->{k}"] = self._read(f"switch_out_bytes__{k}")
        return out

    def violations(self) -> dict[int, list]:
        """DDR accesses outside a node's window that reached its memory (none expected)."""
        return {p.index: list(p.ddr.violations) for p in self.nodes if p.ddr.violations}


def _pauses(seed: int, probability: float):
    rng = random.Random(seed)
    return (rng.random() < probability for _ in itertools.count())
