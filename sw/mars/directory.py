"""The replica directory: which node holds which KV block, in which lifecycle state.

The states are ``mcf.spec.plan.ReplicaState`` (VALID -> DRAINING -> INVALID, the encoding the
RTL directory stores).  Owner copies are VALID from the moment they are written and never leave.
Every transition is an ``Event`` of the plan; ``replay`` applies them in order and checks the
lifecycle, so the plan and the runtime (which keeps one of these per node) agree by construction.
"""
from __future__ import annotations

import numpy as np

from mcf.spec.plan import EventKind, EventPhase, ReplicaState
from .planner import Event, Plan


class LifecycleError(AssertionError):
    """An event that breaks the lifecycle (a bug in the planner, never a user error)."""


class ReplicaDirectory:
    def __init__(self, nodes: int, block_bytes):
        self.nodes = nodes
        self.block_bytes = np.asarray(block_bytes)
        self.state: dict[tuple[int, int], ReplicaState] = {}
        self.owner: dict[int, int] = {}
        self.memory = np.zeros(nodes)

    def get(self, block: int, node: int) -> ReplicaState:
        return self.state.get((block, node), ReplicaState.INVALID)

    def readable(self, block: int, node: int) -> bool:
        return self.get(block, node).readable

    def schedulable(self, block: int, node: int) -> bool:
        """May a new decision use this copy?  (DRAINING copies may not.)"""
        return self.get(block, node) == ReplicaState.VALID

    def apply(self, e: Event) -> None:
        for n in e.nodes:
            key, cur = (e.block, n), self.get(e.block, n)
            if e.kind in (EventKind.OWNER, EventKind.HANDOFF):
                if cur != ReplicaState.INVALID:
                    raise LifecycleError(f"{e}: block {e.block} already on node {n} ({cur.name})")
                if e.kind == EventKind.OWNER and e.block in self.owner:
                    raise LifecycleError(f"{e}: block {e.block} has owner {self.owner[e.block]}")
                self.owner[e.block] = n
                self.state[key] = ReplicaState.VALID
                self.memory[n] += self.block_bytes[e.block]
            elif e.kind == EventKind.REPLICATE:
                if cur != ReplicaState.INVALID:
                    raise LifecycleError(f"{e}: node {n} already holds block {e.block} ({cur.name})")
                self.state[key] = ReplicaState.VALID
                self.memory[n] += self.block_bytes[e.block]
            elif e.kind == EventKind.DRAIN:
                if cur != ReplicaState.VALID:
                    raise LifecycleError(f"{e}: drain of a {cur.name} copy on node {n}")
                if self.owner.get(e.block) == n:
                    raise LifecycleError(f"{e}: the owner copy of block {e.block} may not drain")
                self.state[key] = ReplicaState.DRAINING
            elif e.kind == EventKind.INVALIDATE:
                if cur != ReplicaState.DRAINING:
                    raise LifecycleError(f"{e}: invalidate of a {cur.name} copy on node {n}")
                del self.state[key]
                self.memory[n] -= self.block_bytes[e.block]
            else:
                raise LifecycleError(f"unknown event kind {e.kind}")

    def holders(self, block: int) -> list[int]:
        return sorted(n for (b, n), s in self.state.items() if b == block and s != ReplicaState.INVALID)


def replay(plan: Plan, check=None) -> ReplicaDirectory:
    """Apply the plan's events in order.  ``check(step, phase, directory)`` runs after the 'start'
    events of each step (the state chunk ``step`` computes against) and after its 'end' events."""
    d = ReplicaDirectory(plan.nodes, plan.block_bytes)
    events = plan.events
    i = 0
    for t in range(plan.num_chunks):
        for phase in EventPhase:
            while i < len(events) and events[i].step == t and events[i].phase == phase:
                d.apply(events[i])
                i += 1
            if check:
                check(t, phase, d)
    if i != len(events):
        raise LifecycleError(f"event {events[i]} out of order")
    return d
