"""Distributed-attention references: the same attention, computed the way N nodes compute it.

Every schedule here is a dataflow simulation: which node holds which query rows and KV
tokens at each step, which partial softmax states it emits, and how they are reduced.  The
loops run over nodes and steps, never over tokens or heads.

Fixed point (``FixedAttn``) uses the two-phase decode/prefill protocol of the hardware:

1. every node computes, for its query rows, the maximum score over the keys it holds;
   the maxima are combined with ReduceOp.MAX (signed int32 max, order-free);
2. every node computes its (m, l, o) state with m = that shared maximum, and the states are
   combined with ReduceOp.SOFTMAX_MERGE folded in increasing source-node order.  With equal
   m the merge is exact integer addition, so the result is bit-identical to single-node
   attention (``fixed.attention``) for every layout, node count and chunk size.

``decode_one_pass`` shows the alternative without the MAX round: states carry local maxima,
the fixed-order fold is deterministic but rounds, so it only approximates single-node.

Float (``FloatAttn``) merges (m, l, o) online in float64 in arrival order (<= 1e-5 from
single node).

Positions are token indices 0..T-1; key j is visible to query t iff j <= t.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import fixed as fx


# --- backends: partial states over (query rows, key tokens) ---------------------------------
class FixedAttn:
    """Fixed-point attention inputs of one layer: q BFP16 (prescaled), K4, V4 over T tokens."""

    def __init__(self, q, k, v, group: int):
        self.q, self.k, self.v, self.group = q, k, v, group

    def _s(self, qi, kj):
        qs = (self.q[0][qi], self.q[1][qi])
        ks = tuple(a[kj] for a in self.k)
        s = fx.scores(qs, *ks, self.group)
        valid = np.broadcast_to(fx.causal_mask(qi, kj)[None], s.shape)
        return s, valid

    def local_max(self, qi, kj) -> np.ndarray:
        """Words [Hq, |qi|]: max visible score, M_EMPTY where none."""
        qi, kj = np.asarray(qi), np.asarray(kj)
        if kj.size == 0:
            return np.full((self.q[0].shape[1], qi.size), fx.M_EMPTY, dtype=np.int32)
        s, valid = self._s(qi, kj)
        return np.where(valid.any(-1), np.where(valid, s, fx.INT32_MIN).max(-1), fx.M_EMPTY).astype(np.int32)

    def state(self, qi, kj, m_ref=None) -> np.ndarray:
        """State words [Hq, |qi|, d + 2] of rows qi over keys kj."""
        qi, kj = np.asarray(qi), np.asarray(kj)
        hq, d = self.q[0].shape[1], self.q[0].shape[2]
        if kj.size == 0:
            m = np.full((hq, qi.size), fx.M_EMPTY) if m_ref is None else m_ref
            return fx.encode_state(fx.State(np.asarray(m, np.int64), np.zeros((hq, qi.size), np.int64),
                                            np.zeros((hq, qi.size, d), np.int64)))
        s, valid = self._s(qi, kj)
        vs = tuple(a[kj] for a in self.v)
        return fx.encode_state(fx.partial_state(s, valid, *vs, self.group, m_ref))

    @staticmethod
    def finalize(words) -> np.ndarray:
        return fx.finalize(fx.decode_state(words))

    def single_node(self) -> np.ndarray:
        t = np.arange(self.q[0].shape[0])
        return fx.attention(self.q, self.k, self.v, t, t, self.group)


class FloatAttn:
    """Float attention inputs: q [T, Hq, d], k, v [T, Hkv, d] (float64 states)."""

    def __init__(self, q, k, v):
        self.q, self.k, self.v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
        self.group = self.q.shape[1] // self.k.shape[1]

    def state(self, qi, kj):
        """(m, l, o): m, l [Hq, |qi|], o [Hq, |qi|, d], relative to the local maximum."""
        qi, kj = np.asarray(qi), np.asarray(kj)
        hq, d = self.q.shape[1], self.q.shape[2]
        kv_of = np.arange(hq) // self.group
        q = self.q[qi].transpose(1, 0, 2)                       # [Hq, t, d]
        k = self.k[kj][:, kv_of].transpose(1, 2, 0)             # [Hq, d, s]
        v = self.v[kj][:, kv_of].transpose(1, 0, 2)             # [Hq, s, d]
        s = (q @ k) / np.sqrt(d)
        valid = fx.causal_mask(qi, kj)[None]
        s = np.where(valid, s, -np.inf)
        m = s.max(-1) if kj.size else np.full((hq, qi.size), -np.inf)
        p = np.exp(s - np.where(np.isfinite(m), m, 0)[..., None])
        return m, p.sum(-1), p @ v

    @staticmethod
    def merge(a, b):
        (ma, la, oa), (mb, lb, ob) = a, b
        m = np.maximum(ma, mb)
        safe = np.where(np.isfinite(m), m, 0)
        fa, fb = np.exp(ma - safe), np.exp(mb - safe)
        return m, la * fa + lb * fb, oa * fa[..., None] + ob * fb[..., None]

    @staticmethod
    def finalize(st) -> np.ndarray:
        m, l, o = st
        return (o / np.where(l > 0, l, 1)[..., None]).transpose(1, 0, 2)

    def single_node(self) -> np.ndarray:
        t = np.arange(self.q.shape[0])
        return self.finalize(self.state(t, t))


# --- layouts --------------------------------------------------------------------------------
def contiguous_shards(t: int, n: int) -> list[np.ndarray]:
    """Ring layout: node i holds tokens of the i-th of n near-equal contiguous pieces."""
    return np.array_split(np.arange(t), n)


def zigzag_shards(t: int, n: int) -> list[np.ndarray]:
    """Zigzag layout: 2n pieces; node i holds pieces i and 2n-1-i (balances causal work)."""
    pieces = np.array_split(np.arange(t), 2 * n)
    return [np.concatenate([pieces[i], pieces[2 * n - 1 - i]]) for i in range(n)]


def _two_phase(attn: FixedAttn, qi, contributions) -> np.ndarray:
    """contributions: [(node, key indices)] -> X32 output rows (MAX round, then merge fold)."""
    m = fx.reduce_max([attn.local_max(qi, kj) for _, kj in contributions])
    by_node: dict[int, list] = {}
    for node, kj in contributions:
        by_node.setdefault(node, []).append(kj)
    # One state per node (a node folds its own blocks locally: same m, so exact), then the
    # network fold in increasing node id.
    words = [fx.fold_states([attn.state(qi, kj, m) for kj in by_node[node]]) for node in sorted(by_node)]
    return attn.finalize(fx.fold_states(words))


def _combine(attn, qi, key_sets) -> np.ndarray:
    """Output rows of queries ``qi`` over ``key_sets`` combined in list order by one node:
    fixed point takes the shared row maximum (MAX) and folds the states in order; float
    merges online."""
    if isinstance(attn, FixedAttn):
        m = fx.reduce_max([attn.local_max(qi, kj) for kj in key_sets])
        return attn.finalize(fx.fold_states([attn.state(qi, kj, m) for kj in key_sets]))
    acc = attn.state(qi, key_sets[0])
    for kj in key_sets[1:]:
        acc = attn.merge(acc, attn.state(qi, kj))
    return attn.finalize(acc)


# --- (a), (b): ring pass-KV over a layout ----------------------------------------------------
def ring_attention(attn, shards: list[np.ndarray]) -> np.ndarray:
    """Pass-KV ring: node i keeps its query rows shards[i]; at step s it holds the KV of
    shards[(i - s) mod N].  Returns the output [T, Hq, d] assembled from every node."""
    n = len(shards)
    t = sum(len(s) for s in shards)
    out = None
    for i in range(n):
        qi = shards[i]
        arrivals = [shards[(i - s) % n] for s in range(n)]       # KV visiting node i, in order
        # Fixed point: the running max travels with the ring, then states relative to it.
        rows = _combine(attn, qi, arrivals)
        if out is None:
            out = np.zeros((t,) + rows.shape[1:], dtype=rows.dtype)
        out[qi] = rows
    return out


def zigzag_attention(attn, n: int) -> np.ndarray:
    return ring_attention(attn, zigzag_shards(_tokens(attn), n))


def _tokens(attn) -> int:
    return (attn.q[0] if isinstance(attn, FixedAttn) else attn.q).shape[0]


# --- (c): chunked prefill over any KV placement with temporary replicas ----------------------
@dataclass
class Placement:
    """Where KV blocks live during chunked prefill (what MARS decides).

    Block b = the KV of chunk b.  ``owner[b]`` holds it forever; ``replicas[b]`` is a list of
    (node, first_chunk, last_chunk): a temporary copy usable while chunks first..last are
    computed (created after b is produced, drained after last).  ``compute[c]`` is the node
    that computes chunk c and produces block c."""
    owner: list[int]
    replicas: list[list[tuple[int, int, int]]]
    compute: list[int]
    n_nodes: int = 0

    def holders(self, b: int, c: int) -> list[int]:
        if b == c:
            return [self.compute[c]]             # the block being produced is local
        nodes = {self.owner[b]}
        nodes.update(node for node, first, last in self.replicas[b] if first <= c <= last)
        return sorted(nodes)

    # The duck type ``plan_prefill_attention`` reads (mcf.sw.mars.Plan has the same names).
    def compute_node(self, c: int) -> int:
        return self.compute[c]

    def owner_fetches(self, c: int):
        """(block, src, [dst], bytes): the lowest-id holder sends what the compute node lacks."""
        o = self.compute[c]
        for b in range(c):
            h = self.holders(b, c)
            if o not in h:
                yield b, h[0], [o], 0

    @property
    def events(self) -> list[PlacementEvent]:
        """Owner copies VALID after their step; a replica (node, first, last) VALID after its
        block's step, DRAINING from the start of step ``last``, INVALID after it."""
        out = []
        n = len(self.owner)
        for c in range(n):
            out.append(PlacementEvent(c, "end", "OWNER", c, (self.owner[c],)))
            if self.replicas[c]:
                out.append(PlacementEvent(c, "end", "REPLICATE", c, tuple(r[0] for r in self.replicas[c])))
        for b in range(n):
            for node, _, last in self.replicas[b]:
                if last < n:
                    out += [PlacementEvent(last, "start", "DRAIN", b, (node,)),
                            PlacementEvent(last, "end", "INVALIDATE", b, (node,))]
        order = {"start": 0, "end": 1}
        return sorted(out, key=lambda e: (e.step, order[e.phase], e.kind != "OWNER"))


