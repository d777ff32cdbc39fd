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
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from mcf.spec.node import NodeConfig

#: The matrix unit's steady-state bench (module, coroutine), beside the unit's tests.
UTILIZATION_BENCH = ("tests.hw.compute.test_matrix", "run_utilization")
#: The execute unit's decoder-layer bench (module, coroutine).
LAYER_BENCH = ("tests.hw.compute.exec.test_unit", "run_layer")

NAME = "compute"
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


def run(args) -> dict:
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
        # what the cluster model's profile (sw/mars/profiles/kr260.yaml) should take
        "calibration": {"mac_rows": rows, "mac_lanes": lanes, "compute_efficiency": round(util, 4)},
        **({"exec_layer": run_layer()} if args.layer else {}),
    }
