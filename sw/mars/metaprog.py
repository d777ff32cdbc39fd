"""The Meta/DMA programs of the PS-driven datapath (the node before its sequencer): a ``Plan``
becomes one program per node: its route table and the ordered list of Meta
descriptors (mcf.spec.Meta, the one wire-format definition) and DMA descriptors (DMA_DESCRIPTOR)
its PS pushes, for every prefill step and for one KV-stationary decode step.

Every node can run ``lower(plan)`` itself: the programs are a pure function of the plan, which is
a pure function of the request, so no coordinator is needed.

Route ids are global (the same id names the same logical route on every NIC) and numbered by
``mcf.spec.routes.RouteIds``; each node's table holds that route's entry *at that node*
(``RouteTables``, computed from the topology).  The decode query is the root's broadcast, the
partial states reduce towards the root.

DDR layout of a node's KV pool (layer-major, so the history a layer needs is a few contiguous
runs): ``KV_POOL_BASE + layer * pool_layer_bytes + slot * block_layer_bytes``; fetched blocks land
in a staging area after the pool (two halves, alternating by layer: ping-pong).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mcf.spec import ROUTE_ENTRY, Collective, Meta, Op, ReduceOp, Stage
from mcf.spec.plan import EventKind, EventPhase, Scheme
from mcf.spec.regmap import DmaDescriptor, DmaDir
from mcf.spec.routes import ROUTE_LOCAL
from mcf.sw.errors import UserError
from .lower import RouteTables
from .planner import QUERY_ELEM_BYTES, STATE_ELEM_BYTES, Plan

#: Start of the KV pool in each node's DDR (inside the DMA window the runtime programs).
#: Assumption: the first 256 MiB stay with Linux, weights follow the pool's end.
KV_POOL_BASE = 0x1000_0000
DECODE_ROOT = 0


@dataclass
class NodeProgram:
    node: int
    #: route_id -> RouteEntry fields at this node
    routes: dict[int, dict] = field(default_factory=dict)
    #: (stage, step, Meta | DmaDescriptor) in push order; decode steps are a template (seq = token index)
    ops: list[tuple[Stage, int, object]] = field(default_factory=list)
    #: Where each STORE's bytes come from, by index into ``ops``: (source node, Op, kv_id).  The
    #: source is this node for a block its engine computed (the KV writer), another node for a
    #: payload the NIC delivers (that node's KV_FETCH / KV_REPLICA Meta with this kv_id).
    sources: dict[int, tuple[int, Op, int]] = field(default_factory=dict)
    #: DDR map: the pool spans [KV_POOL_BASE, staging_base), the staging area follows it; the
    #: runtime sets DMA_WINDOW_BASE/SIZE to cover [KV_POOL_BASE, KV_POOL_BASE + window_bytes)
    pool_layer_bytes: int = 0
    staging_base: int = 0
    window_bytes: int = 0

    @property
    def metas(self) -> list[Meta]:
        return [o for _, _, o in self.ops if isinstance(o, Meta)]

    @property
    def dmas(self) -> list[DmaDescriptor]:
        return [o for _, _, o in self.ops if isinstance(o, DmaDescriptor)]

    def route_words(self) -> dict[int, int]:
        """route_id -> 32-bit ROUTE_DATA word."""
        return {rid: ROUTE_ENTRY.pack({**e, "reserved": 0}) for rid, e in sorted(self.routes.items())}

    def summary(self) -> dict:
        return {"node": self.node, "metas": len(self.metas), "dmas": len(self.dmas),
                "routes": len(self.routes), "window_bytes": self.window_bytes}


class _Pool:
    """Slot allocator of one node's KV pool (lowest free slot first)."""

    def __init__(self):
        self.slot: dict[int, int] = {}
        self.free: list[int] = []
        self.high = 0

    def alloc(self, block: int) -> int:
        if self.free:
            s = min(self.free)
            self.free.remove(s)
        else:
            s, self.high = self.high, self.high + 1
        self.slot[block] = s
        return s

    def release(self, block: int) -> None:
        self.free.append(self.slot.pop(block))


def _runs(slots: list[int]) -> list[tuple[int, int]]:
    """Sorted slots -> (first slot, count) runs of consecutive slots."""
    out = []
    for s in sorted(slots):
        if out and out[-1][0] + out[-1][1] == s:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((s, 1))
    return out


