"""A traffic plan for N NICs wired as a full mesh or a ring (``mcf.hw.nic.top.NicCluster``), and
where every packet must end up.

Route ids and route tables are the ones MARS programs (``mcf.spec.routes.RouteIds``,
``mcf.sw.mars.lower.RouteTables`` over ``mcf.spec.topology.Topology``): unicast and
all-to-all packets take the unicast route of their destination, multicasts the group route
of (source, destination set), reductions the tree towards a root or (full mesh) the
all-reduce.  Expected deliveries are computed hop by hop with the Python reference
(``mcf.sw.golden.nic.decide``).
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from mcf import spec
from mcf.sim.nic.traffic import random_states
from mcf.spec import Collective, ErrorCause, Op, ReduceOp, Stage
from mcf.spec.packet import pad_header
from mcf.spec.topology import Topology
from mcf.sw.golden.nic import RouteEntry, decide, raw_header, reduce_words
from mcf.sw.mars.lower import RouteTables


@dataclass
class Item:
    """One packet a node's program emits: a header (Meta, or raw words for bad ones) and
    the payload the compute side pushes (may disagree with Meta.length on purpose)."""
    header: bytes
    payload: bytes
    kind: str = "good"               # "good", "reduce" or an ErrorCause name
    reduction: int | None = None
    meta: spec.Meta | None = None


@dataclass
class ClusterPlan:
    nodes: int = 4
    data_width: int = 64
    seed: int = 1
    buffer_depth: int = 64
    reduce_beats: int = 32
    max_len: int = 160
    topology: str = "full_mesh"
    softmax_fan_in: int = 0
    state_words: int = 6
    tables: list = field(default_factory=list)
    programs: list = field(default_factory=list)
    reductions: list = field(default_factory=list)   # (op, key, {src: payload}, reducers)

    def __post_init__(self):
        n = self.nodes
        self.rng = random.Random(self.seed)
        self.kv = 0
        self.topo = Topology(self.topology, n)
        self.ports = [self.topo.peers(a) for a in range(n)]
        self.routes = RouteTables(self.topo)
        self.programs = [[] for _ in range(n)]
        for s in range(n):
            others = [d for d in range(n) if d != s]
            for k in range(2, len(others) + 1):
                for group in itertools.combinations(others, k):
                    self.routes.multicast(s, group)
        for r in range(n):
            self.routes.reduce(r)
        if self.topology == "full_mesh":
            self.routes.all_reduce()
        self.tables = [{rid: RouteEntry(**e) for rid, e in t.items()} for t in self.routes.tables]

    def unicast_route(self, s, d):
        return self.routes.unicast(d)

    def multicast_route(self, s, group):
        return self.routes.multicast(s, group)

    # --- packets -------------------------------------------------------------------------
    def _meta(self, s, **kw):
        self.kv += 1
        d = dict(stage=self.rng.choice([Stage.PREFILL, Stage.DECODE]), op=Op.KV_REPLICA,
                 collective=Collective.UNICAST, reduce_op=ReduceOp.NONE, src=s, dst=0,
                 route_id=0, kv_id=self.kv, length=0, seq=self.rng.randrange(1 << 16))
        d.update(kw)
        return spec.Meta(**d)

    def _length(self):
        rng = self.rng
        return rng.choice([0, 8, 16, 24, rng.randrange(1, self.max_len)])

    def good(self, s):
        rng, n = self.rng, self.nodes
        kind = rng.choice(["unicast", "all_to_all", "multicast"])
        length = self._length()
        others = [d for d in range(n) if d != s]
        if kind == "multicast":
            group = tuple(sorted(rng.sample(others, rng.randrange(2, len(others) + 1))))
            meta = self._meta(s, collective=Collective.MULTICAST, op=Op.KV_REPLICA, dst=sum(1 << d for d in group),
                              route_id=self.multicast_route(s, group), length=length)
        else:
            d = rng.choice(others)
            meta = self._meta(s, collective=Collective.UNICAST if kind == "unicast" else Collective.ALL_TO_ALL,
                              op=rng.choice([Op.KV_FETCH, Op.TENSOR, Op.QUERY]), dst=d,
                              route_id=self.unicast_route(s, d), length=length)
        return Item(meta.encode(), rng.randbytes(length), "good", meta=meta)

    def bad(self, s, cause):
        rng, n = self.rng, self.nodes
        d = rng.choice([x for x in range(n) if x != s])
        length = rng.randrange(1, 40)
        meta = self._meta(s, dst=d, route_id=self.unicast_route(s, d), length=length,
                          op=Op.TENSOR)
        payload = rng.randbytes(length)
        if cause == ErrorCause.BAD_ROUTE:
            meta = meta.replace(route_id=rng.choice([0, 250, 4095]))
        elif cause == ErrorCause.BAD_DST:
            meta = meta.replace(dst=rng.randrange(n, 256))
        elif cause == ErrorCause.UNKNOWN_OP:
            fields = meta.as_dict()
            fields["op"] = rng.choice([0, max(Op) + 1, 15])
            return Item(raw_header(**fields), payload, cause.name)
        elif cause == ErrorCause.SHORT_PACKET:
            # TLAST early (the compute side cannot push an empty payload: keep >= 1 byte).
            meta = meta.replace(length=length + 1)
            payload = payload[:rng.randrange(1, length + 1)]
        elif cause == ErrorCause.LONG_PACKET:
            payload += rng.randbytes(rng.randrange(1, 20))
        return Item(meta.encode(), payload, cause.name, meta=meta)

    def reduction(self):
        rng, n = self.rng, self.nodes
        index = len(self.reductions)
        length = rng.choice([4, 8, 32, 36, 64, 100])
        op = rng.choice([ReduceOp.MAX, ReduceOp.SUM] + ([ReduceOp.SOFTMAX_MERGE] * 2 if self.softmax_fan_in else []))
        if op == ReduceOp.SOFTMAX_MERGE:
            length = 4 * self.state_words * rng.randrange(1, 4)
        if rng.random() < 0.5 or self.topology != "full_mesh":
            root = rng.randrange(n)
            coll, rid = Collective.REDUCE, self.routes.reduce(root)
            reducers = [root]      # where the result is delivered (a ring reduces on the way)
        else:
            root, coll, rid, reducers = 0, Collective.ALL_REDUCE, self.routes.ids.all_reduce, list(range(n))
        self.kv += 1
        key = spec.Meta(stage=Stage.DECODE, op=Op.PARTIAL_STATE, collective=coll, reduce_op=op,
                        src=0, dst=root, route_id=rid, kv_id=self.kv, length=length, seq=index & 0xFFFF)
        contributions = {}
        for s in range(n):
            payload = (random_states(rng, length // (4 * self.state_words), self.state_words)
                       if op == ReduceOp.SOFTMAX_MERGE else rng.randbytes(length))
            contributions[s] = payload
            m = key.replace(src=s)
            self.programs[s].append(Item(m.encode(), payload, "reduce", reduction=index, meta=m))
        self.reductions.append((op, key, contributions, reducers))

    def build(self, packets_per_node: int, error_rate: float = 0.1, reductions: int = 4):
        rng = self.rng
        causes = [ErrorCause.BAD_ROUTE, ErrorCause.BAD_DST, ErrorCause.UNKNOWN_OP,
                  ErrorCause.SHORT_PACKET, ErrorCause.LONG_PACKET]
        total = packets_per_node * self.nodes
        red_at = sorted(rng.sample(range(total), min(reductions, total)))
        for k in range(total):
            while red_at and red_at[0] == k:
                red_at.pop(0)
                self.reduction()
            s = k % self.nodes
            if rng.random() < error_rate:
                self.programs[s].append(self.bad(s, rng.choice(causes)))
            else:
                self.programs[s].append(self.good(s))
        return self

    # --- expectations ------------------------------------------------------------------------
    def expected(self):
        """(deliveries per node: [wire bytes], errors per node: [count per ErrorCause])."""
        n, w = self.nodes, self.data_width
        kw = dict(data_width=w, net_ports=len(self.ports[0]), num_nodes=n, buffer_depth=self.buffer_depth,
                  reduce_beats=self.reduce_beats, softmax_fan_in=self.softmax_fan_in)
        deliveries = [[] for _ in range(n)]
        errors = [[0] * len(ErrorCause) for _ in range(n)]
        parts = {}       # (reduction, node) -> {src: payload} that reached its engine

        def route(wire, start, from_local, from_reduce, reduction):
            todo = [(start, from_local, from_reduce)]
            hops = 0
            while todo:
                node, loc, red = todo.pop()
                hops += 1
                assert hops < 64, "routing loop in the plan"
                dcs = decide(wire, self.tables[node], from_local=loc, from_reduce=red, **kw)
                if dcs.dropped:
                    errors[node][dcs.cause] += 1
                    continue
                for o in dcs.outputs:
                    if o == "local":
                        deliveries[node].append(wire)
                    elif o == "reduce":
                        src = int.from_bytes(wire[:16], "little") >> spec.META.offsets["src"] & 0xFF
                        parts.setdefault((reduction, node), {})[src] = wire[hdr:]
                    else:
                        todo.append((self.ports[node][o], False, False))

        hdr = len(pad_header(bytes(16), w))
        for s in range(n):
            for item in self.programs[s]:
                route(pad_header(item.header, w) + item.payload, s, True, False, item.reduction)
        # Reductions complete where fan_in contributions met; results route on (tree levels).
        done = set()
        changed = True
        while changed:
            changed = False
            for (index, node), got in list(parts.items()):
                op, key, _, _ = self.reductions[index]
                if (index, node) in done or len(got) < self.tables[node][key.route_id].fan_in:
                    continue
                done.add((index, node))
                changed = True
                result = key.replace(src=node, op=Op.REDUCE_RESULT)
                payload = reduce_words(op, [got[x] for x in sorted(got)], self.state_words)
                route(pad_header(result.encode(), w) + payload, node, False, True, index)
        for index, (_, key, _, reducers) in enumerate(self.reductions):
            assert set(reducers) <= {nd for (i, nd) in done if i == index}, f"reduction {index} incomplete"
        return deliveries, errors

