"""A cluster of simulated nodes: N ``NodeSim`` + the ``Network``, driven by one event loop.

Every queue head issues as soon as its wait is met (nodes and queues in a fixed order at equal
times, so a run is deterministic); an instruction takes ``costs.instr(cfg, exec)`` cycles, a
packet ``costs.link(bytes)`` per link.  ``UnitCosts`` (one cycle each) is the functional
schedule; ``JitterCosts`` draws durations at random (seeded) so that a program whose results
depend on timing shows it; the model backend's timing model (``mcf.sim.cluster``) gives costs
from the node's configuration.

A run ends when every started node is done, or reports exactly why not: a fault (the node, its
cause, the instruction), or a deadlock (nothing in flight and a node still running: every
running node's blocked queue heads and what they wait on, and the NICs' open reductions).
"""
from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from mcf.spec.isa import Queue, SeqFault
from mcf.spec.node import NodeConfig
from mcf.spec.topology import Topology

from .ddr import SimDdr
from .network import Network
from .nodesim import Exec, Fault, NodeSim


class UnitCosts:
    """The functional schedule: every instruction one cycle, a packet one cycle per link."""

    def instr(self, cfg: NodeConfig, ex: Exec) -> int:
        return 1

    def link(self, nbytes: int) -> tuple[int, int]:
        """(serialization cycles, latency cycles) of a packet of ``nbytes`` wire bytes."""
        return 0, 1

    def nic_cycles(self) -> int:
        return 1

    def reduce_cycles(self, nbytes: int, parts: int, op: int = 0) -> int:
        """Cycles from the last contribution's arrival to the result (``op``: its ReduceOp)."""
        return 1


class JitterCosts(UnitCosts):
    """Random durations from a seed (a link's latency stays constant, so links keep order)."""

    def __init__(self, seed: int, spread: int = 40):
        self.rng, self.spread = random.Random(seed), spread

    def instr(self, cfg, ex):
        return self.rng.randint(1, self.spread)

    def link(self, nbytes):
        return self.rng.randint(0, self.spread), 3

    def nic_cycles(self):
        return self.rng.randint(1, 4)


@dataclass
class RunResult:
    status: str           # "done", "fault", "deadlock" or "limit"
    cycles: int
    message: str

    @property
    def ok(self) -> bool:
        return self.status == "done"


class ClusterSim:
    def __init__(self, cfg: NodeConfig, nodes: int, topology: str = "switch", costs=None,
                 ddr_bytes: int = 1 << 24, phys_base: int = 0x4000_0000, trace: bool = False):
        self.cfg = cfg
        self.topology = Topology(topology, nodes)
        self.costs = costs or UnitCosts()
        self.nodes = [NodeSim(cfg, SimDdr(ddr_bytes, phys_base), i, nodes) for i in range(nodes)]
        self.now = 0
        self._events: list = []
        self._seq = 0
        self.net = Network(self.topology, self.nodes, self.costs, self.schedule, lambda: self.now)
        self._rx_timer = [None] * nodes
        self.faults: list[int] = []            # node ids in the order they faulted
        self.trace: list | None = [] if trace else None

    # --- events --------------------------------------------------------------------------
    def schedule(self, time: int, fn) -> None:
        self._seq += 1
        heapq.heappush(self._events, (int(time), self._seq, fn))

    def start(self, nodes=None) -> None:
        for i in (range(len(self.nodes)) if nodes is None else nodes):
            self.nodes[i].start(self.now)
            if i in self.faults:
                self.faults.remove(i)

    @property
    def running(self) -> bool:
        return any(n.running for n in self.nodes)

    def _note_faults(self) -> None:
        for n in self.nodes:
            if n.state == "fault" and n.node_id not in self.faults:
                self.faults.append(n.node_id)

    def _launch(self, node: NodeSim, ex: Exec) -> None:
        for pkt in ex.packets:
            node.sends_in_flight += 1

            def done(node=node):
                node.sends_in_flight -= 1
            self.net.inject(node.node_id, pkt, self.now, done)
        cycles = max(1, int(self.costs.instr(node.cfg, ex)))

        def finish(node=node, ex=ex):
            node.complete(ex, self.now)
            if self.trace is not None:
                self.trace.append((self.now, node.node_id, ex.index, ex.instr.OPCODE.name))
        self.schedule(self.now + cycles, finish)

    def _progress(self) -> None:
        changed = True
        while changed:
            changed = False
            for node in self.nodes:
                if not node.running:
                    continue
                changed |= node.dispatch(self.now)
                changed |= node.process_rx(self.now)
                deadline = node.rx_deadline()
                if deadline is not None and self._rx_timer[node.node_id] != deadline:
                    self._rx_timer[node.node_id] = deadline
                    self.schedule(deadline, lambda: None)
                for q in Queue:
                    if node.can_issue(q):
                        ex = node.issue(q, self.now)
                        changed = True
                        if ex is None:
                            break
                        self._launch(node, ex)
        self._note_faults()

    def run(self, max_cycles: int | None = None, until=None) -> RunResult:
        """Run until every node stopped (done or fault), ``until()`` holds, nothing can move
        (deadlock), or ``max_cycles`` more cycles passed."""
        limit = None if max_cycles is None else self.now + max_cycles
        self._progress()
        while self.running:
            if until is not None and until():
                return RunResult("running", self.now, "")
            if not self._events:
                return self._deadlock()
            t, _, fn = self._events[0]
            if limit is not None and t > limit:
                self.now = limit
                return RunResult("limit", self.now, f"still running after {max_cycles} cycles")
            while self._events and self._events[0][0] == t:
                _, _, fn = heapq.heappop(self._events)
                self.now = t
                fn()
            self._progress()
        # drain what is in flight (packets towards stopped nodes, timers) without running nodes
        return self.result()

    def result(self) -> RunResult:
        self._note_faults()
        if self.faults:
            first = self.nodes[self.faults[0]]
            return RunResult("fault", self.now, first.status_line())
        if self.running:
            return RunResult("running", self.now, "")
        return RunResult("done", self.now, "")

    def _deadlock(self) -> RunResult:
        waits = [n.status_line() for n in self.nodes if n.running]
        waits += self.net.open_reductions()
        msg = f"deadlock at cycle {self.now}: " + "; ".join(waits)
        for n in self.nodes:
            if n.running and n.watchdog:
                n.fail(Fault(SeqFault.WATCHDOG, "; ".join(n.waits()) or "nothing moved"))
        self._note_faults()
        return RunResult("deadlock", self.now, msg)

    # --- convenience for tests and tools --------------------------------------------------------
    def load_program(self, node: int, program, addr: int | None = None) -> int:
        """Write typed instructions into a node's DDR (the PL's view) and point PROG_BASE at
        them; returns the address."""
        from mcf.spec.isa import encode_program
        n = self.nodes[node]
        data = encode_program(program)
        addr = n.ddr.phys_base if addr is None else addr
        n.ddr.device_write(addr, data)
        n.prog_base, n.prog_count = addr, len(program)
        return addr

    def open_window(self) -> None:
        """Every node's DMA window = its whole DDR."""
        for n in self.nodes:
            n.window_base, n.window_size = n.ddr.phys_base, n.ddr.size
