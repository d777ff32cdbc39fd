"""Matrix unit: BFP16 activations x INT4 group-scaled weights -> X32 (golden ``fixed.linear``).

A ``mac_rows`` x ``mac_lanes`` MAC array (``rows`` x ``lanes`` below).  Each weight beat carries
``lanes`` consecutive inputs of ``rows`` output rows (INT4, row-major: bits [(p*lanes + k)*4 +: 4]
= q[row p, input k]) and
is held for ``T`` cycles while the activation buffer supplies the same ``lanes`` inputs of
token 0 .. T-1: a weight is fetched once per tile, whatever the number of tokens (prefill
reuses it T times; decode, T = 1, needs a beat per cycle).  The unit takes a beat from ``w`` at
its first issue (token 0) into the product array, whose weight registers hold it for the other
tokens (``DotArray.w_hold``: no register of the whole beat), so the stream's next beat may arrive
meanwhile; ``w_wait`` is high while an issue waits for a beat.

Per (row, token) the unit keeps an exact accumulator of every beat's scaled dot product:
    dot     = sum_{i in beat} mant[i] q[i]          (int4 x int16 products, ``lanes`` of them)
    acc    += S[row, group] * dot                   (once per beat, one multiplier per row)
(= sum over groups of S times the group's partial sum, the same exact integer)
    y       = sat32(sat32(rshr(acc, E_w - exp[t] - 16)) + bias)
which is ``fixed.linear`` bit for bit (its accumulator is the same exact integer).

Weights come on an AXI-Stream (``w``, fed by the ping-pong DMA loader), one group scale beat
per group on ``scale`` (``rows`` x uint16), one bias beat per row tile on ``bias`` (``rows``
x int32, only when ``cmd.bias``).  Activations are written into the buffer beforehand through
``act`` (address = beat * max_tokens + token; beat = input index / lanes) and ``exp`` (row
exponents).  ``streamed=True`` adds ``avail``: the beats 0 .. avail - 1 of every token are in the
buffer; a command may start before its activations are all there, and the unit issues beat b
only once b < avail (a loader that writes the buffer beat-major, all tokens of beat 0 first,
overlaps its load with the first tile's MACs).  ``o`` carries one beat of ``rows`` X32 words per (tile, token), TLAST on the last.

``pv_tiles`` > 0 adds the pv mode (attention PV, golden ``state_sums``' o; docs/attention-array.md
step 3).  The matrix is V^T: rows = channels (``tiles`` channel tiles of P, at most ``pv_tiles``),
inputs = keys (``groups`` key beats of K keys: S = groups x K, a multiple of K, at most
max_inputs / 2 keys).  Each weight w of the activation rows comes as two balanced digits,
w = hi 2^16 + lo (hi in [0, 2^15), lo in [-2^15, 2^15), from ``w <= W_MAX``), written by the
producer as two buffer beats: beat 2 b + 0 = the hi digits of key beat b, 2 b + 1 = its lo
digits.  The loop is key beat -> channel tile -> digit (hi, lo: the same weight beat replayed,
taken at the hi pass's token 0) -> token; the group-scale stage multiplies a hi partial by 2^16 and a lo
partial by 1 (no scale stream, no requantize); the exact accumulator of (tile, token) is the
result: + the previous wide value from ``prev`` (P int64 words a beat, in the output order) when
``cmd.acc``; out as sat32 (one beat) or, ``cmd.wide``, its low then its high 32-bit words (two
beats).  The accumulator file is then ``pv_tiles`` x max_tokens words deep.

Pipeline: issue (buffer read) -> products (``DotArray.latency`` stages) -> dots -> scale
multiply -> accumulate -> result queue -> requantize -> ``o``.  The group scale beats wait in a
small queue beside it (claimed with token 0 of the group's first weight beat); a tile's bias beat is taken from ``bias`` by the requantizer (the beat stays in
the stream's register until the tile's last word: no queue of P x 32 bits).  A tile's last group gives its T finished (tile, token)
accumulators back to back; they wait in the result queue (``max_tokens`` deep) and the
requantizer takes ``requant_rows`` (R) rows of the head a cycle through 6 register stages
(select, shift decode, shift, round, saturate, bias add and saturate) into the output word: a
beat every P / R cycles, and no stage deeper than a few LUT levels.  Only a full result queue
stalls the pipeline (pv: ``o`` and ``prev``), only ``o`` and a bias beat not there yet the
requantizer; ``mac`` is high on
every cycle that issues a weight beat x token (a performance-counter strobe).

DSP48E2 packing (``packed``, the default): the products are ``dot_array.DotArray``; the ``rows``
products of one activation element share the 16-bit operand, so two INT4 weights of adjacent
rows share one 27 x 18 multiplier, ``(w_hi 2^22 + w_lo) a = w_hi a 2^22 + w_lo a``; the products
of 4 lanes are summed in a systolic DSP chain before the two fields are split (the low one read
as signed, the high one given its borrow back): rows x lanes / 2 multipliers, ``packed=False``
one per product.  The per-token accumulators are LUT RAM (one word of rows x
width bits per token).  See docs/compute.md.
"""
from __future__ import annotations

from amaranth import (Array, Cat, ClockSignal, Const, Instance, Module, Mux, ResetSignal, Shape, Signal, signed,
                      unsigned)
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from mcf.hw.arith import add_plus_one, log2_exact, sat_top, write_indexed
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.compute.common import MemWriteSignature
from mcf.hw.compute.dot_array import CHAIN, DSP_P_BITS, PACK_SHIFT, DotArray
from mcf.hw.lut import add_load, carry_chain, lut6, lut6_2, lut6_2_init, mux2_pairs, mux4, mux4_shared
from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec.fixed import EXP_BITS, MANT_BITS, S_FRAC, SCALE_BITS, W_BITS, X_FRAC

__all__ = ["MatrixUnit", "TileReorder", "PvReorder", "cmd_layout", "PACK_SHIFT", "CHAIN", "PV_DIGIT_SHIFT",
           "WIDE_BITS"]

#: pv mode: a PV weight w goes in as two balanced digits, w = hi 2^PV_DIGIT_SHIFT + lo.
PV_DIGIT_SHIFT = 16
#: places of the scale queue beyond the groups in flight (1 + latency + 1, plus two): beats taken ahead
#: of their issue (``scale.ready`` a register: the queue's room a cycle ahead, two places kept free)
SCALE_SLACK = 4
#: pv mode: the wide result (the exact o, two's complement) as two 32-bit words, low then high.
WIDE_BITS = 64


#: ``o_bits``' LUT6_2: two bits of one row, O6 = I0 | I1 | I2, O5 = I0 | I3 | I4 (the row's ones, a bit's y
#: and GEMM's sum bit each).
O_OR2_INIT = lut6_2_init(lambda o, y0, g0, y1, g1: o | y0 | g0, lambda o, y0, g0, y1, g1: o | y1 | g1)


def o_bits(m, ones, ys, gs, primitive: bool = False, name: str = "o_next"):
    """Bits of one row of the pv build's output word: ``ones | y_k | g_k`` -- the row's saturation ones, pv's
    y bit (``pv_y#``: y, or in the high beat the high word; zero in GEMM), GEMM's sum bit.  ``primitive`` (round
    31): two bits a LUT6_2 instance (the row's ones shared), half a LUT a bit; round 29's LUT6 a bit had six
    inputs (pv's y and high word gated there).  Else the plain ORs."""
    if not primitive:
        return [ones | y | g for y, g in zip(ys, gs)]
    if len(ys) % 2:
        raise ValueError(f"o_bits: {len(ys)} bits, pairs only")
    outs = [Signal(name=f"{name}{k}") for k in range(len(ys))]
    for k in range(0, len(ys), 2):
        lut6_2(m, O_OR2_INIT, [ones, ys[k], gs[k], ys[k + 1], gs[k + 1]], outs[k], outs[k + 1], f"{name}{k}_lut")
    return outs


def o_ones(m, top, en, ovf, primitive: bool = False, name: str = "o_ones"):
    """A row's saturations (round 29): (ones, clamp), clamp = ``en`` and ``top`` (y's bits 31 and up: 33, or
    fewer with ``pv_keys``) not all equal (pv's sat32 of y), ones = clamp | ``ovf`` (GEMM's bias add
    overflows).  ``primitive``, 33 bits:
    the "not all equal" of bits 0 .. 30 as six LUT6 (6 bits each, one shared with the next), their OR as
    one, and ``ones`` as one over it, bits 30 .. 32, ``en`` and ``ovf``: three levels after ``top`` (ABC9
    had made five, with ``o_bit`` over 8 levels); clamp (the clears' input) stays a plain expression.
    (Plain: ``ones`` a Signal kept for ABC9, as before.)"""
    clamp = Signal(name=f"{name}_clamp")
    ne3 = lambda a, b, c: int(not (a == b == c))
    if not primitive:
        ones = Signal(name=name, attrs={"keep": 1})
        m.d.comb += [clamp.eq(en & top.any() & ~top.all()), ones.eq(clamp | ovf)]
        return ones, clamp
    n = len(top)
    spans = [list(range(s, min(s + 6, n))) for s in range(0, n - 1, 5)]   # one bit shared with the next
    if len(spans) <= 4:         # (round 29, y narrowed: two levels, the groups into the ones' LUT)
        groups = [lut6(m, lambda *b, w=len(sp): int(0 < sum(b[:w]) < w), [top[k] for k in sp],
                       f"{name}_ne{j}") for j, sp in enumerate(spans)]
        ones = lut6(m, lambda e, o, *g: o | (e & any(g)), [en, ovf, *groups], name)
        m.d.comb += clamp.eq(en & Cat(*groups).any())
        return ones, clamp
    if len(spans) <= 6:         # (y narrowed to 53 .. 63 bits: the groups' OR, then the ones)
        groups = [lut6(m, lambda *b, w=len(sp): int(0 < sum(b[:w]) < w), [top[k] for k in sp],
                       f"{name}_ne{j}") for j, sp in enumerate(spans)]
        ne = lut6(m, lambda *b: int(any(b)), groups, f"{name}_ne")
        ones = lut6(m, lambda a, e, o, *_: o | (e & a), [ne, en, ovf], name)
        m.d.comb += clamp.eq(en & ne)
        return ones, clamp
    if len(spans) != 7 or len(spans[-1]) != 3:
        raise ValueError(f"o_ones: {n} bits, the LUT6 tree is for at most 33")
    groups = [lut6(m, lambda *b: int(0 < sum(b) < 6), [top[k] for k in sp], f"{name}_ne{j}")
              for j, sp in enumerate(spans[:6])]
    ne = lut6(m, lambda *b: int(any(b)), groups, f"{name}_ne")
    ones = lut6(m, lambda a, t0, t1, t2, e, o: o | (e & (a | ne3(t0, t1, t2))),
                [ne, top[30], top[31], top[32], en, ovf], name)
    m.d.comb += clamp.eq(en & (ne | ~((top[30] == top[31]) & (top[31] == top[32]))))
    return ones, clamp


#: a URAM288's depth at its 72-bit width (round 32: the activation buffer's two fields)
URAM_DEPTH = 4096

def cmd_layout(max_tokens, max_beats, max_tiles):
    return data.StructLayout({
        "tokens": range(1, max_tokens + 1),       # T
        "group_beats": range(1, max_beats + 1),   # G / lanes
        "groups": range(1, max_beats + 1),        # n / G
        "tiles": range(1, max_tiles + 1),         # out / rows
        "w_exp": signed(EXP_BITS),                # E_w of the matrix
        "bias": 1,                                # add a bias beat per tile
        "kv": 1,                                  # attention scores: per-row scale A and exponent E
        "pv": 1,                                  # attention PV: groups = key beats, tiles = channel tiles
        "acc": 1,                                 # pv: add the previous wide value (``prev``)
        "wide": 1,                                # pv: emit the wide value (two beats) instead of sat32
    })


