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
    from mcf.sw.cliutil import MAX_NODES, MAX_SEQ, integer
    p.add_argument("--seq", type=integer(1, MAX_SEQ), default=131072, help="prompt length (default 131072)")
    p.add_argument("--nodes", type=integer(1, MAX_NODES), default=256, help="node count (default 256)")
    p.add_argument("--repeat", type=integer(1, 100), default=3, help="timed processes (default 3)")


def run(args) -> dict:
    cmd = [sys.executable, "-m", "mcf", "plan", "--seq", str(args.seq), "--nodes", str(args.nodes), "--json"]
    walls = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True)
        walls.append(time.perf_counter() - t)
        if out.returncode:
            from mcf.sw.errors import UserError
            lines = out.stderr.decode(errors="replace").strip().splitlines() or ["(no message)"]
            raise UserError(f"the timed `mcf plan` exited {out.returncode}: {lines[-1]}")
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
