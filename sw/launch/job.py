"""One run of N nodes: the request every rank agrees on, the plan and programs every rank
derives from it, the backend that runs a node's program, and rank 0's check of the results.

    job = Job.from_request(request)            # on every rank: plan + lower (a pure function)
    result = run_rank(world, request, backend)  # bcast, barrier, run, gather; rank 0 checks

A backend is a plug-in: ``backend.run(node, job, world) -> dict`` runs node ``node``'s program
(``job.programs[node]``) and returns a JSON-able result; ``backend.check(job, results)`` (rank
0) compares every node's result with the plan.  ``model`` (``model.py``) exists today; the RTL
and board backends arrive with the program executor of issue 13.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from mcf.sw.errors import UserError

from .world import World


@dataclass
class Job:
    request: dict
    plan: object
    programs: list = field(default_factory=list)

    @property
    def nodes(self) -> int:
        return self.plan.nodes

    @property
    def decode_tokens(self) -> int:
        return int(self.request.get("decode", 0))

    @staticmethod
    def from_request(request: dict) -> "Job":
        from mcf.sw.mars.metaprog import lower
        from mcf.sw.mars.planner import PlanRequest, plan
        from mcf.sw.mars.profile import load_profile
        from mcf.sw.models import load_model
        r = request
        cfg = load_model(r["model"])
        budget = r.get("budget_tokens")
        p = plan(PlanRequest(model=cfg, seq_len=int(r["seq"]), nodes=int(r["nodes"]),
                             profile=load_profile(r.get("profile", "kr260")), scheme=r["scheme"],
                             chunk_size=r.get("chunk"), topology=r.get("topology"),
                             budget_bytes=None if budget is None else int(budget * cfg.kv_token_bytes)))
        return Job(dict(request), p, lower(p))

    def digest(self) -> str:
        """A fingerprint of every node's program (route tables, every Meta and descriptor, the
        STORE sources): equal on every rank that lowered the same plan."""
        from mcf.spec import Meta
        h = hashlib.sha256()
        for prog in self.programs:
            h.update(f"node{prog.node};".encode())
            for rid, word in sorted(prog.route_words().items()):
                h.update(f"r{rid}:{word};".encode())
            for stage, step, op in prog.ops:
                word = op.to_int() if isinstance(op, Meta) else op.pack()
                h.update(f"{int(stage)}/{step}/{type(op).__name__}/{word:x};".encode())
            h.update(repr(sorted((k, (a, int(b), c)) for k, (a, b, c) in prog.sources.items())).encode())
        return h.hexdigest()

    def delivers_to(self, route_id: int, src: int) -> list[int]:
        """The nodes a packet that ``src`` sends on ``route_id`` is delivered to (the route
        tables' local bits along its path; a node's own copy of a reduction excluded)."""
        return [x for x in range(self.nodes)
                if x != src and self.programs[x].routes.get(route_id, {}).get("local")]


def run_rank(world: World, request: dict | None, backend) -> dict | None:
    """Everything one rank does; returns rank 0's report (None on the other ranks)."""
    request = world.bcast(request, root=0)
    if int(request["nodes"]) != world.size:
        raise UserError(f"the run has {world.size} ranks but the request names {request['nodes']} nodes")
    job = Job.from_request(request)
    digest = job.digest()
    world.barrier()                                     # every rank planned: start together
    result = backend.run(world.rank, job, world)
    result["program_digest"] = digest
    world.finish()
    results = world.gather(result, root=0)
    if world.rank != 0:
        return None
    digests = {r["program_digest"] for r in results}
    if len(digests) != 1:
        raise UserError("the ranks lowered different programs from the same request "
                        "(mixed mcf versions on the boards?)")
    report = backend.check(job, results)
    report.update({"world": world.kind, "backend": backend.name, "nodes": world.size,
                   "request": request})
    return report
