"""``mcf kv``: the prefix KV tier -- replay a request stream against the cluster model with the
tier, fit the cost model's T0 against live servers, print the tier's figures for a model.
See docs/kvtier.md."""
from __future__ import annotations

import math
import sys
from contextlib import contextmanager

from mcf.sw.errors import UserError


def _tier_args(p, ranks_default=4) -> None:
    p.add_argument("--model", default="qwen2.5-1.5b", help="model preset, YAML file or checkpoint dir "
                   "(default qwen2.5-1.5b)")
    p.add_argument("--chunk", type=int, default=256, help="tokens per chunk = the MARS chunk size (default 256)")
    p.add_argument("--url", help="server URL template with {rank}, e.g. redis://kv-{rank}:6379 "
                   "(default: start local redis-server processes on free loopback ports)")
    p.add_argument("--server-mb", type=int, default=512,
                   help="memory limit of each local server, MiB, LRU eviction (default 512)")
    p.add_argument("--io-timeout", type=float, default=1.0,
                   help="socket timeout of every server call, s (default 1.0)")


def register(sub) -> None:
    p = sub.add_parser("kv", help="prefix KV tier: replay a request stream, fit T0, show the figures",
                       description="The prefix KV tier (second paper): chunk c of a prompt is stored "
                                   "by rank c mod W on its own Redis/Valkey server and loaded instead "
                                   "of recomputed when the cost model says it pays.")
    ks = p.add_subparsers(dest="kv_command", metavar="SUBCOMMAND", title="subcommands")

    r = ks.add_parser("replay", help="replay a request stream against the cluster model with the tier",
                      description="Send a request stream at its offsets (virtual time) to the SimPy "
                                  "cluster model with the tier; every lookup, load and store is "
                                  "executed against live servers and its measured time charged.  "
                                  "Prints p50/p99 TTFT, hit ratio, tokens from the store, loads, "
                                  "recomputes, timeouts.")
    src = r.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", metavar="FILE", help="JSON Lines trace (format: docs/kvtier.md)")
    src.add_argument("--synthetic", type=int, metavar="N", help="N synthetic requests with shared prefixes")
    r.add_argument("--ranks", type=int, default=4, help="ranks W = nodes = servers (default 4)")
    _tier_args(r)
    r.add_argument("--profile", default="kr260", help="hardware profile of the cluster model (default kr260)")
    rate = r.add_mutually_exclusive_group()
    rate.add_argument("--prefill-rate", type=float, metavar="TOKENS_PER_S",
                      help="a given constant prefill rate R instead of the cluster model")
    rate.add_argument("--prefill-from", metavar="FILE.json",
                      help="R measured by `mcf kv calibrate --out FILE.json` (same model, chunk and ranks)")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--async", dest="mode", action="store_const", const="async",
                      help="load outside the cluster's step (default)")
    mode.add_argument("--sync", dest="mode", action="store_const", const="sync",
                      help="load inside the cluster's step (it waits)")
    r.add_argument("--policy", default="model", choices=("model", "always", "never"),
                   help="model: load iff the cost model says it pays (default); always: load every "
                        "hit; never: no tier")
    r.add_argument("--compare", action="store_true",
                   help="run the stream three ways on the same servers: no tier, sync, async")
    r.add_argument("--fault", action="append", default=[], metavar="KIND:RANK@SECONDS",
                   help="kill-rank, pause-rank (reads never return) or lose-completions at a virtual "
                        "time (embedded servers only; repeatable)")
    r.add_argument("--deadline", type=float, default=5.0,
                   help="virtual seconds a load may take before its request recomputes (default 5)")
    r.add_argument("--cooldown", type=float, default=10.0,
                   help="virtual seconds a rank skips a server that failed (default 10)")
    r.add_argument("--link-gbps", type=float,
                   help="model each rank's path to its server at this rate (e.g. 1 for a KR260's PS "
                        "GbE); a server operation then takes at least its bytes over the link "
                        "(default: the loopback as measured)")
    r.add_argument("--l1-mb", type=int, default=0,
                   help="L1 LRU per rank, MiB (default 0 = off, every hit from the servers as after "
                        "a restart; an L1 hit costs a dictionary lookup here, a DMA on the board)")
    r.add_argument("--t0", type=float, help="a given T0 in seconds (default: fitted at start)")
    r.add_argument("--prime", action="store_true",
                   help="store every request's chunks before the replay (the paper's primed L2)")
    r.add_argument("--arrival-rate", type=float, default=0.02,
                   help="synthetic: requests per second (Poisson; default 0.02)")
    r.add_argument("--prefixes", type=int, default=4, help="synthetic: shared prefixes (default 4)")
    r.add_argument("--prefix-tokens", default="1024:4096", help="synthetic: LOW:HIGH prefix length")
    r.add_argument("--suffix-tokens", default="64:512", help="synthetic: LOW:HIGH own suffix length")
    r.add_argument("--seed", type=int, default=0, help="synthetic: seed (default 0)")
    r.add_argument("--write-trace", metavar="FILE", help="also write the stream as a trace file")
    r.add_argument("--plot", metavar="FILE.png", help="TTFT percentiles and choices over length, beside B*")
    r.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    r.set_defaults(func=cmd_replay, mode="async")

    f = ks.add_parser("fit", help="measure B per rank, fit T0 on one configuration, validate on others",
                      description="Against live servers: measure each rank's bandwidth B_r, time hits "
                                  "of several sizes for several rank counts, fit T0 on one "
                                  "configuration (median measured load minus modelled transfer) and "
                                  "compare the model T0 + max_r bytes_r / B_r with the measured load "
                                  "on all the others.")
    _tier_args(f)
    f.add_argument("--ranks-list", default="1,2,4", help="rank counts W to measure (default 1,2,4)")
    f.add_argument("--hits", default="4,16,64", help="hit sizes in chunks (default 4,16,64)")
    f.add_argument("--fit-on", default="4:16", metavar="W:CHUNKS", help="the configuration T0 is fitted "
                   "on (default 4:16)")
    f.add_argument("--repeats", type=int, default=5, help="loads per configuration (default 5)")
    f.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    f.set_defaults(func=cmd_fit)

    i = ks.add_parser("info", help="the tier's figures for a model: s, chunk value, R, B*",
                      description="Bytes per token and per chunk value (spec/kv.py), the prefill rate "
                                  "R from the cluster model, B* = s R, and whether MARS's layout is "
                                  "the tier's (chunk c on rank c mod W).")
    i.add_argument("--ranks", type=int, default=4, help="ranks W = nodes (default 4)")
    i.add_argument("--model", default="qwen2.5-1.5b", help="model preset (default qwen2.5-1.5b)")
    i.add_argument("--chunk", type=int, default=256, help="tokens per chunk (default 256)")
    i.add_argument("--profile", default="kr260", help="hardware profile (default kr260)")
    i.add_argument("--seq", type=int, default=16384, help="prompt length for R (default 16384)")
    i.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    i.set_defaults(func=cmd_info)
    c = ks.add_parser("calibrate", help="the cost model's terms measured: R from a cold prefill on a backend "
                      "(RTL cycles by default), B per rank, T0",
                      description="Run a cold MARS prefill of a random prompt on a cluster backend through the "
                                  "node runtime (default rtl: N RTL nodes under Verilator, TTFT from their "
                                  "CYCLES counters) and take R = tokens / TTFT; measure each rank's bandwidth "
                                  "B_r against live servers and fit T0 there; print s, R, B, B* = s R and the "
                                  "load-or-recompute choice for the prompt's cached prefix.  --out keeps the "
                                  "figures for `mcf kv replay --prefill-from`.")
    c.add_argument("--backend", default="rtl", help="model | isa | rtl: where the prefill runs (default rtl)")
    c.add_argument("--nodes", type=int, default=2, help="nodes = ranks W (default 2)")
    c.add_argument("--model", default="tiny", help="model preset, YAML file or checkpoint dir (default tiny; "
                   "random weights unless a checkpoint)")
    c.add_argument("--seq", type=int, default=16, help="prompt tokens (default 16)")
    c.add_argument("--chunk", type=int, default=4, help="tokens per chunk = the MARS chunk size (default 4)")
    c.add_argument("--seed", type=int, default=0, help="seed of the prompt and the random weights (default 0)")
    c.add_argument("--timeout", type=float, default=900.0, help="seconds the prefill step may take (default 900)")
    c.add_argument("--url", help="server URL template with {rank} (default: local redis-server processes)")
    c.add_argument("--server-mb", type=int, default=64, help="memory limit of each local server, MiB (default 64)")
    c.add_argument("--io-timeout", type=float, default=1.0, help="socket timeout of every server call, s (default 1.0)")
    c.add_argument("--out", metavar="FILE.json", help="also write the figures to this file (atomically)")
    c.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    c.set_defaults(func=cmd_calibrate)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


