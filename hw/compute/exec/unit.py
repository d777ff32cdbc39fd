"""The execute unit (EX queue of ``spec/isa.py``): one EX instruction at a time, bit-exact with
the golden model (``mcf.sw.golden.fixed``).

    instr (256-bit words whose semaphore wait is met) -> decode -> one mover -> done / fault
                   SPAD (scratchpad)          read streams 0, 1 ─┐
    movers: DIR · LOAD/STORE · EMBED · GEMM (matrix) · VEC (vector) · ATTN (attention) · KVW (KV writer)
                   weight loader (ping-pong) ─┤      DDR writer ─┤
                                               m_axi (one AXI4 master)

Ports (the sequencer's side, ``docs/node.md``):

* ``instr``: ``lib.stream`` of instruction words, ready only while the unit is idle.  The decode
  is registered: ``SETUP_CYCLES`` (2) cycles after the word is taken, END and SYNC complete, a
  mover starts, or an opcode of another queue / reserved bits set fault ILLEGAL_INSTRUCTION (a
  field out of range for this build: the mover's check, ILLEGAL_INSTRUCTION too).
* ``done``: one-cycle strobe, the instruction completed (SPAD written, DDR writes
  acknowledged).  ``fault`` + ``fault_cause`` (``spec.isa.SeqFault``, valid with ``fault`` only): one-cycle strobe, it was
  refused (ILLEGAL_INSTRUCTION, ILLEGAL_TOKEN, UNREADABLE_BLOCK, before anything moved) or DDR
  answered an error (AXI_ERROR, after the instruction's transfers ended).
* ``m_axi``: one AXI4 master (``DDR_ADDR_BITS`` = 48-bit addresses: the interconnect checks the
  DMA window on the whole address and narrows it).  Reads: ARID 0 = the weight loader (GEMM
  weights, ping-pong buffers), ARID 1 = read stream 0 (GEMM scales, LOAD data, EMBED table rows,
  ATTN K segments), ARID 2 = read stream 1 (GEMM bias, EMBED ids, ATTN V segments); R beats of
  different IDs may interleave.  Writes (AWID 0): STORE, KVW.
* ``m_axi_w0`` .. ``m_axi_w<W-1>`` (only when ``NodeConfig.weight_ports`` W > 1): one read-only AXI4
  master per weight loader; a GEMM's weight descriptors go to loaders 0, 1, .. W - 1 in turn and
  their packets (words of W bus beats) come back in the same turn, so the weights stream at up to
  W bus beats per cycle over W HP ports.  ``m_axi`` then carries the read streams (scales, bias,
  LOAD, EMBED, ATTN) and the writer only.  With a weight clock (``NodeConfig.weight_clock_hz``) the
  ``m_axi_w<k>`` masters belong to the clock domain ``axi`` (the HP ports' faster clock: ports
  ``axi_clk`` / ``axi_rst`` of the Verilog) and the loaders' dual-clock buffer (``WeightLoaders``) hands the engine
  ``weight_ratio`` bus beats per cycle (words of W x ratio beats).  The unit waits for every
  response it asked for: an interconnect that refuses a transaction must still answer it (or
  reset the unit).
* ``clear``: a program starts (the sequencer's ``clear``, the datapath idle): a deferred ATTN_SM MAX
  still armed (no GEMM_QK after it) is dropped.
* ``dir_wr``: the receive engine's directory writes (KV_DRAIN / KV_INVALIDATE): they take the
  write port first, DIR instructions wait.  ``dir_rd``: the registers' read port (state one
  cycle after ``en``).
* ``perf``: strobes named after ``spec.isa.PerfCounter`` (``busy_gemm`` ... ``busy_ldst``,
  ``mac_beats``: a matrix issue cycle, ``stall_ex_ddr``: the running mover waits for DDR data,
  ``ddr_rd_bytes`` / ``ddr_wr_bytes``: bytes moved on ``m_axi`` this cycle).
"""
from __future__ import annotations

import operator
from functools import reduce

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from mcf.hw.axi.full import AXI4Signature
from mcf.hw.axis import AxisRegister
from mcf.hw.compute.directory import ReplicaDirectory
from mcf.hw.compute.exec.movers import (ADDR_BITS, LAYOUT, AttnMover, DirMover, EmbedMover, FaultCause, GemmMover,
                                        Geometry, KvwMover, LoadStoreMover, MoverBus, VecMover)
