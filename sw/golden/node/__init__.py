"""The ISA-level simulator of MCF nodes (``mcf.spec.isa``): the reference of programs.

``NodeSim`` executes one node's instructions with the golden fixed-point functions;
``ClusterSim`` runs N of them with a network model (the NIC's routing and reductions from
``mcf.sw.golden.nic``) and reports exactly why a run did not finish (fault, deadlock);
``NodeRegisters`` exposes a node's registers (``mcf.spec.regmap``) so the PS driver drives the
simulator as it drives the RTL or a board.
"""
from .cluster import ClusterSim, JitterCosts, RunResult, UnitCosts
from .ddr import SimDdr
from .nodesim import Exec, Fault, NodeSim, SimError
from .regs import NodeRegisters, RegisterError

__all__ = ["ClusterSim", "Exec", "Fault", "JitterCosts", "NodeRegisters", "NodeSim", "RegisterError", "RunResult",
           "SimDdr", "SimError", "UnitCosts"]
