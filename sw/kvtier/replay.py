"""Trace replay: a request stream against the cluster model with the tier (``mcf kv replay``).

Virtual time, real tier.  The replay is a discrete-event simulation (SimPy): requests arrive at
their trace offsets; the cluster (all W ranks in lockstep, as a MARS prefill) serves one prefill
at a time, taking the ``PrefillCurve``'s time for the tokens it computes (from the SimPy cluster
model, a measured run, or a given rate: its label travels with the figures).  Every tier
operation -- lookup, load, store -- is really executed against the rank's live server at the
virtual instant it starts, and its measured wall time is charged in virtual time.  Each rank's
server is a FIFO single server (Redis and Valkey execute commands on one thread), so loads queue
behind each other as on the real server.

Per request:

1. at arrival every rank looks up its owned chunks; the prefix is the minimum of the a_r;
2. the policy decides: ``model`` loads iff the cost model says the load is faster than the
   prefill it saves (given what each rank's server still has queued), ``always`` loads every
   hit, ``never`` is the cluster without the tier (no lookups, no stores);
3. ``async``: the ranks fetch at once, outside the cluster; the request joins the cluster's
   queue when all ranks completed or at its deadline, whichever comes first, with the prefix
   that arrived (min over ranks of what arrived contiguously; a rank that missed the deadline
   loaded nothing).  ``sync``: the fetch happens when the cluster takes the request, inside its
   step, so the cluster waits for it (the paper's synchronous path; same deadline);
4. the cluster prefills from the first missing chunk; TTFT is the time that ends;
5. the owners store the full chunks they were missing (in the background, on their servers).

Faults (``kill-rank:R@S``, ``pause-rank:R@S``, ``lose-completions:R@S``) act at virtual time S:
SIGKILL or SIGSTOP of rank R's server (embedded servers only), or from then on rank R's load
completions are never delivered (the paper's lost-completion bug) so its loads end at the
deadline.  Every request completes: a failed or late load falls back to recompute, counted.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from mcf.sw.errors import UserError

from .calibrate import filler
from .costmodel import CostModel, PrefillCurve
from .keys import full_chunks
from .shard import cluster_prefix, owned

MODES = ("async", "sync")
POLICIES = ("model", "always", "never")
FAULT_KINDS = ("kill-rank", "pause-rank", "lose-completions")


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    t: float


def parse_fault(text: str, ranks: int) -> Fault:
    """``KIND:RANK@SECONDS`` -> Fault (UserError naming the accepted form)."""
    try:
        kind, rest = text.split(":", 1)
        rank_s, t_s = rest.split("@", 1)
        rank, t = int(rank_s), float(t_s)
    except ValueError:
        raise UserError(f"fault {text!r}: expected KIND:RANK@SECONDS, KIND one of "
                        f"{', '.join(FAULT_KINDS)}") from None
    if kind not in FAULT_KINDS:
        raise UserError(f"fault {text!r}: kind {kind!r} is not one of {', '.join(FAULT_KINDS)}")
    if not 0 <= rank < ranks:
        raise UserError(f"fault {text!r}: rank {rank} not in [0, {ranks})")
    if not (t >= 0 and math.isfinite(t)):
        raise UserError(f"fault {text!r}: time must be >= 0 s")
    return Fault(kind, rank, t)


def percentile(x, q: float) -> float:
    """Linear interpolation between closest ranks (NumPy's default; the paper's)."""
    return float(np.percentile(np.asarray(x, dtype=float), q, method="linear")) if len(x) else math.nan


@dataclass
class Record:
    id: str
    arrival: float
    n: int
    full_chunks: int
    hit_chunks: int = 0              # lookup's prefix
    decision: str = "none"           # load | recompute | none (no hit / no tier)
    loaded_chunks: int = 0           # prefix actually used
    l1_chunks: int = 0
    l2_chunks: int = 0
    fallback: str = ""               # why fewer chunks were used than decided
    lookup_s: float = 0.0
    load_s: float = 0.0
    queue_s: float = 0.0
    compute_s: float = 0.0
    ttft_s: float = math.nan


@dataclass
class ReplayConfig:
    mode: str = "async"
    policy: str = "model"
    deadline_s: float = 5.0          # virtual seconds a load may take before its request recomputes
    faults: list = field(default_factory=list)
    link_Bps: float | None = None    # model of each rank's path to its server (None: loopback as measured)


class Replay:
    def __init__(self, requests, store, cost: CostModel, curve: PrefillCurve, cfg: ReplayConfig,
                 servers=None):
        import simpy
        if cfg.mode not in MODES:
            raise UserError(f"mode {cfg.mode!r}: one of {', '.join(MODES)}")
        if cfg.policy not in POLICIES:
            raise UserError(f"policy {cfg.policy!r}: one of {', '.join(POLICIES)}")
        if not cfg.deadline_s > 0:
            raise UserError(f"load deadline {cfg.deadline_s}: must be > 0 s")
        if cfg.link_Bps is not None and not (cfg.link_Bps > 0 and math.isfinite(cfg.link_Bps)):
            raise UserError(f"link {cfg.link_Bps} bytes/s: must be > 0")
        if cfg.faults and servers is None:
            raise UserError("faults need the embedded servers (the replay starts and kills them; no --url)")
        if curve.chunk != cost.chunk:
            raise UserError("the prefill curve and the cost model use different chunk sizes")
        longest = max(r.n for r in requests)
        if longest > curve.max_tokens:
            raise UserError(f"the prefill curve covers {curve.max_tokens} tokens, a prompt has {longest}")
        self.simpy = simpy
        # a copy: the replay's fetches update B (``CostModel.observe``) for this run only
        cost = dataclasses.replace(cost, sources=dict(cost.sources))
        self.requests, self.store, self.cost, self.curve, self.cfg = requests, store, cost, curve, cfg
        self.servers = servers
        self.env = simpy.Environment()
        self.W = cost.ranks
        if store is not None:
            store.clock = lambda: self.env.now
            if store.ranks != self.W:
                raise UserError(f"{store.ranks} servers for a cost model of {self.W} ranks")
        self.rank_server = [simpy.Resource(self.env, 1) for _ in range(self.W)]
        self.cluster = simpy.Resource(self.env, 1)
        self.backlog = [0.0] * self.W            # predicted seconds queued or in service per rank server
        self.server_busy = [0.0] * self.W
        self.cluster_busy = 0.0
        self.lost = set()                        # ranks whose completions are lost
        self.records: list[Record] = []
        self.counters = {"loads": 0, "recomputes": 0, "fallbacks": 0, "deadline_misses": 0,
                         "bad_values": 0, "lost_completions": 0}

    # --- tier operations in virtual time ---------------------------------------------------------
    def _server_op(self, r: int, nbytes: float, fn, uses_server: bool = True, moved=None):
        """Run ``fn()`` (real I/O) when rank r's server is free; charge its wall time -- or, with
        a link model, at least the time the bytes it moved (``moved(result)``) take on the link.
        While queued or in service it counts in rank r's backlog with its predicted time."""
        import time
        pred = self.cost.op_s(r, nbytes) if uses_server else 0.0
        self.backlog[r] += pred
        try:
            if not uses_server:
                t0 = time.perf_counter()
                out = fn()
                yield self.env.timeout(time.perf_counter() - t0)
                return out
            with self.rank_server[r].request() as req:
                yield req
                t0 = time.perf_counter()
                out = fn()
                d = time.perf_counter() - t0
                if self.cfg.link_Bps and moved is not None:
                    d = max(d, moved(out) / self.cfg.link_Bps)
                self.server_busy[r] += d
                yield self.env.timeout(d)
                return out
        finally:
            self.backlog[r] -= pred

    def _lookup(self, keys):
        st = self.store
        procs = [self.env.process(self._server_op(r, 0, lambda r=r: st.lookup_rank(r, keys),
                                                  uses_server=self._needs_server(r, keys, len(keys))))
                 for r in range(self.W)]
        yield self.env.all_of(procs)
        return [p.value[0] for p in procs]

    def _needs_server(self, r, keys, count) -> bool:
        return not all(keys[c] in self.store.l1[r] for c in owned(r, self.W, count))

    def _fetch_rank(self, r, keys, count):
        st = self.store
        f = st.fetch_rank(r, keys, count)
        for c in sorted(f.values):                     # each value must carry its own key
            if not f.values[c].startswith(keys[c]):
                self.counters["bad_values"] += 1
                f.hits = min(f.hits, c)
                break
        return f

    def _load(self, rec: Record, keys, count):
        """All ranks fetch in parallel; ends when all completed or at the deadline."""
        t0 = self.env.now
        self.counters["loads"] += 1
        done = {}
        completion = [self.env.event() for _ in range(self.W)]

        def one(r):
            nbytes = len(owned(r, self.W, count)) * self.cost.value_bytes
            server = self._needs_server(r, keys, count)
            f = yield from self._server_op(r, nbytes, lambda: self._fetch_rank(r, keys, count),
                                           uses_server=server, moved=lambda f: f.l2_chunks * self.cost.value_bytes)
            if server and f.status == "ok" and f.l2_chunks:
                # what the fetch achieved once it had the server (queueing excluded)
                service = f.seconds if not self.cfg.link_Bps else max(
                    f.seconds, f.l2_chunks * self.cost.value_bytes / self.cfg.link_Bps)
                self.cost.observe(r, f.l2_chunks * self.cost.value_bytes, service)
            if r in self.lost:
                self.counters["lost_completions"] += 1
                return                                  # nobody is told
            done[r] = f
            completion[r].succeed()
        for r in range(self.W):
            self.env.process(one(r))
        yield self.env.all_of(completion) | self.env.timeout(self.cfg.deadline_s)
        done = {r: f for r, f in done.items() if completion[r].processed or completion[r].triggered}
        hits = []
        for r in range(self.W):
            if r in done:
                hits.append(done[r].hits)
            else:
                first = owned(r, self.W, count)
                hits.append(first[0] if len(first) else count)
                self.counters["deadline_misses"] += 1
        rec.loaded_chunks = p = cluster_prefix(hits)
        l1 = sum(1 for f in done.values() for c in f.from_l1 if c < p)
        rec.l1_chunks, rec.l2_chunks = l1, p - l1
        statuses = sorted({done[r].status for r in done if done[r].status != "ok"}
                          | ({"deadline"} if len(done) < self.W else set()))
        if rec.loaded_chunks < count:
            self.counters["fallbacks"] += 1
            rec.fallback = ",".join(statuses) or "short"
        rec.load_s = self.env.now - t0

    def _decide(self, rec: Record) -> bool:
        p = rec.hit_chunks
        if p == 0 or self.cfg.policy == "never":
            return False
        if self.cfg.policy == "always":
            return True
        return self.cost.choose(p, self.backlog) == "load"

    def _store(self, keys, hits, count):
        """Each rank stores the full chunks it was missing (owned chunks from its a_r on)."""
        st = self.store
        for r in range(self.W):
            mine = [c for c in owned(r, self.W, count) if c >= hits[r]]
            if not mine:
                continue
            items = [(keys[c], filler(keys[c], st.value_bytes)) for c in mine]
            nbytes = len(items) * st.value_bytes
            self.env.process(self._server_op(r, nbytes, lambda r=r, items=items: st.store_rank(r, items),
                                             moved=lambda status, n=nbytes: n if status == "ok" else 0))

    def _request(self, req):
        env = self.env
        yield env.timeout(max(0.0, req.t - env.now))
        count = full_chunks(req.n, self.cost.chunk)
        rec = Record(req.id, env.now, req.n, count)
        self.records.append(rec)
        use_tier = self.cfg.policy != "never" and count > 0
        hits = None
        if use_tier:
            keys = self.store.keys(req.tokens)
            t0 = env.now
            hits = yield from self._lookup(keys)
            rec.lookup_s = env.now - t0
            rec.hit_chunks = cluster_prefix(hits)
        load = use_tier and self._decide(rec)
        if use_tier and rec.hit_chunks:
            rec.decision = "load" if load else "recompute"
            if not load:
                self.counters["recomputes"] += 1
        if load and self.cfg.mode == "async":
            yield from self._load(rec, keys, rec.hit_chunks)
        t_q = env.now
        with self.cluster.request() as slot:
            yield slot
            rec.queue_s = env.now - t_q
            if load and self.cfg.mode == "sync":
                t_busy = env.now
                yield from self._load(rec, keys, rec.hit_chunks)
                self.cluster_busy += env.now - t_busy
            cached = rec.loaded_chunks * self.cost.chunk
            rec.compute_s = self.curve.time(req.n, cached)
            self.cluster_busy += rec.compute_s
            yield env.timeout(rec.compute_s)
        rec.ttft_s = env.now - rec.arrival
        if use_tier:
            self._store(keys, hits, count)

    def _fault(self, f: Fault):
        yield self.env.timeout(f.t)
        if f.kind == "kill-rank":
            self.servers.kill(f.rank)
        elif f.kind == "pause-rank":
            self.servers.pause(f.rank)
        else:
            self.lost.add(f.rank)

    def run(self) -> "ReplayResult":
        for f in self.cfg.faults:
            self.env.process(self._fault(f))
        for req in self.requests:
            self.env.process(self._request(req))
        self.env.run()
        return ReplayResult(self)


