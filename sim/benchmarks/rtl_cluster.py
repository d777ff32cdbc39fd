"""``mcf bench rtl-cluster``: the cost of simulating the N-node RTL cluster under Verilator --
wall-clock microseconds per simulated node-clock cycle for N = 1, 2, 4 while every node streams
blocks to the next one through the switch (the ring stream of tests/sim/rtlcluster/test_top.py,
which also checks every delivered byte).  Wall-clock figures of this machine, named so: they
decide how long the end-to-end RTL runs in ``make test`` may be.  Builds are cached
(``$MCF_SIM_CACHE`` or ``~/.cache/mcf/verilator``).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

#: The bench (module, coroutine): the scenario and its checks are written once, with the test.
RING_BENCH = ("tests.sim.rtlcluster.test_top", "run_ring_stream")

NAME = "rtl-cluster"
HELP = "wall-clock us per simulated cycle of the N-node RTL cluster under Verilator (N = 1, 2, 4)"


def add_arguments(p) -> None:
    p.add_argument("--nodes", default="1,2,4", help="cluster sizes, comma-separated (default: %(default)s)")
    p.add_argument("--blocks", type=int, default=16, help="blocks each node streams (default: %(default)s)")
    p.add_argument("--block-bytes", type=int, default=512, help="bytes per block (default: %(default)s)")


def run(args) -> dict:
    from mcf.sim.rtlcluster.backend import _cache_dir
    from mcf.sim.rtlcluster.top import ClusterTop
    from mcf.sim.runner import run_cocotb
    from mcf.spec.node import NodeConfig
    from mcf.sw.errors import UserError

    try:
        sizes = [int(x) for x in args.nodes.split(",")]
    except ValueError:
        raise UserError(f"--nodes {args.nodes!r}: comma-separated integers") from None
    if not sizes or any(not 1 <= n <= 16 for n in sizes):
        raise UserError(f"--nodes {args.nodes!r}: sizes in 1..16")
    if not 1 <= args.blocks <= 64 or not 16 <= args.block_bytes <= 512 or args.block_bytes % 16:
        raise UserError("--blocks in 1..64, --block-bytes a multiple of 16 in 16..512")
    config = NodeConfig.tiny(route_entries=64)
    out = {"config": "tiny", "blocks": args.blocks, "block_bytes": args.block_bytes, "runs": []}
    with tempfile.TemporaryDirectory(prefix="mcf-bench-rtl-cluster-") as tmp:
        for n in sizes:
            report = Path(tmp) / f"n{n}.json"
            res = run_cocotb(ClusterTop(n, config), RING_BENCH[0], Path(tmp) / f"n{n}", testcase=RING_BENCH[1],
                             sim="verilator", cache_dir=_cache_dir(),
                             params={"nodes": n, "config": config.as_dict(), "blocks": args.blocks,
                                     "block_bytes": args.block_bytes, "report": str(report)})
            fig = json.loads(report.read_text())
            out["runs"].append({"nodes": n, "cycles": fig["cycles"], "wall_s": round(fig["wall_s"], 3),
                                "us_per_cycle": round(fig["us_per_cycle"], 2),
                                "us_per_node_cycle": round(fig["us_per_cycle"] / n, 2),
                                "payload_bytes": fig["bytes"], "built": res["built"]})
    return out
