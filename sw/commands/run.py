"""``mcf run``: a checkpoint's prompt through the nodes' programs on a cluster backend: prefill
(MARS, Ring, Zigzag, full replication or PD) and greedy KV-stationary decode, or weight-sharded
tensor-parallel prefill and decode (``--decode-scheme tensor-parallel``), with the tokens, TTFT,
decode cycles per token, link bytes and the KV each node holds."""
from __future__ import annotations

import importlib
import sys

#: Backends of the runtime: name -> "module:factory" (``mcf.sw.runtime.backend``).
BACKENDS = {
    "model": ("mcf.sim.cluster.isa_model:model_backend",
              "ISA simulator + timing model (bit-exact tokens, modelled cycles)"),
    "isa": ("mcf.sw.runtime.backend:isa_backend", "ISA simulator, one cycle per instruction (functional)"),
    "rtl": ("mcf.sim.rtlcluster.backend:rtl_backend", "N RTL nodes under Verilator (measured cycles)"),
}


def register(sub) -> None:
    from mcf.spec.regmap import WATCHDOG_RESET
    from mcf.sw.cliutil import MAX_BYTES, MAX_NODES, MAX_SEQ, integer, number
    p = sub.add_parser("run", help="run a checkpoint's prompt on N nodes: prefill + greedy decode",
                       description="Quantize a Qwen2 checkpoint, plan and lower its prefill to the nodes' "
                                   "programs, run prefill and greedy decode on a cluster backend and print "
                                   "the generated tokens, TTFT, decode cycles per token, link bytes and peak "
                                   "KV bytes per node.  Backends: " +
                                   "; ".join(f"{k}: {v[1]}" for k, v in BACKENDS.items()) + ".")
    p.add_argument("--backend", default="model", help=f"{' | '.join(BACKENDS)} (default model)")
    p.add_argument("--nodes", type=integer(1, MAX_NODES), required=True, help=f"node count N (1..{MAX_NODES})")
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="Hugging Face Qwen2 checkpoint directory")
    p.add_argument("--tokens", required=True, help="prompt token ids, comma-separated (e.g. 1,2,3)")
    p.add_argument("--decode", type=integer(0, MAX_SEQ), default=0, metavar="K", help="decode steps after prefill (default 0)")
    p.add_argument("--scheme", default="mars", help="mars | ring | zigzag | full | pd (default mars)")
    p.add_argument("--decode-scheme", default="kv-stationary", metavar="NAME",
                   help="kv-stationary (default: whole weights on every node, the --scheme prefill, decode with "
                        "the KV where it was written) | tensor-parallel (each node holds 1/N of the weights -- "
                        "its heads, KV heads and MLP slice -- and computes every token: prefill chunk by chunk "
                        "and decode, o_proj and down_proj partial sums added by the NICs' SUM; the names of "
                        "mcf simulate --decode)")
    p.add_argument("--attention", default="auto", metavar="PATH",
                   help="auto (default: array where the node and the program are covered -- the KR260 node -- "
                        "else unit; printed with its reason) | unit (ATTN_KV passes on the attention unit) | array "
                        "(scores by GEMM_QK on the MAC array over runs of KV blocks, softmax by ATTN_SM, PV by "
                        "GEMM_PV; kv-stationary only; docs/attention-array.md)")
    p.add_argument("--chunk", type=integer(1, MAX_SEQ), help="chunk size B in tokens (default: the node's max tokens)")
    p.add_argument("--budget", type=integer(1, MAX_BYTES), help="per-node KV budget in bytes (MARS drains replicas to fit)")
    p.add_argument("--topology", default="switch", help="switch | ring | grid | full_mesh (default switch)")
    p.add_argument("--group-size", type=integer(1, 1 << 16), help="INT4 weight group size (default: the largest power of "
                                                  "two <= 128 dividing the widths)")
    p.add_argument("--timeout", type=number(0, 1e7, open_lo=True), default=600.0, help="seconds each step may take (default 600)")
    p.add_argument("--watchdog", type=integer(0, (1 << 32) - 1), default=WATCHDOG_RESET, metavar="CYCLES",
                   help="cycles without progress (no instruction retired, no DDR or network beat) after which "
                        f"a node faults WATCHDOG: a lost packet stops the run (default {WATCHDOG_RESET}, the "
                        "register's reset value; 0: never)")
    p.add_argument("--kv-store", metavar="URL", help="prefix KV tier (mars scheme): a redis:// URL template with "
                   "{rank}, or one URL per node comma-separated; node r looks up and loads the cached "
                   "chunks it owns (c mod N) into its DDR where the prefill would write them, prefill "
                   "starts at the first missing chunk, and the owners store the chunks the run computed")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def factory_of(name: str):
    from mcf.sw.errors import UserError
    if name not in BACKENDS:
        raise UserError(f"--backend {name!r}: one of {', '.join(BACKENDS)}")
    mod, fn = BACKENDS[name][0].split(":")
    try:
        return getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError):
        raise UserError(f"--backend {name}: not available in this build ({mod}.{fn} is missing)") from None


