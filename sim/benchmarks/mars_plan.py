"""``mcf bench mars-plan``: wall time of ``mcf plan ... --json`` as a whole process (the issue's
speed bound: 131072 tokens on 256 nodes in under 2 s) and the planner's own CPU time."""
from __future__ import annotations

import os
import subprocess
import sys
import time

NAME = "mars-plan"
HELP = "time the MARS planner (whole `mcf plan --json` process and in-process CPU time)"


def add_arguments(p) -> None:
    p.add_argument("--seq", type=int, default=131072)
    p.add_argument("--nodes", type=int, default=256)
    p.add_argument("--repeat", type=int, default=3)


def run(args) -> dict:
    cmd = [sys.executable, "-m", "mcf", "plan", "--seq", str(args.seq), "--nodes", str(args.nodes), "--json"]
    walls = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, check=True)
        walls.append(time.perf_counter() - t)
    from mcf.sw.mars.planner import PlanRequest, plan
    from mcf.sw.mars.profile import load_profile
    from mcf.sw.models.config import load_model
    c = time.process_time()
    p = plan(PlanRequest(load_model("qwen2.5-1.5b"), args.seq, args.nodes, load_profile()))
    cpu = time.process_time() - c
    return {"seq": args.seq, "nodes": args.nodes, "process_wall_s_min": round(min(walls), 3),
            "process_wall_s_max": round(max(walls), 3), "plan_cpu_s": round(cpu, 3),
            "json_bytes": len(out.stdout), "chunk_size": p.chunk_size,
            "load_average_1min": round(os.getloadavg()[0], 2)}
