"""How the nodes of a cluster are wired: hop distances, port numbering, shortest-path routing,
placement order.  The one topology model: MARS plans and lowers with it, the route tables are
filled from it, and the multi-node RTL benches wire their NICs port to port by it.

* ``switch``: every node has one port (port 0) to a 10GbE switch; any two nodes are one hop
  apart and the switch replicates multicast frames (its multicast groups are configured
  outside MCF).  A KR260 has one SFP+ cage, so this is the boards' topology.
* ``ring``: port 0 goes to node n+1, port 1 to node n-1 (mod N).  Packets take the shorter way
  (ties go clockwise).
* ``grid``: an R x K 2-D grid (R the largest divisor of N not above sqrt(N); no wrap-around),
  node = row * K + col; ports 0 east (+col), 1 west, 2 south (+row), 3 north.  Dimension-order
  routing: columns first, then rows, so the paths from one source form a tree.
* ``full_mesh``: switchless, every pair of nodes directly linked; node a's port p goes to
  node (a + p + 1) mod N (N - 1 ports); every destination is one hop.

(A "full mesh" is this last wiring; "full" alone is the full-replication scheme, never a
topology.)
"""
from __future__ import annotations

from functools import cached_property

import numpy as np

from .bits import SpecError

TOPOLOGIES = ("switch", "ring", "grid", "full_mesh")
#: Network ports a node needs for each topology (a ring of two nodes needs one link; a full
#: mesh of N nodes N - 1).
PORTS_NEEDED = {"switch": 1, "ring": 2, "grid": 4}


