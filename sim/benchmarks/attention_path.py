"""``mcf bench attention-path``: the same prefill and decode lowered with ``attention = "unit"``
(ATTN_KV passes on the attention unit) and ``"array"`` (GEMM_QK -> ATTN_SM -> GEMM_PV over runs of
KV blocks, docs/attention-array.md step 4), run on the program-level cluster model (the ISA
simulator under ``mcf.sim.cluster.isa_model``'s timing model, uncalibrated unless ``--calibrated``):
the cycles of the attention instructions of each step, summed over the nodes, and their ratio.  A
model, not a measurement.

It runs the model's attention shapes (head_dim, heads, KV heads; one layer, a small vocabulary and
MLP: they do not touch attention) on the model's own node (the KR260 node for Qwen2.5-1.5B, chunks
of its max_tokens by default).  Attention instructions: ATTN_Q, ATTN_KV, ATTN_SM, ATTN_EMIT,
GEMM_QK, GEMM_PV and the array path's directory checks (DIR check = 1, counted as ``DIR_CHECK``).
Both paths' logits are compared (``logits_equal``).
"""
from __future__ import annotations

import dataclasses

import numpy as np

NAME = "attention-path"
HELP = ("attention on the unit (ATTN_KV) vs on the MAC array (GEMM_QK, ATTN_SM, GEMM_PV): modelled cycles of "
        "the attention instructions of the same prefill and decode, and their ratio")


def add_arguments(p) -> None:
    from mcf.sw.cliutil import integer
    p.add_argument("--model", default="qwen2.5-1.5b", help="model whose attention shapes run (default qwen2.5-1.5b)")
    p.add_argument("--prompt", type=integer(1, 1 << 14), default=256, help="prompt tokens (default 256)")
    p.add_argument("--chunk", type=integer(1, 1 << 10), help="chunk tokens (default: the node's max_tokens)")
    p.add_argument("--nodes", type=integer(1, 8), default=1, help="nodes (default 1)")
    p.add_argument("--decode", type=integer(0, 64), default=1, help="decode steps (default 1)")
    p.add_argument("--calibrated", action="store_true", help="apply the profile's ISA-cost calibration")
    p.add_argument("--seed", type=integer(0, 1 << 31), default=1, help="weights and prompt seed (default 1)")


ATTN_OPS = ("ATTN_Q", "ATTN_KV", "ATTN_SM", "ATTN_EMIT", "GEMM_QK", "GEMM_PV", "DIR_CHECK")


def attention_cycles(model, node, prompt, *, nodes: int, chunk: int, decode: int, attention: str, fm,
                     calibration=None) -> dict:
    """One session on the model backend: the attention instructions' cycles over the run (summed
    over the nodes, per kind), the steps' cycles, the tokens and logits."""
    from mcf.sim.cluster.isa_model import TimingCosts
    from mcf.sw.golden.node import ClusterSim
    from mcf.sw.mars.profile import load_profile
    from mcf.sw.runtime.backend import SimBackend
    from mcf.sw.runtime.runtime import Session

    log: list = []

    class Recording(TimingCosts):
        def instr(self, cfg, ex):
            c = super().instr(cfg, ex)
            log.append((ex.instr, c))
            return c

    def factory(n, cfg, ddr_bytes, topology):
        costs = Recording(cfg, load_profile("kr260"), calibration)
        return SimBackend(ClusterSim(cfg, n, topology, costs=costs, ddr_bytes=ddr_bytes), name="model")

    s = Session(model, None, prompt, nodes=nodes, decode=decode, chunk=chunk, group=fm.group_size, node=node,
                fixed=fm, timeout_s=3600.0, factory=factory, attention=attention)
    rep = s.run()
    by: dict = {}
    for ins, c in log:
        kind = "DIR_CHECK" if ins.OPCODE.name == "DIR" and ins.check else ins.OPCODE.name
        if kind in ATTN_OPS:
            by[kind] = by.get(kind, 0) + int(c)
    return {"tokens": rep.tokens, "logits": [st.logits for st in rep.steps],
            "steps": [{"kind": st.kind, "cycles": int(st.cycles)} for st in rep.steps],
            "by_kind": by, "attention_cycles": int(sum(by.values()))}


