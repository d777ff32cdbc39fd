"""Cocotb-side harness of RTL nodes (``mcf.hw.node``): per node a cocotbext-axi ``AxiRam`` as
its DDR on every HP port, an ``AxiLiteMaster`` as its PS behind the one ``Driver``, random
pauses on every channel, and helpers to load and run instruction programs.

    nodes = await start_nodes(dut, [("axil__0", "m_axi__0"), ("axil__1", "m_axi__1")], ram_bytes)
    await nodes[0].load(program, base=PROG)            # write it, point the sequencer at it
    await nodes[0].driver.start()

The PS runtime's own runs on RTL nodes (``Session`` with the ``rtl`` backend) go through the
cluster harness (``mcf.sim.rtlcluster``), which serves one node as well as four.
"""
from __future__ import annotations

from dataclasses import dataclass

from cocotb.triggers import Timer
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

from mcf.sim.cocotb_util import pauses, start
from mcf.spec.isa import encode_program
from mcf.sw.driver import CocotbBackend, Driver


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

