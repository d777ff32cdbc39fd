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
    @property
    def compute_nodes(self) -> np.ndarray:
        return np.arange(self.n_nodes)

    def fetch_sources(self, b: int, c: int) -> np.ndarray:
        """Per node: itself if it holds block b in step c, else the lowest-id holder."""
        h = self.holders(b, c)
        return np.array([n if n in h else h[0] for n in range(self.n_nodes)])


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
    """The MARS execution model: in step c the chunk's query rows are split evenly over
    ``plan.compute_nodes``; each node reads every block b <= c from
    ``plan.fetch_sources(b, c)[node]`` (itself when it holds a copy), which must be one of
    ``plan.holders(b, c)`` (checked: a plan that reads from a node without a copy is an error).
    The node's engine produces one partial state per block; they are combined with the shared
    row maximum (MAX over the blocks) and merged in block order.  ``plan`` may be a
    ``Placement`` or an mcf.sw.mars ``Plan`` (same method names)."""
    t = _tokens(attn)
    bounds = np.concatenate([[0], np.cumsum(chunk_tokens)])
    if bounds[-1] != t:
        raise ValueError(f"chunks cover {bounds[-1]} tokens, the sequence has {t}")
    chunks = [np.arange(bounds[c], bounds[c + 1]) for c in range(len(chunk_tokens))]
    nodes = [int(n) for n in plan.compute_nodes]
    out = None
    for c, rows in enumerate(chunks):
        blocks = chunks[:c + 1]
        for b in range(c + 1):
            held = {int(h) for h in plan.holders(b, c)}
            src = plan.fetch_sources(b, c)
            bad = [n for n in nodes if int(src[n]) not in held]
            if bad:
                raise ValueError(f"plan: step {c}: node {bad[0]} reads block {b} from node "
                                 f"{int(src[bad[0]])}, which holds no copy")
        for qi in np.array_split(rows, len(nodes)):
            if qi.size == 0:
                continue
            res = _combine(attn, qi, blocks)
            if out is None:
                out = np.zeros((t,) + res.shape[1:], dtype=res.dtype)
            out[qi] = res
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
