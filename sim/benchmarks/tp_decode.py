"""Weight-sharded (tensor-parallel) decode at a model's real widths on the program-level cluster
model: the nodes' tensor-parallel programs (``mcf.sw.mars.lower_tp``) executed by the ISA
simulator under the timing model of ``mcf run --backend model`` (``mcf.sim.cluster.isa_model``:
per-instruction unit and DDR costs, NIC reductions, links).  A model, not a measurement.

Running all of Qwen2.5-1.5B's layers and its 151 936-row vocabulary through the ISA simulator
would need its 1.5 B weights quantized on this machine; the programs are the same instructions
per layer, so the bench runs the model's *widths* with 1 and 2 layers, two vocabulary sizes and
two context lengths (4 runs per node count, ``--probe``), and extrapolates the decode cycles per
token linearly:  t(L, V, c) = a + b V + L (l0 + l1 c)  (a: embedding and fixed costs, b: LM head
per vocabulary row, l0 + l1 c: one layer at context c).  ``--check`` adds a direct run at the
probes' largest sizes and reports the extrapolation's error on it (the test runs this on the
tiny model's full size).

Figures: ``tokens_per_s_N{n}`` (model), ``decode_cycles_per_token_N{n}``, the fitted terms,
and the cluster formula's tensor-parallel figure (``mcf simulate --decode tensor-parallel``,
``sim/cluster/decode.py``) for the same model, context and node count beside it.
"""
from __future__ import annotations

import copy
import dataclasses
import sys

import numpy as np

NAME = "tp-decode"
HELP = ("weight-sharded (tensor-parallel) decode tokens/s of a model on N boards from its programs on the "
        "cluster model (ISA simulator + timing model), extrapolated over layers, vocabulary and context")


def add_arguments(p) -> None:
    from mcf.sw.cliutil import integer
    p.add_argument("--model", default="qwen2.5-1.5b", help="model name or YAML (default qwen2.5-1.5b)")
    p.add_argument("--nodes", default="1,4", help="node counts, comma-separated (default 1,4)")
    p.add_argument("--context", type=integer(1, 1 << 20), default=4096,
                   help="context length of the decoded token (default 4096)")
    p.add_argument("--weight-ports", type=integer(1, 4), default=4,
                   help="weight loaders per node, each alone on an HP port (with the node's weight clock "
                        "hp_ports = weight_ports + 1, else = weight_ports; default 4)")
    p.add_argument("--probe", default="1024,2048,64,192", metavar="V1,V2,C1,C2",
                   help="vocabulary sizes and context lengths of the probe runs (default 1024,2048,64,192: "
                        "contexts of whole GEMM_QK tiles of 64 keys, so the context slope counts the array "
                        "attention path's key reads, which go a tile at a time)")
    p.add_argument("--calibrated", action="store_true",
                   help="apply the profile's ISA-cost calibration (fitted on the tiny RTL build's runs)")
    p.add_argument("--check", action="store_true",
                   help="also run the model at (2 layers, V2, C2) directly and report the extrapolation's error")
    p.add_argument("--chunk", type=integer(1, 1 << 16), default=8,
                   help="prefill chunk of the probe runs (default 8: fits the SPAD of a whole Qwen2.5-1.5B node; "
                        "at its widths GEMM_QK streams KV blocks of 8 keys or more, so the array attention path "
                        "needs chunks of at least 8)")
    p.add_argument("--seed", type=integer(0, 1 << 31), default=1, help="weights seed (default 1)")
    p.add_argument("--attention", choices=("auto", "unit", "array"), default="auto",
                   help="the attention path of the programs (default auto: the array where the node builds it)")


def _ints(text: str, what: str, count: int | None = None) -> list:
    from mcf.sw.errors import UserError
    try:
        out = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or any(v < 1 for v in out) or (count is not None and len(out) != count):
        raise UserError(f"{what} {text!r}: {count or 'one or more'} positive integers, comma-separated")
    return out


def _progress(msg: str) -> None:
    print(f"[bench tp-decode] {msg}", file=sys.stderr, flush=True)


def _variant(fm, cfg, L: int, V: int):
    """``fm`` (quantized at L = 2, V = the largest probe) cut to L layers and V rows."""
    from mcf.sw.golden.fixed import QLinear
    m = copy.copy(fm)
    m.cfg = dataclasses.replace(cfg, name=f"{cfg.name}-L{L}-V{V}", num_layers=L, vocab_size=V)
    m.layers = fm.layers[:L]
    m.embed = QLinear(fm.embed.q[:V], fm.embed.scale[:V], fm.embed.exp, fm.embed.group)
    m.head = m.embed if cfg.tie_word_embeddings else QLinear(fm.head.q[:V], fm.head.scale[:V], fm.head.exp,
                                                             fm.head.group)
    return m


