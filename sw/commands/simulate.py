"""``mcf simulate``: plan a prefill with MARS (or a baseline), execute the plan on simulated KR260
nodes (SimPy cluster model, ``mcf.sim.cluster``) and print TTFT, communication, memory and
decode tokens/s."""
from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("simulate", help="run a MARS plan on the simulated cluster (TTFT, comm, memory, decode)",
                       description="Plan a long-context prefill (MARS or a baseline), execute the plan "
                                   "on a discrete-event model of N KR260 nodes and report TTFT, "
                                   "communication volume, peak memory per node and decode tokens/s.")
    from mcf.sw.cliutil import MAX_BYTES, MAX_NODES, MAX_SEQ, integer, number
    p.add_argument("--model", default="qwen2.5-1.5b", help="model preset, YAML file or checkpoint dir")
    p.add_argument("--seq", type=integer(1, MAX_SEQ), required=True, help="prompt length S in tokens")
    p.add_argument("--nodes", type=integer(1, MAX_NODES), required=True, help="node count N")
    p.add_argument("--scheme", default="mars", help="mars | ring | zigzag | full | pd | passq")
    p.add_argument("--chunk", type=integer(1, MAX_SEQ), help="chunk size B (default: the planner's B*)")
    p.add_argument("--budget", type=integer(1, MAX_BYTES), help="per-node KV budget S_node in bytes (default: profile)")
    p.add_argument("--topology", help="switch | ring | grid | full_mesh (default: profile)")
    p.add_argument("--profile", default="kr260", help="hardware profile preset or YAML file")
    p.add_argument("--link-gbps", type=number(0, 1e6, open_lo=True), help="override the profile's link rate (Gb/s)")
    p.add_argument("--packet-payload", type=integer(1, 1 << 20), default=1024, help="payload bytes per packet (default 1024)")
    p.add_argument("--lookahead", type=integer(0, MAX_SEQ),
                   help="steps a history fetch may run ahead of use (default: mars/full/pd 1, ring/zigzag 0)")
    p.add_argument("--chunk-kv", default="plan", choices=("plan", "allgather"),
                   help="'allgather': also move the chunk's own KV among the compute nodes (not in the plan)")
    p.add_argument("--ring-forward", default="store", choices=("store", "cut-through"),
                   help="ring/zigzag pass-KV: forward a group after all of it arrived (store, default) "
                        "or from its first packet on (cut-through)")
    p.add_argument("--programs", action="store_true",
                   help="execute the lowered per-node programs (Meta descriptors) instead of the plan's steps")
    p.add_argument("--decode", default="kv-stationary",
                   help="decode variant: kv-stationary | tensor-parallel | pass-q | none")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from mcf.sim.cluster import DECODE_VARIANTS, run as sim_run
    from mcf.sw.errors import UserError

    if args.decode not in DECODE_VARIANTS + ("none",):
        raise UserError(f"decode={args.decode!r}: one of {', '.join(DECODE_VARIANTS + ('none',))}")
    if args.packet_payload < 1:
        raise UserError(f"packet-payload={args.packet_payload}: must be >= 1 byte")
    r = sim_run(args.model, args.seq, args.nodes, args.scheme, args.profile, chunk=args.chunk,
                budget=args.budget, topology=args.topology, link_gbps=args.link_gbps,
                packet_payload=args.packet_payload, lookahead=args.lookahead,
                chunk_kv=args.chunk_kv, decode=None if args.decode == "none" else args.decode,
                programs=args.programs, ring_forward=args.ring_forward)
    out = r.to_json()
    if args.json:
        sys.stdout.write(_dumps(out) + "\n")
        return 0
    gib = 2 ** 30
    b = out["bounds_s"]
    print(f"{out['scheme']} on {out['nodes']} x {out['profile']} ({out['topology']}, "
          f"{out['link_gbps']:g} Gb/s), {out['model']}, S={out['seq_len']}, B={out['chunk_size']} "
          f"({out['num_chunks']} chunks)")
    print(f"  TTFT (simulated)      {out['ttft_s']:.3f} s   (planner's cost model: {out['ttft_plan_model_s']:.3f} s)")
    print(f"  lower bound           {b['lower_bound_s']:.3f} s   (compute {b['compute_s']:.3f}, "
          f"DDR {b['ddr_once_s']:.3f}, links {b['link_s']:.3f}); TTFT / bound = {out['ttft_over_lower_bound']:.2f}")
    print(f"  communication         {out['comm_bytes'] / gib:.3f} GiB delivered "
          f"({', '.join(f'{k} {v / gib:.3f}' for k, v in out['comm_bytes_by_kind'].items()) or 'none'})")
    print(f"  peak memory per node  {out['peak_memory_per_node_bytes'] / 2**20:.1f} MiB "
          f"(KV pool {out['peak_kv_pool_per_node_bytes'] / 2**20:.1f}, staging "
          f"{out['peak_staging_per_node_bytes'] / 2**20:.1f})")
    print(f"  utilisation           engine {out['engine_utilization_mean']:.0%} (mean), "
          f"busiest link {out['max_link_utilization']:.0%}")
    if out.get("decode_tokens_per_s"):
        print(f"  decode ({out['decode_variant']})  {out['decode_tokens_per_s']:.2f} tokens/s "
              f"(bound {out['decode_bound_tokens_per_s']:.2f}); the root streams "
              f"{out['decode_root_ddr_bytes_per_token'] / 1e9:.3f} GB per token: "
              f"{out['decode_ddr_roofline_fraction']:.2f} of its DDR roofline at the DDR's peak")
    print(f"  simulated in {out['sim_wall_s']:.2f} s", file=sys.stderr)
    return 0


def _dumps(obj, **kwargs) -> str:
    """Strict JSON (``mcf.sw.cliutil.dumps``: NaN/Infinity become null)."""
    from mcf.sw.cliutil import dumps
    return dumps(obj, **kwargs)
