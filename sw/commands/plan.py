"""``mcf plan``: run the MARS planner (or a baseline) and print B*, the replica schedule, per-node
memory over the prefill steps (MCF paper Fig. 4), the communication volume and the modelled TTFT."""
from __future__ import annotations

import argparse
import json
import os
import sys

# The planner's matrix products are small: BLAS worker threads only fight the other processes on
# a loaded machine (measured: 3x the CPU time).  Effective when numpy is not imported yet.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def register(sub) -> None:
    p = sub.add_parser("plan", help="plan a chunked prefill with MARS or a baseline",
                       description="Plan a long-context prefill on an MCF cluster (MARS, MCF paper "
                                   "section 4) and print the plan and its modelled cost.")
    p.add_argument("--model", default="qwen2.5-1.5b", help="model preset, YAML file or checkpoint dir")
    p.add_argument("--seq", type=int, required=True, help="prompt length S in tokens")
    p.add_argument("--nodes", type=_node_list, required=True,
                   help="node count N, or a comma list (2,4,8,16) to compare")
    p.add_argument("--scheme", default="mars",
                   help="mars | ring | zigzag | full | pd | passq, or 'all' to compare them")
    p.add_argument("--budget", type=int, help="per-node KV budget S_node in bytes (default: profile)")
    p.add_argument("--buffer", type=int, help="KV propagation buffer M_buf in bytes (default: profile)")
    p.add_argument("--chunk", type=int, help="chunk size B (default: searched)")
    p.add_argument("--alpha", type=float, help="reuse aggressiveness of eq. 15 (default: searched)")
    p.add_argument("--gamma", type=float, help="overlap safety factor of eq. 8 (default: profile)")
    p.add_argument("--sharding", help="final owner layout: contiguous | zigzag | round-robin")
    p.add_argument("--topology", help="switch | ring | grid | full_mesh (default: profile)")
    p.add_argument("--path", default="auto", help="replica propagation: auto | multicast | ring | tree | doubling")
    p.add_argument("--profile", default="kr260", help="hardware profile preset or YAML file")
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    p.add_argument("--no-events", action="store_true", help="leave the event list out of --json")
    p.add_argument("--programs", action="store_true",
                   help="also lower the plan to per-node metadata programs and report their sizes")
    p.add_argument("--plot", metavar="FILE.png", help="plot memory per node and replica factor per step")
    p.set_defaults(func=run)


def _node_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer or a comma list of integers") from None


def _request(args, scheme, nodes):
    from mcf.sw.mars.planner import PlanRequest
    from mcf.sw.mars.profile import load_profile
    from mcf.sw.models.config import load_model
    return PlanRequest(model=load_model(args.model), seq_len=args.seq, nodes=nodes,
                       profile=load_profile(args.profile), scheme=scheme,
                       budget_bytes=args.budget, buffer_bytes=args.buffer, chunk_size=args.chunk,
                       alpha=args.alpha, gamma=args.gamma, sharding=args.sharding,
                       topology=args.topology, path=args.path)


def run(args) -> int:
    from mcf.sw.errors import UserError
    from mcf.spec.plan import SCHEMES
    from mcf.sw.mars.planner import plan

    if args.scheme == "all" or len(args.nodes) > 1:
        if args.plot or args.programs:
            raise UserError("--plot and --programs need one scheme and one node count")
        return _compare(args, SCHEMES if args.scheme == "all" else [args.scheme], args.nodes)
    pl = plan(_request(args, args.scheme, args.nodes[0]))
    programs = None
    if args.programs:
        from mcf.sw.mars.metaprog import lower
        programs = lower(pl)
    if args.plot:
        from mcf.sw.mars.plot import plot_plan
        plot_plan(pl, args.plot)
    if args.json:
        out = pl.to_json(events=not args.no_events)
        if programs is not None:
            out["programs"] = [p.summary() for p in programs]
        sys.stdout.write(json.dumps(out, separators=(",", ":")) + "\n")   # C encoder: fast
        return 0
    _print_text(pl, programs)
    if args.plot:
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def _compare(args, schemes, node_counts) -> int:
    """One line per (scheme, N): B*, TTFT, communication, peak memory, decode time."""
    from mcf.sw.errors import UserError
    from mcf.sw.mars.planner import plan
    rows = []
    for scheme in schemes:
        for n in node_counts:
            try:
                pl = plan(_request(args, scheme, n))
            except UserError as e:
                if len(schemes) == 1 and len(node_counts) == 1:
                    raise
                rows.append({"scheme": scheme, "nodes": n, "error": str(e)})
                continue
            j = pl.to_json(events=False)
            rows.append({k: j[k] for k in ("scheme", "nodes", "chunk_size", "alpha", "ttft_model_s",
                                           "comm_bytes", "decode_token_s")}
                        | {"exposed_comm_s": j["ttft_breakdown_s"]["exposed_comm"],
                           "peak_memory_bytes": int(pl.memory.max())})
    if args.json:
        sys.stdout.write(json.dumps(rows, separators=(",", ":")) + "\n")
        return 0
    print(f"{'scheme':<7} {'N':>4} {'B*':>6} {'alpha':>8} {'TTFT s':>10} {'comm GiB':>9} "
          f"{'exposed s':>9} {'peak MiB':>9} {'decode ms':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['scheme']:<7} {r['nodes']:>4}  infeasible: {r['error']}")
            continue
        a = ("inf" if r["scheme"] == "mars" else "-") if r["alpha"] is None else f"{r['alpha']:g}"
        print(f"{r['scheme']:<7} {r['nodes']:>4} {r['chunk_size']:>6} {a:>8} {r['ttft_model_s']:>10.3f} "
              f"{r['comm_bytes'] / 2**30:>9.3f} {r['exposed_comm_s']:>9.3f} "
              f"{r['peak_memory_bytes'] / 2**20:>9.1f} {r['decode_token_s'] * 1e3:>9.2f}")
    return 0