def lower(plan: Plan) -> list[NodeProgram]:
    N, C = plan.nodes, plan.num_chunks
    m = plan.request.model
    L = m.num_layers
    layer_tok = int(m.kv_token_bytes // L)            # KV bytes of one token in one layer
    if layer_tok * L != m.kv_token_bytes:
        raise UserError(f"model {m.name}: per-layer KV bytes per token are not whole bytes")
    stride = int(plan.chunk_size * layer_tok)         # one block's bytes in one layer
    routes = RouteTables(plan.topology)
    routes.broadcast(DECODE_ROOT)         # the decode query and the partial-state reduction
    routes.reduce(DECODE_ROOT)
    progs = [NodeProgram(n, routes.tables[n]) for n in range(N)]
    tags = np.zeros(N, dtype=np.int64)

    # pool slots: replay the directory to learn each node's high-water mark first
    pools = [_Pool() for _ in range(N)]
    slots_at: list[dict] = []           # per step: {(block, node): slot} of copies created then
    frees_at: list[list] = []
    events = plan.events
    ev_by_step: dict[int, list] = {}
    for e in events:
        ev_by_step.setdefault(e.step, []).append(e)
    for t in range(C):
        created, freed = {}, []
        for e in ev_by_step.get(t, []):
            if e.kind in (EventKind.OWNER, EventKind.REPLICATE, EventKind.HANDOFF):
                for n in e.nodes:
                    created[(e.block, n)] = pools[n].alloc(e.block)
        for e in ev_by_step.get(t, []):
            if e.kind == EventKind.INVALIDATE:
                for n in e.nodes:
                    freed.append((e.block, n, pools[n].slot[e.block]))
                    pools[n].release(e.block)
        slots_at.append(created)
        frees_at.append(freed)
    pool_layer = [max(1, p.high) * stride for p in pools]
    staging = [KV_POOL_BASE + L * pool_layer[n] for n in range(N)]
    for n in range(N):
        progs[n].pool_layer_bytes = pool_layer[n]
        progs[n].staging_base = staging[n]
        progs[n].window_bytes = staging[n] + 2 * C * stride - KV_POOL_BASE

    def addr(n, slot, layer):
        return KV_POOL_BASE + layer * pool_layer[n] + slot * stride

    def dma(n, t, a, length, direction, stage=Stage.PREFILL, source=None):
        tag = int(tags[n] % (1 << 11))
        tags[n] += 1
        if source is not None:
            progs[n].sources[len(progs[n].ops)] = source
        progs[n].ops.append((stage, t, DmaDescriptor(a, length, tag & 1, direction, tag)))

    def meta(n, t, **kw):
        kw.setdefault("stage", Stage.PREFILL)
        kw.setdefault("reduce_op", ReduceOp.NONE)
        kw.setdefault("seq", t & 0xFFFF)
        progs[n].ops.append((kw["stage"], t, Meta(src=n, **kw)))

    slot_of = [dict() for _ in range(N)]   # live (block -> slot) per node while lowering
    for t in range(C):
        evs = ev_by_step.get(t, [])
        for e in evs:
            if e.phase == EventPhase.START and e.kind == EventKind.DRAIN:
                for n in e.nodes:
                    meta(n, t, op=Op.KV_DRAIN, collective=Collective.UNICAST, dst=n,
                         route_id=ROUTE_LOCAL, kv_id=e.block, length=0)
        for (b, n), s in slots_at[t].items():
            slot_of[n][b] = s
        fetches = list(plan.fetches(t))
        for layer in range(L):
            half = (layer & 1) * (C * stride)       # ping-pong staging halves
            recv_off = np.zeros(N, dtype=np.int64)
            staged = {}                               # (node, block) -> staging address
            for b, src, dsts, nbytes in fetches:
                ln = int(plan.chunk_tokens[b]) * layer_tok
                # a holder sends from its pool; a ring forwarder from where it just received it
                a = addr(src, slot_of[src][b], layer) if b in slot_of[src] else staged[(src, b)]
                dma(src, t, a, ln, DmaDir.LOAD)
                rid = routes.multicast(src, dsts)
                meta(src, t, op=Op.KV_FETCH,
                     collective=Collective.MULTICAST if len(dsts) > 1 else Collective.UNICAST,
                     dst=min(dsts), route_id=rid,
                     kv_id=b * L + layer, length=ln)
                for d in dsts:
                    staged[(d, b)] = staging[d] + half + int(recv_off[d])
                    dma(d, t, staged[(d, b)], ln, DmaDir.STORE, source=(src, Op.KV_FETCH, b * L + layer))
                    recv_off[d] += stride
            for n in plan.compute_nodes:
                held = [s for b, s in slot_of[n].items() if b < t]
                for first, count in _runs(held):
                    dma(n, t, addr(n, first, layer), count * stride, DmaDir.LOAD)
                if recv_off[n]:
                    dma(n, t, staging[n] + half, int(recv_off[n]), DmaDir.LOAD)
            # block t: its owner writes it, multicasts it to the replicas, which store it
            ln = int(plan.chunk_tokens[t]) * layer_tok
            holders = [int(x) for x in plan.holders(t, t)]
            o = holders[0]
            dma(o, t, addr(o, slot_of[o][t], layer), ln, DmaDir.STORE, source=(o, Op.KV_REPLICA, t * L + layer))
            if len(holders) > 1:
                reps = holders[1:]
                meta(o, t, op=Op.KV_REPLICA,
                     collective=Collective.MULTICAST if len(reps) > 1 else Collective.UNICAST,
                     dst=min(reps), route_id=routes.multicast(o, reps),
                     kv_id=t * L + layer, length=ln)
                for n in reps:
                    dma(n, t, addr(n, slot_of[n][t], layer), ln, DmaDir.STORE,
                        source=(o, Op.KV_REPLICA, t * L + layer))
        if plan.handoff_bytes and t == C - 1:
            _lower_handoff(plan, progs, routes, dma, meta, slot_of, addr, layer_tok)
        for e in evs:
            if e.phase == EventPhase.END and e.kind in (EventKind.DRAIN, EventKind.INVALIDATE):
                for n in e.nodes:
                    meta(n, t, op=Op.KV_DRAIN if e.kind == EventKind.DRAIN else Op.KV_INVALIDATE,
                         collective=Collective.UNICAST, dst=n, route_id=ROUTE_LOCAL,
                         kv_id=e.block, length=0)
        for b, n, _ in frees_at[t]:
            slot_of[n].pop(b, None)
    _lower_decode(plan, progs, routes, dma, meta, slot_of, addr, stride)
    return progs


def _lower_handoff(plan, progs, routes, dma, meta, slot_of, addr, layer_tok):
    """pd: after prefill every block travels from its prefill node to its decode owner."""
    L, t = plan.request.model.num_layers, plan.num_chunks - 1
    for b in range(plan.num_chunks):
        src, dst = int(plan.holder_owner[b]), int(plan.owner[b])
        ln = int(plan.chunk_tokens[b]) * layer_tok
        for layer in range(L):
            dma(src, t, addr(src, slot_of[src][b], layer), ln, DmaDir.LOAD)
            meta(src, t, op=Op.KV_FETCH, collective=Collective.UNICAST, dst=dst,
                 route_id=routes.unicast(dst), kv_id=b * L + layer, length=ln)
            dma(dst, t, addr(dst, slot_of[dst][b], layer), ln, DmaDir.STORE, source=(src, Op.KV_FETCH, b * L + layer))


def _lower_decode(plan, progs, routes, dma, meta, slot_of, addr, stride):
    """One decode step (token 0 after the prompt); later tokens repeat it with seq = token index.
    KV-stationary: the root multicasts the query, every holder attends over its shard and the NIC
    reduces the (m, l, o) states on the tree towards the root.  pass-Q: the query and running
    state walk the ring instead."""
    m = plan.request.model
    L, N = m.num_layers, plan.nodes
    q_len = m.num_heads * m.head_dim * QUERY_ELEM_BYTES
    s_len = m.num_heads * (m.head_dim + 2) * STATE_ELEM_BYTES
    holders = sorted({int(o) for o in plan.owner})
    step = 0
    for layer in range(L):
        for n in holders:
            for first, count in _runs(list(slot_of[n].values())):
                dma(n, step, addr(n, first, layer), count * stride, DmaDir.LOAD, Stage.DECODE)
        if N == 1:
            continue
        if plan.scheme == Scheme.PASSQ:
            ring = holders if DECODE_ROOT in holders else [DECODE_ROOT] + holders
            for i, n in enumerate(ring):
                nxt = ring[(i + 1) % len(ring)]
                if nxt == n:
                    continue
                meta(n, step, stage=Stage.DECODE, op=Op.QUERY if i == 0 else Op.PARTIAL_STATE,
                     collective=Collective.UNICAST, dst=nxt, route_id=routes.unicast(nxt),
                     kv_id=layer, length=q_len + (0 if i == 0 else s_len))
            continue
        meta(DECODE_ROOT, step, stage=Stage.DECODE, op=Op.QUERY, collective=Collective.MULTICAST,
             dst=DECODE_ROOT, route_id=routes.broadcast(DECODE_ROOT), kv_id=layer, length=q_len)   # tag: root's group
        for n in range(N):
            meta(n, step, stage=Stage.DECODE, op=Op.PARTIAL_STATE, collective=Collective.REDUCE,
                 reduce_op=ReduceOp.SOFTMAX_MERGE, dst=DECODE_ROOT, route_id=routes.reduce(DECODE_ROOT),
                 kv_id=layer, length=s_len)
