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
  takes ``nic_cycles_per_packet``; its reduction engine needs, after the last contribution, its
  beats (MAX, SUM: folded as they arrive) or every contribution's words (SOFTMAX_MERGE).

Every number comes from the node's ``NodeConfig`` and the hardware profile
(``mcf.sw.mars.profile``), whose calibration fields the RTL benchmarks overwrite; none is typed
here.  ``ISA_COSTS`` names what the model charges per opcode (docs/node.md).  DDR bytes per cycle
are the profile's sustained rate but at most what the node's AXI4 masters carry (``hp_ports`` x
one bus word per cycle of the port's clock: ``NodeConfig.port_clock_hz``).

**Calibration** (``mcf bench isa-costs --write``): the execute unit's instructions of each kind
(the ``BUSY_*`` performance counter they count into) cost ``a x (the cycles above) + b`` with
``(a, b)`` fitted by least squares (both >= 0) on an RTL cluster run's measured busy cycles per
node and step against the model's on the same programs (``fit``).  The command writes them to
``sw/mars/profiles/<profile>-isa-costs.json`` (measured: the run it fitted on is recorded there);
``model_backend`` uses that file when it exists, the uncalibrated costs otherwise.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from mcf.spec.isa import AttnLoad, AttnPass, Opcode, VecOp
from mcf.spec.node import NodeConfig
from mcf.spec.packet import ReduceOp
from mcf.sw.golden.node import ClusterSim, UnitCosts
from mcf.sw.golden.node.nodesim import BUSY_COUNTER as BUSY_OF
from mcf.sw.mars.profile import PROFILE_DIR, HardwareProfile, load_profile
from mcf.sw.runtime.backend import SimBackend

from ..compute.cost import (MATRIX_LATENCY, attn_emit_cycles, attn_kv_cycles, attn_o_cycles, attn_query_cycles,
                            attn_rows_cycles, dir_cycles, kv_writer_cycles, sm_apply_beats, softmax_pass_cycles,
                            vector_cycles)

#: Ethernet bytes per frame besides the MCF packet: preamble 8, MAC header 14, FCS 4, gap 12.
ETH_OVERHEAD = 38

ISA_COSTS = {
    "GEMM": "ceil(out / mac_rows) x ceil(n / mac_lanes) x tokens + matrix latency, or its DDR bytes over the weight loaders if slower",
    "GEMM_QK": "GEMM's cost per tile with out = tiles x mac_rows keys, n = head_dim, tokens = tokens x heads (rows x "
               "head_dim x keys MACs), DDR bytes = the keys' scale words and rows over the weight loaders; a run of "
               "blocks (block_keys < the keys) adds no cost beyond those reads",
    "GEMM_PV": "2 x rows (the first key beat's hi and lo digits) + channel tiles x 2 x keys / mac_lanes x rows (a "
               "weight beat per tile and key beat, held for both digits of every row) + matrix latency + the last "
               "key beat's drain max(rows x b, tiles x rows x b - (2 tiles - 1) x rows), b = cycles an output "
               "beat takes: P / VL SPAD beats (/ banks when dst is bank-aligned; x 2 wide), acc: at least "
               "2 P / VL / banks + 1 (its previous wide value); or the V rows' bytes over the weight loaders if slower "
               "(a run of blocks: the same, no cost beyond the reads)",
    "VEC": "rows x the vector unit's cycles for n elements on vec_lanes",
    "ATTN_KV": "keys x the attention unit's cycles a key (MAX c / 2, APPLY c, at least 1; c = head_dim / att_lanes) "
               "+ 2 (MAX) or + 4 (APPLY) per pass (sim/compute/cost.py attn_kv_cycles), or its K (and V) bytes over "
               "the execute unit's one AXI4 master if slower",
    "ATTN_SM": "MAX with defer: SOFTMAX_START['DEFER'] (its maxima taken as the next GEMM_QK writes); MAX: ceil(keys / (banks x vec_lanes)) x R + SOFTMAX_START (banks = mac_lanes / vec_lanes SPAD beats "
               "of a row a cycle into the unit's row maxima); APPLY: per group of k <= G = AB x vec_lanes keys max(R, k, "
               "ceil((R + k + 2) / 2)) + SOFTMAX_START (R reads of AB score beats in and R wide writes of AB w beats out per group, "
               "two transpose buffers; AB = sm_apply_beats, 2 on the KR260 node; R x AB writes when w or w_stride is not a "
               "multiple of AB) (sim/compute/cost.py softmax_pass_cycles, checked against the execute unit's RTL), or its V "
               "scale bytes if slower (APPLY over a run of blocks: the same)",
    "ATTN_Q / ATTN_EMIT": "QUERY: rows x head_dim / W; ROWS: tokens + start; O and EMIT FINAL: rows x head_dim / W + "
                          "start (W = gcd(vec_lanes, kv lanes) words a cycle); MREF, STATE and EMIT STATE / MAX: a "
                          "word a cycle (sim/compute/cost.py attn_query_cycles, attn_rows_cycles, attn_o_cycles, "
                          "attn_emit_cycles)",
    "KVW": "rows x the KV writer's cycles per row, or its DDR bytes",
    "EMBED": "tokens x n / vec_lanes, or its DDR bytes",
    "DIR": "count + the decode (write) or + the decode and the lookup latency (check): an entry a cycle "
           "(sim/compute/cost.py dir_cycles)",
    "LOAD / STORE": "bytes / bus bytes, or their DDR time",
    "SEND": "bytes / bus bytes (into the packetizer)",
    "others": "1",
}


#: The performance counters the execute unit's instruction kinds count their busy cycles into.
BUSY_KINDS = sorted({k.name for k in BUSY_OF.values()})


def calibration_path(profile: str) -> Path:
    """Where ``mcf bench isa-costs --write`` keeps the calibration of ``profile``."""
    return PROFILE_DIR / f"{profile}-isa-costs.json"


def load_calibration(profile: str) -> dict | None:
    """``{busy counter name: (a, b)}`` of ``profile`` (None: not calibrated)."""
    path = calibration_path(profile)
    if not path.is_file():
        return None
    coef = json.loads(path.read_text())["coefficients"]
    return {k: (float(a), float(b)) for k, (a, b) in coef.items()}


def fit(rows: list) -> tuple[float, float]:
    """``(a, b)``, both >= 0, minimizing sum (a x model + b x count - measured)^2 over ``rows``
    of (model cycles, instruction count, measured cycles)."""
    r = np.asarray(rows, dtype=float).reshape(-1, 3)
    x, c, y = r[:, 0], r[:, 1], r[:, 2]
    if not len(r) or not (x.any() or c.any()):
        return 1.0, 0.0
    (a, b), *_ = np.linalg.lstsq(np.stack([x, c], 1), y, rcond=None)
    if b < 0 or not np.isfinite(b):
        a, b = (x @ y) / (x @ x), 0.0
    if a < 0 or not np.isfinite(a):
        a, b = 0.0, max(0.0, (c @ y) / (c @ c)) if c.any() else 0.0
    return float(a), float(b)


def pv_cycles(cfg: NodeConfig, ins, w: dict) -> int:
    """GEMM_PV's execute-unit cycles from the RTL's schedule (hw/compute/exec/movers.py GemmMover):
    the first key beat's digits (each K-word read is two buffer writes) before the array starts;
    then one weight beat x row per cycle, every weight beat twice (hi and lo digit) per channel
    tile; the matrix pipeline; and the drain of the last key beat's outputs, which the array emits
    on its lo passes (a row a cycle) and the mover writes at ``per_beat`` cycles each: P words in P / VL
    SPAD beats, ``spad_banks`` at a time when dst and dst_stride are bank-aligned, twice for the wide
    value; with acc each needs its previous wide value first, 2 P / VL SPAD beats (``spad_banks``
    a read) + 1."""
    P, vl, R, tiles = cfg.mac_rows, cfg.vec_lanes, w["tokens"], ins.tiles
    banks = max(cfg.mac_lanes // vl, 1)
    aligned = banks > 1 and (P // vl) % banks == 0 and ins.dst % banks == 0 and ins.dst_stride % banks == 0
    per_beat = max(1, P // vl // (banks if aligned else 1)) * (2 if ins.wide else 1)
    if ins.acc:       # the low and the high P words, min(banks, P / VL) SPAD beats a read, then the queue
        per_beat = max(per_beat, 2 * (P // vl) // min(banks, P // vl) + 1)
    drain = max(R * per_beat, tiles * R * per_beat - (2 * tiles - 1) * R)
    return 2 * R + w["mac_beats"] + MATRIX_LATENCY + drain


class TimingCosts(UnitCosts):
    def __init__(self, node: NodeConfig, profile: HardwareProfile, calibration: dict | None = None):
        self.node, self.profile = node, profile
        self.calibration = dict(calibration or {})
        clock = node.clock_hz
        # DDR bytes per cycle: the profile's sustained rate, but no more than the AXI4 masters an
        # instruction streams through carry (one bus word per cycle of its port's clock each,
        # NodeConfig.port_clock_hz): a GEMM's weights come over the weight loaders
        # (NodeConfig.weight_ports, docs/node.md), everything else of the execute unit (K / V, the
        # KV writer, LOAD / STORE, EMBED) over its one m_axi
        def carry(ports):
            return sum(node.port_clock_hz(p) for p in ports) / clock * node.data_bytes
        masters = node.ddr_masters()
        self.ddr_per_cycle = min(profile.ddr_Bps / clock, carry(range(node.hp_ports)))
        self.exec_per_cycle = min(self.ddr_per_cycle, carry([masters["exec"]]))
        weights = [masters[f"weight{k}"] for k in range(node.weight_ports)] if node.weight_ports > 1 else [masters["exec"]]
        self.gemm_per_cycle = min(self.ddr_per_cycle, carry(weights))
        self.setup = int(profile.dma_setup_cycles)
        self.wire_per_cycle = profile.link_bandwidth_bps / 8 / clock
        self.latency = max(1, round(profile.link_latency_s * clock))
        self.nic = max(1, int(profile.nic_cycles_per_packet))

    def _ddr(self, w: dict, per_cycle: float) -> int:
        b = w.get("ddr_rd", 0) + w.get("ddr_wr", 0)
        return math.ceil(b / per_cycle) + self.setup if b else 0

    def instr(self, cfg: NodeConfig, ex) -> int:
        cycles = self.structural(cfg, ex)
        kind = BUSY_OF.get(ex.instr.OPCODE)
        if kind is None or kind.name not in self.calibration:
            return cycles
        a, b = self.calibration[kind.name]
        return max(1, round(a * cycles + b))

    def structural(self, cfg: NodeConfig, ex) -> int:
        """The instruction's cycles from the units' costs and DDR bytes (uncalibrated)."""
        ins, w, op = ex.instr, ex.work, ex.instr.OPCODE
        vl, d = cfg.vec_lanes, cfg.head_dim
        if op in (Opcode.GEMM, Opcode.GEMM_QK):
            # GEMM_QK: the node's work is out = keys, n = head_dim, tokens = query rows, ddr_rd =
            # the keys' scale words and rows (NodeSim._x_gemm_qk; a run of blocks costs nothing more)
            unit = math.ceil(w["out"] / cfg.mac_rows) * math.ceil(w["n"] / cfg.mac_lanes) * w["tokens"] + MATRIX_LATENCY
        elif op == Opcode.GEMM_PV:
            unit = pv_cycles(cfg, ins, w)
        elif op == Opcode.VEC:
            unit = w["rows"] * vector_cycles(VecOp(w["vop"]).name, w["n"], vl)
        elif op == Opcode.ATTN_KV:
            unit = attn_kv_cycles(w["keys"], d, cfg.att_lanes, ins.phase == AttnPass.APPLY)
        elif op == Opcode.ATTN_SM:
            banks = max(cfg.mac_lanes // vl, 1)
            ab = sm_apply_beats(cfg.sm_rows, vl, banks)
            unit = softmax_pass_cycles(w["keys"], w["rows"], vl, ins.phase == AttnPass.APPLY, banks, ab,
                                       ins.w % ab == 0 and ins.w_stride % ab == 0, bool(ins.defer))
        elif op == Opcode.ATTN_Q:
            # the AttnMover (docs/compute.md): QUERY and O W words (a SPAD beat at W = VL) a cycle, MREF and
            # STATE a word a cycle
            what = AttnLoad(ins.what)
            if what == AttnLoad.O:
                unit = attn_o_cycles(w["rows"], d, vl)
            elif what == AttnLoad.QUERY:
                unit = attn_query_cycles(w["rows"], d, vl)
            elif what == AttnLoad.ROWS:
                unit = attn_rows_cycles(ins.tokens)
            else:
                unit = w["rows"] * ((d + 2) if what == AttnLoad.STATE else 1)
        elif op == Opcode.ATTN_EMIT:
            unit = attn_emit_cycles(ins.mode, w["rows"], d, vl)
        elif op == Opcode.KVW:
            unit = w["rows"] * kv_writer_cycles(d, cfg.kv_lanes)
        elif op == Opcode.EMBED:
            unit = w["tokens"] * math.ceil(w["n"] / vl)
        elif op == Opcode.DIR:
            unit = dir_cycles(ins.count, bool(ins.check))
        elif op in (Opcode.LOAD, Opcode.STORE, Opcode.SEND):
            unit = math.ceil((w.get("ddr_rd", 0) + w.get("ddr_wr", 0)) / cfg.data_bytes)
        else:
            return 1
        if op == Opcode.SEND:
            return max(1, unit)
        gemm = op in (Opcode.GEMM, Opcode.GEMM_QK, Opcode.GEMM_PV)
        return max(1, unit, self._ddr(w, self.gemm_per_cycle if gemm else self.exec_per_cycle))

    def link(self, nbytes: int) -> tuple[int, int]:
        ser = math.ceil((nbytes + ETH_OVERHEAD) / self.wire_per_cycle)
        return ser, max(1, self.latency // 2)

    def nic_cycles(self) -> int:
        return self.nic

    def reduce_cycles(self, nbytes: int, parts: int, op: int = ReduceOp.SOFTMAX_MERGE) -> int:
        """The NIC's reduction engine (hw/nic/reduce.py): MAX and SUM fold each contribution
        into the slot a beat per cycle as it arrives, so after the last one only its beats
        remain; SOFTMAX_MERGE folds the stored contributions a 32-bit word per cycle once the
        last is in."""
        if op in (ReduceOp.MAX, ReduceOp.SUM):
            return math.ceil(nbytes / self.node.data_bytes) + self.nic
        return parts * math.ceil(nbytes / 4) + self.nic


def model_backend(nodes: int, node: NodeConfig, ddr_bytes: int, topology: str = "switch",
                  profile: str | HardwareProfile = "kr260", calibration: dict | None | str = "auto") -> SimBackend:
    """``nodes`` ISA-simulated nodes under the timing model (a backend of ``mcf.sw.runtime``);
    ``calibration`` "auto": the profile's calibration file if there is one, None: uncalibrated."""
    prof = profile if isinstance(profile, HardwareProfile) else load_profile(profile)
    if calibration == "auto":
        calibration = load_calibration(prof.name)
    costs = TimingCosts(node, prof, calibration)
    return SimBackend(ClusterSim(node, nodes, topology, costs=costs, ddr_bytes=ddr_bytes), name="model")


def calibration_rows(measured, modelled, programs: list) -> dict:
    """Per busy counter, rows (model cycles, instruction count, measured cycles), one per node
    and step, from two reports of the same session's programs (``programs[step][node]``): the
    measured (RTL) one and the uncalibrated model's."""
    rows = {k: [] for k in BUSY_KINDS}
    for got, want, progs in zip(measured.steps, modelled.steps, programs):
        for n, prog in enumerate(progs):
            count = dict.fromkeys(BUSY_KINDS, 0)
            for ins in prog:
                if ins.OPCODE in BUSY_OF:
                    count[BUSY_OF[ins.OPCODE].name] += 1
            for k in BUSY_KINDS:
                rows[k].append((want.counters[n][k], count[k], got.counters[n][k]))
    return rows


def gap(model: float, measured: float) -> float:
    """The model's relative deviation from the measurement."""
    return model / measured - 1.0
