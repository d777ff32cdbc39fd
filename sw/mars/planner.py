"""The MARS planner (MCF paper section 4, eqs. 1-29) and the baselines, behind one interface.

Two execution models read a plan.  The *machine's* (docs/node.md, what the node programs of
``mcf.sw.mars.lower`` execute): chunk c is computed through every layer by one node,
``compute_node(c)`` (its block's owner), which reads every history block it holds (owner copy
or live replica: ``holders``, ``events``) and receives the others into staging
(``owner_fetches``).  The *paper's* (the cost terms below and the SimPy cluster model,
``mcf.sim.cluster``, keep it for the paper's figures): every compute node takes part of every
chunk (``fetches``, ``step_view``).  The replica schedule, the events and the memory per node are
the same in both.

Execution model of the cost terms (the SimPy cluster model executes the same thing):

* Prefill runs the C = ceil(S / B) chunks in order, one *step* per chunk (eq. 23).  In step t
  the chunk's B query rows are split evenly over the compute nodes (eq. 6 divides by N); every
  node therefore needs the KV of every earlier block ("history") and of chunk t itself.
* Block t (the chunk's KV, B * M_token bytes, eq. 3) is produced into its owner's KV pool
  (paper section 5) and multicast to its replica holders during step t.  Holders of a block are
  ``order[owner][:r]`` (the owner, then the nearest nodes by topology).
* During step t every history block is held by ``r_t`` nodes (eq. 11's "all historical blocks use
  the same replica factor", here per step).  A node that holds no copy receives the block from
  its nearest holder (eq. 19); fetched blocks are transient (in the M_buf staging buffer).
* ``r_t`` never grows.  When it shrinks, the replicas of rank r_{t+1} .. r_t - 1 are marked
  DRAINING at the start of step t (decisions for step t + 1 are made one step ahead, so chunk t
  may still read them) and INVALID at the end of step t.  r_C = 1 (eq. 29): after the last step
  only owner copies remain, and owners never move, so decode starts with no migration.

Cost terms per step (busiest node, physically bounded, not fitted to the paper's figures):
T_comp = max(FLOPs / P_node, DDR bytes / DDR bandwidth); T_comm = (busiest port's bytes) / BW_eff
+ D_crit * tau_link; T_ps = PS time to push the step's Meta and DMA descriptors (overlaps);
T_chunk = max(T_comp, T_comm, T_ps) + T_sync (a barrier: diameter * tau_link), eq. 24.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from mcf.sw.errors import UserError
from mcf.sw.models.config import ModelConfig
from .profile import HardwareProfile
from mcf.spec.bits import SpecError
from mcf.spec.plan import SCHEMES, EventKind, EventPhase, Scheme
from mcf.spec.topology import Topology

SHARDINGS = ("contiguous", "zigzag", "round-robin")
PATHS = ("auto", "multicast", "ring", "tree", "doubling")
#: alpha (eq. 15) values the search tries when none is given; inf = no reuse bound.
ALPHA_GRID = (0.0, 1 / 64, 1 / 16, 1 / 4, 1.0, 4.0, math.inf)
#: Smallest chunk the search tries (one engine tile of query rows).
MIN_CHUNK = 16
#: Most (chunk x node) cells one plan holds.  The planner's arrays are O(chunks x nodes), about
#: 200 bytes a cell (measured: 16 384 chunks x 64 nodes, 250 MB), so 2^20 cells keep a plan
#: under ~300 MB; chunk sizes with more cells are left out of the search, a given one is refused,
#: before anything is allocated.
MAX_PLAN_CELLS = 1 << 20
#: Bytes of one decode query element and of one partial-state element (fp16 query, fp32 state).
QUERY_ELEM_BYTES = 2
STATE_ELEM_BYTES = 4

DEFAULT_SHARDING = {Scheme.MARS: "round-robin", Scheme.RING: "contiguous", Scheme.ZIGZAG: "zigzag",
                    Scheme.FULL: "contiguous", Scheme.PD: "contiguous", Scheme.PASSQ: "contiguous"}


@dataclass(frozen=True)
class PlanRequest:
    """Everything the planner depends on.  ``None`` means: the profile's default / search."""
    model: ModelConfig
    seq_len: int
    nodes: int
    profile: HardwareProfile
    scheme: str = "mars"
    budget_bytes: int | None = None     # S_node
    buffer_bytes: int | None = None     # M_buf
    chunk_size: int | None = None       # B (None: search)
    alpha: float | None = None          # eq. 15 (None: search)
    gamma: float | None = None          # eq. 8
    sharding: str | None = None
    topology: str | None = None
    path: str = "auto"

    def resolved(self) -> "PlanRequest":
        """Fill the defaults and check every parameter (UserError naming the bound)."""
        p = self.profile
        r = replace(self,
                    budget_bytes=p.kv_budget_bytes if self.budget_bytes is None else self.budget_bytes,
                    buffer_bytes=p.kv_buffer_bytes if self.buffer_bytes is None else self.buffer_bytes,
                    gamma=p.gamma if self.gamma is None else self.gamma,
                    sharding=self.sharding or DEFAULT_SHARDING.get(self.scheme, "contiguous"),
                    topology=self.topology or p.topology)
        _check_int("seq", r.seq_len, 1)
        _check_int("nodes", r.nodes, 1)
        from mcf.spec.packet import MAX_NODES
        if r.nodes > MAX_NODES:
            raise UserError(f"nodes={r.nodes}: at most {MAX_NODES} (8-bit node ids in Meta)")
        if r.scheme not in SCHEMES:
            raise UserError(f"scheme={r.scheme!r}: one of {', '.join(SCHEMES)}")
        if r.sharding not in SHARDINGS:
            raise UserError(f"sharding={r.sharding!r}: one of {', '.join(SHARDINGS)}")
        if r.path not in PATHS:
            raise UserError(f"path={r.path!r}: one of {', '.join(PATHS)}")
        _check_int("budget", r.budget_bytes, 1)
        _check_int("buffer", r.buffer_bytes, 1)
        if r.chunk_size is not None:
            _check_int("chunk", r.chunk_size, 1)
        if r.alpha is not None and not (r.alpha >= 0):
            raise UserError(f"alpha={r.alpha}: must be >= 0")
        if not (r.gamma > 0):
            raise UserError(f"gamma={r.gamma}: must be > 0")
        if r.scheme == Scheme.PD and r.nodes < 2:
            raise UserError(f"nodes={r.nodes}: scheme pd needs >= 2 (prefill and decode nodes)")
        try:
            topo = Topology(r.topology, r.nodes)
        except SpecError as exc:
            raise UserError(str(exc)) from None
        if topo.ports_needed > p.net_ports:
            raise UserError(f"topology={r.topology}: needs {topo.ports_needed} network ports per "
                            f"node, profile {p.name} has net_ports={p.net_ports}")
        m_token = r.model.kv_token_bytes
        if m_token * min(MIN_CHUNK, r.seq_len) > r.buffer_bytes and r.chunk_size is None:
            raise UserError(f"buffer={r.buffer_bytes}: below one {min(MIN_CHUNK, r.seq_len)}-token "
                            f"KV block ({m_token * min(MIN_CHUNK, r.seq_len):.0f} bytes, eq. 5)")
        if r.chunk_size is not None and r.chunk_size * m_token > r.buffer_bytes:
            raise UserError(f"chunk={r.chunk_size}: B * M_token = {r.chunk_size * m_token:.0f} "
                            f"bytes exceeds buffer={r.buffer_bytes} (eq. 5)")
        if r.chunk_size is not None and not fits_plan(r.seq_len, r.chunk_size, r.nodes):
            raise UserError(f"seq={r.seq_len}, chunk={r.chunk_size}, nodes={r.nodes}: "
                            f"{-(-r.seq_len // r.chunk_size)} chunks x {r.nodes} nodes is more than the "
                            f"planner holds ({MAX_PLAN_CELLS} cells); use chunk >= {min_chunk(r.seq_len, r.nodes)}")
        return r


