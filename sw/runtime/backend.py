"""What the runtime runs on: a *backend* gives, per node, a ``Driver`` (``mcf.sw.driver``) and a
DDR window (a DMA-memory object: ``write``, ``read``, ``put``, ``fetch``, ``flush``,
``invalidate``, ``phys``, ``phys_base``, ``size``), and runs the runtime's coroutine.

A backend factory is called as ``factory(nodes, node_config, ddr_bytes, topology)`` and returns
a ``Backend``.  ``SimBackend`` is the ISA simulator's (``mcf.sw.golden.node``): the functional
schedule by default, or any costs (the model backend of ``mcf run --backend model`` passes the
timing model of ``mcf.sim.cluster.isa_model``).  The RTL cluster (``--backend rtl``,
``mcf.sim.rtlcluster.backend``) and a board implement the same interface; the RTL one runs the
whole session in its simulator process (``run_session``).

Optional reports a backend may give (None when it cannot measure them): ``link_bytes()`` (wire
bytes per directed link), ``kv_course()`` (per node, the (cycle, KV blocks readable) changes of
its replica directory).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from mcf.spec.node import NodeConfig
from mcf.sw.driver import Driver
from mcf.sw.golden.node import ClusterSim, NodeRegisters


@dataclass
class Backend:
    name: str
    drivers: list
    memories: list
    clock_hz: int
    extras: dict = field(default_factory=dict)

    def run(self, coro):
        """Run the runtime's coroutine to completion (an event loop, or the simulator's)."""
        return asyncio.run(coro)

    def run_session(self, session):
        """Run a whole ``Session`` (its ``main()``) and return its report.  A backend whose
        nodes live in another process (the RTL cluster's simulator) runs the session there."""
        return self.run(session.main())

    def link_bytes(self) -> dict | None:
        return None

    def kv_course(self) -> list | None:
        return None

    def close(self) -> None:
        for m in self.memories:
            m.close()


class SimBackend(Backend):
    """N ISA-simulated nodes (``ClusterSim``) behind their register blocks."""

    def __init__(self, cluster: ClusterSim, name: str = "isa", poll_cycles: int = 1 << 14):
        regs = [NodeRegisters(cluster, i, poll_cycles) for i in range(len(cluster.nodes))]
        super().__init__(name, [Driver(r, max_polls=100_000) for r in regs], [n.ddr for n in cluster.nodes],
                         cluster.cfg.clock_hz)
        self.cluster = cluster

    def link_bytes(self) -> dict:
        return self.cluster.net.wire_bytes()

    def kv_course(self) -> list:
        return [list(n.dir_log) for n in self.cluster.nodes]


def isa_backend(nodes: int, node: NodeConfig, ddr_bytes: int, topology: str = "switch", costs=None) -> SimBackend:
    """The functional ISA simulator as a backend (unit costs unless ``costs``)."""
    return SimBackend(ClusterSim(node, nodes, topology, costs=costs, ddr_bytes=ddr_bytes))
