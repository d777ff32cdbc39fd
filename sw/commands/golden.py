"""``mcf golden``: run the golden model (float reference or fixed-point) from the command line."""
from __future__ import annotations

import json
import sys

from mcf.sw.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("golden", help="run the golden model: logits, fixed-point accuracy, checkpoints",
                       description="The NumPy golden model of the Qwen2 decoder (float reference and "
                                   "the bit-exact fixed-point model of the hardware).")
    gsub = p.add_subparsers(dest="golden_cmd", metavar="ACTION", title="actions")

    lp = gsub.add_parser("logits", help="logits of every position for a token sequence",
                         description="Prefill TOKENS and print the logits of every position (one line "
                                     "per position; with --json: {\"logits\": [[float, ...], ...]}).")
    lp.add_argument("--checkpoint", required=True, metavar="DIR",
                    help="Hugging Face Qwen2 checkpoint directory (config.json + *.safetensors)")
    lp.add_argument("--tokens", required=True, help="comma-separated token ids, e.g. 1,2,3")
    lp.add_argument("--fixed", action="store_true", help="use the fixed-point model (INT4 weights and KV)")
    lp.add_argument("--group-size", type=int, default=128, help="INT4 weight group size (--fixed; default 128)")
    lp.add_argument("--json", action="store_true", help="print JSON")
    lp.set_defaults(func=run_logits)

    gp = gsub.add_parser("generate", help="greedy token ids of the golden model (prefill, then decode)",
                         description="Prefill TOKENS and decode K tokens greedily with the golden model; "
                                     "prints the K + 1 generated token ids (the first from the prompt's last "
                                     "logits), the reference for mcf run.")
    gp.add_argument("--checkpoint", required=True, metavar="DIR",
                    help="Hugging Face Qwen2 checkpoint directory (config.json + *.safetensors)")
    gp.add_argument("--tokens", required=True, help="comma-separated prompt token ids, e.g. 1,2,3")
    gp.add_argument("--decode", type=int, default=0, metavar="K", help="decode steps (default 0)")
    gp.add_argument("--fixed", action="store_true", help="the fixed-point model (INT4 weights and KV): "
                                                          "what the nodes compute")
    gp.add_argument("--group-size", type=int, help="INT4 weight group size (--fixed; default: the largest "
                                                   "power of two <= 128 dividing the widths, as mcf run)")
    gp.add_argument("--json", action="store_true", help='print {"tokens": [...]}')
    gp.set_defaults(func=run_generate)

    ap = gsub.add_parser("accuracy", help="fixed-point vs float accuracy figures (docs/fixed-point.md)",
                         description="Compare the fixed-point model with the float reference on "
                                     "random-weight models: logit cosine, top-1 agreement.")
    ap.add_argument("--model", default="small", help="preset, YAML file or checkpoint dir (default small)")
    ap.add_argument("--group-size", type=int, default=128, help="INT4 weight group size (default 128)")
    ap.add_argument("--tokens", type=int, default=64, help="sequence length (default 64)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.set_defaults(func=run_accuracy)

    cp = gsub.add_parser("random-checkpoint", help="write a random-weight checkpoint of a preset",
                         description="Write config.json + model.safetensors with random weights "
                                     "(for demos and tests; no download).")
    cp.add_argument("--model", default="tiny", help="preset or YAML file (default tiny)")
    cp.add_argument("--out", required=True, metavar="DIR")
    cp.add_argument("--seed", type=int, default=0)
    cp.add_argument("--dtype", choices=["F32", "F16", "BF16"], default="F32")
    cp.set_defaults(func=run_random_checkpoint)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def parse_tokens(text: str) -> list[int]:
    try:
        tokens = [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise UserError(f"--tokens {text!r}: expected comma-separated integers, e.g. 1,2,3") from None
    if not tokens:
        raise UserError("--tokens: no token ids given")
    return tokens


def run_logits(args) -> int:
    from mcf.sw.golden.checkpoint import load_checkpoint
    from mcf.sw.golden.fixed_model import FixedModel
    from mcf.sw.golden.float_model import FloatModel
    tokens = parse_tokens(args.tokens)
    cfg, weights = load_checkpoint(args.checkpoint)
    model = FixedModel(cfg, weights, args.group_size) if args.fixed else FloatModel(cfg, weights)
    logits = model.forward(tokens)
    if args.json:
        json.dump({"logits": [[float(x) for x in row] for row in logits]}, sys.stdout)
        sys.stdout.write("\n")
    else:
        for row in logits:
            print(" ".join(f"{float(x):.7g}" for x in row))
    return 0


def run_generate(args) -> int:
    import numpy as np

    from mcf.sw.golden.checkpoint import load_checkpoint
    from mcf.sw.golden.fixed_model import FixedModel, default_group
    from mcf.sw.golden.float_model import FloatModel
    tokens = parse_tokens(args.tokens)
    if args.decode < 0:
        raise UserError(f"--decode={args.decode}: must be >= 0")
    if args.group_size is not None and args.group_size < 1:
        raise UserError(f"--group-size={args.group_size}: must be >= 1")
    cfg, weights = load_checkpoint(args.checkpoint)
    if args.fixed:
        model = FixedModel(cfg, weights, args.group_size or default_group(cfg))
    else:
        model = FloatModel(cfg, weights)
    cache = model.new_cache()
    out = [int(np.argmax(model.forward(tokens, cache, logits="last")[-1]))]
    for _ in range(args.decode):
        out.append(int(np.argmax(model.forward([out[-1]], cache, logits="last")[-1])))
    if args.json:
        print(json.dumps({"tokens": out, "prompt": tokens, "fixed": bool(args.fixed)}))
    else:
        print(",".join(str(t) for t in out))
    return 0


def run_accuracy(args) -> int:
    from mcf.sw.golden.accuracy import report
    from mcf.sw.models import load_model
    if args.tokens < 1:
        raise UserError("--tokens must be >= 1")
    cfg = load_model(args.model)
    figures = report(cfg, args.group_size, args.tokens, args.seed)
    if args.json:
        print(json.dumps({"model": cfg.name, "group_size": args.group_size, "tokens": args.tokens,
                          "cases": figures}, sort_keys=True))
        return 0
    print(f"model {cfg.name}, INT4 group size {args.group_size}, {args.tokens} tokens, seed {args.seed}")
    print(f"{'case':<10} {'against':<12} {'cos mean':>9} {'cos min':>9} {'top-1':>7} {'top-1 in top-5':>15}")
    for case, by_ref in figures.items():
        for ref, f in by_ref.items():
            print(f"{case:<10} {ref:<12} {f['cosine_mean']:>9.4f} {f['cosine_min']:>9.4f} "
                  f"{f['top1_agreement']:>7.3f} {f['top1_in_top5']:>15.3f}")
    return 0


def run_random_checkpoint(args) -> int:
    from pathlib import Path

    from mcf.sw.golden.checkpoint import write_checkpoint
    from mcf.sw.golden.weights import random_weights
    from mcf.sw.models import load_model
    cfg = load_model(args.model)
    write_checkpoint(Path(args.out), cfg, random_weights(cfg, args.seed), args.dtype)
    print(f"wrote {args.out} ({cfg.name}, {cfg.num_params} parameters, {args.dtype})", file=sys.stderr)
    return 0
