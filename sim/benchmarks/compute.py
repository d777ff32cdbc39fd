"""``mcf bench compute``: MAC utilization of the matrix unit on a steady-state GEMM tile (RTL
simulation, every stream always ready), and cycles per decoder layer from the unit cycle
costs (``mcf.sim.compute.cost``, each checked against simulation) for the tiny model and
scaled to Qwen2.5-1.5B.

``exec_layer`` (skip with ``--no-layer``): one decoder layer of the tiny model run as an EX
program on the execute unit of the tiny node (RTL, cocotb + Icarus, AxiRam as DDR without
pauses; the bench of ``tests/hw/compute/exec/test_unit.py``): a prefill chunk of 8 tokens, then
one decode token.  Measured from the unit's strobes: cycles per instruction kind, MAC beats
(MACs = beats x rows x lanes), MAC utilization = MAC beats / cycles of the whole layer (and
of its GEMMs alone), cycles the running mover waited for DDR data.

Utilization = cycles issuing a weight beat x token / cycles from the first issue to the last;
peak is rows x lanes MACs per cycle.

``--model qwen2.5-1.5b`` (any model but tiny, or ``--engine``): the ENGINE BENCH in RTL (Verilator):
the execute unit of that model's node (``NodeConfig.for_model``, ``--weight-ports`` weight loaders)
against the DDR model (``mcf.sim.ddr_model``: the profile's latency, outstanding limit, 19.2 GB/s
total and one bus beat per cycle per HP port) runs the GEMMs of one layer for a prefill chunk of
``max_tokens`` tokens and for one decode token, each on a slice of its output rows (``--prefill-rows``,
``--decode-rows``; the whole matrix when it has fewer), bit-exact against ``fixed.linear``.  Per op:
the instruction's cycles, MACs, ``mac_utilization`` (MACs / cycles / peak), the steady-state
utilization over the MAC span, DDR bytes per cycle and their fraction of the DDR model's bandwidth
for the weight ports.  The whole-layer figures extrapolate each slice to the full matrix (MODEL from
measured parts: the slice's cycles outside its MAC span, i.e. activation load and pipeline, plus
the MAC span x full tiles / simulated tiles).  ``--write-profile`` writes ``compute_efficiency``
(the prefill GEMMs' MACs / extrapolated cycles / peak) and ``ddr_efficiency`` (the decode GEMMs' DDR
bytes per cycle / the DDR's peak bytes per cycle) into the profile with the command and the date.

Beside the GEMMs (same build and run): ``attn:prefill`` / ``attn:decode`` (the attention unit; on a build of its
own with att_rows = the GQA group when the node's att_rows is smaller, 1 on the KR260 node: ``node_changes``),
``attn:qk-array`` (QK^T on the array, GEMM_QK over one K segment) and ``attn:softmax`` (``--sm-keys`` keys of one
token x the GQA group through ATTN_SM MAX and APPLY: score rows in SPAD, V scale words from the DDR
model, w rows out, bit-exact against ``fixed.attn_weights``): cycles and cycles per key of each pass;
``attn:pv-array`` (GEMM_PV) and ``attn:prefill-array`` (tests/hw/compute/exec/test_attn_array.py:
attn:prefill's work as the array sequence over its KV stored as the cluster model's KV pool keeps it,
blocks of the preset's kv_block_keys (2048: one segment a MARS chunk of B = 2048; ``--array-block-keys``) -- per job ATTN_Q, one ATTN_SM MAX with defer (its maxima taken as the
GEMM_QK after it writes the scores), one GEMM_QK and one APPLY over
the run of blocks, GEMM_PV (one when the keys fit its activation buffer), ATTN_Q O (GEMM_PV's rows at
their stride), ATTN_EMIT --
bit-exact against ``fixed.attention``: cycles per instruction kind,
``attention_efficiency`` by attn:prefill's definition, the speed-up over attn:prefill;
``--write-profile`` writes it as ``attention_array_efficiency``).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import sys
import tempfile
from pathlib import Path

from mcf.hw.compute.attention import unit_lanes
from mcf.spec.node import MODEL_SHAPES, NodeConfig

#: The matrix unit's steady-state bench (module, coroutine), beside the unit's tests.
UTILIZATION_BENCH = ("tests.hw.compute.test_matrix", "run_utilization")
#: The execute unit's decoder-layer bench (module, coroutine).
LAYER_BENCH = ("tests.hw.compute.exec.test_unit", "run_layer")
#: The execute unit's GEMM bench against the DDR model (module, coroutine).
ENGINE_BENCH = ("tests.hw.compute.exec.test_unit", "run_gemm_ops")
#: The execute unit's attention block against the DDR model (same module and build).
ATTN_BENCH = ("tests.hw.compute.exec.test_unit", "run_attn_ops")
#: Attention scores QK^T on the MAC array (GEMM_QK) against the DDR model (same build and run:
#: the simulation takes both modules).
QK_BENCH = ("tests.hw.compute.exec.test_scores", "run_qk_ops")
#: The softmax pass over SPAD score rows (ATTN_SM) against the DDR model (same build and run).
SM_BENCH = ("tests.hw.compute.exec.test_softmax", "run_sm_ops")
#: Attention PV on the MAC array (GEMM_PV) against the DDR model (same build and run).
PV_BENCH = ("tests.hw.compute.exec.test_pv", "run_pv_ops")
#: attn:prefill's work as the array sequence (ATTN_Q, GEMM_QK, ATTN_SM, GEMM_PV, ..) against the DDR model
#: (same build and run).
ATTN_ARRAY_BENCH = ("tests.hw.compute.exec.test_attn_array", "run_attn_array_ops")
#: The engine bench's blocks (``--block`` runs only the named ones).
BLOCKS = ("gemms", "attention", "qk-array", "softmax", "pv-array", "prefill-array")

NAME = "compute"
#: The engine bench's build: the node's GEMM path (array, tokens per weight pass, SPAD, bus, weight
#: ports, loader buffers) and the node's attention unit (head_dim, att_rows: its product arrays) but
#: small capacities -- 256 positions, segments of at most 64 keys, 256 directory entries -- which only
#: size counters, the segment scale table and the RoPE table (the full-size unit takes too long to
#: convert and build).  The attention block runs 256 keys in 64-key segments within them.
GEMM_ONLY = {"max_keys": 64, "max_context": 256, "kv_block_keys": 64, "dir_entries": 256}
#: The profile ``--write-profile`` writes by default.
PROFILE = Path(__file__).resolve().parents[2] / "sw" / "mars" / "profiles" / "kr260.yaml"
HELP = "compute engine: MAC utilization (RTL sim), MACs/cycle, cycles per decoder layer"


def add_arguments(p) -> None:
    node = NodeConfig()
    p.add_argument("--mac-rows", type=int, default=node.mac_rows,
                   help="MAC array rows (output rows) (default: the node's, %(default)s)")
    p.add_argument("--mac-lanes", type=int, default=node.mac_lanes,
                   help="MAC array lanes (inputs per row) (default: the node's, %(default)s)")
    p.add_argument("--tokens", type=int, default=4, help="tokens sharing each weight beat in the measured tile (default: %(default)s)")
    p.add_argument("--inputs", type=int, default=256, help="GEMM input width of the measured tile (default: %(default)s)")
    p.add_argument("--tiles", type=int, default=8, help="row tiles in the measured GEMM (default: %(default)s)")
    p.add_argument("--vec-lanes", type=int, default=node.vec_lanes,
                   help="vector unit lanes for cycles_per_layer (default: the node's, %(default)s)")
    p.add_argument("--model", default="tiny", help="model preset for cycles_per_layer (default: %(default)s)")
    p.add_argument("--chunk", type=int, default=8, help="prefill chunk (tokens) for cycles_per_layer (default: %(default)s)")
    p.add_argument("--context", type=int, default=4096, help="decode context (keys) for the Qwen2.5-1.5B figure (default: %(default)s)")
    p.add_argument("--layer", action=argparse.BooleanOptionalAction, default=True,
                   help="also run one tiny-model decoder layer on the execute unit (RTL, ~1-2 min) (default: on)")
    p.add_argument("--engine", action="store_true",
                   help="run the engine bench (implied by --model other than tiny): the execute unit of the model's "
                        "node, a layer's prefill and decode GEMMs against the DDR model (RTL)")
    p.add_argument("--weight-ports", type=int, default=4,
                   help="engine bench: weight loaders / HP ports (NodeConfig.weight_ports) (default: %(default)s)")
    p.add_argument("--weight-clock-hz", type=float, default=None,
                   help="engine bench: the weight loaders' AXI clock, Hz (NodeConfig.weight_clock_hz; 0: the engine's "
                        "clock) (default: the model node's: 300e6 on the KR260 node, 0 on the tiny one)")
    p.add_argument("--prefill-rows", type=int, default=256,
                   help="engine bench: output rows simulated per prefill GEMM (default: %(default)s)")
    p.add_argument("--decode-rows", type=int, default=512,
                   help="engine bench: output rows simulated per decode GEMM (default: %(default)s)")
    p.add_argument("--attn-keys", type=int, default=256,
                   help="engine bench: keys of the attention block (KV of one GQA group in DDR) (default: %(default)s)")
    p.add_argument("--attention", action=argparse.BooleanOptionalAction, default=True,
                   help="engine bench: also run one attention block (prefill chunk and decode token) (default: on)")
    p.add_argument("--qk-array", action=argparse.BooleanOptionalAction, default=True,
                   help="engine bench: also run attention scores QK^T on the MAC array (GEMM_QK: attn:qk-array) "
                        "(default: on)")
    p.add_argument("--qk-keys", type=int, default=2048,
                   help="engine bench: keys of the attn:qk-array block (one K segment) (default: %(default)s)")
    p.add_argument("--qk-tokens", type=int, default=2,
                   help="engine bench: tokens of the attn:qk-array block (rows = tokens x the GQA group) "
                        "(default: %(default)s)")
    p.add_argument("--softmax", action=argparse.BooleanOptionalAction, default=True,
                   help="engine bench: also run the softmax pass over SPAD score rows (ATTN_SM MAX and APPLY: "
                        "attn:softmax) for one token x the GQA group (default: on)")
    p.add_argument("--sm-keys", type=int, default=512,
                   help="engine bench: keys of the attn:softmax block (a multiple of VL) (default: %(default)s)")
    p.add_argument("--pv-array", action=argparse.BooleanOptionalAction, default=True,
                   help="engine bench: also run attention PV on the MAC array (GEMM_PV: attn:pv-array) (default: on)")
    p.add_argument("--pv-keys", type=int, default=2048,
                   help="engine bench: keys of the attn:pv-array block (one V segment) (default: %(default)s)")
    p.add_argument("--pv-tokens", type=int, default=2,
                   help="engine bench: tokens of the attn:pv-array block (rows = tokens x the GQA group) "
                        "(default: %(default)s)")
    p.add_argument("--prefill-array", action=argparse.BooleanOptionalAction, default=True,
                   help="engine bench: also run attn:prefill's work as the array sequence (ATTN_Q, GEMM_QK, ATTN_SM "
                        "MAX / APPLY, GEMM_PV, ATTN_Q O, ATTN_EMIT: attn:prefill-array) (default: on)")
    p.add_argument("--array-keys", type=int, default=2048,
                   help="engine bench: keys of attn:prefill-array's second run (two jobs over their own draws, "
                        "attn:prefill-array:<keys>); with the first (--attn-keys) it gives the fit cycles a job = "
                        "fixed + per key x keys (attn:array-fit; 0: no second run) (default: %(default)s)")
    p.add_argument("--array-block-keys", type=int, default=0,
                   help="engine bench: keys of one stored KV block of attn:prefill-array's runs (a run of fewer keys "
                        "is one block; 0: the preset node's kv_block_keys, 2048 at the KR260 node: one KV segment a "
                        "chunk of the cluster model's B = 2048 holds; 16 = max_tokens: the MARS lowering's chunks, "
                        "the layout before round 17) (default: %(default)s)")
    p.add_argument("--array-tokens-per-job", type=int, default=0,
                   help="engine bench: tokens of one attn:prefill-array job (0: the lowering's, min(sm_rows, "
                        "max_tokens) // the GQA group: 2 on the KR260 node; 1: the jobs of one token before) "
                        "(default: %(default)s)")
    p.add_argument("--block", action="append", choices=BLOCKS, default=None,
                   help="engine bench: run only this block (repeatable; default: every block its switches leave on: "
                        f"{', '.join(BLOCKS)})")
    p.add_argument("--sim", choices=("verilator", "icarus"), default="verilator",
                   help="engine bench: simulator (default: %(default)s)")
    p.add_argument("--write-profile", nargs="?", const=str(PROFILE), default=None, metavar="YAML",
                   help="engine bench: write compute_efficiency and ddr_efficiency into this profile "
                        f"(default when given without a path: {PROFILE.relative_to(PROFILE.parents[3])})")


def layer_figures(report: dict, node: NodeConfig) -> dict:
    """The execute unit's layer run (``run_layer``'s report: per "prefill:OP" / "decode:OP"
    counts, cycles and strobe counts) -> figures per phase."""
    out = {"array": f"{node.mac_rows}x{node.mac_lanes}", "vec_lanes": node.vec_lanes, "data_width": node.data_width}
    for phase in ("prefill", "decode"):
        kinds = {k.split(":", 1)[1]: v for k, v in report["per_kind"].items() if k.startswith(phase + ":")}
        cycles = sum(v["cycles"] for v in kinds.values())
        macs = sum(v["mac_beats"] for v in kinds.values())
        gemm = kinds.get("GEMM", {}).get("busy_gemm", 0)
        out[phase] = {
            "cycles": cycles,
            "instructions": sum(v["count"] for v in kinds.values()),
            "mac_beats": macs,
            "mac_utilization": round(macs / cycles, 4) if cycles else 0.0,
            "gemm_mac_utilization": round(macs / gemm, 4) if gemm else 0.0,
            "stall_ex_ddr_cycles": sum(v["stall_ex_ddr"] for v in kinds.values()),
            "cycles_per_instruction": {op: round(v["cycles"] / v["count"], 1) for op, v in sorted(kinds.items())},
            "cycles_by_kind": {op: v["cycles"] for op, v in sorted(kinds.items())},
        }
    return out


def run_layer(node: NodeConfig | None = None, pause: float = 0.0, seed: int = 1) -> dict:
    """One tiny-model layer on the execute unit (RTL) -> ``layer_figures``."""
    from mcf.hw.compute.exec.unit import ExecUnit
    from mcf.sim.runner import run_cocotb
    node = node if node is not None else NodeConfig.tiny()
    with tempfile.TemporaryDirectory(prefix="mcf-bench-exec-") as tmp:
        report = Path(tmp) / "layer.json"
        run_cocotb(ExecUnit(node), LAYER_BENCH[0], Path(tmp) / "build", testcase=LAYER_BENCH[1],
                   params={"seed": seed, "pause": pause, "report": str(report)})
        return layer_figures(json.loads(report.read_text()), node)


def _progress(msg: str) -> None:
    print(f"[bench compute] {msg}", file=sys.stderr, flush=True)


def run(args) -> dict:
    if args.engine or args.model != "tiny":
        return run_engine(args)
    if args.write_profile:
        raise ValueError("--write-profile needs the engine bench (--model qwen2.5-1.5b or --engine)")
    from mcf.hw.compute.matrix import MatrixUnit
    from mcf.sim.compute import cost
    from mcf.sim.runner import run_cocotb
    from mcf.sw.models import load_model

    for name in ("mac_rows", "mac_lanes", "tokens", "inputs", "tiles", "chunk", "context", "vec_lanes"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    rows, lanes = args.mac_rows, args.mac_lanes
    if lanes & (lanes - 1) or args.inputs % lanes or (rows * lanes * 4) & (rows * lanes * 4 - 1):
        raise ValueError("--mac-lanes and --mac-rows must be powers of two, --mac-lanes must divide --inputs")
    tm = 1 << (args.tokens - 1).bit_length()
    params = {"mac_rows": rows, "mac_lanes": lanes, "max_tokens": tm, "max_inputs": args.inputs,
              "max_tiles": args.tiles}
    _progress(f"building the {rows}x{lanes} matrix unit and measuring one GEMM tile")
    with tempfile.TemporaryDirectory(prefix="mcf-bench-compute-") as tmp:
        report = Path(tmp) / "util.json"
        run_cocotb(MatrixUnit(**params), UTILIZATION_BENCH[0], Path(tmp) / "build",
                   testcase=UTILIZATION_BENCH[1],
                   params={**params, "tokens": args.tokens, "tiles": args.tiles,
                           "group": min(args.inputs, 128) // lanes * lanes or lanes,
                           "report": str(report)})
        sim = json.loads(report.read_text())
    util = sim["mac_utilization"]
    node = NodeConfig(mac_rows=rows, mac_lanes=lanes, max_tokens=tm, vec_lanes=args.vec_lanes)
    model = load_model(args.model)
    prefill = cost.layer_cycles(model, tokens=args.chunk, context=args.chunk, node=node, mac_utilization=util)
    decode = cost.layer_cycles(model, tokens=1, context=args.chunk + 1, node=node, mac_utilization=util)
    qwen = load_model("qwen2.5-1.5b")
    q_prefill = cost.layer_cycles(qwen, tokens=args.chunk, context=args.chunk, node=node, mac_utilization=util)
    q_decode = cost.layer_cycles(qwen, tokens=1, context=args.context, node=node, mac_utilization=util)
    if args.layer:
        _progress("running one tiny decoder layer on the execute unit (RTL, ~1-2 min)")
        layer = run_layer()
    return {
        "mac_utilization": round(util, 4),
        "macs_per_cycle": round(sim["macs_per_cycle"], 2),
        "peak_macs_per_cycle": rows * lanes,
        "array": f"{rows}x{lanes}",
        "vector_lanes": args.vec_lanes,
        "tile": {"tokens": args.tokens, "inputs": args.inputs, "outputs": rows * args.tiles,
                 "issue_cycles": sim["mac_cycles"], "span_cycles": sim["span_cycles"]},
        "model": model.name,
        "cycles_per_layer": prefill["total"],
        "cycles_per_layer_detail": {"prefill_chunk": args.chunk, **prefill},
        "cycles_per_layer_decode": decode["total"],
        "qwen2.5-1.5b": {"prefill_chunk": args.chunk, "cycles_per_layer_prefill": q_prefill["total"],
                         "decode_context": args.context, "cycles_per_layer_decode": q_decode["total"],
                         "decode_detail": q_decode},
        "formula": cost.FORMULA,
        # what the cluster model's profile (sw/mars/profiles/kr260.yaml) takes: a MODEL, the cost
        # formula's GEMM share of a Qwen2.5-1.5B prefill layer with the measured tile utilization
        # (no whole Qwen2.5-1.5B layer runs on the RTL; exec_layer measures the tiny model's)
        "calibration": {"mac_rows": rows, "mac_lanes": lanes,
                        "compute_efficiency": round(q_prefill["gemm"] / q_prefill["total"], 4),
                        "compute_efficiency_is": "model: sim/compute/cost.py layer_cycles, Qwen2.5-1.5B "
                                                 f"prefill chunk {args.chunk}, GEMM cycles / layer cycles "
                                                 "with the measured tile mac_utilization"},
        **({"exec_layer": layer} if args.layer else {}),
    }


# --- the engine bench (RTL, DDR model) ------------------------------------------------------------------
def engine_ops(model, node: NodeConfig, prefill_rows: int, decode_rows: int, group: int) -> list[dict]:
    """The GEMMs of one decoder layer for a prefill chunk (``max_tokens`` tokens) and one decode
    token: name, inputs n, simulated tiles, the matrix's full tiles, tokens, group."""
    h, inter = model.hidden_size, model.intermediate_size
    qw, kw = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    shapes = [("q", h, qw), ("k", h, kw), ("v", h, kw), ("o", qw, h), ("gate", h, inter), ("up", h, inter),
              ("down", inter, h)]
    P = node.mac_rows
    ops = []
    for phase, tokens, rows in (("prefill", node.max_tokens, prefill_rows), ("decode", 1, decode_rows)):
        for name, n, out in shapes:
            full = -(-out // P)
            ops.append({"name": f"{phase}:{name}", "phase": phase, "n": n, "tiles": min(full, max(1, rows // P)),
                        "full_tiles": full, "tokens": tokens, "group": group})
    return ops


def engine_figures(report: dict, node: NodeConfig, timing) -> dict:
    """The bench's per-op counts -> figures per op and per phase (see the module text)."""
    peak = node.mac_rows * node.mac_lanes
    bw = timing.bandwidth(node.weight_ports, node.data_bytes, node.weight_clock / node.clock_hz)
    ops, phases = {}, {}
    for op in report["ops"]:
        macs = op["mac_beats"] * node.mac_rows * node.mac_lanes
        scale = op["full_tiles"] / op["tiles"]
        other = op["cycles"] - op["mac_span_cycles"]
        full_cycles = other + op["mac_span_cycles"] * scale
        ops[op["name"]] = {
            "n": op["n"], "outputs_simulated": op["tiles"] * node.mac_rows, "tiles": op["tiles"],
            "full_tiles": op["full_tiles"], "tokens": op["tokens"],
            "cycles": op["cycles"], "macs": macs, "macs_per_cycle": round(macs / op["cycles"], 2),
            "mac_utilization": round(macs / op["cycles"] / peak, 4),
            "steady_mac_utilization": round(macs / op["mac_span_cycles"] / peak, 4),
            "ddr_bytes_per_cycle": round(op["ddr_read_bytes"] / op["cycles"], 2),
            "ddr_fraction_of_model": round(op["ddr_read_bytes"] / op["cycles"] / bw, 4),
            "full_cycles_model": round(full_cycles),
        }
        ph = phases.setdefault(op["phase"], {"cycles": 0, "macs": 0, "ddr_read_bytes": 0, "full_cycles": 0.0,
                                             "full_macs": 0})
        ph["cycles"] += op["cycles"]
        ph["macs"] += macs
        ph["ddr_read_bytes"] += op["ddr_read_bytes"]
        ph["full_cycles"] += full_cycles
        ph["full_macs"] += macs * scale
    out = {}
    for name, ph in phases.items():
        out[name] = {
            "cycles_simulated": ph["cycles"],
            "macs_per_cycle": round(ph["macs"] / ph["cycles"], 2),
            "mac_utilization": round(ph["macs"] / ph["cycles"] / peak, 4),
            "ddr_bytes_per_cycle": round(ph["ddr_read_bytes"] / ph["cycles"], 2),
            "ddr_fraction_of_model": round(ph["ddr_read_bytes"] / ph["cycles"] / bw, 4),
            "ddr_fraction_of_peak": round(ph["ddr_read_bytes"] / ph["cycles"] / timing.total_bytes_per_cycle, 4),
            "layer_gemm_cycles_model": round(ph["full_cycles"]),
            "layer_mac_utilization_model": round(ph["full_macs"] / ph["full_cycles"] / peak, 4),
        }
    return {"ops": ops, **out}


def attention_figures(report: dict, node: NodeConfig) -> dict:
    """The attention bench's per-op, per-kind counts -> figures: cycles per instruction kind, keys
    per cycle of each pass, products per cycle and utilization of the unit's two product arrays
    (the score array, ``att_rows`` x 2 ``lanes`` INT4 x int16 a cycle (a key pair), used by MAX and
    APPLY alike; the P.V array, ``att_rows`` x ``lanes`` int32 x INT4 a cycle, used by APPLY), and
    the KV bytes read."""
    from mcf.spec.kv import segment_bytes
    R, d = node.att_rows, node.head_dim
    score_array, pv_array = R * 2 * unit_lanes(d, node.att_lanes), R * unit_lanes(d, node.att_lanes)
    out = {}
    for op in report["ops"]:
        kinds = op["per_kind"]
        keys = op["keys"]
        cycles = sum(k["cycles"] for k in kinds.values())
        mx, ap = kinds["ATTN_KV:MAX"], kinds["ATTN_KV:APPLY"]
        jobs = mx["count"]
        score_products = (mx["rows"] + ap["rows"]) * d * keys        # every key, visible or not
        pv_products = ap["rows"] * d * keys
        kv_seg = segment_bytes(op["block_keys"], d) * (keys // op["block_keys"])     # one K (or V) of the run
        kv_read = mx["ddr_read_bytes"] + ap["ddr_read_bytes"]
        out[op["name"]] = {
            "tokens": op["tokens"], "heads": op["heads"], "keys": keys, "visible_keys": op["visible_keys"],
            "jobs": jobs, "rows_per_job": mx["rows"] // jobs, "cycles": cycles,
            "cycles_per_instruction": {k: round(v["cycles"] / v["count"], 1) for k, v in sorted(kinds.items())},
            "cycles_by_kind": {k: v["cycles"] for k, v in sorted(kinds.items())},
            "max_pass_keys_per_cycle": round(keys * jobs / mx["cycles"], 4),
            "apply_pass_keys_per_cycle": round(keys * jobs / ap["cycles"], 4),
            "score_array_products_per_cycle": round(score_products / (mx["cycles"] + ap["cycles"]), 1),
            "score_array_utilization": round(score_products / (mx["cycles"] + ap["cycles"]) / score_array, 4),
            "pv_array_products_per_cycle": round(pv_products / ap["cycles"], 1),
            "pv_array_utilization": round(pv_products / ap["cycles"] / pv_array, 4),
            "products_per_cycle": round((score_products + pv_products) / cycles, 1),
            "product_arrays_utilization": round((score_products + pv_products) / cycles / (score_array + pv_array), 4),
            "kv_bytes_read": kv_read,
            "kv_bytes_read_per_job": round(kv_read / jobs),
            "kv_segment_bytes": kv_seg,
            # K by MAX, K and V by APPLY, for all the group's heads at once: 3 segments' bytes a job
            "kv_reads_per_job_per_segment": round(kv_read / jobs / (3 * kv_seg), 4),
            "kv_bytes_if_read_per_head": kv_read * op["heads"],
            "ddr_bytes_per_cycle_in_passes": round(kv_read / (mx["cycles"] + ap["cycles"]), 2),
            # eq. 6's work (QK^T and PV: 2 MACs per dimension per visible (query row, key) pair) per
            # cycle of the whole block (ATTN_Q, both passes, EMIT), against the MAC array's peak
            "attention_macs_per_cycle": round(2 * d * op["heads"] * op["visible_keys"] / cycles, 2),
            "attention_efficiency": round(2 * d * op["heads"] * op["visible_keys"] / cycles
                                          / (node.mac_rows * node.mac_lanes), 4),
        }
    return out


def qk_figures(report: dict, node: NodeConfig, attn: dict | None) -> dict:
    """The attn:qk-array run (``run_qk_ops``'s report) -> cycles, MACs per cycle and their fraction
    of the array's peak, scores per cycle; beside it the attention unit's MAX pass of attn:prefill
    (the same scores, ``rows_per_job`` rows a job) when the attention block ran."""
    peak = node.mac_rows * node.mac_lanes
    out = {}
    for op in report["ops"]:
        macs = op["mac_beats"] * peak
        assert macs == op["rows"] * op["head_dim"] * op["keys"]
        fig = {
            "tokens": op["tokens"], "heads": op["heads"], "rows": op["rows"], "keys": op["keys"],
            "head_dim": op["head_dim"], "cycles": op["cycles"], "macs": macs,
            "macs_per_cycle": round(macs / op["cycles"], 2),
            "fraction_of_array_peak": round(macs / op["cycles"] / peak, 4),
            "steady_fraction_of_array_peak": round(macs / op["mac_span_cycles"] / peak, 4),
            "scores_per_cycle": round(op["rows"] * op["keys"] / op["cycles"], 2),
            "ddr_bytes_per_cycle": round(op["ddr_read_bytes"] / op["cycles"], 2),
            "k_segment_bytes": op["segment_bytes"], "ddr_read_bytes": op["ddr_read_bytes"],
        }
        if attn is not None and "attn:prefill" in attn:
            a = attn["attn:prefill"]
            mx_scores = a["max_pass_keys_per_cycle"] * a["rows_per_job"]
            fig["beside_attn_prefill_max_pass"] = {
                "rows_per_job": a["rows_per_job"], "keys_per_cycle": a["max_pass_keys_per_cycle"],
                "scores_per_cycle": round(mx_scores, 2),
                "qk_array_speedup_in_scores_per_cycle": round(fig["scores_per_cycle"] / mx_scores, 2),
                "attention_efficiency": a["attention_efficiency"]}
        out[op["name"]] = fig
    return out


def sm_figures(report: dict) -> dict:
    """The attn:softmax run (``run_sm_ops``'s report) -> cycles and cycles per key of each pass."""
    out = {}
    for op in report["ops"]:
        out[op["name"]] = {
            "rows": op["rows"], "keys": op["keys"], "vec_lanes": op["vec_lanes"],
            **{phase: {"cycles": op[phase]["cycles"], "cycles_per_key": round(op[phase]["cycles"] / op["keys"], 3),
                       "stall_ex_ddr_cycles": op[phase]["stall_ex_ddr"]} for phase in ("max", "apply")}}
    return out


def pv_figures(report: dict, node: NodeConfig) -> dict:
    """The attn:pv-array run (``run_pv_ops``'s report) -> cycles, MACs per cycle and their fraction
    of the array's peak (a MAC strobe is one weight beat x token of a digit pass: rows x head_dim x
    keys MACs of PV take twice its strobes, so the peak fraction counts PV MACs / 2 x peak too)."""
    peak = node.mac_rows * node.mac_lanes
    out = {}
    for op in report["ops"]:
        macs = op["rows"] * op["head_dim"] * op["keys"]         # PV's MACs: o = w V, every (row, key, channel)
        assert op["mac_beats"] * peak == 2 * macs               # each on the array twice (the hi and the lo digit)
        out[op["name"]] = {
            "tokens": op["tokens"], "heads": op["heads"], "rows": op["rows"], "keys": op["keys"],
            "head_dim": op["head_dim"], "cycles": op["cycles"], "macs": macs,
            "array_mac_beats": op["mac_beats"],
            "macs_per_cycle": round(macs / op["cycles"], 2),
            "fraction_of_array_peak": round(macs / op["cycles"] / peak, 4),
            "mac_utilization": round(op["mac_beats"] / op["cycles"], 4),
            "steady_mac_utilization": round(op["mac_beats"] / op["mac_span_cycles"], 4),
            "keys_per_cycle": round(op["keys"] / op["cycles"], 2),
            "ddr_bytes_per_cycle": round(op["ddr_read_bytes"] / op["cycles"], 2),
            "v_segment_bytes": op["segment_bytes"], "ddr_read_bytes": op["ddr_read_bytes"],
            "macs_are": "PV MACs (rows x head_dim x keys); the array runs each twice (w as two 16-bit digits), "
                        "so fraction_of_array_peak is at most 0.5 and mac_utilization (array issue cycles / "
                        "cycles) at most 1",
        }
    return out


def array_run_block_keys(block_keys: int, keys: int) -> int:
    """Keys of one stored KV block of an attn:prefill-array run over ``keys`` keys in the KV pool's blocks of
    ``block_keys`` (``--array-block-keys``): a run of fewer keys is one block (the first keys of one)."""
    return min(block_keys, keys)


def prefill_array_refusal(node: NodeConfig, keys: int, block_keys: int) -> str | None:
    """Why attn:prefill-array (attn:prefill's keys in a run of blocks of ``block_keys`` keys, jobs of
    min(sm_rows, max_tokens) // group tokens: the lowering's) cannot run on ``node``'s instructions, or None."""
    from mcf.spec.isa import block_run_ok, gemm_pv_built
    from mcf.sim.compute.jobs import pv_run_keys
    P, K, vl, d = node.mac_rows, node.mac_lanes, node.vec_lanes, node.head_dim
    if not gemm_pv_built(P, K, vl, d):
        return "this node builds no GEMM_PV (it needs mac_rows, mac_lanes >= vec_lanes and mac_rows | head_dim | " \
               "mac_rows x mac_lanes)"
    per_job = min(node.sm_rows, node.max_tokens) // node.group
    run = pv_run_keys(node, keys, block_keys)
    bus, word = node.data_bytes, node.weight_word_bytes
    if (per_job < 1 or keys % P or keys % K or keys % vl or keys % block_keys or not run
            or not block_run_ok(block_keys, 0, keys, d, bus, word)
            or not block_run_ok(block_keys, 0, run, d, bus, word, scales=False)):
        return (f"{keys} keys in blocks of {block_keys}: GEMM_QK takes whole tiles of {P} keys and runs "
                f"isa.block_run_ok passes, GEMM_PV a multiple of {K} keys, ATTN_SM a GQA group of {node.group} rows "
                f"in the unit's {node.sm_rows} state rows")
    R, rb = per_job * node.group, d // vl
    need = 2 * node.max_tokens * node.group * rb + 2 * R * keys // vl + 2 * R * rb
    if need > node.spad_beats:
        return f"the queries, outputs, score, w and o rows ({need} beats) do not fit {node.spad_beats} SPAD beats"
    return None


def attention_array_figures(report: dict, node: NodeConfig, attn: dict | None) -> dict:
    """The attn:prefill-array run (``run_attn_array_ops``'s report) -> cycles per instruction kind,
    the attention MACs per cycle and ``attention_efficiency`` (attn:prefill's definition), MAC-array
    strobes, and beside attn:prefill (same work) the speed-up when the attention block ran."""
    peak = node.mac_rows * node.mac_lanes
    d = node.head_dim
    out = {}
    for op in report["ops"]:
        kinds = op["per_kind"]
        cycles = sum(k["cycles"] for k in kinds.values())
        macs = 2 * d * op["heads"] * op["visible_keys"]
        fig = {
            "tokens": op["tokens"], "heads": op["heads"], "keys": op["keys"], "block_keys": op["block_keys"],
            "visible_keys": op["visible_keys"], "jobs": op["jobs"], "rows_per_job": op["rows_per_job"],
            "cycles": cycles,
            "instructions": {k: v["count"] for k, v in sorted(kinds.items())},
            "cycles_per_instruction": {k: round(v["cycles"] / v["count"], 1) for k, v in sorted(kinds.items())},
            "cycles_by_kind": {k: v["cycles"] for k, v in sorted(kinds.items())},
            "fraction_of_cycles_by_kind": {k: round(v["cycles"] / cycles, 4) for k, v in sorted(kinds.items())},
            "array_mac_beats": sum(v["mac_beats"] for v in kinds.values()),
            "array_issue_fraction": round(sum(v["mac_beats"] for v in kinds.values()) / cycles, 4),
            "ddr_read_bytes": sum(v["ddr_read_bytes"] for v in kinds.values()),
            "attention_macs_per_cycle": round(macs / cycles, 2),
            "attention_efficiency": round(macs / cycles / peak, 4),
            "sequence": "per job, over the run of KV blocks: ATTN_Q ROWS; one ATTN_SM MAX with defer; one GEMM_QK "
                        "(scores to SPAD, their row maxima into the unit's m); one ATTN_SM APPLY (w rows to SPAD, V scale words block by block); GEMM_PV "
                        "(one, sat32, when the keys fit its activation buffer; else runs of it, wide / acc); ATTN_Q "
                        "O (GEMM_PV's rows at their own stride); ATTN_EMIT FINAL; one instruction at a time (the "
                        "EX queue); bit-exact against fixed.attention",
            "shape": "attn:prefill's: the same keys, positions, jobs and random draws; the KV stored in blocks of "
                     "block_keys keys, segments with their own scale regions: the KV pool of the cluster model's MARS "
                     "plan (chunks of B = 2048 tokens, one segment of up to the preset's kv_block_keys = 2048 keys a "
                     "block; a run of fewer keys is one block; --array-block-keys); the MARS lowering today emits "
                     "chunks of at most max_tokens = 16 (blocks of 16 keys: --array-block-keys 16)",
        }
        if attn is not None and "attn:prefill" in attn and op["name"] == "attn:prefill-array":
            a = attn["attn:prefill"]
            fig["beside_attn_prefill"] = {"cycles": a["cycles"], "attention_efficiency": a["attention_efficiency"],
                                          "speedup": round(a["cycles"] / cycles, 2)}
        out[op["name"]] = fig
    if len(report["ops"]) > 1:
        out["attn:array-fit"] = array_fit(report["ops"], node)
    return out


def array_fit(ops: list[dict], node: NodeConfig) -> dict:
    """The least-squares line through the attn:prefill-array runs' cycles a job against their keys (every job
    of a run spans the whole run of KV blocks, so a run's jobs cost alike): cycles a job = job_cycles +
    key_cycles x keys, per instruction kind and in all; key_macs = the attention MACs a job does per key
    (2 x head_dim x its rows).  A MODEL from measured points: the cluster model charges attention with it."""
    import numpy as np
    rows = {op["rows_per_job"] for op in ops}
    if len(rows) != 1 or len({op["keys"] for op in ops}) < 2:
        raise ValueError(f"attn:array-fit needs runs of one job size at two key counts (got {ops!r:.200})")
    keys = np.array([op["keys"] for op in ops], float)
    kinds = sorted({k for op in ops for k in op["per_kind"]})

    def line(per_job):
        slope, icpt = np.polyfit(keys, np.asarray(per_job, float), 1)
        return round(float(icpt), 1), round(float(slope), 4)
    per_job = [sum(v["cycles"] for v in op["per_kind"].values()) / op["jobs"] for op in ops]
    job, key = line(per_job)
    by_kind = {}
    for k in kinds:
        j, c = line([op["per_kind"].get(k, {}).get("cycles", 0) / op["jobs"] for op in ops])
        by_kind[k] = {"job_cycles": j, "key_cycles": c}
    R = rows.pop()
    key_macs = 2 * node.head_dim * R
    peak = node.mac_rows * node.mac_lanes
    return {
        "keys": [int(k) for k in keys], "block_keys": [op.get("block_keys") for op in ops], "rows_per_job": R,
        "cycles_per_job": [round(c, 1) for c in per_job],
        "job_cycles": job, "key_cycles": key, "key_macs": key_macs,
        "residual_cycles": [round(c - (job + key * k), 1) for c, k in zip(per_job, keys)],
        "by_kind": by_kind,
        "efficiency_at_keys": {n: round(key_macs * n / (job + key * n) / peak, 4) for n in (256, 2048, 16384)},
        "efficiency_limit": round(key_macs / key / peak, 4),
        "is": "cycles of one job (ATTN_Q ROWS .. ATTN_EMIT over a run of KV blocks of keys keys, rows_per_job "
              "rows) = job_cycles + key_cycles x keys: least squares through the runs' measured cycles a job; "
              "efficiency = key_macs x keys / cycles / the array's peak MACs per cycle (a MODEL from the fit)",
    }


def run_engine(args) -> dict:
    from mcf.hw.compute.exec.unit import ExecUnit
    from mcf.sim.ddr_model import DdrTiming
    from mcf.sim.runner import run_cocotb
    from mcf.sw.models import load_model
    if args.block:
        if args.write_profile and not {"gemms", "attention", "prefill-array"} <= set(args.block):
            raise ValueError("--write-profile needs the gemms, attention and prefill-array blocks (drop --block)")
        args.attention, args.qk_array, args.softmax, args.pv_array, args.prefill_array = (
            b in args.block for b in ("attention", "qk-array", "softmax", "pv-array", "prefill-array"))
    gemms = not args.block or "gemms" in args.block
    for name in ("weight_ports", "prefill_rows", "decode_rows", "attn_keys", "qk_keys", "qk_tokens", "sm_keys",
                 "pv_keys", "pv_tokens"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    model = load_model(args.model)
    base = NodeConfig.tiny() if args.model == "tiny" else NodeConfig()
    keep = {k: v for k, v in base.as_dict().items() if k not in MODEL_SHAPES}
    wclk = keep["weight_clock_hz"] if args.weight_clock_hz is None else int(args.weight_clock_hz)
    if wclk and args.weight_ports < 2:
        raise ValueError("--weight-clock-hz: the weight loaders' own clock needs --weight-ports >= 2 (or give 0)")
    # with their own clock the weight loaders have their ports to themselves, the rest one more
    if args.array_keys < 0:
        raise ValueError("--array-keys must be >= 0")
    node = NodeConfig.for_model(model, **{**keep, **GEMM_ONLY, "weight_ports": args.weight_ports,
                                          "weight_clock_hz": wclk, "hp_ports": args.weight_ports + bool(wclk)})
    timing = DdrTiming.from_node(node)
    from mcf.sim.compute.exec_driver import ExecDriver
    axi_period_ps = round(ExecDriver.PERIOD_PS * node.clock_hz / node.weight_clock) if wclk else None
    group = min(128, model.hidden_size)
    ops = engine_ops(model, node, args.prefill_rows, args.decode_rows, group)
    block_keys = min(node.kv_block_keys, args.attn_keys)
    if (args.attention or args.prefill_array) and (args.attn_keys % block_keys or args.attn_keys > node.max_context
                           or args.attn_keys < node.max_tokens):
        raise ValueError(f"--attn-keys {args.attn_keys}: a multiple of {block_keys} from {node.max_tokens} to "
                         f"{node.max_context} (this build's segments and positions)")
    if args.qk_array:
        from mcf.spec.kv import segment_bytes as _seg_bytes
        rows = args.qk_tokens * node.group
        spad_need = rows * (node.head_dim + args.qk_keys) // node.vec_lanes
        if (args.qk_keys % node.mac_rows or rows > node.max_tokens or spad_need > node.spad_beats
                or args.qk_keys // node.mac_rows >= 1 << 16):
            raise ValueError(f"--qk-keys {args.qk_keys} / --qk-tokens {args.qk_tokens}: keys a multiple of "
                             f"{node.mac_rows}, tokens x {node.group} heads <= {node.max_tokens} rows, the rows and "
                             f"their scores within {node.spad_beats} SPAD beats")
    pv_skipped = None
    from mcf.spec.isa import gemm_pv_built
    if args.pv_array and not gemm_pv_built(node.mac_rows, node.mac_lanes, node.vec_lanes, node.head_dim):
        if args.block:
            raise ValueError("--block pv-array: this node builds no GEMM_PV (it needs mac_rows, mac_lanes >= "
                             "vec_lanes and mac_rows | head_dim | mac_rows x mac_lanes)")
        args.pv_array, pv_skipped = False, "not run (this node builds no GEMM_PV: mac_rows < vec_lanes or the like)"
    if args.pv_array:
        rows = args.pv_tokens * node.group
        max_n = max(node.hidden_size, node.intermediate_size, node.num_heads * node.head_dim)
        if (args.pv_keys % node.mac_lanes or 2 * args.pv_keys > max_n or rows > node.max_tokens
                or rows * (args.pv_keys + 2 * node.head_dim) // node.vec_lanes > node.spad_beats):
            raise ValueError(f"--pv-keys {args.pv_keys} / --pv-tokens {args.pv_tokens}: keys a multiple of "
                             f"{node.mac_lanes} up to {max_n // 2}, tokens x {node.group} heads <= {node.max_tokens} "
                             f"rows, the weight rows and the output within {node.spad_beats} SPAD beats")
    array_skipped = None
    # the KV pool's blocks as the cluster model's MARS plan keeps them (its chunks of B = 2048 tokens,
    # sim/benchmarks/paper.py CHUNK_T1, whose TTFT attn:array-fit charges): one segment of the preset node's
    # kv_block_keys (2048 at the KR260 node) a block; a run of fewer keys is one block (``array_run_block_keys``)
    if args.array_block_keys < 0:
        raise ValueError("--array-block-keys must be >= 0")
    array_block_keys = args.array_block_keys or base.kv_block_keys
    if args.prefill_array and not 0 <= args.array_tokens_per_job <= min(node.sm_rows, node.max_tokens) // node.group:
        raise ValueError(f"--array-tokens-per-job {args.array_tokens_per_job}: 0 .. "
                         f"{min(node.sm_rows, node.max_tokens) // node.group} (the unit's sm_rows={node.sm_rows})")
    if args.prefill_array:
        why = prefill_array_refusal(node, args.attn_keys, array_run_block_keys(array_block_keys, args.attn_keys))
        if why and args.block:
            raise ValueError(f"--block prefill-array: {why}")
        if why:
            args.prefill_array, array_skipped = False, f"not run ({why})"
    longer = args.prefill_array and args.array_keys > 0
    if longer:
        why = prefill_array_refusal(node, args.array_keys, array_run_block_keys(array_block_keys, args.array_keys))
        if why or args.array_keys <= args.attn_keys:
            raise ValueError(f"--array-keys {args.array_keys}: more than --attn-keys {args.attn_keys}"
                             + (f"; {why}" if why else ""))
        # positions (and the counters they size) up to the longer run's keys
        node = dataclasses.replace(node, max_context=max(node.max_context, args.array_keys))
    from mcf.spec.kv import segment_bytes as _seg_bytes
    ram = max((1 << 20) + 2 * (args.attn_keys // block_keys) * (_seg_bytes(block_keys, node.head_dim) + 64),max(op["tiles"] * node.mac_rows * op["n"] for op in ops) * 2 + (1 << 20),
              (1 << 20) + (_seg_bytes(args.qk_keys, node.head_dim) if args.qk_array else 0),
              (1 << 20) + (_seg_bytes(args.pv_keys, node.head_dim) if args.pv_array else 0),
              (1 << 20) + (2 * (args.array_keys // array_run_block_keys(array_block_keys, args.array_keys))
                           * (_seg_bytes(array_run_block_keys(array_block_keys, args.array_keys), node.head_dim) + 64)
                           if longer else 0))
    ram_bytes = 1 << (ram - 1).bit_length()
    from mcf.sim.rtlcluster.backend import _cache_dir
    softmax = args.softmax and node.group <= node.sm_rows
    # the attention block (the unit's path: ATTN_KV over a job of att_rows // group tokens) needs the GQA group
    # within att_rows (1 on the KR260 node since round 24, whose programs run attention on the array): it runs
    # on a build of its own, the node with att_rows = the group (as ``mcf bench attention-path``'s unit path);
    # every other block runs on the node's own build
    unit_node = node.replace(att_rows=max(node.att_rows, node.group)) if args.attention else None
    unit_own_build = unit_node is not None and unit_node != node
    if softmax and (args.sm_keys < node.vec_lanes or args.sm_keys % node.vec_lanes
                    or node.group * (2 * args.sm_keys + node.head_dim) // node.vec_lanes > node.spad_beats):
        raise ValueError(f"--sm-keys {args.sm_keys}: a positive multiple of {node.vec_lanes} whose {node.group} score "
                         f"and w rows fit {node.spad_beats} SPAD beats")
    blocks = ((["GEMMs"] if gemms else []) + (["attention"] if args.attention else [])
              + (["qk-array"] if args.qk_array else []) + (["softmax"] if softmax else [])
              + (["pv-array"] if args.pv_array else []) + (["prefill-array"] if args.prefill_array else []))
    if not blocks:
        raise ValueError("no block to run (--block, --no-attention, --no-qk-array, --no-softmax, --no-pv-array, "
                         "--no-prefill-array)")
    _progress(f"{model.name}: elaborating the execute unit ({node.mac_rows}x{node.mac_lanes} array) and building it "
              f"with {args.sim} (minutes; a cached build is reused), then running {', '.join(blocks)}")
    with tempfile.TemporaryDirectory(prefix="mcf-bench-engine-") as tmp:
        report, attn_report = Path(tmp) / "engine.json", Path(tmp) / "attention.json"
        qk_report, sm_report, pv_report = Path(tmp) / "qk.json", Path(tmp) / "sm.json", Path(tmp) / "pv.json"
        array_report = Path(tmp) / "attn_array.json"
        params = {"ops": ops, "axi_period_ps": axi_period_ps, "timing": {
                       "latency": timing.latency, "outstanding": timing.outstanding,
                       "port_bytes_per_cycle": timing.port_bytes_per_cycle,
                       "total_bytes_per_cycle": timing.total_bytes_per_cycle,
                       "refresh_interval": timing.refresh_interval, "refresh_cycles": timing.refresh_cycles},
                       "attn": {"keys": args.attn_keys, "block_keys": block_keys, "tokens": node.max_tokens,
                                "array_block_keys": array_block_keys, "tokens_per_job": args.array_tokens_per_job,
                                "longer": [args.array_keys] if longer else []},
                       "qk": {"keys": args.qk_keys, "tokens": args.qk_tokens}, "qk_report": str(qk_report),
                       "sm": {"keys": args.sm_keys, "tokens": 1}, "sm_report": str(sm_report),
                       "pv": {"keys": args.pv_keys, "tokens": args.pv_tokens}, "pv_report": str(pv_report),
                       "attn_array_report": str(array_report),
                       "ram_bytes": ram_bytes, "report": str(report), "attn_report": str(attn_report), "seed": 1}
        cases = (([ENGINE_BENCH[1]] if gemms else []) + ([ATTN_BENCH[1]] if args.attention and not unit_own_build else [])
                 + ([QK_BENCH[1]] if args.qk_array else []) + ([SM_BENCH[1]] if softmax else [])
                 + ([PV_BENCH[1]] if args.pv_array else []) + ([ATTN_ARRAY_BENCH[1]] if args.prefill_array else []))
        if cases:
            run_cocotb(ExecUnit(node), [ENGINE_BENCH[0]] + ([QK_BENCH[0]] if args.qk_array else [])
                       + ([SM_BENCH[0]] if softmax else []) + ([PV_BENCH[0]] if args.pv_array else [])
                       + ([ATTN_ARRAY_BENCH[0]] if args.prefill_array else []), Path(tmp) / "build",
                       testcase=cases, sim=args.sim, cache_dir=_cache_dir() if args.sim == "verilator" else None,
                       params={"node": node.as_dict(), **params})
        if unit_own_build:
            _progress(f"the attention block on its own build: the node with att_rows = {unit_node.att_rows} "
                      f"(the GQA group; the node's att_rows = {node.att_rows})")
            run_cocotb(ExecUnit(unit_node), [ENGINE_BENCH[0]], Path(tmp) / "build-unit", testcase=[ATTN_BENCH[1]],
                       sim=args.sim, cache_dir=_cache_dir() if args.sim == "verilator" else None,
                       params={"node": unit_node.as_dict(), **params})
        _progress("simulation done")
        raw = json.loads(report.read_text()) if gemms else None
        attn = attention_figures(json.loads(attn_report.read_text()), unit_node) if args.attention else None
        qk = qk_figures(json.loads(qk_report.read_text()), node, attn) if args.qk_array else None
        sm = sm_figures(json.loads(sm_report.read_text())) if softmax else None
        pv = pv_figures(json.loads(pv_report.read_text()), node) if args.pv_array else None
        arr = (attention_array_figures(json.loads(array_report.read_text()), node, attn)
               if args.prefill_array else None)
    head = {
        "model": model.name, "simulator": args.sim,
        "array": f"{node.mac_rows}x{node.mac_lanes}", "peak_macs_per_cycle": node.mac_rows * node.mac_lanes,
        "max_tokens": node.max_tokens, "weight_ports": node.weight_ports, "data_width": node.data_width,
        "clock_hz": node.clock_hz, "weight_clock_hz": node.weight_clock_hz,
        "elaborated_with": {**GEMM_ONLY, "max_context": node.max_context, "spad_beats": node.spad_beats,
                            "buffer_bytes": node.buffer_bytes},
        "att_rows": node.att_rows,
        **({"node_changes": {"unit_att_rows": unit_node.att_rows}} if unit_own_build else {}),
    }
    if not gemms:      # --block without gemms: only the blocks asked for
        return {**head, "blocks": blocks,
                **({"attention": attn} if attn is not None else {}),
                **({"attention_scores_on_array": qk} if qk is not None else {}),
                **({"softmax_pass_on_spad": sm} if sm is not None else {}),
                **({"attention_pv_on_array": pv} if pv is not None else {}),
                **({"attention_on_array": arr} if arr is not None else {})}
    fig = engine_figures(raw, node, timing)
    un = unit_node or node
    out = {
        **head,
        "ddr_model": {**timing.as_dict(), "weight_ports_bandwidth": timing.bandwidth(
                          node.weight_ports, node.data_bytes, node.weight_clock / node.clock_hz),
                      "max_outstanding_seen": raw["ddr_model"]["max_outstanding"]},
        "prefill": fig["prefill"], "decode": fig["decode"], "ops": fig["ops"],
        "attention": attn if attn is not None else "not run (--no-attention)",
        "attention_scores_on_array": qk if qk is not None else "not run (--no-qk-array)",
        "softmax_pass_on_spad": sm if sm is not None else "not run (--no-softmax, or the GQA group's rows / the "
                                                           "score and w rows do not fit the unit / SPAD)",
        "attention_pv_on_array": pv if pv is not None else pv_skipped or "not run (--no-pv-array)",
        "attention_on_array": arr if arr is not None else array_skipped or "not run (--no-prefill-array)",
        # the unit the attention block ran on (att_rows = the group when the node's own has fewer: node_changes)
        "attention_unit": {"head_dim": un.head_dim, "att_rows": un.att_rows, "gqa_group": un.group,
                           "lanes": unit_lanes(un.head_dim, un.att_lanes),
                           "score_array_products": un.att_rows * 2 * unit_lanes(un.head_dim, un.att_lanes),
                           "pv_array_products": un.att_rows * unit_lanes(un.head_dim, un.att_lanes),
                           "score_array_is": "INT4 K (a key pair) x int16 Q mantissas, two per DSP48E2, "
                                             "used by the MAX and the APPLY pass",
                           "pv_array_is": "int32 p A_v (sat, two 16-bit digits) x INT4 V, two elements per "
                                          "DSP48E2 and digit, used by the APPLY pass"},
        "calibration": {
            "compute_efficiency": fig["prefill"]["layer_mac_utilization_model"],
            "compute_efficiency_is": "prefill GEMMs of one layer: MACs / (measured slice cycles extrapolated to "
                                     "the full matrices) / peak; vector, attention, KV writer not included",
            "ddr_efficiency": fig["decode"]["ddr_fraction_of_peak"],
            "ddr_efficiency_is": "decode GEMMs of one layer: DDR bytes read per cycle / the DDR's peak bytes per "
                                 f"cycle ({timing.total_bytes_per_cycle:.1f}), {node.weight_ports} HP ports"
                                 + (f" at {node.weight_clock / 1e6:g} MHz" if node.weight_clock_hz else ""),
        },
    }
    if attn is not None:
        out["calibration"].update({
            "attention_efficiency": attn["attn:prefill"]["attention_efficiency"],
            "attention_efficiency_is": "attention of one GQA group over a prefill chunk (attn:prefill): 2 x head_dim "
                                       "MACs per visible (query row, key) pair / cycles of ATTN_Q, both ATTN_KV passes "
                                       "and ATTN_EMIT / the MAC array's peak MACs per cycle"})
    if arr is not None:
        out["calibration"].update({
            **({"attention_array_job_cycles": arr["attn:array-fit"]["job_cycles"],
                "attention_array_job_cycles_is": "the array sequence's cycles as a line in its keys (attn:array-fit: "
                                                 "attn:prefill-array at " + " and ".join(
                                                     str(k) for k in arr["attn:array-fit"]["keys"]) + " keys, "
                                                 "jobs of " + str(arr["attn:array-fit"]["rows_per_job"]) + " rows, "
                                                 "the KV in blocks of " + " and ".join(
                                                     str(k) for k in arr["attn:array-fit"]["block_keys"]) + " keys): "
                                                 "cycles of one job = attention_array_job_cycles + "
                                                 "attention_array_key_cycles x keys; a job does "
                                                 "attention_array_key_macs MACs per key (2 x head_dim x its rows)",
                "attention_array_key_cycles": arr["attn:array-fit"]["key_cycles"],
                "attention_array_key_macs": arr["attn:array-fit"]["key_macs"]}
               if "attn:array-fit" in arr else {}),
            "attention_array_efficiency": arr["attn:prefill-array"]["attention_efficiency"],
            "attention_array_efficiency_is": "attn:prefill's work as the array sequence (attn:prefill-array): 2 x "
                                             "head_dim MACs per visible (query row, key) pair / cycles of ATTN_Q, "
                                             "GEMM_QK, ATTN_SM MAX and APPLY, GEMM_PV, ATTN_Q O, ATTN_EMIT, one "
                                             "instruction at a time / the MAC array's peak MACs per cycle"})
    if args.write_profile:
        cmd = (f"mcf bench compute --model {args.model} --weight-ports {args.weight_ports} --prefill-rows "
               f"{args.prefill_rows} --decode-rows {args.decode_rows}"
               + (f" --array-keys {args.array_keys}" if args.array_keys != 2048 else "") + " --write-profile")
        write_profile(Path(args.write_profile), out["calibration"], cmd, model.name, out["array"])
        out["profile_written"] = str(args.write_profile)
    return out


def write_profile(path: Path, cal: dict, command: str, model: str, array: str,
                  date: str | None = None) -> None:
    """Replace ``compute_efficiency``, ``ddr_efficiency`` and (when ``cal`` has them: the bench ran
    the attention / prefill-array block) ``attention_efficiency`` / ``attention_array_efficiency`` and the
    array fit ``attention_array_job_cycles`` / ``_key_cycles`` / ``_key_macs`` (and the comment lines right
    above each) in the profile YAML at ``path``, keeping every other line (a fit field the profile lacks
    goes in after ``attention_array_efficiency``); written atomically."""
    if not path.is_file():
        raise ValueError(f"--write-profile: {path} is not a file")
    date = date or datetime.date.today().isoformat()
    lines = path.read_text().splitlines()
    notes = {
        "compute_efficiency": [
            f"# MEASURED {date} by `{command}`:",
            f"# {model} on the {array} array, RTL (Verilator) against the DDR model (sim/ddr_model.py):",
            f"# {cal['compute_efficiency_is']}."],
        "ddr_efficiency": [
            f"# MEASURED {date} by `{command}`:",
            f"# {cal['ddr_efficiency_is']} (the model refreshes the DRAM, no page/bank timing)."],
    }
    for key in ("attention_efficiency", "attention_array_efficiency", "attention_array_job_cycles"):
        if key in cal:
            notes[key] = [f"# MEASURED {date} by `{command}`:", f"# {cal[key + '_is']}."]
    if "attention_array_job_cycles" in cal:
        notes["attention_array_key_cycles"] = notes["attention_array_key_macs"] = []
    after = "attention_array_efficiency"
    for key, comment in notes.items():
        at = [i for i, line in enumerate(lines) if re.match(rf"^{key}\s*:", line)]
        if not at and key.startswith("attention_array_") and key != after:
            prev = [i for i, line in enumerate(lines) if re.match(rf"^{after}\s*:", line)]
            if len(prev) == 1:
                lines.insert(prev[0] + 1, f"{key}: {cal[key]}")
                at = [prev[0] + 1]
        after = key if key.startswith("attention_array_") else after
        if len(at) != 1:
            raise ValueError(f"--write-profile: {path} has {len(at)} lines '{key}:' (expected one)")
        i = at[0]
        start = i
        while start > 0 and lines[start - 1].startswith("#") and not lines[start - 1].startswith("# ---"):
            start -= 1
        tail = "  # attn:array-fit (above)" if key in ("attention_array_key_cycles", "attention_array_key_macs") else ""
        lines[start:i + 1] = comment + [f"{key}: {cal[key]}{tail}"]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)