from mcf.hw.compute.exec.spad import Scratchpad
from mcf.hw.compute.exec.streams import ReadStreams
from mcf.hw.dma.loader import DmaLoader
from mcf.hw.dma.weights import WeightLoaders
from mcf.hw.dma.writer import DmaWriter
from mcf.hw.lut import mux4
from mcf.hw.registry import block
from mcf.spec.params import Choice, Range
from mcf.spec import isa
from mcf.spec.node import NodeConfig
from mcf.spec.plan import REPLICA_STATE_BITS

#: AXI IDs on ``m_axi``.
WEIGHT_ID, STREAM_ID_BASE = 0, 1
ID_WIDTH = 2
#: The perf strobes that are single bits (``spec.isa.PerfCounter`` names, lower case).
PERF_BITS = ("busy_gemm", "busy_vec", "busy_attn", "busy_kvw", "busy_embed", "busy_ldst", "mac_beats", "stall_ex_ddr")


class DirWriteSignature(wiring.Signature):
    """A directory write (the writer's view)."""

    def __init__(self, block_bits: int):
        super().__init__({"en": Out(1), "block": Out(block_bits), "state": Out(REPLICA_STATE_BITS)})


class DirReadSignature(wiring.Signature):
    """A directory read (the reader's view): ``state`` one cycle after ``en``."""

    def __init__(self, block_bits: int):
        super().__init__({"en": Out(1), "block": Out(block_bits), "state": In(REPLICA_STATE_BITS)})


class PerfSignature(wiring.Signature):
    """The performance strobes (the unit's view): ``PERF_BITS`` one bit each, and the DDR bytes
    moved this cycle (on all of the unit's ``ports`` AXI4 masters)."""

    def __init__(self, data_width: int, ports: int = 1):
        nbytes = data_width // 8 * ports
        super().__init__({**{name: Out(1) for name in PERF_BITS},
                          "ddr_rd_bytes": Out(range(nbytes + 1)), "ddr_wr_bytes": Out(range(nbytes + 1))})


class UnitState(enum.Enum, shape=3):
    IDLE = 0
    DECODE = 1      # the word's fields settle into the movers' registered decode (``SETUP_CYCLES``)
    RUN = 2
    DISPATCH = 3    # the registered decode: END / SYNC complete, a mover starts, or ILLEGAL_INSTRUCTION


#: Cycles from the instruction word's register to a mover's ``start`` strobe: the movers register
#: what they derive from the word (products, sums, range checks) in free-running stages, stage k
#: valid k cycles after the word, so a mover may use stage ``SETUP_CYCLES + 1`` from the cycle after
#: ``start`` on (docs/timing.md, the execute unit's glue).  Every EX instruction pays them.
SETUP_CYCLES = 2

#: The members of ``MoverBus`` that come back to the movers gated by ``owner``: the handshakes (a mover that
#: does not own the bus sees no valid, ready or done); the rest (data, payloads, tkeep / tlast) go to every
#: mover as they are.
BUS_GATED = frozenset({"valid", "ready", "tvalid", "tready", "wdone", "dir_wr_ready", "dir_readable"})


#: The SPAD port members that the SPAD reads only under an enable of the same port (``wr.lanes`` / ``exp_en`` /
#: ``wide_en``, ``rd.en``), and the movers that drive them (the others drive none: constant 0).  Whatever they are
#: while no mover writes / reads, the SPAD ignores them, so they take the owner's value by choices, not an AND a
#: mover and an OR (round 27: the AND-OR in front of the SPAD's ports, ~4 K LUT):
#: * ``SPAD_DATA``: by ``spad_sel`` (a register of the running mover's ``SPAD_CODE``, set with ``owner``), a binary
#:   tree with no choice for a code no driver has: the narrow data's LDST / EMBED / VEC / ATTN one 4:1 choice in a
#:   LUT, GEMM's beside it;
#: * ``SPAD_CHAIN`` (the addresses, the wide data of its two writers): a chain of choices on the ``owner`` bits, the
#:   last mover's unconditioned, the first movers' values one LUT in front of the SPAD: the addresses that are sums in
#:   their movers (GEMM's and ATTN's write address, VEC's and GEMM's read address) first (in the tree ATTN's write
#:   address is inside the 4:1 choice: 9.0 levels joined).
#: (round 31) With banks > 1 the write data (``data``, ``wide``, ``wide_alt``) are not these choices: one 4:1 a bit
#: of the wide writers' words and the narrow beat (``spad_wide_data``) into the SPAD's one write-data bus.
SPAD_CODE = {"ldst": 0, "embed": 1, "vec": 2, "attn": 3, "gemm": 4, "kvw": 5}
#: (round 31) the writer of the wide data's second word (``wide_alt``; its ``wide_alt_en`` an AND-OR as ever)
SPAD_ALT = {("spad_wr", "wide_alt"): ("gemm",)}
SPAD_DATA = {("spad_wr", "data"): ("ldst", "embed", "vec", "attn", "gemm"),
             ("spad_wr", "exp"): ("ldst", "embed", "vec", "attn", "gemm")}
