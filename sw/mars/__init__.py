"""MARS: memory-aware replication and scheduling (MCF paper, section 4, eqs. 1-29).

    from mcf.sw.mars import PlanRequest, plan, lower, load_profile
    p = plan(PlanRequest(load_model("qwen2.5-1.5b"), seq_len=16384, nodes=8, profile=load_profile()))

``plan`` is pure: the same request gives the same ``Plan`` on every node.  The plan holds numpy
arrays indexed by prefill step t = 0..C-1 (one chunk per step): ``chunk_tokens``, ``owner``,
``r_step`` (replica factor of the history during step t, r_step[C] = 1), ``memory`` ([C+1, N]
bytes, the last row the decode-ready layout) and the modelled times ``t_comp``, ``t_comm``,
``t_ps``, ``t_sync`` (``ttft_s`` sums them, eq. 23-24).

An executor (the SimPy cluster model, the RTL co-simulation, the boards) walks it like this::

    for t in range(p.num_chunks):
        v = p.step_view(t)      # compute work per node, block t's owner and replicas,
                                # history fetches in send order, directory events of the step
    lw = lower(p, node_config, group, consts, bases)   # the per-node ISA programs, DDR map, routes

``ReplicaDirectory`` / ``replay`` apply the plan's VALID -> DRAINING -> INVALID events.
"""
from mcf.spec.plan import SCHEMES, EventKind, EventPhase, ReplicaState, Scheme
from .directory import ReplicaDirectory, replay
from .lower import Lowered, LoweringError, lower
from .planner import Event, Plan, PlanRequest, plan
from .profile import HardwareProfile, load_profile

__all__ = ["Event", "EventKind", "EventPhase", "HardwareProfile", "Lowered", "LoweringError", "Plan", "PlanRequest",
           "ReplicaDirectory", "ReplicaState", "SCHEMES", "Scheme", "load_profile", "lower", "plan", "replay"]
