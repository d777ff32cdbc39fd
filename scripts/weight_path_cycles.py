"""Per-instruction cycles of the GEMM mover's instructions on small execute units against the DDR
model (deterministic: no random pauses): GEMMs (inputs x tiles x tokens), GEMM_QK and GEMM_PV
through the benches of tests/hw/compute/exec (``run_gemm_ops``, ``run_qk_ops``, ``run_pv_ops``,
each checks its results bit for bit against the golden model).  Writes {node: {op: cycles}} as
JSON to argv[1] (the nodes of argv[2:], default all).  Run it on two trees (PYTHONPATH) to compare their cycles."""
import json
import os
import sys
import tempfile
from pathlib import Path

from mcf.hw.compute.exec.unit import ExecUnit
from mcf.sim.ddr_model import DdrTiming
from mcf.sim.runner import run_cocotb
from mcf.spec.node import NodeConfig

NODES = {"P16": NodeConfig.tiny(mac_rows=16, vec_lanes=4), "P8": NodeConfig.tiny(mac_rows=8, vec_lanes=4),
         "P4": NodeConfig.tiny()}
out = {}
for name in sys.argv[2:] or NODES:
    node = NODES[name]
    tiles = (1, 4) if node.mac_rows % node.vec_lanes == 0 else (2, 8)     # whole SPAD beats of output
    ops = [{"name": f"gemm:n{n}:t{t}:x{tok}", "n": n, "tiles": t, "tokens": tok, "group": 32}
           for n in (64, 128) for t in tiles for tok in (1, 2, 4, 8)]
    if os.environ.get("WPC_OPS"):            # "n:tiles:tokens,...": only these GEMMs
        ops = [{"name": f"gemm:n{n}:t{t}:x{x}", "n": int(n), "tiles": int(t), "tokens": int(x), "group": 32}
               for n, t, x in (o.split(":") for o in os.environ["WPC_OPS"].split(","))]
    t = DdrTiming.from_node(node)
    timing = {"latency": t.latency, "outstanding": t.outstanding, "port_bytes_per_cycle": t.port_bytes_per_cycle,
              "total_bytes_per_cycle": t.total_bytes_per_cycle, "refresh_interval": t.refresh_interval,
              "refresh_cycles": t.refresh_cycles}
    pv = node.mac_rows >= node.vec_lanes and node.mac_lanes >= node.vec_lanes
    with tempfile.TemporaryDirectory(prefix="wpc-") as tmp:
        rep = {k: str(Path(tmp) / f"{k}.json") for k in ("report", "qk_report", "pv_report")}
        mods = ["tests.hw.compute.exec.test_unit", "tests.hw.compute.exec.test_scores"] + (
            ["tests.hw.compute.exec.test_pv"] if pv else [])
        cases = ["run_gemm_ops", "run_qk_ops"] + (["run_pv_ops"] if pv else [])
        run_cocotb(ExecUnit(node), mods, Path(tmp) / "build", testcase=cases,
                   params={"node": node.as_dict(), "ops": ops, "timing": timing, "ram_bytes": 1 << 22, "seed": 1,
                           "qk": {"keys": 4 * node.mac_rows, "tokens": 2}, "pv": {"keys": 64, "tokens": 2}, **rep})
        res = {}
        for k in ("report", "qk_report", "pv_report"):
            if Path(rep[k]).exists():
                for op in json.loads(Path(rep[k]).read_text())["ops"]:
                    res[op["name"]] = op["cycles"]
        out[name] = res
        print(name, res, flush=True)
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