@dataclass(frozen=True)
class PlacementEvent:
    step: int
    phase: str
    kind: str
    block: int
    nodes: tuple


def random_placement(n_chunks: int, n_nodes: int, rng: np.random.Generator) -> Placement:
    """Owner-sharded blocks plus random temporary replicas that drain before the end."""
    owner = [int(x) for x in rng.integers(0, n_nodes, n_chunks)]
    compute = [int(x) for x in rng.integers(0, n_nodes, n_chunks)]
    replicas = []
    for b in range(n_chunks):
        reps = []
        for node in range(n_nodes):
            if node != owner[b] and rng.random() < 0.5:
                first = int(rng.integers(b + 1, n_chunks + 1))
                last = int(rng.integers(first, n_chunks + 1))
                reps.append((node, first, last))
        replicas.append(reps)
    return Placement(owner, replicas, compute, n_nodes)


def chunked_prefill_attention(attn, chunk: int, placement: Placement,
                              rng: np.random.Generator | None = None) -> np.ndarray:
    """Chunk c's queries attend to blocks 0..c; block b is served by one of its holders at
    that time (chosen by ``rng``, or the lowest node id).  Each serving node emits a partial
    state; the compute node reduces them (fixed: MAX round + node-ordered merge fold; float:
    merge in block order)."""
    t = _tokens(attn)
    chunks = [np.arange(s, min(s + chunk, t)) for s in range(0, t, chunk)]
    out = None
    for c, qi in enumerate(chunks):
        contributions = []
        for b in range(c + 1):
            holders = placement.holders(b, c)
            node = holders[int(rng.integers(len(holders)))] if rng is not None else holders[0]
            contributions.append((node, chunks[b]))
        if isinstance(attn, FixedAttn):
            rows = _two_phase(attn, qi, contributions)
        else:
            rows = _combine(attn, qi, [kj for _, kj in contributions])
        if out is None:
            out = np.zeros((t,) + rows.shape[1:], dtype=rows.dtype)
        out[qi] = rows
    return out