def decode_cycles(fm, cfg, node, nodes: int, L: int, V: int, context: int, calibration, chunk: int,
                  attention: str = "auto", out: dict | None = None) -> float:
    """Modelled cycles of the decode step at position ``context`` (a prompt of ``context`` tokens);
    ``out`` gets the attention path the programs ran and why."""
    from mcf.sim.cluster.isa_model import model_backend
    from mcf.sw.runtime.runtime import Session
    m = _variant(fm, cfg, L, V)
    rng = np.random.default_rng(context)
    prompt = [int(t) for t in rng.integers(0, V, context)]
    s = Session(m.cfg, None, prompt, nodes=nodes, decode=1, chunk=min(chunk, node.max_tokens, context), group=fm.group_size,
                node=node, fixed=m, timeout_s=3600.0, decode_scheme="tensor-parallel",
                factory=lambda *a: model_backend(*a, calibration=calibration), attention=attention)
    rep = s.run()
    if out is not None:
        out["attention"], out["attention_reason"] = s.attention, s.attention_reason
    return float(rep.steps[-1].cycles)


def run(args) -> dict:
    from mcf.sim.cluster.decode import simulate_decode
    from mcf.sim.cluster.isa_model import load_calibration
    from mcf.spec.node import NodeConfig
    from mcf.spec.topology import Topology
    from mcf.sw.errors import UserError
    from mcf.sw.golden.fixed_model import FixedModel
    from mcf.sw.golden.weights import random_weights
    from mcf.sw.mars.profile import load_profile
    from mcf.sw.models import load_model
    from mcf.sw.runtime.runtime import node_config, tp_group

    model = load_model(args.model)
    nodes = _ints(args.nodes, "--nodes")
    V1, V2, C1, C2 = _ints(args.probe, "--probe", 4)
    if not (V1 < V2 <= model.vocab_size and C1 < C2):
        raise UserError(f"--probe {args.probe}: need V1 < V2 <= the vocabulary ({model.vocab_size}) and C1 < C2")
    calibration = load_calibration("kr260") if args.calibrated else None
    profile = load_profile("kr260")
    base = dataclasses.replace(model, num_layers=2, vocab_size=V2)
    weights = random_weights(base, args.seed)
    groups = {tp_group(model, n) for n in nodes}
    fms = {g: FixedModel(base, weights, g) for g in groups}
    out = {"model": model.name, "context": args.context, "weight_ports": args.weight_ports,
           "calibrated": bool(args.calibrated), "probe": [V1, V2, C1, C2], "kind": "model",
           "clock_hz": None, "weight_clock_hz": None}
    for n in nodes:
        g = tp_group(model, n)
        node = node_config(model, n)
        # the weight loaders alone on their ports; with their own clock the rest on one more
        node = node.replace(hp_ports=args.weight_ports + (args.weight_ports > 1 and bool(node.weight_clock_hz)),
                            weight_ports=args.weight_ports,
                            weight_clock_hz=node.weight_clock_hz if args.weight_ports > 1 else 0)
        node = node.replace(max_context=max(node.max_context, C2 + 2))
        fm = fms[g]
        path = {}
        _progress(f"N={n}: 4 probe programs (L, V, context) = (1, {V1}, {C1}), (2, {V1}, {C1}), (1, {V2}, {C1}), "
                  f"(1, {V1}, {C2}) on the ISA model{' + a check at (2, %d, %d)' % (V2, C2) if args.check else ''}")
        r1 = decode_cycles(fm, model, node, n, 1, V1, C1, calibration, args.chunk, args.attention, path)
        r2 = decode_cycles(fm, model, node, n, 2, V1, C1, calibration, args.chunk, args.attention)
        r3 = decode_cycles(fm, model, node, n, 1, V2, C1, calibration, args.chunk, args.attention)
        r4 = decode_cycles(fm, model, node, n, 1, V1, C2, calibration, args.chunk, args.attention)
        out[f"attention_N{n}"], out[f"attention_reason_N{n}"] = path["attention"], path["attention_reason"]
        layer = r2 - r1
        b = (r3 - r1) / (V2 - V1)
        l1 = (r4 - r1) / (C2 - C1)
        a = r1 - b * V1 - layer
        t = a + b * model.vocab_size + model.num_layers * (layer + l1 * (args.context - C1))
        out["clock_hz"] = node.clock_hz
        out["weight_clock_hz"] = node.weight_clock_hz
        out[f"group_N{n}"] = g
        out[f"probe_cycles_N{n}"] = [r1, r2, r3, r4]
        out[f"fit_N{n}"] = {"fixed": round(a, 1), "head_per_vocab_row": round(b, 4), "layer_at_C1": round(layer, 1),
                            "layer_per_context_token": round(l1, 4)}
        out[f"decode_cycles_per_token_N{n}"] = round(t, 1)
        out[f"tokens_per_s_N{n}"] = round(node.clock_hz / t, 2)
        _progress(f"N={n}: {out[f'tokens_per_s_N{n}']} tokens/s (programs, model)")
        if args.check:
            direct = decode_cycles(fm, model, node, n, 2, V2, C2, calibration, args.chunk, args.attention)
            pred = a + b * V2 + 2 * (layer + l1 * (C2 - C1))
            out[f"check_N{n}"] = {"direct_cycles": direct, "extrapolated_cycles": round(pred, 1),
                                  "error": round(pred / direct - 1, 5)}
        kv = [args.context / n] * n
        f = simulate_decode(model, profile, Topology("switch", n), kv, variant="tensor-parallel")
        out[f"formula_tokens_per_s_N{n}"] = round(f.tokens_per_s, 2)
    return out