def run(args) -> int:
    from mcf.sw.cliutil import MAX_SEQ, dumps
    from mcf.sw.commands.golden import check_golden_memory, parse_tokens
    from mcf.sw.errors import UserError
    from mcf.sw.golden.checkpoint import load_checkpoint
    from mcf.sw.runtime.runtime import generate

    from mcf.sw.runtime.runtime import DECODE_SCHEMES
    if args.scheme not in ("mars", "ring", "zigzag", "full", "pd"):
        raise UserError(f"--scheme {args.scheme!r}: one of mars, ring, zigzag, full, pd")
    if args.decode_scheme not in DECODE_SCHEMES:
        raise UserError(f"--decode-scheme {args.decode_scheme!r}: one of {', '.join(DECODE_SCHEMES)}")
    factory = factory_of(args.backend)
    tokens = parse_tokens(args.tokens)
    if len(tokens) + args.decode > MAX_SEQ:
        raise UserError(f"--tokens + --decode = {len(tokens) + args.decode} positions: more than {MAX_SEQ}")
    cfg, weights = load_checkpoint(args.checkpoint)
    check_golden_memory(cfg, len(tokens) + args.decode, len(tokens))
    report = generate(cfg, weights, tokens, decode=args.decode, nodes=args.nodes, scheme=args.scheme,
                      chunk=args.chunk, budget=args.budget, topology=args.topology, group=args.group_size,
                      factory=factory, timeout_s=args.timeout, watchdog=args.watchdog,
                      kv_store=args.kv_store, decode_scheme=args.decode_scheme, attention=args.attention)
    out = report.to_json()
    out["backend"] = args.backend
    if args.json:
        sys.stdout.write(dumps(out) + "\n")
        return 0
    clk = out["clock_hz"]
    print(f"{out['scheme']} on {out['nodes']} node(s), backend {args.backend}, model {out['model']}, "
          f"chunk {out['chunk']}, {len(tokens)} prompt tokens")
    print(f"attention: {out['attention']} ({out['attention_reason']})")
    print(f"tokens: {','.join(str(t) for t in out['tokens'])}")
    print(f"TTFT: {out['ttft_cycles']} cycles = {out['ttft_s'] * 1e3:.4g} ms at {clk / 1e6:g} MHz")
    if out["decode_cycles_per_token"] is not None:
        print(f"decode: {out['decode_cycles_per_token']:.1f} cycles/token = "
              f"{out['decode_s_per_token'] * 1e3:.4g} ms/token")
    if out["link_bytes"] is not None:
        links = ", ".join(f"{k} {v}" for k, v in out["link_bytes"].items())
        print(f"link bytes (wire, headers included): {out['link_bytes_total']} ({links})")
    print(f"peak KV bytes per node ({out['kv_bytes_source']}): {out['peak_kv_bytes_per_node']}")
    print(f"replica factor per step (plan): {out['replica_factor_per_step']}")
    print(f"directory after prefill (VALID blocks per node): {out['directory_after_prefill']}")
    kv = out.get("kv_tier")
    if kv is not None:
        print(f"kv tier: {kv['prefix_chunks']} of {kv['full_chunks']} full chunks loaded ({kv['prefix_tokens']} "
              f"tokens, {kv['loaded_bytes']} bytes, {kv['load_seconds'] * 1e3:.1f} ms; lookup {kv['lookup_status']}, "
              f"load {kv['load_status']}), {kv['stored_chunks']} stored ({kv['store_status']})")
    mac = [s["counters"] for s in out["steps"][:1]][0]
    print("prefill counters per node: " + "; ".join(
        f"node {i}: {c['RETIRED_EX']} EX, {c['MAC_BEATS']} MAC beats, {c['NET_TX_BYTES']} B sent"
        for i, c in enumerate(mac)))
    return 0
