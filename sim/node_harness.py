"""Cocotb-side helpers of RTL nodes (``mcf.hw.node``) run as instruction-program benches: a node
as its bench sees it (its DDR's ``AxiRam``, its ``Driver``), configured and loaded with programs.

    h = ClusterHarness(dut, 2, config, phys_base=0, window_bytes=ram_bytes)   # mcf.sim.rtlcluster
    await h.start()
    nodes = [RtlNode(p.index, p.rams[0], p.driver) for p in h.nodes]
    await nodes[0].configure(2, ram_bytes, routes)
    await nodes[0].load(program, base=PROG)            # write it, point the sequencer at it
    await nodes[0].driver.start()

The nodes live in the RTL cluster (``mcf.sim.rtlcluster``: its harness gives every node its DDR,
PS and random pauses), which serves the PS runtime's own runs (``Session`` with the ``rtl``
backend) as well as these benches (tests/hw/test_node.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from cocotbext.axi import AxiRam

from mcf.spec.isa import encode_program
from mcf.sw.driver import Driver


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