def fits_plan(seq_len: int, chunk: int, nodes: int) -> bool:
    """Whether a plan of ``seq_len`` tokens in chunks of ``chunk`` on ``nodes`` stays within
    ``MAX_PLAN_CELLS`` (decided before allocating anything)."""
    return -(-seq_len // chunk) * (nodes + 1) <= MAX_PLAN_CELLS


def min_chunk(seq_len: int, nodes: int) -> int:
    """The smallest chunk size ``fits_plan`` admits."""
    return max(1, -(-seq_len * (nodes + 1) // MAX_PLAN_CELLS))


def _check_int(name, v, lo):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise UserError(f"{name}={v!r}: must be an integer >= {lo}")


def owners_for(sharding: str, num_chunks: int, nodes: int) -> np.ndarray:
    """Final owner of each block: contiguous ranges, zigzag (node n gets segments n and 2N-1-n of
    2N equal segments, pairing early light blocks with late heavy ones) or round-robin."""
    i = np.arange(num_chunks, dtype=np.int64)
    if sharding == "round-robin":
        return (i % nodes).astype(np.int32)
    if sharding == "contiguous":
        return (i * nodes // num_chunks).astype(np.int32)
    seg = i * 2 * nodes // num_chunks
    return np.where(seg < nodes, seg, 2 * nodes - 1 - seg).astype(np.int32)


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    """A replica-directory transition.  phase 'start' happens before step's chunk is computed,
    'end' after it completes.  kind: OWNER (owner copy written, VALID), REPLICATE (replica VALID),
    DRAIN (VALID -> DRAINING), INVALIDATE (DRAINING -> INVALID, buffer freed), HANDOFF (pd only:
    the owner copy arrives from the prefill node after prefill)."""
    step: int
    phase: EventPhase
    kind: EventKind
    block: int
    nodes: tuple[int, ...]

    def as_dict(self) -> dict:
        return {"step": self.step, "phase": self.phase, "kind": self.kind, "block": self.block,
                "nodes": list(self.nodes)}


@dataclass(frozen=True, eq=False)
class Plan:
    """A prefill + decode plan.  Arrays are numpy; index t = prefill step (= chunk) 0..C-1.

    How a consumer walks it: for t in range(num_chunks): ``step_view(t)`` lists the compute
    (FLOPs and DDR bytes per node), the replications of block t, the fetches of history blocks and
    the directory events; ``events`` holds all lifecycle events in order; ``memory[t]`` is each
    node's KV bytes during step t and ``memory[C]`` the decode-ready layout."""
    request: PlanRequest
    scheme: str
    chunk_size: int
    alpha: float | None
    topology: Topology
    chunk_tokens: np.ndarray       # [C] tokens in each chunk (the last may be short)
    block_bytes: np.ndarray        # [C] KV bytes of each block (eq. 3)
    owner: np.ndarray              # [C] final owner of each block
    holder_owner: np.ndarray       # [C] node holding the owner copy during prefill (pd: producer)
    compute_nodes: np.ndarray      # nodes that compute prefill (pd: the prefill group)
    r_step: np.ndarray             # [C+1] replica factor of history blocks during step t; r_step[C]=1
    memory: np.ndarray             # [C+1, N] KV bytes per node during each step, then the final layout
    flops: np.ndarray              # [C] engine ops of the busiest compute node in step t
    ddr_bytes: np.ndarray          # [C] DDR bytes it moves (weights, KV reads and writes)
    t_comp: np.ndarray             # [C] seconds
    t_comm: np.ndarray
    t_ps: np.ndarray
    t_sync: np.ndarray
    fetch_bytes: np.ndarray        # [C] bytes delivered by history fetches in step t
    prop_bytes: np.ndarray         # [C] bytes delivered by replica propagation in step t
    hop_bytes: np.ndarray          # [C] hop-weighted bytes (eq. 20 with h_near / h_dis)
    handoff_bytes: int
    t_handoff: float
    t_head: float
    path: str
    decode_token_s: float
    b_eq8: int | None
    search: list = field(default_factory=list)
    reason: str = ""

    # --- derived ---------------------------------------------------------------------------
    @property
    def nodes(self) -> int:
        return self.topology.n

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_tokens)

    @property
    def replica_factor(self) -> np.ndarray:
        """r(c) of eq. 16: replicas (owner included) block c is created with."""
        return self.r_step[1:]

    @property
    def t_chunk(self) -> np.ndarray:
        return np.maximum(np.maximum(self.t_comp, self.t_comm), self.t_ps) + self.t_sync

    @property
    def ttft_s(self) -> float:
        """Eq. 23: sum of chunk times, plus the pd hand-off and the first token's LM head."""
        return float(self.t_chunk.sum() + self.t_handoff + self.t_head)

    @property
    def comm_bytes(self) -> int:
        return int(self.fetch_bytes.sum() + self.prop_bytes.sum() + self.handoff_bytes)

    @property
    def staging_bytes(self) -> np.ndarray:
        """[C] bytes of fetched history per layer at the busiest compute node in each step."""
        new = (self.topology.rank[self.holder_owner] < self.r_step[1:, None]) * self.block_bytes[:, None]
        held_hist = (self.memory[:-1] - new)[:, self.compute_nodes]
        hist = np.concatenate([[0], np.cumsum(self.block_bytes)[:-1]])
        return (hist[:, None] - held_hist).max(axis=1) / self.request.model.num_layers

    @property
    def comm_hop_bytes(self) -> int:
        return int(self.hop_bytes.sum())

    def holders(self, block: int, step: int) -> np.ndarray:
        """Nodes holding a readable copy of ``block`` during ``step`` (owner first)."""
        if block > step:
            return np.empty(0, dtype=np.int32)
        r = self.r_step[step + 1] if block == step else self.r_step[step]
        return self.topology.order[self.holder_owner[block], :r]

    def replicas(self, block: int) -> list[int]:
        """Replica holders block is created with (owner excluded)."""
        return [int(n) for n in self.topology.order[self.holder_owner[block], 1:self.r_step[block + 1]]]

    def fetch_sources(self, block: int, step: int) -> np.ndarray:
        """For every node: the node it reads ``block`` from in ``step`` (itself when it holds a
        copy).  Nearest holder; ties go to the lower placement rank (the owner first)."""
        h = self.holders(block, step)
        d = self.topology.dist[h]                      # [r, N]
        return h[np.argmin(d, axis=0)]

    def fetches(self, step: int):
        """(block, src, [dst...], bytes) for every history block some node lacks in ``step``, in
        the order they are sent.  A source holds the block or received it earlier in the list."""
        if self.scheme in (Scheme.RING, Scheme.ZIGZAG, Scheme.PASSQ):
            # pass-KV: the block walks the ring of compute nodes from its owner, hop by hop; each
            # node receives it from its predecessor and forwards it (in this order)
            ring = [int(n) for n in self.compute_nodes]
            for b in range(step):
                i = ring.index(int(self.holder_owner[b]))
                walk = ring[i:] + ring[:i]
                for x, y in zip(walk, walk[1:]):
                    yield b, x, [y], int(self.block_bytes[b])
            return
        for b in range(step):
            src = self.fetch_sources(b, step)
            need = np.flatnonzero(src != np.arange(self.nodes))
            need = need[np.isin(need, self.compute_nodes)]
            for s in np.unique(src[need]):
                yield b, int(s), [int(n) for n in need[src[need] == s]], int(self.block_bytes[b])

    # --- the machine's execution model (docs/node.md): chunk c computed by its owner ----------
    def compute_node(self, step: int) -> int:
        """The node that computes chunk ``step`` through every layer: the block's owner during
        prefill (pd: its prefill node)."""
        return int(self.holder_owner[step])

    def owner_fetches(self, step: int):
        """(block, src, [dst], bytes) hops that bring every history block the computing node of
        ``step`` holds no copy of into its staging area, in send order (a transient copy, used
        for that chunk only).  mars / full / pd: one hop from the holder nearest to it (the owner
        on ties); ring / zigzag: the block walks the ring of compute nodes from its owner, each
        node on the way forwarding it to the next."""
        o = self.compute_node(step)
        ring = [int(n) for n in self.compute_nodes]
        for b in range(step):
            h = [int(x) for x in self.holders(b, step)]
            if o in h:
                continue
            if self.scheme in (Scheme.RING, Scheme.ZIGZAG, Scheme.PASSQ):
                i, j = ring.index(int(self.holder_owner[b])), ring.index(o)
                walk = [ring[(i + k) % len(ring)] for k in range((j - i) % len(ring) + 1)]
                for x, y in zip(walk, walk[1:]):
                    yield b, x, [y], int(self.block_bytes[b])
            else:
                src = h[int(np.argmin(self.topology.dist[h, o]))]
                yield b, src, [o], int(self.block_bytes[b])

    def step_view(self, t: int) -> dict:
        """What happens in prefill step t, for an executor (the SimPy cluster model): the compute
        nodes and their per-node work, block t's replication, the history fetches (in send order)
        and the directory events, with the modelled times of the step."""
        holders = [int(n) for n in self.holders(t, t)]
        return {
            "step": t, "tokens": int(self.chunk_tokens[t]),
            "compute_nodes": [int(n) for n in self.compute_nodes],
            "flops_per_node": float(self.flops[t]), "ddr_bytes_per_node": float(self.ddr_bytes[t]),
            "owner": holders[0], "replicate_to": holders[1:], "block_bytes": int(self.block_bytes[t]),
            "fetches": [{"block": b, "src": s, "dsts": d, "bytes": n} for b, s, d, n in self.fetches(t)],
            "events": [e for e in self._events() if e.step == t],
            "t_comp": float(self.t_comp[t]), "t_comm": float(self.t_comm[t]),
            "t_ps": float(self.t_ps[t]), "t_sync": float(self.t_sync[t]),
        }

    @property
    def events(self) -> list[Event]:
        return list(self._events())

    def _events(self):
        order, ho, r = self.topology.order, self.holder_owner, self.r_step
        C = self.num_chunks
        for t in range(C):
            lo, hi = r[t + 1], r[t]
            if hi > lo:
                for b in range(t):
                    yield Event(t, EventPhase.START, EventKind.DRAIN, b, tuple(int(n) for n in order[ho[b], lo:hi]))
            yield Event(t, EventPhase.END, EventKind.OWNER, t, (int(ho[t]),))
            if r[t + 1] > 1:
                yield Event(t, EventPhase.END, EventKind.REPLICATE, t, tuple(int(n) for n in order[ho[t], 1:r[t + 1]]))
            if hi > lo:
                for b in range(t):
                    yield Event(t, EventPhase.END, EventKind.INVALIDATE, b, tuple(int(n) for n in order[ho[b], lo:hi]))
        if self.handoff_bytes:
            for b in range(C):
                yield Event(C - 1, EventPhase.END, EventKind.HANDOFF, b, (int(self.owner[b]),))
            for b in range(C):
                yield Event(C - 1, EventPhase.END, EventKind.DRAIN, b, (int(ho[b]),))
                yield Event(C - 1, EventPhase.END, EventKind.INVALIDATE, b, (int(ho[b]),))

    def to_json(self, events: bool = True) -> dict:
        req = self.request
        C = self.num_chunks
        out = {
            "scheme": self.scheme,
            "model": req.model.name,
            "seq_len": req.seq_len,
            "nodes": self.nodes,
            "topology": self.topology.kind,
            "sharding": req.sharding,
            "chunk_size": self.chunk_size,
            "num_chunks": C,
            # null: no reuse bound (mars with alpha = inf) or a baseline without one
            "alpha": None if self.alpha is None or math.isinf(self.alpha) else self.alpha,
            "gamma": req.gamma,
            "budget_bytes": req.budget_bytes,
            "buffer_bytes": req.buffer_bytes,
            "kv_token_bytes": req.model.kv_token_bytes,
            "propagation_path": self.path,
            "b_eq8": self.b_eq8,
            "reason": self.reason,
            "chunks": [{"index": c, "tokens": int(self.chunk_tokens[c]), "owner": int(self.owner[c]),
                        "replica_factor": int(self.r_step[c + 1]), "replicas": self.replicas(c)}
                       for c in range(C)],
            "replica_factor_per_step": [int(x) for x in self.r_step],
            "memory_per_node": self.memory.astype(np.int64).tolist(),
            "comm_bytes": self.comm_bytes,
            "comm_hop_bytes": self.comm_hop_bytes,
            "handoff_bytes": int(self.handoff_bytes),
            "ttft_model_s": self.ttft_s,
            "ttft_breakdown_s": {"compute": float(self.t_comp.sum()), "comm": float(self.t_comm.sum()),
                                 "ps": float(self.t_ps.sum()), "sync": float(self.t_sync.sum()),
                                 "handoff": self.t_handoff, "lm_head": self.t_head,
                                 "exposed_comm": float((np.maximum(self.t_comm, self.t_comp) - self.t_comp).sum())},
            "decode_token_s": self.decode_token_s,
            # fetched history one layer needs, per step (busiest node): what the M_buf staging
            # area must hold (x2 for ping-pong); reported, not enforced by the planner
            "staging_bytes_per_layer_max": int(self.staging_bytes.max(initial=0)),
            "search": self.search,
        }
        if events:
            out["events"] = [e.as_dict() for e in self._events()]
        return out


# --------------------------------------------------------------------------------------------
# Evaluation of one (B, schedule) candidate
# --------------------------------------------------------------------------------------------
class BudgetError(UserError):
    def __init__(self, budget: int, need: int, chunk: int, what: str):
        self.budget, self.need, self.chunk, self.what = budget, need, chunk, what
        super().__init__(f"budget={budget}: below what {what} needs "
                         f"({need} bytes on the fullest node with chunk {chunk})")


class _Instance:
    """Everything that depends on (request, B) but not on the replica schedule."""

    def __init__(self, req: PlanRequest, B: int, topo: Topology):
        self.req, self.B, self.topo = req, B, topo
        N = req.nodes
        S = req.seq_len
        C = -(-S // B)
        self.C = C
        tok = np.full(C, B, dtype=np.int64)
        tok[-1] = S - B * (C - 1)
        self.tok = tok
        mt = req.model.kv_token_bytes
        self.bytes = tok * mt                                    # eq. 3
        self.tok_hist = np.concatenate([[0], np.cumsum(tok)])    # tokens before step t
        self.H = self.tok_hist * mt                              # history bytes before step t
        self.owner = owners_for(req.sharding, C, N)
        if req.scheme == Scheme.PD:
            self.compute_nodes = np.arange(max(1, N // 2), dtype=np.int32)
            self.holder_owner = owners_for("contiguous", C, len(self.compute_nodes))
            # decode nodes own the final layout
            dn = np.arange(len(self.compute_nodes), N, dtype=np.int32)
            self.owner = dn[owners_for(req.sharding, C, len(dn))]
        else:
            self.compute_nodes = np.arange(N, dtype=np.int32)
            self.holder_owner = self.owner
        # P[t, o]: bytes of blocks < t whose owner copy sits on o
        P = np.zeros((C + 1, N))
        P[1:] = np.cumsum(np.eye(N)[self.holder_owner] * self.bytes[:, None], axis=0)
        self.P = P
        self.own_rank_new = topo.rank[self.holder_owner]          # [C, N] rank of n for block t
        self._owner_need = None
        self._mem_cache: dict[bytes, tuple] = {}
        self._fit_cache: dict[bytes, np.ndarray] = {}

    # memory --------------------------------------------------------------------------------
    def mem_hist(self, r_hist: np.ndarray) -> np.ndarray:
        """[len, N] bytes of history blocks held when history factor is r_hist[t] (t = 0..C)."""
        N = self.req.nodes
        out = np.empty((len(r_hist), N))
        rank = self.topo.rank
        for r in np.unique(r_hist):
            rows = np.flatnonzero(r_hist == r)
            if r == 1:                      # owner copies only
                out[rows] = self.P[rows]
            elif r >= N:                    # everyone holds everything
                out[rows] = self.P[rows].sum(axis=1, keepdims=True)
            else:
                out[rows] = self.P[rows] @ (rank < r).astype(np.float64)
        return out

    def memory(self, r_step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """([C+1, N] bytes per node during each step, [C+1, N] history part), cached per schedule
        (row 0 holds no history, so r_step[0] does not matter)."""
        key = np.asarray(r_step[1:], dtype=np.int64).tobytes()
        hit = self._mem_cache.get(key)
        if hit is None:
            hist = self.mem_hist(r_step)
            mem = hist.copy()
            mem[:-1] += self.bytes[:, None] * (self.own_rank_new < r_step[1:, None])
            hit = self._mem_cache[key] = (mem, hist)
        return hit

    def fit(self, r_target: np.ndarray) -> np.ndarray:
        """Largest non-increasing schedule <= r_target whose exact per-node memory fits S_node."""
        budget = self.req.budget_bytes
        r = np.minimum.accumulate(np.clip(r_target, 1, self.req.nodes)).astype(np.int64)
        r[-1] = 1
        ones = np.ones_like(r)
        if self._owner_need is None:
            self._owner_need = self.memory(ones)[0].max(axis=1)
        need = self._owner_need
        if need.max() > budget:
            raise BudgetError(budget, int(need.max()), self.B, "the owner-only layout")

        def peak(hist_r, new_r):
            h = self.mem_hist(hist_r)
            h[:-1] += self.bytes[:, None] * (self.own_rank_new < new_r[:, None])
            return h.max(axis=1)

        if (self.memory(r)[0].max(axis=1) <= budget).all():
            return r
        lo, hi = ones.copy(), r.copy()          # lo feasible, hi maybe not
        while (hi > lo).any():
            mid = np.where(hi > lo, (lo + hi + 1) // 2, lo)
            ok = peak(mid, np.minimum(mid[:-1], r[1:])) <= budget
            lo = np.where(ok, mid, lo)
            hi = np.where(ok, hi, mid - 1)
        return np.minimum.accumulate(lo)


def _prop_cost(path: str, r: np.ndarray, topo: Topology):
    """(H_prop, D_crit, hop multiplier) of eq. 7 for creating r - 1 replicas along ``path``."""
    r = np.asarray(r)
    k = np.maximum(r - 1, 0)
    depth = topo.replica_depth[np.maximum(r - 1, 0)]
    hbar = np.where(k > 0, np.maximum(depth, 1), 0)
    lg = np.ceil(np.log2(np.maximum(r, 1))).astype(np.int64)
    if path == "multicast":     # the NIC's hardware multicast along the routing tree
        hops = k + (topo.kind == "switch") * (k > 0)
        return np.where(k > 0, 1, 0), depth, hops
    if path == "ring":          # forward along a chain through the replicas
        return np.where(k > 0, 1, 0), k * hbar, k * hbar
    if path == "tree":          # binary tree of unicasts: each parent sends two copies
        return np.where(k > 1, 2, np.where(k > 0, 1, 0)), lg * hbar, k * hbar
    return lg, lg * hbar, k * hbar  # recursive doubling: log2(r) rounds of unicast sends


def _evaluate(inst: _Instance, r_step: np.ndarray, alpha, path_req: str) -> dict:
    req, topo, prof = inst.req, inst.topo, inst.req.profile
    m = req.model
    N, C = req.nodes, inst.C
    Nc = len(inst.compute_nodes)
    mem, hist = inst.memory(r_step)
    rh = r_step[:-1]                 # history factor per step
    rn = r_step[1:]                  # factor of the new block per step
    bw, tau = prof.bw_eff, prof.link_latency_s
    ring_mode = req.scheme in (Scheme.RING, Scheme.ZIGZAG, Scheme.PASSQ)

    # compute roofline of the busiest node ----------------------------------------------------
    rows = -(-inst.tok // Nc)
    # the engine works on max_tokens query rows at a time: a partial tile costs a whole one
    rows = -(-rows // prof.max_tokens) * prof.max_tokens
    L = m.num_layers
    dense = 2.0 * m.params_per_layer * L * rows
    attn = 4.0 * L * m.num_heads * m.head_dim * rows * (inst.tok_hist[:-1] + inst.tok)   # eq. 6
    weights = m.params_per_layer * L * m.weight_bytes_per_element
    ddr = weights + inst.H[:-1] + inst.bytes * 2          # weights, history KV, write + read new KV
    # attention on the profile's path: on the array, jobs over the step's keys (history + the new block)
    t_comp = np.maximum(dense / prof.p_node + prof.attention_seconds(attn, inst.tok_hist[:-1] + inst.tok),
                        ddr / prof.ddr_Bps)
    t_head = max(2.0 * m.vocab_size * m.hidden_size / prof.p_node,
                 m.vocab_size * m.hidden_size * m.weight_bytes_per_element / prof.ddr_Bps)

    # communication ---------------------------------------------------------------------------
    Hh = inst.H[:-1]
    hist_c = hist[:-1][:, inst.compute_nodes]
    in_fetch = Hh - hist_c.min(axis=1)                   # busiest receiver
    own = inst.P[:-1]                                    # owner copies per node
    hsum, hmax = topo.nearest_holder_stats
    if ring_mode:
        # pass-KV: every block walks the (logical) ring of compute nodes; each hop forwards it.
        # (a logical ring over a switch or a grid: one hop per ring edge, a snake through the grid)
        out_fetch = in_fetch
        fetch_bytes = Hh * (Nc - 1)
        hop_f = fetch_bytes
        d_fetch = np.where(Hh > 0, Nc - 1, 0)
    else:
        out_fetch = np.where(rh < N, own.max(axis=1), 0.0)
        nonholders = N - rh if Nc == N else np.maximum(Nc - rh, 0)
        fetch_bytes = Hh * nonholders
        hop_f = Hh * hsum[rh - 1] * (Nc / N)
        d_fetch = np.where((Hh > 0) & (rh < N), hmax[rh - 1], 0)
    paths = [path_req] if path_req != "auto" else ["multicast", "ring", "tree", "doubling"]
    best = None
    for pth in paths:
        hp, dp, hm = _prop_cost(pth, rn, topo)
        tp = inst.bytes * hp / bw + dp * tau             # eq. 7
        if best is None or tp.sum() < best[0].sum():
            best = (tp, hp, dp, hm, pth)
    _, hp, dp, hm, path = best
    prop_bytes = inst.bytes * (rn - 1)
    hop_p = inst.bytes * hm
    deg = topo.degree
    port = np.maximum(np.maximum((in_fetch + inst.bytes * (rn > 1)) / deg,
                                 out_fetch + inst.bytes * hp),
                      (hop_f + hop_p) / max(topo.num_links, 1))
    t_comm = port / bw + np.maximum(d_fetch, dp) * tau                               # eq. 25
    if N == 1:
        t_comm = np.zeros(C)
    # PS: Meta descriptors for the blocks the node sends, DMA descriptors for the blocks it loads
    # (per layer, as lower() emits them: a Meta + a DMA load per block sent, a DMA store per block
    # received, a few DMA loads for the local history runs and the staging area, one store)
    blk = float(inst.bytes.max())
    sent = np.ceil(out_fetch / blk) + (rn > 1)
    recv = np.ceil(in_fetch / blk)
    t_ps = L * (sent * prof.meta_push_s + (sent + recv + 3) * prof.desc_push_s)
    t_sync = np.full(C, topo.diameter * tau + prof.nic_cycles_per_packet / prof.pl_clock_hz)

    # pd: hand the KV from the prefill group to the decode group after prefill --------------
    handoff_bytes, t_handoff = 0, 0.0
    if req.scheme == Scheme.PD:
        mem = mem.copy()                    # (the cached prefill memory stays untouched)
        mem[-1] = np.bincount(inst.owner, weights=inst.bytes, minlength=N)   # decode group's layout
        handoff_bytes = int(inst.bytes.sum())
        links = min(Nc, N - Nc)
        t_handoff = handoff_bytes / (links * bw) + topo.diameter * tau

    return dict(r_step=r_step, memory=mem, flops=dense + attn, ddr_bytes=ddr, t_comp=t_comp,
                t_comm=t_comm, t_ps=t_ps, t_sync=t_sync,
                fetch_bytes=fetch_bytes, prop_bytes=prop_bytes, hop_bytes=hop_f + hop_p,
                handoff_bytes=handoff_bytes, t_handoff=t_handoff, t_head=t_head, path=path,
                alpha=alpha)


def _ttft(ev: dict) -> float:
    t = np.maximum(np.maximum(ev["t_comp"], ev["t_comm"]), ev["t_ps"]) + ev["t_sync"]
    return float(t.sum() + ev["t_handoff"] + ev["t_head"])


def _comm(ev: dict) -> int:
    return int(ev["fetch_bytes"].sum() + ev["prop_bytes"].sum() + ev["handoff_bytes"])


def mars_target(inst: _Instance, alpha: float) -> np.ndarray:
    """Eq. 16 per step t = 0..C: min(r_mem (eq. 11), r_reuse (eq. 15)), clamped to [1, N]."""
    req, C, N = inst.req, inst.C, inst.req.nodes
    t = np.arange(C + 1)
    m_hist = np.concatenate([np.cumsum(inst.bytes), [inst.bytes.sum()]])   # blocks 0..t
    r_mem = np.floor(N * req.budget_bytes / m_hist)                         # eq. 11
    remaining = C - t                                                       # eq. 13: reads left
    r_reuse = np.full(C + 1, N, dtype=float) if math.isinf(alpha) else 1 + np.floor(alpha * remaining)
    r = np.clip(np.minimum(r_mem, r_reuse), 1, N).astype(np.int64)         # eq. 12 / 16
    r[-1] = 1                                                               # eq. 29
    return r


def schedule_for(inst: _Instance, alpha) -> np.ndarray:
    """The replica schedule r_step[0..C] of the instance's scheme."""
    s, C, N = inst.req.scheme, inst.C, inst.req.nodes
    if s == Scheme.MARS:
        target = mars_target(inst, alpha)
        key = target.tobytes()
        if key not in inst._fit_cache:          # alphas that give the same target: fit once
            r = inst.fit(target)
            r[0] = r[1] if len(r) > 1 else r[0]  # step 0 has no history: its factor is moot
            inst._fit_cache[key] = r
        return inst._fit_cache[key].copy()
    if s == Scheme.FULL:
        r = np.full(C + 1, N, dtype=np.int64)
        r[-1] = 1
        need = inst.memory(r)[0].max()
        if need > inst.req.budget_bytes:
            raise BudgetError(inst.req.budget_bytes, int(need), inst.B, "full replication")
        return r
    r = np.ones(C + 1, dtype=np.int64)                  # owner-only streaming baselines, pd
    inst.fit(r)                                         # budget check
    return r


def chunk_candidates(req: PlanRequest) -> list[int]:
    if req.chunk_size is not None:
        return [req.chunk_size]
    bmax = int(req.buffer_bytes // req.model.kv_token_bytes)       # eq. 5
    out = []
    b = MIN_CHUNK
    while b <= min(bmax, req.seq_len):
        out.append(b)
        b *= 2
    if req.seq_len <= bmax and req.seq_len not in out and (not out or req.seq_len < out[-1] * 2):
        out.append(req.seq_len)
    if not out:
        out = [min(bmax, req.seq_len)]
    out = [b for b in out if fits_plan(req.seq_len, b, req.nodes)]
    if not out:
        raise UserError(f"seq={req.seq_len}, nodes={req.nodes}: every chunk size the buffer allows "
                        f"(<= {bmax} tokens, eq. 5) makes more chunks x nodes than the planner holds "
                        f"({MAX_PLAN_CELLS} cells; chunk >= {min_chunk(req.seq_len, req.nodes)} would fit): "
                        "raise --buffer or shorten --seq")
    # fewer query rows than compute nodes leaves nodes idle; keep such chunks only if nothing else
    wide = [b for b in out if b >= req.nodes]
    return wide or out


def b_eq8(req: PlanRequest, topo: Topology, candidates: list[int]) -> int | None:
    """Eq. 8: the smallest candidate B with T_attn(B, 1) >= gamma * T_prop(B, r), r = the
    replica factor eq. 11 allows for the first block (full replication when memory allows)."""
    m, p = req.model, req.profile
    for B in sorted(candidates):
        r = int(max(1, min(req.nodes, req.nodes * req.budget_bytes // (B * m.kv_token_bytes))))
        t_attn = p.attention_seconds(4.0 * m.num_layers * m.num_heads * m.head_dim * B * B, B) / req.nodes
        hp, dp, _ = _prop_cost("multicast", np.array([r]), topo)
        t_prop = B * m.kv_token_bytes * hp[0] / p.bw_eff + dp[0] * p.link_latency_s
        if t_attn >= req.gamma * t_prop:
            return B
    return None


def decode_token_s(req: PlanRequest, topo: Topology) -> float:
    """Seconds per decoded token at the end of the prompt.  The root runs the dense layers (one
    token: weight-bandwidth bound); attention is KV-stationary: the query is multicast, every KV
    holder attends over its shard, partial (m, l, o) states are reduced on a tree.  pass-Q walks
    the query and running state around the ring instead; full keeps all KV on the root."""
    m, p = req.model, req.profile
    L = m.num_layers
    # Dense layers plus the LM head (vocab x hidden: a tied embedding is still read once per
    # token): one token is weight-bandwidth bound, so this is the DDR cap of one node.
    dense_params = m.params_per_layer * L + m.vocab_size * m.hidden_size
    dense = max(2.0 * dense_params / p.p_node, dense_params * m.weight_bytes_per_element / p.ddr_Bps)
    holders = req.nodes - max(1, req.nodes // 2) if req.scheme == Scheme.PD else req.nodes
    if req.scheme == Scheme.FULL:
        holders = 1
    kv_layer = req.seq_len * m.kv_token_bytes / L
    attn_local = (kv_layer / holders) / p.ddr_Bps
    q_bytes = m.num_heads * m.head_dim * QUERY_ELEM_BYTES
    s_bytes = m.num_heads * (m.head_dim + 2) * STATE_ELEM_BYTES
    tau, bw = p.link_latency_s, p.bw_eff
    nic = p.nic_cycles_per_packet / p.pl_clock_hz
    if holders == 1:
        per_layer = attn_local
    elif req.scheme == Scheme.PASSQ:
        per_layer = holders * attn_local + (holders - 1) * (tau + nic + (q_bytes + s_bytes) / bw)
    else:
        depth = topo.diameter if topo.kind != "switch" else 1
        _, fan_in = topo.reduce_tree(0)
        per_layer = (attn_local + depth * (tau + nic) + q_bytes / bw
                     + int(fan_in.max()) * s_bytes / bw + depth * s_bytes / bw)
    return float(dense + L * per_layer)


def plan(req: PlanRequest) -> Plan:
    """Solve eqs. 26-29: search B (powers of two allowed by eq. 5) and, for MARS, the replica
    schedule family alpha (eq. 15) with exact per-node memory fitting (eq. 27); minimise TTFT,
    then communication volume, then peak memory."""
    req = req.resolved()
    topo = Topology(req.topology, req.nodes)
    cands = chunk_candidates(req)
    alphas = ([req.alpha] if req.alpha is not None else list(ALPHA_GRID)) if req.scheme == Scheme.MARS else [None]
    rows, best, errors = [], None, []
    for B in cands:
        try:
            inst = _Instance(req, B, topo)
            scheds = {}
            for a in alphas:
                r = schedule_for(inst, a)
                key = tuple(r)
                if key in scheds:          # same schedule as a smaller alpha: same plan
                    continue
                scheds[key] = a
                ev = _evaluate(inst, r, a, req.path)
                ttft, comm, peak = _ttft(ev), _comm(ev), float(ev["memory"].max())
                rows.append({"chunk_size": B, "alpha": None if a is None or math.isinf(a) else a,
                             "ttft_s": ttft, "comm_bytes": comm, "peak_memory_bytes": int(peak)})
                score = (round(ttft, 6), comm, peak, -B)
                if best is None or score < best[0]:
                    best = (score, inst, ev)
        except BudgetError as e:
            errors.append(e)
    if best is None:
        if not errors:
            raise UserError("no feasible chunk size")
        raise min(errors, key=lambda e: e.need)     # the bound the user can actually meet
    _, inst, ev = best
    beq8 = b_eq8(req, topo, cands)
    reason = (f"B*={inst.B} minimises the modelled TTFT over {len(rows)} candidate(s) "
              f"(B in {cands}" + (f", alpha in {[('inf' if math.isinf(a) else a) for a in alphas]}"
                                  if req.scheme == Scheme.MARS and req.alpha is None else "") +
              f"); eq. 8 alone (smallest B hiding propagation, gamma={req.gamma}) gives "
              f"{beq8 if beq8 is not None else 'no feasible B'}")
    return Plan(request=req, scheme=req.scheme, chunk_size=inst.B, alpha=ev["alpha"], topology=topo,
                chunk_tokens=inst.tok, block_bytes=inst.bytes, owner=inst.owner,
                holder_owner=inst.holder_owner, compute_nodes=inst.compute_nodes,
                r_step=ev["r_step"], memory=ev["memory"], flops=ev["flops"], ddr_bytes=ev["ddr_bytes"],
                t_comp=ev["t_comp"], t_comm=ev["t_comm"],
                t_ps=ev["t_ps"], t_sync=ev["t_sync"], fetch_bytes=ev["fetch_bytes"],
                prop_bytes=ev["prop_bytes"], hop_bytes=ev["hop_bytes"],
                handoff_bytes=ev["handoff_bytes"], t_handoff=ev["t_handoff"], t_head=ev["t_head"],
                path=ev["path"], decode_token_s=decode_token_s(req, topo), b_eq8=beq8,
                search=rows, reason=reason)
