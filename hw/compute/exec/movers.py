"""The execute unit's movers: one component per kind of EX instruction (``spec/isa.py``), each
moving words between the scratchpad, DDR and one compute unit.

Every mover has the same ports: ``start`` (a strobe: run the instruction ``instr``, whose
opcode is one of the mover's), ``done`` / ``fault`` + ``cause`` (a strobe when it finished or
refused it) and ``bus``, its view of the resources the execute unit lends the running mover
(``MoverBus``): the SPAD read and write ports, two read streams (``req0``/``in0``,
``req1``/``in1``), the weight loader (``ldesc``/``ldata``), the DDR writer
(``wdesc``/``wdata``/``wdone``), the replica directory, and performance strobes.  A mover
that refuses an instruction (a field out of range for this build: ILLEGAL_INSTRUCTION; an
embedding id >= vocab: ILLEGAL_TOKEN; a gated ATTN_KV or a DIR check over an unreadable block:
UNREADABLE_BLOCK) does so before it moves anything, so nothing is left in flight.

Movers (``Geometry`` holds the sizes, from a ``NodeConfig``):

* ``DirMover`` (DIR): directory writes, one per cycle when the receive engine does not write, or
  (check) lookups, one per cycle, faulting UNREADABLE_BLOCK on an unreadable entry.
* ``LoadStoreMover`` (LOAD, STORE): DDR <-> SPAD beats, plain or BFP rows (the exponent beat
  after each row in DDR).
* ``EmbedMover`` (EMBED): token ids, then per token the table row's scales and nibbles ->
  X32 rows.
* ``GemmMover`` (GEMM): activation rows -> the matrix unit's buffer; weights through the
  ping-pong loader, scales and bias on the read streams; output beats -> SPAD words (lane
  enables when a tile is narrower than VL).
* ``VecMover`` (VEC): a and b rows -> the vector unit -> SPAD, row after row.
* ``KvwMover`` (KVW): BFP16 rows -> the KV writer -> one KV4 segment in DDR, rows region and
  then the scale region, padding included.
* ``AttnMover`` (ATTN_Q, ATTN_KV, ATTN_EMIT): owns the attention unit (its rows and states
  live across instructions); K and V segments parsed by ``SegmentReader``.
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth import Array, Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, enum, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

# ``stage``: one registered step of an instruction's decode.  The execute unit holds the word from
# dispatch to the mover's ``done``, so a stage-k value is valid k cycles after it (unit.SETUP_CYCLES).
from mcf.hw.arith import stage
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.compute.attention import AttentionUnit, k_layout, out_words, q_addr_bits, v_layout
from mcf.hw.compute.exec.spad import SpadReadSignature, SpadWriteSignature
from mcf.hw.compute.exec.streams import COUNT_BITS, Packer, Unpacker, request_layout
from mcf.hw.compute.kv_writer import KVWriter
from mcf.hw.compute.matrix import WIDE_BITS, MatrixUnit, PvReorder, TileReorder, rotate_list, rotate_pieces
from mcf.hw.compute.vector import VectorUnit
from mcf.hw.fifo import ReadyFIFO, TwoRegisterFIFO
from mcf.hw.layouts import DmaDescriptorLayout, amaranth_enum, struct_layout
from mcf.hw.lut import mux4, muxf, shr_layers
from mcf.spec import isa
from mcf.spec.fixed import EXP_BITS, MANT_BITS, W_BITS, X_FRAC
from mcf.spec.kv import KV_ALIGN
from mcf.spec.node import NodeConfig
from mcf.spec.plan import REPLICA_STATE_BITS
from mcf.spec.regmap import DMA_DESCRIPTOR

ADDR_BITS = isa.DDR_ADDR_BITS
ALIGN_LOG2 = isa.DDR_ALIGN.bit_length() - 1
FaultCause = amaranth_enum(isa.SeqFault, 4)
#: Every instruction's fields as an Amaranth layout (generated from spec.isa.LAYOUTS).
LAYOUT = {op: struct_layout(isa.LAYOUTS[op]) for op in isa.Opcode}


def _log2(v: int) -> int:
    return v.bit_length() - 1


def _pow2(v: int) -> bool:
    return v >= 1 and not v & (v - 1)


def _divides(a: int, b: int) -> bool:
    return a >= 1 and b >= 1 and (max(a, b) % min(a, b) == 0)


def sm_apply_beats(sm_rows: int, vl: int, banks: int) -> int:
    """ATTN_SM APPLY's group: beats of a row read (and w beats written) at once -- the fewest (a
    power of two, at most ``banks``, the SPAD's) whose VL keys each cover the unit's ``sm_rows``
    state rows, so that a group's R reads and R writes take no longer than its keys' post (a key a
    cycle): 2 at R = 12, VL = 8, 4 banks.  The cost and ISA models use this one definition."""
    ab = 1
    while ab < banks and ab * vl < sm_rows:
        ab *= 2
    return ab


@dataclass(frozen=True)
class Geometry:
    """The sizes the execute unit is built with (from a ``NodeConfig``)."""
    vl: int               # SPAD words per beat (the ISA's VL = vec_lanes)
    data_width: int       # DDR bus bits
    spad_beats: int
    rows: int             # P: MAC array rows
    lanes: int            # K: MAC array lanes
    tokens: int           # max tokens (GEMM rows, EMBED ids, KVW rows)
    att_rows: int         # attention unit rows
    head_dim: int
    kv_lanes: int
    max_n: int            # widest row (matrix inputs, vector unit, embedding)
    max_group: int        # largest weight group G
    max_keys: int         # keys summed into one attention state (the longest context)
    kv_block_keys: int
    dir_entries: int
    buffer_bytes: int     # each ping-pong buffer of the weight loader
    buffers: int
    fifo_depth: int       # beats of each read stream's FIFO
    weight_ports: int = 1  # weight loaders (AXI4 masters)
    weight_ratio: int = 1  # bus beats each loader hands over per cycle (NodeConfig.weight_ratio)
    weight_cdc: bool = False  # the loaders' AXI side in the ``axi`` clock domain (NodeConfig.weight_clock_hz)
    primitive: bool = False  # the MAC array's products as DSP48E2 instances (hw/compute/dot_array.py)
    lut_primitive: bool = False  # the glue's radix-4 rotations / 4:1 choices as LUT6 instances (hw/lut.py)
    att_lanes: int = 0    # attention unit score / P.V lanes (NodeConfig.att_lanes; 0: default_lanes)
    sm_rows: int = 0      # attention unit state rows (NodeConfig.sm_rows: the array path's; 0: att_rows)

    @classmethod
    def from_config(cls, c: NodeConfig) -> "Geometry":
        max_n = max(c.hidden_size, c.intermediate_size, c.num_heads * c.head_dim)
        return cls(vl=c.vec_lanes, data_width=c.data_width, spad_beats=c.spad_beats, rows=c.mac_rows,
                   lanes=c.mac_lanes, tokens=c.max_tokens, att_rows=c.att_rows, head_dim=c.head_dim,
                   kv_lanes=c.kv_lanes, max_n=max_n, max_group=c.max_group,
                   max_keys=1 << ceil_log2(max(c.max_keys, c.max_context)),
                   kv_block_keys=c.kv_block_keys, dir_entries=c.dir_entries, buffer_bytes=c.buffer_bytes,
                   buffers=c.buffers, fifo_depth=max(32, 2 * c.buffer_bytes // c.data_bytes),
                   weight_ports=c.weight_ports, weight_ratio=c.weight_ratio, weight_cdc=bool(c.weight_clock_hz),
                   primitive=bool(c.dsp_primitives), att_lanes=c.att_lanes, sm_rows=c.sm_rows,
                   # (round 28: the node's instances, LUT6 with DSP48E2; the tiny / pysim configs build neither)
                   lut_primitive=bool(c.dsp_primitives))

    def __post_init__(self):
        bus = self.data_width // 8
        rules = [
            (_pow2(self.vl), f"vec_lanes={self.vl} must be a power of two"),
            (_pow2(self.rows), f"mac_rows={self.rows} must be a power of two"),
            (_pow2(self.lanes), f"mac_lanes={self.lanes} must be a power of two"),
            (_pow2(self.kv_lanes), f"kv_lanes={self.kv_lanes} must be a power of two"),
            (_pow2(self.tokens), f"max_tokens={self.tokens} must be a power of two"),
            (_pow2(self.max_group) and self.max_group >= self.lanes,
             f"max_group={self.max_group} must be a power of two >= mac_lanes"),
            (bus <= KV_ALIGN, f"data_width={self.data_width}: at most {8 * KV_ALIGN} bits"),
            (self.head_dim % self.vl == 0, f"head_dim={self.head_dim} must be a multiple of vec_lanes={self.vl}"),
            (self.head_dim % self.kv_lanes == 0, f"head_dim={self.head_dim} must be a multiple of kv_lanes"),
            (_pow2(self.head_dim), f"head_dim={self.head_dim} must be a power of two"),
            (self.max_n % self.vl == 0 and self.max_n % self.lanes == 0,
             f"row width {self.max_n} must be a multiple of vec_lanes and mac_lanes"),
            (_pow2(self.spad_beats), f"spad_beats={self.spad_beats} must be a power of two"),
            (_pow2(self.dir_entries), f"dir_entries={self.dir_entries} must be a power of two"),
            (_pow2(self.weight_ports) and _pow2(self.weight_ratio)
             and _divides(self.weight_beats * self.data_width, self.rows * self.lanes * W_BITS),
             f"weight_ports={self.weight_ports}: a power of two whose {self.weight_beats} bus beats (x "
             f"{self.weight_ratio} a loader) divide or are divided by one weight beat "
             f"({self.rows * self.lanes * W_BITS} bits)"),
            (self.buffer_bytes >= self.weight_beats * bus,
             f"buffer_bytes={self.buffer_bytes} holds less than one {self.weight_beats}-beat weight word"),
        ]
        for ok, message in rules:
            if not ok:
                raise ValueError(f"execute unit: {message}")

    @property
    def bus_bytes(self) -> int:
        return self.data_width // 8

    @property
    def weight_beats(self) -> int:
        """Bus beats of one word of the weight stream (``ldata``): every loader's per cycle."""
        return self.weight_ports * self.weight_ratio

    @property
    def bus_log2(self) -> int:
        return _log2(self.bus_bytes)

    @property
    def beat_bits(self) -> int:
        return self.vl * 32

    @property
    def spad_banks(self) -> int:
        """SPAD banks (``Scratchpad``): mac_lanes / VL when the array is wider than a SPAD beat,
        so that the GEMM mover fills one token-buffer word a cycle."""
        return max(self.lanes // self.vl, 1)

    @property
    def sm_apply_beats(self) -> int:
        """ATTN_SM APPLY's group in beats a row: ``sm_apply_beats`` (below) of this build."""
        return sm_apply_beats(self.sm_rows or self.att_rows, self.vl, self.spad_banks)

    @property
    def spad_bits(self) -> int:
        return ceil_log2(self.spad_beats)

    @property
    def dir_bits(self) -> int:
        return ceil_log2(self.dir_entries)


class MoverBus(wiring.Signature):
    """The resources the execute unit lends the running mover (the mover's view)."""

    def __init__(self, g: Geometry):
        self.g = g
        super().__init__({
            "spad_rd": Out(SpadReadSignature(g.spad_beats, g.vl, g.spad_banks)),
            "spad_wr": Out(SpadWriteSignature(g.spad_beats, g.vl, g.spad_banks, alt=True)),
            "req0": Out(stream.Signature(request_layout(ADDR_BITS))),
            "in0": In(stream.Signature(g.data_width)),
            "req1": Out(stream.Signature(request_layout(ADDR_BITS))),
            "in1": In(stream.Signature(g.data_width)),
            "ldesc": Out(stream.Signature(DmaDescriptorLayout)),
            "ldata": In(AXIStreamSignature(g.data_width * g.weight_beats)),
            "wdesc": Out(stream.Signature(DmaDescriptorLayout)),
            "wdata": Out(AXIStreamSignature(g.data_width)),
            "wdone": In(1),
            "dir_wr_en": Out(1), "dir_wr_block": Out(g.dir_bits), "dir_wr_state": Out(REPLICA_STATE_BITS),
            "dir_wr_ready": In(1),
            "dir_lookup_en": Out(1), "dir_lookup_block": Out(g.dir_bits), "dir_readable": In(1),
            # the read streams' valid as they are, not gated by ``owner`` (``in0`` / ``in1``'s are): for a mover's
            # own running states only
            "ivalid": In(2),
            "mac": Out(1),
            "starved": Out(1),
        })


class Mover(wiring.Component):
    OPS: tuple = ()

    def __init__(self, g: Geometry):
        self.g = g
        super().__init__({
            "start": In(1),
            "instr": In(isa.INSTR_BITS),
            "done": Out(1),
            "fault": Out(1),
            "cause": Out(FaultCause),
            "busy": Out(1),
            "bus": Out(MoverBus(g)),
        })

    def view(self, op: isa.Opcode) -> data.View:
        return data.View(LAYOUT[op], self.instr)

    def refuse(self, m, cause=isa.SeqFault.ILLEGAL_INSTRUCTION):
        """Comb statements: the fault strobe with ``cause``."""
        m.d.comb += [self.fault.eq(1), self.cause.eq(cause)]


# --- helpers ------------------------------------------------------------------------------------
def ddr_addr(field) -> Signal:
    """An instruction's DDR field (address / 64) as a byte address."""
    return Cat(Const(0, ALIGN_LOG2), field)


def pad_up(x, log2: int = ALIGN_LOG2):
    """x rounded up to a multiple of 2^log2 (a Value, one bit wider)."""
    return ((x + ((1 << log2) - 1)) >> log2) << log2


def descriptor(addr, length, buffer=0):
    """A whole DMA descriptor (``DmaDescriptorLayout``: LOAD direction, tag 0) as one value, so
    that no bit of the payload is left to a constant driver."""
    f = {x.name: x.width for x in DMA_DESCRIPTOR.fields}
    return Cat(addr[:f["addr"]], Value.cast(length)[:f["length"]], Value.cast(buffer)[:f["buffer"]],
               Const(0, f["dir"] + f["tag"]))


def ceil_beats(nbytes, bus_log2: int):
    """Bus beats that carry ``nbytes`` bytes."""
    return (nbytes + ((1 << bus_log2) - 1)) >> bus_log2


class ReadQueue:
    """SPAD reads into a small FIFO (one cycle of read latency): the mover sets ``addr`` and
    ``issue`` (only when ``room``); the beats come out at ``valid``/``words``/``exp`` and leave
    on ``take``."""

    def __init__(self, m: Module, port, g: Geometry, name: str, depth: int = 4, wide: bool = False):
        nb = g.spad_banks if wide else 1               # ``wide``: the banks' consecutive beats
        bits = nb * g.beat_bits
        self.fifo = q = fifo.SyncFIFOBuffered(width=bits + EXP_BITS, depth=depth)
        m.submodules[name] = q
        self.issue = Signal(name=f"{name}_issue")
        self.addr = Signal(g.spad_bits, name=f"{name}_addr")
        self.room = Signal(name=f"{name}_room")
        inflight = Signal(name=f"{name}_inflight")
        # beats issued and not yet taken (the FIFO's level + the read in flight), kept as a register: ``room``
        # one LUT of it, not the FIFO's level sum and a compare in front of every mover's issue (round 19)
        held = Signal(range(depth + 1), name=f"{name}_held")
        m.d.comb += [self.room.eq(held != depth), port.en.eq(self.issue), port.addr.eq(self.addr),
                     q.w_en.eq(inflight), q.w_data.eq(Cat(port.wide if nb > 1 else port.data, port.exp))]
        m.d.sync += [inflight.eq(self.issue), held.eq(held + self.issue - (q.r_en & q.r_rdy))]
        self.valid, self.take = q.r_rdy, q.r_en
        self.words = q.r_data[:bits]
        self.exp = q.r_data[bits:].as_signed()
        self.busy = Signal(name=f"{name}_busy")
        m.d.comb += self.busy.eq(inflight | q.r_rdy)


def mantissas(words, count: int):
    """The low 16 bits of ``count`` 32-bit words (BFP16 mantissas, sign-extended in SPAD)."""
    return Cat(*[words[32 * k:32 * k + MANT_BITS] for k in range(count)])


def sext16(values, count: int):
    """``count`` 16-bit fields -> ``count`` sign-extended 32-bit words."""
    return Cat(*[Cat(values[MANT_BITS * k:MANT_BITS * (k + 1)], values[MANT_BITS * (k + 1) - 1].replicate(16))
                 for k in range(count)])


class SerialDivider(wiring.Component):
    """Unsigned ``a`` // ``b`` and ``a`` % ``b`` by restoring division, one bit per cycle
    (``a_bits`` cycles from ``start`` to ``done``; b = 0 gives q = all ones, r = a).  ``m_bits`` > 0:
    also ``qm`` = q x ``m`` (shift and add on the quotient bits as they come, MSB first)."""

    def __init__(self, a_bits: int, b_bits: int, m_bits: int = 0):
        self.a_bits, self.b_bits, self.m_bits = a_bits, b_bits, m_bits
        super().__init__({"start": In(1), "a": In(a_bits), "b": In(b_bits), "q": Out(a_bits),
                          "r": Out(b_bits + 1), "done": Out(1),
                          **({"m": In(m_bits), "qm": Out(a_bits + m_bits)} if m_bits else {})})

    def elaborate(self, platform):
        m = Module()
        n = self.a_bits
        busy = Signal()
        i = Signal(range(n + 1))
        rem = Signal(self.b_bits + 1)
        quo = Signal(n)
        num = Signal(n)
        den = Signal(self.b_bits)
        m.d.sync += self.done.eq(0)
        # (the trial and its compare whatever the state: assigned under ``busy`` they were 0 outside it, which
        # put ``start`` in front of the compare and the product's add -- round 21: in_setup -> qm 9.6 levels)
        trial = Signal(self.b_bits + 2)
        ge = Signal()
        m.d.comb += [trial.eq(Cat(num[n - 1], rem)), ge.eq(trial >= den)]
        with m.If(self.start):
            m.d.sync += [busy.eq(1), i.eq(0), rem.eq(0), quo.eq(0), num.eq(self.a), den.eq(self.b)]
        with m.Elif(busy):
            m.d.sync += [num.eq(num << 1), rem.eq(Mux(ge, trial - den, trial)), quo.eq(Cat(ge, quo)),
                         i.eq(i + 1)]
            with m.If(i == n - 1):
                m.d.sync += [busy.eq(0), self.done.eq(1)]
        m.d.comb += [self.q.eq(quo), self.r.eq(rem)]
        if self.m_bits:
            acc = Signal(n + self.m_bits)
            mul = Signal(self.m_bits)
            with m.If(self.start):
                m.d.sync += [acc.eq(0), mul.eq(self.m)]
            with m.Elif(busy):
                m.d.sync += acc.eq((acc << 1) + Mux(ge, mul, 0))
            m.d.comb += self.qm.eq(acc)
        return m


# --- DIR ---------------------------------------------------------------------------------------------
class DirMover(Mover):
    """DIR.  check = 0: directory[block + i stride] = state for i < count, one write a cycle; a
    write waits while the receive engine writes (``dir_wr_ready``).  check = 1: the entries looked
    up on the directory's lookup port (the one a gated ATTN_KV uses, ``readable`` its rule), one a
    cycle, nothing written: UNREADABLE_BLOCK at the first unreadable one, else done after the last.
    Refused (ILLEGAL_INSTRUCTION) either way: count = 0 or an id past the directory."""
    OPS = (isa.Opcode.DIR,)

    def elaborate(self, platform):
        m = Module()
        g, b = self.g, self.bus
        ins = self.view(isa.Opcode.DIR)
        cur = Signal(16)
        left = Signal(16)
        run = Signal()                 # writing
        look = Signal()                # checking: lookups issued while issued != count
        issued = Signal(17)
        looked = Signal()              # a lookup's answer is on dir_readable this cycle
        decode = Signal()
        left1 = Signal()               # left == 1, as a register
        # the range check in stages (``stage``; ``decode``, the cycle after ``start``, sees stage 3): the last
        # id block + (count - 1) stride past the directory, or count = 0
        count_m1 = stage(m, ins.count - 1, "count_m1", 16)                                   # stage 1
        span = stage(m, count_m1 * ins.stride, "span", 24)                                    # stage 2
        bad = stage(m, (ins.count == 0) | ((ins.block + span) >= g.dir_entries), "bad")      # stage 3
        # check: the first lookup goes out in ``decode`` (the mover has the bus from its start), so each answer
        # comes a cycle earlier than from ``look`` and the end (``chk_done``) is a register of the last answer,
        # in the same cycle as before (round 21: the directory's read -> DIR's done -> the unit's end, 10 levels)
        chk_done = Signal()
        m.d.sync += chk_done.eq(0)
        m.d.comb += self.busy.eq(run | look | decode | chk_done)
        m.d.sync += decode.eq(self.start)
        with m.If(decode):
            with m.If(bad):
                self.refuse(m)
            with m.Else():
                m.d.sync += [cur.eq(Mux(ins.check, ins.block + ins.stride, ins.block)), left.eq(ins.count),
                             left1.eq(ins.count == 1), issued.eq(ins.check), run.eq(~ins.check), look.eq(ins.check)]
        # write
        m.d.comb += [b.dir_wr_en.eq(run), b.dir_wr_block.eq(cur), b.dir_wr_state.eq(ins.state)]
        with m.If(run & b.dir_wr_ready):
            m.d.sync += [cur.eq(cur + ins.stride), left.eq(left - 1), left1.eq(left == 2)]
            with m.If(left1):
                m.d.sync += run.eq(0)
                m.d.comb += self.done.eq(1)
        # check: lookup i issued at cycle i (lookup 0 in ``decode``), answered (``readable``) at cycle i + 1
        more = Signal()
        m.d.comb += [more.eq(look & (issued != ins.count)),
                     b.dir_lookup_en.eq(more | (decode & ~bad & ins.check)),
                     b.dir_lookup_block.eq(Mux(decode, ins.block, cur))]
        m.d.sync += looked.eq(b.dir_lookup_en)
        with m.If(more):
            m.d.sync += [issued.eq(issued + 1), cur.eq(cur + ins.stride)]
        with m.If(look & looked):
            m.d.sync += [left.eq(left - 1), left1.eq(left == 2)]
            with m.If(~b.dir_readable):
                self.refuse(m, isa.SeqFault.UNREADABLE_BLOCK)
                m.d.sync += look.eq(0)
            with m.Elif(left1):
                m.d.sync += [look.eq(0), chk_done.eq(1)]
        with m.If(chk_done):
            m.d.comb += self.done.eq(1)
        return m


# --- LOAD / STORE ------------------------------------------------------------------------------------
class LdStState(enum.Enum, shape=3):
    IDLE = 0
    DIVIDE = 1      # rows = beats / row_beats (BFP rows)
    CHECK = 2
    MOVE = 3        # LOAD: words in; STORE: words out
    EXP = 4         # LOAD, BFP rows: the row's exponent into its beats
    WAIT = 5        # STORE: the writer's acknowledgement


class LoadStoreMover(Mover):
    """LOAD: DDR -> SPAD (plain: exponent 0; BFP rows: each row's beats take the exponent
    word that follows the row in DDR).  STORE: SPAD -> DDR, the same layout (BFP rows: word 0
    of the beat after each row is the exponent of its first beat, sign-extended; the other
    words 0).  One request (one descriptor) for the whole range."""
    OPS = (isa.Opcode.LOAD, isa.Opcode.STORE)

    def elaborate(self, platform):
        m = Module()
        g, b = self.g, self.bus
        ins = self.view(isa.Opcode.LOAD)          # STORE has the same fields
        op = self.instr[:6]
        store = stage(m, op == isa.Opcode.STORE, "store")           # stage 1 (from the decode's CHECK on)
        bfp = stage(m, ins.row_beats != 0, "bfp")                        # stage 1 (BFP rows)
        m.submodules.div = div = SerialDivider(20, 12)
        m.d.comb += [div.a.eq(ins.beats), div.b.eq(ins.row_beats)]

        S = LdStState
        state = Signal(S)
        m.d.comb += self.busy.eq(state != S.IDLE)
        # the sizes in registered steps (``stage``): from the word (plain rows; CHECK sees stage 3) or from
        # the quotient (BFP rows: rows = div.q, CHECK two cycles after div.done)
        items = stage(m, ins.beats + Mux(bfp, div.q, 0), "items", 21)       # SPAD-beat-sized items in DDR
        nbytes = stage(m, items << _log2(4 * g.vl), "nbytes", COUNT_BITS)
        bus_beats = stage(m, ceil_beats(items << _log2(4 * g.vl), g.bus_log2), "bus_beats", COUNT_BITS)
        spad_bad = stage(m, (ins.beats == 0) | (ins.spad + ins.beats > g.spad_beats), "spad_bad")
        beats_m1 = stage(m, ins.beats - 1, "beats_m1")                   # (the moves' last-item compares, stage 1)
        beats_m2 = stage(m, ins.beats - 2, "beats_m2")
        rowb_m1 = stage(m, ins.row_beats - 1, "rowb_m1")
        rowb_m2 = stage(m, ins.row_beats - 2, "rowb_m2")

        with m.If(self.start):
            with m.If(bfp):
                m.d.comb += div.start.eq(1)
                m.d.sync += state.eq(S.DIVIDE)
            with m.Else():
                m.d.sync += state.eq(S.CHECK)
        div_done = Signal()
        m.d.sync += div_done.eq(div.done)
        with m.If((state == S.DIVIDE) & div_done):
            m.d.sync += state.eq(S.CHECK)
            with m.If(div.r != 0):
                self.refuse(m)
                m.d.sync += state.eq(S.IDLE)

        # --- LOAD: bus beats -> SPAD beats ---------------------------------------------------------
        # (the streams' counters as wide as their counts: round 29)
        m.submodules.unpack = up = Unpacker(g.data_width, g.beat_bits, count_bits=len(items))
        m.submodules.pack = pk = Packer(g.beat_bits, g.data_width, count_bits=len(items), beats_bits=len(bus_beats))
        cur = Signal(g.spad_bits + 1)          # next SPAD beat
        row0 = Signal(g.spad_bits + 1)         # first beat of the current row
        rb = Signal(12)                        # beats of the current row so far
        moved = Signal(21)                     # SPAD beats written / read
        # moved == beats - 1 and moved == beats as registers, set with moved (each a compare of moved before it
        # steps, not of its new value: the done strobe and the state's next value without a 21-bit compare)
        mv_last, mv_all = Signal(), Signal()
        mv_step = Signal()                     # moved steps this cycle
        with m.If(mv_step):
            m.d.sync += [mv_all.eq(mv_last), mv_last.eq(moved == beats_m2)]
        exp_hold = Signal(signed(EXP_BITS))
        k = Signal(12)
        # LOAD's MOVE (state MOVE and not a store), rb == row_beats and k == row_beats - 1 as registers, set
        # where the state, rb and k change (round 22: the state's decode and the 12-bit compare in front of
        # the SPAD's write lanes, the read stream's ready and the unit's state, 9.0 levels)
        ld_on, rb_end, k_last = Signal(), Signal(), Signal()
        with m.If(state == S.CHECK):
            with m.If(spad_bad):
                self.refuse(m)
                m.d.sync += state.eq(S.IDLE)
            with m.Elif(Mux(store, b.wdesc.ready & pk.cmd.ready, b.req0.ready & up.cmd.ready)):
                m.d.sync += [cur.eq(ins.spad), row0.eq(ins.spad), rb.eq(0), moved.eq(0), state.eq(S.MOVE),
                             mv_last.eq(beats_m1 == 0), mv_all.eq(0), ld_on.eq(~store), rb_end.eq(~bfp)]
                with m.If(store):
                    m.d.comb += [b.wdesc.valid.eq(1), pk.cmd.valid.eq(1)]
                with m.Else():
                    m.d.comb += [b.req0.valid.eq(1), up.cmd.valid.eq(1)]
        m.d.comb += [
            b.req0.payload.addr.eq(ddr_addr(ins.ddr)), b.req0.payload.beats.eq(bus_beats),
            up.cmd.payload.count.eq(items),
            b.wdesc.payload.eq(descriptor(ddr_addr(ins.ddr), nbytes)),
            pk.cmd.payload.count.eq(items), pk.cmd.payload.beats.eq(bus_beats),
        ]
        wr = b.spad_wr
        all_lanes = (1 << g.vl) - 1
        m.d.comb += [up.i.valid.eq(b.in0.valid), up.i.payload.eq(b.in0.payload), b.in0.ready.eq(up.i.ready)]
        loading = ld_on
        m.d.comb += b.starved.eq(loading & ~up.o.valid)
        m.d.comb += wr.data.eq(up.o.payload)       # whatever the state: only lanes write it
        with m.If(loading):
            m.d.comb += [up.o.ready.eq(1), wr.addr.eq(cur), wr.exp.eq(0)]
            with m.If(up.o.valid):
                with m.If(bfp & rb_end):
                    # the exponent beat of the row: word 0 (int8 range)
                    m.d.sync += [exp_hold.eq(up.o.payload[:EXP_BITS]), k.eq(0), k_last.eq(rowb_m1 == 0),
                                 state.eq(S.EXP), ld_on.eq(0)]
                with m.Else():
                    m.d.comb += [wr.lanes.eq(all_lanes), wr.exp_en.eq(~bfp)]
                    m.d.sync += [cur.eq(cur + 1), rb.eq(rb + 1), rb_end.eq(rb == rowb_m1), moved.eq(moved + 1)]
                    m.d.comb += mv_step.eq(1)
                    with m.If(~bfp & mv_last):
                        m.d.comb += self.done.eq(1)
                        m.d.sync += [state.eq(S.IDLE), ld_on.eq(0)]
        # the exponent's write address is ``row0`` itself, stepped through the row (it is reloaded with ``cur`` at the
        # row's end; nothing else reads it in EXP) -- not row0 + k (round 27: the add in front of the owner's choice
        # and the SPAD's ``wr.addr``, 9.0 levels joined)
        with m.If(state == S.EXP):
            m.d.comb += [wr.addr.eq(row0), wr.exp_en.eq(1), wr.exp.eq(exp_hold)]
            m.d.sync += [k.eq(k + 1), k_last.eq(k == rowb_m2), row0.eq(row0 + 1)]
            with m.If(k_last):
                m.d.sync += [row0.eq(cur), rb.eq(0), rb_end.eq(~bfp), state.eq(S.MOVE), ld_on.eq(~mv_all)]
                with m.If(mv_all):
                    m.d.comb += self.done.eq(1)
                    m.d.sync += state.eq(S.IDLE)

        # --- STORE: SPAD beats (+ exponent beats) -> bus beats -> the writer ------------------------
        rq = ReadQueue(m, b.spad_rd, g, "rq")
        issued = Signal(21)
        storing = (state == S.MOVE) & store
        # the read address ins.spad + issued kept as a register, ``st_addr``, set and stepped with ``issued`` (round
        # 26: the word -> the add -> the owner's AND-OR in front of the SPAD's ``rd.addr``, 8.19 levels joined); the
        # SPAD reads it only under ``rd.en`` (``issue``, in MOVE, where it equals ins.spad + issued)
        st_addr = Signal(g.spad_bits)
        with m.If(state == S.CHECK):
            m.d.sync += [issued.eq(0), st_addr.eq(ins.spad)]
        m.d.comb += [rq.addr.eq(st_addr), rq.issue.eq(storing & rq.room & (issued != ins.beats))]
        with m.If(rq.issue):
            m.d.sync += [issued.eq(issued + 1), st_addr.eq(st_addr + 1)]
        first_exp = Signal(signed(EXP_BITS))
        exp_word = Signal(signed(32))
        m.d.comb += exp_word.eq(first_exp)
        inject = Signal()                      # the row's exponent beat goes next
        with m.If(inject):
            m.d.comb += [pk.i.valid.eq(1), pk.i.payload.eq(Cat(exp_word, Const(0, g.beat_bits - 32)))]
            with m.If(pk.i.ready):
                m.d.sync += [inject.eq(0), rb.eq(0)]
        with m.Else():
            m.d.comb += [pk.i.valid.eq(storing & rq.valid), pk.i.payload.eq(rq.words), rq.take.eq(storing & pk.i.ready)]
            with m.If(rq.valid & rq.take):
                m.d.sync += [moved.eq(moved + 1), rb.eq(rb + 1)]
                m.d.comb += mv_step.eq(1)
                with m.If(rb == 0):
                    m.d.sync += first_exp.eq(rq.exp)
                with m.If(bfp & (rb == rowb_m1)):
                    m.d.sync += inject.eq(1)
        m.d.comb += [b.wdata.tvalid.eq(pk.o.valid), b.wdata.tdata.eq(pk.o.payload), pk.o.ready.eq(b.wdata.tready),
                     b.wdata.tkeep.eq(-1)]
        with m.If(storing & mv_all & ~inject & ~pk.busy):
            m.d.sync += state.eq(S.WAIT)
        with m.If((state == S.WAIT) | storing):
            with m.If(b.wdone):
                m.d.sync += state.eq(S.IDLE)
                m.d.comb += self.done.eq(1)
        return m


# --- EMBED -------------------------------------------------------------------------------------------
class EmbedState(enum.Enum, shape=3):
    IDLE = 0
    CHECK = 1
    IDS = 2         # token ids in
    VERIFY = 3      # every id < vocab?
    ROWS = 4        # per token: the row's scales, then its nibbles -> X32 beats
    FINISH = 5      # the last beat written


class EmbedMover(Mover):
    """EMBED: ids from DDR (read stream 1), checked against ``vocab`` before any table read;
    then per token its table row (read stream 0): the scale region first (n / G uint16), then
    the nibbles, VL at a time -> sat32(rshr(q S, w_exp - 16)) -> SPAD (exponent 0).  Needs
    G >= VL (one scale per beat)."""
    OPS = (isa.Opcode.EMBED,)

    def elaborate(self, platform):
        m = Module()
        g, b = self.g, self.bus
        ins = self.view(isa.Opcode.EMBED)
        vl_log2 = _log2(g.vl)
        sdepth = g.max_n // g.vl                 # most groups in a row (G = VL)
        S = EmbedState
        state = Signal(S)
        m.d.comb += self.busy.eq(state != S.IDLE)
        with m.If(self.start):
            m.d.sync += state.eq(S.CHECK)

        # the decode in stages (``stage``; CHECK sees stage 3)
        groups = stage(m, ins.n >> ins.group_log2, "groups", 16)                           # stage 1
        gmask = stage(m, (Const(1, 17) << ins.group_log2) - 1, "gmask", 16)
        beats = stage(m, ins.n >> vl_log2, "beats", 16)
        # the last group's / beat's index as registers (round 20: gi == groups - 1 was 12 levels to cphase)
        groups_m1 = stage(m, groups - 1, "groups_m1", 16)                                   # stage 2
        beats_m1 = stage(m, beats - 1, "beats_m1", 16)
        p_dst = stage(m, stage(m, ins.count - 1, "count_m1", 10) * ins.dst_stride, "p_dst", 30)   # stage 2
        last_t = stage(m, ins.count - 1, "last_t")                                         # stage 1
        bad = stage(m, (ins.count == 0) | (ins.count > g.tokens) | (ins.n == 0)
                    | (ins.n[:vl_log2] != 0) | (ins.n > g.max_n) | (ins.group_log2 < vl_log2), "bad0")
        bad = stage(m, bad | ((ins.n & gmask) != 0) | (groups > sdepth), "bad1")           # stage 2
        bad = stage(m, bad | (ins.dst + p_dst + beats > g.spad_beats), "bad2")               # stage 3
        nib_bytes = stage(m, pad_up(ins.n >> 1), "nib_bytes", 17)
        # (as wide as the largest legal row needs, n <= max_n and G >= VL: the row offset's multiply is then one
        # DSP, not two and an adder; a refused instruction never multiplies)
        align = (1 << ALIGN_LOG2) - 1
        max_row = ((g.max_n // 2 + align) & ~align) + ((2 * (g.max_n // g.vl) + align) & ~align)
        row_bytes = stage(m, nib_bytes + pad_up(groups << 1), "row_bytes", max_row.bit_length())   # stage 2

        # --- ids ----------------------------------------------------------------------------------
        m.submodules.uid = uid = Unpacker(g.data_width, 32, count_bits=len(ins.count))
        ids = [Signal(32, name=f"id{t}") for t in range(g.tokens)]
        t = Signal(range(g.tokens + 1))
        badid = Signal()
        m.d.comb += [b.req1.payload.addr.eq(ddr_addr(ins.ids)),
                     b.req1.payload.beats.eq(ceil_beats(ins.count << 2, g.bus_log2)),
                     uid.cmd.payload.count.eq(ins.count),
                     uid.i.valid.eq(b.in1.valid), uid.i.payload.eq(b.in1.payload), b.in1.ready.eq(uid.i.ready)]
        with m.If(state == S.CHECK):
            with m.If(bad):
                self.refuse(m)
                m.d.sync += state.eq(S.IDLE)
            with m.Elif(b.req1.ready & uid.cmd.ready):
                m.d.comb += [b.req1.valid.eq(1), uid.cmd.valid.eq(1)]
                m.d.sync += [state.eq(S.IDS), t.eq(0), badid.eq(0)]
        m.d.comb += uid.o.ready.eq(state == S.IDS)
        with m.If((state == S.IDS) & uid.o.valid):
            for x in range(g.tokens):
                with m.If(t == x):
                    m.d.sync += ids[x].eq(uid.o.payload)
            with m.If(uid.o.payload >= ins.vocab):
                m.d.sync += badid.eq(1)
            m.d.sync += t.eq(t + 1)
            with m.If(t == last_t):
                m.d.sync += state.eq(S.VERIFY)
        with m.If(state == S.VERIFY):
            with m.If(badid):
                self.refuse(m, isa.SeqFault.ILLEGAL_TOKEN)
                m.d.sync += state.eq(S.IDLE)
            with m.Else():
                m.d.sync += state.eq(S.ROWS)

        # --- requests: per token the scale region, then the nibbles ---------------------------------
        # (token treq's row address in two registered steps: ``age`` cycles since treq last moved)
        treq = Signal(range(g.tokens + 1))
        rphase = Signal()
        cur_id = Signal(20)
        row_off = Signal(44)
        row_addr, scl_addr = Signal(ADDR_BITS), Signal(ADDR_BITS)
        age = Signal(2)
        # (cur_id = ids[treq] as a register, read at treq's next value (ids[0] in VERIFY): the multiplier's
        # operand straight from a register, not behind a choice of two read-ahead ids (9.4 levels through it)
        moving = Signal()                      # treq steps this cycle
        # (round 30b: held when treq does not move -- ids[treq] is cur_id then, the ids are written only in IDS --
        # and the step ``moving`` (the request's ready through the bus) and VERIFY the selects of one 4:1 choice,
        # a LUT6 a bit in the node's build: abc9 had put ``moving`` in front of the read-ahead's 16-way choice,
        # 9.0 levels from the instruction word)
        id_next = Signal(20)
        m.d.comb += id_next.eq(Array(ids)[treq + 1])
        m.d.sync += cur_id.eq(mux4(m, Cat(moving, state == S.VERIFY), [cur_id, id_next, ids[0][:20], ids[0][:20]],
                                   primitive=g.lut_primitive, name="cur_id_n"))
        m.d.sync += [row_off.eq(cur_id * row_bytes),
                     row_addr.eq(ddr_addr(ins.table) + row_off),
                     scl_addr.eq(ddr_addr(ins.table) + row_off + nib_bytes), age.eq(Mux(age == 2, 2, age + 1))]
        with m.If(state == S.VERIFY):
            m.d.sync += [treq.eq(0), rphase.eq(0), age.eq(0)]
        m.d.comb += [
            b.req0.valid.eq((state == S.ROWS) & (treq != ins.count) & (age == 2)),
            b.req0.payload.addr.eq(Mux(rphase, row_addr, scl_addr)),
            b.req0.payload.beats.eq(Mux(rphase, ceil_beats(ins.n >> 1, g.bus_log2),
                                        ceil_beats(groups << 1, g.bus_log2))),
        ]
        with m.If(b.req0.valid & b.req0.ready):
            m.d.sync += rphase.eq(~rphase)
            with m.If(rphase):
                m.d.comb += moving.eq(1)
                m.d.sync += [treq.eq(treq + 1), age.eq(0)]

        # --- consumer: scales into a small table, nibbles -> X32 beats --------------------------------
        m.submodules.us = us = Unpacker(g.data_width, 16, count_bits=len(groups))
        m.submodules.uq = uq = Unpacker(g.data_width, 4 * g.vl, count_bits=len(beats))
        m.submodules.smem = smem = memory.Memory(shape=16, depth=sdepth, init=[])
        sw, sr = smem.write_port(), smem.read_port(domain="comb")
        cphase = Signal(range(4))        # 0: arm scales, 1: scales, 2: arm nibbles, 3: nibbles
        tc = Signal(range(g.tokens + 1))
        gi = Signal(16)
        i = Signal(16)
        row = Signal(g.spad_bits + 16)
        with m.If(state == S.VERIFY):
            m.d.sync += [cphase.eq(0), tc.eq(0), row.eq(ins.dst)]
        rows = state == S.ROWS
        m.d.comb += [us.cmd.payload.count.eq(groups), uq.cmd.payload.count.eq(beats)]
        with m.If(rows & (cphase == 0) & us.cmd.ready):
            m.d.comb += us.cmd.valid.eq(1)
            m.d.sync += [cphase.eq(1), gi.eq(0)]
        with m.If(rows & (cphase == 2) & uq.cmd.ready):
            m.d.comb += uq.cmd.valid.eq(1)
            m.d.sync += [cphase.eq(3), i.eq(0)]
        # (cphase is 0 outside ROWS -- set so in VERIFY, back to 0 with ROWS' last beat -- so phases 1 and 3 need no
        # decode of the state: round 22, it was in front of the read stream's ready, 9.0 levels to its FIFO)
        # (round 33: the payloads whatever the phase, only the handshakes gated -- under the ``If`` they were zero
        # outside it, an AND a bit in front of the unpackers' memory writes)
        m.d.comb += [us.i.payload.eq(b.in0.payload), uq.i.payload.eq(b.in0.payload)]
        with m.If(cphase == 1):
            m.d.comb += [us.i.valid.eq(b.in0.valid), b.in0.ready.eq(us.i.ready)]
        with m.If(cphase == 3):
            m.d.comb += [uq.i.valid.eq(b.in0.valid), b.in0.ready.eq(uq.i.ready)]
        m.d.comb += [us.o.ready.eq(cphase == 1), sw.en.eq(us.o.valid & us.o.ready), sw.addr.eq(gi),
                     sw.data.eq(us.o.payload)]
        with m.If(sw.en):
            m.d.sync += gi.eq(gi + 1)
            with m.If(gi == groups_m1):
                m.d.sync += cphase.eq(2)
        # the scale of beat i: group (i VL) >> log2 G
        gshift = stage(m, ins.group_log2 - vl_log2, "gshift", 4)
        m.d.comb += sr.addr.eq(i >> gshift)
        # golden rshr(x, w_exp - 16) (``hw.arith.rshr`` with max_left 33) with its shift decoded in stages:
        # right by sc (capped at the product's width + 1) as ((x >> (sc - 1)) + 1) >> 1, or left by ``left``
        sh = stage(m, ins.w_exp - X_FRAC, "sh", signed(10))                                 # stage 1
        pw = W_BITS + 17                                                                   # product bits
        neg = stage(m, sh < 0, "sh_neg")                                                   # stage 2
        sc = stage(m, Mux(sh < 0, 0, Mux(sh > pw + 1, pw + 1, sh)), "sh_sc", range(pw + 2))
        # the shift as ONE arithmetic right shift of prod << 35 by 34 + sh clamped to -33 .. pw + 1 (``sh_a``, 1 .. 56):
        # prod << (left + 1) = (prod << 35) >> (34 - left), prod << 1 at sc = 0, prod >> (sc - 1) = (prod << 35) >> (34 + sc)
        # (round 24: a left and a right barrel shifter and a choice of three a lane before, ~0.6 K LUT more)
        sha = stage(m, Mux(sh < -33, 1, Mux(sh > pw + 1, pw + 35, sh + 34)), "sh_a", range(pw + 36))
        # (round 32) the clamp's overflow from the product and a mask of the shift, not from the shifted value's top
        # 23 bits (their shifter layers and their all-equal test, ~30 LUT a lane): only a left shift by L (sha 34 - L)
        # overflows int32 (a right one's result is within the product's width), iff a bit of prod << L at or above
        # bit 31 differs from prod's sign -- with d = Cat(sign, prod[:pw - 1] ^ sign) (d[0]: the zero shifted in below
        # prod, which differs from a negative sign), iff d[i] for an i >= sha - 2: (d & omask) != 0, omask[i] the
        # instruction's sha <= i + 2 (no bit for a right shift, nor for a left one by L <= 11, sha >= 23)
        omask = stage(m, Cat(*[Mux(sh < -33, 1, Mux(sh > pw + 1, 0, sh + 34 <= i + 2)) for i in range(pw)]),
                      "sh_omask", pw)                                                          # stage 2
        # the nibbles and their scale registered (av, aaddr), their products (pv, paddr), shifted (sv, saddr),
        # then saturated into the written beat (wv)
        # (and once more (bv, baddr, b_q, b_s) between the scale table's read and the products: the table's
        # block RAM then has its output register, not 3 levels of read in front of the multipliers; 9 measured)
        av, bv, pv, sv = Signal(), Signal(), Signal(), Signal()
        aaddr, baddr, paddr, saddr = Signal(g.spad_bits), Signal(g.spad_bits), Signal(g.spad_bits), Signal(g.spad_bits)
        a_q, b_q = Signal(W_BITS * g.vl), Signal(W_BITS * g.vl)
        a_s, b_s = Signal(16), Signal(16)
        m.d.sync += [b_q.eq(a_q), b_s.eq(a_s)]
        xs = []
        for k in range(g.vl):
            q = b_q[W_BITS * k:W_BITS * (k + 1)].as_signed()
            prod = Signal(signed(pw), name=f"eprod{k}")
            m.d.sync += prod.eq(q * b_s)
            # the shift as (t + c) >> 1: t registered ((prod << 35) >> sh_a: prod >> (sc - 1) with c = 1 to round, or
            # 2 prod, or 2 (prod << left) with c = 0), the rounding add after the register, in front of the saturation (the
            # shift and the add in one cycle measured 8.3 levels)
            # (round 32: t's low 33 bits only, the ones the sum reads; the overflow and the sign registered beside them)
            t = Signal(33, name=f"eshift{k}")
            c, ovf, sign = Signal(name=f"eround{k}"), Signal(name=f"eovf{k}"), Signal(name=f"esign{k}")
            d = Cat(prod[pw - 1], prod[:pw - 1] ^ prod[pw - 1].replicate(pw - 1))
            m.d.sync += [t.eq(_embed_shift(m, prod, sha, g.lut_primitive, f"esh{k}", out_bits=33)),
                         c.eq(~neg & (sc != 0)), ovf.eq((d & omask).any()), sign.eq(prod[pw - 1])]
            xs.append(_round_sat32(m, t, c, ovf, sign, k))
        wv = Signal()
        waddr = Signal(g.spad_bits)
        wdata = Signal(g.beat_bits)
        m.d.comb += uq.o.ready.eq(cphase == 3)
        m.d.sync += [av.eq(uq.o.valid & uq.o.ready), bv.eq(av), baddr.eq(aaddr), pv.eq(bv), paddr.eq(baddr),
                     sv.eq(pv), saddr.eq(paddr),
                     wv.eq(sv), waddr.eq(saddr), wdata.eq(Cat(*xs))]
        with m.If(uq.o.valid & uq.o.ready):
            m.d.sync += [aaddr.eq(row + i), a_q.eq(uq.o.payload), a_s.eq(sr.data), i.eq(i + 1)]
            with m.If(i == beats_m1):
                m.d.sync += [tc.eq(tc + 1), row.eq(row + ins.dst_stride), cphase.eq(0)]
                with m.If(tc == last_t):
                    m.d.sync += state.eq(S.FINISH)
        wr = b.spad_wr
        m.d.comb += [wr.lanes.eq(Mux(wv, (1 << g.vl) - 1, 0)), wr.exp_en.eq(wv), wr.addr.eq(waddr),
                     wr.data.eq(wdata), wr.exp.eq(0)]
        m.d.comb += b.starved.eq(rows & (((cphase == 1) & ~us.o.valid) | ((cphase == 3) & ~uq.o.valid)))
        with m.If((state == S.FINISH) & ~av & ~bv & ~pv & ~sv):    # the last beat is written this cycle
            m.d.comb += self.done.eq(1)
            m.d.sync += state.eq(S.IDLE)
        return m



def _embed_shift(m, prod: Value, sha: Value, primitive: bool, name: str, out_bits: int | None = None) -> Value:
    """EMBED's ``(prod << 35) >> sha`` (arithmetic, ``prod`` signed), or its low ``out_bits`` bits (round 32: 33, the
    ones the rounding sum reads; unsigned then).  ``primitive`` (round 29): as radix-4 layers of LUT6 4:1 choices
    (``mcf.hw.lut.shr_layers``, sha's bits two at a time, the low ones first), a bit whose four choices are one and the
    same (the zeros below prod << 35, its sign past the top) passed on, not instantiated: 23 + 35 + 55 LUT6 a lane of
    56 bits (23 + 35 + 33 of 33 bits) where ABC9 mapped the shift at ~138; else Amaranth's shift."""
    if not primitive:
        full = prod.shift_left(35) >> sha
        return full if out_bits is None else full[:out_bits]
    out = shr_layers(m, prod, 35, sha, 0, name, out_bits=out_bits)
    return out.as_signed() if out_bits is None else out


def _round_sat32(m, t: Value, c: Value, ovf: Value, sign: Value, k: int) -> Signal:
    """Golden ``sat((t + c) >> 1, 32)``: bits 1 .. 32 of t[:33] + c, or (``ovf``) the bound of ``sign`` (comb, signed 32).
    (round 32: the overflow known beside t -- only a left shift's, whose ``c`` is 0 -- so the bound is the sum's
    operand, not a choice behind the sum: with c = 0 the sum is its operand.  One LUT a bit in front of the add's
    carry chain; round 22's clamp from t's top bits and the sum's carry, ~55 LUT a lane with its choice, gone)"""
    bound = Cat(Const(0, 1), (~sign).replicate(31), sign)
    out = Signal(signed(32), name=f"eround_out{k}")
    m.d.comb += out.eq((Mux(ovf, bound, t[:33]) + c)[1:33])
    return out


# --- GEMM --------------------------------------------------------------------------------------------
class GemmState(enum.Enum, shape=3):
    IDLE = 0
    SETUP = 1       # products of the fields (registered)
    CHECK = 2       # ranges, alignment; start the weight, scale and bias streams
    ACT = 3         # activation rows -> the matrix unit's buffer
    RUN = 4         # the matrix unit streams; output beats -> SPAD
    FINISH = 5
    LOCATE = 6      # GEMM_QK: the block of the first key (tile0 P // block_keys) and its offset


class GemmMover(Mover):
    """GEMM (golden ``linear``) on the matrix unit.  Regions of the blob (``spec.isa.BlobLayout``)
    from tile0 on: weights through the ping-pong loader (descriptors of ``buffer_bytes``),
    scales on read stream 0, bias on read stream 1; they start streaming while the activation
    rows load.  Output beat (tile, t) -> words (tile - tile0) P .. + P - 1 of row t.

    GEMM_QK (``kv``: attention scores, golden ``scores``): the matrix is a run of K segments
    (``spec/kv.py``, ``block_keys`` keys each, block b's at seg + b seg_stride 64), a tile = P keys;
    the scale words (one A | E << 8 word per key: a scale beat per tile) on read stream 0, one
    request per block, the rows (key-major) through the loader, one descriptor per block (or per
    ``buffer_bytes`` of it), and a ``TileReorder`` (key-major tiles -> weight beats) into the matrix
    unit, which takes one group of G = head_dim, S = A and each key's own exponent E: both streams
    are the blocks' pieces back to back, so a tile may span blocks and a block many tiles.  The
    block of the first key tile0 P and its offset come from a serial division (``LOCATE``, about
    16 + log2 P cycles).  The activation rows are (token, head): src + t src_stride + h head_stride,
    row t heads + h.  Built when head_dim <= max_group and head_dim / K <= P (else GEMM_QK faults);
    the run limits of ``spec.isa.gemm_qk_run_ok`` (whole bus beats / loader words per block) are
    refused too.

    GEMM_PV (attention PV, golden ``state_sums``' o): the matrix is V^T of a V segment or of a run
    of them (``block_keys`` > 0: one descriptor per block's rows region, back to back): the rows
    (key-major) through the loader and a ``PvReorder`` (K keys -> head_dim / P channel-tile
    beats; tiles outside tile0 .. tile0 + tiles - 1 are dropped) into the matrix unit's pv mode.
    The weight rows (token, head) are read like kv activation rows; each K-word read is split into
    two buffer words, the hi and the lo digits of min(w, W_MAX).  With ``acc`` the previous wide
    rows at dst stream into the matrix unit's ``prev`` after the activations (beat by beat, in the
    output order); the output beats (sat32, or the low then the high words) -> SPAD.  Built when
    P >= VL, K >= VL, P divides head_dim and head_dim divides P K (else GEMM_PV faults)."""
    OPS = (isa.Opcode.GEMM, isa.Opcode.GEMM_PV, isa.Opcode.GEMM_QK)

    def __init__(self, g: Geometry):
        super().__init__(g)
        self.kv_beats = g.head_dim // g.lanes           # J: weight beats of one key tile
        self.has_kv = (g.head_dim <= g.max_group and g.head_dim % g.lanes == 0 and 1 <= self.kv_beats <= g.rows)
        self.has_pv = isa.gemm_pv_built(g.rows, g.lanes, g.vl, g.head_dim)
        self.pv_tiles = g.head_dim // g.rows if self.has_pv else 0     # C: channel tiles of head_dim
        # GEMM_QK's / GEMM_PV's weight descriptors: at most half a loader buffer (and whole loader words), so that
        # each loader's two buffers hold two of them in flight (the port busy while the other drains) and the
        # first tile waits for half a buffer, not a whole one (docs/attention-array.md, round 17)
        self.run_desc_bytes = max(g.buffer_bytes // 2, g.weight_beats * g.bus_bytes)
        # GEMM_QK's score words as they go to SPAD (the execute unit hands them to the AttnMover for
        # an ATTN_SM MAX with defer): ``qk_en`` a write of row ``qk_row``'s words ``qk_key`` .. (up to
        # spad_banks x VL of them, word 0 first, in ``qk_data``); ``qk_end`` the GEMM_QK's end
        mw = g.spad_banks * g.vl
        self.qk_en, self.qk_end = Signal(), Signal()
        self.qk_row, self.qk_key = Signal(range(g.tokens + 1)), Signal(24)
        self.qk_data = Signal(mw * 32)
        self.qk_n = Signal(range(mw + 1))               # words in qk_data
        # The matrix unit requantizes R rows a cycle (a beat in P / R cycles): R >= VL keeps up with
        # this mover's SPAD writes of a GEMM beat (P / VL cycles), R >= P / J with a GEMM_QK tile's
        # issue (J weight beats x T tokens for T beats); the smallest divisor of P that does both.
        need = max(g.vl, -(-g.rows // self.kv_beats) if self.has_kv else 1)
        self.requant_rows = min(r for r in range(1, g.rows + 1) if g.rows % r == 0 and r >= min(need, g.rows))
        self.matrix = MatrixUnit(g.rows, g.lanes, g.tokens, g.max_n, (1 << 16) - 1, max_group=g.max_group,
                                 primitive=g.primitive, streamed=True, pv_tiles=self.pv_tiles,
                                 requant_rows=self.requant_rows,
                                 # (round 29) pv's y = acc + prev on its significant bits: a GEMM_PV chain
                                 # sums at most max_keys keys (mx29: -1 150 LUT at the Qwen node, measured)
                                 pv_keys=g.max_keys)

    def elaborate(self, platform):
        m = Module()
        g, b = self.g, self.bus
        P, K, VL, TM = g.rows, g.lanes, g.vl, g.tokens
        p_log2, k_log2, vl_log2 = _log2(P), _log2(K), _log2(VL)
        m.submodules.matrix = mx = self.matrix
        ins = self.view(isa.Opcode.GEMM)
        S = GemmState
        state = Signal(S)
        m.d.comb += self.busy.eq(state != S.IDLE)
        with m.If(self.start):
            m.d.sync += state.eq(S.SETUP)

        pins = self.view(isa.Opcode.GEMM_PV)
        qins = self.view(isa.Opcode.GEMM_QK)
        pv_op = Signal()                               # a GEMM_PV (the GEMM view's fields mean nothing then)
        qk_op = Signal()                               # a GEMM_QK
        # the decode in stages (``stage``): the fields as registers (stage 1), their products (2, 3), the
        # ranges in SETUP (the unit starts a mover SETUP_CYCLES = 2 cycles after the word: SETUP sees stage 3)
        pv_raw, qk_raw = self.instr[:6] == int(isa.Opcode.GEMM_PV), self.instr[:6] == int(isa.Opcode.GEMM_QK)
        m.d.sync += [pv_op.eq(pv_raw), qk_op.eq(qk_raw)]
        pv = Signal()
        m.d.comb += pv.eq(pv_op if self.has_pv else 0)
        C = max(self.pv_tiles, 1)
        kv = Signal()
        m.d.comb += kv.eq(qk_op if self.has_kv else 0)
        # a GEMM_QK whose first key needs LOCATE (stage 1)
        located = stage(m, (qk_raw if self.has_kv else 0) & (qins.tile0 != 0), "located")
        # the fields all three instructions have
        f_tokens, f_tiles, f_tile0 = Signal(10), Signal(16), Signal(16)
        f_src, f_src_stride, f_head_stride = Signal(isa.SPAD_BITS), Signal(16), Signal(16)
        f_dst, f_dst_stride, f_bias = Signal(isa.SPAD_BITS), Signal(16), Signal()
        f_n = Signal(16)                               # inputs of an activation row (pv: keys; kv: head_dim)

        def pick(name, gemm):
            return Mux(pv_raw, getattr(pins, name), Mux(qk_raw, getattr(qins, name), gemm))
        m.d.sync += [f_tokens.eq(pick("tokens", ins.tokens)), f_tiles.eq(pick("tiles", ins.tiles)),
                     f_tile0.eq(pick("tile0", ins.tile0)), f_src.eq(pick("src", ins.src)),
                     f_src_stride.eq(pick("src_stride", ins.src_stride)),
                     f_head_stride.eq(pick("head_stride", 0)),
                     f_dst.eq(pick("dst", ins.dst)), f_dst_stride.eq(pick("dst_stride", ins.dst_stride)),
                     f_bias.eq(ins.bias & ~pv_raw & ~qk_raw),
                     f_n.eq(Mux(pv_raw, pins.keys, Mux(qk_raw, g.head_dim, ins.n)))]
        heads = Signal(6)                              # activation rows per token (kv, pv: the GQA group)
        m.d.sync += heads.eq(Mux(pv_raw, pins.heads, Mux(qk_raw, qins.heads, 1)))
        npg = Signal(16)                               # groups per row, n / G (kv: one; pv: key beats)
        m.d.sync += npg.eq(Mux(pv_raw, pins.keys >> k_log2, Mux(qk_raw, 1, ins.n >> ins.group_log2)))
        wide_o = Signal()                              # pv wide: two words (low, high) an element
        m.d.sync += wide_o.eq((pv_raw if self.has_pv else 0) & pins.wide)
        gmask = stage(m, (Const(1, 17) << ins.group_log2) - 1, "gmask", 16)
        t0n, ttn, tn = Signal(32), Signal(32), Signal(32)
        t0g, ttg, tg = Signal(32), Signal(32), Signal(32)
        m.d.sync += [t0n.eq(ins.tile0 * ins.n), ttn.eq(ins.total_tiles * ins.n), tn.eq(f_tiles * f_n),    # stage 1, 2
                     t0g.eq(ins.tile0 * npg), ttg.eq(ins.total_tiles * npg), tg.eq(f_tiles * npg)]        # stage 2
        src_bad, dst_bad = Signal(), Signal()          # the last activation / output row past the SPAD
        nrows = Signal(16)                             # activation / output rows: tokens x heads
        nrows_big = Signal()
        out_beats = Signal(17)                         # SPAD beats of one output row
        # (pv: the wide layout when it writes it or reads it, acc)
        m.d.sync += out_beats.eq((((f_tiles << p_log2) + VL - 1) >> vl_log2) << (wide_o | (pv & pins.acc)))  # stage 2
        tok_m1 = stage(m, pick("tokens", ins.tokens) - 1, "tok_m1", 10)                     # stage 1
        heads_m1 = stage(m, Mux(pv_raw, pins.heads, Mux(qk_raw, qins.heads, 1)) - 1, "heads_m1", 6)
        p_src = stage(m, tok_m1 * f_src_stride, "p_src", 26)                                 # stage 2
        p_hd = stage(m, heads_m1 * f_head_stride, "p_hd", 22)
        nrows_s = stage(m, f_tokens * heads, "nrows_s", 16)
        # (tokens - 1) heads + heads - 1 in the low log2(max_tokens) bits: rows - 1 whenever rows <= max_tokens (more
        # are refused, nrows_big, as are tokens = 0 and heads = 0), a small product in LUTs (4 levels), not an
        # unregistered DSP and a subtraction after it (round 21: 8.2 levels)
        nr_w = max(ceil_log2(TM), 1)
        nrows_m1 = stage(m, (tok_m1[:nr_w] * heads[:nr_w] + heads_m1[:nr_w])[:nr_w], "nrows_m1", 16)
        tiles_m1 = stage(m, f_tiles - 1, "tiles_m1", 16)                                    # stage 2
        p_dst = stage(m, nrows_m1 * f_dst_stride, "p_dst", 32)                               # stage 3
        with m.If(state == S.SETUP):
            m.d.sync += [src_bad.eq(f_src + p_src + p_hd + (f_n >> vl_log2) > g.spad_beats),
                         nrows.eq(nrows_s), nrows_big.eq(nrows_s > TM),
                         dst_bad.eq(f_dst + p_dst + out_beats > g.spad_beats),
                         state.eq(Mux(located, S.LOCATE, S.CHECK))]
        # GEMM_QK from tile0 > 0: block b0 = tile0 P // block_keys of the first key, its offset o in it,
        # b0 seg_stride (tile0 = 0: block 0, key 0, no division)
        m.submodules.locate = loc = SerialDivider(16 + p_log2, 16, 26)
        # (SETUP is the cycle after ``start``, a register: the divider's start from a register of it, not from the
        # state's decode -- round 20: gemm.state -> the divider's qm 10.5)
        in_setup = Signal()
        m.d.sync += in_setup.eq(self.start)
        m.d.comb += [loc.start.eq(in_setup & located), loc.a.eq(qins.tile0 << p_log2),
                     loc.b.eq(qins.block_keys), loc.m.eq(qins.seg_stride)]
        loc_done = Signal(2)                           # the run's registers (below) settle in 3 cycles
        m.d.sync += loc_done.eq(Cat(loc.done, loc_done[0]))
        with m.If((state == S.LOCATE) & loc_done[1]):
            m.d.sync += state.eq(S.CHECK)

        def w_bytes(x):      # x * n * P / 2
            return (x << p_log2) >> 1

        w0, wt, ttw = w_bytes(t0n), w_bytes(tn), w_bytes(ttn)
        s0, st, tts = t0g << (p_log2 + 1), tg << (p_log2 + 1), ttg << (p_log2 + 1)
        b0, bt = ins.tile0 << (p_log2 + 2), ins.tiles << (p_log2 + 2)
        blob = ddr_addr(ins.blob)
        w_addr, s_addr, b_addr = Signal(ADDR_BITS), Signal(ADDR_BITS), Signal(ADDR_BITS)
        m.d.sync += [w_addr.eq(blob + w0), s_addr.eq(blob + pad_up(ttw) + s0),                      # stage 3
                     b_addr.eq(blob + pad_up(ttw) + pad_up(tts) + b0)]
        # block runs (GEMM_QK; GEMM_PV with block_keys > 0): block b's segment at seg + b seg_stride 64, its
        # scale region (pad(2 block_keys) bytes) first, then its rows (head_dim / 2 bytes a key).  GEMM_QK
        # starts at key o of block b0 (LOCATE), GEMM_PV at key 0 of block 0.
        row_log2 = _log2(g.head_dim) - 1
        word = g.weight_beats * g.bus_bytes            # bytes of one word of the weight stream
        r_bk = Signal(16)                              # keys per block (PV without a run: all its keys)
        r_o = Signal(16)                               # the first key's offset in its block
        r_seg = Signal(ADDR_BITS)                      # the first key's block
        # (registered in stages: r_bk 1; r_o, r_seg, r_step, r_keys 2 (LOCATE: 1 after its result); r_rows,
        # multi 3; bad_run 4 -- CHECK comes at stage 4, or 3 cycles after LOCATE's result)
        m.d.sync += [r_bk.eq(Mux(qk_raw, qins.block_keys, Mux(pins.block_keys == 0, pins.keys, pins.block_keys))),
                     r_o.eq(Mux(located, loc.r, 0)),
                     r_seg.eq(Mux(qk_op, ddr_addr(qins.seg) + Mux(located, loc.qm << ALIGN_LOG2, 0), ddr_addr(pins.seg)))]
        r_rows = Signal(ADDR_BITS)                     # the first key's row
        r_step = Signal(ADDR_BITS)                     # bytes between blocks
        m.d.sync += [r_rows.eq(r_seg + pad_up(r_bk << 1) + (r_o << row_log2)),
                     r_step.eq(Mux(qk_op, qins.seg_stride, pins.seg_stride) << ALIGN_LOG2)]
        r_keys = Signal(32)                            # keys read
        m.d.sync += r_keys.eq(Mux(qk_op, f_tiles << p_log2, pins.keys))
        multi = Signal()                               # the keys span several blocks
        m.d.sync += multi.eq(r_o + r_keys > r_bk)
        # (spec.isa.gemm_qk_run_ok): every descriptor but the last whole loader words, every scale request
        # but the last whole bus beats, both starting on a bus beat
        bad_run = Signal()
        m.d.sync += bad_run.eq((r_bk == 0) | ((r_o << row_log2)[:g.bus_log2] != 0)
                               | (qk_op & ((r_o << 1)[:g.bus_log2] != 0))
                               | (multi & (((r_bk << row_log2) & (word - 1)) != 0))
                               | (multi & (((r_o << row_log2) & (word - 1)) != 0))
                               | (multi & qk_op & (((r_bk << 1) & (g.bus_bytes - 1)) != 0)))
        low = (1 << ALIGN_LOG2) - 1
        pv_static = stage(m, stage(m, (pins.tokens == 0) | (pins.heads == 0) | (pins.tiles == 0)
                                   | (pins.tile0 + pins.tiles > C) | (pins.keys == 0) | (pins.keys[:k_log2] != 0)
                                   | ((pins.keys << 1) > g.max_n), "pv_static0"), "pv_static")
        pv_acc_bad = stage(m, pins.acc & (nrows_s > 1) & (pins.dst_stride < out_beats), "pv_acc_bad")     # stage 3
        qk_static = stage(m, (qins.tokens == 0) | (qins.heads == 0) | (qins.tiles == 0), "qk_static")
        g_static = stage(m, (ins.tokens == 0) | (ins.tiles == 0)
                         | (ins.tile0 + ins.tiles > ins.total_tiles) | (ins.n == 0) | (ins.n > g.max_n)
                         | (ins.n[:vl_log2] != 0)
                         | (ins.group_log2 < k_log2) | (ins.group_log2 > _log2(g.max_group)), "g_static0")
        g_static = stage(m, g_static | ((ins.n & gmask) != 0), "g_static")                  # stage 2
        # CHECK's refusal: the terms of one opcode chosen a stage ahead (``bad_fix``, stage 4), then ORed with
        # SETUP's and the run's (round 20: the choice by opcode after them, gemm.pv -> the unit's state 11.0)
        bad_fix = stage(m, Mux(pv_op, ~pv | pv_static | pv_acc_bad,
                               Mux(qk_op, ~kv | qk_static,
                                   g_static | ((w0 & low) != 0) | ((s0 & low) != 0) | (ins.bias & ((b0 & low) != 0)))),
                        "bad_fix")
        bad = Signal()
        m.d.comb += bad.eq(bad_fix | nrows_big | src_bad | dst_bad | ((pv_op | qk_op) & bad_run))

        # --- the streams: weights (loader), scales (stream 0), bias (stream 1) ----------------------
        # The weight path's width: the loader's word when a beat is several of them and the reorders can move
        # words (``words`` = n > 1: whole keys in a word, a word whole channels of the pv beat), else the beat.
        BB, word_bits = P * K * W_BITS, g.data_width * g.weight_beats
        key_bits = g.head_dim * W_BITS
        whole = word_bits <= BB and word_bits % key_bits == 0
        n = BB // word_bits if word_bits < BB else 1
        wmode = (n > 1 and (not self.has_kv or (whole and P % (n * self.kv_beats) == 0))
                 and (not self.has_pv or (whole and P % n == 0 and (P * K // g.head_dim) % n == 0)))
        if not wmode:
            n = 1
        m.submodules.uw = uw = Unpacker(word_bits, word_bits if wmode else BB)
        m.submodules.us = us = Unpacker(g.data_width, P * 16)
        m.submodules.ub = ub = Unpacker(g.data_width, P * 32, count_bits=len(ins.tiles))
        # scale requests on stream 0: one (GEMM), or one per block of the run (GEMM_QK): each its block's
        # scale words from the first key's on (the block's bytes: the first block's from key o, the others' all), sq_left
        # bytes in all.  The next request's length (``sq_len``, the minimum of the two) and beats are registers, set
        # with sq_left (round 22: the compare, the choice and the round-up add in front of the read stream's count,
        # 8.19 levels)
        sq_addr, sq_base = Signal(ADDR_BITS), Signal(ADDR_BITS)
        sq_left = Signal(COUNT_BITS)
        sq_len, sq_beats = Signal(COUNT_BITS), Signal(COUNT_BITS)
        m.d.comb += [
            b.req0.payload.addr.eq(sq_addr), b.req0.payload.beats.eq(sq_beats),
            b.req1.payload.addr.eq(b_addr), b.req1.payload.beats.eq(ceil_beats(bt, g.bus_log2)),
            uw.cmd.payload.count.eq(Mux(pv, (pins.keys >> k_log2) << _log2(C), tn >> k_log2) << _log2(n)),
            us.cmd.payload.count.eq(tg), ub.cmd.payload.count.eq(ins.tiles),
            uw.i.valid.eq(b.ldata.tvalid), b.ldata.tready.eq(uw.i.ready),
            us.i.valid.eq(b.in0.valid), us.i.payload.eq(b.in0.payload), b.in0.ready.eq(us.i.ready),
            ub.i.valid.eq(b.in1.valid), ub.i.payload.eq(b.in1.payload), b.in1.ready.eq(ub.i.ready),
            mx.w.tkeep.eq(-1), mx.w.tlast.eq(0),
            mx.scale.valid.eq(us.o.valid), mx.scale.payload.eq(us.o.payload), us.o.ready.eq(mx.scale.ready),
            mx.bias.valid.eq(ub.o.valid), mx.bias.payload.eq(ub.o.payload), ub.o.ready.eq(mx.bias.ready),
        ]
        pre_kv = self.has_kv and whole and self.kv_beats > 1
        pre_pv = self.has_pv and whole and (C > 1 or wmode)
        take = mx.w.tready
        if wmode:
            # The weight path a loader word wide (n words a beat).  The sources: plain GEMM the loader's words;
            # kv the tile reorder's, pv the pv reorder's (both move words: ``words``); a word-wide choice of the
            # three (its selects registers of the instruction) feeds the ONE register of a beat, a deserializer
            # of n words (a clock enable a word): the beat the matrix takes at its first issue (``MatrixUnit.w``;
            # the array holds it: ``DotArray.w_hold``).  The take frees it: its first word may go in that cycle.
            WB = word_bits
            # the chosen source's word (``keep``: one choice a bit for the register's n words, not one a word:
            # measured, the LUT mapping gave each of the 8 192 register bits its own LUT5 of the choice); taken
            wv, wd, wr = Signal(), Signal(WB, attrs={"keep": 1}), Signal()
            # plain words: through a queue of two beats' words (LUT RAM, as deep as the beat queue it replaces:
            # the loader's words keep coming while the matrix waits), straight past it when it is empty
            m.submodules.wq = wq = fifo.SyncFIFO(width=WB, depth=2 * n)
            plain = ~pv & ~kv
            direct = Signal()
            # (the loader's ready is the queue's room alone: a word goes past only when the queue is empty, which
            # then has room, so ``direct | w_rdy`` is ``w_rdy``; written so, the matrix's take (``wr``) does not
            # reach the loaders' ready in the cycle it is given)
            m.d.comb += [direct.eq(~wq.r_rdy & wr),
                         wv.eq(wq.r_rdy | uw.o.valid), uw.o.ready.eq(wq.w_rdy),
                         wq.w_en.eq(plain & uw.o.valid & ~direct), wq.w_data.eq(b.ldata.tdata),
                         wq.r_en.eq(plain & wr)]
            # (the loader's word as it comes: the reorders' write rotations, 0 in plain mode, not in its path)
            wsrc = Mux(wq.r_rdy, wq.r_data, b.ldata.tdata)
            if self.has_kv:
                m.submodules.reorder = ro = TileReorder(P, K, self.kv_beats, prerotated=pre_kv, words=n,
                                                        primitive=g.lut_primitive)
                m.d.comb += [ro.i.valid.eq(kv & uw.o.valid), ro.i.payload.eq(uw.o.payload), ro.o.ready.eq(kv & wr)]
                with m.If(kv):
                    m.d.comb += [uw.o.ready.eq(ro.i.ready), wv.eq(ro.o.valid)]
                wsrc = Mux(kv, ro.o.payload, wsrc)
            if self.has_pv:
                m.submodules.pv_reorder = pro = PvReorder(P, K, g.head_dim, prerotated=pre_pv, words=n,
                                                          primitive=g.lut_primitive)
                pc = Signal(range(C))                      # channel tile of the reorder's next word
                pw = Signal(range(n))                      # the word of that tile's beat
                in_tiles = Signal(C)                       # the channel tiles kept (registered: fields of the instruction)
                m.d.sync += in_tiles.eq(Cat(*[(c >= pins.tile0) & (c < pins.tile0 + pins.tiles) for c in range(C)]))
                keep = in_tiles.bit_select(pc, 1) if C > 1 else in_tiles[0]
                # a beat of a tile outside the instruction's leaves the reorder in one cycle (``skip``)
                m.d.comb += [pro.i.valid.eq(pv & uw.o.valid), pro.i.payload.eq(uw.o.payload),
                             pro.o.ready.eq(pv & (wr | ~keep)), pro.skip.eq(~keep)]
                with m.If(pro.o.valid & pro.o.ready):
                    m.d.sync += pw.eq(pw + 1)
                    with m.If((pw == n - 1) | ~keep):
                        m.d.sync += [pw.eq(0), pc.eq(Mux(pc == C - 1, 0, pc + 1))]
                with m.If(state == S.CHECK):
                    m.d.sync += [pc.eq(0), pw.eq(0)]
                with m.If(pv):
                    m.d.comb += [uw.o.ready.eq(pro.i.ready), wv.eq(pro.o.valid & keep)]
                wsrc = Mux(pv, pro.o.payload, wsrc)
            if self.has_kv and self.has_pv and g.lut_primitive:
                # (round 28) the same four-way choice as one LUT6 a bit by an encoded select (ABC9 maps the
                # inferred chain of choices at ~1.5 LUT a bit)
                wsrc = mux4(m, Mux(pv, 0, Mux(kv, 1, Mux(wq.r_rdy, 2, 3))),
                            [pro.o.payload, ro.o.payload, wq.r_data, b.ldata.tdata], primitive=True, name="wsrc")
            m.d.comb += wd.eq(wsrc)
            # the deserializer: slot ws takes the next word; full after the n-th, until the matrix takes the beat
            slots = [Signal(WB, name=f"wslot{x}") for x in range(n)]
            ws, wfull = Signal(range(n)), Signal()
            m.d.comb += [wr.eq(~wfull | take), mx.w.tvalid.eq(wfull), mx.w.tdata.eq(Cat(*slots))]
            with m.If(wv & wr):
                m.d.sync += ws.eq(ws + 1)
                for x in range(n):
                    with m.If(ws == x):
                        m.d.sync += slots[x].eq(wd)
            with m.If(wv & wr & (ws == n - 1)):
                m.d.sync += wfull.eq(1)
            with m.Elif(take):
                m.d.sync += wfull.eq(0)
        else:
            # The weight beats' sources: plain GEMM the unpacker's beats; kv the tile reorder's (key-major
            # tiles -> weight beats); pv the pv reorder's (V^T beats, channel tile by tile; tiles outside
            # tile0 .. tile0 + tiles - 1 are dropped).  The matrix takes a beat at its first issue and holds it
            # for the beat's other issues (``MatrixUnit.w``); the reorders hold theirs (double-buffered)
            # until taken, and plain beats of several loader words go through a two-deep queue (``wq``, LUT RAM,
            # no choice in front: the unpacker's registers and its last word), so that the unpacker gathers the
            # next meanwhile (as many beats ahead as before the matrix held its beat).
            # The three are one choice a bit in front of the matrix (the pv reorder's read multiplexer).
            plain = ~pv & ~kv
            plain_d, plain_v, plain_r = Signal(P * K * W_BITS), Signal(), Signal()
            if P * K * W_BITS > g.data_width * g.weight_beats:
                m.submodules.wq = wq = fifo.SyncFIFO(width=P * K * W_BITS, depth=2)
                m.d.comb += [wq.w_en.eq(uw.o.valid & plain), wq.w_data.eq(uw.o.payload), plain_r.eq(wq.w_rdy),
                             plain_v.eq(wq.r_rdy), plain_d.eq(wq.r_data), wq.r_en.eq(take & plain)]
            else:
                m.d.comb += [plain_d.eq(uw.o.payload), plain_v.eq(uw.o.valid), plain_r.eq(take)]
            wv, wdata = Signal(), Signal(P * K * W_BITS)
            uw_r = Signal()
            m.d.comb += [uw_r.eq(plain_r), wv.eq(plain_v), wdata.eq(plain_d)]
            if self.has_kv:
                m.submodules.reorder = ro = TileReorder(P, K, self.kv_beats, prerotated=pre_kv)
                # the data whatever the mode (only the valids are gated: no AND a bit in front of the tile reorder)
                m.d.comb += [ro.i.valid.eq(kv & uw.o.valid), ro.i.payload.eq(uw.o.payload), ro.o.ready.eq(kv & take)]
                with m.If(kv):
                    m.d.comb += [uw_r.eq(ro.i.ready), wv.eq(ro.o.valid)]
                if not self.has_pv:
                    m.d.comb += wdata.eq(Mux(kv, ro.o.payload, plain_d))
            if self.has_pv:
                # the source choice is made in the pv reorder's read multiplexer (``alt``: 0 the plain beat,
                # 1 the tile reorder's)
                m.submodules.pv_reorder = pro = PvReorder(P, K, g.head_dim, alternates=2 if self.has_kv else 1,
                                                          prerotated=pre_pv)
                pc = Signal(range(C))                      # channel tile of the reorder's next beat
                in_tiles = Signal(C)                       # the channel tiles kept (registered: fields of the instruction)
                m.d.sync += in_tiles.eq(Cat(*[(c >= pins.tile0) & (c < pins.tile0 + pins.tiles) for c in range(C)]))
                keep = in_tiles.bit_select(pc, 1) if C > 1 else in_tiles[0]
                m.d.comb += [pro.i.valid.eq(pv & uw.o.valid), pro.i.payload.eq(uw.o.payload),
                             pro.o.ready.eq(pv & (take | ~keep))]
                with m.If(pro.o.valid & pro.o.ready):
                    m.d.sync += pc.eq(Mux(pc == C - 1, 0, pc + 1))
                with m.If(state == S.CHECK):
                    m.d.sync += pc.eq(0)
                m.d.comb += [wdata.eq(pro.o.payload), pro.alt[0].eq(plain_d),
                             pro.alt_sel.eq(Mux(pv, 0, Mux(kv, 2, 1)) if self.has_kv else ~pv)]
                if self.has_kv:
                    m.d.comb += pro.alt[1].eq(ro.o.payload)
                with m.If(pv):
                    m.d.comb += [uw_r.eq(pro.i.ready), wv.eq(pro.o.valid & keep)]
            m.d.comb += [uw.o.ready.eq(uw_r), mx.w.tvalid.eq(wv), mx.w.tdata.eq(wdata)]
        # the reorders' write rotations on the loader's words (``prerotated``: wiring at the banks)
        w_in = b.ldata.tdata
        if pre_kv and pre_pv and K % pro.piece == 0:
            # both are rotations of a key's pieces (the tile reorder's of K nibbles, the pv reorder's of R):
            # one rotation of pieces of R nibbles, by the pv reorder's amount or K / R times the tile reorder's
            # (never both at once: one radix-4 rotation a bit, not two chained)
            R = pro.piece
            w_in = rotate_pieces(w_in, Mux(pv, pro.rot, Mux(kv, ro.rot << _log2(K // R), 0)), R * W_BITS,
                                 g.head_dim // R, m=m, primitive=g.lut_primitive)
        else:
            if pre_kv:
                w_in = TileReorder.rotate(w_in, Mux(kv, ro.rot, 0), K, self.kv_beats)
            if pre_pv:
                w_in = PvReorder.rotate(w_in, Mux(pv, pro.rot, 0), pro.piece, g.head_dim)
        m.d.comb += uw.i.payload.eq(w_in)
        # weight descriptors: at most buffer_bytes (GEMM_QK / GEMM_PV: ``run_desc_bytes``, half of it) and never
        # past the end of a block's rows (wd_blk bytes left in it; a plain GEMM is one block), alternating buffers;
        # a block's end moves to the next block's rows (wd_naddr: the next block's rows, its segment + the scale
        # region).  Each descriptor is computed a stage early: wd_len = min(wd_blk, wd_left, cap), its flags
        # (wd_lt: wd_blk < wd_left, wd_le: wd_blk <= wd_left, wd_end: it ends the block, wd_len == wd_blk) and
        # the valid (wd_v: wd_left != 0) are registers, loaded in CHECK from stage registers and at each
        # descriptor taken from the next wd_blk / wd_left (round 20: the compares and the minimum in front of
        # the payload, the valid and wd_blk / wd_addr, 10 - 12 levels).
        wd_addr, wd_naddr = Signal(ADDR_BITS), Signal(ADDR_BITS)
        wd_left, wd_blk = Signal(COUNT_BITS), Signal(COUNT_BITS)
        wd_buf = Signal(range(g.buffers))
        wd_len = Signal(COUNT_BITS)
        wd_lt, wd_le, wd_end, wd_v = Signal(), Signal(), Signal(), Signal()
        r_step_q = Signal(ADDR_BITS)                                # the run's (registered): block stride,
        r_blk_q, r_sblk_q = Signal(COUNT_BITS), Signal(18)          # rows / scale bytes a block
        rb_big_q = Signal()                                         # r_blk_q > the cap
        run_q = Signal()                                            # a GEMM_QK / GEMM_PV: the cap run_desc_bytes
        cap = self.run_desc_bytes

        def capped(x, run):          # x > the cap (a choice of two compares with constants)
            return Mux(run, x > cap, x > g.buffer_bytes)

        def first(blk, left, lt, bbig, lbig, run):
            """min(blk, left, cap) from compares side by side (not two in a row)"""
            return Mux(Mux(lt, bbig, lbig), Mux(run, cap, g.buffer_bytes), Mux(lt, blk, left))
        # CHECK's: the first descriptor from stage registers (stage 3: its blk / left, stage 4: their compares)
        run_i = pv | kv
        i_blk = stage(m, Mux(run_i, (r_bk - r_o) << row_log2, wt), "wd_i_blk", COUNT_BITS)
        i_left = stage(m, Mux(pv, pins.keys << row_log2, wt), "wd_i_left", COUNT_BITS)
        i_lt = stage(m, i_blk < i_left, "wd_i_lt")
        i_le = stage(m, i_blk <= i_left, "wd_i_le")
        i_bbig = stage(m, capped(i_blk, run_i), "wd_i_bbig")
        i_lbig = stage(m, capped(i_left, run_i), "wd_i_lbig")
        i_v = stage(m, i_left != 0, "wd_i_v")
        i_rbig = stage(m, capped(r_bk << row_log2, run_i), "wd_i_rbig")          # stage 2
        i_naddr = stage(m, r_seg + r_step + pad_up(r_bk << 1), "wd_i_naddr", ADDR_BITS)   # stage 3
        # the first scale request's length min(sq_blk, sq_left) and beats (stage 4)
        i_sqb = stage(m, Mux(kv, (r_bk - r_o) << 1, st), "sq_i_blk", COUNT_BITS)            # stage 3
        i_sql = stage(m, Mux(pv, 0, st), "sq_i_left", COUNT_BITS)
        i_sqm = Mux(i_sqb < i_sql, i_sqb, i_sql)
        i_sqn = stage(m, i_sqm, "sq_i_len", COUNT_BITS)                                      # stage 4
        i_sqv = stage(m, i_sql != 0, "sq_i_v")
        i_sqbeats = stage(m, ceil_beats(i_sqm, g.bus_log2), "sq_i_beats", COUNT_BITS)
        # the next descriptor's compares without a subtraction in front (round 21: wd_left - wd_len, then its
        # compares with r_blk_q and the cap, 9.4 levels): wd_left and wd_blk are also kept less the block's rows
        # / the cap (``wd_lmr`` = wd_left - r_blk_q, ``wd_lmc`` = wd_left - cap, ``wd_bmc`` = wd_blk - cap,
        # signed), so that each compare of a next value with them is one of two registers with wd_len
        SB = signed(COUNT_BITS + 2)
        capv_i = Mux(run_i, cap, g.buffer_bytes)
        i_lmr = stage(m, i_left - (r_bk << row_log2), "wd_i_lmr", SB)                      # stage 4
        i_lmc = stage(m, i_left - capv_i, "wd_i_lmc", SB)
        i_bmc = stage(m, i_blk - capv_i, "wd_i_bmc", SB)
        i_rbmc = stage(m, (r_bk << row_log2) - capv_i, "wd_i_rbmc", SB)
        wd_lmr, wd_lmc, wd_bmc, r_bmc_q = Signal(SB), Signal(SB), Signal(SB), Signal(SB)
        m.d.comb += [b.ldesc.valid.eq(wd_v), b.ldesc.payload.eq(descriptor(wd_addr, wd_len, wd_buf))]
        with m.If(b.ldesc.valid & b.ldesc.ready):
            # the next: wd_left - wd_len; wd_blk - wd_len, or a whole block's rows after the block's end (the
            # compares of the two then those of the old values, the same wd_len gone from both, unless it ended)
            # (r_blk_q < nl is wd_lmr > wd_len; nl > cap is wd_lmc > wd_len; nbs > cap is wd_bmc > wd_len)
            nl, nbs = wd_left - wd_len, wd_blk - wd_len
            nb = Mux(wd_end, r_blk_q, nbs)
            n_lt = Mux(wd_end, wd_lmr > wd_len, wd_lt)
            n_le = Mux(wd_end, wd_lmr >= wd_len, wd_le)
            n_bbig = Mux(wd_end, rb_big_q, wd_bmc > wd_len)
            n_lbig = wd_lmc > wd_len
            m.d.sync += [wd_lmr.eq(wd_lmr - wd_len), wd_lmc.eq(wd_lmc - wd_len),
                         wd_bmc.eq(Mux(wd_end, r_bmc_q, wd_bmc - wd_len))]
            # min(nb, nl, cap) as its two halves (``keep``: each one LUT after the compares / the subtractions -- the
            # cap or not, the smaller of nb and nl -- and one after them; left to the LUT mapping the choice took
            # five LUTs after the compares, 8.1 levels)
            n_cap = Signal(attrs={"keep": 1})
            n_min = Signal(COUNT_BITS, attrs={"keep": 1})
            m.d.comb += [n_cap.eq(Mux(n_lt, n_bbig, n_lbig)), n_min.eq(Mux(n_lt, nb, nl))]
            m.d.sync += [wd_addr.eq(Mux(wd_end, wd_naddr, wd_addr + wd_len)), wd_left.eq(nl), wd_blk.eq(nb),
                         wd_len.eq(Mux(n_cap, Mux(run_q, cap, g.buffer_bytes), n_min)), wd_lt.eq(n_lt), wd_le.eq(n_le),
                         wd_end.eq(n_le & ~n_bbig), wd_v.eq(wd_left != wd_len),   # (nl != 0: wd_len <= wd_left)
                         wd_buf.eq(Mux(wd_buf == g.buffers - 1, 0, wd_buf + 1))]
            with m.If(wd_end):
                m.d.sync += wd_naddr.eq(wd_naddr + r_step_q)
        # (the valid, sq_left != 0, a register too: sq_left != sq_len after a request, sq_len <= sq_left.  The next
        # length's compare r_sblk_q < sq_left - sq_len as sq_lmb > sq_len, sq_lmb = sq_left - r_sblk_q, and its beats
        # from sq_lc = sq_left + bus bytes - 1: each a carry from registers, no subtraction in front of a compare or
        # of the round-up add)
        sq_more = Signal()
        sq_lmb = Signal(signed(COUNT_BITS + 2))
        sq_lc = Signal(COUNT_BITS + 1)
        r_sbb = Signal(COUNT_BITS)                                  # r_sblk_q's beats
        sq_nl, sq_nn, sq_nb = Signal(COUNT_BITS), Signal(COUNT_BITS), Signal(COUNT_BITS)
        sq_full = Signal()                                          # the next request a whole block's
        m.d.comb += [sq_nl.eq(sq_left - sq_len), sq_full.eq(sq_lmb > sq_len),
                     sq_nn.eq(Mux(sq_full, r_sblk_q, sq_nl)),
                     sq_nb.eq(Mux(sq_full, r_sbb, (sq_lc - sq_len) >> g.bus_log2)),
                     b.req0.valid.eq(sq_more)]
        with m.If(b.req0.valid & b.req0.ready):
            m.d.sync += [sq_left.eq(sq_nl), sq_base.eq(sq_base + r_step_q), sq_addr.eq(sq_base + r_step_q),
                         sq_len.eq(sq_nn), sq_beats.eq(sq_nb), sq_more.eq(sq_left != sq_len),
                         sq_lmb.eq(sq_lmb - sq_len), sq_lc.eq(sq_lc - sq_len)]

        go = Signal()
        m.d.comb += go.eq(b.req0.ready & b.req1.ready & uw.cmd.ready & us.cmd.ready & ub.cmd.ready
                          & ~wd_v & ~sq_more)
        with m.If(state == S.CHECK):
            with m.If(bad):
                self.refuse(m)
                m.d.sync += state.eq(S.IDLE)
            with m.Elif(go):
                m.d.comb += [us.cmd.valid.eq(~pv), uw.cmd.valid.eq(1), b.req1.valid.eq(f_bias), ub.cmd.valid.eq(f_bias)]
                run = pv | kv
                m.d.sync += [run_q.eq(run),
                             wd_addr.eq(Mux(run, r_rows, w_addr)), wd_left.eq(i_left), wd_blk.eq(i_blk),
                             wd_len.eq(first(i_blk, i_left, i_lt, i_bbig, i_lbig, run)), wd_lt.eq(i_lt),
                             wd_le.eq(i_le), wd_end.eq(i_le & ~i_bbig), wd_v.eq(i_v), rb_big_q.eq(i_rbig),
                             wd_naddr.eq(i_naddr), wd_lmr.eq(i_lmr), wd_lmc.eq(i_lmc), wd_bmc.eq(i_bmc),
                             r_bmc_q.eq(i_rbmc), r_step_q.eq(r_step), r_blk_q.eq(r_bk << row_log2),
                             r_sblk_q.eq(r_bk << 1),
                             sq_addr.eq(Mux(kv, r_seg + (r_o << 1), s_addr)), sq_base.eq(r_seg),
                             sq_left.eq(Mux(pv, 0, st)),
                             sq_len.eq(i_sqn), sq_beats.eq(i_sqbeats), sq_more.eq(i_sqv),
                             sq_lmb.eq(i_sql - (r_bk << 1)), sq_lc.eq(i_sql + ((1 << g.bus_log2) - 1)),
                             r_sbb.eq(ceil_beats(r_bk << 1, g.bus_log2)),
                             state.eq(S.ACT)]

        # --- activations: SPAD rows -> K-lane buffer words, beat-major (every token's inputs
        # 0 .. K - 1, then K .. 2K - 1, ...), while the matrix already runs: it issues buffer beat b
        # once every token's beat b is in (``avail``), so the load hides under the first tile.  A
        # read takes max(K / VL, 1) consecutive SPAD beats at once (the SPAD's banks): one buffer
        # word a cycle when K >= VL; when K < VL a beat gives VL / K words, one a cycle.
        RB = g.spad_banks                                   # SPAD beats per read
        rq = ReadQueue(m, b.spad_rd, g, "rq", wide=RB > 1)
        nb = Signal(16)                                     # reads per row
        m.d.comb += nb.eq(f_n >> (vl_log2 + _log2(RB)))
        nb_m1 = stage(m, nb - 1, "nb_m1", 16)                # stage 2 (used from ACT on)
        nb_m2 = stage(m, nb - 2, "nb_m2", 16)
        ti, bi = Signal(range(TM + 1)), Signal(16)          # issue side: token, read column
        hi = Signal(6)                                      # head (kv; else 0)
        cola = Signal(g.spad_bits + 16)                     # src + bi RB
        toka = Signal(g.spad_bits + 32)                     # cola + ti src_stride
        rowa = Signal(g.spad_bits + 32)                     # toka + hi head_stride
        tc, bc = Signal(range(TM + 1)), Signal(16)          # consume side
        # (round 31) bc == nb_m1 as a register, set with bc (bc + 1 == nb_m1 is bc == nb_m2): the compare was in
        # front of the state's step to RUN, behind the consume strobe (9.0 levels after an abc9 remap)
        bc_last = Signal()
        avail = Signal(range(g.max_n // K + 1))             # buffer beats in for every token
        issuing = Signal()
        with m.If(state == S.CHECK):
            m.d.sync += [ti.eq(0), hi.eq(0), bi.eq(0), cola.eq(f_src), toka.eq(f_src), rowa.eq(f_src), tc.eq(0),
                         bc.eq(0), bc_last.eq(nb_m1 == 0), avail.eq(0), issuing.eq(1)]
        acting = state == S.ACT
        m.d.comb += [rq.addr.eq(rowa), rq.issue.eq(acting & rq.room & issuing)]
        with m.If(acting & rq.issue):
            with m.If(hi == heads_m1):
                m.d.sync += [hi.eq(0), ti.eq(ti + 1), toka.eq(toka + f_src_stride), rowa.eq(toka + f_src_stride)]
                with m.If(ti == tok_m1):
                    m.d.sync += [ti.eq(0), bi.eq(bi + 1), cola.eq(cola + RB), toka.eq(cola + RB), rowa.eq(cola + RB)]
                    with m.If(bi == nb_m1):
                        m.d.sync += issuing.eq(0)
            with m.Else():
                m.d.sync += [hi.eq(hi + 1), rowa.eq(rowa + f_head_stride)]
        tb = max(ceil_log2(TM), 1)
        consumed = Signal()
        last_tok = tc == nrows_m1                           # (stage registers: no subtraction in front)
        if K >= VL:
            m.d.comb += [mx.act.en.eq(acting & rq.valid), mx.act.addr.eq(Cat(tc[:tb], bc) if TM > 1 else bc),
                         mx.act.data.eq(mantissas(rq.words, K)), consumed.eq(acting & rq.valid)]
            with m.If(consumed & last_tok):
                m.d.sync += avail.eq(bc + 1)
            if self.has_pv:
                # pv: a read of K weight words -> two buffer words, beat 2 bc (hi digits) then 2 bc + 1
                # (lo digits) of min(w, W_MAX): hi = (w + 2^15) >> 16, lo = w's low 16 bits
                dph = Signal()
                his, los = [], []
                for k in range(K):
                    wk = rq.words[32 * k:32 * (k + 1)].as_signed()
                    wc = Signal(signed(32), name=f"pv_w{k}")
                    m.d.comb += wc.eq(Mux(wk > isa.PV_W_MAX, isa.PV_W_MAX, wk))
                    his.append((wc + (1 << (MANT_BITS - 1)))[MANT_BITS:2 * MANT_BITS])
                    los.append(wc[:MANT_BITS])
                pbeat = Cat(dph, bc)
                with m.If(pv):
                    m.d.comb += [mx.act.addr.eq(Cat(tc[:tb], pbeat) if TM > 1 else pbeat),
                                 mx.act.data.eq(Mux(dph, Cat(*los), Cat(*his))), consumed.eq(acting & rq.valid & dph)]
                    with m.If(acting & rq.valid):
                        m.d.sync += dph.eq(~dph)
                    with m.If(consumed & last_tok):
                        m.d.sync += avail.eq(pbeat + 1)
                with m.If(state == S.CHECK):
                    m.d.sync += dph.eq(0)
        else:
            r = VL // K
            part = Signal(range(r))
            mants = mantissas(rq.words, VL)
            pieces = Array(mants[x * K * MANT_BITS:(x + 1) * K * MANT_BITS] for x in range(r))
            addr = Cat(part, bc)
            m.d.comb += [mx.act.en.eq(acting & rq.valid), mx.act.addr.eq(Cat(tc[:tb], addr) if TM > 1 else addr),
                         mx.act.data.eq(pieces[part]), consumed.eq(acting & rq.valid & (part == r - 1))]
            with m.If(acting & rq.valid):
                m.d.sync += part.eq(Mux(part == r - 1, 0, part + 1))
                with m.If(last_tok):
                    m.d.sync += avail.eq(addr + 1)
        m.d.comb += [mx.exp.en.eq(consumed & (bc == 0)), mx.exp.addr.eq(tc),
                     mx.exp.data.eq(rq.exp), mx.avail.eq(avail)]
        with m.If(consumed):
            m.d.sync += tc.eq(tc + 1)
            with m.If(last_tok):
                m.d.sync += [tc.eq(0), bc.eq(bc + 1), bc_last.eq(bc == nb_m2)]
                with m.If(bc_last):
                    m.d.sync += state.eq(S.RUN)

        # --- the command, then output beats -> SPAD ---------------------------------------------------
        sent = Signal()
        m.d.comb += [mx.cmd.payload.tokens.eq(nrows),
                     mx.cmd.payload.group_beats.eq(Mux(pv, 1, Mux(kv, g.head_dim >> k_log2,
                                                                  (Const(1, 17) << ins.group_log2) >> k_log2))),
                     mx.cmd.payload.groups.eq(npg), mx.cmd.payload.tiles.eq(f_tiles),
                     mx.cmd.payload.w_exp.eq(Mux(pv | kv, 0, ins.w_exp)), mx.cmd.payload.bias.eq(f_bias),
                     mx.cmd.payload.kv.eq(kv), mx.cmd.payload.pv.eq(pv), mx.cmd.payload.acc.eq(pv & pins.acc),
                     mx.cmd.payload.wide.eq(wide_o)]
        with m.If(state == S.CHECK):
            m.d.sync += sent.eq(0)
        with m.If(((state == S.ACT) | (state == S.RUN)) & ~sent):
            m.d.comb += mx.cmd.valid.eq(1)
            with m.If(mx.cmd.ready):
                m.d.sync += sent.eq(1)
        # pv acc: the previous wide rows -> ``prev``, after the activations (the read port is free),
        # in the output order (tile, row): per beat the P low words, then the P high words (n_out
        # words further), P / VL SPAD beats each, up to ``spad_banks`` of them a read, shifted into
        # ``pw``; a full ``pw`` goes to a two-deep queue as P (low, high) pairs
        taking = Signal()
        m.d.comb += taking.eq(consumed)
        if self.has_pv:
            PR = P // VL                                    # SPAD beats of P words
            RU = min(RB, PR)                                # of them per read (the SPAD's banks)
            NR = PR // RU                                   # reads of P words
            pr_c, pr_r = Signal(16), Signal(range(TM + 1))  # issue side: tile, row
            pr_h, pr_p = Signal(), Signal(range(NR))       # half (0: low words), read within it
            pr_base = Signal(g.spad_bits + 16)              # dst + pr_r dst_stride
            pr_on = Signal()
            pr_n = Signal(range(2 * NR + 1))                # reads in ``pw``
            pw = Signal(2 * P * 32)
            # (two registers, SyncFIFOBuffered(depth=2) cycle for cycle: flip-flops with clock enables, no LUT
            # a bit; round 22's depth-3 SyncFIFOBuffered was 2 x 4 096 bits of LUT RAM, 2.3 K LUT)
            m.submodules.pq = pq = TwoRegisterFIFO(P * WIDE_BITS)
            # (the read's P-word column, Mux(pr_h, tiles, 0) + pr_c, a register ``pr_col``, set with pr_h / pr_c: the
            # address one add, pr_p's bits below the column's -- round 22, two adds in front of the SPAD's read
            # address, 8.25 levels joined)
            pr_col = Signal(17)
            with m.If(state == S.CHECK):
                m.d.sync += [pr_c.eq(0), pr_r.eq(0), pr_h.eq(0), pr_p.eq(0), pr_base.eq(f_dst), pr_n.eq(0),
                             pr_on.eq(pv & pins.acc), pr_col.eq(0)]
            prev_rd = (state == S.RUN) & pv
            pr_issue = pr_on & rq.room
            with m.If(prev_rd):
                m.d.comb += [rq.addr.eq(pr_base + Cat(Const(0, _log2(RU)), pr_p[:_log2(NR)], pr_col)),
                             rq.issue.eq(pr_issue), taking.eq(rq.valid & (pr_n != 2 * NR))]
                # (round 28: the counters step on this branch's own issue, not on ``rq.issue``, the choice of it
                # with ACT's: state -> pr_on / pr_r was 9.0 levels in the glue's mapping after the LUT6 rotations)
                with m.If(pr_issue):
                    m.d.sync += pr_p.eq(pr_p + 1)
                    with m.If(pr_p == NR - 1):
                        m.d.sync += [pr_p.eq(0), pr_h.eq(~pr_h), pr_col.eq(f_tiles + pr_c)]
                        with m.If(pr_h):
                            m.d.sync += [pr_r.eq(pr_r + 1), pr_base.eq(pr_base + f_dst_stride), pr_col.eq(pr_c)]
                            with m.If(pr_r == nrows_m1):
                                m.d.sync += [pr_r.eq(0), pr_base.eq(f_dst), pr_c.eq(pr_c + 1), pr_col.eq((pr_c + 1)[:16])]
                                with m.If(pr_c == tiles_m1):
                                    m.d.sync += pr_on.eq(0)
                with m.If(taking):
                    m.d.sync += [pw.eq(Cat(pw[RU * VL * 32:], rq.words[:RU * VL * 32])), pr_n.eq(pr_n + 1)]
            m.d.comb += [pq.w_data.eq(Cat(*[Cat(pw[32 * p:32 * (p + 1)], pw[32 * (P + p):32 * (P + p + 1)])
                                            for p in range(P)])),
                         pq.w_en.eq(pr_n == 2 * NR),
                         mx.prev.valid.eq(pq.r_rdy), mx.prev.payload.eq(pq.r_data), pq.r_en.eq(mx.prev.ready)]
            with m.If(pq.w_en & pq.w_rdy):
                m.d.sync += pr_n.eq(0)
        m.d.comb += rq.take.eq(taking)

        ot = Signal(16)                  # output tile (from tile0)
        otok = Signal(range(TM + 1))
        orow = Signal(g.spad_bits + 16)  # dst + otok dst_stride
        half = Signal()                  # pv wide: the beat of the high words
        ot_w = Signal(17)                # the output's P-word column: ot, or tiles + ot for the high words
        # (a register, set with ot and half: round 22, the add and the choice in front of the SPAD's write
        # address, 9.0 levels joined)
        with m.If(state == S.CHECK):
            m.d.sync += [ot.eq(0), otok.eq(0), orow.eq(f_dst), half.eq(0), ot_w.eq(0)]
        # output beats through a queue of max_tokens beats: a tile's last group emits a beat per
        # token per cycle, a beat takes P / VL cycles of SPAD writes; the queue lets the matrix go on
        # with the next tile meanwhile (without it the array waited ~P / VL x T cycles a tile)
        # (``ReadyFIFO``: SyncFIFOBuffered with ``w_rdy`` a register -- the matrix unit's ``o.tready`` reaches 8
        # levels into it, so the level's compare in front was 9.0 joined)
        m.submodules.oq = oq = ReadyFIFO(P * 32 + 1, TM)
        m.d.comb += [oq.w_en.eq(mx.o.tvalid), oq.w_data.eq(Cat(mx.o.tdata, mx.o.tlast)), mx.o.tready.eq(oq.w_rdy)]
        o_valid, o_data, o_last = oq.r_rdy, oq.r_data[:P * 32], oq.r_data[P * 32]
        wr = b.spad_wr
        o_take = Signal()
        m.d.comb += [self.qk_en.eq(kv & o_valid), self.qk_row.eq(otok),
                     self.qk_end.eq(kv & (state == S.FINISH))]
        if P <= VL:
            r = VL // P
            sub = ot[:_log2(r)] if r > 1 else Const(0, 1)
            m.d.comb += [wr.addr.eq(orow + (ot_w >> _log2(r))), wr.data.eq(Cat(*[o_data] * r)),
                         wr.lanes.eq(Mux(o_valid, Const((1 << P) - 1, VL) << (sub * P), 0)),
                         o_take.eq(o_valid), self.qk_key.eq(ot << p_log2), self.qk_data.eq(o_data),
                         self.qk_n.eq(P)]
        else:
            r = P // VL
            part = Signal(range(r))
            pieces = Array(o_data[x * VL * 32:(x + 1) * VL * 32] for x in range(r))
            piece = Signal(VL * 32)
            # (round 32) the node's r = 8 pieces: two 4:1 LUT6 under a MUXF7 a bit (``muxf``), not ABC9's ~3 LUT
            pick_piece = (muxf(m, part, [o_data[x * VL * 32:(x + 1) * VL * 32] for x in range(r)], True, "o_piece")
                          if g.lut_primitive and r in (8, 16, 32) else pieces[part])
            m.d.comb += [piece.eq(pick_piece), wr.addr.eq(orow + Cat(part, ot_w)), wr.data.eq(piece),
                         wr.lanes.eq(Mux(o_valid, (1 << VL) - 1, 0)), o_take.eq(o_valid & (part == r - 1)),
                         self.qk_key.eq((ot << p_log2) | (part << vl_log2)), self.qk_data.eq(piece),
                         self.qk_n.eq(VL)]
            B = g.spad_banks
            if (self.has_kv or self.has_pv) and B > 1 and r % B == 0:
                # kv: its output (P words a row every head_dim / K weight beats) outruns one SPAD beat a
                # cycle; rows at bank-aligned dst and dst_stride go B beats at a time (the SPAD's banks);
                # pv's last key beat emits its outputs as fast
                # (a stage register, 2: its decode was in front of GEMM_QK's key to the attention mover's
                # deferred MAX, 8.06 levels from ``pv``)
                wide = stage(m, (kv | pv) & (f_dst[:_log2(B)] == 0) & (f_dst_stride[:_log2(B)] == 0), "o_wide")
                rw = r // B
                wpart = Signal(range(rw))
                wpieces = Array(o_data[x * B * VL * 32:(x + 1) * B * VL * 32] for x in range(rw))
                wpiece = Signal(B * VL * 32)
                # the data whatever the mode: only wide_en writes it (no AND a bit in front of the SPAD).  (round 31)
                # the even pieces on ``wide``, the odd ones on ``wide_alt`` (``wpart``'s low bit its enable): their
                # 2:1 choice is one input more of the execute unit's 4:1 choice of the SPAD's data, no LUT of its own
                m.d.comb += wpiece.eq(wpieces[wpart])
                if rw > 1:
                    ps = [o_data[x * B * VL * 32:(x + 1) * B * VL * 32] for x in range(rw)]
                    eo = [Array(ps[x::2])[wpart[1:]] if rw > 2 else ps[x] for x in range(2)]
                    m.d.comb += [wr.wide.eq(eo[0]), wr.wide_alt.eq(eo[1]), wr.wide_alt_en.eq(wpart[0])]
                else:
                    m.d.comb += wr.wide.eq(wpiece)
                # (round 30) the score words for ATTN_SM's deferred MAX: the narrow piece's words, then the wide
                # piece's others, whatever the mode -- wide, ``part`` follows ``wpart`` (B ``part``s a ``wpart``), so
                # that the piece is the wide piece's first VL words; narrow, the words past VL are past ``qk_n`` (the
                # MAX's count: ignored).  ``mxr``'s choice of them was one of three a bit (the piece, the wide piece
                # and its own read), ~2 LUT a bit of 1 024: now one of two (~1)
                m.d.comb += self.qk_data.eq(Cat(piece, wpiece[VL * 32:]))
                with m.If(wide):
                    m.d.comb += [wr.wide_en.eq(o_valid),
                                 self.qk_key.eq((ot << p_log2) | (wpart << _log2(B * VL)) if rw > 1 else ot << p_log2),
                                 self.qk_n.eq(B * VL),
                                 wr.addr.eq(orow + (Cat(Const(0, _log2(B)), wpart, ot_w) if rw > 1
                                                    else Cat(Const(0, _log2(B)), ot_w))),
                                 o_take.eq(o_valid & (wpart == rw - 1))]
                    with m.If(o_valid):
                        wnext = Mux(wpart == rw - 1, 0, wpart + 1)
                        m.d.sync += [wpart.eq(wnext), part.eq(Cat(Const(0, _log2(B)), wnext)[:len(part)])]
                with m.Else():
                    with m.If(o_valid):
                        m.d.sync += part.eq(Mux(part == r - 1, 0, part + 1))
            else:
                with m.If(o_valid):
                    m.d.sync += part.eq(Mux(part == r - 1, 0, part + 1))
        m.d.comb += [wr.exp_en.eq(o_valid), wr.exp.eq(0), oq.r_en.eq(o_take)]
        with m.If(o_take):
            with m.If(wide_o & ~half):
                m.d.sync += [half.eq(1), ot_w.eq(f_tiles + ot)]
            with m.Else():
                m.d.sync += [half.eq(0), otok.eq(otok + 1), orow.eq(orow + f_dst_stride), ot_w.eq(ot)]
                with m.If(otok == nrows_m1):
                    m.d.sync += [otok.eq(0), orow.eq(f_dst), ot.eq(ot + 1), ot_w.eq((ot + 1)[:16])]
            with m.If(o_last):
                m.d.sync += state.eq(S.FINISH)
        with m.If(state == S.FINISH):
            m.d.comb += self.done.eq(1)
            m.d.sync += state.eq(S.IDLE)
        m.d.comb += [b.mac.eq(mx.mac),
                     b.starved.eq((state == S.RUN) & mx.busy & ~mx.mac & (mx.w_wait | (~us.o.valid & ~pv)))]
        return m


# --- VEC ---------------------------------------------------------------------------------------------
class VecState(enum.Enum, shape=3):
    IDLE = 0
    DIVIDE = 1      # (rows - 1) // b_rep: the last b row, for the range check
    CHECK = 2
    ROW = 3         # one row through the vector unit
    FINISH = 4


class VecMover(Mover):
    """VEC on the vector unit, one row at a time: the a beat and (for RMSNORM, MUL, ROPE,
    RESIDUAL) the b beat are read in turn from SPAD, the output beats go to the dst row with
    their exponent (0 for X32 results).  b_pair splits each b word into the unit's x (low int16,
    sign-extended) and y (high int16)."""
    OPS = (isa.Opcode.VEC,)

    def __init__(self, g: Geometry):
        super().__init__(g)
        self.vector = VectorUnit(g.max_n, g.vl, primitive=g.lut_primitive)

    def elaborate(self, platform):
        m = Module()
        g, b = self.g, self.bus
        VL, vl_log2 = g.vl, _log2(g.vl)
        m.submodules.vector = vu = self.vector
        ins = self.view(isa.Opcode.VEC)
        V = isa.VecOp
        vop = ins.vop.as_value()
        uses_b = stage(m, (vop == V.RMSNORM) | (vop == V.MUL) | (vop == V.ROPE) | (vop == V.RESIDUAL), "uses_b")
        m.submodules.div = div = SerialDivider(16, 8)
        m.d.comb += [div.a.eq(ins.rows - 1), div.b.eq(ins.b_rep)]
        S = VecState
        state = Signal(S)
        m.d.comb += self.busy.eq(state != S.IDLE)
        with m.If(self.start):
            m.d.comb += div.start.eq(1)
            m.d.sync += state.eq(S.DIVIDE)
        # the last b row's end from the quotient in two registered steps: CHECK two cycles after div.done
        div_done = Signal()
        m.d.sync += div_done.eq(div.done)
        with m.If((state == S.DIVIDE) & div_done):
            m.d.sync += state.eq(S.CHECK)
        nb = stage(m, ins.n >> vl_log2, "nb", 16)
        rows_m1 = stage(m, ins.rows - 1, "rows_m1", 16)
        last_r = stage(m, ins.rows - 1, "last_r")                                           # stage 1
        p_a = stage(m, rows_m1 * ins.a_stride, "p_a", 32)                                   # stage 2
        p_d = stage(m, rows_m1 * ins.dst_stride, "p_d", 32)
        p_b = stage(m, div.q * ins.b_stride, "p_b", 32)
        bad = stage(m, (ins.rows == 0) | (ins.n == 0) | (ins.n[:vl_log2] != 0) | (ins.n > g.max_n)
                    | (vop > V.RESIDUAL) | (ins.b_rep == 0)
                    | ((vop == V.ROPE) & (ins.n[:vl_log2 + 1] != 0)), "bad0")
        bad = (stage(m, bad, "bad1") | stage(m, (ins.a + p_a + nb > g.spad_beats) | (ins.dst + p_d + nb > g.spad_beats), "bad_ad")
               | (uses_b & stage(m, ins.b + p_b + nb > g.spad_beats, "bad_b")))

        r = Signal(16)                     # row
        arow, brow, drow = Signal(40), Signal(40), Signal(40)
        rep = Signal(8)                    # rows since the b row last moved
        sent = Signal()                    # this row's command is in the unit
        with m.If(state == S.CHECK):
            with m.If(bad):
                self.refuse(m)
                m.d.sync += state.eq(S.IDLE)
            with m.Else():
                m.d.sync += [r.eq(0), arow.eq(ins.a), brow.eq(ins.b), drow.eq(ins.dst), rep.eq(0), sent.eq(0),
                             state.eq(S.ROW)]
        m.d.comb += [vu.cmd.payload.op.eq(vop), vu.cmd.payload.n.eq(ins.n), vu.cmd.payload.gain_exp.eq(ins.imm1),
                     vu.cmd.payload.eps.eq(ins.imm0), vu.cmd.payload.cm.eq(ins.imm0), vu.cmd.payload.ce.eq(ins.imm1)]
        in_row = state == S.ROW
        with m.If(in_row & ~sent):
            m.d.comb += vu.cmd.valid.eq(1)
            with m.If(vu.cmd.ready):
                m.d.sync += sent.eq(1)

        # --- reads: a[i] (and b[i]) in turn ---------------------------------------------------------
        rq = ReadQueue(m, b.spad_rd, g, "rq")
        ia = Signal(16)                    # next beat to read
        # (round 33) b first, then a: the b beat waits in the holding register and the a beat goes to the unit
        # as the read gives it, in either mode -- no 2:1 choice of the held beat and the read a bit in front of
        # the unit's ``a`` (264 LUT3); the same reads, the same cycles, the pair given when its second beat comes
        which = Signal()                   # 1: b next (uses_b, the beat's first read), 0: a next
        with m.If(state == S.CHECK):
            m.d.sync += [ia.eq(0), which.eq(uses_b)]
        m.d.comb += [rq.addr.eq(Mux(which, brow, arow) + ia), rq.issue.eq(in_row & rq.room & (ia != nb))]
        with m.If(rq.issue):
            with m.If(which):
                m.d.sync += which.eq(0)
            with m.Else():
                m.d.sync += [which.eq(uses_b), ia.eq(ia + 1)]
        # the b beat waits in a holding register while its a beat arrives
        b_held = Signal()
        b_words = Signal(g.beat_bits)
        b_exp = Signal(signed(EXP_BITS))
        pair = Signal()
        m.d.comb += pair.eq(uses_b & b_held & rq.valid)
        with m.If(uses_b):
            with m.If(~b_held):
                m.d.comb += rq.take.eq(rq.valid)
                with m.If(rq.valid):
                    m.d.sync += [b_held.eq(1), b_words.eq(rq.words), b_exp.eq(rq.exp)]
            with m.Else():
                m.d.comb += [vu.a.valid.eq(rq.valid), rq.take.eq(rq.valid & vu.a.ready)]
                with m.If(rq.valid & vu.a.ready):
                    m.d.sync += b_held.eq(0)
        with m.Else():
            m.d.comb += [vu.a.valid.eq(rq.valid), rq.take.eq(rq.valid & vu.a.ready)]
        m.d.comb += [vu.a.payload.x.eq(rq.words), vu.a.payload.exp.eq(rq.exp)]
        lo16 = Cat(*[b_words[32 * k:32 * k + 16] for k in range(VL)])
        hi16 = Cat(*[b_words[32 * k + 16:32 * k + 32] for k in range(VL)])
        m.d.comb += [vu.b.valid.eq(pair), vu.b.payload.exp.eq(b_exp),
                     vu.b.payload.x.eq(Mux(ins.b_pair, sext16(lo16, VL), b_words)),
                     vu.b.payload.y.eq(Mux(ins.b_pair, hi16, 0))]

        # --- output beats -> the dst row; the next row --------------------------------------------------
        io = Signal(16)
        wr = b.spad_wr
        m.d.comb += [vu.o.ready.eq(in_row), wr.addr.eq(drow + io), wr.data.eq(vu.o.payload.x),
                     wr.exp.eq(vu.o.payload.exp), wr.lanes.eq(Mux(vu.o.valid & in_row, (1 << VL) - 1, 0)),
                     wr.exp_en.eq(vu.o.valid & in_row)]
        with m.If(state == S.CHECK):
            m.d.sync += io.eq(0)
        with m.If(vu.o.valid & vu.o.ready):
            m.d.sync += io.eq(io + 1)
            with m.If(vu.o.payload.last):
                m.d.sync += [io.eq(0), ia.eq(0), which.eq(uses_b), sent.eq(0), r.eq(r + 1),
                             arow.eq(arow + ins.a_stride), drow.eq(drow + ins.dst_stride), rep.eq(rep + 1)]
                with m.If(rep == ins.b_rep - 1):
                    m.d.sync += [rep.eq(0), brow.eq(brow + ins.b_stride)]
                with m.If(r == last_r):
                    m.d.sync += state.eq(S.FINISH)
        with m.If(state == S.FINISH):
            m.d.comb += self.done.eq(1)
            m.d.sync += state.eq(S.IDLE)
        return m


# --- KVW ---------------------------------------------------------------------------------------------
class KvwState(enum.Enum, shape=3):
    IDLE = 0
    CHECK = 1
    ROWS = 2        # rows -> KV writer -> the segment's rows region
    SCALES = 3      # the (A, E) pairs -> the scale region
    WAIT = 4        # both writes acknowledged


class KvwMover(Mover):
    """KVW: ``rows`` BFP16 rows of head_dim mantissas -> the KV writer (golden ``quantize_kv``)
    -> one KV4 segment (``spec/kv.py``) at ``seg``: the rows region is written first (its
    nibbles, then zeros to the 64-byte boundary), then the scale region (A, E per row, zeros
    after), so the scales are known when they are written."""
    OPS = (isa.Opcode.KVW,)

    def __init__(self, g: Geometry):
        super().__init__(g)
        self.kv = KVWriter(g.head_dim, g.kv_lanes, primitive=g.lut_primitive)

    def elaborate(self, platform):
        m = Module()
        g, b = self.g, self.bus
        D, VL, L = g.head_dim, g.vl, g.kv_lanes
        m.submodules.kv = kv = self.kv
        ins = self.view(isa.Opcode.KVW)
        S = KvwState
        state = Signal(S)
        m.d.comb += self.busy.eq(state != S.IDLE)
        with m.If(self.start):
            m.d.sync += state.eq(S.CHECK)
        rb = D // VL                                   # SPAD beats per row
        # the decode in stages (``stage``; CHECK sees stage 3)
        p_row = stage(m, stage(m, ins.rows - 1, "rows_m1", 18) * ins.row_stride, "p_row", 34)   # stage 2
        bad = stage(m, stage(m, (ins.rows == 0) | (ins.rows > g.tokens), "bad0"), "bad1")
        bad = stage(m, bad | (ins.src + p_row + rb > g.spad_beats), "bad2")                  # stage 3
        rows_bytes = stage(m, pad_up(ins.rows * (D // 2)), "rows_bytes", 24)
        scale_bytes = stage(m, pad_up(ins.rows << 1), "scale_bytes", 16)
        seg = ddr_addr(ins.seg)
        rows_at = stage(m, seg + scale_bytes, "rows_at", ADDR_BITS)                          # stage 2
        nibbles = stage(m, ins.rows * (D // L), "nibbles", 24)

        # (the streams' counters as wide as their counts: round 29)
        m.submodules.conv = conv = Unpacker(VL * MANT_BITS, L * MANT_BITS,    # SPAD mantissas -> writer lanes
                                            count_bits=(D // L).bit_length())
        m.submodules.pq = pq = Packer(L * W_BITS, g.data_width,               # nibbles -> bus beats
                                      count_bits=len(nibbles), beats_bits=len(rows_bytes) - g.bus_log2)
        m.submodules.ps = ps = Packer(16, g.data_width,                       # (A, E) -> bus beats
                                      count_bits=len(ins.rows), beats_bits=len(scale_bytes) - g.bus_log2)
        m.d.comb += [pq.cmd.payload.count.eq(nibbles), pq.cmd.payload.beats.eq(rows_bytes >> g.bus_log2),
                     ps.cmd.payload.count.eq(ins.rows), ps.cmd.payload.beats.eq(scale_bytes >> g.bus_log2)]
        wdone = Signal(2)
        with m.If(state == S.CHECK):
            with m.If(bad):
                self.refuse(m)
                m.d.sync += state.eq(S.IDLE)
            with m.Elif(b.wdesc.ready & pq.cmd.ready):
                m.d.comb += [b.wdesc.valid.eq(1), b.wdesc.payload.eq(descriptor(rows_at, rows_bytes)),
                             pq.cmd.valid.eq(1)]
                m.d.sync += [state.eq(S.ROWS), wdone.eq(0)]

        # SPAD rows -> the writer, one frame per row
        rq = ReadQueue(m, b.spad_rd, g, "rq")
        ti, bi = Signal(range(g.tokens + 1)), Signal(range(rb + 1))
        rowa = Signal(g.spad_bits + 16)
        rda = Signal(g.spad_bits + 16)                 # rowa + bi, a register (round 22: the add in front of the
        with m.If(state == S.CHECK):                   # SPAD's read address, 8.19 levels joined)
            m.d.sync += [ti.eq(0), bi.eq(0), rowa.eq(ins.src), rda.eq(ins.src)]
        rowing = state == S.ROWS
        m.d.comb += [rq.addr.eq(rda), rq.issue.eq(rowing & rq.room & (ti != ins.rows))]
        with m.If(rq.issue):
            m.d.sync += [bi.eq(bi + 1), rda.eq(rda + 1)]
            with m.If(bi == rb - 1):
                m.d.sync += [bi.eq(0), ti.eq(ti + 1), rowa.eq(rowa + ins.row_stride), rda.eq(rowa + ins.row_stride)]
        tc, bc = Signal(range(g.tokens + 1)), Signal(range(rb + 1))
        with m.If(state == S.CHECK):
            m.d.sync += [tc.eq(0), bc.eq(0)]
        row_exp = Signal(signed(EXP_BITS))
        armed = Signal()                                # conv has this row's frame
        m.d.comb += conv.cmd.payload.count.eq(D // L)
        with m.If(rowing & ~armed & (tc != ins.rows) & conv.cmd.ready & rq.valid):
            m.d.comb += conv.cmd.valid.eq(1)
            m.d.sync += [armed.eq(1), row_exp.eq(rq.exp)]
        m.d.comb += [conv.i.valid.eq(armed & rq.valid), conv.i.payload.eq(mantissas(rq.words, VL)),
                     rq.take.eq(armed & rq.valid & conv.i.ready)]
        with m.If(rq.take):
            m.d.sync += bc.eq(bc + 1)
            with m.If(bc == rb - 1):
                m.d.sync += [bc.eq(0), tc.eq(tc + 1), armed.eq(0)]
        lane_beat = Signal(range(D // L + 1))
        with m.If(state == S.CHECK):
            m.d.sync += lane_beat.eq(0)
        m.d.comb += [kv.i.valid.eq(conv.o.valid), kv.i.payload.mant.eq(conv.o.payload),
                     kv.i.payload.exp.eq(row_exp), kv.i.payload.last.eq(lane_beat == D // L - 1),
                     conv.o.ready.eq(kv.i.ready)]
        with m.If(kv.i.valid & kv.i.ready):
            m.d.sync += lane_beat.eq(Mux(lane_beat == D // L - 1, 0, lane_beat + 1))
        # the writer's beats: nibbles -> the rows packer; each row's (A, E) kept
        scales = [Signal(16, name=f"ae{x}") for x in range(g.tokens)]
        to = Signal(range(g.tokens + 1))
        with m.If(state == S.CHECK):
            m.d.sync += to.eq(0)
        m.d.comb += [pq.i.valid.eq(kv.o.valid), pq.i.payload.eq(kv.o.payload.q), kv.o.ready.eq(pq.i.ready)]
        with m.If(kv.o.valid & kv.o.ready & kv.o.payload.last):
            for x in range(g.tokens):
                with m.If(to == x):
                    m.d.sync += scales[x].eq(Cat(kv.o.payload.a, kv.o.payload.e))
            m.d.sync += to.eq(to + 1)

        # the scale region once the rows have left
        si = Signal(range(g.tokens + 1))
        si_more = Signal()                              # si != rows, as a register
        # (row si's (A, E) a register, ``sc_q``: row 0's at the region's start, row si + 1's with each taken -- round
        # 22, the pick of 16 behind si went on through the packer and the owner's AND-OR into the writer's register
        # stage, 9.0 levels)
        sc_q = Signal(16)
        with m.If(rowing & (to == ins.rows) & ~pq.busy & b.wdesc.ready & ps.cmd.ready):
            m.d.comb += [b.wdesc.valid.eq(1), b.wdesc.payload.eq(descriptor(seg, scale_bytes)),
                         ps.cmd.valid.eq(1)]
            m.d.sync += [state.eq(S.SCALES), si.eq(0), si_more.eq(ins.rows != 0), sc_q.eq(scales[0])]
        m.d.comb += [ps.i.valid.eq((state == S.SCALES) & si_more), ps.i.payload.eq(sc_q)]
        with m.If(ps.i.valid & ps.i.ready):
            m.d.sync += [si.eq(si + 1), si_more.eq(si + 1 != ins.rows), sc_q.eq(Array(scales)[si + 1])]
        with m.If((state == S.SCALES) & ~si_more & ~ps.busy):
            m.d.sync += state.eq(S.WAIT)
        with m.If(state == S.ROWS):
            m.d.comb += [b.wdata.tvalid.eq(pq.o.valid), b.wdata.tdata.eq(pq.o.payload), pq.o.ready.eq(b.wdata.tready)]
        with m.Else():
            m.d.comb += [b.wdata.tvalid.eq(ps.o.valid), b.wdata.tdata.eq(ps.o.payload), ps.o.ready.eq(b.wdata.tready)]
        m.d.comb += b.wdata.tkeep.eq(-1)
        with m.If(b.wdone):
            m.d.sync += wdone.eq(wdone + 1)
        # (wdone + b.wdone == 2 as a choice on the 2-bit count, no add: round 26, owner -> b.wdone -> the add's carry
        # -> done -> the unit's ``state`` 9.0 levels)
        with m.If((state == S.WAIT) & Mux(b.wdone, wdone == 1, wdone == 2)):
            m.d.comb += self.done.eq(1)
            m.d.sync += state.eq(S.IDLE)
        return m


# --- ATTN ---------------------------------------------------------------------------------------------
class SegState(enum.Enum, shape=3):
    IDLE = 0
    ARM_S = 1
    SCALES = 2
    ARM_R = 3
    ROWS = 4


def run_layout():
    return data.StructLayout({"keys": 16, "blocks": 16, "kpos0": isa.POS_BITS, "pos_stride": isa.POS_BITS})


class SegmentReader(wiring.Component):
    """KV4 segments (``spec/kv.py``) arriving as bus beats, ``cmd.blocks`` segments of
    ``cmd.keys`` tokens each (per segment: the scale region, read to the end of its last
    (A, E) pair, then the rows region) -> one key per ``o`` beat: q, A, E, its position
    (kpos0 + block pos_stride + j) and ``last`` on the run's final key.  The scales wait in a
    table of ``kv_block_keys`` entries until their rows pass."""

    def __init__(self, g: Geometry):
        self.g = g
        super().__init__({
            "cmd": In(stream.Signature(run_layout())),
            "i": In(stream.Signature(g.data_width)),
            "o": Out(stream.Signature(k_layout(g.head_dim))),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        g = self.g
        D = g.head_dim
        cfg = Signal(run_layout())
        # (the streams' counters as wide as their counts, cfg.keys: round 29)
        m.submodules.us = us = Unpacker(g.data_width, 16, count_bits=len(cfg.keys))
        m.submodules.ur = ur = Unpacker(g.data_width, D * W_BITS, count_bits=len(cfg.keys))
        m.submodules.table = table = memory.Memory(shape=16, depth=g.kv_block_keys, init=[])
        tw, tr = table.write_port(), table.read_port()
        S = SegState
        state = Signal(S)
        blk = Signal(16)
        j = Signal(16)
        pos, bpos = Signal(isa.POS_BITS), Signal(isa.POS_BITS)
        sv = Signal()                              # the output stage holds a key
        # j == keys - 1 and blk == blocks - 1 as registers (``j_last``, ``b_last``): set where j / blk
        # start (keys == 1, blocks == 1) and where they count (j == keys - 2, blk == blocks - 2, against
        # registers of the command), so that no subtraction and compare sit in front of the state
        # (round 20: cfg -> the compares -> state / blk 11.06, a chain of 8 LUT5 for blk's)
        keys_m2, blocks_m2 = Signal(17), Signal(17)   # (17 bits: keys / blocks 0 match no j / blk, as before)
        keys_1 = Signal()                          # keys == 1
        j_last, b_last = Signal(), Signal()
        m.d.comb += [self.cmd.ready.eq(state == S.IDLE), self.busy.eq((state != S.IDLE) | sv)]
        # (the run's registers load in every idle cycle: only the state waits for cmd.valid)
        with m.If(state == S.IDLE):
            p = self.cmd.payload
            m.d.sync += [cfg.eq(p), blk.eq(0), pos.eq(p.kpos0), bpos.eq(p.kpos0),
                         keys_m2.eq(p.keys - 2), blocks_m2.eq(p.blocks - 2), keys_1.eq(p.keys == 1),
                         b_last.eq(p.blocks == 1)]
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += state.eq(S.ARM_S)
        m.d.comb += [us.cmd.payload.count.eq(cfg.keys), ur.cmd.payload.count.eq(cfg.keys)]
        # state == SCALES / ROWS as flip-flops of their own, set and cleared with the state (round 28: the stream's
        # ready and the take from one register, not a decode of the state; the reader's state -> the attention
        # unit's V stream valid was 9.0 levels in the glue's mapping after the LUT6 rotations)
        in_s, in_r = Signal(), Signal()
        with m.If((state == S.ARM_S) & us.cmd.ready):
            m.d.comb += us.cmd.valid.eq(1)
            m.d.sync += [state.eq(S.SCALES), in_s.eq(1), j.eq(0), j_last.eq(keys_1)]
        with m.If((state == S.ARM_R) & ur.cmd.ready):
            m.d.comb += ur.cmd.valid.eq(1)
            m.d.sync += [state.eq(S.ROWS), in_r.eq(1), j.eq(0), j_last.eq(keys_1)]
        # (round 33: the payloads whatever the phase, only the handshakes gated, as above)
        m.d.comb += [us.i.payload.eq(self.i.payload), ur.i.payload.eq(self.i.payload)]
        with m.If(in_s):
            m.d.comb += [us.i.valid.eq(self.i.valid), self.i.ready.eq(us.i.ready)]
        with m.If(in_r):
            m.d.comb += [ur.i.valid.eq(self.i.valid), self.i.ready.eq(ur.i.ready)]
        m.d.comb += [us.o.ready.eq(in_s), tw.en.eq(us.o.valid & us.o.ready), tw.addr.eq(j),
                     tw.data.eq(us.o.payload)]
        with m.If(tw.en):
            m.d.sync += [j.eq(j + 1), j_last.eq(j == keys_m2)]
            with m.If(j_last):
                m.d.sync += [state.eq(S.ARM_R), in_s.eq(0)]
        # rows: one stage that also reads the row's (A, E)
        adv = Signal()
        m.d.comb += adv.eq(~sv | self.o.ready)
        take = Signal()
        m.d.comb += [take.eq(in_r & ur.o.valid & adv), ur.o.ready.eq(take),
                     tr.en.eq(adv), tr.addr.eq(j)]
        s_q = Signal(D * W_BITS)
        s_pos = Signal(isa.POS_BITS)
        s_last = Signal()
        with m.If(adv):
            m.d.sync += [sv.eq(take), s_q.eq(ur.o.payload), s_pos.eq(pos), s_last.eq(j_last & b_last)]
        with m.If(take):
            m.d.sync += [j.eq(j + 1), pos.eq(pos + 1), j_last.eq(j == keys_m2)]
            with m.If(j_last):
                m.d.sync += [blk.eq(blk + 1), bpos.eq(bpos + cfg.pos_stride), pos.eq(bpos + cfg.pos_stride),
                             b_last.eq(blk == blocks_m2), state.eq(Mux(b_last, S.IDLE, S.ARM_S)), in_r.eq(0)]
        m.d.comb += [self.o.valid.eq(sv), self.o.payload.q.eq(s_q), self.o.payload.a.eq(tr.data[:8]),
                     self.o.payload.e.eq(tr.data[8:]), self.o.payload.pos.eq(s_pos), self.o.payload.last.eq(s_last)]
        return m


class SkewTranspose(wiring.Component):
    """Two buffers (``sel``) of ``rows`` x ``cols`` 32-bit words, written a row and read a column a
    cycle (``rows_in``; else written a column and read a row): the ATTN_SM APPLY transposes.  Word
    (r, j) lies in LUT-RAM bank (r + j) mod M at address r (+ M ``sel``), M = ``rows`` or ``cols``
    rounded up to a power of two, so that a row's words and a column's words each lie in M
    different banks: a write is one word a bank (the row or column rotated by its index, radix-4
    ``rotate_list``), a read one word a bank rotated back.  Instead of FF arrays whose reads choose
    a word of ``cols`` (or a row of 2 ``rows``) for every bit.  ``r_data`` is the read of ``r_sel``,
    ``r_idx`` (combinational: the RAM's asynchronous read); a write lands at the clock edge.
    ``r_ahead`` (``rows_in``): ``r_idx_next`` is the next cycle's ``r_idx`` (``r_idx`` a register of it), each
    bank's read row (bank - r_idx) mod M a register of it: no subtraction between ``r_idx`` and the RAMs.
    ``r_rot`` (not ``rows_in``): the read row rotated back by ``r_rot`` instead of ``r_idx`` (r_idx + s: the
    row's words from s on first, s + word < M).  ``primitive`` (round 28): the rotations' radix-4 stages as
    LUT6 instances (``rotate_list``)."""

    def __init__(self, rows: int, cols: int, rows_in: bool, r_ahead: bool = False, r_rot: bool = False,
                 primitive: bool = False):
        self.rows, self.cols, self.rows_in, self.primitive = rows, cols, rows_in, bool(primitive)
        self.ahead, self.rot_in = r_ahead and rows_in, r_rot and not rows_in
        self.M = 1 << ceil_log2(max(rows, cols, 1))
        wn, rn = (cols, rows) if rows_in else (rows, cols)        # words a write / a read
        wi, ri = (rows, cols) if rows_in else (cols, rows)        # the write's / read's index range
        super().__init__({
            "w_en": In(1), "w_sel": In(1), "w_idx": In(range(wi)), "w_data": In(wn * 32),
            "r_sel": In(1), "r_idx": In(range(ri)), "r_data": Out(rn * 32),
            **({"r_idx_next": In(range(ri))} if self.ahead else {}),
            **({"r_rot": In(_log2(self.M))} if self.rot_in else {}),
        })

    def elaborate(self, platform):
        m = Module()
        M, mb = self.M, _log2(self.M)
        wn = self.cols if self.rows_in else self.rows
        words = [self.w_data[32 * k:32 * (k + 1)] for k in range(wn)] + [Const(0, 32)] * (M - wn)
        widx, ridx = Signal(mb, name="widx"), Signal(mb, name="ridx")          # the indices, mb bits
        m.d.comb += [widx.eq(self.w_idx), ridx.eq(self.r_idx)]
        wwords = rotate_list(words, widx, sign=-1, m=m, name="wrot",          # bank b: word (b - idx) mod M
                             primitive=self.primitive)
        outs = []
        for b in range(M):
            mem = memory.Memory(shape=32, depth=2 * M, init=[])
            m.submodules[f"bank{b}"] = mem
            wp, rp = mem.write_port(), mem.read_port(domain="comb")
            # the row index of bank b's word: the write's / read's own when it is a row, else (b - idx) mod M
            wrow = widx if self.rows_in else (b - widx)[:mb]
            if self.ahead:
                rrow = Signal(mb, name=f"rrow{b}", init=b)
                m.d.sync += rrow.eq((b - self.r_idx_next)[:mb])
            else:
                rrow = (b - ridx)[:mb] if self.rows_in else ridx
            m.d.comb += [wp.en.eq(self.w_en), wp.addr.eq(Cat(wrow, self.w_sel)), wp.data.eq(wwords[b]),
                         rp.addr.eq(Cat(rrow, self.r_sel))]
            outs.append(rp.data)
        rn = self.rows if self.rows_in else self.cols
        rot = self.r_rot if self.rot_in else ridx
        rout = rotate_list(outs, rot, sign=1, m=m, name="rrot", primitive=self.primitive)
        m.d.comb += self.r_data.eq(Cat(*rout[:rn]))
        return m


class AttnState(enum.Enum, shape=4):
    IDLE = 0
    CHECK = 1
    QUERY = 2       # ATTN_Q QUERY: rows gathered from SPAD
    WORDS = 3       # ATTN_Q MREF / STATE: words from SPAD -> state words
    GATE = 4        # ATTN_KV gated: every block of the run readable?
    KV = 5          # ATTN_KV: the pass
    EMIT = 6        # ATTN_EMIT: words -> SPAD
    FINISH = 7
    SM = 8          # ATTN_SM: score rows -> the unit -> w rows
    OLOAD = 9       # ATTN_Q O: rows from SPAD -> the unit's o, W words a cycle
    ROWS = 10       # ATTN_Q ROWS: a token's rows' positions a cycle (no SPAD read)


class AttnMover(Mover):
    """ATTN_Q / ATTN_KV / ATTN_EMIT on the attention unit, whose query rows and states stay
    between instructions.  Rows (t, j) are row t heads + j of the unit.  ATTN_KV streams each
    block's K segment on read stream 0 and (APPLY) its V segment on read stream 1, each one
    request for its scale region and one for its rows; a gated run is checked against the
    directory, block by block, before anything is read.

    ATTN_SM MAX reads each row's scores NB = ``spad_banks`` beats (NB VL keys) a read, one read a
    cycle (the SPAD's wide read), into the unit's row maxima (``mx``: the words as they lie, their
    row, the first key's position, how many are keys; ``first`` on the first read of each row): R
    cycles per NB VL keys, R / (NB VL) a key (0.19 at R = 6, VL = 8, NB = 4).
    ATTN_SM APPLY feeds the unit's streamed-score pass (``cmd.src``): per group of G = AB VL keys
    (AB = ``Geometry.sm_apply_beats``: 2 at R = 12, VL = 8, 4 banks) it reads the R rows' AB beats of
    the group (row-major, SPAD, one wide read a row) into one of two transpose buffers (R x G words
    each, LUT RAM: ``SkewTranspose``) while the unit takes the other's keys, one a cycle, each with all R rows' scores, its
    position and (APPLY) its V scale word from read stream 1; the unit's w (per key, all rows) fill
    one of two buffers of R x G words (``SkewTranspose``) while the other is written back, a row's AB beats a cycle (one
    wide write, the other banks skipped; AB writes of a beat when w or w_stride is not a multiple of
    AB).  So a group takes max(R, G) cycles: 1 cycle a key at R = 12, G = 16 (the post's rate).

    ATTN_Q QUERY and O read row (t, j) at spad + t tok_stride + j head_stride a beat a cycle and hand
    the unit W = ``out_words(head_dim, VL)`` words a cycle (VL / W slices a beat: ``q``, W mantissas,
    the row's exponent and position with slice 0; ``ow``, W o words); ATTN_EMIT FINAL takes W words a
    transfer into its beats (STATE / MAX: one).  ATTN_Q ROWS reads nothing: it empties the states as
    QUERY does and writes the positions of a token's rows a cycle (``pw``: tokens cycles), leaving
    the query memory as it was, and ATTN_KV is refused after it until the next QUERY.

    The unit holds ``sm_rows`` rows of state (QUERY, O, MREF, STATE, ATTN_SM, ATTN_EMIT: R <= sm_rows),
    of which the first ``att_rows`` have query mantissas and products: ATTN_KV is refused while the
    last QUERY loaded more."""
    OPS = (isa.Opcode.ATTN_Q, isa.Opcode.ATTN_KV, isa.Opcode.ATTN_EMIT, isa.Opcode.ATTN_SM)

    def __init__(self, g: Geometry):
        super().__init__(g)
        self.unit = AttentionUnit(g.head_dim, g.sm_rows or g.att_rows, g.max_keys, lanes=g.att_lanes or None,
                                  primitive=g.primitive, words=out_words(g.head_dim, g.vl),
                                  max_words=g.vl * g.spad_banks, prod_rows=g.att_rows)
        mw = g.spad_banks * g.vl                        # GEMM_QK's score words (GemmMover ``qk_*``)
        self.qk_en, self.qk_end = Signal(), Signal()
        self.qk_row, self.qk_key = Signal(range(g.tokens + 1)), Signal(24)
        self.qk_data, self.qk_n = Signal(mw * 32), Signal(range(mw + 1))
        self.prog_start = Signal()       # a program starts (the sequencer's ``clear``): no deferred MAX armed

    def elaborate(self, platform):
        m = Module()
        g, b = self.g, self.bus
        D, VL, R, PR = g.head_dim, g.vl, g.sm_rows or g.att_rows, g.att_rows
        vl_log2, rb = _log2(VL), g.head_dim // g.vl
        m.submodules.unit = au = self.unit
        W = au.words                 # o words a cycle into the unit (ATTN_Q O) and out of it (FINAL)
        nt, wl = VL // W, _log2(W)
        m.submodules.kseg = ks = SegmentReader(g)
        m.submodules.vseg = vs = SegmentReader(g)
        op = self.instr[:6]
        q_ins, kv_ins, e_ins = self.view(isa.Opcode.ATTN_Q), self.view(isa.Opcode.ATTN_KV), self.view(isa.Opcode.ATTN_EMIT)
        # the decode in free-running stages (``stage``: valid k cycles after the word; the unit starts a
        # mover SETUP_CYCLES = 2 cycles after it, so CHECK sees stage 3)
        is_q, is_kv, is_emit, is_sm = (stage(m, op == o, f"is_{o.name.lower()}")
                                       for o in (isa.Opcode.ATTN_Q, isa.Opcode.ATTN_KV, isa.Opcode.ATTN_EMIT,
                                                 isa.Opcode.ATTN_SM))
        sm_ins = self.view(isa.Opcode.ATTN_SM)
        what = stage(m, q_ins.what.as_value(), "what")
        mode = stage(m, e_ins.mode.as_value(), "mode")
        # ATTN_Q and ATTN_EMIT share spad, tokens, heads, tok_stride, head_stride (same offsets)
        rowsf = stage(m, q_ins.tokens * q_ins.heads, "rowsf", 18)                          # stage 1
        rows_m1 = stage(m, rowsf - 1, "rows_m1", 18)                                       # stage 2
        S = AttnState
        state = Signal(S)
        m.d.comb += self.busy.eq(state != S.IDLE)
        with m.If(self.start):
            m.d.sync += state.eq(S.CHECK)

        # --- ranges ---------------------------------------------------------------------------------
        tok_m1 = stage(m, q_ins.tokens - 1, "tok_m1", 10)                                  # stage 1
        heads_m1 = stage(m, q_ins.heads - 1, "heads_m1", 8)
        p_tok = stage(m, tok_m1 * q_ins.tok_stride, "p_tok", 26)                           # stage 2
        p_head = stage(m, heads_m1 * q_ins.head_stride, "p_head", 24)
        load_o = is_q & (what == isa.AttnLoad.O)
        # MREF / STATE / emitted STATE / MAX words: rows x per_row (D + 2 for a state, else 1)
        big = stage(m, ((op == isa.Opcode.ATTN_Q) & (q_ins.what.as_value() == isa.AttnLoad.STATE))
                    | ((op == isa.Opcode.ATTN_EMIT) & (e_ins.mode.as_value() == isa.EmitMode.STATE)), "big")
        per_row = stage(m, Mux(big, D + 2, 1), "per_row", range(D + 3))                    # stage 2
        nwords = stage(m, Mux(big, rowsf * (D + 2), rowsf), "nwords", 24)                  # stage 2
        nwords_m1 = stage(m, nwords - 1, "nwords_m1", 24)                                  # stage 3
        nbeats = stage(m, (nwords + VL - 1) >> vl_log2, "nbeats", 24)                      # stage 3
        nbeats_m1 = stage(m, ((nwords + VL - 1) >> vl_log2) - 1, "nbeats_m1", 24)          # stage 3
        word_bad = stage(m, q_ins.spad + ((nwords + VL - 1) >> vl_log2) > g.spad_beats, "word_bad")
        rowwise = (is_q & ((what == isa.AttnLoad.QUERY) | load_o)) | (is_emit & (mode == isa.EmitMode.FINAL))
        rows_only = what == isa.AttnLoad.ROWS                  # no SPAD read: no range to check
        bad_rows = stage(m, (q_ins.tokens == 0) | (q_ins.heads == 0) | (rowsf > R), "bad_rows")   # stage 2
        row_bad = stage(m, q_ins.spad + p_tok + p_head + rb > g.spad_beats, "row_bad")             # stage 3
        bad_what = stage(m, q_ins.what.as_value() > isa.AttnLoad.ROWS, "bad_what")
        blocks_m1 = stage(m, kv_ins.blocks - 1, "blocks_m1", 16)                             # stage 1
        p_blk = stage(m, blocks_m1 * kv_ins.block_stride, "p_blk", 24)                      # stage 2
        bad_kv = stage(m, (kv_ins.blocks == 0) | (kv_ins.keys == 0) | (kv_ins.keys > g.kv_block_keys), "bad_kv0")
        wide_q = Signal()            # the last QUERY loaded rows past att_rows, or ROWS after it: no ATTN_KV
        bad_kv1 = stage(m, bad_kv, "bad_kv1")                                                 # stage 2
        bad_blk = stage(m, kv_ins.gated & (kv_ins.block0 + p_blk >= g.dir_entries), "bad_blk")   # stage 3
        go_kv = Signal()
        # ATTN_SM: R rows, keys a multiple of VL, score (and APPLY: w) rows inside SPAD
        sm_apply = stage(m, sm_ins.phase.as_value() == isa.AttnPass.APPLY, "sm_apply")
        sm_rows = stage(m, sm_ins.tokens * sm_ins.heads, "sm_rows", 18)                     # stage 1
        sm_rows_m1 = stage(m, sm_rows - 1, "sm_rows_m1", 18)                                # stage 2
        sm_groups = stage(m, sm_ins.keys >> vl_log2, "sm_groups", 16)
        sm_groups_m1 = stage(m, sm_groups - 1, "sm_groups_m1", 16)
        sm_groups_m2 = stage(m, sm_groups - 2, "sm_groups_m2", 16)                           # stage 2
        # (the last row's offset (rows - 1) stride as rows x stride with the stride taken off the other side:
        # round 21, the multiplier (a DSP) and the - 1 behind it in one stage were 8.25 levels to sm_rows_m1)
        p_s = stage(m, sm_rows * sm_ins.s_stride, "p_s", 34)                                # stage 2
        p_w = stage(m, sm_rows * sm_ins.w_stride, "p_w", 34)
        b_s = stage(m, sm_ins.scores + sm_groups - sm_ins.s_stride, "b_s")
        b_w = stage(m, sm_ins.w + sm_groups - sm_ins.w_stride, "b_w")
        bad_sm = stage(m, stage(m, (sm_ins.tokens == 0) | (sm_ins.heads == 0) | (sm_ins.keys == 0)
                                | (sm_ins.keys[:vl_log2] != 0 if vl_log2 else 0), "bad_sm0")
                       | (sm_rows > R), "bad_sm1")                                            # stage 2
        s_bad = stage(m, b_s + p_s > g.spad_beats, "s_bad")                                     # stage 3
        w_bad = stage(m, b_w + p_w > g.spad_beats, "w_bad")
        # CHECK's refusal: the range compares (stage 3) each gated by a flag of the decode, the rest chosen by
        # opcode a stage ahead (round 20: the choice by opcode, mode and what after the compares was 10-11
        # levels from ``mode`` to the state and the fault).  ATTN_Q: its rows, products, what, and (but ROWS)
        # its rows' or words' range; ATTN_EMIT: its rows, mode and range; ATTN_SM: its fields, scores' and
        # (APPLY) w's range; ATTN_KV: its fields, its blocks (gated), a wide QUERY before it
        bad_fix = stage(m, Mux(is_sm, bad_sm, Mux(is_q, bad_rows | bad_what,
                                                  Mux(is_emit, bad_rows | (mode > isa.EmitMode.MAX), bad_kv1))),
                        "bad_fix")                                                           # stage 3
        ranged = (is_q & ~rows_only) | is_emit
        sel_row = stage(m, ranged & rowwise, "sel_row")                                      # stage 2
        sel_word = stage(m, ranged & ~rowwise, "sel_word")
        sel_w = stage(m, is_sm & sm_apply, "sel_w")
        bad = (bad_fix | (sel_row & row_bad) | (sel_word & word_bad) | (is_sm & s_bad) | (sel_w & w_bad)
               | (is_kv & (bad_blk | wide_q)))
        sm_defer = stage(m, sm_ins.defer, "sm_defer")
        # an ATTN_SM MAX with defer armed: its first, key 0's position, keys, rows, for the next GEMM_QK
        armed, a_first = Signal(), Signal()
        a_pos, a_keys, a_rows = Signal(isa.POS_BITS + 1), Signal(16), Signal(range(R + 1))
        # the unit's command and ``clear`` from registers (round 20: CHECK's choice by mode / what reached
        # the unit's accept logic in one cycle, 15 levels): CHECK decides, the unit takes the command (it
        # is idle: CHECK waited for it) and ``clear`` the next cycle -- the first cycle of SM / EMIT / KV /
        # QUERY / ROWS, which nothing in the unit reads before (SM and KV end no earlier than their second)
        cmd_v, clr = Signal(), Signal()
        cmd_p = Signal(au.cmd.payload.shape())
        m.d.comb += [au.cmd.valid.eq(cmd_v), au.cmd.payload.eq(cmd_p), au.clear.eq(clr)]
        m.d.sync += clr.eq(0)
        with m.If(au.cmd.ready):
            m.d.sync += cmd_v.eq(0)
        # the row maxima (``mx``) a cycle later too (registered below): the unit is busy while one is held
        mx_r = Signal()
        aubusy = Signal()
        m.d.comb += aubusy.eq(au.busy | mx_r)
        # state SM, SM with APPLY and WORDS as registers of their own (one-hot beside ``state``; round 21: the
        # state's decode in front of the unit's ``s.valid`` / ``st`` ports, 9.06 / 10.0 levels joined)
        sm_on, sm_ap, wd_on = Signal(), Signal(), Signal()
        with m.If(state == S.CHECK):
            # (a deferred MAX's row maxima may still be in the unit's pipeline: every instruction waits)
            with m.If(aubusy):
                pass
            with m.Elif(bad):
                self.refuse(m)
                m.d.sync += state.eq(S.IDLE)
            with m.Elif(is_sm & ~sm_apply & sm_defer):     # MAX with defer: armed, done
                m.d.sync += [armed.eq(1), a_first.eq(sm_ins.first), a_pos.eq(sm_ins.kpos0), a_keys.eq(sm_ins.keys),
                             a_rows.eq(sm_rows)]
            with m.Elif(is_sm & ~sm_apply):                # MAX: row beats -> the unit's ``mx``, no command
                m.d.sync += sm_on.eq(1)
            with m.Elif(is_sm):
                m.d.sync += [cmd_v.eq(1), sm_on.eq(1), sm_ap.eq(1)]
            with m.Elif(is_q):
                m.d.sync += [clr.eq((what == isa.AttnLoad.QUERY) | rows_only),  # both empty every state
                             wd_on.eq((what != isa.AttnLoad.QUERY) & ~rows_only & ~load_o)]
                with m.If(what == isa.AttnLoad.QUERY):
                    m.d.sync += wide_q.eq(rowsf > PR)
                with m.If(rows_only):
                    m.d.sync += wide_q.eq(1)
            with m.Elif(is_emit):
                m.d.sync += cmd_v.eq(1)
            with m.Else():
                m.d.comb += go_kv.eq(~kv_ins.gated)
        # CHECK's next state and the unit's command chosen by opcode a stage ahead (stage 2), taken unless the
        # unit is busy or the instruction refused; the command loads in every CHECK (and GATE) cycle, ``cmd_v``
        # is clear then.  (Round 21: the unit's ``busy`` through CHECK's choices to ``state`` 10.0 levels, to
        # ``cmd_p`` / ``cmd.valid`` 9.0.)
        chk_to = stage(m, Mux(is_sm, Mux(~sm_apply & sm_defer, S.FINISH, S.SM),
                              Mux(is_q, Mux(what == isa.AttnLoad.QUERY, S.QUERY,
                                            Mux(rows_only, S.ROWS, Mux(load_o, S.OLOAD, S.WORDS))),
                                  Mux(is_emit, S.EMIT, Mux(kv_ins.gated, S.GATE, S.KV)))), "chk_to", S)
        cmd_sm, cmd_em, cmd_kv = (Signal(au.cmd.payload.shape(), name=f"cmd_{x}") for x in ("sm", "em", "kv"))
        m.d.comb += [cmd_sm.src.eq(1), cmd_sm.phase.eq(sm_ins.phase), cmd_sm.first.eq(sm_ins.first),
                     cmd_em.emit.eq(1), cmd_em.mode.eq(mode), cmd_em.rows.eq(rowsf),
                     cmd_kv.phase.eq(kv_ins.phase), cmd_kv.first.eq(kv_ins.first)]
        chk_cmd = stage(m, Mux(is_sm, cmd_sm, Mux(is_emit, cmd_em, cmd_kv)), "chk_cmd", au.cmd.payload.shape())
        with m.If((state == S.CHECK) & ~aubusy & ~bad):
            m.d.sync += state.eq(chk_to)
        with m.If((state == S.CHECK) | (state == S.GATE)):
            m.d.sync += cmd_p.eq(chk_cmd)

        # --- SPAD reads (QUERY, O: rows at (tok_stride, head_stride); MREF / STATE: words) -----------------------------------------------------------
        NB = g.spad_banks                                # ATTN_SM MAX: NB beats of a row a read (wide)
        rq = ReadQueue(m, b.spad_rd, g, "rq", wide=NB > 1)
        rq_beat = rq.words[:g.beat_bits]                 # beat a (every read but MAX's)
        t_i, h_i, i_i = Signal(range(R + 1)), Signal(range(R + 1)), Signal(range(rb + 1))
        w_i = Signal(24)                                 # word reads: beats issued
        w_more = Signal()                                # w_i != nbeats, as a register (round 19: nbeats's
                                                         # compare reached tbase through rq.issue)
        base = Signal(g.spad_bits + 20)                  # (t, j) row base
        tbase = Signal(g.spad_bits + 20)                 # token t's base
        # (whether a row's beat is left (t_i != tokens), the row's last beat and the token's last head as registers:
        # round 21: the compares of t_i with the word's ``tokens`` and of h_i with heads - 1, through the issue,
        # chose the next base: 10.0 levels from the instruction word to ``base`` / ``tbase``)
        t_more, i_last, h_last = Signal(), Signal(), Signal()
        heads_m2 = stage(m, heads_m1 - 1, "heads_m2", 8)                                 # stage 2
        # (the read addresses base + i_i and spad + w_i as registers, ``qa`` / ``wa``, set with them)
        qa, wa = Signal(g.spad_bits + 20), Signal(g.spad_bits + 20)
        with m.If(state == S.CHECK):
            m.d.sync += [t_i.eq(0), h_i.eq(0), i_i.eq(0), w_i.eq(0), base.eq(q_ins.spad), tbase.eq(q_ins.spad),
                         w_more.eq(nbeats != 0), t_more.eq(1), i_last.eq(rb == 1), h_last.eq(heads_m1 == 0),
                         qa.eq(q_ins.spad), wa.eq(q_ins.spad)]
        querying, wording, oloading = state == S.QUERY, wd_on, state == S.OLOAD
        with m.If(querying | oloading):
            m.d.comb += rq.issue.eq(rq.room & t_more)
            with m.If(rq.issue):
                m.d.sync += [i_i.eq(i_i + 1), i_last.eq(i_i == rb - 2), qa.eq(qa + 1)]
                with m.If(i_last):
                    m.d.sync += [i_i.eq(0), i_last.eq(rb == 1), h_i.eq(h_i + 1), h_last.eq(h_i == heads_m2),
                                 base.eq(base + q_ins.head_stride), qa.eq(base + q_ins.head_stride)]
                    with m.If(h_last):
                        m.d.sync += [h_i.eq(0), h_last.eq(heads_m1 == 0), t_i.eq(t_i + 1),
                                     t_more.eq(t_i != tok_m1), base.eq(tbase + q_ins.tok_stride),
                                     tbase.eq(tbase + q_ins.tok_stride), qa.eq(tbase + q_ins.tok_stride)]
        with m.If(wording):
            m.d.comb += rq.issue.eq(rq.room & w_more)
            with m.If(rq.issue):
                m.d.sync += [w_i.eq(w_i + 1), w_more.eq(w_i != nbeats_m1), wa.eq(wa + 1)]

        # QUERY and O: each beat's VL / W slices of W words -> the unit's q (W mantissas, the row's
        # exponent and position with slice 0: ``q_slice_layout``) or o (``ow``), one a cycle; QUERY is
        # done with its last write, O once the unit's write-back pipeline is empty
        qt, qh = Signal(range(R + 1)), Signal(range(R + 1))
        osub, oslice, orow, osent = Signal(range(max(nt, 2))), Signal(range(D // W + 1)), Signal(range(R + 1)), Signal()
        # the last row as a register counted down from rows - 1 (round 22: ``orow == rows_m1`` was the glue's
        # one 10.0-level path, orow -> state)
        oleft, o_last = Signal(18), Signal()
        # (and the row's last slice, oslice == D / W - 1: round 22, its compare (a carry) in front of QUERY's end,
        # 9.0 levels to the state)
        os_last = Signal()
        with m.If(state == S.CHECK):
            m.d.sync += [qt.eq(0), qh.eq(0), osub.eq(0), oslice.eq(0), orow.eq(0), osent.eq(0),
                         oleft.eq(rows_m1), o_last.eq(rows_m1 == 0), os_last.eq(D // W == 1)]
        oslices = Array(rq_beat[32 * W * x:32 * W * (x + 1)] for x in range(nt))
        mants = mantissas(rq_beat, VL)
        qslices = Array(mants[MANT_BITS * W * x:MANT_BITS * W * (x + 1)] for x in range(nt))
        qsb, qrb = q_addr_bits(R, D, W)
        with m.If((querying | oloading) & rq.valid & ~osent):
            m.d.comb += rq.take.eq(osub == nt - 1)
            m.d.sync += [osub.eq(osub + 1), oslice.eq(oslice + 1),
                         os_last.eq(Mux(os_last, D // W == 1, oslice == D // W - 2))]
            with m.If(osub == nt - 1):
                m.d.sync += osub.eq(0)
            with m.If(os_last):
                m.d.sync += [oslice.eq(0), orow.eq(orow + 1), qh.eq(qh + 1), oleft.eq(oleft - 1),
                             o_last.eq(oleft == 1)]
                with m.If(qh == heads_m1):
                    m.d.sync += [qh.eq(0), qt.eq(qt + 1)]
                with m.If(o_last):
                    m.d.sync += osent.eq(1)
                    with m.If(querying):
                        m.d.sync += state.eq(S.FINISH)
            with m.If(querying):
                m.d.comb += au.q.en.eq(1)
            with m.Else():
                m.d.comb += au.ow.en.eq(1)
        # (round 33) the unit's q / ow addresses and data whatever the state: it reads them only under their
        # ``en`` (its query memory's write, the row registers; ``pv1w`` chooses ``ow``'s words), so no AND with
        # the state a bit in front of its ports (~400 LUT2)
        m.d.comb += [au.q.addr.eq(Cat(oslice[:qsb], orow[:qrb])),
                     au.q.data.eq(Cat(qslices[osub], rq.exp, q_ins.qpos0 + qt)),
                     au.ow.row.eq(orow), au.ow.slice.eq(oslice), au.ow.data.eq(oslices[osub])]
        with m.If(oloading & osent & ~au.busy):
            m.d.sync += state.eq(S.FINISH)

        # ROWS: token t's rows (t heads .. t heads + heads - 1) at position qpos0 + t, a token a cycle
        rt, rlo = Signal(range(R + 1)), Signal(range(R + 1))
        # (round 32: rt == tok_m1 as a register, ``rt_last``, like ``w_last`` below: its compare was one of the
        # state register's 9.0 levels once abc9 remapped the glue)
        rt_last = Signal()
        tok_m2 = stage(m, tok_m1 - 1, "tok_m2", 10)                                       # stage 2
        with m.If(state == S.CHECK):
            m.d.sync += [rt.eq(0), rlo.eq(0), rt_last.eq(tok_m1 == 0)]
        # (round 33) the rows' bounds and position whatever the state (the unit reads them only under ``pw.en``)
        m.d.comb += [au.pw.lo.eq(rlo), au.pw.hi.eq(rlo + q_ins.heads), au.pw.pos.eq(q_ins.qpos0 + rt)]
        with m.If(state == S.ROWS):
            m.d.comb += au.pw.en.eq(1)
            m.d.sync += [rt.eq(rt + 1), rlo.eq(rlo + q_ins.heads), rt_last.eq(rt == tok_m2)]
            with m.If(rt_last):
                m.d.sync += state.eq(S.FINISH)

        # MREF / STATE: words, VL per beat, -> state word (row, word)
        wk = Signal(range(VL))
        wrow, wword = Signal(range(R + 1)), Signal(range(D + 2))
        wcount = Signal(24)
        # (the last word (wcount == nwords - 1) as a register: round 22, its compare reached the read queue's
        # count through ``take`` and the state, 10.0 levels from ``nwords_m1``)
        w_last = Signal()
        nwords_m2 = stage(m, nwords - 2, "nwords_m2", 24)                                 # stage 3
        with m.If(state == S.CHECK):
            m.d.sync += [wk.eq(0), wrow.eq(0), wword.eq(0), wcount.eq(0), w_last.eq(nwords_m1 == 0)]
        words = Array(rq_beat[32 * x:32 * (x + 1)] for x in range(VL))
        # (the row, word and data every cycle, only ``en`` behind the state: the unit reads them only with
        # ``en``; round 21: the state's decode in front of them was 10.0 levels to the unit's ``st.word``)
        m.d.comb += [au.st.row.eq(wrow), au.st.word.eq(wword), au.st.data.eq(words[wk])]
        with m.If(wording & rq.valid):
            m.d.comb += [au.st.en.eq(1), rq.take.eq((wk == VL - 1) | w_last)]
            m.d.sync += [wk.eq(wk + 1), wcount.eq(wcount + 1), w_last.eq(wcount == nwords_m2), wword.eq(wword + 1)]
            with m.If(wword == per_row - 1):
                m.d.sync += [wword.eq(0), wrow.eq(wrow + 1)]
            with m.If(w_last):
                m.d.sync += [state.eq(S.FINISH), wd_on.eq(0)]

        # --- ATTN_EMIT: words -> beats -> SPAD ---------------------------------------------------------
        # (round 21: the beat's words, its lanes, whether this transfer closes it and the beat's address from
        # registers -- ``etake`` the words this transfer takes, ``elanes`` the lanes written if it closes the
        # beat, ``eaddr`` the beat; before, ``mode``'s FINAL choice reached them through ek + W - 1 and its
        # compare: 11.06 levels to the SPAD's write lanes, 10.06 to eh / etbase)
        efinal = Signal()                                 # FINAL: W words a transfer, else one
        etake, elanes = Signal(VL), Signal(VL)
        eaddr = Signal(g.spad_bits + 20)                  # the beat written (STATE / MAX: spad + i; FINAL:
        ebase, etbase = Signal(g.spad_bits + 20), Signal(g.spad_bits + 20)      # ebase + eb)
        eb, eh = Signal(range(rb + 1)), Signal(range(R + 1))
        eheld = [Signal(32, name=f"eheld{x}") for x in range(VL - 1)]
        final = mode == isa.EmitMode.FINAL
        e_first = Mux(final, (1 << W) - 1, 1)            # a beat's first transfer (stage 3, CHECK)
        with m.If(state == S.CHECK):
            m.d.sync += [efinal.eq(final), etake.eq(e_first), elanes.eq(e_first), eaddr.eq(e_ins.spad),
                         ebase.eq(e_ins.spad), etbase.eq(e_ins.spad), eb.eq(0), eh.eq(0)]
        emitting = state == S.EMIT
        m.d.comb += au.o.tready.eq(emitting)
        wr = b.spad_wr
        # FINAL: W words a transfer (the beat's words etake); STATE / MAX: one
        tword = [au.o.tdata[32 * k:32 * (k + 1)] for k in range(W)]
        fresh = [Mux(efinal, tword[x % W], tword[0]) for x in range(VL)]
        beat_words = Cat(*[Mux(etake[x], fresh[x], eheld[x]) for x in range(VL - 1)], fresh[VL - 1])
        closes = elanes[VL - 1] | au.o.tlast
        m.d.comb += [wr.addr.eq(eaddr), wr.data.eq(beat_words), wr.exp.eq(0)]
        with m.If(emitting & au.o.tvalid):
            m.d.sync += [etake.eq(Mux(efinal, etake << W, etake << 1)),
                         elanes.eq(Mux(efinal, Cat(Const((1 << W) - 1, W), elanes), Cat(Const(1, 1), elanes)))]
            for x in range(VL - 1):
                with m.If(etake[x]):
                    m.d.sync += eheld[x].eq(fresh[x])
            with m.If(closes):
                m.d.comb += [wr.lanes.eq(elanes), wr.exp_en.eq(1)]
                m.d.sync += [etake.eq(Mux(efinal, (1 << W) - 1, 1)), elanes.eq(Mux(efinal, (1 << W) - 1, 1)),
                             eaddr.eq(eaddr + 1), eb.eq(eb + 1)]
                with m.If(eb == rb - 1):
                    m.d.sync += [eb.eq(0), eh.eq(eh + 1), ebase.eq(ebase + e_ins.head_stride)]
                    with m.If(efinal):
                        m.d.sync += eaddr.eq(ebase + e_ins.head_stride)
                    with m.If(eh == heads_m1):
                        m.d.sync += [eh.eq(0), ebase.eq(etbase + e_ins.tok_stride), etbase.eq(etbase + e_ins.tok_stride)]
                        with m.If(efinal):
                            m.d.sync += eaddr.eq(etbase + e_ins.tok_stride)
            with m.If(au.o.tlast):
                m.d.sync += state.eq(S.FINISH)

        # --- ATTN_KV: the gate, then K (and V) segments -> the unit -----------------------------------------
        gi, gk = Signal(17), Signal(17)                  # lookups issued / checked
        gblk = Signal(32)
        with m.If(state == S.CHECK):
            m.d.sync += [gi.eq(0), gk.eq(0), gblk.eq(kv_ins.block0)]
        gating = state == S.GATE
        m.d.comb += [b.dir_lookup_en.eq(gating & (gi != kv_ins.blocks)), b.dir_lookup_block.eq(gblk)]
        looked = Signal()
        m.d.sync += looked.eq(b.dir_lookup_en)
        with m.If(b.dir_lookup_en):
            m.d.sync += [gi.eq(gi + 1), gblk.eq(gblk + kv_ins.block_stride)]
        # (round 30b: the refusal's IDLE is the state register's last choice, ``gate_bad`` at the elaborate's
        # end: the answer (the directory's block RAM read, gated by the bus) reaches ``state`` through one
        # choice, not the KV step's and every other state's -- 9.0 levels once abc9 remapped it (gl30))
        gate_bad = Signal()
        with m.If(gating & looked):
            m.d.sync += gk.eq(gk + 1)
            with m.If(~b.dir_readable):
                self.refuse(m, isa.SeqFault.UNREADABLE_BLOCK)
                m.d.comb += gate_bad.eq(1)
            with m.Elif(gk == blocks_m1):                 # (blocks = 0 is refused)
                m.d.comb += go_kv.eq(1)
            with m.If(gk == blocks_m1):
                m.d.sync += state.eq(S.KV)
        apply = kv_ins.phase.as_value() == isa.AttnPass.APPLY
        # go_kv: the pass command and both segment readers' runs (the unit and readers are idle)
        for sr in (ks, vs):
            m.d.comb += [sr.cmd.payload.keys.eq(kv_ins.keys), sr.cmd.payload.blocks.eq(kv_ins.blocks),
                         sr.cmd.payload.kpos0.eq(kv_ins.kpos0), sr.cmd.payload.pos_stride.eq(kv_ins.pos_stride)]
        # (the readers take their runs a cycle after ``go_kv``, from its register ``kv_started``: round 22, the
        # gate's last answer (the directory's block RAM read) through ``go_kv`` to the readers' state, 9.0
        # levels.  Their first beats come from the requests of KV's first cycles, later than that)
        kv_started = Signal()
        m.d.sync += kv_started.eq(go_kv)
        with m.If(kv_started):
            m.d.comb += [ks.cmd.valid.eq(1), vs.cmd.valid.eq(apply)]
        with m.If(go_kv):
            m.d.sync += cmd_v.eq(1)
        # (the pass's command (``chk_cmd``, above) and the runs' registers load before ``go_kv``: every cycle out
        # of KV; the readers read them only from then on.  Round 21: the gate's last lookup through ``go_kv`` to
        # ``cmd_p`` / ``kseg`` / ``vseg`` was 9.0 levels)
        # requests: per block, the K segment's scale region then its rows region (and V's)
        scale_b = stage(m, pad_up(kv_ins.keys << 1), "scale_b", 20)
        kseg = Signal(ADDR_BITS)
        rblk = Signal(17)
        rphase = Signal()
        vseg = Signal(ADDR_BITS)
        # (rblk != blocks as a register: round 21, its compare with the word's ``blocks`` reached the read
        # streams through the requests' valid, 84 end points over 8)
        r_more = Signal()
        with m.If(state != S.KV):
            m.d.sync += [kseg.eq(ddr_addr(kv_ins.seg)), vseg.eq(ddr_addr(kv_ins.seg) + ddr_addr(kv_ins.v_off)),
                         rblk.eq(0), rphase.eq(0), r_more.eq(1)]             # (blocks = 0 is refused)
        s_beats = stage(m, ceil_beats(kv_ins.keys << 1, g.bus_log2), "s_beats", 17)
        r_beats = stage(m, ceil_beats(kv_ins.keys * (D // 2), g.bus_log2), "r_beats", 24)
        requesting = (state == S.KV) & r_more
        m.d.comb += [b.req0.payload.addr.eq(Mux(rphase, kseg + scale_b, kseg)),
                     b.req0.payload.beats.eq(Mux(rphase, r_beats, s_beats)),
                     b.req1.payload.addr.eq(Mux(rphase, vseg + scale_b, vseg)),
                     b.req1.payload.beats.eq(Mux(rphase, r_beats, s_beats))]
        with m.If(requesting & b.req0.ready & (~apply | b.req1.ready)):
            m.d.comb += [b.req0.valid.eq(1), b.req1.valid.eq(apply)]
            m.d.sync += rphase.eq(~rphase)
            with m.If(rphase):
                m.d.sync += [rblk.eq(rblk + 1), r_more.eq(rblk != blocks_m1),
                             kseg.eq(kseg + ddr_addr(kv_ins.seg_stride)), vseg.eq(vseg + ddr_addr(kv_ins.seg_stride))]
        m.d.comb += [ks.i.valid.eq(b.in0.valid), ks.i.payload.eq(b.in0.payload), b.in0.ready.eq(ks.i.ready),
                     vs.i.valid.eq(b.in1.valid), vs.i.payload.eq(b.in1.payload), b.in1.ready.eq(vs.i.ready),
                     au.k.valid.eq(ks.o.valid), au.k.payload.eq(ks.o.payload), ks.o.ready.eq(au.k.ready),
                     au.v.valid.eq(vs.o.valid), au.v.payload.q.eq(vs.o.payload.q), au.v.payload.a.eq(vs.o.payload.a),
                     au.v.payload.e.eq(vs.o.payload.e),
                     # (au.v.ready from the unit's register ``v_room`` and the two streams' valids, registers
                     # here: round 24, the unit's AND of them -- 1.0 level -- then the V reader, the bus and the
                     # read stream FIFO's valid were 9.0 levels joined)
                     vs.o.ready.eq(au.v_room & ks.o.valid & vs.o.valid)]
        with m.If((state == S.KV) & ~kv_started & ~au.busy & ~ks.busy & ~vs.busy & ~r_more):
            m.d.sync += state.eq(S.FINISH)
        kv_starved = (state == S.KV) & au.busy & ~ks.o.valid

        # --- ATTN_SM: score rows -> transpose buffers -> the unit; w -> buffers -> w rows -------------------
        sming = sm_on
        # key j's V scale word A | E << 8: per block of the run (block_keys = 0: one block of every key) a
        # request for its words, the requests running ahead of the Unpacker's frames: one frame of every
        # key when a block's words are whole bus beats (the blocks' beats then hold the words back to
        # back), else a frame per block (it drops the rest of the block's last beat; 2 cycles between)
        m.submodules.vsc = vsc = Unpacker(g.data_width, 16, count_bits=16)     # (sm_fn's 16 bits: round 29)
        sm_blk, sm_fblk = Signal(16), Signal(16)          # keys a request / a frame takes (blocks whose scale
        m.d.sync += [sm_blk.eq(Mux(sm_ins.block_keys == 0, sm_ins.keys, sm_ins.block_keys)),   # words are whole
                     sm_fblk.eq(Mux((sm_blk << 1)[:g.bus_log2] == 0, sm_ins.keys, sm_blk))]     # beats: one frame
        # (stages 1 and 2 of the decode)
        sm_qaddr = Signal(ADDR_BITS)
        sm_qleft, sm_fleft = Signal(16), Signal(16)       # keys still to ask for / to frame
        sm_qn, sm_fn = Signal(16), Signal(16)
        # (a frame's keys sm_fn = min(sm_fleft, sm_fblk) a register, set with sm_fleft: round 21, its compare and
        # choice reached the Unpacker's count registers, 9.06 levels from sm_fblk)
        # (a request's keys sm_qn = min(sm_qleft, sm_blk) and its beats registers, set with sm_qleft: round 22, the
        # compare, the choice and the round-up add in front of the read stream's count, 8.19 levels)
        # (every request but the last takes sm_blk keys, so the rest is under sm_blk when sm_qleft < 2 sm_blk; its
        # beats from sm_qlc = 2 sm_qleft + bus bytes - 1: a carry from registers each)
        sm_qbeats = Signal(COUNT_BITS)
        sm_qmore = Signal()                               # sm_qleft != 0
        sm_qlc = Signal(18)
        sm_blk2 = stage(m, sm_blk << 1, "sm_blk2", 17)                                  # stage 2
        sm_blkb = stage(m, ceil_beats(sm_blk << 1, g.bus_log2), "sm_blkb", COUNT_BITS)
        sm_ql0 = Mux(sm_apply, sm_ins.keys, 0)
        sm_fblk2 = stage(m, sm_fblk << 1, "sm_fblk2", 17)                                # stage 3
        with m.If(state == S.CHECK):
            m.d.sync += [sm_qaddr.eq(ddr_addr(sm_ins.seg)), sm_qleft.eq(sm_ql0), sm_qmore.eq(sm_ql0 != 0),
                         sm_qlc.eq((sm_ql0 << 1) + ((1 << g.bus_log2) - 1)),
                         sm_qn.eq(Mux(sm_ql0 < sm_blk, sm_ql0, sm_blk)),
                         sm_qbeats.eq(ceil_beats(Mux(sm_ql0 < sm_blk, sm_ql0, sm_blk) << 1, g.bus_log2)),
                         sm_fleft.eq(Mux(sm_apply, sm_ins.keys, 0)),
                         sm_fn.eq(Mux(sm_apply, Mux(sm_ins.keys < sm_fblk, sm_ins.keys, sm_fblk), 0))]
        q_nl, q_nn, q_nb, q_part = Signal(16), Signal(16), Signal(COUNT_BITS), Signal()
        m.d.comb += [q_nl.eq(sm_qleft - sm_qn), q_part.eq(sm_qleft < sm_blk2),
                     q_nn.eq(Mux(q_part, q_nl, sm_blk)),
                     q_nb.eq(Mux(q_part, (sm_qlc - (sm_qn << 1)) >> g.bus_log2, sm_blkb))]
        with m.If(sming & sm_qmore):
            m.d.comb += [b.req1.valid.eq(1), b.req1.payload.addr.eq(sm_qaddr),
                         b.req1.payload.beats.eq(sm_qbeats)]
            with m.If(b.req1.ready):
                m.d.sync += [sm_qleft.eq(q_nl), sm_qn.eq(q_nn), sm_qbeats.eq(q_nb), sm_qlc.eq(sm_qlc - (sm_qn << 1)),
                             sm_qmore.eq(sm_qleft != sm_qn),
                             sm_qaddr.eq(sm_qaddr + Cat(Const(0, ALIGN_LOG2), sm_ins.seg_stride))]
        m.d.comb += vsc.cmd.payload.count.eq(sm_fn)
        with m.If(sming & (sm_fleft != 0)):
            m.d.comb += vsc.cmd.valid.eq(1)
            with m.If(vsc.cmd.ready):
                # (min(sm_fleft - sm_fn, sm_fblk): every frame but the last takes sm_fblk keys, so the rest is
                # under sm_fblk when sm_fleft < 2 sm_fblk (after the last it is 0) -- no compare behind the subtraction)
                f_next = Signal(16)
                m.d.comb += f_next.eq(sm_fleft - sm_fn)
                m.d.sync += [sm_fleft.eq(f_next), sm_fn.eq(Mux(sm_fleft < sm_fblk2, f_next, sm_fblk))]
        # (the frames' valid whatever the state: the unpacker runs only in ATTN_SM, where its frames are set; only
        # the ready to the stream behind it -- one LUT fewer in front of the unit's ``s.valid``)
        m.d.comb += [vsc.i.valid.eq(b.in1.valid), vsc.i.payload.eq(b.in1.payload)]
        with m.If(sming):
            m.d.comb += b.in1.ready.eq(vsc.i.ready)
        # APPLY's groups: AB = ``sm_apply_beats`` beats (G = AB VL keys) of each row, one read (the SPAD's
        # wide read) and one write (wide, the other banks skipped) a row: R cycles per G keys each way
        AB, G = g.sm_apply_beats, g.sm_apply_beats * VL
        ab_log2, g_log2 = _log2(AB), _log2(G)
        # reads: group gi's R rows (AB beats each) into buffer gi mod 2 once it is free (LUT RAM, a row
        # written a cycle, a key's column read: ``SkewTranspose``)
        m.submodules.smtb = tb = SkewTranspose(R, G, rows_in=True, r_ahead=True, primitive=g.lut_primitive)
        sm_taken, sm_full = Signal(2), Signal(2)         # a buffer holds (or is getting) a group / all of it
        sm_fill, sm_clr = Signal(2), Signal(2)           # (strobes: a buffer's last row in / its last key out)
        m.d.sync += sm_full.eq((sm_full | sm_fill) & ~sm_clr)       # (CHECK: 0, below)
        sm_gi, sm_ri = Signal(16), Signal(range(R + 1))  # group (its first VL group) / row being read
        sm_raddr, sm_rbase = Signal(g.spad_bits + 20), Signal(g.spad_bits + 20)
        # (the read address by the one-hot SM / WORDS registers whatever the state, else QUERY / O's: only ``issue``
        # reads it -- round 22, the state's decode in front of the SPAD's read address, 8.19 levels joined)
        m.d.comb += rq.addr.eq(Mux(sm_on, sm_raddr, Mux(wd_on, wa, qa)))
        sm_fsel, sm_fr = Signal(), Signal(range(R + 1))  # buffer / row the next beat lands in
        # (round 30b: the transpose's write data / row / buffer whatever the state, only ``w_en`` behind ATTN_SM
        # below: the banks' contents are the same, and the data's AND with ``sming`` in front of the write
        # rotation is gone)
        m.d.comb += [tb.w_sel.eq(sm_fsel), tb.w_idx.eq(sm_fr), tb.w_data.eq(rq.words[:G * 32])]
        sm_gmore = Signal()                              # sm_gi < sm_groups, as a register
        with m.If(state == S.CHECK):
            m.d.sync += [sm_taken.eq(0), sm_full.eq(0), sm_gi.eq(0), sm_ri.eq(0), sm_raddr.eq(sm_ins.scores),
                         sm_rbase.eq(sm_ins.scores), sm_fsel.eq(0), sm_fr.eq(0), sm_gmore.eq(sm_groups != 0)]
        isel = sm_gi[ab_log2]
        sm_mfirst, sm_mpos = Signal(), Signal(isa.POS_BITS + 1)     # MAX: group 0's reads; the read's key 0
        sm_mg = Signal(16)                                           # MAX: the read's first group
        with m.If(state == S.CHECK):
            m.d.sync += [sm_mfirst.eq(sm_ins.first), sm_mpos.eq(sm_ins.kpos0), sm_mg.eq(0)]
        # the unit's ``mx`` port from registers (round 20: the MAX beats' and the deferred MAX's choice
        # reached the unit's count / en compares in one cycle, 14.1 levels): a write a cycle later,
        # ``aubusy`` covering the cycle it is held (CHECK, SM's end wait)
        mxr = Signal(data.StructLayout({"row": len(au.mx.row), "first": 1, "pos": len(au.mx.pos),
                                        "data": len(au.mx.data)}))
        # the count min(d, n) (d the keys left from the words' first, n the words) a register: ``mx_min``.  (Round 21:
        # GEMM_QK's key choice, the subtraction, the compare with qk_n and the choice before the register were 9.19
        # levels from ``gemm.pv`` to ``mxr``, so the compare moved after registers of d and n; round 24: there, in
        # front of the unit's "j < count" flags (6.0 levels in), 9.06 joined -- and the qk path to them is 4.19 now.)
        mx_cnt = Signal(len(au.mx.count))

        def mx_min(d, n):                               # (d in 20 bits, n in the count's, as the registers were)
            d, n = Value.cast(d)[:20], Value.cast(n)[:len(mx_cnt)]
            return Mux(d >= n, n, d)
        m.d.sync += mx_r.eq(0)
        m.d.comb += [au.mx.en.eq(mx_r), au.mx.row.eq(mxr.row), au.mx.first.eq(mxr.first), au.mx.pos.eq(mxr.pos),
                     au.mx.count.eq(mx_cnt), au.mx.data.eq(mxr.data)]
        with m.If(sming):
            m.d.comb += [
                         rq.issue.eq(rq.room & sm_gmore
                                     & (~sm_apply | ~sm_taken.bit_select(isel, 1) | (sm_ri != 0))),
                         rq.take.eq(rq.valid)]
            with m.If(rq.issue):
                m.d.sync += [sm_ri.eq(sm_ri + 1), sm_raddr.eq(sm_raddr + sm_ins.s_stride)]
                for x in range(2):
                    with m.If(isel == x):
                        m.d.sync += sm_taken[x].eq(1)
                with m.If(sm_ri == sm_rows_m1):          # MAX: NB groups a read, APPLY: AB
                    step = Mux(sm_apply, AB, NB)
                    m.d.sync += [sm_ri.eq(0), sm_gi.eq(sm_gi + step), sm_raddr.eq(sm_rbase + step),
                                 sm_rbase.eq(sm_rbase + step), sm_gmore.eq(sm_gi + step < sm_groups)]
            with m.If(rq.valid & ~sm_apply):           # MAX: NB beats (row sm_fr, keys sm_mpos ..) -> mx
                left = Signal(16)                        # the row's groups from this read on
                m.d.comb += left.eq(sm_groups - sm_mg)
                m.d.sync += [mx_r.eq(1), mxr.row.eq(sm_fr), mxr.first.eq(sm_mfirst),
                             mxr.pos.eq(sm_mpos), mx_cnt.eq(mx_min(left << vl_log2, NB * VL))]
                with m.If(sm_fr == sm_rows_m1):
                    m.d.sync += [sm_mfirst.eq(0), sm_mpos.eq(sm_mpos + NB * VL), sm_mg.eq(sm_mg + NB)]
            m.d.comb += tb.w_en.eq(rq.valid)
            with m.If(rq.valid):
                m.d.sync += sm_fr.eq(sm_fr + 1)
                with m.If(sm_fr == sm_rows_m1):
                    m.d.sync += [sm_fr.eq(0), sm_fsel.eq(~sm_fsel)]
                    for x in range(2):
                        with m.If(sm_fsel == x):
                            m.d.comb += sm_fill[x].eq(1)
        # MAX with defer: the next GEMM_QK's score words (row qk_row, keys qk_key .. + qk_n) -> mx
        qk_key_lo, qk_in = self.qk_key[:16], self.qk_key < a_keys      # keys < 2^16 (the field)
        qk_left = Signal(17)
        m.d.comb += qk_left.eq(a_keys - qk_key_lo)
        # (the words every cycle outside ATTN_SM, only the strobe behind the write's condition: as the
        # registers' load enable it put 1 314 of the glue's end points at 9 levels)
        with m.If(~sming):
            m.d.sync += [mxr.row.eq(self.qk_row), mxr.first.eq(a_first & (self.qk_key == 0)),
                         mxr.pos.eq(a_pos + qk_key_lo), mx_cnt.eq(mx_min(qk_left, self.qk_n))]
        # the words every cycle, ATTN_SM's read or GEMM_QK's (round 29: they were held outside a MAX beat, a
        # choice of three and a load enable, ~2 LUT a bit of 1 024; the unit reads them only behind ``en``, mx_r,
        # which is set only in the cycle the words it goes with are loaded: one LUT3 a bit)
        m.d.sync += mxr.data.eq(Mux(sming, rq.words, self.qk_data))
        with m.If(armed & self.qk_en & (self.qk_row < a_rows) & qk_in):
            m.d.sync += mx_r.eq(1)
        # disarmed by the GEMM_QK's end, and by a program's start (round 21: a MAX deferred at the end of a
        # program, or of one that faulted, wrote the next program's first GEMM_QK's maxima; golden as well)
        with m.If(self.qk_end | self.prog_start):
            m.d.sync += armed.eq(0)
        # keys: key j of the group in buffer sm_esel -> the unit (rows >= R: whatever the buffer
        # holds; their states are not this program's); a group's last key: G - 1, or the last key
        sm_esel, sm_j = Signal(), Signal(range(G))
        sm_eg = Signal(16)                               # VL groups sent
        sm_pos = Signal(isa.POS_BITS)
        # the VL group of key sm_j (sm_eg + sm_j / VL) and whether it is the pass's last, as registers (round 19:
        # the sum and its compare were 9 levels from sm_j to sm_eg / sm_full)
        sm_vg, sm_vlast = Signal(16), Signal()
        # the buffer sm_esel is full (``sm_cur``) as a register, set from the next values (round 22: the pick and
        # the owner's gate of the V scale stream in front of the unit's ``s.valid``, 9.06 levels joined)
        sm_cur = Signal()
        m.d.sync += sm_cur.eq(((sm_full | sm_fill) & ~sm_clr).bit_select(sm_esel ^ sm_clr.any(), 1))
        # sm_j's next value (``sm_j_n``): the key buffer's per-bank read rows are registers of it (``r_ahead``)
        sm_j_n = Signal(range(G))
        m.d.comb += sm_j_n.eq(sm_j)
        m.d.sync += sm_j.eq(sm_j_n)
        with m.If(state == S.CHECK):
            m.d.comb += sm_j_n.eq(0)
            m.d.sync += [sm_esel.eq(0), sm_cur.eq(0), sm_eg.eq(0), sm_pos.eq(sm_ins.kpos0), sm_vg.eq(0),
                         sm_vlast.eq(sm_groups_m1 == 0)]
        sm_jlast = Signal()                              # sm_j is its group's last key
        sm_final = Signal()                              # .. and the pass's
        sm_vend = Signal(init=VL == 1)                   # sm_j is its VL group's last key
        # (sm_vend a register of sm_j's next value: its compare was in front of the unit's ``s.payload.last``, whose
        # port reaches 5 levels in: 8.0 joined)
        m.d.sync += sm_vend.eq(sm_j_n[:vl_log2] == VL - 1)
        m.d.comb += [sm_final.eq(sm_vend & sm_vlast),
                     sm_jlast.eq((sm_j == G - 1) | sm_final)]
        sp = au.s.payload
        m.d.comb += [tb.r_sel.eq(sm_esel), tb.r_idx.eq(sm_j), tb.r_idx_next.eq(sm_j_n)]
        m.d.comb += [sp.s.eq(tb.r_data), sp.pos.eq(sm_pos),
                     sp.va.eq(vsc.o.payload[:8]), sp.ve.eq(vsc.o.payload[8:]), sp.last.eq(sm_final)]
        s_go = Signal()
        # (the V scale stream's valid as it is, ``ivalid``: sm_ap holds only while this mover owns the bus, and
        # vsc.o.valid is vsc.busy and it -- so no owner's gate and no LUT of it shared with others in front of the
        # unit's ``s.valid``, whose port reaches 6 levels in: round 22, 9.06 levels joined)
        m.d.comb += [au.s.valid.eq(sm_ap & sm_cur & vsc.busy & b.ivalid[1]),
                     s_go.eq(au.s.valid & au.s.ready), vsc.o.ready.eq(s_go & sm_apply)]
        with m.If(s_go):
            m.d.comb += sm_j_n.eq(sm_j + 1)
            m.d.sync += sm_pos.eq(sm_pos + 1)
            with m.If(sm_vend):
                m.d.sync += [sm_vg.eq(sm_vg + 1), sm_vlast.eq(sm_vg == sm_groups_m2)]
            with m.If(sm_jlast):
                m.d.comb += sm_j_n.eq(0)
                m.d.sync += [sm_eg.eq(sm_eg + AB), sm_esel.eq(~sm_esel)]
                for x in range(2):
                    with m.If(sm_esel == x):
                        m.d.comb += sm_clr[x].eq(1)
                        m.d.sync += sm_taken[x].eq(0)
        # w: key after key into buffer wsel (word j of each row's AB beats), then R rows -> SPAD: one wide
        # write a row (AB beats, the banks outside them and past the pass's last beat skipped) when w and
        # w_stride are multiples of AB, else AB writes of a beat (those past the last beat skipped)
        m.submodules.smwb = wb = SkewTranspose(R, G, rows_in=False, r_rot=AB > 1,   # LUT RAM: a key's column in,
                                               primitive=g.lut_primitive)           # a row out
        wfull = Signal(2)
        w_isel, w_j = Signal(), Signal(range(G))
        w_ig = Signal(16)                                 # VL groups taken
        w_osel, w_r = Signal(), Signal(range(R + 1))
        w_g = Signal(16)                                  # VL groups written
        w_addr, w_base = Signal(g.spad_bits + 20), Signal(g.spad_bits + 20)
        w_vg, w_vlast = Signal(16), Signal()              # w_ig + w_j / VL, and whether it is the pass's last
        with m.If(state == S.CHECK):
            m.d.sync += [wfull.eq(0), w_isel.eq(0), w_j.eq(0), w_ig.eq(0), w_osel.eq(0), w_r.eq(0), w_g.eq(0),
                         w_addr.eq(sm_ins.w), w_base.eq(sm_ins.w), w_vg.eq(0), w_vlast.eq(sm_groups_m1 == 0)]
        m.d.comb += au.w.ready.eq(sming & ~wfull.bit_select(w_isel, 1))
        m.d.comb += [wb.w_en.eq(au.w.valid & au.w.ready), wb.w_sel.eq(w_isel), wb.w_idx.eq(w_j),
                     wb.w_data.eq(au.w.payload)]
        with m.If(au.w.valid & au.w.ready):
            m.d.sync += w_j.eq(w_j + 1)
            with m.If(w_j[:vl_log2] == VL - 1):
                m.d.sync += [w_vg.eq(w_vg + 1), w_vlast.eq(w_vg == sm_groups_m2)]
            with m.If((w_j == G - 1) | ((w_j[:vl_log2] == VL - 1) & w_vlast)):
                m.d.sync += [w_j.eq(0), w_isel.eq(~w_isel), w_ig.eq(w_ig + AB)]
                for x in range(2):
                    with m.If(w_isel == x):
                        m.d.sync += wfull[x].eq(1)
        m.d.comb += [wb.r_sel.eq(w_osel), wb.r_idx.eq(w_r)]
        w_row = wb.r_data
        w_left = Signal(16)                               # VL groups (beats) from this group's on: sm_groups - w_g
        with m.If(state == S.CHECK):                      # as a register (round 21: the subtraction in front of
            m.d.sync += w_left.eq(sm_groups)              # the row's end and the skipped banks, 8.19 levels)
        w_rowdone = Signal()                              # this cycle's write ends the row
        if AB > 1:
            w_wide = stage(m, (sm_ins.w[:ab_log2] == 0) & (sm_ins.w_stride[:ab_log2] == 0), "w_wide")
            w_part = Signal(ab_log2)                      # narrow writes: the row's beat
            with m.If(state == S.CHECK):
                m.d.sync += w_part.eq(0)
            # narrow writes (w or w_stride not multiples of AB) through the wide port too, when the buffer's banks are
            # the row's words (M = G): beat w_addr + w_part alone (``wide_skip``), its data the row's beat w_part in
            # bank (w_addr + w_part) mod NB -- the read rotated back by w_r + s VL, s = -w_addr mod AB, puts beat
            # (q + s) mod AB in every bank q mod AB (wide writes: s = 0, the row as it is).  No choice of a beat and
            # no narrow data behind the rotation (round 22: the read, the rotation, the beat's choice, the choice
            # of EMIT's data and the owner's in front of the SPAD's ``wr.data``, 9.0 levels joined)
            via_wide = wb.M == G
            if via_wide:
                m.d.comb += wb.r_rot.eq(w_r + ((-w_addr)[:ab_log2] << vl_log2))
            else:
                m.d.comb += wb.r_rot.eq(w_r + (w_part << vl_log2))
            pos = w_addr[ab_log2:_log2(NB)] if AB < NB else Const(0, 1)      # the AB beats' place among the banks
            beats_in = Signal(AB)                         # the group's beats: all, or those left
            m.d.comb += beats_in.eq(Mux(w_left >= AB, (1 << AB) - 1, (Const(1, AB + 1) << w_left[:ab_log2 + 1]) - 1))
            m.d.comb += w_rowdone.eq(w_wide | (w_part == AB - 1) | ~beats_in.bit_select(w_part + 1, 1))
            # the wide data whatever the state (only wide_en writes it; EMIT has no wide writes)
            m.d.comb += wr.wide.eq(Cat(*[w_row] * (NB // AB)))
            with m.If(sming & wfull.bit_select(w_osel, 1)):
                with m.If(w_wide):
                    m.d.comb += [wr.wide_en.eq(1),
                                 wr.wide_skip.eq(~(Cat(beats_in, Const(0, NB)) << (pos * AB)))]
                if via_wide:
                    with m.Else():
                        m.d.comb += [wr.wide_en.eq(1),
                                     wr.wide_skip.eq(~(Const(1, NB) << (w_addr + w_part)[:_log2(NB)]))]
                m.d.comb += wr.addr.eq(w_addr + Mux(w_wide, 0, w_part))
                with m.If(~w_rowdone):
                    m.d.sync += w_part.eq(w_part + 1)
                with m.Else():
                    m.d.sync += w_part.eq(0)
        else:
            m.d.comb += w_rowdone.eq(1)
            with m.If(sming & wfull.bit_select(w_osel, 1)):
                m.d.comb += wr.addr.eq(w_addr)
        if AB == 1 or not via_wide:
            with m.If(sm_on):                             # (the data in SM whatever else: only lanes write it)
                m.d.comb += wr.data.eq(w_row[:VL * 32])
        with m.If(sming & wfull.bit_select(w_osel, 1)):
            m.d.comb += [wr.exp.eq(0), wr.lanes.eq((1 << VL) - 1), wr.exp_en.eq(1)]
            with m.If(w_rowdone):
                m.d.sync += [w_r.eq(w_r + 1), w_addr.eq(w_addr + sm_ins.w_stride)]
                with m.If(w_r == sm_rows_m1):
                    m.d.sync += [w_r.eq(0), w_osel.eq(~w_osel), w_g.eq(w_g + AB), w_left.eq(w_left - AB),
                                 w_addr.eq(w_base + AB),
                                 w_base.eq(w_base + AB)]
                    for x in range(2):
                        with m.If(w_osel == x):
                            m.d.sync += wfull[x].eq(0)
        sm_started = Signal()
        m.d.sync += sm_started.eq(state == S.CHECK)
        with m.If(sming & ~sm_started & Mux(sm_apply, sm_eg >= sm_groups, sm_gi >= sm_groups) & ~aubusy & ~rq.busy
                  & (~sm_apply | ((w_g >= sm_groups) & ~vsc.busy & (sm_fleft == 0)))):
            m.d.sync += [state.eq(S.FINISH), sm_on.eq(0), sm_ap.eq(0)]
        # starved: waiting for K (ATTN_KV) or for a V scale word (ATTN_SM APPLY)
        m.d.comb += b.starved.eq(kv_starved | (sm_ap & sm_cur & ~(vsc.busy & b.ivalid[1])))
        with m.If(state == S.FINISH):
            m.d.comb += self.done.eq(1)
            m.d.sync += state.eq(S.IDLE)
        with m.If(gate_bad):                              # (last: see ``gate_bad``)
            m.d.sync += state.eq(S.IDLE)
        return m