def plan_prefill_attention(attn, plan, chunk_tokens) -> np.ndarray:
    """The machine's execution model (docs/node.md), following the plan: chunk c is computed by
    ``plan.compute_node(c)``; the plan's directory ``events`` say which node holds a readable
    copy of which block when (owner copies and replicas: VALID -> DRAINING -> INVALID); in
    step c the hops of ``plan.owner_fetches(c)`` copy blocks into staging, each from a node that
    holds a copy (or received it earlier in the step); the compute node must then hold every
    block b < c, and attends over them with the shared row maximum (MAX over all its keys, then
    the states folded in block order), exactly as the node's two-pass attention does.

    A plan that sends a block from a node without a copy, reads a block the computing node
    neither holds nor fetched (a replica drained too early), or breaks the VALID -> DRAINING ->
    INVALID lifecycle raises ValueError naming the step, the node and the block.  ``plan`` may be
    a ``Placement`` or an mcf.sw.mars ``Plan`` (same names)."""
    t = _tokens(attn)
    bounds = np.concatenate([[0], np.cumsum(chunk_tokens)])
    if bounds[-1] != t:
        raise ValueError(f"chunks cover {bounds[-1]} tokens, the sequence has {t}")
    chunks = [np.arange(bounds[c], bounds[c + 1]) for c in range(len(chunk_tokens))]
    state: dict[tuple[int, int], str] = {}            # (block, node) -> VALID / DRAINING
    by_step: dict = {}
    for e in plan.events:
        by_step.setdefault((int(e.step), str(e.phase)), []).append(e)

    def apply(step, phase):
        for e in by_step.get((step, phase), []):
            kind = str(e.kind)
            for n in (int(x) for x in e.nodes):
                cur = state.get((int(e.block), n))
                if kind in ("OWNER", "REPLICATE", "HANDOFF"):
                    if cur is not None:
                        raise ValueError(f"plan: step {step}: block {e.block} written on node {n}, which holds it")
                    state[(int(e.block), n)] = "VALID"
                elif kind == "DRAIN":
                    if cur != "VALID":
                        raise ValueError(f"plan: step {step}: drain of block {e.block} on node {n} ({cur})")
                    state[(int(e.block), n)] = "DRAINING"
                elif kind == "INVALIDATE":
                    if cur != "DRAINING":
                        raise ValueError(f"plan: step {step}: invalidate of block {e.block} on node {n} ({cur})")
                    del state[(int(e.block), n)]

    out = None
    for c, rows in enumerate(chunks):
        apply(c, "start")
        o = int(plan.compute_node(c))
        staged: set[tuple[int, int]] = set()
        for b, src, dsts, _ in plan.owner_fetches(c):
            if (int(b), int(src)) not in state and (int(b), int(src)) not in staged:
                raise ValueError(f"plan: step {c}: node {src} sends block {b}, of which it holds no copy")
            staged.update((int(b), int(d)) for d in dsts)
        for b in range(c):
            if (b, o) not in state and (b, o) not in staged:
                raise ValueError(f"plan: step {c}: node {o} computes chunk {c} without a copy of block {b} "
                                 f"(not held, not fetched)")
        res = _combine(attn, rows, chunks[:c + 1])
        if out is None:
            out = np.zeros((t,) + res.shape[1:], dtype=res.dtype)
        out[rows] = res
        apply(c, "end")
    return out