class ReplayResult:
    def __init__(self, rp: Replay):
        self.records = rp.records
        self.cfg = rp.cfg
        self.counters = dict(rp.counters)
        self.store_counters = dict(rp.store.counters) if rp.store is not None else {}
        self.makespan = rp.env.now
        self.cluster_busy = rp.cluster_busy
        self.server_busy = list(rp.server_busy)
        self.cost = rp.cost
        self.curve = rp.curve

    def summary(self) -> dict:
        recs = self.records
        ttft = [r.ttft_s for r in recs]
        n_tok = sum(r.n for r in recs)
        chunk = self.cost.chunk
        from_store = sum(r.loaded_chunks for r in recs) * chunk
        arrivals = [r.arrival for r in recs]
        span = (max(arrivals) - min(arrivals)) if len(recs) > 1 else 0.0
        lam = (len(recs) - 1) / span if span > 0 else math.nan
        mean_hit = float(np.mean([r.hit_chunks for r in recs])) * chunk
        sc = self.store_counters
        timeouts = sum(v for k, v in sc.items() if k.endswith("_timeout")) + self.counters["deadline_misses"]
        errors = {k: v for k, v in sorted(sc.items())
                  if k.endswith(("_unavailable", "_missing", "skipped_down")) or k == "bad_value"}
        out = {
            "mode": self.cfg.mode, "policy": self.cfg.policy, "requests": len(recs),
            "completed": sum(1 for r in recs if math.isfinite(r.ttft_s)),
            "ttft_p50_s": percentile(ttft, 50), "ttft_p99_s": percentile(ttft, 99),
            "ttft_mean_s": float(np.mean(ttft)), "ttft_max_s": float(np.max(ttft)),
            "hit_ratio": sum(1 for r in recs if r.loaded_chunks) / len(recs),
            "token_hit_ratio": from_store / n_tok if n_tok else 0.0,
            "prompt_tokens": n_tok, "tokens_from_store": from_store,
            "tokens_from_l1": sum(r.l1_chunks for r in recs) * chunk,
            "loads": self.counters["loads"], "recomputes": self.counters["recomputes"],
            "fallbacks": self.counters["fallbacks"], "timeouts": timeouts,
            "deadline_misses": self.counters["deadline_misses"],
            "lost_completions": self.counters["lost_completions"],
            "bad_values": self.counters["bad_values"] + sc.get("bad_value", 0),
            "errors": errors, "stored_chunks": sc.get("stored_chunks", 0),
            "arrival_rate_per_s": lam,
            "rho": self.cost.rho(lam, mean_hit) if math.isfinite(lam) else math.nan,
            "cluster_utilization": self.cluster_busy / self.makespan if self.makespan else 0.0,
            "server_busy_fraction": [b / self.makespan if self.makespan else 0.0 for b in self.server_busy],
            "makespan_s": self.makespan,
            "cost_model": self.cost.describe(),
            "prefill_source": self.curve.source,
        }
        return out

    def per_request(self) -> list[dict]:
        return [dict(vars(r)) for r in self.records]