class Topology:
    def __init__(self, kind: str, nodes: int):
        if kind not in TOPOLOGIES:
            raise SpecError(f"unknown topology {kind!r}; one of {', '.join(TOPOLOGIES)}")
        if nodes < 1:
            raise SpecError(f"nodes={nodes}: must be >= 1")
        self.kind = kind
        self.n = nodes
        if kind == "grid":
            rows = max(r for r in range(1, int(nodes ** 0.5) + 1) if nodes % r == 0)
            self.shape = (rows, nodes // rows)
        else:
            self.shape = (1, nodes)

    def __repr__(self):
        return f"Topology({self.kind!r}, {self.n})"

    @property
    def ports_needed(self) -> int:
        if self.kind == "full_mesh":
            return max(1, self.n - 1)
        return 1 if self.kind == "ring" and self.n <= 2 else PORTS_NEEDED[self.kind]

    def peers(self, node: int) -> list[int | None]:
        """The node each port of ``node`` leads to (``None``: no link on that port; a switch
        port leads to the switch, so a switch has no peers)."""
        if self.kind == "switch":
            raise SpecError("a switch port leads to the switch, not to a peer node")
        if self.kind == "full_mesh":
            return [(node + p + 1) % self.n for p in range(self.n - 1)]
        if self.kind == "ring":
            return [(node + 1) % self.n, (node - 1) % self.n]
        rows, k = self.shape
        r, c = divmod(node, k)
        return [node + 1 if c + 1 < k else None, node - 1 if c > 0 else None,
                node + k if r + 1 < rows else None, node - k if r > 0 else None]

    @cached_property
    def dist(self) -> np.ndarray:
        """Hop distance matrix (N x N, int32)."""
        idx = np.arange(self.n)
        if self.kind in ("switch", "full_mesh"):
            return (idx[:, None] != idx[None, :]).astype(np.int32)
        if self.kind == "ring":
            d = np.abs(idx[:, None] - idx[None, :])
            return np.minimum(d, self.n - d).astype(np.int32)
        k = self.shape[1]
        r, c = idx // k, idx % k
        return (np.abs(r[:, None] - r[None, :]) + np.abs(c[:, None] - c[None, :])).astype(np.int32)

    @cached_property
    def diameter(self) -> int:
        return int(self.dist.max()) if self.n > 1 else 0

    @cached_property
    def num_links(self) -> int:
        """Directed links (one per port direction); the switch counts node<->switch links."""
        if self.n == 1:
            return 0
        if self.kind == "switch":
            return 2 * self.n
        if self.kind == "full_mesh":
            return self.n * (self.n - 1)
        if self.kind == "ring":
            return 2 if self.n == 2 else 2 * self.n
        rows, k = self.shape
        return 2 * (rows * (k - 1) + k * (rows - 1))

    @property
    def degree(self) -> int:
        """Ports a node can receive on at once (for per-port load)."""
        if self.n == 1:
            return 1
        if self.kind == "switch" or (self.kind == "ring" and self.n == 2):
            return 1
        if self.kind == "full_mesh":
            return self.n - 1
        return 2 if self.kind == "ring" or min(self.shape) == 1 else 4

    @cached_property
    def order(self) -> np.ndarray:
        """order[o] = all nodes by increasing distance from o (ties: by (n - o) mod N), o first.

        Replicas of a block owned by o go to order[o][1:r]: nearest first, and the rotation
        tie-break spreads replicas evenly over the cluster when owners rotate."""
        idx = np.arange(self.n)
        rot = (idx[None, :] - idx[:, None]) % self.n
        key = self.dist.astype(np.int64) * self.n + rot
        return np.argsort(key, axis=1, kind="stable").astype(np.int32)

    @cached_property
    def rank(self) -> np.ndarray:
        """rank[o, n] = position of node n in order[o] (0 for the owner itself)."""
        rk = np.empty_like(self.order)
        rows = np.arange(self.n)[:, None]
        rk[rows, self.order] = np.arange(self.n)[None, :]
        return rk

    # --- routing ------------------------------------------------------------------------------
    def next_hop(self, src: int, dst: int) -> tuple[int, int]:
        """(port, neighbour) of the first hop from src towards dst (src != dst)."""
        if self.kind == "switch":
            return 0, dst
        if self.kind == "full_mesh":
            return (dst - src - 1) % self.n, dst
        if self.kind == "ring":
            fwd = (dst - src) % self.n
            if fwd <= self.n - fwd:
                return 0, (src + 1) % self.n
            return 1, (src - 1) % self.n
        k = self.shape[1]
        (sr, sc), (dr, dc) = divmod(src, k), divmod(dst, k)
        if dc > sc:
            return 0, src + 1
        if dc < sc:
            return 1, src - 1
        if dr > sr:
            return 2, src + k
        return 3, src - k

    def path(self, src: int, dst: int) -> list[tuple[int, int, int]]:
        """Hops (node, port, next node) from src to dst."""
        hops, cur = [], src
        while cur != dst:
            port, nxt = self.next_hop(cur, dst)
            hops.append((cur, port, nxt))
            cur = nxt
        return hops

    def multicast_masks(self, src: int, dests) -> dict[int, tuple[int, bool]]:
        """Per node on the multicast tree from src: (output port mask, local delivery).

        The tree is the union of the routing paths, which is a tree because routing from one
        source is deterministic.  On a switch, src sends once on port 0 and the switch copies."""
        out: dict[int, list] = {}
        dests = [int(d) for d in dests if int(d) != src]
        for d in dests:
            for node, port, _ in self.path(src, d):
                e = out.setdefault(node, [0, False])
                e[0] |= 1 << port
                if self.kind == "switch":
                    break
            out.setdefault(d, [0, False])[1] = True
        return {n: (m, loc) for n, (m, loc) in out.items()}

    def reduce_tree(self, root: int) -> tuple[np.ndarray, np.ndarray]:
        """(parent, fan_in) of the reduction tree towards root: each node's parent is its next
        hop towards the root; fan_in counts the children plus the node's own contribution."""
        parent = np.full(self.n, -1, dtype=np.int32)
        for n in range(self.n):
            if n != root:
                parent[n] = root if self.kind == "switch" else self.next_hop(n, root)[1]
        fan_in = np.ones(self.n, dtype=np.int32)
        np.add.at(fan_in, parent[parent >= 0], 1)
        return parent, fan_in

    @cached_property
    def nearest_holder_stats(self) -> tuple[np.ndarray, np.ndarray]:
        """For r = 1..N replicas placed by ``order``: (sum over nodes of the hop distance to the
        nearest holder, max of it), averaged over owners.  Index r - 1.

        Exact for the translation-invariant switch, ring and full mesh; the grid averages over up to 16
        owners spread over the grid (an N^3 computation for every owner would be too slow)."""
        owners = np.arange(self.n) if self.n <= 64 else np.unique(np.linspace(0, self.n - 1, 16).astype(int))
        hsum = np.zeros(self.n)
        hmax = np.zeros(self.n)
        for o in owners:
            near = np.minimum.accumulate(self.dist[self.order[o]], axis=0)  # row k: first k+1 holders
            hsum += near.sum(axis=1)
            hmax = np.maximum(hmax, near.max(axis=1))
        return hsum / len(owners), hmax

    @cached_property
    def replica_depth(self) -> np.ndarray:
        """Hop depth of the multicast tree from an owner to its r - 1 nearest replicas (index r - 1),
        worst case over owners."""
        d = np.take_along_axis(self.dist, self.order, axis=1)  # sorted distances per owner
        return d.max(axis=0)
