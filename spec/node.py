"""The configuration of one MCF node: every size the hardware is elaborated with, in one place.

``Node`` (``mcf.hw.node``), the other tops (``ControlAndDma``, ``NicNode``), the block
registry's variants, the cluster model's hardware profile (``mcf.sw.mars.profile``) and the
benches derive their parameters from a ``NodeConfig``; nothing else writes a default.

    cfg = NodeConfig()                            # the KR260 node, Qwen2.5-1.5B shapes
    cfg = NodeConfig.tiny()                       # the tiny model's node, small buffers (tests)
    cfg = NodeConfig.for_model(model_config)      # the shapes of any Qwen2-family model
    cfg.replace(data_width=64, net_ports=2)       # a variant

Pure Python: ``for_model`` reads the shape attributes of whatever model object it is given
(``hidden_size``, ``intermediate_size``, ``num_heads``, ``num_kv_heads``, ``head_dim``), so
the spec imports nothing of the runtime.  A new unit adds its fields here (with defaults) and
a check in ``check``; ``replace`` and the presets keep working.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from .bits import SpecError
from .isa import LAYOUTS, MAX_HP_PORTS, NUM_SEMS, Opcode, block_run_ok
from .kv import KV_ALIGN
from .packet import MAX_PAYLOAD_BYTES, ROUTE_TABLE_ENTRIES
from .params import Range
from .regmap import REGISTERS

#: The PL clock a node is built for: 250 MHz, what the engine targets (issue 14) and a rate the
#: KR260's PS makes (pl_clk0 = IOPLL 1500 MHz / n, n = 6; the paper's 200 MHz is not one: it would
#: be 187.5).  The board flow derives the PS divisor from it (``mcf.boards.kr260.ps``) and refuses
#: a rate the PS cannot make; it is written here and nowhere else.
PL_CLOCK_HZ = 250_000_000
#: The clock of the execute unit's weight loaders' AXI side and their HP ports (the ``axi`` clock
#: domain, pl_clk1 = 1500 / 5 MHz): the S_AXI_HP ports run up to 333 MHz (DS925, UG1085 "PS-PL AXI
#: interfaces"), so four 128-bit ports at 300 MHz carry 4 x 16 B x 300 MHz = 19.2 GB/s, the DDR4's
#: peak, where at the engine's 250 MHz they carry 16.
WEIGHT_CLOCK_HZ = 300_000_000
#: The fastest S_AXI_HP port clock (DS925: 333 MHz).
HP_PORT_MAX_HZ = 333_333_333


@dataclass(frozen=True)
class NodeConfig:
    """One node's build parameters.  Widths in bits, sizes in bytes, depths in entries."""
    # --- datapath, DDR and network ----------------------------------------------------------------
    data_width: int = 128            # AXI4 (DDR) and AXI-Stream width of the datapath
    hp_ports: int = 5                # AXI4 masters into the PS DDR: HP0..3, HPC0 (ddr_masters, docs/node.md)
    net_ports: int = 1               # network ports (a KR260 has one SFP+ cage)
    ddr_addr_bits: int = 40          # DDR address bits (the PS physical address space)
    buffer_bytes: int = 4096         # each ping-pong buffer of the DMA loader (the longest LOAD)
    buffers: int = 2                 # ping-pong buffers
    meta_queue_depth: int = 16       # metadata queue (Meta headers the PS pushed)
    desc_queue_depth: int = 16       # DMA descriptor queue
    payload_depth: int = 512         # packetizer payload FIFO, beats
    # --- NIC ---------------------------------------------------------------------------------------
    nic_buffer_depth: int = 256      # beats buffered per NIC input (the longest payload)
    nic_desc_depth: int = 16         # packets buffered per NIC input
    route_entries: int = ROUTE_TABLE_ENTRIES
    reduce_slots: int = 4            # reductions in progress at once
    reduce_beats: int = 128          # longest reduction payload, beats
    softmax_fan_in: int = 4          # most contributions of one SOFTMAX_MERGE (0: none built)
    # --- sequencer (hw/seq) ------------------------------------------------------------------------
    num_sems: int = NUM_SEMS         # semaphores (16-bit counters; at most spec.isa.NUM_SEMS)
    seq_queue_depth: int = 8         # instructions each of the EX / TX / RX queues holds
    fetch_depth: int = 8             # instructions the fetch unit prefetches
    rx_slots: int = 16               # receive-table entries (RECVs posted at once)
    # --- compute engine ----------------------------------------------------------------------------
    # 64 x 32 = 2 048 INT4 x 16-bit MACs per cycle on 1 024 DSP48E2 (two products per slice,
    # hw/compute/dot_array.py): the K26's 1 248 DSPs less the group-scale multipliers and the rest.
    mac_rows: int = 64               # matrix unit: MAC array rows (output rows per weight beat)
    mac_lanes: int = 32              # matrix unit: MAC array lanes (inputs per row per cycle)
    # matrix unit: the largest weight group G a GEMM takes (group_log2 <= log2 max_group); its
    # attention scores (GEMM_QK, one group of head_dim) are built only when head_dim <= max_group
    max_group: int = 128
    dsp_primitives: int = 1          # 1: the products are DSP48E2 instances (P cascade; model in sims)
    max_tokens: int = 16             # tokens sharing each weight beat (query rows per pass)
    vec_lanes: int = 8               # vector unit lanes
    # attention unit rows with query mantissas and products (ATTN_KV's rows; a unit-path job is
    # att_rows // group tokens x the GQA group's heads).  1 on the KR260 node: it runs attention on the
    # MAC array (the array path's rows are min(sm_rows, max_tokens) = 12, state rows: two tokens x
    # Qwen2.5-1.5B's group of 6) and no ATTN_KV of its programs has more than one row (round 24)
    att_rows: int = 1
    # attention unit: score / P.V lanes a row (its products: att_rows x 2 x att_lanes DSP48E2; a key
    # pair's scores and a key's P.V take head_dim / att_lanes cycles); 0: the unit's default,
    # ``mcf.hw.compute.attention.default_lanes(head_dim)`` (16 at head_dim 128).  The KR260 node runs
    # attention on the MAC array (attention = "array", docs/attention-array.md): no program of its
    # emits ATTN_KV (the decode tokens' keys since round 23: ``decode_block_keys``; a short last
    # prompt block since round 24), so the products are folded narrow -- 2 lanes at 1 row (issue 14:
    # the K26's 1 248 DSPs)
    att_lanes: int = 2
    max_keys: int = 4096             # attention unit keys per job
    kv_lanes: int = 16               # KV block writer lanes
    # Decode streams every weight once per token: 4 loaders alone on the 4 HP ports (16 GB/s of
    # the DDR4's 19.2), the execute unit's other reads on HPC0 (docs/node.md "HP ports").
    weight_ports: int = 4            # execute unit: GEMM weight loaders, one AXI4 master (HP port) each
    clock_hz: int = PL_CLOCK_HZ
    # The weight loaders' AXI side and their HP ports in their own clock domain (``axi``) at this rate,
    # crossed into the engine's in the loaders' dual-clock buffers (hw/dma/loader.py); 0: the engine's
    # clock, no crossing.  The loaders then have the HP ports HP0 .. W-1 to themselves (ddr_masters).
    weight_clock_hz: int = WEIGHT_CLOCK_HZ
    # --- execute unit (spec/isa.py) --------------------------------------------------------------
    spad_beats: int = 32768          # scratchpad: beats of vec_lanes 32-bit words (+ an exponent each)
    kv_block_keys: int = 2048        # most tokens in one KV segment an ATTN_KV reads (its scale table)
    dir_entries: int = 4096          # replica directory entries (block ids)
    max_context: int = 32768         # positions (RoPE table rows, attention positions)
    # --- model shapes the engine is elaborated for (default: Qwen2.5-1.5B) ------------------------
    hidden_size: int = 1536
    intermediate_size: int = 8960
    num_heads: int = 12
    num_kv_heads: int = 2
    head_dim: int = 128

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """Refuse sizes the hardware cannot be built with (``SpecError`` naming the field and
        the values that fit: ``RANGES``)."""
        for f in fields(self):
            v = getattr(self, f.name)
            r = RANGES.get(f.name)
            if r is None:                 # a field without a declared range: a positive integer
                r = Range(1, 1 << 62)
            r.check(f"NodeConfig.{f.name}", v)
        if self.weight_clock_hz and not (self.weight_ports > 1 and self.hp_ports > self.weight_ports):
            raise SpecError(f"NodeConfig: weight_clock_hz={self.weight_clock_hz} needs weight_ports > 1 and an HP "
                            f"port besides theirs (hp_ports > weight_ports), not weight_ports={self.weight_ports}, "
                            f"hp_ports={self.hp_ports}")
        if self.max_group < self.mac_lanes:
            raise SpecError(f"NodeConfig: max_group={self.max_group} must be >= mac_lanes={self.mac_lanes} (a weight "
                            f"group is whole MAC lanes)")
        if self.att_lanes and self.head_dim % self.att_lanes:
            raise SpecError(f"NodeConfig: att_lanes={self.att_lanes} does not divide head_dim={self.head_dim}")
        if self.num_heads % self.num_kv_heads:
            raise SpecError(f"NodeConfig: num_heads={self.num_heads} is not a multiple of "
                            f"num_kv_heads={self.num_kv_heads}")

    # --- derived sizes ------------------------------------------------------------------------------
    @property
    def data_bytes(self) -> int:
        return self.data_width // 8

    @property
    def state_words(self) -> int:
        """32-bit words of one (m, l, o) softmax-state row: head_dim + 2."""
        return self.head_dim + 2

    @property
    def group(self) -> int:
        """GQA group: query heads per KV head."""
        return self.num_heads // self.num_kv_heads

    @property
    def sm_rows(self) -> int:
        """Rows of softmax state (position, m, l, o) the attention unit holds for the array path
        (ATTN_Q QUERY / O / MREF / STATE, ATTN_SM, ATTN_EMIT): g x max(1, max_tokens // g), g =
        max(att_rows, the GQA group) -- as many whole groups as GEMM_QK's max_tokens activation rows
        hold (12 on the KR260 node: jobs of two tokens x the GQA group of 6).  Only the first att_rows
        rows have query mantissas and products (ATTN_KV).  (Round 24: g was att_rows; at att_rows 1
        that would be 16 rows, 4 of them no job uses.)"""
        g = max(self.att_rows, self.group)
        return g * max(1, self.max_tokens // g)

    @property
    def max_payload(self) -> int:
        """Bytes of the largest packet payload a SEND emits: what one DMA loader buffer holds
        and the NIC buffers per input (a power of two)."""
        return min(self.buffer_bytes, self.nic_buffer_depth * self.data_bytes, 1 << (MAX_PAYLOAD_BYTES.bit_length() - 1))

    @property
    def reduce_payload(self) -> int:
        """The longest payload the NIC's reduction engine combines."""
        return self.reduce_beats * self.data_bytes

    @property
    def weight_clock(self) -> int:
        """The weight loaders' AXI clock, Hz (``clock_hz`` when ``weight_clock_hz`` is 0)."""
        return self.weight_clock_hz or self.clock_hz

    @property
    def weight_ratio(self) -> int:
        """Bus beats each weight loader hands the engine per engine cycle: the smallest power of
        two at least ``weight_clock / clock_hz`` (1 without a weight clock)."""
        r = 1
        while r * self.clock_hz < self.weight_clock:
            r *= 2
        return r

    @property
    def weight_word_bytes(self) -> int:
        """Bytes of one word of the weight stream the execute unit's loaders deliver a cycle
        (weight_ports x weight_ratio bus beats): a run of KV blocks streams whole words of it
        (``spec.isa.block_run_ok``)."""
        return self.weight_ports * self.weight_ratio * self.data_bytes

    @property
    def decode_block_keys(self) -> int:
        """Keys of a block of the decode region (``spec.kv``'s decode layout: decode token j is key
        j mod B of decode block j // B, B this): the fewest, a multiple of vec_lanes (ATTN_SM's
        beats) and at most max_tokens (one KVW rewrites a block's first keys) and 32 (its scale
        region is one KV_ALIGN: a segment of n <= B tokens is the first n keys of a B-token one),
        that a run of several blocks streams (``spec.isa.block_run_ok`` for GEMM_QK and GEMM_PV):
        8 on the KR260 node (64-byte rows, 16-byte beats, 128-byte weight words) and the tiny one.
        1 (one-token blocks, the attention unit's ATTN_KV) where none fits."""
        b = self.vec_lanes
        while b <= min(self.max_tokens, KV_ALIGN // 2):
            if all(block_run_ok(b, 0, 2 * b, self.head_dim, self.data_bytes, self.weight_word_bytes, scales=s)
                   for s in (True, False)):
                return b
            b *= 2
        return 1

    @property
    def macs_per_cycle(self) -> int:
        return self.mac_rows * self.mac_lanes

    def ddr_masters(self) -> dict[str, int]:
        """The node's AXI4 masters into the DDR and the HP port p (``m_axi`` / ``m_axi<p>``; on the
        KR260 ``S_AXI_HP<p>_FPD`` for p < 4, ``S_AXI_HPC0_FPD`` for p = 4) each is on -- one
        definition for the Node's interconnect, the board design and the docs:

        * ``weight<k>`` (the execute unit's weight loader k, when ``weight_ports`` > 1): HP port
          k mod ``hp_ports`` -- with W = ``hp_ports`` each loader has a port to itself apart from
          the light traffic below;
        * ``fetch``, ``loader``, ``writer`` (instruction fetch, the TX engine's DMA loader, the RX
          engine's DMA writer): HP port 0, or with a weight clock (``weight_clock_hz``) the port of
          ``exec``: then the weight loaders' ports HP0 .. W-1 carry nothing else and run on their
          clock (pl_clk1), the others on the engine's;
        * ``exec`` (the execute unit's ``m_axi``: GEMM scales and bias, LOAD / STORE, EMBED, the
          attention's K / V, the KV writer; with W = 1 also the weights): the first port no weight
          loader uses (W mod ``hp_ports`` when W < ``hp_ports``: the KR260 node's HPC0), else HP
          port 1 mod ``hp_ports`` (not port 0, which carries the node's own clients).  A GEMM's
          scales stream beside its weights (1/32 of their bytes at groups of 128): on a weight
          loader's port they would slow that loader, and the W loaders deliver one word together.
        """
        P, W = self.hp_ports, self.weight_ports
        ex = W % P if W < P else 1 % P
        own = ex if self.weight_clock_hz else 0
        out = {"fetch": own, "loader": own, "writer": own, "exec": ex}
        if W > 1:
            out.update({f"weight{k}": k % P for k in range(W)})
        return out

    def port_clock_hz(self, p: int) -> int:
        """The clock of HP port ``p``: ``weight_clock`` for a port of the weight loaders when they
        have their own clock, else ``clock_hz``."""
        weights = {v for k, v in self.ddr_masters().items() if k.startswith("weight")}
        return self.weight_clock if self.weight_clock_hz and p in weights else self.clock_hz

    def nic_params(self) -> dict:
        """Keyword arguments of ``mcf.hw.nic.nic.Nic`` (besides data width and ports)."""
        return {"buffer_depth": self.nic_buffer_depth, "desc_depth": self.nic_desc_depth,
                "route_entries": self.route_entries, "reduce_slots": self.reduce_slots,
                "reduce_beats": self.reduce_beats, "softmax_fan_in": self.softmax_fan_in,
                "state_words": self.state_words}

    # --- construction -------------------------------------------------------------------------------
    def replace(self, **changes) -> "NodeConfig":
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise SpecError(f"NodeConfig has no field(s) {', '.join(sorted(unknown))}")
        return replace(self, **changes)

    def as_dict(self) -> dict:
        return asdict(self)

    def fields_of(self, *names: str) -> dict:
        """Some fields by name (a block's registry parameters)."""
        return {name: getattr(self, name) for name in names}

    @classmethod
    def for_model(cls, model, **changes) -> "NodeConfig":
        """The node elaborated for ``model``'s shapes (any object with ``hidden_size``,
        ``intermediate_size``, ``num_heads``, ``num_kv_heads``, ``head_dim``)."""
        shapes = {name: getattr(model, name) for name in MODEL_SHAPES}
        return cls(**{**shapes, **changes})

    @classmethod
    def tiny(cls, **changes) -> "NodeConfig":
        """The tiny model's node (``sw/models/tiny.yaml``) with small buffers and a small
        engine, as the unit and two-node benches build it.  Two reduction slots: the MARS
        decode keeps one softmax-state reduction open per row group, one per KV head here (a
        contribution finding no slot waits at the head of its NIC input, so the lowering
        refuses fewer)."""
        base = dict(data_width=64, hp_ports=1, weight_ports=1, weight_clock_hz=0, buffer_bytes=512, payload_depth=64, nic_buffer_depth=64,
                    seq_queue_depth=4, fetch_depth=4, rx_slots=4,
                    nic_desc_depth=4, route_entries=16, reduce_slots=2, reduce_beats=32, softmax_fan_in=0,
                    mac_rows=4, mac_lanes=8, dsp_primitives=0, max_tokens=8, vec_lanes=8, att_rows=4, att_lanes=0, max_keys=64, kv_lanes=4,
                    spad_beats=2048, kv_block_keys=64, dir_entries=256, max_context=256,
                    hidden_size=64, intermediate_size=128, num_heads=4, num_kv_heads=2, head_dim=16)
        return cls(**{**base, **changes})

    @classmethod
    def qwen2_5_1_5b(cls, **changes) -> "NodeConfig":
        """Qwen2.5-1.5B's shapes (``sw/models/qwen2.5-1.5b.yaml``) on the KR260 node: the
        defaults (64 x 32 array, 4 weight loaders on HP0..3, the execute unit's m_axi on HPC0)."""
        return cls(**changes)


def _log2_field_max(register: str, field: str) -> int:
    """The deepest power of two a ``log2`` field of a capability register can report."""
    return 1 << ((1 << REGISTERS[register].field(field).width) - 1)


#: What each field may be: the one place the node's sizes are bounded.  ``NodeConfig`` checks
#: them, the block registry checks ``-p KEY=VALUE`` of a node block against them before
#: elaboration, and the capability registers can report every value they admit.
RANGES: dict[str, Range] = {
    "data_width": Range(32, 1024, pow2=True, doc="AXI4 / AXI-Stream width, bits"),
    "hp_ports": Range(1, MAX_HP_PORTS, doc="AXI4 masters into the PS DDR (S_AXI_HP0..3_FPD, S_AXI_HPC0_FPD)"),
    "net_ports": Range(1, (1 << REGISTERS["CAPS"].field("net_ports").width) - 1, doc="network ports"),
    "ddr_addr_bits": Range(12, 64, doc="DDR address bits"),
    "buffer_bytes": Range(16, 1 << 20, pow2=True, doc="one ping-pong buffer, bytes"),
    "buffers": Range(2, (1 << REGISTERS["DMA_CAPS"].field("buffers").width) - 1, doc="ping-pong buffers"),
    "meta_queue_depth": Range(2, _log2_field_max("CAPS", "meta_queue_log2"), pow2=True),
    "desc_queue_depth": Range(2, _log2_field_max("CAPS", "desc_queue_log2"), pow2=True),
    "payload_depth": Range(2, 1 << 16, pow2=True, doc="packetizer payload FIFO, beats"),
    "nic_buffer_depth": Range(2, 1 << 16, pow2=True, doc="NIC input buffer, beats"),
    "nic_desc_depth": Range(2, 1024, doc="packets buffered per NIC input"),
    "route_entries": Range(1, ROUTE_TABLE_ENTRIES, pow2=True, doc="route table entries"),
    "reduce_slots": Range(1, 64, doc="reductions in progress at once"),
    "reduce_beats": Range(2, 1 << 16, pow2=True, doc="longest reduction payload, beats"),
    "softmax_fan_in": Range(2, 16, pow2=True, zero=True, doc="contributions of one SOFTMAX_MERGE"),
    "mac_rows": Range(1, 256, doc="MAC array rows"),
    "mac_lanes": Range(1, 256, pow2=True, doc="MAC array lanes"),
    "max_group": Range(1, 1 << LAYOUTS[Opcode.GEMM]["group_log2"].max, pow2=True,
                       doc="largest GEMM weight group G (>= mac_lanes)"),
    "dsp_primitives": Range(0, 1, doc="products as DSP48E2 instances (1) or inferred (0)"),
    "max_tokens": Range(1, 256, pow2=True, doc="tokens per weight pass"),
    "vec_lanes": Range(1, 256, pow2=True, doc="vector unit lanes"),
    "att_rows": Range(1, 256, doc="attention unit query rows"),
    "att_lanes": Range(1, 256, pow2=True, zero=True,
                       doc="attention unit score / P.V lanes a row (0: default_lanes(head_dim); divides head_dim)"),
    "max_keys": Range(1, 1 << 20, pow2=True, doc="keys per attention state"),
    "kv_lanes": Range(1, 256, doc="KV writer lanes"),
    "weight_ports": Range(1, MAX_HP_PORTS, pow2=True, doc="GEMM weight loaders (AXI4 masters) of the execute unit"),
    "num_sems": Range(1, NUM_SEMS, doc="semaphores (spec.isa.NUM_SEMS at most)"),
    "seq_queue_depth": Range(2, 1 << 10, pow2=True, doc="instructions per EX / TX / RX queue"),
    "fetch_depth": Range(2, 1 << 10, pow2=True, doc="instructions prefetched"),
    "rx_slots": Range(1, 63, doc="receive-table entries"),
    "spad_beats": Range(16, 1 << 20, pow2=True, doc="scratchpad beats"),
    "kv_block_keys": Range(1, 1 << 16, pow2=True, doc="tokens in one KV segment an ATTN_KV reads"),
    "dir_entries": Range(1, 1 << 16, pow2=True, doc="replica directory entries"),
    "max_context": Range(1, 1 << 20, doc="positions (ISA position fields are 20 bits)"),
    "clock_hz": Range(1_000_000, 1_000_000_000, doc="PL clock, Hz"),
    "weight_clock_hz": Range(1_000_000, HP_PORT_MAX_HZ, zero=True,
                             doc="weight loaders' AXI / HP port clock, Hz (0: the PL clock, no crossing)"),
    "hidden_size": Range(1, 1 << 16),
    "intermediate_size": Range(1, 1 << 18),
    "num_heads": Range(1, 256),
    "num_kv_heads": Range(1, 256),
    "head_dim": Range(1, 1024),
}


#: The model attributes a node is elaborated for.
MODEL_SHAPES = ("hidden_size", "intermediate_size", "num_heads", "num_kv_heads", "head_dim")