# --- shared pieces ---------------------------------------------------------------------------------
def _range(text: str, name: str) -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in text.split(":"))
    except ValueError:
        raise UserError(f"{name} {text!r}: expected LOW:HIGH") from None
    return lo, hi


def _ints(text: str, name: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{name} {text!r}: expected a comma-separated list of integers") from None
    if not out or min(out) < 1:
        raise UserError(f"{name} {text!r}: integers >= 1")
    return out


def _check_common(args) -> None:
    if not args.chunk >= 1:
        raise UserError(f"chunk={args.chunk}: must be >= 1")
    if not args.io_timeout > 0:
        raise UserError(f"io-timeout={args.io_timeout}: must be > 0 s")
    if args.url is None and args.server_mb < 1:
        raise UserError(f"server-mb={args.server_mb}: must be >= 1")


def prefill_curve(model, profile: str, ranks: int, chunk: int, max_tokens: int, rate: float | None = None):
    """R as a PrefillCurve: a given constant, or the SimPy cluster model's MARS prefill (whose
    layout must be the tier's)."""
    from mcf.sw.kvtier.costmodel import PrefillCurve
    from mcf.sw.kvtier.shard import check_mars_layout
    if rate is not None:
        return PrefillCurve.constant(rate, chunk, max_tokens, f"given: R = {rate:g} tokens/s (--prefill-rate)")
    from mcf.sim.cluster import run
    seq = max(chunk, -(-int(max_tokens) // chunk) * chunk)
    sim = run(model, seq, ranks, "mars", profile, chunk=chunk, decode=None)
    check_mars_layout(sim.plan, chunk, ranks)
    name = model if isinstance(model, str) else model.name
    ends = tuple(float(x) for x in sim.prefill.step_end_s)
    return PrefillCurve(chunk, ends, float(sim.prefill.ttft_s - ends[-1]),
                        f"model: SimPy cluster model, MARS on {ranks} x {profile}, {name}, chunk {chunk} "
                        f"(mcf simulate --model {name} --seq {seq} --nodes {ranks} --chunk {chunk} "
                        f"--profile {profile})")


def measured_curve(path: str, model: str, ranks: int, chunk: int, max_tokens: int):
    """R from a file ``mcf kv calibrate --out`` wrote, for the same model, ranks and chunk."""
    import json

    from mcf.sw.kvtier.costmodel import PrefillCurve
    try:
        with open(path) as f:
            cal = json.load(f)
        rate, src = float(cal["prefill_rate_tokens_per_s"]), str(cal["cost_model"]["sources"]["R"])
        got = (cal["model"], int(cal["nodes"]), int(cal["chunk"]))
    except OSError as e:
        raise UserError(f"--prefill-from {path}: {e.strerror or e}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"--prefill-from {path}: not a file of `mcf kv calibrate --out` ({type(e).__name__}: {e})") from None
    if got != (model, ranks, chunk):
        raise UserError(f"--prefill-from {path}: measured for model {got[0]} on {got[1]} ranks, chunk {got[2]}; this "
                        f"replay is model {model} on {ranks} ranks, chunk {chunk}")
    return PrefillCurve.constant(rate, chunk, max_tokens, src)


@contextmanager
def open_tier(cfg, ranks: int, chunk: int, url: str | None, server_mb: int, io_timeout: float,
              l1_mb: int = 0, cooldown_s: float = 1.0, weights: str = "synthetic"):
    """-> (ShardedStore, LocalServers or None); servers stopped and clients closed on exit."""
    from mcf.sw.kvtier.costmodel import chunk_value_bytes
    from mcf.sw.kvtier.keys import model_identity
    from mcf.sw.kvtier.resp import RankClient, TierError, rank_urls
    from mcf.sw.kvtier.servers import LocalServers
    from mcf.sw.kvtier.store import ShardedStore
    servers = None
    if url is not None:
        urls = rank_urls(url, ranks)
    else:
        servers = LocalServers(ranks, maxmemory_bytes=server_mb << 20)
    store = None
    try:
        if servers is not None:
            servers.start()
            urls = servers.urls
        clients = [RankClient(u, timeout_s=io_timeout) for u in urls]
        store = ShardedStore(clients, model_identity(cfg, weights, chunk), chunk_value_bytes(cfg, chunk),
                             l1_bytes=l1_mb << 20, cooldown_s=cooldown_s)
        for r, c in enumerate(clients):
            try:
                c.ping()
            except TierError as e:
                raise UserError(f"rank {r}: server does not answer: {e}") from None
        yield store, servers
    finally:
        if store is not None:
            store.close()
        if servers is not None:
            servers.stop()


def _reset(store, flush: bool) -> None:
    if flush:
        for c in store.clients:
            c.flush()
    for l1 in store.l1:
        for k in list(l1._d):
            l1.discard(k)
    store.counters.clear()
    store.down_until = [float("-inf")] * store.ranks


def calibrate(store, cfg, chunk: int, curve, t0: float | None = None, fit_chunks: int | None = None,
              link_Bps: float | None = None):
    """CostModel with B measured per rank now (capped by a link model if given) and T0 fitted
    now (or given)."""
    from mcf.sw.kvtier.calibrate import fit_on, measure_bandwidth
    from mcf.sw.kvtier.costmodel import CostModel, bytes_per_token
    B = measure_bandwidth(store, chunks=8, repeats=5)
    sources = {"s": "model: spec/kv.py chunk value / chunk",
               "R": curve.source,
               "B": "measured: MGET of 8 chunk values per rank, median of 5, this run"}
    cm = CostModel(bytes_per_token(cfg, chunk), chunk, store.value_bytes, tuple(B), 0.0, curve, sources)
    if t0 is None:
        k = fit_chunks or 2 * store.ranks
        t0, _ = fit_on(store, cm.transfer_s, k, repeats=5)
        sources["T0"] = f"measured: fitted on {store.ranks} ranks x {k} chunks, median of 5, this run"
    else:
        sources["T0"] = "given (--t0)"
    cm.t0 = float(t0)
    if link_Bps:
        cm.bandwidth = tuple(min(b, link_Bps) for b in B)
        sources["B"] = (f"min(measured server rate, link model {link_Bps * 8 / 1e9:g} Gb/s per rank); "
                        + sources["B"])
    return cm


# --- replay ----------------------------------------------------------------------------------------
def cmd_replay(args) -> int:
    out = replay_figures(args)
    for s in out["arms"]:
        if s["policy"] != "never" and math.isfinite(s["rho"]) and s["rho"] > 1:
            print(f"mcf kv: warning: {s['label']}: rho = lambda n s / B = {s['rho']:.2f} > 1: the servers "
                  f"cannot sustain this hit rate (synchronous loading has no steady state)", file=sys.stderr)
    if args.json:
        sys.stdout.write(_dumps(out) + "\n")
    else:
        _print_replay(out)
    if args.plot:
        print(f"wrote {args.plot}", file=sys.stderr)
    incomplete = [s for s in out["arms"] if s["completed"] != s["requests"]]
    if incomplete:
        raise UserError(f"{incomplete[0]['label']}: {incomplete[0]['requests'] - incomplete[0]['completed']} "
                        f"requests did not complete")
    return 0


def replay_figures(args) -> dict:
    """The replay behind ``mcf kv replay`` (and ``mcf bench kvtier``): -> the JSON object."""
    from mcf.sw.kvtier.calibrate import filler
    from mcf.sw.kvtier.replay import Replay, ReplayConfig, parse_fault
    from mcf.sw.kvtier.shard import check_ranks
    from mcf.sw.kvtier.trace import read_trace, synthetic_lines, parse_request, write_trace
    from mcf.sw.models import load_model

    _check_common(args)
    W = check_ranks(args.ranks)
    cfg = load_model(args.model)
    faults = [parse_fault(f, W) for f in args.fault]
    if faults and args.url:
        raise UserError("--fault needs the embedded servers (the replay kills or stops them): drop --url")
    if faults and args.compare:
        raise UserError("--fault cannot be combined with --compare (a killed server stays down)")
    if args.l1_mb < 0:
        raise UserError(f"l1-mb={args.l1_mb}: must be >= 0")
    if args.link_gbps is not None and not (args.link_gbps > 0 and math.isfinite(args.link_gbps)):
        raise UserError(f"link-gbps={args.link_gbps}: must be > 0")
    link = args.link_gbps * 1e9 / 8 if args.link_gbps else None
    if args.synthetic is not None:
        lines = synthetic_lines(args.synthetic, rate=args.arrival_rate, prefixes=args.prefixes,
                                prefix_tokens=_range(args.prefix_tokens, "prefix-tokens"),
                                suffix_tokens=_range(args.suffix_tokens, "suffix-tokens"), seed=args.seed)
        requests = [parse_request(o, cfg.vocab_size, f"synthetic request {i}") for i, o in enumerate(lines)]
        source = (f"synthetic: {args.synthetic} requests, {args.prefixes} shared prefixes of "
                  f"{args.prefix_tokens} tokens, suffixes {args.suffix_tokens}, {args.arrival_rate:g}/s Poisson")
        if args.write_trace:
            write_trace(args.write_trace, lines)
    else:
        requests = read_trace(args.trace, cfg.vocab_size)
        source = f"trace {args.trace}: {len(requests)} requests"
    if args.prefill_from:
        curve = measured_curve(args.prefill_from, cfg.name, W, args.chunk, max(r.n for r in requests))
    else:
        curve = prefill_curve(args.model, args.profile, W, args.chunk, max(r.n for r in requests), args.prefill_rate)
    if args.compare:
        arms = [("no tier", "never", "async"), ("sync", args.policy, "sync"), ("async", args.policy, "async")]
    else:
        arms = [(args.mode if args.policy != "never" else "no tier", args.policy, args.mode)]
    results = []
    with open_tier(cfg, W, args.chunk, args.url, args.server_mb, args.io_timeout, args.l1_mb,
                   args.cooldown) as (store, servers):
        cost = calibrate(store, cfg, args.chunk, curve, args.t0, link_Bps=link)
        for label, policy, mode in arms:
            _reset(store, flush=args.url is None)
            if args.prime and policy != "never":
                for req in requests:
                    keys = store.keys(req.tokens)
                    store.store(keys, {c: filler(keys[c], store.value_bytes) for c in range(len(keys))})
                _reset(store, flush=False)              # L1 empty, as after an engine restart
            rcfg = ReplayConfig(mode=mode, policy=policy, deadline_s=args.deadline, faults=faults, link_Bps=link)
            res = Replay(requests, store if policy != "never" else None, cost, curve, rcfg, servers).run()
            results.append((label, res))
    out = {"source": source, "model": cfg.name, "ranks": W, "chunk": args.chunk, "profile": args.profile,
           "servers": "embedded" if args.url is None else args.url, "faults": args.fault,
           "cost_model": cost.describe(), "arms": []}
    for label, res in results:
        s = res.summary()
        s["label"] = label
        s.pop("cost_model")
        out["arms"].append(s)
    if args.plot:
        from mcf.sw.kvtier.plot import plot_replay
        plot_replay(results, cost, args.plot,
                    f"{cfg.name} on {W} ranks, chunk {args.chunk}; R: {curve.source.split(' (')[0]}; "
                    f"{source.split(':')[0]}")
    return out


def _print_replay(out: dict) -> None:
    cm = out["cost_model"]
    print(f"prefix KV tier replay: {out['source']}")
    print(f"  {out['model']}, {out['ranks']} ranks, chunk {out['chunk']}, servers {out['servers']}"
          + (f", faults {', '.join(out['faults'])}" if out["faults"] else ""))
    src = cm["sources"]
    print(f"  s  = {cm['s_bytes_per_token']:.0f} B/token ({src['s']})")
    print(f"  R  = {cm['prefill_rate_tokens_per_s_at_max']:.4g} tokens/s at the longest prompt ({src['R']})")
    print(f"  B  = {', '.join(f'{b / 1e9:.3g}' for b in cm['bandwidth_Bps_per_rank'])} GB/s per rank ({src['B']})")
    below = (f"below {cm['min_hit_tokens']:.0f} tokens recompute always wins" if math.isfinite(cm["min_hit_tokens"])
             else "recompute wins at every length here (R T0 exceeds the longest prompt)")
    print(f"  T0 = {cm['t0_s'] * 1e3:.3g} ms ({src['T0']});  B* = s R = {cm['b_star_Bps_at_max'] / 1e6:.3g} MB/s; "
          f"{below}")
    hdr = ("arm", "p50 TTFT s", "p99 TTFT s", "hit ratio", "from store", "loads", "recomputes",
           "fallbacks", "timeouts", "rho")
    rows = [(s["label"], f"{s['ttft_p50_s']:.4g}", f"{s['ttft_p99_s']:.4g}", f"{s['hit_ratio']:.3f}",
             f"{s['token_hit_ratio']:.1%}", str(s["loads"]), str(s["recomputes"]), str(s["fallbacks"]),
             str(s["timeouts"]), f"{s['rho']:.3g}") for s in out["arms"]]
    w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(hdr)]
    print("  " + "  ".join(h.rjust(w[i]) if i else h.ljust(w[i]) for i, h in enumerate(hdr)))
    for r in rows:
        print("  " + "  ".join(c.rjust(w[i]) if i else c.ljust(w[i]) for i, c in enumerate(r)))
    for s in out["arms"]:
        if s["errors"] or s["lost_completions"] or s["bad_values"]:
            print(f"  {s['label']}: errors {s['errors']}, lost completions {s['lost_completions']}, "
                  f"bad values {s['bad_values']}, deadline misses {s['deadline_misses']}")


# --- fit -------------------------------------------------------------------------------------------
def cmd_fit(args) -> int:
    out = fit_figures(args)
    if args.json:
        sys.stdout.write(_dumps(out) + "\n")
        return 0
    t0, fw, fk = out["t0_s"], out["fit_on"]["ranks"], out["fit_on"]["hit_chunks"]
    print(f"T0 = {t0 * 1e3:.3g} ms, fitted on {fw} ranks x {fk} chunks ({out['servers']} servers, "
          f"{out['model']}, chunk {out['chunk']}: {out['chunk_value_bytes']} B per chunk value)")
    print(f"  {'ranks':>5} {'chunks':>6} {'MB':>8} {'B/rank GB/s (measured)':>24} {'load p50 ms (measured)':>23} "
          f"{'T0 + transfer ms (model)':>25} {'error':>7}")
    for c in out["configs"]:
        mark = "  <- fit" if c["fitted_here"] else ""
        bs = ",".join(f"{b / 1e9:.2f}" for b in c["bandwidth_Bps_per_rank"])
        print(f"  {c['ranks']:>5} {c['hit_chunks']:>6} {c['hit_bytes'] / 1e6:>8.2f} {bs:>24} "
              f"{c['load_measured_p50_s'] * 1e3:>23.3f} {c['load_model_s'] * 1e3:>25.3f} {c['error']:>+7.1%}{mark}")
    if out["validation_max_abs_error"] is not None:
        n = sum(not c["fitted_here"] for c in out["configs"])
        print(f"  validation on {n} configurations not used for the fit: median |error| "
              f"{out['validation_median_abs_error']:.1%}, max {out['validation_max_abs_error']:.1%}")
    return 0


def fit_figures(args) -> dict:
    """The measurement behind ``mcf kv fit``: -> the JSON object."""
    import numpy as np
    from mcf.sw.kvtier.calibrate import load_samples, measure_bandwidth
    from mcf.sw.kvtier.costmodel import CostModel, PrefillCurve, bytes_per_token, chunk_value_bytes, fit_t0
    from mcf.sw.models import load_model

    _check_common(args)
    cfg = load_model(args.model)
    ranks_list = _ints(args.ranks_list, "ranks-list")
    hits = _ints(args.hits, "hits")
    fw, fk = _range(args.fit_on, "fit-on")
    if fw not in ranks_list or fk not in hits:
        raise UserError(f"fit-on {args.fit_on}: W must be in --ranks-list and CHUNKS in --hits")
    if args.repeats < 1:
        raise UserError(f"repeats={args.repeats}: must be >= 1")
    kv_bytes = chunk_value_bytes(cfg, args.chunk)
    need = max(hits) * kv_bytes
    if args.url is None and need > (args.server_mb << 20) * 0.8:
        raise UserError(f"a hit of {max(hits)} chunks is {need >> 20} MiB: raise --server-mb above "
                        f"{int(need / 0.8) >> 20}")
    curve = PrefillCurve.constant(1.0, args.chunk, args.chunk, "unused")
    configs = []
    for W in ranks_list:
        with open_tier(cfg, W, args.chunk, args.url, args.server_mb, args.io_timeout) as (store, _):
            B = measure_bandwidth(store, chunks=8, repeats=args.repeats)
            cm = CostModel(bytes_per_token(cfg, args.chunk), args.chunk, store.value_bytes, tuple(B), 0.0, curve)
            for k in hits:
                samples = load_samples(store, cm.transfer_s, k, args.repeats, f"w{W}:".encode())
                configs.append({"ranks": W, "hit_chunks": k, "hit_bytes": k * kv_bytes,
                                "bandwidth_Bps_per_rank": B, "transfer_model_s": cm.transfer_s(k),
                                "samples": samples,
                                "load_measured_p50_s": float(np.median([m for m, _ in samples]))})
    fit = next(c for c in configs if c["ranks"] == fw and c["hit_chunks"] == fk)
    t0 = fit_t0(fit["samples"])
    for c in configs:
        c["load_model_s"] = t0 + c["transfer_model_s"]
        c["error"] = c["load_model_s"] / c["load_measured_p50_s"] - 1
        c["fitted_here"] = c is fit
        del c["samples"]
    val = [abs(c["error"]) for c in configs if not c["fitted_here"]]
    out = {"model": cfg.name, "chunk": args.chunk, "chunk_value_bytes": kv_bytes,
           "servers": "embedded" if args.url is None else args.url,
           "t0_s": t0, "fit_on": {"ranks": fw, "hit_chunks": fk},
           "validation_max_abs_error": max(val) if val else None,
           "validation_median_abs_error": float(np.median(val)) if val else None, "configs": configs}
    return out


# --- calibrate -------------------------------------------------------------------------------------
def cmd_calibrate(args) -> int:
    out = calibrate_figures(args)
    if args.out:
        from mcf.sw.cliutil import write_text
        write_text(args.out, _dumps(out) + "\n")
    if args.json:
        sys.stdout.write(_dumps(out) + "\n")
        return 0
    cm = out["cost_model"]
    print(f"{out['model']} on {out['nodes']} node(s), backend {out['backend']}, chunk {out['chunk']}, "
          f"{out['seq']} prompt tokens")
    print(f"  s  = {cm['s_bytes_per_token']:.1f} B/token ({cm['sources']['s']})")
    print(f"  R  = {out['prefill_rate_tokens_per_s']:.6g} tokens/s ({cm['sources']['R']})")
    print(f"  B  = {', '.join(f'{b / 1e6:.4g}' for b in cm['bandwidth_Bps_per_rank'])} MB/s per rank "
          f"({cm['sources']['B']})")
    print(f"  T0 = {cm['t0_s'] * 1e3:.3g} ms ({cm['sources']['T0']})")
    print(f"  B* = s R = {out['b_star_Bps'] / 1e6:.4g} MB/s; a hit of the prompt's {out['hit_chunks']} full chunks: "
          f"load {out['load_s'] * 1e3:.3g} ms vs recompute {out['recompute_s'] * 1e3:.3g} ms -> {out['choice']}")
    return 0


def calibrate_figures(args) -> dict:
    """The measurement behind ``mcf kv calibrate``: -> the JSON object."""
    from pathlib import Path

    import numpy as np

    from mcf.sw.commands.run import factory_of
    from mcf.sw.kvtier.calibrate import fit_on, measure_bandwidth
    from mcf.sw.kvtier.costmodel import CostModel, PrefillCurve, bytes_per_token
    from mcf.sw.kvtier.keys import full_chunks, weights_fingerprint
    from mcf.sw.kvtier.shard import check_mars_layout, check_ranks
    from mcf.sw.models import load_model
    from mcf.sw.runtime.runtime import generate

    W = check_ranks(args.nodes)
    if args.seq < 2 or args.chunk < 1 or args.chunk >= args.seq:
        raise UserError(f"seq={args.seq}, chunk={args.chunk}: need seq >= 2 and 1 <= chunk < seq (a cached prefix "
                        f"of at least one full chunk)")
    if not args.timeout > 0:
        raise UserError(f"timeout={args.timeout}: must be > 0 s")
    if args.url is None and args.server_mb < 1:
        raise UserError(f"server-mb={args.server_mb}: must be >= 1")
    if not args.io_timeout > 0:
        raise UserError(f"io-timeout={args.io_timeout}: must be > 0 s")
    if args.out:
        from mcf.sw.cliutil import check_output
        check_output(args.out)
    factory = factory_of(args.backend)
    cfg = load_model(args.model)
    if Path(args.model).is_dir():
        from mcf.sw.golden.checkpoint import load_checkpoint
        cfg, weights = load_checkpoint(args.model)
        wlabel = f"checkpoint {args.model}"
    else:
        from mcf.sw.golden.weights import random_weights
        weights = random_weights(cfg, args.seed)
        wlabel = f"random weights, seed {args.seed}"
    prompt = [int(t) for t in np.random.default_rng(args.seed).integers(0, cfg.vocab_size, args.seq)]
    rep = generate(cfg, weights, prompt, nodes=W, scheme="mars", chunk=args.chunk, decode=0, factory=factory,
                   timeout_s=args.timeout)
    check_mars_layout(rep.lowered.plan, args.chunk, W)
    ttft_s = rep.ttft_cycles / rep.clock_hz
    rate = args.seq / ttft_s
    cmd = (f"mcf kv calibrate --backend {args.backend} --nodes {W} --model {args.model} --seq {args.seq} "
           f"--chunk {args.chunk} --seed {args.seed}")
    what = {"rtl": "measured: RTL cluster under Verilator, the nodes' CYCLES counters",
            "isa": "ISA simulator, one cycle per instruction (functional, not a timing)",
            "model": "model: ISA simulator with the timing model"}.get(args.backend, args.backend)
    curve = PrefillCurve.constant(rate, args.chunk, args.seq,
                                  f"{what}: cold MARS prefill of {args.seq} tokens on {W} nodes, TTFT "
                                  f"{rep.ttft_cycles} cycles at {rep.clock_hz / 1e6:g} MHz ({cmd})")
    hit = full_chunks(args.seq, args.chunk)
    with open_tier(cfg, W, args.chunk, args.url, args.server_mb, args.io_timeout,
                   weights=weights_fingerprint(weights)) as (store, _):
        B = measure_bandwidth(store, chunks=8, repeats=5)
        sources = {"s": "model: spec/kv.py chunk value / chunk", "R": curve.source,
                   "B": "measured: MGET of 8 chunk values per rank, median of 5, this run"}
        cm = CostModel(bytes_per_token(cfg, args.chunk), args.chunk, store.value_bytes, tuple(B), 0.0, curve,
                       sources)
        k = max(hit, 1)
        cm.t0, _ = fit_on(store, cm.transfer_s, k, repeats=5)
        sources["T0"] = f"measured: fitted on {W} ranks x {k} chunks, median of 5, this run"
    return {"model": cfg.name, "weights": wlabel, "backend": args.backend, "nodes": W, "chunk": args.chunk,
            "seq": args.seq, "ttft_cycles": rep.ttft_cycles, "clock_hz": rep.clock_hz, "prefill_s": ttft_s,
            "prefill_rate_tokens_per_s": rate, "b_star_Bps": cm.s * rate, "hit_chunks": hit,
            "load_s": cm.load_s(hit), "recompute_s": cm.recompute_s(hit), "choice": cm.choose(hit),
            "servers": "embedded" if args.url is None else args.url, "cost_model": cm.describe(),
            "command": cmd}


# --- info ------------------------------------------------------------------------------------------
def cmd_info(args) -> int:
    from mcf.spec import kv
    from mcf.sw.kvtier.costmodel import bytes_per_token, chunk_value_bytes
    from mcf.sw.kvtier.shard import check_ranks
    from mcf.sw.models import load_model
    W = check_ranks(args.ranks)
    if args.chunk < 1 or args.seq < 2:
        raise UserError("chunk must be >= 1 and seq >= 2")
    cfg = load_model(args.model)
    curve = prefill_curve(args.model, args.profile, W, args.chunk, args.seq)
    s = bytes_per_token(cfg, args.chunk)
    R = curve.rate(args.seq)
    out = {"model": cfg.name, "chunk": args.chunk, "ranks": W, "profile": args.profile,
           "segment_bytes": kv.segment_bytes(args.chunk, cfg.head_dim),
           "chunk_value_bytes": chunk_value_bytes(cfg, args.chunk),
           "s_bytes_per_token": s, "m_token_eq1_bytes": cfg.kv_token_bytes,
           "seq": args.seq, "prefill_s": curve.time(args.seq), "prefill_rate_tokens_per_s": R,
           "b_star_Bps": s * R, "prefill_source": curve.source,
           "layout": f"MARS (round-robin) places chunk c on node c mod {W}: the tier's owner map"}
    if args.json:
        sys.stdout.write(_dumps(out) + "\n")
        return 0
    print(f"{cfg.name}, chunk {args.chunk} tokens, {W} ranks ({args.profile})")
    print(f"  chunk value  {out['chunk_value_bytes']} bytes = {cfg.num_layers} layers x {2 * cfg.num_kv_heads} "
          f"segments x {out['segment_bytes']} (spec/kv.py)")
    print(f"  s            {s:.1f} bytes/token (eq. 1 without scales: {cfg.kv_token_bytes:g})")
    print(f"  R            {R:.4g} tokens/s for a {args.seq}-token prompt ({curve.time(args.seq):.4g} s; {curve.source})")
    print(f"  B* = s R     {s * R / 1e6:.4g} MB/s")
    print(f"  layout       {out['layout']}")
    return 0


def _dumps(obj, **kwargs) -> str:
    """Strict JSON (``mcf.sw.cliutil.dumps``: NaN/Infinity become null)."""
    from mcf.sw.cliutil import dumps
    return dumps(obj, **kwargs)
