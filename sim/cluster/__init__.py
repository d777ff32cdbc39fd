"""Cluster performance model (``mcf.sim.cluster``): MARS plans executed on simulated KR260 nodes.

``run(model, seq, nodes, scheme)`` asks the MARS planner (``mcf.sw.mars.planner.plan``) for a
plan, executes its prefill on SimPy nodes (``prefill.PrefillSim``) and a decode step on the
layout the plan leaves (``decode.simulate_decode``).  Hardware numbers come from the MARS
hardware profile; per-operation costs from ``costs``.  See docs/cluster-model.md.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from mcf.spec.plan import SCHEMES, Scheme
from mcf.sw.errors import UserError
from . import bounds, costs
from .decode import VARIANTS as DECODE_VARIANTS, simulate_decode
from .prefill import PrefillResult, PrefillSim



def load_inputs(model, profile="kr260", link_gbps: float | None = None):
    from mcf.sw.mars.profile import HardwareProfile, load_profile
    from mcf.sw.models import load_model
    m = load_model(model) if isinstance(model, str) else model
    p = profile if isinstance(profile, HardwareProfile) else load_profile(profile)
    if link_gbps is not None:
        if not link_gbps > 0:
            raise UserError(f"link_gbps={link_gbps}: must be > 0")
        p = p.with_(link_bandwidth_bps=float(link_gbps) * 1e9)
    return m, p


def make_plan(model, seq: int, nodes: int, scheme: str = "mars", profile="kr260", *,
              chunk: int | None = None, budget: int | None = None, topology: str | None = None,
              link_gbps: float | None = None, alpha: float | None = None):
    from mcf.sw.mars.planner import PlanRequest, plan
    m, p = load_inputs(model, profile, link_gbps)
    if scheme not in SCHEMES:
        raise UserError(f"scheme={scheme!r}: one of {', '.join(SCHEMES)}")
    return plan(PlanRequest(model=m, seq_len=seq, nodes=nodes, profile=p, scheme=scheme,
                            chunk_size=chunk, budget_bytes=budget, topology=topology, alpha=alpha))


@dataclass
class SimRun:
    plan: object
    prefill: PrefillResult
    decode: object
    wall_s: float
    chunk_kv: str
    lookahead: int
    source: str = "plan"

    def to_json(self) -> dict:
        p, r = self.plan, self.prefill
        req = p.request
        b = bounds.prefill_bounds(req.model, req.profile, req.seq_len, p.nodes, p.num_chunks)
        out = {
            "model": req.model.name,
            "profile": req.profile.name,
            "scheme": p.scheme,
            "seq_len": req.seq_len,
            "nodes": p.nodes,
            "topology": p.topology.kind,
            "link_gbps": req.profile.link_bandwidth_bps / 1e9,
            "chunk_size": p.chunk_size,
            "num_chunks": p.num_chunks,
            "lookahead": self.lookahead,
            "chunk_kv": self.chunk_kv,
            "executed": self.source,
            "ttft_s": r.ttft_s,
            "ttft_plan_model_s": p.ttft_s,
            "comm_bytes": int(round(r.comm_bytes)),
            "comm_bytes_by_kind": {k: int(v) for k, v in sorted(r.comm_by_kind.items())},
            "comm_plan_bytes": int(p.comm_bytes),
            "link_wire_bytes_hop_weighted": int(round(r.link_wire_bytes)),
            "peak_memory_per_node_bytes": int(r.peak_total.max()),
            "peak_kv_pool_per_node_bytes": int(r.memory_per_step.max()),
            "peak_staging_per_node_bytes": int(r.staging_peak.max()),
            "final_memory_per_node_bytes": [int(x) for x in r.memory_per_step[-1]],
            "replica_factor_per_step": [int(x) for x in p.r_step],
            "engine_utilization_mean": float(r.engine_util.mean()),
            "max_link_utilization": r.max_link_util,
            "messages": r.messages,
            "bounds_s": {k: v for k, v in b.items() if k.endswith("_s")},
            "ttft_over_lower_bound": r.ttft_s / b["lower_bound_s"],
            "sim_wall_s": self.wall_s,
        }
        if self.decode is not None:
            d = self.decode
            out.update({"decode_variant": d.variant, "decode_tokens_per_s": d.tokens_per_s,
                        "decode_token_s": d.token_s,
                        "decode_bound_tokens_per_s": d.bound_tokens_per_s,
                        "decode_root_ddr_bytes_per_token": int(d.root_ddr_bytes_per_token),
                        "decode_ddr_roofline_fraction": d.ddr_roofline_fraction,
                        "decode_comm_bytes_per_token": int(d.comm_bytes_per_token),
                        "decode_plan_model_tokens_per_s": 1.0 / p.decode_token_s})
        else:
            out["decode_tokens_per_s"] = None
        return out


def decode_layout_tokens(plan) -> np.ndarray:
    """KV tokens per node in the layout the plan leaves for decode."""
    return np.asarray(plan.memory[-1], dtype=float) / plan.request.model.kv_token_bytes


def run(model, seq: int, nodes: int, scheme: str = "mars", profile="kr260", *,
        chunk: int | None = None, budget: int | None = None, topology: str | None = None,
        link_gbps: float | None = None, alpha: float | None = None,
        packet_payload: int = costs.DEFAULT_PACKET_PAYLOAD, lookahead: int | None = None,
        chunk_kv: str = "plan", decode: str | None = "kv-stationary", plan=None,
        programs: bool = False, ring_forward: str = "store") -> SimRun:
    """Plan (unless ``plan`` is given) and simulate.  ``programs=True`` executes the lowered
    per-node programs (``mcf.sw.mars.metaprog.lower``: the Meta descriptors each node pushes)
    instead of walking the plan's steps; the compute of each step comes from the plan either way."""
    t0 = time.perf_counter()
    if plan is None:
        plan = make_plan(model, seq, nodes, scheme, profile, chunk=chunk, budget=budget,
                         topology=topology, link_gbps=link_gbps, alpha=alpha)
    progs = None
    if programs:
        from mcf.sw.mars.metaprog import lower
        progs = lower(plan)
    sim = PrefillSim(plan, packet_payload=packet_payload, lookahead=lookahead, chunk_kv=chunk_kv,
                     programs=progs, ring_forward=ring_forward)
    res = sim.run()
    dec = None
    if decode:
        variant = "pass-q" if plan.scheme == Scheme.PASSQ and decode == "kv-stationary" else decode
        req = plan.request
        dec = simulate_decode(req.model, req.profile, plan.topology, decode_layout_tokens(plan),
                              variant=variant, packet_payload=packet_payload)
    return SimRun(plan, res, dec, time.perf_counter() - t0, chunk_kv, sim.lookahead,
                  "programs" if programs else "plan")


def simulate(*args, **kw) -> dict:
    """``run(...).to_json()``: the figures ``mcf simulate --json`` prints."""
    return run(*args, **kw).to_json()


__all__ = ["run", "simulate", "make_plan", "load_inputs", "SimRun", "SCHEMES", "DECODE_VARIANTS",
           "PrefillSim", "simulate_decode", "bounds", "costs"]
