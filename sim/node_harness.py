"""Cocotb-side harness of RTL nodes (``mcf.hw.node``): per node a cocotbext-axi ``AxiRam`` as
its DDR on every HP port, an ``AxiLiteMaster`` as its PS behind the one ``Driver``, random
pauses on every channel, and helpers to load and run instruction programs.

    nodes = await NodeHarness.start(dut, count=2, prefixes=[("axil__0", "m_axi__0"), ...])
    await nodes[0].run_program(program, base=PROG)     # write, load_program, start

``AxiRamMemory`` is the runtime's DMA memory (``mcf.sw.driver.memory.DmaMemory``) over a node's
``AxiRam``, and ``node_backend`` makes one RTL node a backend of the PS runtime
(``mcf.sw.runtime.backend``), so ``Session.main()`` runs on it inside a cocotb test.
"""
from __future__ import annotations

from dataclasses import dataclass

from cocotb.triggers import Timer
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

from mcf.sim.cocotb_util import pauses, start
from mcf.spec.isa import encode_program
from mcf.sw.driver import CocotbBackend, Driver
from mcf.sw.driver.memory import DmaMemory
from mcf.sw.runtime.backend import Backend


class AxiRamMemory(DmaMemory):
    """A node's ``AxiRam`` as the runtime's DMA memory: the RAM's address 0 is ``phys_base``
    (the bus model has no CPU cache: ``flush`` and ``invalidate`` only count)."""

    def __init__(self, ram: AxiRam, size: int, phys_base: int = 0):
        self.ram, self.size, self.phys_base = ram, int(size), int(phys_base)
        self.flushes = self.invalidates = 0

    def write(self, offset: int, data: bytes) -> None:
        o, n = self._range(offset, len(data))
        self.ram.write(o, bytes(data))

    def read(self, offset: int, n: int) -> bytes:
        o, n = self._range(offset, n)
        return bytes(self.ram.read(o, n))

    def flush(self, offset: int = 0, n: int | None = None) -> None:
        self._whole(offset, n)
        self.flushes += 1

    def invalidate(self, offset: int = 0, n: int | None = None) -> None:
        self._whole(offset, n)
        self.invalidates += 1


@dataclass
class RtlNode:
    index: int
    ram: AxiRam
    driver: Driver

    async def configure(self, num_nodes: int, ram_bytes: int, routes: dict) -> None:
        drv = self.driver
        await drv.check_id()
        await drv.configure(node_id=self.index, num_nodes=num_nodes, window_base=0, window_size=ram_bytes)
        for rid, entry in sorted(routes.items()):
            await drv.write_route(rid, {"port_mask": 0, "local": 0, "fan_in": 0, "valid": 1, **entry})
        await drv.enable()

    async def load(self, program, base: int) -> None:
        """Write ``program`` (typed instructions) at ``base`` and point the sequencer at it."""
        self.ram.write(base, encode_program(program))
        await self.driver.load_program(base, len(program))


async def start_nodes(dut, names: list[tuple[str, str]], ram_bytes: int, seed: int = 1,
                      pause_p: float = 0.2, poll_cycles: int = 16) -> list[RtlNode]:
    """Reset ``dut`` and attach a RAM and a PS to each node (``names``: (AXI-Lite prefix, AXI4
    prefix) per node)."""
    dut.rst.value = 1
    await Timer(1, "ns")
    nodes = []
    for i, (lite, full) in enumerate(names):
        master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, lite, bus_separator="__"), dut.clk, dut.rst)
        ram = AxiRam(AxiBus.from_prefix(dut, full, bus_separator="__"), dut.clk, dut.rst, size=ram_bytes)
        if pause_p:
            for k, ch in enumerate([ram.write_if.aw_channel, ram.write_if.w_channel, ram.write_if.b_channel,
                                    ram.read_if.ar_channel, ram.read_if.r_channel]):
                ch.set_pause_generator(pauses(seed * 100 + 10 * i + k, pause_p))
        nodes.append(RtlNode(i, ram, Driver(CocotbBackend(master, dut.clk, poll_cycles=poll_cycles),
                                            max_polls=20_000)))
    await start(dut)
    return nodes


def node_backend(nodes: list[RtlNode], clock_hz: int, name: str = "rtl"):
    """A runtime backend factory over RTL nodes already started (``start_nodes``): the
    runtime's ``factory(nodes, node_config, ddr_bytes, topology)``; it refuses a cluster size
    or a DDR larger than the bench built.  ``factory.config`` is the NodeConfig the runtime
    asked for (the bench checks it is the one its RTL was built from)."""
    def factory(n, config, ddr_bytes, topology="switch"):
        if n != len(nodes):
            raise ValueError(f"the bench has {len(nodes)} RTL nodes, the runtime wants {n}")
        mems = [AxiRamMemory(node.ram, node.ram.size) for node in nodes]
        if ddr_bytes > mems[0].size:
            raise ValueError(f"the runtime needs {ddr_bytes:#x} bytes of DDR, the bench has {mems[0].size:#x}")
        factory.config = config
        return Backend(name, [node.driver for node in nodes], mems, clock_hz)
    factory.config = None
    return factory