# --- (d): KV-stationary decode -----------------------------------------------------------------
def decode_attention(attn, owner_of_token: np.ndarray, n_nodes: int) -> np.ndarray:
    """The last token's query against KV shards that stay put: node i holds the tokens with
    owner_of_token == i (the new token's KV included).  Returns [1, Hq, d]."""
    t = _tokens(attn)
    qi = np.array([t - 1])
    shards = [np.flatnonzero(owner_of_token == i) for i in range(n_nodes)]
    if isinstance(attn, FixedAttn):
        return _two_phase(attn, qi, [(i, shards[i]) for i in range(n_nodes)])
    acc = attn.state(qi, shards[0])
    for i in range(1, n_nodes):
        acc = attn.merge(acc, attn.state(qi, shards[i]))
    return attn.finalize(acc)


def decode_one_pass(attn: FixedAttn, owner_of_token: np.ndarray, n_nodes: int) -> np.ndarray:
    """Decode without the MAX round: each node's state carries its local max; SOFTMAX_MERGE
    folded in increasing node order.  Deterministic, approximates ``decode_attention``."""
    t = _tokens(attn)
    qi = np.array([t - 1])
    words = [attn.state(qi, np.flatnonzero(owner_of_token == i)) for i in range(n_nodes)]
    return attn.finalize(fx.fold_states(words))


def block_owners(t: int, block: int, n_nodes: int, owners=None) -> np.ndarray:
    """Token -> owner node for KV blocks of ``block`` tokens (round-robin unless given)."""
    nb = -(-t // block)
    owners = np.arange(nb) % n_nodes if owners is None else np.asarray(owners)
    return np.repeat(owners, block)[:t]