def _gib(x) -> str:
    return f"{x / 2**30:.3f} GiB"


def _mib(x) -> str:
    return f"{x / 2**20:.2f} MiB"


def _print_text(pl, programs) -> None:
    import numpy as np
    j = pl.to_json(events=False)
    print(f"scheme {pl.scheme}  model {j['model']}  S={j['seq_len']}  N={pl.nodes}  "
          f"topology {j['topology']}  sharding {j['sharding']}")
    print(f"B* = {pl.chunk_size} tokens  ({pl.num_chunks} chunks, alpha={j['alpha']}, "
          f"path {pl.path})")
    print(f"  why: {pl.reason}")
    r = pl.r_step
    changes = [0] + [t for t in range(1, len(r)) if r[t] != r[t - 1]]
    sched = ", ".join(f"step {t}: r={r[t]}" for t in changes)
    print(f"replica factor schedule: {sched}")
    mem = pl.memory
    owner_only = np.bincount(pl.owner, weights=pl.block_bytes, minlength=pl.nodes)
    print(f"memory per node (max over nodes): peak {_mib(mem.max())} at step {int(mem.max(axis=1).argmax())}, "
          f"final {_mib(mem[-1].max())} (owner-only layout {_mib(owner_only.max())}), "
          f"budget {_mib(pl.request.budget_bytes)}")
    C = pl.num_chunks
    picks = sorted(set(np.linspace(0, C, min(C + 1, 9)).astype(int)))
    for t in picks:
        label = "final" if t == C else f"step {t}"
        print(f"  {label:>10}: max {_mib(mem[t].max())}  mean {_mib(mem[t].mean())}  min {_mib(mem[t].min())}")
    stage = j["staging_bytes_per_layer_max"]
    print(f"staging: up to {stage / 2**20:.2f} MiB of fetched history per layer "
          f"(M_buf = {pl.request.buffer_bytes / 2**20:.2f} MiB holds two layers' worth when >= "
          f"{2 * stage / 2**20:.2f} MiB)")
    print(f"communication: {_gib(pl.comm_bytes)} delivered, {_gib(pl.comm_hop_bytes)} hop-weighted"
          + (f", {_gib(pl.handoff_bytes)} pd hand-off" if pl.handoff_bytes else ""))
    b = j["ttft_breakdown_s"]
    print(f"TTFT (model): {pl.ttft_s:.3f} s  [compute {b['compute']:.3f} s, comm {b['comm']:.3f} s, "
          f"exposed comm {b['exposed_comm']:.3f} s, sync {b['sync']:.4f} s, lm head {b['lm_head']:.4f} s"
          + (f", hand-off {b['handoff']:.3f} s" if b['handoff'] else "") + "]")
    print(f"decode (model): {pl.decode_token_s * 1e3:.2f} ms/token ({1 / pl.decode_token_s:.1f} tokens/s)")
    if programs is not None:
        metas = sum(len(p.metas) for p in programs)
        dmas = sum(len(p.dmas) for p in programs)
        routes = max(len(p.routes) for p in programs)
        print(f"programs: {metas} Meta descriptors, {dmas} DMA descriptors, "
              f"up to {routes} route entries per node")
