"""Execute a MARS plan's prefill on simulated nodes (SimPy).

The plan (``mcf.sw.mars.planner.Plan``) is the program: for each step t it names the chunk's
query rows (split evenly over ``plan.compute_nodes``), the replication of block t
(``plan.replicas``), the history fetches (``plan.fetches``: block, source, destinations) and the
replica-directory events (``plan.events``: OWNER, REPLICATE, DRAIN, INVALIDATE, HANDOFF).  This
module lowers that, per node, into engine operations and messages, and runs them; nothing here
re-plans (no choice of chunk, replica factor, holder or source is made here).

Per node and step t (a compute node):

1. ``dense``: QKV/O/MLP of its rows, streaming all layer weights from DDR once per step.
   The owner writes its copy of block t at the end of it (OWNER) and, if the plan replicates
   block t, multicasts it to the replica holders (REPLICATE on arrival).
2. ``attn-local``: attention of its rows over the keys it holds (owner copies, replicas, the
   chunk itself).
3. for each history message addressed to it in step t, in the order they arrive: attention over
   that message's keys.  Fetches are released ``lookahead`` steps ahead (the destination must
   have started step t - lookahead, which bounds the staging buffer) and once the source holds
   the blocks.  Ring / zigzag pass KV around the logical ring of compute nodes (store and
   forward, one hop per ring edge); the others send from the nearest holder (multicast when
   several nodes read the same block from the same holder).
4. step end: staging of step t freed; the step's INVALIDATE events free replica buffers once the
   node has finished the step *and* every message it sources from that block has been delivered
   (a draining copy stays readable while anyone still reads it).

``chunk_kv="allgather"`` adds what the plan leaves out: the chunk's rows are computed on every
compute node, so the chunk's own KV (needed by every node's rows for causal attention inside the
chunk, and by the owner for its copy) is all-gathered among the compute nodes in each step.  With
it, replicas come from the all-gather (no separate propagation).  Default ``"plan"``: the plan's
accounting (block t appears at its owner; only replicas and history fetches move).

After the last step: pd hands every block from its prefill holder to its decode owner; then the
LM head computes the first token.  TTFT is the time that finishes.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import simpy

from mcf.spec.plan import EventKind, Scheme
from mcf.sw.errors import UserError
from . import costs
from .resources import Network, Node

RING_SCHEMES = (Scheme.RING, Scheme.ZIGZAG, Scheme.PASSQ)
#: Default fetch lookahead (steps): MARS schedules remote KV ahead of use (paper 6.2); ring and
#: zigzag stream history KV during the step that reads it (paper 2.5).
DEFAULT_LOOKAHEAD = {Scheme.MARS: 1, Scheme.FULL: 1, Scheme.PD: 1, Scheme.RING: 0, Scheme.ZIGZAG: 0, Scheme.PASSQ: 0}


@dataclass
class Msg:
    step: int
    kind: str            # fetch | prop | kvx | handoff
    src: int
    dsts: tuple
    nbytes: float
    tokens: int
    blocks: tuple
    arrive: dict = None  # dst -> simpy.Event
    done: object = None


@dataclass
class PrefillResult:
    ttft_s: float
    step_end_s: np.ndarray              # [C] time the last node finished step t
    memory_per_step: np.ndarray         # [C+1, N] KV pool bytes at each node's step end; final
    staging_peak: np.ndarray            # [N] peak staging bytes
    peak_total: np.ndarray              # [N] peak (pool + staging) bytes
    comm_bytes: float                   # payload delivered (x destinations)
    comm_by_kind: dict
    link_wire_bytes: float              # hop-weighted wire bytes incl. Meta headers
    max_link_util: float
    engine_util: np.ndarray             # [N] compute-busy / TTFT
    flops: float
    ddr_bytes: np.ndarray
    messages: int
    traces: list                        # per node [(t, pool, staging)]


def _rows(tokens: int, k: int) -> np.ndarray:
    r = np.full(k, tokens // k, dtype=np.int64)
    r[: tokens % k] += 1
    return r


def fetch_groups(plan, step: int) -> list:
    """``plan.fetches(step)`` aggregated into messages: [(src, dsts, bytes, tokens, blocks)].

    Ring schemes: one group per owner, destinations in walk order (its history blocks walk the
    logical ring of compute nodes hop by hop, as ``plan.fetches`` lists them).  Others: blocks read by the same destinations from the same source share one
    (multicast) message.  Every history block of a step has the same replica factor
    (``r_step[step]``), so its sources are those of any block with the same holder of the owner
    copy: ``plan.fetch_sources`` is asked once per holder, not once per block (the plan's own
    generator does O(blocks) numpy calls per step; the aggregate is the same, see the tests)."""
    ho = np.asarray(plan.holder_owner[:step])
    bb = np.asarray(plan.block_bytes[:step], dtype=float)
    tk = np.asarray(plan.chunk_tokens[:step], dtype=np.int64)
    comp = [int(x) for x in plan.compute_nodes]
    groups: dict = {}
    if plan.scheme in RING_SCHEMES:
        for o in np.unique(ho):
            blocks = np.flatnonzero(ho == o)
            i = comp.index(int(o))
            walk = tuple(comp[i + 1:] + comp[:i])      # the hops, in order, after the owner
            if walk:
                groups[(int(o), walk)] = [float(bb[blocks].sum()), int(tk[blocks].sum()), tuple(blocks.tolist())]
        return [(s, d, *v) for (s, d), v in groups.items()]
    is_comp = np.zeros(plan.nodes, dtype=bool)
    is_comp[comp] = True
    idx = np.arange(plan.nodes)
    for o in np.unique(ho):
        blocks = np.flatnonzero(ho == o)
        src = plan.fetch_sources(int(blocks[0]), step)
        need = np.flatnonzero((src != idx) & is_comp)
        for s in np.unique(src[need]):
            key = (int(s), tuple(int(n) for n in need[src[need] == s]))
            g = groups.setdefault(key, [0.0, 0, ()])
            g[0] += float(bb[blocks].sum())
            g[1] += int(tk[blocks].sum())
            g[2] += tuple(blocks.tolist())
    return [(s, d, *v) for (s, d), v in groups.items()]


class PrefillSim:
    def __init__(self, plan, packet_payload: int = costs.DEFAULT_PACKET_PAYLOAD,
                 lookahead: int | None = None, chunk_kv: str = "plan", profile=None,
                 programs=None, ring_forward: str = "store"):
        if ring_forward not in ("store", "cut-through"):
            raise UserError(f"ring_forward={ring_forward!r}: one of store, cut-through")
        self.ring_forward = ring_forward
        if programs is not None and chunk_kv != "plan":
            raise UserError("chunk_kv=allgather cannot be combined with lowered programs "
                            "(the programs carry only the plan's transfers)")
        self.programs = programs
        if chunk_kv not in ("plan", "allgather"):
            raise UserError(f"chunk_kv={chunk_kv!r}: one of plan, allgather")
        self.plan = plan
        req = plan.request
        self.model = req.model
        self.profile = profile or req.profile
        self.lookahead = DEFAULT_LOOKAHEAD.get(plan.scheme, 1) if lookahead is None else int(lookahead)
        if self.lookahead < 0:
            raise UserError(f"lookahead={self.lookahead}: must be >= 0")
        self.chunk_kv = chunk_kv
        # lowered programs say exactly how each block moves (the runtime's ring fetch is a
        # multicast from the owner); without them, ring schemes pass KV around the ring
        self.ring = plan.scheme in RING_SCHEMES and programs is None
        self.env = simpy.Environment()
        self.topo = plan.topology
        self.N = plan.nodes
        self.C = plan.num_chunks
        self.net = Network(self.env, self.topo, self.profile, packet_payload)
        self.nodes = [Node(self.env, i, self.profile) for i in range(self.N)]
        self._build()

    # ------------------------------------------------------------------------------------------
    def _build(self):
        p, env, C, N = self.plan, self.env, self.C, self.N
        mt = self.model.kv_token_bytes
        tok = np.asarray(p.chunk_tokens, dtype=np.int64)
        hist = np.concatenate([[0], np.cumsum(tok)])
        comp = [int(x) for x in p.compute_nodes]
        self.comp, self.comp_set = comp, set(comp)
        k = len(comp)
        self.rows = [dict(zip(comp, _rows(int(tok[t]), k).tolist())) for t in range(C)]
        self.step_start = [[env.event() for _ in range(N)] for _ in range(C)]
        self.step_end = [[env.event() for _ in range(N)] for _ in range(C)]
        self.dense_done = [[env.event() for _ in range(N)] for _ in range(C)]
        self.produced = [env.event() for _ in range(C)]        # owner copy of block t written
        self.avail = {}                                        # (block, node) -> event
        self.inbox = [[simpy.Store(env) for _ in range(N)] for _ in range(C)]
        self.expect = np.zeros((C, N), dtype=np.int64)
        self.staged = np.zeros((C, N))
        self.sends_from = defaultdict(list)                    # (node, block) -> [Msg]
        self.msgs: list[Msg] = []
        self.local_keys = np.zeros((C, N))
        self.replica_at_end = [set() for _ in range(C)]
        self.ring_groups = [dict() for _ in range(C)]
        self.recv = {}                                         # (step, block, node) -> event

        for b in range(C):
            self.avail[(b, int(p.holder_owner[b]))] = self.produced[b]

        if self.programs is not None:
            self._build_from_programs(tok, hist)
            return

        # block t: replication (plan) or the chunk all-gather ------------------------------
        for t in range(C):
            reps = p.replicas(t)
            if self.chunk_kv == "allgather" and k > 1:
                kvx = {}
                for n in comp:
                    others = tuple(d for d in comp if d != n)
                    kvx[n] = self._msg(t, "kvx", n, others, self.rows[t][n] * mt, 0, ())  # keys counted in own (causal)
                    for d in others:
                        self.expect[t, d] += 1
                o = int(p.holder_owner[t])
                if o in kvx:
                    self.avail[(t, o)] = simpy.AllOf(env, [self.produced[t]] + [
                        mm.arrive[o] for s, mm in kvx.items() if s != o])
                far = []
                for d in reps:
                    if d in self.comp_set:
                        self.avail[(t, d)] = simpy.AllOf(env, [mm.arrive[d] for s, mm in kvx.items() if s != d])
                        self.replica_at_end[t].add(d)
                    else:
                        far.append(d)
                if far:
                    self._prop(t, far)
            elif reps:
                self._prop(t, reps)

        # history fetches --------------------------------------------------------------------
        for t in range(C):
            fetched = np.zeros(N, dtype=np.int64)
            for src, dsts, nbytes, ntok, blocks in fetch_groups(p, t):
                if self.ring:
                    self.ring_groups[t][src] = (nbytes, ntok, blocks)
                else:
                    self._msg(t, "fetch", src, dsts, nbytes, ntok, blocks)
                for d in dsts:
                    self.expect[t, d] += 1
                    fetched[d] += ntok
            # causal mask inside the chunk: a row attends to the rows before it, (B + 1) / 2 keys
            # on average (the engine skips masked tiles; the planner counts all B)
            own = (int(tok[t]) + 1) / 2
            for n in comp:
                self.local_keys[t, n] = int(hist[t]) - fetched[n] + own

        # pd hand-off ------------------------------------------------------------------------
        self.handoff = []
        self._handoff_from_plan(tok)

    def _handoff_from_plan(self, tok):
        p, C = self.plan, self.C
        if p.handoff_bytes:
            for b in range(C):
                src, dst = int(p.holder_owner[b]), int(p.owner[b])
                if src != dst:
                    self.handoff.append(self._msg(C - 1, "handoff", src, (dst,),
                                                  float(p.block_bytes[b]), int(tok[b]), (b,)))

    def _build_from_programs(self, tok, hist):
        """Messages from the lowered per-node Meta/DMA programs (``mcf.sw.mars.metaprog``): every prefill
        KV_REPLICA / KV_FETCH Meta a node pushes, summed over the layers of a step per
        (source, route): the route's destinations are the nodes whose route-table entry for it
        delivers locally.  A KV_FETCH whose destinations compute nothing is the pd hand-off."""
        from mcf.spec import Meta, Op, Stage
        p, mt, C = self.plan, self.model.kv_token_bytes, self.C
        L = self.model.num_layers
        progs = self.programs
        ring_prog = p.scheme in RING_SCHEMES
        dst_of: dict = {}
        acc: dict = {}
        for prog in progs:
            for stage, t, op in prog.ops:
                if stage != Stage.PREFILL or not isinstance(op, Meta) or op.op not in (Op.KV_FETCH, Op.KV_REPLICA):
                    continue
                d = dst_of.get(op.route_id)
                if d is None:
                    d = dst_of[op.route_id] = tuple(x for x in range(self.N)
                                                    if progs[x].routes.get(op.route_id, {}).get("local"))
                if op.op == Op.KV_REPLICA:
                    kind = "prop"
                else:
                    kind = "fetch" if set(d) & self.comp_set else "handoff"
                # a ring forwarder's hops are kept apart by the block's origin: aggregating
                # blocks of different origins on one ring edge would make the edge wait for itself
                origin = int(p.holder_owner[op.kv_id // L]) if ring_prog else -1
                a = acc.setdefault((t, kind, op.src, d, origin), [0, set()])
                a[0] += op.length
                a[1].add(op.kv_id // L)
        fetched = np.zeros((C, self.N))
        self.handoff = []
        for (t, kind, src, d, _), (nbytes, blocks) in sorted(acc.items(), key=lambda x: x[0][:3]):
            blocks = tuple(sorted(blocks))
            if kind == "prop":
                msg = self._msg(t, "prop", src, d, nbytes, int(tok[blocks[0]]), blocks)
                for x in msg.dsts:
                    self.avail[(blocks[0], x)] = msg.arrive[x]
            elif kind == "handoff":
                self.handoff.append(self._msg(C - 1, "handoff", src, d, nbytes, int(round(nbytes / mt)), blocks))
            else:
                ntok = int(round(nbytes / mt))
                msg = self._msg(t, "fetch", src, d, nbytes, ntok, blocks)
                for b in blocks:
                    for x in d:
                        self.recv[(t, b, x)] = msg.arrive[x]
                for x in d:
                    self.expect[t, x] += 1
                    fetched[t, x] += ntok
        for t in range(C):
            own = (int(tok[t]) + 1) / 2
            for n in self.comp:
                self.local_keys[t, n] = int(hist[t]) - fetched[t, n] + own

    def _msg(self, t, kind, src, dsts, nbytes, ntok, blocks) -> Msg:
        msg = Msg(t, kind, int(src), tuple(int(d) for d in dsts), float(nbytes), int(ntok), tuple(blocks))
        msg.arrive = {d: self.env.event() for d in msg.dsts}
        msg.done = self.env.event()
        self.msgs.append(msg)
        for b in msg.blocks:
            self.sends_from[(msg.src, b)].append(msg)
        return msg

    def _prop(self, t, dsts):
        p = self.plan
        msg = self._msg(t, "prop", int(p.holder_owner[t]), tuple(dsts), float(p.block_bytes[t]),
                        int(p.chunk_tokens[t]), (t,))
        for d in msg.dsts:
            self.avail[(t, d)] = msg.arrive[d]

    # ------------------------------------------------------------------------------------------
    def _stage(self, t, d, nbytes):
        self.nodes[d].alloc(nbytes, staging=True)
        self.staged[t, d] += nbytes

    def _msg_proc(self, msg: Msg):
        env, la = self.env, self.lookahead
        waits = []
        if msg.kind == "fetch":
            # the source holds the block, or (a ring forwarder) receives it earlier in the step
            waits += [self.avail.get((b, msg.src)) or self.recv[(msg.step, b, msg.src)] for b in msg.blocks]
            if msg.step - la >= 0:
                waits += [self.step_start[msg.step - la][d] for d in msg.dsts]
        elif msg.kind in ("prop", "kvx"):
            waits.append(self.dense_done[msg.step][msg.src])
        elif msg.kind == "handoff":
            waits.append(self.step_end[self.C - 1][msg.src])
        if waits:
            yield simpy.AllOf(env, waits)
        staging = msg.kind in ("fetch", "kvx")
        if staging:
            for d in msg.dsts:
                self._stage(msg.step, d, msg.nbytes)
        self.nodes[msg.src].dma(msg.nbytes)
        arr = self.net.transmit(msg.src, msg.dsts, msg.nbytes, msg.kind)
        for d, at in sorted(arr.items(), key=lambda x: x[1]):
            if at > env.now:
                yield env.timeout(at - env.now)
            self.nodes[d].dma(msg.nbytes)
            if msg.kind in ("prop", "handoff"):
                self.nodes[d].alloc(msg.nbytes)
            msg.arrive[d].succeed()
            if staging:
                self.inbox[msg.step][d].put((msg.nbytes, msg.tokens))
        msg.done.succeed()

    def _ring_step_proc(self, t: int):
        """Pass-KV of step t: every history group walks the logical ring of compute nodes,
        store and forward, one ring edge per round.  Released when every destination has
        started step t - lookahead and the groups exist; the rounds are then reserved on the
        links in round order (round j: each node forwards the group that originated j nodes
        behind it, as soon as it has arrived), which gives every arrival time without one
        SimPy event per hop (the hops of a ring step do not depend on anything else)."""
        env, comp = self.env, self.comp
        k = len(comp)
        groups = self.ring_groups[t]
        waits = []
        if t - self.lookahead >= 0:
            waits += [self.step_start[t - self.lookahead][n] for n in comp]
        for g in groups.values():
            waits += [self.produced[b] for b in g[2]]
        if waits:
            yield simpy.AllOf(env, waits)
        ts = max(t - self.lookahead, 0)
        start = {n: self.start_time[ts, n] for n in comp}
        pp = self.net.packet_payload
        pkt = costs.serialization_time(self.profile, pp, pp)
        ser = {g[0]: costs.serialization_time(self.profile, g[0], pp) for g in groups.values()}
        arr = {}
        sched = self.ring_sched[t]
        for j in range(k - 1):
            for pos in range(k):
                o = comp[(pos - j) % k]
                g = groups.get(o)
                if g is None:
                    continue
                i, nxt = comp[pos], comp[(pos + 1) % k]
                if j == 0:                                # its own blocks, once written
                    ready = max(start[i], max(self.prod_time[b] for b in g[2]))
                elif self.ring_forward == "store":
                    ready = arr[(o, i)]                  # the whole group has arrived
                else:                                     # forward from the first packet on
                    ready = arr[(o, i)] - ser[g[0]] + pkt
                ready = max(ready, start[nxt]) if self.lookahead == 0 else ready
                nbytes, ntok, _ = g
                self._stage(t, nxt, nbytes)
                self.nodes[i].dma(nbytes)
                self.nodes[nxt].dma(nbytes)
                at = self.net.transmit(i, (nxt,), nbytes, "fetch", earliest=ready)[nxt]
                arr[(o, nxt)] = at
                sched[nxt].append((at, nbytes, ntok))
        self.ring_ready[t].succeed()

    def _node_proc(self, n: int):
        env, p, node, m = self.env, self.plan, self.nodes[n], self.model
        mt = m.kv_token_bytes
        wbytes = costs.weight_bytes(m)
        is_comp = n in self.comp_set
        for t in range(self.C):
            self.start_time[t, n] = env.now
            self.step_start[t][n].succeed()
            if is_comp:
                rows = costs.tile_rows(self.profile, self.rows[t][n])   # whole engine tiles
                yield from node.op(costs.dense_flops(m, rows), wbytes + self.rows[t][n] * mt)
            self.dense_done[t][n].succeed()
            if int(p.holder_owner[t]) == n:
                node.alloc(float(p.block_bytes[t]))
                self.prod_time[t] = env.now
                self.produced[t].succeed()
            if is_comp:
                keys = float(self.local_keys[t, n])
                yield from node.op(0.0, keys * mt, attn_flops=costs.attn_flops(m, rows, keys), attn_keys=keys)
                if self.ring:
                    # groups arrive at known times (see _ring_step_proc); the engine, idle while
                    # it waited, takes every group that has arrived when it becomes free, in one op
                    yield self.ring_ready[t]
                    todo = sorted(self.ring_sched[t][n])
                    vt, i = node.engine_free, 0
                    while i < len(todo):
                        vt = max(vt, todo[i][0])
                        nbytes = ntok = 0
                        while i < len(todo) and todo[i][0] <= vt:
                            nbytes += todo[i][1]
                            ntok += todo[i][2]
                            i += 1
                        vt = node.reserve(0.0, nbytes, start=vt, attn_flops=costs.attn_flops(m, rows, ntok),
                                          attn_keys=ntok)
                    if vt > env.now:
                        yield env.timeout(vt - env.now)
                    if self.staged[t, n]:
                        node.free(self.staged[t, n], staging=True)
                        self.staged[t, n] = 0
                else:
                    box = self.inbox[t][n]
                    for _ in range(int(self.expect[t, n])):
                        nbytes, ntok = yield box.get()
                        yield from node.op(0.0, nbytes, attn_flops=costs.attn_flops(m, rows, ntok), attn_keys=ntok)
                        node.free(nbytes, staging=True)     # consumed: the staging slot is free
                        self.staged[t, n] -= nbytes
            self.mem_step[t, n] = node.pool
            if n in self.replica_at_end[t]:
                node.alloc(float(p.block_bytes[t]))   # the all-gathered block stays as a replica
            self.t_end[t] = max(self.t_end[t], env.now)
            self.step_end[t][n].succeed()

    def _invalidate_proc(self, step: int, block: int, n: int, nbytes: float):
        waits = [self.step_end[step][n]] + [mm.done for mm in self.sends_from[(n, block)]]
        yield simpy.AllOf(self.env, waits)
        self.nodes[n].free(nbytes)

    def _finish_proc(self):
        env, p, m = self.env, self.plan, self.model
        yield simpy.AllOf(env, [self.step_end[self.C - 1][n] for n in range(self.N)] +
                          [mm.done for mm in self.handoff])
        head_node = int(p.owner[-1]) if p.handoff_bytes else int(p.compute_nodes[-1])
        yield from self.nodes[head_node].op(costs.head_flops(m), costs.head_bytes(m))
        self.ttft = env.now

    # ------------------------------------------------------------------------------------------
    def run(self) -> PrefillResult:
        env, p = self.env, self.plan
        self.mem_step = np.zeros((self.C + 1, self.N))
        self.t_end = np.zeros(self.C)
        self.start_time = np.zeros((self.C, self.N))
        self.prod_time = np.zeros(self.C)
        if self.ring:
            self.ring_sched = [defaultdict(list) for _ in range(self.C)]
            self.ring_ready = [env.event() for _ in range(self.C)]
            for t in range(self.C):
                env.process(self._ring_step_proc(t))
        for msg in self.msgs:
            env.process(self._msg_proc(msg))
        for n in range(self.N):
            env.process(self._node_proc(n))
        for e in p.events:
            if e.kind == EventKind.INVALIDATE:
                for n in e.nodes:
                    env.process(self._invalidate_proc(e.step, e.block, int(n), float(p.block_bytes[e.block])))
        fin = env.process(self._finish_proc())
        env.run(until=fin)
        env.run()   # let trailing frees (replica invalidations) complete
        self.mem_step[self.C] = [nd.pool for nd in self.nodes]
        ttft = self.ttft
        return PrefillResult(
            ttft_s=ttft,
            step_end_s=self.t_end,
            memory_per_step=self.mem_step,
            staging_peak=np.array([max(s for _, _, s in nd.trace) for nd in self.nodes]),
            peak_total=np.array([nd.peak_total for nd in self.nodes]),
            comm_bytes=self.net.payload_bytes,
            comm_by_kind=dict(self.net.by_kind),
            link_wire_bytes=self.net.link_wire_bytes,
            max_link_util=self.net.max_link_utilization(ttft),
            engine_util=np.array([nd.busy_compute / ttft if ttft else 0.0 for nd in self.nodes]),
            flops=float(sum(nd.flops for nd in self.nodes)),
            ddr_bytes=np.array([nd.ddr_bytes for nd in self.nodes]),
            messages=self.net.messages,
            traces=[nd.trace for nd in self.nodes],
        )


def simulate_prefill(plan, **kw) -> PrefillResult:
    return PrefillSim(plan, **kw).run()