SPAD_CHAIN = {("spad_wr", "wide"): ("attn", "gemm"),
              ("spad_wr", "wide_skip"): ("attn", "gemm"),
              ("spad_wr", "addr"): ("gemm", "attn", "vec", "ldst", "embed"),
              ("spad_rd", "addr"): ("vec", "gemm", "attn", "ldst", "kvw")}


def code_tree(sel, values: dict, bit: int, m=None, primitive: bool = False, name: str = "code"):
    """``values`` (code -> value) chosen by the bits ``bit`` .. 0 of ``sel``; a half with no code is not a choice.
    ``primitive`` (round 29, the node's build): a full 4:1 choice by bits 1 .. 0 as one LUT6 a bit (``mux4`` in
    ``m``, instances named from ``name``; ABC9 mapped the inferred 4:1 at ~1.5 LUT a bit)."""
    if bit < 0:
        (v,) = values.values()
        return v
    hi = {c: v for c, v in values.items() if c >> bit & 1}
    lo = {c: v for c, v in values.items() if not c >> bit & 1}
    if not hi or not lo:
        return code_tree(sel, hi or lo, bit - 1, m, primitive, name)
    if primitive and bit == 1 and len(values) == 4:
        return mux4(m, sel[:2], [Value.cast(v) for _, v in sorted(values.items(), key=lambda cv: cv[0] & 3)],
                    primitive=True, name=name)
    return Mux(sel[bit], code_tree(sel, hi, bit - 1, m, primitive, f"{name}h"),
               code_tree(sel, lo, bit - 1, m, primitive, f"{name}l"))


def spad_wide_data(m, sel, wide_en, data: dict, wide: dict, alt, alt_en, banks: int, primitive: bool = False,
                   name: str = "spad_wd"):
    """(round 31) The SPAD's one write-data bus (``Scratchpad(placed=True)``, ``banks`` > 1): bank i's slice is the
    wide writer's (``wide``: code -> its wide data, two writers whose codes differ in ``sel``'s top bit; the top
    one's ``alt`` instead while ``alt_en``: GEMM's odd pieces) while ``wide_en``, else the narrow beat (``data``:
    code -> its beat, ``code_tree``; the same in every slice: the SPAD writes the bank of the address).  A slice's
    bit is one 4:1 choice (a LUT6 in the node's build: ``mux4``; its select from ``wide_en``, the top bit and
    ``alt_en``, shared) of the three wide words' bits and the narrow beat's, not GEMM's 2:1 of its pieces and the
    writers' 2:1 (one LUT5) and the SPAD's 2:1 of wide and narrow a bank (round 30b: ~2 K LUT)."""
    top = len(sel) - 1
    (wlo,), (whi,) = ([c for c in wide if not c >> top & 1], [c for c in wide if c >> top & 1])
    bw = len(Value.cast(wide[wlo])) // banks
    narrow = code_tree(sel, {c: Value.cast(v) for c, v in data.items()}, top, m, primitive, f"{name}n")
    hi = sel[top] & wide_en
    pick = Signal(2, name=f"{name}_pick")            # 0 wide[wlo], 1 wide[whi], 2 alt, 3 the narrow beat
    m.d.comb += pick.eq(Cat(~wide_en | (hi & ~alt_en), ~wide_en | (hi & alt_en)))
    words = [Value.cast(wide[wlo]), Value.cast(wide[whi]), Value.cast(alt)]
    return Cat(*[mux4(m, pick, [w[i * bw:(i + 1) * bw] for w in words] + [narrow], primitive=primitive,
                      name=f"{name}{i}") for i in range(banks)])


#: The movers and the opcodes they run; END and SYNC need none.
MOVERS = {"dir": DirMover, "ldst": LoadStoreMover, "embed": EmbedMover, "gemm": GemmMover, "vec": VecMover,
          "attn": AttnMover, "kvw": KvwMover}
BUSY_OF = {"gemm": "busy_gemm", "vec": "busy_vec", "attn": "busy_attn", "kvw": "busy_kvw", "embed": "busy_embed",
           "ldst": "busy_ldst"}


