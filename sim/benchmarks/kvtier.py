"""``mcf bench kvtier``: the prefix KV tier's measured figures (docs/kvtier.md cites these).

Runs, against local redis-server processes it starts and stops:

1. ``mcf kv fit``: B per rank measured, T0 fitted on 4 ranks x 16 chunks of Qwen2.5-1.5B
   (1.9 MB chunk values), validated on 1, 2, 4 ranks x 4, 16, 64 chunks;
2. ``mcf kv replay --compare --prime``: a shared-prefix stream against the SimPy cluster model
   (MARS on 4 x KR260), no tier vs sync vs async;
3. the same stream with a rank killed half way (``--fault kill-rank:1@T``);
4. the hit-heavy case of the paper's section 6.3 (rho > 1): a given fast engine (R is a parameter
   here, labelled) and each rank's path to its server modelled at 80 Mb/s, sync vs async.

Seconds are virtual (the cluster model) plus measured tier operations; B and T0 are measured
on this machine's loopback, which says nothing about a board's Ethernet.
"""
from __future__ import annotations

NAME = "kvtier"
HELP = "prefix KV tier: T0 fit and validation, replay with vs without the tier, sync vs async, fault"


def add_arguments(p) -> None:
    p.add_argument("--requests", type=int, default=64, help="requests per replay (default 64)")
    p.add_argument("--quick", action="store_true", help="smaller fit (ranks 1,2; hits 4,16)")


def _ns(argv):
    from mcf.sw.cli import build_parser
    return build_parser().parse_args(argv)


def run(args) -> dict:
    from mcf.sw.commands.kv import fit_figures, replay_figures
    n = str(args.requests)
    fit = fit_figures(_ns(["kv", "fit", "--ranks-list", "1,2" if args.quick else "1,2,4",
                           "--hits", "4,16" if args.quick else "4,16,64",
                           "--fit-on", "2:16" if args.quick else "4:16", "--repeats", "3"]))
    stream = ["--synthetic", n, "--arrival-rate", "0.02", "--prefixes", "4", "--prefix-tokens", "1024:4096",
              "--suffix-tokens", "64:512", "--ranks", "4"]
    cmp_ = replay_figures(_ns(["kv", "replay", *stream, "--compare", "--prime"]))
    span = max(a["makespan_s"] for a in cmp_["arms"])
    fault = replay_figures(_ns(["kv", "replay", *stream, "--prime", "--fault", f"kill-rank:1@{span / 2:.0f}"]))
    heavy = replay_figures(_ns(["kv", "replay", "--synthetic", n, "--model", "small", "--ranks", "2",
                                "--prefixes", "1", "--prefix-tokens", "2048:2048", "--suffix-tokens", "1:1",
                                "--arrival-rate", "44", "--prefill-rate", "57000", "--link-gbps", "0.08",
                                "--prime", "--compare", "--deadline", "1"]))
    out = {"fit_t0_s": fit["t0_s"], "fit_on": f"{fit['fit_on']['ranks']} ranks x {fit['fit_on']['hit_chunks']} chunks",
           "fit_validation_median_abs_error": fit["validation_median_abs_error"],
           "fit_validation_max_abs_error": fit["validation_max_abs_error"],
           "bandwidth_GBps_per_rank_4ranks": [round(b / 1e9, 3) for b in
                                              cmp_["cost_model"]["bandwidth_Bps_per_rank"]],
           "s_bytes_per_token": cmp_["cost_model"]["s_bytes_per_token"],
           "prefill_rate_tokens_per_s": cmp_["cost_model"]["prefill_rate_tokens_per_s_at_max"],
           "b_star_MBps": cmp_["cost_model"]["b_star_Bps_at_max"] / 1e6,
           "prefill_source": cmp_["cost_model"]["sources"]["R"]}
    for prefix, res in (("", cmp_), ("heavy_", heavy)):
        for a in res["arms"]:
            k = prefix + a["label"].replace(" ", "_")
            out[f"{k}_ttft_p50_s"] = a["ttft_p50_s"]
            out[f"{k}_ttft_p99_s"] = a["ttft_p99_s"]
            out[f"{k}_token_hit_ratio"] = a["token_hit_ratio"]
            out[f"{k}_loads"] = a["loads"]
            out[f"{k}_recomputes"] = a["recomputes"]
            out[f"{k}_rho"] = a["rho"]
    f = fault["arms"][0]
    out.update({"fault_completed": f"{f['completed']}/{f['requests']}", "fault_ttft_p99_s": f["ttft_p99_s"],
                "fault_token_hit_ratio": f["token_hit_ratio"], "fault_errors": f["errors"],
                "fault_timeouts": f["timeouts"], "fault_fallbacks": f["fallbacks"]})
    out["fit_configs"] = [{"ranks": c["ranks"], "hit_chunks": c["hit_chunks"],
                           "measured_ms": round(c["load_measured_p50_s"] * 1e3, 3),
                           "model_ms": round(c["load_model_s"] * 1e3, 3), "error": round(c["error"], 3)}
                          for c in fit["configs"]]
    return out
