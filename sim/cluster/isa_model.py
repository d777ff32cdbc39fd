"""The model backend of ``mcf run --backend model``: the nodes' programs executed by the ISA
simulator (``mcf.sw.golden.node``, bit-exact) under a timing model, so the run gives the golden
model's tokens *and* modelled cycles, link bytes and the KV each node holds over time.

Timing model (a model, not a measurement: ``--backend rtl`` measures):

* an EX instruction occupies the execute unit for ``max(unit cycles, DDR cycles) + set-up``:
  unit cycles from the RTL units' cycle costs (``mcf.sim.compute.cost``: the matrix unit holds
  every weight beat for the tokens of a pass, the vector unit, the attention unit's passes over
  the keys, the KV writer), DDR cycles = bytes / (sustained DDR bytes per cycle of the profile),
  set-up = the profile's ``dma_setup_cycles`` when it touches DDR;
* a SEND occupies TX for its bytes at one bus word per cycle (into the packetizer);
* a link carries a packet's payload + Meta header + Ethernet framing (``ETH_OVERHEAD``) at the
  profile's line rate (``link_bandwidth_bps``) and delivers it ``link_latency_s`` later (one hop
  NIC -> switch -> NIC on the ``switch`` topology: up-link and down-link each take half); the NIC
  takes ``nic_cycles_per_packet``.

Every number comes from the node's ``NodeConfig`` and the hardware profile
(``mcf.sw.mars.profile``), whose calibration fields the RTL benchmarks overwrite; none is typed
here.  ``ISA_COSTS`` names what the model charges per opcode (docs/node.md).
"""
from __future__ import annotations

import math

from mcf.spec.isa import AttnPass, EmitMode, Opcode, VecOp
from mcf.spec.node import NodeConfig
from mcf.sw.golden.node import ClusterSim, UnitCosts
from mcf.sw.mars.profile import HardwareProfile, load_profile
from mcf.sw.runtime.backend import SimBackend

from ..compute.cost import MATRIX_LATENCY, kv_writer_cycles, vector_cycles

#: Ethernet bytes per frame besides the MCF packet: preamble 8, MAC header 14, FCS 4, gap 12.
ETH_OVERHEAD = 38

ISA_COSTS = {
    "GEMM": "ceil(out / mac_rows) x ceil(n / mac_lanes) x tokens + matrix latency, or its DDR bytes if slower",
    "VEC": "rows x the vector unit's cycles for n elements on vec_lanes",
    "ATTN_KV": "keys + 2 (MAX) or + 4 (APPLY) per pass, or its DDR bytes if slower",
    "ATTN_Q / ATTN_EMIT": "rows x head_dim / vec_lanes (+ rows for FINAL)",
    "KVW": "rows x the KV writer's cycles per row, or its DDR bytes",
    "EMBED": "tokens x n / vec_lanes, or its DDR bytes",
    "LOAD / STORE": "bytes / bus bytes, or their DDR time",
    "SEND": "bytes / bus bytes (into the packetizer)",
    "others": "1",
}


class TimingCosts(UnitCosts):
    def __init__(self, node: NodeConfig, profile: HardwareProfile):
        self.node, self.profile = node, profile
        clock = node.clock_hz
        self.ddr_per_cycle = profile.ddr_Bps / clock
        self.setup = int(profile.dma_setup_cycles)
        self.wire_per_cycle = profile.link_bandwidth_bps / 8 / clock
        self.latency = max(1, round(profile.link_latency_s * clock))
        self.nic = max(1, int(profile.nic_cycles_per_packet))

    def _ddr(self, w: dict) -> int:
        b = w.get("ddr_rd", 0) + w.get("ddr_wr", 0)
        return math.ceil(b / self.ddr_per_cycle) + self.setup if b else 0

    def instr(self, cfg: NodeConfig, ex) -> int:
        ins, w, op = ex.instr, ex.work, ex.instr.OPCODE
        vl, d = cfg.vec_lanes, cfg.head_dim
        if op == Opcode.GEMM:
            unit = math.ceil(w["out"] / cfg.mac_rows) * math.ceil(w["n"] / cfg.mac_lanes) * w["tokens"] + MATRIX_LATENCY
        elif op == Opcode.VEC:
            unit = w["rows"] * vector_cycles(VecOp(w["vop"]).name, w["n"], vl)
        elif op == Opcode.ATTN_KV:
            unit = w["keys"] + (2 if ins.phase == AttnPass.MAX else 4)
        elif op == Opcode.ATTN_Q:
            unit = w["rows"] * max(1, d // vl)
        elif op == Opcode.ATTN_EMIT:
            words = {EmitMode.FINAL: w["rows"] * d, EmitMode.STATE: w["rows"] * (d + 2), EmitMode.MAX: w["rows"]}
            unit = math.ceil(words[ins.mode] / vl) + (w["rows"] if ins.mode == EmitMode.FINAL else 0)
        elif op == Opcode.KVW:
            unit = w["rows"] * kv_writer_cycles(d, cfg.kv_lanes)
        elif op == Opcode.EMBED:
            unit = w["tokens"] * math.ceil(w["n"] / vl)
        elif op in (Opcode.LOAD, Opcode.STORE, Opcode.SEND):
            unit = math.ceil((w.get("ddr_rd", 0) + w.get("ddr_wr", 0)) / cfg.data_bytes)
        else:
            return 1
        if op == Opcode.SEND:
            return max(1, unit)
        return max(1, unit, self._ddr(w))

    def link(self, nbytes: int) -> tuple[int, int]:
        ser = math.ceil((nbytes + ETH_OVERHEAD) / self.wire_per_cycle)
        return ser, max(1, self.latency // 2)

    def nic_cycles(self) -> int:
        return self.nic

    def reduce_cycles(self, nbytes: int, parts: int) -> int:
        return parts * math.ceil(nbytes / 4) + self.nic


def model_backend(nodes: int, node: NodeConfig, ddr_bytes: int, topology: str = "switch",
                  profile: str | HardwareProfile = "kr260") -> SimBackend:
    """``nodes`` ISA-simulated nodes under the timing model (a backend of ``mcf.sw.runtime``)."""
    prof = profile if isinstance(profile, HardwareProfile) else load_profile(profile)
    costs = TimingCosts(node, prof)
    return SimBackend(ClusterSim(node, nodes, topology, costs=costs, ddr_bytes=ddr_bytes), name="model")
