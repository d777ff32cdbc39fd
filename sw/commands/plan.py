"""``mcf plan``: run the MARS planner (or a baseline) and print B*, the replica schedule, per-node
memory over the prefill steps (MCF paper Fig. 4), the communication volume and the modelled TTFT."""
from __future__ import annotations

import json
import sys


def register(sub) -> None:
    p = sub.add_parser("plan", help="plan a chunked prefill with MARS or a baseline",
                       description="Plan a long-context prefill on an MCF cluster (MARS, MCF paper "
                                   "section 4) and print the plan and its modelled cost.")
    p.add_argument("--model", default="qwen2.5-1.5b", help="model preset, YAML file or checkpoint dir")
    p.add_argument("--seq", type=int, required=True, help="prompt length S in tokens")
    p.add_argument("--nodes", type=int, required=True, help="node count N")
    p.add_argument("--scheme", default="mars", help="mars | ring | zigzag | full | pd | passq")
    p.add_argument("--budget", type=int, help="per-node KV budget S_node in bytes (default: profile)")
    p.add_argument("--buffer", type=int, help="KV propagation buffer M_buf in bytes (default: profile)")
    p.add_argument("--chunk", type=int, help="chunk size B (default: searched)")
    p.add_argument("--alpha", type=float, help="reuse aggressiveness of eq. 15 (default: searched)")
    p.add_argument("--gamma", type=float, help="overlap safety factor of eq. 8 (default: profile)")
    p.add_argument("--sharding", help="final owner layout: contiguous | zigzag | round-robin")
    p.add_argument("--topology", help="switch | ring | mesh (default: profile)")
    p.add_argument("--path", default="auto", help="replica propagation: auto | multicast | ring | tree | doubling")
    p.add_argument("--profile", default="kr260", help="hardware profile preset or YAML file")
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    p.add_argument("--no-events", action="store_true", help="leave the event list out of --json")
    p.add_argument("--programs", action="store_true",
                   help="also lower the plan to per-node metadata programs and report their sizes")
    p.add_argument("--plot", metavar="FILE.png", help="plot memory per node and replica factor per step")
    p.set_defaults(func=run)


def run(args) -> int:
    from mcf.sw.mars.planner import PlanRequest, plan
    from mcf.sw.mars.profile import load_profile
    from mcf.sw.models.config import load_model

    req = PlanRequest(model=load_model(args.model), seq_len=args.seq, nodes=args.nodes,
                      profile=load_profile(args.profile), scheme=args.scheme,
                      budget_bytes=args.budget, buffer_bytes=args.buffer, chunk_size=args.chunk,
                      alpha=args.alpha, gamma=args.gamma, sharding=args.sharding,
                      topology=args.topology, path=args.path)
    pl = plan(req)
    programs = None
    if args.programs:
        from mcf.sw.mars.lower import lower
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


def _gib(x) -> str:
    return f"{x / 2**30:.3f} GiB"


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
    print(f"memory per node (max over nodes): peak {_gib(mem.max())} at step {int(mem.max(axis=1).argmax())}, "
          f"final {_gib(mem[-1].max())} (owner-only layout {_gib(owner_only.max())}), "
          f"budget {_gib(pl.request.budget_bytes)}")
    C = pl.num_chunks
    picks = sorted(set(np.linspace(0, C, min(C + 1, 9)).astype(int)))
    for t in picks:
        label = "final" if t == C else f"step {t}"
        print(f"  {label:>10}: max {_gib(mem[t].max())}  mean {_gib(mem[t].mean())}  min {_gib(mem[t].min())}")
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
