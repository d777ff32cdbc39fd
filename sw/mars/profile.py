"""Hardware profile of one MCF node and the cluster's network: the numbers every model needs.

Presets live in ``profiles/<name>.yaml`` beside this file (the source of each number is written
next to it).  The planner, the SimPy cluster model and the RTL benchmarks all read the same
``HardwareProfile``; calibration constants (per-operation costs) live here and nowhere else.
What the node is built with (clock, MAC array, tokens per weight pass, network ports) comes
from ``mcf.spec.node.NodeConfig`` (``NODE_FIELDS``), not from the YAML.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import yaml

from mcf.spec.node import NodeConfig
from mcf.spec.regmap import DESC_WORDS, META_WORDS
from mcf.spec.topology import TOPOLOGIES
from mcf.sw.errors import UserError

PROFILE_DIR = Path(__file__).parent / "profiles"
#: Attention paths of the cluster model (``HardwareProfile.attention_path``).
ATTENTION_PATHS = ("unit", "array")
#: Profile fields that are the node's build parameters: profile field -> NodeConfig field.
NODE_FIELDS = {"pl_clock_hz": "clock_hz", "mac_rows": "mac_rows", "mac_lanes": "mac_lanes",
               "max_tokens": "max_tokens", "net_ports": "net_ports"}


@dataclass(frozen=True)
class HardwareProfile:
    """One node + the network.  Units: Hz, bytes, bytes/s (``_Bps``), bits/s (``_bps``), s."""
    name: str
    pl_clock_hz: float
    mac_rows: int           # MAC array rows x lanes: rows x lanes MACs per cycle
    mac_lanes: int
    max_tokens: int         # query rows the engine takes per weight pass (a prefill tile)
    ops_per_mac: int
    compute_efficiency: float
    attention_efficiency: float   # attention (QK^T + PV) MACs per cycle / the array's peak, measured
    ddr_bandwidth_Bps: float
    ddr_efficiency: float
    ddr_capacity_bytes: int
    ddr_read_latency_s: float   # an HP port's read: AR accepted -> first R beat (sim/ddr_model.py)
    hp_read_outstanding: int    # read bursts one HP port accepts before ARREADY falls
    kv_budget_bytes: int
    kv_buffer_bytes: int
    net_ports: int
    link_bandwidth_bps: float
    link_efficiency: float
    link_latency_s: float
    topology: str
    axi_lite_write_s: float
    nic_cycles_per_packet: int
    dma_setup_cycles: int
    gamma: float = 1.0
    # DDR4 refresh (sim/ddr_model.py): every ddr_refresh_interval_s (tREFI) the DRAM is busy for
    # ddr_refresh_s (tRFC) and moves no data; 0: no refresh modelled
    ddr_refresh_interval_s: float = 0.0
    ddr_refresh_s: float = 0.0
    # attention on the MAC array (docs/attention-array.md): the attn:prefill work run as the array
    # sequence (GEMM_QK, ATTN_SM, GEMM_PV over runs of KV blocks), measured like attention_efficiency; 0: not measured
    attention_array_efficiency: float = 0.0
    # the array sequence's cycles as a line in its keys (mcf bench compute, attn:array-fit: attn:prefill-array at
    # two key counts): one job (ATTN_Q ROWS .. ATTN_EMIT over a run of KV blocks) costs
    # attention_array_job_cycles + attention_array_key_cycles x keys and does attention_array_key_macs
    # attention MACs per key; all 0: not measured (the array path then charges attention_array_efficiency)
    attention_array_job_cycles: float = 0.0
    attention_array_key_cycles: float = 0.0
    attention_array_key_macs: int = 0
    # which path attention takes in the cluster model: "unit" (the attention unit, ATTN_KV) or
    # "array" (GEMM_QK / ATTN_SM / GEMM_PV): a profile names what the lowering's attention=auto
    # chooses on its node (kr260: array)
    attention_path: str = "unit"

    def __post_init__(self):
        positive = ("pl_clock_hz", "mac_rows", "mac_lanes", "max_tokens", "ops_per_mac", "ddr_bandwidth_Bps",
                    "ddr_capacity_bytes", "ddr_read_latency_s", "hp_read_outstanding", "kv_budget_bytes", "kv_buffer_bytes", "net_ports",
                    "link_bandwidth_bps", "gamma")
        for f in positive:
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise UserError(f"profile {self.name}: {f}={v!r} must be a positive number")
        if not 0 <= self.ddr_refresh_s < max(self.ddr_refresh_interval_s, 1e-300) or self.ddr_refresh_interval_s < 0:
            raise UserError(f"profile {self.name}: ddr_refresh_s={self.ddr_refresh_s!r} must be >= 0 and shorter "
                            f"than ddr_refresh_interval_s={self.ddr_refresh_interval_s!r}")
        for f in ("link_latency_s", "axi_lite_write_s", "nic_cycles_per_packet", "dma_setup_cycles"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise UserError(f"profile {self.name}: {f}={v!r} must be a number >= 0")
        for f in ("compute_efficiency", "attention_efficiency", "ddr_efficiency", "link_efficiency"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or not 0 < v <= 1:
                raise UserError(f"profile {self.name}: {f}={v!r} must be in (0, 1]")
        v = self.attention_array_efficiency
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
            raise UserError(f"profile {self.name}: attention_array_efficiency={v!r} must be in [0, 1]")
        fit = (self.attention_array_job_cycles, self.attention_array_key_cycles, self.attention_array_key_macs)
        if any(isinstance(x, bool) or not isinstance(x, (int, float)) or not x >= 0 for x in fit) or (
                any(fit) and not (fit[1] > 0 and fit[2] > 0)):
            raise UserError(f"profile {self.name}: attention_array_job_cycles / _key_cycles / _key_macs = "
                            f"{fit!r}: all 0 (not measured), or job_cycles >= 0 and key_cycles, key_macs > 0")
        if self.attention_path not in ATTENTION_PATHS:
            raise UserError(f"profile {self.name}: attention_path={self.attention_path!r}: one of "
                            f"{', '.join(ATTENTION_PATHS)}")
        if self.attention_path == "array" and not v > 0:
            raise UserError(f"profile {self.name}: attention_path=array needs a measured attention_array_efficiency "
                            "(mcf bench compute --model qwen2.5-1.5b --write-profile)")
        if self.topology not in TOPOLOGIES:
            raise UserError(f"profile {self.name}: unknown topology {self.topology!r}; "
                            f"one of {', '.join(TOPOLOGIES)}")
        if self.net_ports > 16:
            raise UserError(f"profile {self.name}: net_ports={self.net_ports} exceeds the 16 "
                            "ports a route entry's port_mask can name")

    # --- derived figures (one definition each) ---------------------------------------------------
    @property
    def peak_ops_per_s(self) -> float:
        """Peak engine throughput: MACs/cycle x ops/MAC x clock."""
        return self.mac_rows * self.mac_lanes * self.ops_per_mac * self.pl_clock_hz

    @property
    def p_node(self) -> float:
        """P_node of eq. 6: sustained ops/s of one node's engine."""
        return self.peak_ops_per_s * self.compute_efficiency

    @property
    def attention_path_efficiency(self) -> float:
        """The measured attention rate of ``attention_path``, in units of the array's peak:
        ``attention_efficiency`` (the unit) or ``attention_array_efficiency`` (the array)."""
        return self.attention_array_efficiency if self.attention_path == "array" else self.attention_efficiency

    @property
    def attention_array_fit(self) -> bool:
        """The cluster model charges the array path by the measured line in its keys (attn:array-fit)."""
        return self.attention_path == "array" and self.attention_array_key_cycles > 0

    def attention_seconds(self, attn_flops, keys=None):
        """Seconds of one node's attention of ``attn_flops`` (eq. 6's 4 L H_q d per query-key pair) whose
        jobs each run over ``keys`` keys (a scalar or a NumPy array; None: the path's one ratio).  On the
        array path with its fit: jobs = attn_flops / ops_per_mac / (attention_array_key_macs x keys), each
        attention_array_job_cycles + attention_array_key_cycles x keys; else attn_flops / ``p_attn``."""
        if keys is None or not self.attention_array_fit:
            return attn_flops / self.p_attn
        import numpy as np
        jobs = attn_flops / self.ops_per_mac / self.attention_array_key_macs / np.maximum(keys, 1)
        return jobs * (self.attention_array_job_cycles + self.attention_array_key_cycles * np.asarray(keys)) \
            / self.pl_clock_hz

    def attention_efficiency_at(self, keys) -> float:
        """The attention path's measured rate, in units of the array's peak, for jobs over ``keys`` keys
        (the fit's; ``attention_path_efficiency`` without one)."""
        if not self.attention_array_fit:
            return self.attention_path_efficiency
        return self.attention_array_key_macs * keys / (
            self.attention_array_job_cycles + self.attention_array_key_cycles * keys) / (self.mac_rows * self.mac_lanes)

    @property
    def p_attn(self) -> float:
        """Sustained ops/s of one node's attention (QK^T and PV, eq. 6's 4 L H_q d per query-key
        pair): the measured rate of ``attention_path`` (the attention unit, or the array
        sequence), in units of the array's peak."""
        return self.peak_ops_per_s * self.attention_path_efficiency

    @property
    def ddr_Bps(self) -> float:
        """Sustained DDR bandwidth in bytes/s."""
        return self.ddr_bandwidth_Bps * self.ddr_efficiency

    @property
    def bw_eff(self) -> float:
        """BW_eff of eq. 7: sustained payload bytes/s of one network port, one direction."""
        return self.link_bandwidth_bps / 8 * self.link_efficiency

    @property
    def meta_push_s(self) -> float:
        """PS time to push one Meta descriptor (its words + the push strobe) over AXI-Lite."""
        return (META_WORDS + 1) * self.axi_lite_write_s

    @property
    def desc_push_s(self) -> float:
        """PS time to push one DMA descriptor."""
        return (DESC_WORDS + 1) * self.axi_lite_write_s

    def with_(self, **changes) -> "HardwareProfile":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, name: str | None = None, node: NodeConfig = NodeConfig()) -> "HardwareProfile":
        """The profile of a YAML mapping; ``NODE_FIELDS`` it leaves out come from ``node``."""
        if not isinstance(d, dict):
            raise UserError(f"profile {name}: expected a mapping of fields")
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise UserError(f"profile {name}: unknown field(s) {', '.join(sorted(unknown))}")
        d = dict(d)
        if name is not None:
            d.setdefault("name", name)
        for field, node_field in NODE_FIELDS.items():
            d.setdefault(field, getattr(node, node_field))
        missing = {f.name for f in fields(cls) if f.default is f.default_factory} - set(d)
        missing = {m for m in missing if m not in ("gamma",)}
        if missing:
            raise UserError(f"profile {d.get('name')}: missing field(s) {', '.join(sorted(missing))}")
        # PyYAML reads "200.0e6" (no exponent sign) as a string: coerce by the declared type.
        for f in fields(cls):
            v = d.get(f.name)
            if f.type == "float" and isinstance(v, (str, int)) and not isinstance(v, bool):
                try:
                    d[f.name] = float(v)
                except ValueError:
                    raise UserError(f"profile {d.get('name')}: {f.name}={v!r} is not a number") from None
        return cls(**d)


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(spec: str | Path = "kr260") -> HardwareProfile:
    """A preset name (``kr260``) or a path to a YAML file."""
    p = Path(spec)
    if p.suffix in (".yaml", ".yml"):
        if not p.is_file():
            raise UserError(f"profile file {p} does not exist")
        return HardwareProfile.from_dict(yaml.safe_load(p.read_text()), name=p.stem)
    preset = PROFILE_DIR / f"{spec}.yaml"
    if not preset.is_file():
        raise UserError(f"unknown hardware profile {str(spec)!r}; presets: "
                        f"{', '.join(profile_names())} (or give a .yaml file)")
    return HardwareProfile.from_dict(yaml.safe_load(preset.read_text()), name=str(spec))
