"""Route ids: the one numbering of routes that every node's route table uses (the MARS
lowering, the multi-node benches, the runtime).

A route id names the same logical route on every NIC; each node's table holds that route's
entry *at that node* (output ports, local delivery, reduction fan-in), computed from the
topology (``mcf.spec.topology``).  For a cluster of N nodes:

==================  =========================================================================
id                  route
==================  =========================================================================
0                   never valid (an all-zero header dies on BAD_ROUTE)
1                   deliver locally (directory updates a node issues to itself)
2 + d               unicast to node d (every hop: the port towards d; at d: local)
2 + N + r           broadcast from node r to every other node
2 + 2N + r          reduction towards root r (the tree of next hops; a node with children
                    reduces, fan_in = 1 + children)
2 + 3N              all-reduce: every node contributes and gets the result (one hop: full mesh)
3 + 3N, ...         multicast groups (source, destination set), numbered in order of first use
==================  =========================================================================
"""
from __future__ import annotations

from .bits import SpecError
from .packet import MAX_NODES, ROUTE_TABLE_ENTRIES

ROUTE_INVALID = 0
ROUTE_LOCAL = 1


class RouteIds:
    """The route ids of a cluster of ``nodes`` nodes; ``multicast`` numbers groups as they
    are first asked for (the same request order gives the same ids on every node)."""

    def __init__(self, nodes: int, entries: int = ROUTE_TABLE_ENTRIES):
        if not 1 <= nodes <= MAX_NODES:
            raise SpecError(f"nodes={nodes}: 1..{MAX_NODES}")
        self.nodes, self.entries = nodes, entries
        self.groups: dict[tuple[int, frozenset], int] = {}
        self._next = self.multicast_base

    def _node(self, n: int) -> int:
        if not 0 <= n < self.nodes:
            raise SpecError(f"node {n} is not in a cluster of {self.nodes}")
        return n

    def unicast(self, dst: int) -> int:
        return 2 + self._node(dst)

    def broadcast(self, src: int) -> int:
        return 2 + self.nodes + self._node(src)

    def reduce(self, root: int) -> int:
        return 2 + 2 * self.nodes + self._node(root)

    @property
    def all_reduce(self) -> int:
        return 2 + 3 * self.nodes

    @property
    def multicast_base(self) -> int:
        return 3 + 3 * self.nodes

    def multicast(self, src: int, dsts) -> int:
        """The group (src, dsts); a single destination is its unicast route."""
        dsts = frozenset(self._node(int(d)) for d in dsts)
        if len(dsts) == 1:
            return self.unicast(next(iter(dsts)))
        key = (self._node(src), dsts)
        rid = self.groups.get(key)
        if rid is None:
            rid = self._next
            if rid >= self.entries:
                raise SpecError(f"the plan needs more than {self.entries} route ids (multicast groups); "
                                "use fewer nodes or a larger chunk")
            self._next += 1
            self.groups[key] = rid
        return rid