def run(args) -> dict:
    from mcf.sim.cluster.isa_model import load_calibration
    from mcf.sw.golden.fixed_model import FixedModel, default_group
    from mcf.sw.golden.weights import random_weights
    from mcf.sw.models import load_model
    from mcf.sw.runtime.runtime import node_config

    full = load_model(args.model)
    d = full.head_dim
    width = full.num_heads * d
    model = dataclasses.replace(full, name=f"{full.name}-attention", num_layers=1, hidden_size=width,
                                intermediate_size=width, vocab_size=256)
    node = node_config(model, args.nodes)
    from mcf.spec import isa
    changes = {}
    if not isa.gemm_pv_built(node.mac_rows, node.mac_lanes, node.vec_lanes, d):
        node = node.replace(mac_rows=node.vec_lanes)        # the tiny node's 4 x 8 array builds no GEMM_PV
        changes["mac_rows"] = node.mac_rows
    chunk = args.chunk or node.max_tokens
    if node.max_context < args.prompt + args.decode + 1:
        node = node.replace(max_context=args.prompt + args.decode + 1)
        changes["max_context"] = node.max_context
    calibration = load_calibration("kr260") if args.calibrated else None
    group = default_group(model)
    fm = FixedModel(model, random_weights(model, args.seed), group)
    prompt = [int(t) for t in np.random.default_rng(args.seed).integers(0, model.vocab_size, args.prompt)]
    out = {"kind": "model", "model": model.name, "shapes_of": full.name, "head_dim": d, "heads": full.num_heads,
           "kv_heads": full.num_kv_heads, "layers": 1, "prompt": args.prompt, "chunk": chunk, "nodes": args.nodes,
           "decode": args.decode, "calibrated": bool(args.calibrated),
           "node": {"max_tokens": node.max_tokens, "spad_beats": node.spad_beats, "mac_rows": node.mac_rows,
                    "mac_lanes": node.mac_lanes, "vec_lanes": node.vec_lanes, "att_rows": node.att_rows},
           "node_changes": changes}
    res = {}
    # the unit's path needs the GQA group within att_rows (1 on the KR260 node since round 24, whose
    # programs run attention on the array): it runs on the node with att_rows = the group
    unit_node = node.replace(att_rows=max(node.att_rows, full.num_heads // full.num_kv_heads))
    if unit_node != node:
        changes["unit_att_rows"] = unit_node.att_rows
    for path in ("unit", "array"):
        pnode = unit_node if path == "unit" else node
        pre = attention_cycles(model, pnode, prompt, nodes=args.nodes, chunk=chunk, decode=0, attention=path, fm=fm,
                               calibration=calibration)
        res[path] = pre
        r = {"prefill_attention_cycles": pre["attention_cycles"], "prefill_by_kind": pre["by_kind"],
             "prefill_cycles": pre["steps"][0]["cycles"]}
        if args.decode:
            both = attention_cycles(model, pnode, prompt, nodes=args.nodes, chunk=chunk, decode=args.decode,
                                    attention=path, fm=fm, calibration=calibration)
            res[path + "_decode"] = both
            r["decode_attention_cycles_per_token"] = round((both["attention_cycles"] - pre["attention_cycles"])
                                                           / args.decode, 1)
            r["decode_cycles_per_token"] = round(sum(st["cycles"] for st in both["steps"][1:]) / args.decode, 1)
            r["decode_by_kind"] = {k: both["by_kind"].get(k, 0) - pre["by_kind"].get(k, 0)
                                   for k in both["by_kind"]}
        out[path] = r
    same = all(np.array_equal(a, b) for a, b in zip(res["unit"]["logits"], res["array"]["logits"]))
    if args.decode:
        same = same and all(np.array_equal(a, b) for a, b in zip(res["unit_decode"]["logits"],
                                                                 res["array_decode"]["logits"]))
    out["logits_equal"] = bool(same)
    u, a = out["unit"], out["array"]
    out["prefill_attention_ratio_unit_over_array"] = round(u["prefill_attention_cycles"]
                                                           / max(1, a["prefill_attention_cycles"]), 3)
    if args.decode:
        out["decode_attention_ratio_unit_over_array"] = round(u["decode_attention_cycles_per_token"]
                                                              / max(1.0, a["decode_attention_cycles_per_token"]), 3)
    return out