class ExecUnit(wiring.Component):
    """The execute unit of ``config``'s node (``NodeConfig.max_group``: the largest weight
    group G it takes; GEMM_QK is built only when head_dim <= max_group)."""

    def __init__(self, config: NodeConfig | None = None):
        self.config = config if config is not None else NodeConfig.tiny()
        self.g = g = Geometry.from_config(self.config)
        self.movers = {name: cls(g) for name, cls in MOVERS.items()}
        super().__init__({
            "instr": In(stream.Signature(isa.INSTR_BITS)),
            "done": Out(1),
            "fault": Out(1),
            "fault_cause": Out(FaultCause),
            "m_axi": Out(AXI4Signature(ADDR_BITS, g.data_width, ID_WIDTH)),
            **({f"m_axi_w{k}": Out(AXI4Signature(ADDR_BITS, g.data_width, 1, write=False))
                for k in range(g.weight_ports)} if g.weight_ports > 1 else {}),
            "dir_wr": In(DirWriteSignature(g.dir_bits)),
            "dir_rd": In(DirReadSignature(g.dir_bits)),
            "perf": Out(PerfSignature(g.data_width, 1 + (g.weight_beats if g.weight_ports > 1 else 0))),
            "busy": Out(1),
            "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        g = self.g
        axi = self.m_axi
        # (round 31) banks > 1: the SPAD's write data placed here (``spad_wide_data``), its ``wr.data`` unread
        placed = g.spad_banks > 1
        m.submodules.spad = spad = Scratchpad(g.spad_beats, g.vl, g.spad_banks, primitive=g.lut_primitive,
                                              placed=placed)
        m.submodules.reader = rd = ReadStreams(2, g.data_width, ADDR_BITS, g.fifo_depth, min(16, g.fifo_depth),
                                               id_base=STREAM_ID_BASE, id_width=ID_WIDTH)
        W = g.weight_ports
        if W == 1:
            m.submodules.loader = ld = DmaLoader(g.data_width, ADDR_BITS, g.buffer_bytes, g.buffers)
        else:
            # (round 30: the W loaders share ONE buffer memory, block RAM at the node, and one drainer (their
            # packets were drained in turn anyway); was W DmaLoaders, 3 of 4 in LUT RAM, and a W:1 choice of
            # their outputs)
            m.submodules.loaders = ld = WeightLoaders(W, g.data_width, ADDR_BITS, g.buffer_bytes, g.buffers,
                                                      out_beats=g.weight_beats,
                                                      axi_domain="axi" if g.weight_cdc else "sync",
                                                      ram_style="block" if g.primitive else "",
                                                      primitive=g.lut_primitive)
        m.submodules.writer = wr = DmaWriter(g.data_width, ADDR_BITS)
        m.submodules.directory = dr = ReplicaDirectory(g.dir_bits)
        names = list(self.movers)
        for name, mv in self.movers.items():
            m.submodules[name] = mv

        # --- dispatch ------------------------------------------------------------------------------
        S = UnitState
        state = Signal(S)
        word = Signal(isa.INSTR_BITS)
        owner = Signal(len(names))            # one-hot: mover i runs (it started, state RUN)
        axi_err = Signal()
        op = word[:6]
        m.d.comb += [self.instr.ready.eq(state == S.IDLE), self.busy.eq(state != S.IDLE)]
        m.d.sync += [self.done.eq(0), self.fault.eq(0)]
        with m.If(self.instr.valid & self.instr.ready):
            m.d.sync += [word.eq(self.instr.payload), state.eq(S.DECODE)]
        for mv in self.movers.values():
            m.d.comb += mv.instr.eq(word)
        # GEMM_QK's score words to the attention unit's row maxima (ATTN_SM MAX with defer)
        gm, am = self.movers["gemm"], self.movers["attn"]
        m.d.comb += [am.qk_en.eq(gm.qk_en), am.qk_end.eq(gm.qk_end), am.qk_row.eq(gm.qk_row),
                     am.qk_key.eq(gm.qk_key), am.qk_n.eq(gm.qk_n), am.qk_data.eq(gm.qk_data),
                     am.prog_start.eq(self.clear)]

        def reserved_fields(o: isa.Opcode) -> list[tuple[int, int]]:
            v = data.View(LAYOUT[o], word)
            return [(sl.start, sl.stop) for sl in (Value.cast(getattr(v, f.name))
                                                   for f in isa.LAYOUTS[o].fields if f.reserved)]

        # the decode, registered: per opcode whether it is this build's and its reserved bits are clear.  The
        # reserved bits in disjoint segments (between every reserved field's ends, over every opcode), each
        # segment's "all zeros" a register of the first DECODE cycle, ANDed per opcode in the last (round 21:
        # each opcode's own OR of up to 233 bits, the fields' shared tails chained: 10.0 levels from the word
        # to ``legal_attn_emit``)
        ops = [isa.Opcode.END, isa.Opcode.SYNC] + [o for name in names for o in self.movers[name].OPS]
        fields = {o: reserved_fields(o) for o in ops}
        rsv = {o: {b for lo, hi in fields[o] for b in range(lo, hi)} for o in ops}
        cuts = sorted({e for o in ops for f in fields[o] for e in f})
        segs = [(lo, hi) for lo, hi in zip(cuts, cuts[1:]) if any(lo in rsv[o] for o in ops)]
        seg_z = [Signal(name=f"rsv_z{lo}") for lo, _ in segs]
        for z, (lo, hi) in zip(seg_z, segs):
            m.d.sync += z.eq(word[lo:hi] == 0)
        op_is = {o: Signal(name=f"op_is_{o.name.lower()}") for o in ops}
        legal = {o: Signal(name=f"legal_{o.name.lower()}") for o in ops}
        for o in ops:
            m.d.sync += op_is[o].eq(op == int(o))
            m.d.comb += legal[o].eq(Cat(op_is[o], *[z for z, (lo, _) in zip(seg_z, segs) if lo in rsv[o]]).all())
        wait = Signal(range(SETUP_CYCLES + 1))
        with m.If(self.instr.valid & self.instr.ready):
            m.d.sync += wait.eq(SETUP_CYCLES - 1)
        # the dispatch, registered in the last DECODE cycle (the legal flags are one-hot: the opcodes differ):
        # ``go`` one bit a mover (its ``start`` strobe is that register), END / SYNC, or none (ILLEGAL_INSTRUCTION)
        go = Signal(len(names))
        go_fin, go_ill = Signal(), Signal()
        assert SETUP_CYCLES >= 2, "the legal flags' registers (of the word) settle in the first DECODE cycle"
        last_decode = (state == S.DECODE) & (wait == 0)
        movers_go = [Cat(*[legal[o] for o in self.movers[name].OPS]).any() for name in names]
        fin = legal[isa.Opcode.END] | legal[isa.Opcode.SYNC]
        m.d.sync += [go.eq(Mux(last_decode, Cat(*movers_go), 0)), go_fin.eq(last_decode & fin),
                     go_ill.eq(last_decode & ~fin & ~Cat(*movers_go).any())]
        with m.If(state == S.DECODE):
            m.d.sync += [axi_err.eq(0), wait.eq(wait - 1)]
            with m.If(wait == 0):
                m.d.sync += state.eq(S.DISPATCH)
        with m.If(go_fin):
            m.d.sync += [self.done.eq(1), state.eq(S.IDLE)]
        with m.If(go_ill):
            m.d.sync += [self.fault.eq(1), state.eq(S.IDLE)]
        for i, name in enumerate(names):
            m.d.comb += self.movers[name].start.eq(go[i])
        with m.If(go.any()):
            m.d.sync += [owner.eq(go), state.eq(S.RUN)]
        with m.If(ld.resp_error | rd.resp_error | wr.resp_error):
            m.d.sync += axi_err.eq(1)
        # the running mover's end: its fault, cause and done picked by ``owner`` (an AND-OR, not a chain).
        # A refusal (the mover's fault strobe: CHECK's range compares, a directory lookup) is registered first
        # and ends the instruction a cycle later (round 21: from GEMM's CHECK choice by opcode to ``state`` /
        # ``owner`` 11 levels, from the directory's read to ``fault_cause`` 10); the mover is idle meanwhile
        mv_fault, mv_cause = Signal(), Signal(FaultCause)
        m.d.sync += [mv_fault.eq(Cat(*[owner[i] & self.movers[name].fault for i, name in enumerate(names)]).any()),
                     mv_cause.eq(reduce(operator.or_, [Mux(owner[i], Value.cast(self.movers[name].cause), 0)
                                                       for i, name in enumerate(names)]))]
        mv_done = Cat(*[owner[i] & self.movers[name].done for i, name in enumerate(names)]).any()
        # ``fault_cause`` is read with ``fault`` only: it takes the cause of whichever fault could strobe now (a
        # refusal's, ILLEGAL_INSTRUCTION, else AXI_ERROR), not waiting for the mover's end (round 21: the
        # directory's read -> DIR's done -> fault_cause 10 levels)
        m.d.sync += self.fault_cause.eq(Mux(mv_fault, mv_cause, Mux(go_ill, isa.SeqFault.ILLEGAL_INSTRUCTION,
                                                                        isa.SeqFault.AXI_ERROR)))
        with m.If(mv_fault):
            m.d.sync += [self.fault.eq(1), state.eq(S.IDLE), owner.eq(0)]
        with m.Elif(mv_done):
            m.d.sync += [state.eq(S.IDLE), owner.eq(0)]
            with m.If(axi_err | ld.resp_error | rd.resp_error | wr.resp_error):
                m.d.sync += self.fault.eq(1)
            with m.Else():
                m.d.sync += self.done.eq(1)

        # --- the running mover takes the shared resources ----------------------------------------------
        # (``owner``: one bit a mover, registered at its start, so that each shared signal is an AND-OR of
        # the movers' values, not a priority chain behind a compare of the state and the mover's index).
        # What comes back to the movers: only the handshakes are gated by ``owner`` (``BUS_GATED``); the
        # data (SPAD read words, stream payloads, weight beats) reach every mover as they are -- a mover
        # takes them only under its own valid / read, and it has none while another owns the bus (no AND
        # a bit in front of each mover's registers: round 22)
        bus = MoverBus(g).create(path=("bus",))
        spad_sel = Signal(range(max(SPAD_CODE.values()) + 1))
        with m.If(go.any()):
            m.d.sync += spad_sel.eq(reduce(operator.or_, [Mux(go[i], SPAD_CODE.get(name, 0), 0)
                                                          for i, name in enumerate(names)]))
        terms = {}
        wdata = {"data": {}, "wide": {}, "wide_alt": {}}    # placed: the SPAD's write data of its writers by code
        for i, name in enumerate(names):
            local = self.movers[name].bus
            for path, member, value in local.signature.flatten(local):
                shared = bus
                for p in path:
                    shared = getattr(shared, p) if isinstance(p, str) else shared[p]
                if member.flow == Out:
                    v = Value.cast(value)
                    if placed and path in (("spad_wr", "data"), ("spad_wr", "wide"), ("spad_wr", "wide_alt")):
                        if name in SPAD_DATA.get(path, ()) + SPAD_CHAIN.get(path, ()) + SPAD_ALT.get(path, ()):
                            wdata[path[-1]][SPAD_CODE[name]] = v
                    elif name in SPAD_DATA.get(path, ()):
                        terms.setdefault(path, (shared, []))[1].append(("code", SPAD_CODE[name], v))
                    elif name in SPAD_CHAIN.get(path, ()):
                        terms.setdefault(path, (shared, []))[1].append(("chain", SPAD_CHAIN[path].index(name), (owner[i], v)))
                    else:
                        terms.setdefault(path, (shared, []))[1].append(v & owner[i].replicate(len(v)))
                elif path[-1] in BUS_GATED:
                    m.d.comb += value.eq(Mux(owner[i], shared, 0))
                else:
                    m.d.comb += value.eq(shared)
        for path, (shared, values) in terms.items():
            coded = {c: v for kind, c, v in (x for x in values if isinstance(x, tuple)) if kind == "code"}
            chain = [ov for _, _, ov in sorted((x for x in values if isinstance(x, tuple) and x[0] == "chain"),
                                               key=lambda x: x[1])]
            ored = [x for x in values if not isinstance(x, tuple)]
            if coded:       # a SPAD data member: its drivers' choice by ``spad_sel``
                ored.append(code_tree(spad_sel, coded, len(spad_sel) - 1, m, g.lut_primitive,
                                      "_".join(str(p) for p in path)))
            if chain:       # a SPAD address: the chain on ``owner``, its first movers outermost
                picked = chain[-1][1]
                for own, v in reversed(chain[:-1]):
                    picked = Mux(own, v, picked)
                ored.append(picked)
            m.d.comb += shared.eq(reduce(operator.or_, ored))

        m.d.comb += [
            spad.rd.en.eq(bus.spad_rd.en), spad.rd.addr.eq(bus.spad_rd.addr),
            bus.spad_rd.data.eq(spad.rd.data), bus.spad_rd.exp.eq(spad.rd.exp),
            spad.wr.lanes.eq(bus.spad_wr.lanes), spad.wr.exp_en.eq(bus.spad_wr.exp_en),
            spad.wr.addr.eq(bus.spad_wr.addr), spad.wr.exp.eq(bus.spad_wr.exp),
        ]
        if placed:
            m.d.comb += [bus.spad_rd.wide.eq(spad.rd.wide), spad.wr.wide_en.eq(bus.spad_wr.wide_en),
                         spad.wr.wide.eq(spad_wide_data(m, spad_sel, bus.spad_wr.wide_en, wdata["data"], wdata["wide"],
                                                        *wdata["wide_alt"].values(), bus.spad_wr.wide_alt_en,
                                                        g.spad_banks, g.lut_primitive)),
                         spad.wr.wide_skip.eq(bus.spad_wr.wide_skip)]
        else:
            m.d.comb += spad.wr.data.eq(bus.spad_wr.data)
        for s in range(2):
            req, inp = getattr(bus, f"req{s}"), getattr(bus, f"in{s}")
            m.d.comb += [rd.req(s).valid.eq(req.valid), rd.req(s).payload.eq(req.payload), req.ready.eq(rd.req(s).ready),
                         inp.valid.eq(rd.o(s).valid), inp.payload.eq(rd.o(s).payload), rd.o(s).ready.eq(inp.ready),
                         bus.ivalid[s].eq(rd.o(s).valid)]
        # (round 30: with W > 1 the descriptors are dealt to the fronts in turn and their packets taken back
        # in turn inside WeightLoaders: the mover sees one stream either way)
        m.d.comb += [
            ld.desc.valid.eq(bus.ldesc.valid), ld.desc.payload.eq(bus.ldesc.payload), bus.ldesc.ready.eq(ld.desc.ready),
            bus.ldata.tvalid.eq(ld.o.tvalid), bus.ldata.tdata.eq(ld.o.tdata), bus.ldata.tkeep.eq(ld.o.tkeep),
            bus.ldata.tlast.eq(ld.o.tlast), ld.o.tready.eq(bus.ldata.tready),
        ]
        # the movers' write data into the writer through a register stage both ways (``AxisRegister``): a mover's
        # packer logic and the owner's AND-OR no longer reach the writer's burst queue in one cycle (measured 10
        # levels); a store's last beat reaches the writer a cycle later, a beat a cycle as before
        # (plain, not on LUT6_2 pairs: ABC folds the output choice into the movers' write-data cone; as an
        # instance it is a level of its own, kvw.state -> wd_reg.held at 9.0 in round 33's record run)
        m.submodules.wd_reg = wd_reg = AxisRegister(g.data_width)
        m.d.comb += [
            wr.desc.valid.eq(bus.wdesc.valid), wr.desc.payload.eq(bus.wdesc.payload), bus.wdesc.ready.eq(wr.desc.ready),
            wd_reg.i.tvalid.eq(bus.wdata.tvalid), wd_reg.i.tdata.eq(bus.wdata.tdata),
            wd_reg.i.tkeep.eq(bus.wdata.tkeep), wd_reg.i.tlast.eq(bus.wdata.tlast), bus.wdata.tready.eq(wd_reg.i.tready),
            bus.wdone.eq(wr.done),
        ]
        wiring.connect(m, wd_reg.o, wr.i)
        # the directory: the receive engine's writes first
        with m.If(self.dir_wr.en):
            m.d.comb += [dr.wr_en.eq(1), dr.wr_block.eq(self.dir_wr.block), dr.wr_state.eq(self.dir_wr.state)]
        with m.Else():
            m.d.comb += [dr.wr_en.eq(bus.dir_wr_en), dr.wr_block.eq(bus.dir_wr_block), dr.wr_state.eq(bus.dir_wr_state),
                         bus.dir_wr_ready.eq(1)]
        m.d.comb += [dr.lookup_en.eq(bus.dir_lookup_en), dr.lookup_block.eq(bus.dir_lookup_block),
                     bus.dir_readable.eq(dr.readable),
                     dr.rd_en.eq(self.dir_rd.en), dr.rd_block.eq(self.dir_rd.block), self.dir_rd.state.eq(dr.rd_state)]

        # --- one AXI4 master: reads of the loader (ID 0) and the streams (IDs 1, 2); the writer ---------
        ra = rd.m_axi
        if W == 1:
            la = ld.m_axi
            grant = Signal()            # 0: loader, 1: streams
            held = Signal()             # an AR is waiting for ARREADY: keep the grant
            pick = Signal()
            m.d.comb += pick.eq(Mux(held, grant, Mux(la.arvalid, Mux(ra.arvalid, ~grant, 0), 1)))
            m.d.sync += [grant.eq(pick), held.eq(axi.arvalid & ~axi.arready)]
            for name in ("addr", "len", "size", "burst", "lock", "cache", "prot", "qos"):
                m.d.comb += getattr(axi, f"ar{name}").eq(Mux(pick, getattr(ra, f"ar{name}"), getattr(la, f"ar{name}")))
            m.d.comb += [axi.arid.eq(Mux(pick, ra.arid, WEIGHT_ID)),
                         axi.arvalid.eq(Mux(pick, ra.arvalid, la.arvalid)),
                         la.arready.eq(~pick & axi.arready), ra.arready.eq(pick & axi.arready)]
            to_loader = axi.rid == WEIGHT_ID
            for name in ("rdata", "rresp", "rlast"):
                m.d.comb += [getattr(la, name).eq(getattr(axi, name)), getattr(ra, name).eq(getattr(axi, name))]
            m.d.comb += [la.rid.eq(0), ra.rid.eq(axi.rid),
                         la.rvalid.eq(axi.rvalid & to_loader), ra.rvalid.eq(axi.rvalid & ~to_loader),
                         axi.rready.eq(~axi.rvalid | Mux(to_loader, la.rready, ra.rready))]
        else:
            # m_axi: the read streams and the writer; weight loader k alone on m_axi_w<k>
            for name in ("addr", "len", "size", "burst", "lock", "cache", "prot", "qos", "id", "valid"):
                m.d.comb += getattr(axi, f"ar{name}").eq(getattr(ra, f"ar{name}"))
            for name in ("rdata", "rresp", "rlast", "rid", "rvalid"):
                m.d.comb += getattr(ra, name).eq(getattr(axi, name))
            m.d.comb += [ra.arready.eq(axi.arready), axi.rready.eq(ra.rready)]
            for k in range(W):
                wiring.connect(m, getattr(ld, f"m_axi{k}"), wiring.flipped(getattr(self, f"m_axi_w{k}")))
        wa = wr.m_axi
        for name in ("awaddr", "awlen", "awsize", "awburst", "awlock", "awcache", "awprot", "awqos", "awvalid",
                     "wdata", "wstrb", "wlast", "wvalid", "bready"):
            m.d.comb += getattr(axi, name).eq(getattr(wa, name))
        m.d.comb += [axi.awid.eq(0), wa.awready.eq(axi.awready), wa.wready.eq(axi.wready), wa.bid.eq(0),
                     wa.bresp.eq(axi.bresp), wa.bvalid.eq(axi.bvalid)]

        # --- performance strobes ------------------------------------------------------------------------
        running = state == S.RUN
        for i, name in enumerate(names):
            if name in BUSY_OF:
                m.d.comb += getattr(self.perf, BUSY_OF[name]).eq(owner[i])
        if g.weight_cdc:       # the weight ports are in ``axi``: count their beats as the engine takes them
            taken = bus.ldata.tvalid & bus.ldata.tready
            rd_beats = [Mux(axi.rvalid & axi.rready, g.bus_bytes, 0)] + [
                Mux(taken & bus.ldata.tkeep[b * g.bus_bytes], g.bus_bytes, 0) for b in range(g.weight_beats)]
        else:
            rd_ports = [axi] + ([getattr(self, f"m_axi_w{k}") for k in range(W)] if W > 1 else [])
            rd_beats = [Mux(p.rvalid & p.rready, g.bus_bytes, 0) for p in rd_ports]
        m.d.comb += [self.perf.mac_beats.eq(bus.mac), self.perf.stall_ex_ddr.eq(running & bus.starved),
                     self.perf.ddr_rd_bytes.eq(sum(rd_beats[1:], rd_beats[0])),
                     self.perf.ddr_wr_bytes.eq(Mux(axi.wvalid & axi.wready, g.bus_bytes, 0))]
        return m


@block("exec", "execute unit: SPAD + movers around matrix / vector / attention / KV writer, one AXI4 master",
       preset="tiny",  # linted at Qwen2.5-1.5B shapes inside the node block (its default)
       ranges={"preset": Choice(("tiny", "qwen2.5-1.5b"))})
def _exec(preset):
    presets = {"tiny": NodeConfig.tiny, "qwen2.5-1.5b": NodeConfig.qwen2_5_1_5b}
    if preset not in presets:
        raise ValueError(f"exec: preset {preset!r}; known: {', '.join(presets)}")
    return ExecUnit(presets[preset]())