class MatrixUnit(wiring.Component):
    def __init__(self, mac_rows: int = 4, mac_lanes: int = 8, max_tokens: int = 8, max_inputs: int = 256,
                 max_tiles: int = 64, max_group: int = 128, packed: bool = True, primitive: bool = False,
                 streamed: bool = False, pv_tiles: int = 0, requant_rows: int | None = None, pv_keys: int = 0):
        rows, lanes = mac_rows, mac_lanes
        if pv_tiles < 0 or (pv_tiles and pv_tiles & (pv_tiles - 1)):
            raise ValueError(f"pv_tiles={pv_tiles}: must be 0 (no pv mode) or a power of two")
        log2_exact(lanes, "mac_lanes")
        log2_exact(max_tokens, "max_tokens")
        if rows < 1:
            raise ValueError(f"mac_rows={rows}: must be >= 1")
        if max_inputs % lanes:
            raise ValueError(f"mac_lanes={lanes} does not divide max_inputs={max_inputs}")
        if rows * lanes * W_BITS < 32:
            raise ValueError(f"mac_rows x mac_lanes = {rows} x {lanes}: the weight stream "
                             f"({rows * lanes * W_BITS} bits) must be at least 32 bits wide")
        if packed and rows % 2:
            raise ValueError(f"mac_rows={rows}: packed products need an even number of rows")
        if requant_rows is None:        # about a quarter of the rows: the largest divisor of P <= max(P / 4, 1)
            requant_rows = max(r for r in range(1, max(rows // 4, 1) + 1) if rows % r == 0)
        if isinstance(requant_rows, bool) or not isinstance(requant_rows, int) or requant_rows < 1 \
                or rows % requant_rows:
            raise ValueError(f"requant_rows={requant_rows}: must divide mac_rows={rows}")
        self.requant_rows = requant_rows
        self.mac_rows, self.mac_lanes, self.max_tokens, self.packed = rows, lanes, max_tokens, bool(packed)
        self.primitive, self.streamed = bool(primitive), bool(streamed)
        self.max_inputs, self.max_tiles = max_inputs, max_tiles
        self.pv_tiles = pv_tiles                              # pv: channel tiles of one command (0: no pv)
        # pv: the most keys one sum covers over its commands (``prev``: the glue's longest context; 0: no
        # bound).  |w v| < 2^31 2^3, so |y| < pv_keys 2^34: y's significant bits (round 29), 64 without a bound
        if pv_keys < 0:
            raise ValueError(f"pv_keys={pv_keys}: must be >= 0")
        self.pv_bits = (min(WIDE_BITS, max(33, ceil_log2(pv_keys) + 31 + W_BITS)) if pv_keys
                        else WIDE_BITS)
        self.max_group = min(max_group, max_inputs)        # group size G (inputs per scale)
        self.depth = max_inputs // lanes                      # beats per row
        # Exact widths: |partial| <= G 2^15 8, |acc| <= (n / G) (2^16 - 1) max|partial|.
        self.dot_width = MANT_BITS + W_BITS + ceil_log2(lanes)
        self.partial_width = MANT_BITS + W_BITS + ceil_log2(self.max_group)
        self.acc_width = max(ceil_log2(max_inputs) + 35, self.partial_width + SCALE_BITS + 1)
        self.cmd_layout = cmd_layout(max_tokens, self.depth, max_tiles)
        if self.max_group % lanes:
            raise ValueError(f"mac_lanes={lanes} does not divide max_group={self.max_group}")
        super().__init__({
            "cmd": In(stream.Signature(self.cmd_layout)),
            "act": In(MemWriteSignature(ceil_log2(self.depth * max_tokens), lanes * MANT_BITS)),
            "exp": In(MemWriteSignature(max(ceil_log2(max_tokens), 1), EXP_BITS)),
            "w": In(AXIStreamSignature(rows * lanes * W_BITS)),
            "scale": In(stream.Signature(rows * SCALE_BITS)),
            "bias": In(stream.Signature(rows * 32)),
            "o": Out(AXIStreamSignature(rows * 32)),
            "busy": Out(1),
            "mac": Out(1),
            "w_wait": Out(1),
            **({"avail": In(range(self.depth + 1))} if streamed else {}),
            **({"prev": In(stream.Signature(rows * WIDE_BITS))} if pv_tiles else {}),
        })

    @property
    def macs_per_cycle(self):
        return self.mac_rows * self.mac_lanes

    def elaborate(self, platform):
        m = Module()
        P, K, TM = self.mac_rows, self.mac_lanes, self.max_tokens
        tb = max(ceil_log2(TM), 1)

        # --- activation buffer and row exponents -------------------------------------------
        AB, ADEPTH = K * MANT_BITS, self.depth * TM
        a_raddr = Signal(range(ADEPTH), name="a_raddr")
        if self.primitive and URAM_DEPTH < ADEPTH <= 2 * URAM_DEPTH:
            # (round 32: a buffer deeper than a URAM is, as Yosys maps it, two fields of one URAM word, a
            # word's high address bit choosing the field -- written here so: two fields, a write enable each,
            # and the read's 2:1 choice of them two bits a LUT6_2 (``mux2_pairs``), not ABC9's LUT3 a bit)
            ab = ceil_log2(URAM_DEPTH)
            m.submodules.abuf = abuf = memory.Memory(shape=2 * AB, depth=URAM_DEPTH, init=[])
            wr = abuf.write_port(granularity=AB)
            rd = abuf.read_port()
            hi_w = self.act.addr[ab]
            a_hi = Signal()                                 # the read's field (the read port's enable)
            with m.If(rd.en):
                m.d.sync += a_hi.eq(a_raddr[ab])
            m.d.comb += [wr.en.eq(Cat(self.act.en & ~hi_w, self.act.en & hi_w)), wr.addr.eq(self.act.addr[:ab]),
                         wr.data.eq(self.act.data.replicate(2)), rd.addr.eq(a_raddr[:ab])]
            a_data = mux2_pairs(m, a_hi, rd.data[AB:], rd.data[:AB], primitive=True, name="a_pick")
        else:
            m.submodules.abuf = abuf = memory.Memory(shape=AB, depth=ADEPTH, init=[])
            wr = abuf.write_port()
            rd = abuf.read_port()
            m.d.comb += [wr.en.eq(self.act.en), wr.addr.eq(self.act.addr), wr.data.eq(self.act.data),
                         rd.addr.eq(a_raddr)]
            a_data = rd.data
        exp_regs = [Signal(signed(EXP_BITS), name=f"exp{t}") for t in range(TM)]
        exps = Array(exp_regs)
        write_indexed(m, exp_regs, self.exp.addr, self.exp.data, self.exp.en)

        # --- command and loop counters (issue stage) -----------------------------------------
        cfg = Signal(self.cmd_layout)
        running = Signal()
        t = Signal(range(TM))
        j = Signal(range(self.depth))        # beat within the group
        g = Signal(range(self.depth))        # group
        beat = Signal(range(self.depth))     # beat within the row (address)
        tile = Signal(range(self.max_tiles))
        PT = self.pv_tiles
        pv = cfg.pv if PT else Const(0, 1)
        dg = Signal()                        # pv: the digit of the weight beat's pass (0: hi, 1: lo)
        abeat = Signal(range(self.depth))    # activation buffer beat (pv: 2 key beat + digit)
        m.d.comb += abeat.eq(Mux(pv, Cat(dg, g), beat))
        m.d.comb += [self.busy.eq(running), self.cmd.ready.eq(~running)]
        with m.If(self.cmd.valid & ~running):
            m.d.sync += [cfg.eq(self.cmd.payload), running.eq(1), t.eq(0), j.eq(0), g.eq(0),
                         beat.eq(0), tile.eq(0), dg.eq(0)]
        # the loop limits less one and less two (modulo the field's width), registered with the command:
        # a counter's next last-index flag is ``counter == limit - 2`` (no adder before the compare)
        limits = {name: Signal(range(1 << len(getattr(cfg, name))), name=f"{name}_m1")
                  for name in ("tokens", "group_beats", "groups", "tiles")}
        limits2 = {name: Signal(range(1 << len(getattr(cfg, name))), name=f"{name}_m2") for name in limits}
        with m.If(self.cmd.valid & ~running):
            m.d.sync += [lim.eq(getattr(self.cmd.payload, name) - 1) for name, lim in limits.items()]
            m.d.sync += [lim.eq(getattr(self.cmd.payload, name) - 2) for name, lim in limits2.items()]

        adv = Signal()               # the pipeline moves (only the result queue or, pv, ``o`` stalls it)
        # ``adv`` outside pv (only the result queue stalls it).  (round 28b: the scale queue's pop is never
        # in pv, so it reads this one -- neither ``pv``'s choice nor ``o.tready`` on the path into its
        # level, which went to 9 levels when ABC9 remapped the unit)
        adv_g = Signal()
        o_valid = Signal()

        # Each counter's last-index flag a register kept equal to ``counter == limit`` (set with
        # the counter: its compare against the next value is off the path, which goes on
        # through ``fire`` into the scale / bias queues' levels and the array's weight load).
        counters = {"tokens": t, "group_beats": j, "groups": g, "tiles": tile}
        lasts = {name: Signal(name=f"last_{name}") for name in counters}
        last_t, last_j, last_g, last_tile = (lasts[n] for n in ("tokens", "group_beats", "groups", "tiles"))
        with m.If(self.cmd.valid & ~running):
            m.d.sync += [lasts[name].eq(getattr(self.cmd.payload, name) == 1) for name in counters]

        def restart(name):          # the counter back to 0
            return lasts[name].eq(limits[name] == 0)

        def step(name):             # the counter to counter + 1 (a limit of 1 never steps: its limit - 2
            return lasts[name].eq(counters[name] == limits2[name])  # wraps to a value the counter never has)
        fire = Signal()
        # The group scales wait in a queue beside the pipeline (not copied down it): a scale beat
        # from the issue of token 0 of its group's first beat to the multiply of the group's last
        # beat's last token (stage 4).  (A tile's bias beat is read by the requantizer from ``bias`` itself.)  The scale queue never fills: the groups
        # in it are at most one per item of the stages before stage 4 (1 + latency + 1), plus two.
        # (``w_early``: the weight beat goes into the array the cycle it is taken, its activations
        # come from the buffer's read port a cycle later; the array's weight path has the extra
        # register -- on DSP48E2 instances the pre-adder's, which packs the two rows' weights.
        # ``w_hold``: the array keeps the beat for its other tokens, see ``take_w``.)
        # (On DSP48E2 instances the chains are joined in pairs where the lanes allow it: half the
        # fabric's adders after the array; its low rows' dots then lack one, added at stage 3.)
        # (round 33: on instances, with the accumulator on its slice (``in_dsp``, stage 4), a row's last field
        # sum leaves the array beside the others' sum (``DotArray.split``) and the slice's pre-adder adds the
        # two (AD = A + D, its D register the stage-3 register of the second): one fabric adder a row fewer)
        joined = self.primitive and K % (2 * CHAIN) == 0
        PWD = self.partial_width + SCALE_BITS + 1
        in_dsp = PWD <= DSP_P_BITS - 2 and (not self.primitive or self.partial_width <= 27)
        split = joined and K // (2 * CHAIN) >= 2 and in_dsp and self.packed and self.dot_width + 1 <= 27
        m.submodules.dot = dot = DotArray(P, K, packed=self.packed, primitive=self.primitive, w_early=True,
                                          w_hold=True, joined=joined, split=split)
        # The scale queue takes the stream's beats ahead of their issues, whenever it has room
        # (``scale.ready`` a register, two places kept free for the write of the cycle it is decided
        # in); ``s_have`` (a register): a beat in it that no issue has claimed yet.  The issue that
        # starts a group's first beat claims the next (round 27: every beat is scaled, see stage 3); the
        # group's last beat's last token pops it at stage 4.
        # (a queue of SQ places, as ``fifo.SyncFIFOBuffered``: SQ - 1 in LUT RAM and the head's registers,
        # built here: the head's registers hold the multiplier's operand, see stage 4)
        SQ = dot.latency + 4 + SCALE_SLACK
        m.submodules.scale_q = sq_mem = memory.Memory(shape=P * SCALE_BITS, depth=SQ - 1, init=[])
        sq_level = Signal(range(SQ + 1))
        # The handshakes from registers.  ``go``: every condition of an issue but the weight beat
        # holds this cycle (running, the pipeline moves, the scale beat it claims is in the scale queue,
        # its activations are in), decided the cycle before (``go_next`` below: exact but for ``avail``
        # (read a cycle late: it only grows while a command runs) and, pv, ``o`` / ``prev``); ``take_w``
        # / ``take_scale`` (the issue takes a weight beat / claims a scale beat) registers kept equal to
        # their counters' values.  So ``w.tready`` and ``scale.ready`` are registers (they leave the unit
        # into the glue's weight path and queues).
        # A weight beat is taken at its first issue (token 0; pv: of the hi digit) into the array, whose
        # weight registers hold it for the beat's other issues (``DotArray.w_hold``: on DSP48E2
        # instances the slices' A / D / AD registers and the skew's, clock-enabled by the take): the
        # stream's next beat may come meanwhile.
        go, w_rdy = Signal(), Signal()
        take_w, take_scale = Signal(init=1), Signal()
        s_rdy, s_have = Signal(), Signal()
        s_free = Signal(range(SQ + 1))      # beats in the queue no issue has claimed
        s_in, s_claim = Signal(), Signal()
        m.d.sync += s_rdy.eq(sq_level <= SQ - 3)
        m.d.comb += fire.eq(go & (self.w.tvalid | ~take_w))
        m.d.comb += [
            s_in.eq(self.scale.valid & s_rdy), s_claim.eq(fire & take_scale),
            self.mac.eq(fire),
            self.w.tready.eq(w_rdy),                             # pv: a weight beat serves both digits
            self.w_wait.eq(running & take_w & ~self.w.tvalid),
            self.scale.ready.eq(s_rdy),
            rd.en.eq(adv),
            a_raddr.eq(Cat(t, abeat) if TM > 1 else abeat),
        ]
        with m.If(fire):
            m.d.sync += [t.eq(t + 1), step("tokens")]
            with m.If(last_t & pv):
                # pv: tokens, then the digit (hi, lo), then the channel tile, then the key beat
                m.d.sync += [t.eq(0), restart("tokens"), dg.eq(~dg)]
                with m.If(dg):
                    m.d.sync += [tile.eq(tile + 1), step("tiles")]
                    with m.If(last_tile):
                        m.d.sync += [tile.eq(0), restart("tiles"), g.eq(g + 1), step("groups")]
                        with m.If(last_g):
                            m.d.sync += running.eq(0)
            with m.Elif(last_t):
                m.d.sync += [t.eq(0), restart("tokens"), j.eq(j + 1), step("group_beats"), beat.eq(beat + 1)]
                with m.If(last_j):
                    m.d.sync += [j.eq(0), restart("group_beats"), g.eq(g + 1), step("groups")]
                    with m.If(last_g):
                        m.d.sync += [g.eq(0), restart("groups"), beat.eq(0), tile.eq(tile + 1), step("tiles")]
                        with m.If(last_tile):
                            m.d.sync += running.eq(0)

        # Control carried down the pipeline with the data.  pv: ``hi`` (the digit) and ``tile`` (the
        # accumulator of a (tile, token): every channel tile's sums live across the key beats).
        ptb = max(ceil_log2(PT), 1) if PT else 1
        ctl = data.StructLayout({"v": 1, "t": tb, "last_j": 1, "first_g": 1,
                                 "last_g": 1, "last_t": 1, "last": 1, "hi": 1, "tile": ptb})
        s1 = Signal(ctl)
        with m.If(adv):
            m.d.sync += [
                # (round 27: first_g / last_g are the (tile, token)'s first / last beat: its group's and
                # its beat's -- every beat goes into the accumulator, see stage 3)
                s1.v.eq(fire), s1.t.eq(t), s1.last_j.eq(last_j | pv),
                s1.first_g.eq((g == 0) & ((j == 0) | pv) & ~(pv & dg)),
                s1.last_g.eq(last_g & Mux(pv, dg, last_j)),
                s1.last.eq(last_t & last_g & last_tile & Mux(pv, dg, last_j)),
                s1.last_t.eq(last_t), s1.hi.eq(pv & ~dg), s1.tile.eq(Mux(pv, tile, 0)),
            ]

        def token_file(name, width, index, first, terms, we, depth=TM, init=None, carry=()):
            """Per-token running sums of every row, read-modify-write: ``first ? init : file[index]``
            (``init`` a row's start value, else 0) plus the row's term, written back when ``we``.  One
            word of rows x width bits per token in a memory with a combinational read port (LUT RAM,
            not rows x tokens registers and their multiplexers).  ``carry``: the rows whose adder
            adds one more (its carry in: ``arith.add_plus_one``)."""
            mem = memory.Memory(shape=data.ArrayLayout(signed(width), P), depth=max(depth, 2), init=[])
            m.submodules[f"{name}_file"] = mem
            rp, wp = mem.read_port(domain="comb"), mem.write_port()
            m.d.comb += [rp.addr.eq(index), wp.addr.eq(index), wp.en.eq(we)]
            totals = []
            for p in range(P):
                total = Signal(signed(width), name=f"{name}_sum{p}")
                x = Mux(first, 0 if init is None else init[p], rp.data[p])
                m.d.comb += total.eq(add_plus_one(m, x, terms[p], signed(width), f"{name}_sum{p}c")
                                     if p in carry else x + terms[p])
                m.d.comb += wp.data[p].eq(total)
                totals.append(total)
            return totals

        # --- stage 2: rows x lanes products and their per-row sums (hw/compute/dot_array.py) ---------
        # The dot products appear ``latency`` enabled cycles after stage 1; the control goes down
        # the same number of stages.
        m.d.comb += [dot.en.eq(adv), dot.w.eq(self.w.tdata), dot.w_load.eq(fire & take_w), dot.a.eq(a_data)]
        dots = [dot.dots[p] for p in range(P)]
        s2 = s1
        s2_v = []
        for i in range(dot.latency):
            ns = Signal(ctl, name=f"s2_{i}")
            with m.If(adv):
                m.d.sync += ns.eq(s2)
            s2 = ns
            s2_v.append(ns.v)

        # --- stage 3: the dots, registered --------------------------------------------------
        # (round 27: no group partial sums.  Every beat's dot is scaled and accumulated: S sum_j dot_j =
        # sum_j S dot_j, the same exact integer, and every prefix of it is within the accumulator's bound
        # (|acc| <= n 2^18 (2^16 - 1)).  The partial file (LUT RAM) and its 64 adders are gone; the group's
        # scale beat is claimed at the group's first beat (``take_scale``) and held in the queue's head
        # until its last beat's last token.)
        s3 = Signal(ctl)
        ps3 = [Signal(signed(self.dot_width), name=f"ps{p}") for p in range(P)]
        # (the dots' low rows lack ``dot.lo_carry``: added here)
        for p in range(P):
            with m.If(adv):
                m.d.sync += ps3[p].eq(dots[p] + dot.lo_carry if dot.lo_carry and p % 2 == 0 else dots[p])
        with m.If(adv):
            m.d.sync += s3.eq(s2)

        # --- stage 4: group scale (one uint16 x dot multiply per row and beat) ----------------
        # The group's scale beat is the head of the scale queue while its tokens pass; the last one pops it.
        # The head is two registers: ``sq_f`` the multiplier's operand (the beat's words; kv: its A bytes
        # only, the E bytes' flip-flops held at zero by their synchronous reset; pv: all zero), ``sq_e`` the
        # beat's high bytes (kv: E).  So the operand needs no choice a bit.  The reset goes by the running
        # command (``cfg``), so a beat enters the head only for the command that uses it: not in pv (no
        # scale beats), and not after the command's last group (a later command's beat waits in the LUT
        # RAM until that command runs: loaded then, its first multiply is 1 + latency + 1 cycles on).
        kv_a = SCALE_BITS // 2
        sq_w, sq_r = sq_mem.write_port(), sq_mem.read_port(domain="comb")
        sq_f = Signal(P * SCALE_BITS)
        sq_e = Signal(P * kv_a)
        produce, consume = Signal(range(SQ - 1)), Signal(range(SQ - 1))
        in_level = Signal(range(SQ))            # beats in the LUT RAM
        sq_head = Signal()                      # a beat in the head's registers
        sq_pop, sq_load = Signal(), Signal()
        m.d.comb += [sq_pop.eq(adv_g & s3.v & s3.last_j & s3.last_t & ~pv),
                     sq_level.eq(in_level + sq_head),
                     sq_w.addr.eq(produce), sq_w.data.eq(self.scale.payload), sq_w.en.eq(s_in),
                     sq_r.addr.eq(consume),
                     sq_load.eq((in_level != 0) & (~sq_head | sq_pop) & ~pv & ~(sq_pop & s3.last)
                                & (running | s1.v | Cat(*s2_v).any() | s3.v))]

        def incr(x):
            return Mux(x == SQ - 2, 0, x + 1)
        with m.If(s_in):
            m.d.sync += produce.eq(incr(produce))
        with m.If(sq_load):
            m.d.sync += [consume.eq(incr(consume)), sq_head.eq(1), sq_f.eq(sq_r.data),
                         sq_e.eq(Cat(*[sq_r.data[p * SCALE_BITS + kv_a:(p + 1) * SCALE_BITS] for p in range(P)]))]
        with m.Elif(sq_pop):
            m.d.sync += sq_head.eq(0)
        with m.If(s_in & ~sq_load):
            m.d.sync += in_level.eq(in_level + 1)
        with m.If(sq_load & ~s_in):
            m.d.sync += in_level.eq(in_level - 1)
        with m.If(cfg.kv):
            m.d.sync += [sq_f[p * SCALE_BITS + kv_a:(p + 1) * SCALE_BITS].eq(0) for p in range(P)]
        if PT:
            with m.If(pv):
                m.d.sync += sq_f.eq(0)
        s4 = Signal(ctl)
        if PT:          # pv: a hi digit's partial x 2^16, a lo digit's x 1 (no scale): the multiplier's
            # operand (17 bits unsigned: the DSP's 18-bit signed B), the head's zero words ORed with them
            pv_lo, pv_hi = Signal(), Signal()
            m.d.comb += [pv_lo.eq(pv & ~s3.hi), pv_hi.eq(pv & s3.hi)]
        factors = []
        for p in range(P):
            word = sq_f[p * SCALE_BITS:(p + 1) * SCALE_BITS]
            factors.append(Cat(word[0] | pv_lo, word[1:], pv_hi) if PT else word)
        # kv: the row exponents E go down with the data (one group: the tile's scale beat) into the result
        # queue's field ``e`` (round 27: not in the accumulator's top bits -- that choice was a LUT a bit
        # of 9 a row before the queue, and the requantizer's sign extension; the field is ~300 LUT RAM).
        AW = self.acc_width
        e4, e5 = Signal(P * kv_a), Signal(P * kv_a)
        with m.If(adv):
            m.d.sync += [s4.eq(s3), e4.eq(sq_e), e5.eq(e4)]
        with m.If(~cfg.kv):             # (zero outside kv: a synchronous reset)
            m.d.sync += e4.eq(0)

        # --- stages 4 and 5: group scale and accumulate over groups, one DSP48E2 a row --------------
        # M = partial x factor (the slice's M register, stage 4), then P = M + Z (its P register, stage
        # 5): Z = 0 at a (tile, token)'s first group, else its accumulator -- the file's word (the C port,
        # the file read at stage 4) or, when the previous item was the same word (its write into the file
        # lands this cycle), P itself (the feedback).  The Z choice is the slice's OPMODE (two registers),
        # not a LUT a bit.  The file is written from P a cycle after the add.  The slice adds 48 bits; the
        # accumulator's bit 48 (acc_width 49) is the fabric's: |M| < 2^46, so the sum crosses a multiple
        # of 2^48 only from C[47:46] = 11 to P[47:46] = 00 or back, and r48 = C48 ^ ((C47 ^ P47) &
        # (C47 == C46)) from the C bits 48..46 the add used (registers).
        # (bits 48 and up in general: C's top bits plus one when the add wraps up, minus one when down.)
        # Where the slice does not fit (a product of more than 46 bits, or a partial wider than the
        # multiplier's 27-bit operand), the fabric's read-modify-write of the file (``token_file``).
        s5 = Signal(ctl)
        if not in_dsp:
            acc5 = [Signal(signed(AW), name=f"accout{p}") for p in range(P)]
            prod4 = [Signal(signed(PWD), name=f"prod{p}") for p in range(P)]
            with m.If(adv):
                m.d.sync += [x.eq(ps3[p] * factors[p]) for p, x in enumerate(prod4)]
            acc_index = Cat(s4.t, s4.tile[:ceil_log2(PT)]) if PT > 1 else s4.t
            for p, total in enumerate(token_file("acc", AW, acc_index, s4.first_g, prod4, adv & s4.v,
                                                 depth=(1 << tb) * max(PT, 1))):
                with m.If(adv):
                    m.d.sync += acc5[p].eq(total)
            with m.If(adv):
                m.d.sync += [s5.eq(s4), s5.v.eq(s4.v & s4.last_g)]
        else:
            acc_depth = (1 << tb) * max(PT, 1)
            acc_mem = memory.Memory(shape=data.ArrayLayout(signed(AW), P), depth=max(acc_depth, 2), init=[])
            m.submodules.acc_file = acc_mem
            acc_rp, acc_wp = acc_mem.read_port(domain="comb"), acc_mem.write_port()

            def acc_idx(st):
                return Cat(st.t, st.tile[:ceil_log2(PT)]) if PT > 1 else st.t
            w5 = Signal()                                   # P holds an item to write into the file
            w5_idx = Signal.like(acc_idx(s4), name="w5_idx")
            z_c, z_nz = Signal(), Signal()                  # the OPMODE's Z: C (z_c), P (z_nz & ~z_c), 0
            acc_z = Signal()                                # the add into P (s5's item) had Z != 0
            with m.If(adv):
                fwd_next = s4.v & (acc_idx(s4) == acc_idx(s3))
                m.d.sync += [s5.eq(s4), s5.v.eq(s4.v & s4.last_g), w5.eq(s4.v), w5_idx.eq(acc_idx(s4)),
                             z_c.eq(~s3.first_g & ~fwd_next), z_nz.eq(~s3.first_g), acc_z.eq(z_nz)]
            m.d.comb += [acc_rp.addr.eq(acc_idx(s4)), acc_wp.addr.eq(w5_idx), acc_wp.en.eq(w5)]
            acc5 = []                       # the accumulators (the file's, pv's)
            for p in range(P):
                pr = Signal(DSP_P_BITS, name=f"acc_p{p}")
                cword = acc_rp.data[p].as_unsigned()[:DSP_P_BITS]
                if self.primitive:
                    a30, b18 = Signal(signed(30), name=f"acc_a{p}"), Signal(signed(18), name=f"acc_b{p}")
                    m.d.comb += [a30.eq(ps3[p]), b18.eq(factors[p])]
                    # (``split``: the multiplier's operand is AD = A + D, D the array's second sum of the row
                    # through the slice's D register (stage 3, on ``adv``), the pre-adder not registered)
                    pre = {}
                    if split:
                        d27 = Signal(signed(27), name=f"acc_d{p}")
                        m.d.comb += d27.eq(dot.dots_b[p])
                        pre = dict(p_AMULTSEL="AD", p_DREG=1, p_ADREG=0, i_D=d27, i_CED=adv, i_INMODE=Const(0b00100, 5))
                    m.submodules[f"acc_dsp{p}"] = Instance(
                        "DSP48E2",
                        p_AREG=0, p_BREG=0, p_MREG=1, p_PREG=1, p_CREG=0, p_A_INPUT="DIRECT", p_B_INPUT="DIRECT",
                        p_BMULTSEL="B", p_USE_MULT="MULTIPLY", p_USE_SIMD="ONE48",
                        p_INMODEREG=0, p_OPMODEREG=0,
                        i_CLK=ClockSignal(), i_A=a30, i_B=b18, i_C=cword,
                        i_PCIN=Const(0, DSP_P_BITS),
                        # W = 0, Z = 0 / P / C, Y = X = M; ALUMODE 0000: P = Z + W + X + Y + CIN
                        i_OPMODE=Cat(Const(0b0101, 4), z_c, z_nz, Const(0, 3)),
                        i_ALUMODE=Const(0, 4), i_CARRYIN=Const(0, 1),
                        i_CEA2=Const(0, 1), i_CEB2=Const(0, 1), i_CEAD=Const(0, 1),
                        i_CEM=adv, i_CEP=adv, i_RSTA=Const(0, 1), i_RSTB=Const(0, 1), i_RSTD=Const(0, 1),
                        i_RSTM=Const(0, 1), i_RSTP=Const(0, 1), o_P=pr,
                        o_PCOUT=Signal(DSP_P_BITS, name=f"acc_pcout{p}"),    # (unused: every pin connected)
                        **(pre or dict(p_AMULTSEL="A", i_D=Const(0, 27), i_CED=Const(0, 1), i_INMODE=Const(0, 5))))
                else:               # the same registers in the fabric (what the instance does)
                    mr = Signal(signed(self.partial_width + SCALE_BITS + 1), name=f"prod{p}")
                    with m.If(adv):
                        m.d.sync += [mr.eq(ps3[p] * factors[p]),
                                     pr.eq(Mux(z_nz, Mux(z_c, cword, pr), 0) + mr)]
                raw = Signal(signed(AW), name=f"accout{p}")
                if AW == DSP_P_BITS + 1:
                    # (round 32: the add's C bits without Z = 0's zeros -- ``acc_z``, one flip-flop for the
                    # unit, says Z was 0, and bit 48 then reads C as zeros: ct's next value a 2:1 choice,
                    # bits 46 and 47 one LUT6_2 (``mux2_pairs``), not a LUT a bit of four inputs)
                    ct = Signal(3, name=f"acc_ct{p}")       # the add's C bits 46, 47, 48 (when acc_z)
                    with m.If(adv):
                        m.d.sync += ct.eq(mux2_pairs(m, z_c, acc_rp.data[p].as_unsigned()[46:],
                                                     Cat(pr[46:48], raw[48]), self.primitive, f"acc_ctn{p}"))
                    c46, c47, c48 = (Mux(acc_z, ct[k], 0) for k in range(3))
                    m.d.comb += raw.eq(Cat(pr, c48 ^ ((c47 ^ pr[47]) & ~(c47 ^ c46))))
                elif AW > DSP_P_BITS:
                    ct = Signal(AW - 46, name=f"acc_ct{p}")  # the add's C bits 46 and up
                    with m.If(adv):
                        m.d.sync += ct.eq(Mux(z_nz, Mux(z_c, acc_rp.data[p][46:], Cat(pr[46:48], raw[48:])), 0))
                    up, down = ct[1] & ct[0] & ~pr[47], ~ct[1] & ~ct[0] & pr[47]
                    m.d.comb += raw.eq(Cat(pr, ct[2:] + up - down))
                else:
                    m.d.comb += raw.eq(pr[:AW])
                m.d.comb += acc_wp.data[p].eq(raw)
                acc5.append(raw)

        # --- stage 6: requantize to X32 and add the bias, R = requant_rows rows a cycle -----------
        # A finished (tile, token) -- P exact accumulators (kv: with the row exponents E beside them, round 27)
        # and the shift's common part -- goes into the result queue ``res_q`` (a tile's last group gives T of them back
        # to back); the requantizer takes the head R rows a cycle through 6 register stages (select,
        # shift decode, shift, round, saturate, bias add + saturate) into the output word, P / R
        # cycles a beat.  Shift E_w - e - X_FRAC; kv (golden ``scores``): per row -(e + E_row + S_FRAC).
        R = self.requant_rows
        NC = P // R
        SH = signed(EXP_BITS + 2)
        sh5 = Signal(SH)                # the shift without the kv row exponent
        m.d.comb += sh5.eq(Mux(cfg.kv, -exps[s5.t] - S_FRAC, cfg.w_exp - exps[s5.t] - X_FRAC))
        res = data.StructLayout({"acc": data.ArrayLayout(signed(self.acc_width), P),
                                 "e": data.ArrayLayout(signed(kv_a), P), "sh": SH, "last": 1, "end": 1})
        m.submodules.res_q = res_q = fifo.SyncFIFO(width=res.size, depth=max(TM, 2))
        head = data.View(res, res_q.r_data)
        # (adv & s5.v & ~pv, written without ``adv``: its pv terms stay off the queue's level)
        m.d.comb += [res_q.w_en.eq(s5.v & ~pv & res_q.w_rdy),
                     res_q.w_data.eq(Cat(*acc5, e5, sh5, s5.last, s5.last_t))]

        dadv = Signal()                 # the requantizer moves (only ``o`` stalls it)
        m.d.comb += adv_g.eq(~s5.v | res_q.w_rdy)
        o_data, o_last = Signal(P * 32), Signal()
        chunk = Signal(range(max(NC, 2)))      # (one bit at NC = 1: no zero-width vectors in the Verilog)
        take = Signal()                 # the head's rows chunk R .. chunk R + R - 1 enter the requantizer
        m.d.comb += [take.eq(dadv & res_q.r_rdy), res_q.r_en.eq(take & (chunk == NC - 1))]
        with m.If(take):
            m.d.sync += chunk.eq(Mux(chunk == NC - 1, 0, chunk + 1))
        qctl = data.StructLayout({"v": 1, "c": range(max(NC, 2)), "end": 1, "last": 1, "tile_end": 1})

        def rq_stage(name, prev_ctl, values):
            """One requantizer register stage: ``values`` (name -> (shape, next value) per row) and
            the control, all moving on ``dadv``."""
            ctl_r = Signal(qctl, name=f"rq_{name}")
            regs = {}
            for key, (shape, nexts) in values.items():
                regs[key] = [Signal(shape, name=f"rq_{name}_{key}{i}") for i in range(R)]
            with m.If(dadv):
                m.d.sync += ctl_r.eq(prev_ctl)
                for key, (shape, nexts) in values.items():
                    m.d.sync += [r.eq(v) for r, v in zip(regs[key], nexts)]
            return ctl_r, regs

        # A: the chunk's accumulators and shifts
        cA = Signal(qctl)
        last_c = chunk == NC - 1
        m.d.comb += [cA.v.eq(take), cA.c.eq(chunk), cA.end.eq(last_c), cA.last.eq(head.last & last_c),
                     cA.tile_end.eq(head.end & last_c)]
        # (round 28b: a 4-way chunk choice -- NC = 4 in the node -- one LUT6 instance a bit when primitive,
        # ``mcf.hw.lut.mux4``; measured: ABC9 had mapped these at a LUT a bit already, so no LUT either way)
        def chunk_pick(items, sel, name):
            if NC == 4:
                return mux4(m, sel, items, primitive=self.primitive, name=name)
            return Array(items)[sel]
        sel_acc = [chunk_pick([head.acc[c * R + i] for c in range(NC)], chunk, f"rq_asel{i}") if NC > 1
                   else head.acc[i] for i in range(R)]
        # kv: the shift sh - E (E zero outside kv: ``e4``'s reset; the Mux for a kv command's last E
        # still in ``e5`` as the next command starts)
        # (round 33: primitive, E's chunk choice one LUT6 a bit and sh - E's propagates two bits a LUT6_2, ``rq_sub_e``)
        sel_e = [(chunk_pick([head.e[c * R + i] for c in range(NC)], chunk, f"rq_esel{i}") if self.primitive
                  else Array(head.e[c * R + i] for c in range(NC))[chunk]) if NC > 1 else head.e[i] for i in range(R)]
        cA, rA = rq_stage("a", cA, {
            "acc": (signed(AW), sel_acc),
            "sh": (SH, [rq_sub_e(m, head.sh, e, cfg.kv, primitive=self.primitive, name=f"rq_a_sub{i}")
                        for i, e in enumerate(sel_e)])})
        # B: the shift decoded (golden sat32(rshr(acc, s)), docs/compute.md): one window of the
        # accumulator for both directions (``rq_window``: 33 bits and, below them, a right shift's
        # rounding bit), its overflow from the accumulator's significant bits (``rq_decode``'s threshold by
        # groups, registered: ``rq_over`` in C; round 28), whether the shift rounds.
        # (round 30: no threshold code here -- ``rq_over_win`` reads a and the window's coarse layers in C)
        dec = {"acc": (signed(AW), rA["acc"]), "a": (range(RQ_WIN + AW + 1), []), "rnd": (1, [])}
        for s, x in zip(rA["sh"], rA["acc"]):
            a, rnd, _ = rq_decode(x, s)
            dec["a"][1].append(a)
            dec["rnd"][1].append(rnd)
        cB, rB = rq_stage("b", cA, dec)
        # C: the window (exact when not over), the overflow and the sign.  (round 30: ``primitive``, the
        # window's last layers on two DSP48E2 slices a row, their P registers the stage's: ``rq_window_dsp``;
        # the overflow from the window's coarse layers ``u``: ``rq_over_win``)
        us = [rq_window(x, a, m=m, primitive=self.primitive, name=f"rq_win{i}", stop=RQ_DSP_FINE)
              for i, (x, a) in enumerate(zip(rB["acc"], rB["a"]))]
        cC, rC = rq_stage("c", cB, {
            **({} if self.primitive else {"w": (signed(RQ_WIN + 1), [
                rq_window(x, a) for x, a in zip(rB["acc"], rB["a"])])}),
            "over": (1, [rq_over_win(x, u, a, r, near_terms=not self.primitive)
                         for x, u, a, r in zip(rB["acc"], us, rB["a"], rB["rnd"])]),
            "sign": (1, [x[AW - 1] for x in rB["acc"]]), "rnd": (1, rB["rnd"])})
        over_c = rC["over"]
        if self.primitive:
            # (round 33: the overflow's near terms from the high slice's bits above the window, at stage D)
            wt = [rq_window_dsp(m, u, a, dadv, name=f"rq_win{i}", top=True) for i, (u, a) in enumerate(zip(us, rB["a"]))]
            rC["w"] = [w for w, _ in wt]
            over_c = [o | rq_over_near(w, t, sg, r, m=m, primitive=True, name=f"rq_near{i}")
                      for i, (o, (w, t), sg, r) in enumerate(zip(rC["over"], wt, rC["sign"], rC["rnd"]))]
        # D: the window t and a right shift's rounding increment c (added in F, as the bias add's carry)
        cD, rD = rq_stage("d", cC, {"t": (signed(RQ_WIN), [w[1:] for w in rC["w"]]),
                                    "c": (1, [w[0] & r for w, r in zip(rC["w"], rC["rnd"])]),
                                    "over": (1, over_c), "sign": (1, rC["sign"])})
        # E: saturate (round 27: the word t's low 32 bits, whether it saturates and the bound's sign, as
        # registers -- the bound's choice is in F, each bit's input of the bias add's LUT, not a LUT a bit
        # here), the chunk's bias words (the tile's bias beat, popped after its last word)
        # (round 33: the bound as y zeroed -- the flip-flops' synchronous reset -- and two fill bits a row, the
        # bound's ones: the bias add's propagates read y, b and one fill bit, two bits a LUT6_2, ``rq_add_fill``)
        sats = [rq_sat_split(t, o, sg) for t, o, sg in zip(rD["t"], rD["over"], rD["sign"])]
        bias_words = [chunk_pick([self.bias.payload[(c * R + i) * 32:(c * R + i + 1) * 32] for c in range(NC)],
                                 cD.c, f"rq_bsel{i}")
                      if NC > 1 else self.bias.payload[i * 32:(i + 1) * 32] for i in range(R)]
        cE, rE = rq_stage("e", cD, {"y": (signed(32), [y for y, _, _ in sats]),
                                    "fl": (1, [st & ~sg for _, st, sg in sats]), "fh": (1, [st & sg for _, st, sg in sats]),
                                    "c": (1, [rq_carry(t, c, o) for t, c, o in zip(rD["t"], rD["c"], rD["over"])]),
                                    "b": (signed(32), bias_words)})
        with m.If(~cfg.bias | pv):      # no bias: the words zero (the flip-flops' synchronous reset, not a
            m.d.sync += [b.eq(0) for b in rE["b"]]   # seventh input of each bit's 4:1 choice)
        for y, (_, st, _) in zip(rE["y"], sats):
            with m.If(dadv & st):       # a saturating word's y zero (its bound is the fill bits)
                m.d.sync += y.eq(0)
        with m.If(pv):                  # pv: the requantizer's words zero (the output word's GEMM term, below)
            m.d.sync += [y.eq(0) for y in rE["y"] + rE["c"] + rE["fl"] + rE["fh"]]
        # (the tile's bias beat is taken from ``bias`` here, its last chunk's; a chunk that needs it waits for it)
        m.d.comb += [dadv.eq((~o_valid | self.o.tready) & (~(cD.v & cfg.bias) | self.bias.valid)),
                     self.bias.ready.eq(dadv & cD.v & cD.tile_end & cfg.bias)]
        # F: the bias add and its saturation, into the output word (pv: the sums zero)
        gsum = [Signal(signed(33), name=f"rq_f_s{i}") for i in range(R)]
        m.d.comb += [s.eq(rq_add_fill(m, y, fl, fh, c, b, primitive=self.primitive, name=f"rq_f_add{i}"))
                     for i, (s, y, fl, fh, c, b) in enumerate(zip(gsum, rE["y"], rE["fl"], rE["fh"], rE["c"], rE["b"]))]
        words = [sat32(s) for s in gsum]

        # The output word, per chunk c of R words an enable and the next value.  Each bit is one OR of
        # terms (one LUT): the requantizer's sum (zero in pv), and in pv y, y's high word; a saturation
        # (GEMM's sat32 of the bias add, pv's of y) ORs ones into its word and clears the bound's zero bits
        # by the flip-flops' synchronous reset.
        o_next = Signal(P * 32)
        o_en = [Signal(name=f"o_en{c}") for c in range(NC)]
        for c in range(NC):
            with m.If(o_en[c]):
                m.d.sync += o_data[c * R * 32:(c + 1) * R * 32].eq(o_next[c * R * 32:(c + 1) * R * 32])
        gemm_en = [dadv & cE.v & (cE.c == c) for c in range(NC)]
        with m.If(~pv & dadv):
            m.d.sync += [o_valid.eq(cE.v & cE.end), o_last.eq(cE.last)]
        if not PT:
            m.d.comb += [adv.eq(adv_g), o_next.eq(Cat(*words).replicate(NC))]
            m.d.comb += [en.eq(ge) for en, ge in zip(o_en, gemm_en)]
        else:
            # pv: y = acc (+ the previous wide value, taken from ``prev`` here), exact modulo 2^64;
            # sat32(y) as one beat, or (wide) the low words, then the high words as a second beat
            # (the pipeline waits for it: ``pend``); the whole beat in one cycle
            need_prev = s5.v & pv & cfg.acc
            pend = Signal()
            # (round 31: ``o_hi`` zero outside its beat, cleared by the flip-flops' synchronous reset -- with the
            # domain's own reset as one signal: a second reset beside it was a LUT a bit)
            o_hi, o_last_hi = Signal(P * 32, reset_less=True), Signal()
            m.d.comb += [adv.eq(Mux(pv, ~pend & (~o_valid | self.o.tready) & (~need_prev | self.prev.valid),
                                    adv_g)),
                         self.prev.ready.eq(adv & need_prev)]
            gword = Signal(R * 32)              # the requantizer's sums (zero in pv) before their sat32
            m.d.comb += gword.eq(Cat(*[s[:32] for s in gsum]))
            govf = [Signal(name=f"rq_f_ovf{i}") for i in range(R)]      # GEMM: sat32 clamps word i
            m.d.comb += [o.eq(s[32] ^ s[31]) for o, s in zip(govf, gsum)]
            pv_adv = Signal(attrs={"keep": 1})  # pv: a low word (or sat32) beat enters
            m.d.comb += pv_adv.eq(pv & adv)
            pv_sat = Signal()                   # pv: a sat32 (not wide) beat enters
            m.d.comb += pv_sat.eq(pv_adv & ~cfg.wide)
            # (round 31: y's adder gives the high word in the high beat -- ``pend`` -- and zero in GEMM (``o_hi``
            # zero outside its beat): the output bit's terms are the row's ones, that and GEMM's sum bit,
            # ``o_bits``, two a LUT6_2; the choice is in y's adder's LUT6_2, ``add_load`` with ``en``, from registers only)
            y_load = Signal()
            m.d.comb += y_load.eq(~pv | pend)
            hi_w, bits, clamps = [], [], []
            for p in range(P):
                # (round 29: y on its ``pv_bits`` significant bits; the wide value's top bits copies of
                # its sign -- the same 64-bit word for every y within the bound)
                YB = self.pv_bits
                prev = self.prev.payload[p * WIDE_BITS:p * WIDE_BITS + YB].as_signed()
                y = add_load(m, acc5[p], prev, o_hi[p * 32:(p + 1) * 32], y_load, signed(YB), f"pv_y{p}",
                             primitive=self.primitive, en=cfg.acc)
                hi_w.append(Cat(y[32:], y[YB - 1].replicate(WIDE_BITS - YB)))
                # sat32: y outside int32 (bits 31 and up neither all zeros nor all ones) takes the sign's
                # bound.  The bound is a word of ones (the clamp ORed into each bit's next value) with
                # the bits the sign's bound has zero cleared by the flip-flops' synchronous reset
                # (``pv_clr``, below): a bit's next value is one OR of terms, no choice after it.
                # (round 29: ``primitive``, the clamp's "not all equal" and the row's ones as LUT6 instances:
                # ``o_ones``)
                # ones into the row's word: a clamp, or GEMM's overflow of the row's requantizer word
                force, clamp = o_ones(m, y[31:], pv_sat, govf[p % R], primitive=self.primitive, name=f"o_ones{p}")
                clamps.append((clamp, y[YB - 1]))
                bits += o_bits(m, force, [y[k] for k in range(32)],
                               [gword[(p * 32 + k) % (R * 32)] for k in range(32)],
                               primitive=self.primitive, name=f"o_next{p}_")
            m.d.comb += o_next.eq(Cat(*bits))
            m.d.comb += [en.eq(Mux(pv, adv | (pend & self.o.tready), ge)) for en, ge in zip(o_en, gemm_en)]
            # the clamp's bound: -2^31 (sign 1) clears bits 0 .. 30, 2^31 - 1 clears bit 31 (a pv clamp is
            # pv & adv, so its row's chunk is enabled that cycle; a GEMM one only with its chunk's enable; the
            # reset comes after the enable's write)
            for p, (clamp, sign) in enumerate(clamps):
                i = p % R
                g_neg = gemm_en[p // R] & govf[i] & gsum[i][32]
                g_pos = gemm_en[p // R] & govf[i] & ~gsum[i][32]
                clr_lo, clr_hi = Signal(name=f"o_clr_lo{p}"), Signal(name=f"o_clr_hi{p}")
                m.d.comb += [clr_lo.eq((clamp & sign) | g_neg), clr_hi.eq((clamp & ~sign) | g_pos)]
                with m.If(clr_lo):
                    m.d.sync += o_data[p * 32:p * 32 + 31].eq(0)
                with m.If(clr_hi):
                    m.d.sync += o_data[p * 32 + 31].eq(0)
            with m.If(pv):
                with m.If(adv):
                    m.d.sync += [o_valid.eq(s5.v), o_last.eq(s5.last & ~cfg.wide),
                                 pend.eq(s5.v & cfg.wide), o_last_hi.eq(s5.last)]
                    with m.If(s5.v & cfg.wide):         # (round 31: else zero, as y's add_load reads it)
                        m.d.sync += o_hi.eq(Cat(*hi_w))
                with m.Elif(~pend & self.o.tready):     # the beat went, the next waits for ``prev``
                    m.d.sync += o_valid.eq(0)
                with m.If(pend & self.o.tready):
                    m.d.sync += [o_last.eq(o_last_hi), pend.eq(0)]
            with m.If(ResetSignal() | (pend & self.o.tready)):
                m.d.sync += o_hi.eq(0)
        m.d.comb += [self.o.tvalid.eq(o_valid), self.o.tdata.eq(o_data), self.o.tlast.eq(o_last),
                     self.o.tkeep.eq(-1)]

        # --- the handshakes a cycle ahead: ``go``, ``take_w`` / ``take_scale``, ``w.tready``
        # The pipeline moves next cycle (``adv``).  GEMM: s5 after this cycle and the result queue full
        # after this cycle's write, not counting its read (conservative by one place: the queue fills
        # only when ``o`` stalls the requantizer; ``o.tready`` stays off this path).  pv (``o`` and
        # ``prev`` stall it): conservative, the output register empty next cycle (``o.tready`` next
        # cycle is not known) and ``prev`` valid now and not taken.
        s5v_n = Signal()
        m.d.comb += s5v_n.eq(Mux(adv, s4.v & s4.last_g, s5.v))
        RD = res_q.depth
        rq_full_n = (res_q.level == RD) | ((res_q.level == RD - 1) & res_q.w_en)
        adv_n = Signal()
        m.d.comb += adv_n.eq(~s5v_n | ~rq_full_n)
        if PT:
            # pv: ``pend`` and the output register empty next cycle, and ``prev`` there for s5's next item
            # (valid now and not taken).  If the pipeline does not move now, neither will it next cycle
            # (nothing that stops it goes away: ``pend`` implies ``o`` full, which empties only as
            # ``pend`` goes, by the second beat); if it moves, s5 takes s4's item, ``o`` takes s5's (and
            # ``pend`` its wide flag), ``prev`` loses s5's word: so adv, s5 empty, and ``prev`` for s4's
            # item.  (Written as the registers' function, not through the next values: fewer levels.)
            with m.If(pv):
                m.d.comb += adv_n.eq(adv & ~s5.v & (~(s4.v & s4.last_g & cfg.acc) | self.prev.valid))
        # The counters' flags after this cycle's issue (if it fires: functions of registers only)
        if PT:
            take_w_f = last_t & (~pv | dg)                       # pv: the digit flips at the tokens' end
        else:
            take_w_f = last_t
        take_scale_f = last_t & ~pv & last_j              # the next issue starts a group (round 27)
        final_f = last_t & last_tile & last_g & Mux(pv, dg, last_j)
        # the activation beat after the issue: the same, the next or (pv) the one before (all in, as this
        # one is) -- or 0 (a GEMM's next tile: in); only the next needs a compare
        inc_f = last_t & Mux(pv, ~dg | last_tile, ~(last_j & last_g))
        if self.streamed:
            # ``abeat`` and ``abeat + 1`` as registers kept equal to them (``ab_q`` / ``ab1_q``, set with
            # the counters): the compares with ``avail`` have no choice (pv) or adder in front of them
            ab_q, ab1_q = Signal.like(abeat, name="ab_q"), Signal(len(abeat) + 1, name="ab1_q", init=1)
            with m.If(self.cmd.valid & ~running):
                m.d.sync += [ab_q.eq(0), ab1_q.eq(1)]
            with m.Elif(fire & last_t):
                with m.If(pv & dg & ~last_tile):                  # pv: the hi digit's beat again
                    m.d.sync += [ab_q.eq(ab_q - 1), ab1_q.eq(ab_q)]
                with m.Elif(~pv & last_j & last_g):               # a GEMM's next tile: beat 0
                    m.d.sync += [ab_q.eq(0), ab1_q.eq(1)]
                with m.Else():                                    # the next beat
                    m.d.sync += [ab_q.eq(ab1_q), ab1_q.eq(ab1_q + 1)]
            avail_h = ab_q < self.avail
            avail_f = ~inc_f | (ab1_q < self.avail)
        else:
            avail_h = avail_f = 1
        # an unclaimed scale beat after this cycle (its take in, its claim out)
        s_have_n = Signal()
        m.d.comb += s_have_n.eq(Mux(s_claim, Mux(s_in, s_have, s_free > 1), s_in | s_have))
        m.d.sync += [s_have.eq(s_have_n), s_free.eq(s_free + s_in - s_claim)]
        cond_h = (~take_scale | s_have_n) & avail_h
        cond_f = (~take_scale_f | s_have_n) & avail_f
        go_n, take_w_n = Signal(), Signal()
        m.d.comb += [go_n.eq(running & adv_n & Mux(fire, ~final_f & cond_f, cond_h)),
                     take_w_n.eq(Mux(fire, take_w_f, take_w))]
        m.d.sync += [go.eq(go_n), take_w.eq(take_w_n), w_rdy.eq(go_n & take_w_n)]
        with m.If(fire):
            m.d.sync += take_scale.eq(take_scale_f)
        pl = self.cmd.payload
        with m.If(self.cmd.valid & ~running):           # (a command's first issue waits a cycle for ``go``)
            m.d.sync += [go.eq(0), w_rdy.eq(0), take_w.eq(1),
                         take_scale.eq(~(pl.pv if PT else 0))]
        return m


#: the requantizer's window: 33 bits of the accumulator (a 32-bit result before its rounding bit)
RQ_WIN = 33
#: the longest left shift the requantizer does: x << 32 of any x != 0 leaves int32 (a longer one saturates alike)
RQ_MAX_LEFT = RQ_WIN - 1


def rq_decode(x, s):
    """The requantizer's shift (golden ``sat32(rshr(x, s))`` of a signed accumulator ``x``), first
    stage: (a + 1 if s > 0 else a, rnd, code): the offset of ``rq_window``'s RQ_WIN + 1 bits, the rest below.
    Both directions are one window of RQ_WIN bits, x_e = x 2^RQ_WIN >> a: a right
    shift by s > 0 is ((x >> (s - 1)) + 1) >> 1 (rnd), window a = RQ_WIN - 1 + s (s capped at the width of
    x: the window is then all sign bits, rounding to 0); a left shift by L = -s >= 0 is x << L, a =
    RQ_WIN - L (L capped at RQ_MAX_LEFT).  The window holds the exact value iff q <= a - 1, q = the
    position of the highest one of d = x ^ its sign, + 1 (``rq_window``; else it saturates): q >= a iff
    some d_i = 1 with i + 1 >= a, i.e. i >= thr.  With RQ_WIN = 33 and i <= len(x) - 2: s > 0 gives
    a <= i + 1 iff i >= s + 31 (the cap of s at len(x) changes no answer); s <= 0 iff i >= max(s, -32) + 32.
    So thr = s + 32 - rnd, clamped to [0, 2^k - 1] (``rq_thr_bits``: 2^k - 1 > len(x) - 2, a clamped high
    thr is above every i, as the unclamped one), registered as ``rq_over_code``.  (round 28: the threshold by
    groups of d -- not a thermometer of len(x) - 1 bits registered a row, whose decode and AND-OR were ~100
    LUT a row.)"""
    n = len(x)
    a1 = RQ_WIN + Mux(s > n, n, Mux(s < -RQ_MAX_LEFT, -RQ_MAX_LEFT, s))
    rnd = s > 0
    # s + 32 - rnd as one adder, ~rnd its carry in: (2 s + ~rnd + 63) >> 1
    t = (Cat(~rnd, s).as_signed() + (2 * (RQ_WIN - 2) + 1)) >> 1
    k = rq_thr_bits(n)
    thr = Mux(t[len(t) - 1], 0, Mux(t[k:].any(), (1 << k) - 1, t[:k]))
    return a1, rnd, rq_over_code(thr, n)


def rq_thr_bits(n):
    """The width of ``rq_decode``'s threshold for an ``n``-bit accumulator: 2^k - 1 above every position of d."""
    return ceil_log2(n)


#: the overflow's groups of d (``rq_over``): 2^RQ_GROUP_BITS bits each
RQ_GROUP_BITS = 3


def rq_over_code(thr, n):
    """The threshold as ``rq_over`` reads it (registered: no compare in its stage): per group g of d, whether
    it lies wholly above thr's group (``gt``) and whether it is thr's group (``eq``); per position k of a
    group, whether it is at or above thr's low bits (``ge``, a thermometer)."""
    gb = RQ_GROUP_BITS
    th, tl = thr[gb:], thr[:gb]
    groups = -(-(n - 1) // (1 << gb))
    # (the compares known at elaboration -- th < 0, tl <= 2^gb - 1 -- as constants: Verilator's lint refuses
    # constant comparisons)
    return Cat(*[th < g if g else Const(0, 1) for g in range(groups)], *[th == g for g in range(groups)],
               *[tl <= k if k < (1 << gb) - 1 else Const(1, 1) for k in range(1 << gb)])


def rq_over(x, code):
    """The requantizer's overflow (q >= a of ``rq_decode``): a one of d = x ^ its sign at a position
    i >= thr (``rq_over_code``): in a group wholly above thr's group, or at or above thr's low bits in thr's
    own group."""
    n = len(x)
    d = x[:n - 1] ^ x[n - 1].replicate(n - 1)
    gb = RQ_GROUP_BITS
    groups = -(-(n - 1) // (1 << gb))
    gt, eq, ge = code[:groups], code[groups:2 * groups], code[2 * groups:]
    terms = []
    for g in range(groups):
        bits = d[g << gb:(g + 1) << gb]
        terms.append((gt[g] & bits.any()) | (eq[g] & Cat(*[b & ge[k] for k, b in enumerate(bits)]).any()))
    return Cat(*terms).any()


def rq_window(x, a, win: int = RQ_WIN + 1, m=None, primitive: bool = False, name: str = "rq_win", stop: int = 0):
    """``win`` bits of (x 2^win) >> a, arithmetic: with ``rq_decode``'s offset, bits 1 .. RQ_WIN the
    window t (the exact value when not over: x << L, or x >> s for a right shift), bit 0 the bit
    below it (a right shift's rounding: ((x >> (s - 1)) + 1) >> 1 = t + bit 0).  A right shifter by the
    amount's high bits first, two bits (one 4-way choice) a layer, each layer keeping only the bits
    the later layers can still reach (RQ_WIN + their largest shift): ~170 choices for a 49-bit x,
    not a full-width layer per amount bit.  An odd amount width leaves its lowest bit to the last
    layer (a 2-way choice of RQ_WIN bits, not of the widest layer's).  ``primitive`` (needs ``m``; round
    28b): each 4-way layer one LUT6 instance a bit (``mcf.hw.lut.mux4``), not ABC9's ~1.5 LUT a bit.
    ``stop`` > 0 (round 30, ``rq_window_dsp``): only the layers of a's bits ``stop`` and up, the
    ``win + 2^stop - 1`` bits of (x 2^win) >> (a without its low ``stop`` bits) the rest of the shift reads."""
    if primitive and m is None:
        raise ValueError("rq_window: primitive layers need the module (m)")
    a = a.as_unsigned()
    v = Cat(Const(0, win), x).as_signed()
    top = len(a)
    while top > stop:
        lo = max(top - 2, stop)
        keep = min(win + (1 << lo) - 1, len(v))           # bits the later layers (shifts < 2^lo) read
        items = [(v >> (k << lo))[:keep] for k in range(1 << (top - lo))]
        if primitive and len(items) == 4 and top == len(a):
            # (round 31: the first layer reads x's bits themselves, each choice one of few: ``mux4_shared``)
            zero, xb = Const(0, 1), [x[i] for i in range(len(x))]
            vb = [zero] * win + xb
            width = max(len(it) for it in items)

            def bit(k, j):                      # bit j of items[k], zero-extended to ``width``
                s = k << lo
                if j >= min(keep, len(v >> s)):
                    return zero
                return vb[j + s] if j + s < len(vb) else xb[-1]
            v = Cat(*mux4_shared(m, a[lo:top], [[bit(k, j) for k in range(4)] for j in range(width)],
                                 f"{name}_l{lo}")).as_signed()
        elif primitive and len(items) == 4:     # (zero-extended to one width, as the Array's choice)
            width = max(len(it) for it in items)
            items = [Cat(it, Const(0, width - len(it))) for it in items]
            v = mux4(m, a[lo:top], items, primitive=True, name=f"{name}_l{lo}").as_signed()
        else:
            v = Array(items)[a[lo:top]].as_signed()
        top = lo
    return v[:win + (1 << stop) - 1].as_signed()


#: (round 30) ``rq_window_dsp``: the offset's low bits whose shift is a multiply by a power of two
RQ_DSP_FINE = 3


def rq_window_dsp(m, u, a, en, name: str = "rq_wdsp", top: bool = False):
    """``rq_window(x, a)`` registered on ``en`` (the requantizer's stage C), its last shift layers on two
    DSP48E2 multipliers (round 30): ``u`` the LUT6 layers of a's bits RQ_DSP_FINE and up (``rq_window``'s
    ``stop``: RQ_WIN + 2^F bits, F = RQ_DSP_FINE), then each half of the window (RQ_WIN + 1 = 2 H bits) is
    bits 2^F - 1 .. of (its 2^F - 1 + H bits of that) x 2^(2^F - 1 - a mod 2^F): a multiply by a power of two,
    the slice's P register the stage's.  The layers of a's low bits (~110 LUT6 a row for a 49-bit x) become
    the two slices and a one-hot decode of 2^F bits.  (No M register: the stage's latency stays one cycle;
    the path is the two LUT6 layers and the slice's 2 x ``DSP_HALF_LEVELS``, 8 levels.)
    (round 33: the high half's piece sign-extended -- u's top bit -- into A's spare bits: its product's 2^F - 1
    bits above the window are u's bits above it, then copies of u's top bit; ``top``: (the window, those bits),
    ``rq_over_near``'s input.)"""
    F = 1 << RQ_DSP_FINE
    H = (RQ_WIN + 1) // 2
    f = a.as_unsigned()[:RQ_DSP_FINE]
    mult = Signal(18, name=f"{name}_b")             # 2^(F - 1 - f): one-hot, the slices' B
    # (round 32: two of its bits a LUT6_2 instance, both functions of f's three bits)
    def val(i):                                     # f from the LUT's I0 .. I2
        return i[0] | i[1] << 1 | i[2] << 2
    for k in range(0, F, 2):
        lut6_2(m, lut6_2_init(lambda *i, k=k: int(val(i) == F - 1 - k), lambda *i, k=k: int(val(i) == F - 2 - k)),
               [f[0], f[1], f[2]], mult[k], mult[k + 1], f"{name}_oh{k}")
    halves = []
    for h in range(2):
        piece = u.as_unsigned()[h * H:h * H + H + F - 1]        # (unsigned: only bits F - 1 .. of the product are read)
        pr = Signal(48, name=f"{name}_p{h}")
        m.submodules[f"{name}_dsp{h}"] = Instance(
            "DSP48E2",
            p_AREG=0, p_BREG=0, p_MREG=0, p_PREG=1, p_CREG=0, p_A_INPUT="DIRECT", p_B_INPUT="DIRECT",
            p_AMULTSEL="A", p_BMULTSEL="B", p_USE_MULT="MULTIPLY", p_USE_SIMD="ONE48",
            p_INMODEREG=0, p_OPMODEREG=0,
            i_CLK=ClockSignal(), i_A=Cat(piece, (piece[-1] if h else Const(0, 1)).replicate(30 - len(piece))),
            i_B=mult, i_C=Const(0, 48),
            i_D=Const(0, 27), i_PCIN=Const(0, 48),
            # W = 0, Z = 0, Y = X = M: P = M
            i_OPMODE=Const(0b000000101, 9), i_ALUMODE=Const(0, 4), i_INMODE=Const(0, 5), i_CARRYIN=Const(0, 1),
            i_CEA2=Const(0, 1), i_CEB2=Const(0, 1), i_CED=Const(0, 1), i_CEAD=Const(0, 1),
            i_CEM=Const(0, 1), i_CEP=en, i_RSTA=Const(0, 1), i_RSTB=Const(0, 1), i_RSTD=Const(0, 1),
            i_RSTM=Const(0, 1), i_RSTP=Const(0, 1), o_P=pr,
            o_PCOUT=Signal(48, name=f"{name}_pcout{h}"))       # (unused: every pin connected)
        halves.append(pr[F - 1:F - 1 + H])
    w = Cat(*halves).as_signed()
    return (w, pr[F - 1 + H:2 * F - 2 + H]) if top else w


def rq_over_near(w, top, sign, rnd, m=None, primitive: bool = False, name: str = "rq_near"):
    """``rq_over_win``'s near terms (round 33) from ``rq_window_dsp``'s registers: u's bit k counts iff k >= RQ_WIN
    + f - rnd (f = a mod 2^F), and the high slice's product holds u's bit RQ_WIN + f - 1 + j at its bit 2^F - 2 + H
    + j (j = 0, 1: the window's top two bits, ``w``'s) and the bits above it, then copies of u's top bit (its A
    sign-extended; u's top bit always counts) in ``top``: the same positions for every f -- the window's top
    bit, the one below it when ``rnd``, and ``top``, each against the sign.  A stage later than the far terms
    (stage D's ``over``): no LUT of f a term.  ``primitive`` (2^F - 1 = 7 bits of ``top``): two LUT6 instances
    (ABC9 made ~4 LUTs of the terms), ORed into the far terms by the caller."""
    if not primitive or len(top) != 7:
        return ((top ^ sign.replicate(len(top))).any() | (w[-1] ^ sign) | (rnd & (w[-2] ^ sign)))
    lo = lut6(m, lambda s, *t: int(any(b != s for b in t)), [sign, *top[:5]], f"{name}_lo")
    return lut6(m, lambda s, t5, t6, w1, w2, r: int(t5 != s or t6 != s or w1 != s or (r and w2 != s)),
                [sign, top[5], top[6], w[-1], w[-2], rnd], f"{name}_hi") | lo


def rq_over_win(x, u, a, rnd, near_terms: bool = True):
    """``rq_over`` (round 30) from ``u`` = ``rq_window(x, a, stop=RQ_DSP_FINE)`` (the window's coarse layers,
    there anyway), a and rnd (``rq_decode``'s), not from a threshold code registered a stage before: the
    positions i >= thr of d = x ^ its sign are, with thr = a - 1 - rnd (``rq_decode``'s, clamps included, for
    every i <= len(x) - 2), those of u's top bits from RQ_WIN - 1 + (a mod F) - rnd (F = 2^RQ_DSP_FINE; at
    most F + 1 bits, each a LUT6 of the bit, the sign, a mod F and rnd) and those of x from c + F - 1 on, c = a
    without its low bits: groups of F bits of d at fixed places, a group counting when c <= its start - F + 1
    (a compare of a's high bits).  (rq_over's code was ~22 LUT and flip-flops a row at stage B, its terms ~49.)
    ``near_terms`` False (round 33): the far terms only (the near ones from the slices: ``rq_over_near``)."""
    n = len(x)
    F = 1 << RQ_DSP_FINE
    W = RQ_WIN + 1
    a = a.as_unsigned()
    f, q = a[:RQ_DSP_FINE], a[RQ_DSP_FINE:]
    sign = x[n - 1]
    near = []
    for k in range(W - 2, W + F - 1):             # u bit k counts iff k >= W - 1 + f - rnd, i.e. f <= t + rnd
        t = k - W + 1
        if t >= F - 1:
            cond = Const(1, 1)
        else:
            cond = (f <= t if t >= 0 else Const(0, 1)) | (rnd & (f == t + 1))
        near.append((u[k] ^ sign) & cond)
    if not near_terms:
        near = []
    far = []
    g = 0
    while g * F + F - 1 <= n - 2:                 # d's bits g F + F - 1 .. g F + 2 F - 2: counts iff c <= g F
        lo, hi = g * F + F - 1, min(g * F + 2 * F - 1, n - 1)
        far.append((x[lo:hi] ^ sign.replicate(hi - lo)).any() & (q <= g if g else q == 0))
        g += 1
    return Cat(*near, *far).any()


def sat32(x):
    """sat32 of a signed ``x`` of more than 32 bits (``arith.sat_top``: no compares against constants)."""
    return sat_top(x, 32)


def rq_sat32(t, over, sign):
    """The requantizer's sat32 before its rounding increment: the window ``t``, or the sign's bound when
    the window overflowed (``over``: the exact value has more than RQ_WIN significant bits).  A right
    shift's t is in int32 when not over (x fits in RQ_WIN - 1 + s bits), so its t + 1 leaves int32 only
    as 2^31 (``rq_carry``)."""
    return rq_bound(*rq_sat_split(t, over, sign))


def rq_sat_split(t, over, sign):
    """``rq_sat32`` in two parts (round 27): (t's low 32 bits, whether the word saturates -- over, or t
    outside int32 --, the bound's sign), registered; ``rq_bound`` makes the word of them."""
    return t[:32], over | (t[31] ^ t[32]), Mux(over, sign, t[32])


def rq_bound(y, sat, sign):
    """The word of ``rq_sat_split``'s parts: ``y``, or the sign's bound (-2^31, 2^31 - 1) when ``sat``."""
    return Mux(sat, Cat((~sign).replicate(31), sign), y.as_unsigned()).as_signed()


def rq_carry(t, c, over):
    """The rounding increment ``c`` that ``rq_sat32``'s word takes: none when over (the bound) or when
    t + 1 = 2^31 (sat32 keeps 2^31 - 1)."""
    return c & ~over & (t != (1 << 31) - 1)


def rq_add(y, c, b):
    """y + c + b (33 bits, exact) with the one-bit c as the adder's carry in: (2 y + c + 2 b + 1) >> 1."""
    return ((Cat(c, y).as_signed() + Cat(Const(1, 1), b).as_signed()) >> 1)[:33].as_signed()


#: ``rq_sub_e``'s LUT6_2: two bits' propagates of sh + ~(kv & e), O6 = I0 ^ ~(I4 & I1), O5 = I2 ^ ~(I4 & I3)
#: (sh_k, e_k, sh_k+1, e_k+1, kv).
RQ_SUB2_INIT = lut6_2_init(lambda s0, e0, s1, e1, kv: s0 ^ 1 ^ (kv & e0), lambda s0, e0, s1, e1, kv: s1 ^ 1 ^ (kv & e1))


def rq_sub_e(m, sh, e, kv, primitive: bool = False, name: str = "rq_sub"):
    """The requantizer's row shift sh - (kv ? e : 0) (round 33), a Value of ``sh``'s shape (modulo its width):
    the shift's common part less the row's kv exponent.  ``primitive``: sh + ~(kv & e) + 1 on a CARRY4 chain
    (``carry_chain``), the propagates two bits a LUT6_2 (sh's bits, e's sign-extended, kv), the generates sh's
    bits: half a LUT a bit, where ABC9 made a LUT3 a bit.  Else the plain difference."""
    n = len(sh)
    if not primitive:
        return (sh - Mux(kv, e, 0).as_signed())[:n].as_signed()
    es = e.as_signed()
    eb = [es[min(k, len(e) - 1)] for k in range(n)]
    prop = [Signal(name=f"{name}_p{k}") for k in range(n)]
    for k in range(0, n, 2):
        if k + 1 < n:
            lut6_2(m, RQ_SUB2_INIT, [sh[k], eb[k], sh[k + 1], eb[k + 1], kv], prop[k], prop[k + 1], f"{name}_l{k}")
        else:
            m.d.comb += prop[k].eq(lut6(m, lambda s0, e0, s1, e1, kv, *_: s0 ^ 1 ^ (kv & e0),
                                        [sh[k], eb[k], Const(0, 1), Const(0, 1), kv], f"{name}_p{k}x"))
    total, _ = carry_chain(m, Cat(*prop), sh.as_unsigned(), name, cyinit=1)
    return total.as_signed()


#: ``rq_add_fill``'s LUT6_2: two bits' propagates, O6 = I0 ^ I1 ^ I4, O5 = I2 ^ I3 ^ I4 (y_k, b_k, y_k+1,
#: b_k+1, the bound's fill bit).
RQ_FILL2_INIT = lut6_2_init(lambda y0, b0, y1, b1, f: y0 ^ b0 ^ f, lambda y0, b0, y1, b1, f: y1 ^ b1 ^ f)


def rq_add_fill(m, y, fill_lo, fill_hi, c, b, primitive: bool = False, name: str = "rq_add"):
    """The bias add of the requantizer's word (round 33): ``rq_add`` of the word w = y ^ (fill_hi, fill_lo x 31)
    -- ``y`` zero when the word saturates (its flip-flops' synchronous reset) and the bound's ones its fill
    bits (fill_lo: 2^31 - 1's bits 0 .. 30, fill_hi: -2^31's bit 31), so w = ``rq_bound``'s word.  A 33-bit
    signed Value.  ``primitive``: the chain's propagates two bits a LUT6_2 (bits 0 .. 29: y, b and fill_lo;
    bits 30 and 31 a LUT6 each; the sign extension's propagate is bit 31's), its generates b's bits and, below
    bit 0, c (propagate 0: the carry into bit 0 is c), on a CARRY4 chain (``carry_chain``): ~17 LUT a row where
    the bound's choice (sat, sign and y a bit) made it a LUT4 a bit, 33.  Else the plain sum."""
    w = Cat(y[:31] ^ fill_lo.replicate(31), y[31] ^ fill_hi).as_signed()
    if not primitive:
        return rq_add(w, c, b)
    prop = [Signal(name=f"{name}_p{k}") for k in range(32)]
    for k in range(0, 30, 2):
        lut6_2(m, RQ_FILL2_INIT, [y[k], b[k], y[k + 1], b[k + 1], fill_lo], prop[k], prop[k + 1], f"{name}_l{k}")
    m.d.comb += prop[30].eq(lut6(m, lambda y0, b0, f, *_: y0 ^ b0 ^ f, [y[30], b[30], fill_lo], f"{name}_p30x"))
    m.d.comb += prop[31].eq(lut6(m, lambda y0, b0, f, *_: y0 ^ b0 ^ f, [y[31], b[31], fill_hi], f"{name}_p31x"))
    bu = b.as_unsigned()
    total, _ = carry_chain(m, Cat(Const(0, 1), *prop, prop[31]), Cat(c, bu, bu[31]), name)
    return total[1:34].as_signed()


def rotate_list(items, amount, sign: int = 1, step: int = 1, m=None, name: str = "rot", primitive: bool = False):
    """``items`` (Values of one width, N of them, N a power of 2) rotated by ``amount`` (unsigned):
    out[x] = items[(x + sign step amount) mod N].  Built as radix-4 stages, a 4-way choice by two
    bits of ``amount`` a stage (log4 N stages, shared by all outputs), not one N-way choice an
    output: a rotation by a sum is the rotations by its terms one after another.  Measured on the
    loader word's write rotations (1 024 bits, 16 pieces a key, ``--lut-map fast``): 4 548 -> 2 180
    LUT, 6 -> 4 levels (with the tile reorder's rotation merged in); a read rotation behind LUT RAM
    maps to the same 2 463 LUT either way.  With ``m`` each stage is a signal of its own.
    ``primitive`` (needs ``m``; round 28): each radix-4 stage one LUT6 instance a bit (``mcf.hw.lut.mux4``:
    ABC9 maps an inferred 4:1 choice at ~1.5 LUT a bit); a 2-way stage stays a plain choice."""
    N = len(items)
    out = list(items)
    if N == 1:
        return out
    log2_exact(N, "items")
    if primitive and m is None:
        raise ValueError("rotate_list: primitive stages need the module (m)")
    k = 0
    while k < len(amount) and (step << k) % N:
        w = 1 if k + 1 >= len(amount) or not (step << (k + 1)) % N else 2
        digit = amount[k:k + w]
        if primitive and w == 2:
            out = [mux4(m, digit, [out[(x + sign * step * (d << k)) % N] for d in range(4)], primitive=True,
                        name=f"{name}_s{k}_{x}") for x in range(N)]
            k += w
            continue
        nxt = [Array(out[(x + sign * step * (d << k)) % N] for d in range(1 << w))[digit] for x in range(N)]
        if m is not None:
            sig = Signal(len(Cat(*nxt)), name=f"{name}_s{k}")
            m.d.comb += sig.eq(Cat(*nxt))
            W = len(sig) // N
            nxt = [sig[x * W:(x + 1) * W] for x in range(N)]
        out = nxt
        k += w
    return out


def rotate_pieces(word, amount, piece_bits: int, per_key: int, m=None, primitive: bool = False):
    """``word`` (whole keys of ``per_key`` pieces of ``piece_bits``) with each key's pieces rotated
    up by ``amount``: piece c of a key out = piece (c - amount) mod per_key in (``rotate_list``'s
    stages over all keys at once: a key's piece c is the same choice in every key; ``primitive``:
    its LUT6 stages)."""
    PB, J = piece_bits, per_key
    KB = J * PB
    if len(word) % KB:
        raise ValueError(f"a {len(word)}-bit word does not hold whole {KB}-bit keys")
    keys = len(word) // KB
    # item c = piece c of every key (the keys side by side): one rotation of J items
    items = [Cat(*[word[(k * J + c) * PB:(k * J + c + 1) * PB] for k in range(keys)]) for c in range(J)]
    out = rotate_list(items, amount, sign=-1, m=m, name="rotp", primitive=primitive)
    return Cat(*[out[c][k * PB:(k + 1) * PB] for k in range(keys) for c in range(J)])


class TileReorder(wiring.Component):
    """Key-major tiles -> the matrix unit's weight beats (kv mode, attention scores on the array).

    A tile is ``rows`` (P) keys of ``beats`` (J) pieces each; a piece is ``lanes`` (K) INT4
    elements (K / 2 bytes), piece j of a key = its elements j K .. j K + K - 1.  In: the tile as
    DDR holds it (``spec/kv.py``: key-major), J beats of P pieces, beat i = keys i A .. i A + A - 1
    (A = P / J), piece a J + j of the beat = piece j of key i A + a.  Out: J beats of P pieces,
    beat j = piece j of keys 0 .. P - 1 (the weight beat order of ``spec.isa.BlobLayout``).

    ``words`` = n: both sides move words of a beat / n (a beat's words low end first, one a
    cycle): in, the tile's J n words in order (word w holds keys w E .. w E + E - 1 whole, E =
    P / (n J): a word must hold whole keys); out, beat j's n words (word g = piece j of keys
    g P / n ..).  n = 1 is a beat a cycle.

    Double-buffered (a tile is read while the next is written) in Q = P / n banks of one piece x
    2 J n words (LUT RAM), skewed: piece j of key p lives in bank (p + j E) mod Q at word (buf, j,
    p div Q).  A written word (E keys x J pieces) and a read word (Q keys x piece j) then touch
    each bank once: each side moves a word a cycle, through a J-way rotation of the banks.

    ``prerotated``: the write side's rotation is the feeder's, on its words (``rotate`` by
    ``rot``, the index of the word being written mod J, before the reorder): bank (a, c) then
    takes piece c of key a of the word as it comes (wiring, no multiplexer).

    ``primitive`` (round 28): the rotations' radix-4 stages as LUT6 instances (``rotate_list``)."""

    def __init__(self, rows: int, lanes: int, beats: int, prerotated: bool = False, words: int = 1,
                 primitive: bool = False):
        P, J, n = rows, beats, words
        log2_exact(P, "rows")
        log2_exact(J, "beats")
        log2_exact(n, "words")
        if J > P:
            raise ValueError(f"beats={J} > rows={P}: a tile beat would hold less than one key")
        if P % (n * J):
            raise ValueError(f"words={n}: a word of {P} / {n} pieces would not hold whole keys of {J} pieces")
        self.rows, self.lanes, self.beats, self.words = P, lanes, J, n
        self.prerotated, self.primitive = prerotated, bool(primitive)
        WB = P * lanes * W_BITS // n
        ports = {"i": In(stream.Signature(WB)), "o": Out(stream.Signature(WB))}
        if prerotated:
            ports["rot"] = Out(range(J))
        super().__init__(ports)

    @staticmethod
    def rotate(word, amount, lanes: int, beats: int):
        """``word`` (whole keys of ``beats`` pieces of ``lanes`` nibbles) with each key's pieces
        rotated up by ``amount``: piece c of a key out = piece (c - amount) mod beats in (what the
        write side of a ``prerotated`` reorder expects, ``amount`` its ``rot``)."""
        return rotate_pieces(word, amount, lanes * W_BITS, beats)

    def elaborate(self, platform):
        m = Module()
        P, J, n = self.rows, self.beats, self.words
        Q = P // n                          # pieces (banks) of a word
        E = Q // J                          # keys of an input word
        PB = self.lanes * W_BITS
        jb = max(ceil_log2(J), 1)
        pieces_in = [self.i.payload[x * PB:(x + 1) * PB] for x in range(Q)]
        wsel, rsel = Signal(), Signal()
        wi, rj = Signal(range(J)), Signal(range(J))       # write: word mod J; read: the beat
        # write: word div J; read: the word of the beat (one bit at n = 1, where they stay 0: no zero-width wires)
        wg, rg = Signal(range(max(n, 2))), Signal(range(max(n, 2)))
        full = [Signal(name=f"full{b}") for b in range(2)]
        take = Signal()
        give = Signal()
        # (n > 1: word g of beat 0 leaves once its keys are in, input words (g + 1) J - 1 and before of the
        # tile being written: the first beat of a tile one cycle after the tile's last word, not n)
        early = ((rsel == wsel) & (rj == 0) & (wg > rg)) if n > 1 else 0
        m.d.comb += [self.i.ready.eq(~Array(full)[wsel]), take.eq(self.i.valid & self.i.ready),
                     self.o.valid.eq(Array(full)[rsel] | early), give.eq(self.o.valid & self.o.ready)]

        def addr(j, g, buf):
            return Cat(*([j] if J > 1 else []), *([g] if n > 1 else []), buf)

        # the write rotation (not ``prerotated``): bank (a, c) takes piece (c - wi) mod J of key a
        wword = (self.i.payload if self.prerotated
                 else rotate_pieces(self.i.payload, wi, PB, J, m=m, primitive=self.primitive))
        wpieces = [wword[x * PB:(x + 1) * PB] for x in range(Q)]
        outs = []
        for b in range(Q):
            mem = memory.Memory(shape=PB, depth=2 * J * n, init=[])
            m.submodules[f"bank{b}"] = mem
            wp, rp = mem.write_port(), mem.read_port(domain="comb")
            a, c = b % E, b // E
            j = Signal(range(J), name=f"wj{b}")               # the piece of this bank in the written word
            m.d.comb += j.eq((c - wi)[:jb] if J > 1 else 0)
            m.d.comb += [wp.en.eq(take), wp.addr.eq(addr(j, wg, wsel)),
                         wp.data.eq(wpieces[a * J + c]),
                         rp.addr.eq(addr(rj, rg, rsel))]
            outs.append(rp.data)
        if self.prerotated:
            m.d.comb += self.rot.eq(wi)
        # the read rotation as a multiplexer level of its own (``keep``: the LUT mapping takes it as one J-way
        # choice a bit, not split into the choices behind it, the execute unit's choice of the weight source)
        rot = Signal(Q * PB, attrs={"keep": 1})
        m.d.comb += [rot.eq(Cat(*rotate_list(outs, rj, step=E, m=m, name="rrot", primitive=self.primitive))),
                     self.o.payload.eq(rot)]
        with m.If(take):
            m.d.sync += wi.eq(wi + 1)
            with m.If(wi == J - 1):
                m.d.sync += [wi.eq(0), wg.eq(wg + 1)]
                with m.If(wg == n - 1):
                    m.d.sync += [wg.eq(0), wsel.eq(~wsel)]
        with m.If(give):
            m.d.sync += rg.eq(rg + 1)
            with m.If(rg == n - 1):
                m.d.sync += [rg.eq(0), rj.eq(rj + 1)]
                with m.If(rj == J - 1):
                    m.d.sync += [rj.eq(0), rsel.eq(~rsel)]
        for b in range(2):
            with m.If(take & (wi == J - 1) & (wg == n - 1) & (wsel == b)):
                m.d.sync += full[b].eq(1)
            with m.If(give & (rj == J - 1) & (rg == n - 1) & (rsel == b)):
                m.d.sync += full[b].eq(0)
        return m


class PvReorder(wiring.Component):
    """Key-major V rows -> the matrix unit's pv weight beats (V^T: rows = channels, inputs = keys).

    A key group is ``lanes`` (K) keys of ``head_dim`` (d) INT4 channels, and d / P = C channel tiles
    of ``rows`` (P) channels.  In: the group as DDR holds it (``spec/kv.py`` rows: key-major), C
    beats of A = P K / d keys, nibble a d + ch of beat i = channel ch of key i A + a.  Out: C
    beats, beat c = channel tile c: nibble p K + k = channel c P + p of key k (a nibble
    transpose: the weight beat order of ``spec.isa.BlobLayout`` with rows = channels).

    ``words`` = n: both sides move words of a beat / n (low end first, one a cycle): in, the
    group's C n words in order (word i = keys i E .. i E + E - 1 whole, E = A / n); out, beat c's
    n words (word g = channels c P + g R .. + R - 1 of all K keys, R = P / n: nibble r K + k).
    With B = C n (= d / R = K / E) blocks of E keys x R channels, word i of the input holds
    blocks (i, 0 .. B - 1) and word b of the output blocks (0 .. B - 1, b).  n = 1 is a beat a cycle.

    Double-buffered (a group is read while the next is written) in B banks of one block x 2 B
    words (LUT RAM), skewed: block (i, b) lives in bank (i + b) mod B at word buf B + b.  A written
    word and a read word touch each bank once: each side moves a word a cycle, through a B-way
    rotation of the banks; the transpose inside a block is wiring.

    ``prerotated``: the write side's rotation is the feeder's, on its words (``rotate`` by
    ``rot``, the index of the word being written: each key's B channel pieces (``piece`` = R
    channels) rotated up by it, which rotates the word's blocks): bank b then takes block b of the
    word as it comes (wiring).

    ``skip`` (n > 1): a word given at the start of a beat with ``skip`` high gives the whole beat
    (its n words leave in one cycle, unread: the execute unit's channel tiles outside the instruction's).

    ``alternates`` = N > 0 adds ``alt`` (N words) and ``alt_sel``: ``o.payload`` is ``alt[alt_sel
    - 1]`` when ``alt_sel`` is not 0 (``o.valid`` and ``i`` as ever): the execute unit's choice among
    the weight beats' sources folded into the read rotation's multiplexer (one B + N-way choice a
    bit, not a B-way one and then an N + 1-way one).  The choice is a register: ``o.payload``
    follows a change of ``alt_sel`` one cycle later (hold it a cycle before the beats it picks).

    ``primitive`` (round 28): the rotations' radix-4 stages as LUT6 instances (``rotate_list``)."""

    def __init__(self, rows: int, lanes: int, head_dim: int, alternates: int = 0, prerotated: bool = False,
                 words: int = 1, primitive: bool = False):
        P, K, d, n = rows, lanes, head_dim, words
        log2_exact(P, "rows")
        log2_exact(K, "lanes")
        log2_exact(d, "head_dim")
        log2_exact(n, "words")
        if d % P or (P * K) % d:
            raise ValueError(f"head_dim={d}: must be a multiple of rows={P} and divide rows x lanes = {P * K}")
        if P % n or (P * K // d) % n:
            raise ValueError(f"words={n}: a word must hold whole keys of {d} channels and whole channels of {K} keys")
        self.rows, self.lanes, self.head_dim, self.words = P, K, d, n
        self.tiles = d // P                  # C: channel tiles = beats of a key group
        self.keys = P * K // d               # A: keys of an input beat
        self.piece = P // n                  # R: channels of an output word
        self.blocks = self.tiles * n         # B: words of a key group (either side)
        self.alternates, self.prerotated, self.primitive = alternates, prerotated, bool(primitive)
        WB = P * K * W_BITS // n
        ports = {"i": In(stream.Signature(WB)), "o": Out(stream.Signature(WB))}
        if alternates:
            ports |= {"alt": In(data.ArrayLayout(WB, alternates)), "alt_sel": In(range(alternates + 1))}
        if prerotated:
            ports["rot"] = Out(range(self.blocks))
        if n > 1:
            ports["skip"] = In(1)
        super().__init__(ports)

    @staticmethod
    def rotate(word, amount, rows: int, head_dim: int):
        """``word`` (whole keys of ``head_dim`` nibbles) with each key's pieces of ``rows``
        nibbles (a reorder's ``piece``) rotated up by ``amount`` (what the write side of a
        ``prerotated`` reorder expects, ``amount`` its ``rot``)."""
        return rotate_pieces(word, amount, rows * W_BITS, head_dim // rows)

    def elaborate(self, platform):
        m = Module()
        K, d, B, R, n = self.lanes, self.head_dim, self.blocks, self.piece, self.words
        E = K // B                           # keys of an input word
        BB = E * R * W_BITS                  # bits of a block
        cb = max(ceil_log2(B), 1)

        def nib(value, x):
            return value[x * W_BITS:(x + 1) * W_BITS]

        # block c of an input word: keys a < E, channels c R + r, nibble a R + r
        blocks_in = [Cat(*[nib(self.i.payload, a * d + c * R + r) for a in range(E) for r in range(R)])
                     for c in range(B)]
        wsel, rsel = Signal(), Signal()
        wi, rc = Signal(range(B)), Signal(range(B))
        full = [Signal(name=f"full{b}") for b in range(2)]
        take, give = Signal(), Signal()
        m.d.comb += [self.i.ready.eq(~Array(full)[wsel]), take.eq(self.i.valid & self.i.ready),
                     self.o.valid.eq(Array(full)[rsel]), give.eq(self.o.valid & self.o.ready)]
        # the read side's step: a word, or (skip) a beat; ``last``: the group's last word or beat
        skip = self.skip if n > 1 else 0
        last = Signal()
        m.d.comb += last.eq(Mux(skip, rc == B - n, rc == B - 1))
        # the write rotation (not ``prerotated``): bank b takes block (b - wi) mod B of the word
        wblocks = (blocks_in if self.prerotated
                   else rotate_list(blocks_in, wi, sign=-1, m=m, name="wrot", primitive=self.primitive))
        outs = []
        for b in range(B):
            mem = memory.Memory(shape=BB, depth=2 * B, init=[])
            m.submodules[f"bank{b}"] = mem
            wp, rp = mem.write_port(), mem.read_port(domain="comb")
            c = Signal(range(B), name=f"wc{b}")              # the block of this bank in the written word
            m.d.comb += c.eq((b - wi)[:cb] if B > 1 else 0)
            m.d.comb += [wp.en.eq(take), wp.addr.eq(Cat(c, wsel) if B > 1 else wsel),
                         wp.data.eq(wblocks[b]),
                         rp.addr.eq(Cat(rc, rsel) if B > 1 else rsel)]
            outs.append(rp.data)
        if self.prerotated:
            m.d.comb += self.rot.eq(wi)
        # block i of the read word c is in bank (i + c) mod B; nibble a R + r -> output r K + i E + a
        N = self.alternates
        if N:
            # block i's source: bank (i + rc) mod B, or alternate alt_sel - 1 (index B + alt_sel - 1), as
            # a register decoded the cycle before (from rc's next value): each output bit is then one
            # (B + N)-way choice by a register (B + N = 4: one LUT6), not one by alt_sel and rc
            rc_next = Signal(range(B))
            m.d.comb += rc_next.eq(rc)
            with m.If(give):
                m.d.comb += rc_next.eq(Mux(last, 0, rc + Mux(skip, n, 1)))
            src = [Signal(range(B + N), name=f"src{i}", init=i) for i in range(B)]
            for i in range(B):
                m.d.sync += src[i].eq(Mux(self.alt_sel == 0, (i + rc_next)[:cb] if B > 1 else 0, B - 1 + self.alt_sel))
            m.d.comb += self.o.payload.eq(Cat(*[
                Array([nib(outs[x], (k % E) * R + r) for x in range(B)]
                      + [nib(self.alt[y], r * K + k) for y in range(N)])[src[k // E]]
                for r in range(R) for k in range(K)]))
        else:
            blocks_out = rotate_list(outs, rc, m=m, name="rrot", primitive=self.primitive)
            m.d.comb += self.o.payload.eq(Cat(*[nib(blocks_out[k // E], (k % E) * R + r)
                                                for r in range(R) for k in range(K)]))
        with m.If(take):
            m.d.sync += wi.eq(wi + 1)
            with m.If(wi == B - 1):
                m.d.sync += [wi.eq(0), wsel.eq(~wsel)]
        with m.If(give):
            m.d.sync += rc.eq(rc + Mux(skip, n, 1))
            with m.If(last):
                m.d.sync += [rc.eq(0), rsel.eq(~rsel)]
        for b in range(2):
            with m.If(take & (wi == B - 1) & (wsel == b)):
                m.d.sync += full[b].eq(1)
            with m.If(give & last & (rsel == b)):
                m.d.sync += full[b].eq(0)
        return m


@block("compute_pv_reorder", "V rows (key-major) -> the matrix unit's P.V weight beats, a word a cycle (LUT-RAM banks)",
       variants=({"rows": 8, "lanes": 8, "head_dim": 16, "words": 2, "prerotated": 0},),
       rows=64, lanes=32, head_dim=128, words=8, prerotated=1,
       ranges={"rows": Range(1, 256, pow2=True), "lanes": Range(1, 256, pow2=True),
               "head_dim": Range(1, 1024, pow2=True), "words": Range(1, 64, pow2=True), "prerotated": Range(0, 1)})
def _pv_reorder(rows, lanes, head_dim, words, prerotated):
    return PvReorder(rows, lanes, head_dim, prerotated=bool(prerotated), words=words)


@block("compute_matrix", "INT4 x BFP16 GEMM (MAC array mac_rows x mac_lanes) -> X32",
       variants=({"mac_rows": 8, "mac_lanes": 16}, {"packed": 0}, {"primitive": 1}), mac_rows=4, mac_lanes=8,
       max_tokens=8, max_inputs=256, max_tiles=64, packed=1, primitive=0,
       ranges={"mac_rows": Range(1, 256), "mac_lanes": Range(1, 256, pow2=True),
               "max_tokens": Range(1, 256, pow2=True), "max_inputs": Range(1, 1 << 16),
               "max_tiles": Range(1, 1 << 16), "packed": Range(0, 1), "primitive": Range(0, 1)})
def _matrix(mac_rows, mac_lanes, max_tokens, max_inputs, max_tiles, packed, primitive):
    return MatrixUnit(mac_rows, mac_lanes, max_tokens, max_inputs, max_tiles, packed=bool(packed),
                      primitive=bool(primitive))

