"""``mcf bench sweep``: MARS vs Ring beyond the paper's range on the cluster model.

Four sweeps (MARS and Ring Attention, same chunk size, same profile): node count up to 256,
context up to 128K tokens, link rate 1/10/25/100 Gb/s (with a small and a large chunk), and a
what-if engine speed-up (the MAC array widened (mac_lanes) x1, x10, x100) that shows how fast the engines must
be before communication, and so MARS, matters on 10GbE.  For each point: simulated TTFT of both,
MARS/Ring, and the step overlap ratio (ring streaming time / attention time of one step, see
``mcf.sim.cluster.bounds.overlap_ratio``): MARS can only win where the ring cannot hide its
traffic behind compute.  Writes sweep.md and sweep.png.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

NAME = "sweep"
HELP = "MARS vs Ring beyond the paper: N to 256, contexts to 128K, link 1-100 Gb/s, engine speed"

MODEL = "qwen2.5-1.5b"
GiB = 2 ** 30


def add_arguments(p) -> None:
    p.add_argument("--out", default="build/bench-sweep", help="directory for sweep.md and sweep.png")
    p.add_argument("--profile", default="kr260", help="hardware profile preset or YAML file")
    p.add_argument("--quick", action="store_true", help="fewer points (for tests)")


def _progress(msg):
    print(f"[bench sweep] {msg}", file=sys.stderr, flush=True)


def run(args) -> dict:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mcf.sw.cliutil import check_output, save_figure, write_text

    from mcf.sim.cluster import bounds, load_inputs, run as sim_run

    t0 = time.perf_counter()
    out = Path(args.out)
    check_output(out / "sweep.md", what="--out")     # before the work; each file is written atomically
    model, prof = load_inputs(MODEL, args.profile)
    q = getattr(args, "quick", False)

    def pair(label, S, N, B, p):
        _progress(f"{label}: S={S} N={N} B={B} link={p.link_bandwidth_bps / 1e9:g} Gb/s "
                  f"P_node={p.p_node / 1e9:.0f} GOPS")
        m = sim_run(MODEL, S, N, "mars", p, chunk=B, decode=None).to_json()
        r = sim_run(MODEL, S, N, "ring", p, chunk=B, decode=None).to_json()
        rc = sim_run(MODEL, S, N, "ring", p, chunk=B, decode=None, ring_forward="cut-through").to_json()
        return {"S": S, "N": N, "B": B, "gbps": p.link_bandwidth_bps / 1e9, "p_node": p.p_node,
                "mars_ttft_s": m["ttft_s"], "ring_ttft_s": r["ttft_s"],
                "mars_over_ring": m["ttft_s"] / r["ttft_s"],
                "ring_ct_ttft_s": rc["ttft_s"], "mars_over_ring_ct": m["ttft_s"] / rc["ttft_s"],
                "mars_comm_gib": m["comm_bytes"] / GiB, "ring_comm_gib": r["comm_bytes"] / GiB,
                "overlap_ratio": bounds.overlap_ratio(model, p, N, B),
                "lower_bound_s": m["bounds_s"]["lower_bound_s"]}

    sweeps: dict = {}
    nodes = (4, 16) if q else (2, 4, 8, 16, 32, 64, 128, 256)
    sweeps["nodes"] = [pair("nodes", 16384, n, 2048, prof) for n in nodes]
    lengths = (8192, 16384) if q else (8192, 16384, 32768, 65536, 131072)
    sweeps["context"] = [pair("context", S, 16, 2048, prof) for S in lengths]
    rates = (1, 10) if q else (1, 10, 25, 100)
    sweeps["link"] = [pair("link", 16384, 16, B, prof.with_(link_bandwidth_bps=g * 1e9))
                      for B in ((2048,) if q else (256, 2048)) for g in rates]
    scales = (1, 10) if q else (1, 10, 100)
    sweeps["engine"] = [pair("engine", 16384, 16, B, prof.with_(mac_lanes=prof.mac_lanes * k))
                        for B in ((2048,) if q else (256, 2048)) for k in scales]

    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    a = ax[0, 0]
    a.plot([r["N"] for r in sweeps["nodes"]], [r["mars_over_ring"] for r in sweeps["nodes"]], marker="o")
    a.set(xscale="log", xlabel="nodes (S=16K, B=2048)", ylabel="TTFT MARS / Ring", title="node count")
    a = ax[0, 1]
    a.plot([r["S"] for r in sweeps["context"]], [r["mars_over_ring"] for r in sweeps["context"]], marker="o")
    a.set(xscale="log", xlabel="context tokens (N=16, B=2048)", ylabel="TTFT MARS / Ring", title="context")
    a = ax[1, 0]
    for B in sorted({r["B"] for r in sweeps["link"]}):
        rows = [r for r in sweeps["link"] if r["B"] == B]
        a.plot([r["gbps"] for r in rows], [r["mars_over_ring"] for r in rows], marker="o", label=f"B={B}")
    a.set(xscale="log", xlabel="link Gb/s (N=16, S=16K)", ylabel="TTFT MARS / Ring", title="link rate")
    a.legend()
    a = ax[1, 1]
    for B in sorted({r["B"] for r in sweeps["engine"]}):
        rows = [r for r in sweeps["engine"] if r["B"] == B]
        a.plot([r["p_node"] / 1e9 for r in rows], [r["mars_over_ring"] for r in rows], marker="o", label=f"B={B}")
    a.set(xscale="log", xlabel="P_node GOPS (N=16, S=16K, 10 Gb/s)", ylabel="TTFT MARS / Ring",
          title="engine speed (what-if)")
    a.legend()
    for a in ax.flat:
        a.axhline(1.0, color="k", lw=0.8)
        a.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out / "sweep.png")
    plt.close(fig)

    md = ["# MARS vs Ring beyond the paper (cluster model)", "",
          f"Model {model.name}, profile `{prof.name}` unless a column says otherwise; MARS and Ring with the same "
          "chunk size B; TTFT simulated.  *overlap* = one ring step's streaming time over its attention time "
          "(B x M_token / BW_eff against 4 L H_q d B^2 / (N P_node)); below 1 the ring hides its traffic.  "
          "Ring forwards a KV group once all of it has arrived (store and forward, as the planner's pass-KV "
          "describes); *Ring cut-through* forwards from the first packet on (the NIC forwarding in the data "
          "plane), which removes most of the (N - 1)-hop latency.", "",
          "![sweep](sweep.png)", ""]
    for name, rows in sweeps.items():
        md += [f"## {name}", "", "| S | N | B | Gb/s | P_node (GOPS) | MARS TTFT (s) | Ring TTFT (s) | MARS/Ring | "
               "Ring cut-through (s) | MARS/Ring c-t | MARS comm (GiB) | Ring comm (GiB) | overlap | lower bound (s) |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            md.append(f"| {r['S']} | {r['N']} | {r['B']} | {r['gbps']:g} | {r['p_node'] / 1e9:.0f} | "
                      f"{r['mars_ttft_s']:.3f} | {r['ring_ttft_s']:.3f} | {r['mars_over_ring']:.3f} | "
                      f"{r['ring_ct_ttft_s']:.3f} | {r['mars_over_ring_ct']:.3f} | "
                      f"{r['mars_comm_gib']:.3f} | {r['ring_comm_gib']:.3f} | {r['overlap_ratio']:.3f} | "
                      f"{r['lower_bound_s']:.3f} |")
        md.append("")
    write_text(out / "sweep.md", "\n".join(md) + "\n")
    figures = {f"{name}_{i}_mars_over_ring": round(r["mars_over_ring"], 4)
               for name, rows in sweeps.items() for i, r in enumerate(rows)}
    figures["wall_s"] = round(time.perf_counter() - t0, 2)
    figures["report"] = str(out / "sweep.md")
    _progress(f"wrote {out / 'sweep.md'} in {figures['wall_s']} s")
    return figures
