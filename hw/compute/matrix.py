"""Matrix unit: BFP16 activations x INT4 group-scaled weights -> X32 (golden ``fixed.linear``).

A ``mac_rows`` x ``mac_lanes`` MAC array (``rows`` x ``lanes`` below).  Each weight beat carries
``lanes`` consecutive inputs of ``rows`` output rows (INT4, row-major: bits [(p*lanes + k)*4 +: 4]
= q[row p, input k]) and
is held for ``T`` cycles while the activation buffer supplies the same ``lanes`` inputs of
token 0 .. T-1: a weight is fetched once per tile, whatever the number of tokens (prefill
reuses it T times; decode, T = 1, needs a beat per cycle).

Per (row, token) the unit keeps an exact group partial sum and an exact accumulator:
    partial = sum_{i in group} mant[i] q[i]          (int4 x int16 products)
    acc    += S[row, group] * partial                (once per group, one multiplier per row)
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

Pipeline: issue (buffer read) -> products (``DotArray.latency`` stages) -> partial
(read-modify-write per token) -> scale multiply -> accumulate -> requantize -> ``o``.  Only ``o`` can stall it; ``mac`` is high on
every cycle that issues a weight beat x token (a performance-counter strobe).

DSP48E2 packing (``packed``, the default): the products are ``dot_array.DotArray``; the ``rows``
products of one activation element share the 16-bit operand, so two INT4 weights of adjacent
rows share one 27 x 18 multiplier, ``(w_hi 2^22 + w_lo) a = w_hi a 2^22 + w_lo a``; the products
of 4 lanes are summed in a systolic DSP chain before the two fields are split (the low one read
as signed, the high one given its borrow back): rows x lanes / 2 multipliers, ``packed=False``
one per product.  The per-token partial sums and accumulators are LUT RAM (one word of rows x
width bits per token).  See docs/compute.md.
"""
from __future__ import annotations

from amaranth import Array, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from mcf.hw.arith import log2_exact, rshr, sat, write_indexed
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.compute.common import MemWriteSignature
from mcf.hw.compute.dot_array import CHAIN, PACK_SHIFT, DotArray
from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec.fixed import EXP_BITS, MANT_BITS, S_FRAC, SCALE_BITS, W_BITS, X_FRAC

__all__ = ["MatrixUnit", "TileReorder", "cmd_layout", "PACK_SHIFT", "CHAIN"]


def cmd_layout(max_tokens, max_beats, max_tiles):
    return data.StructLayout({
        "tokens": range(1, max_tokens + 1),       # T
        "group_beats": range(1, max_beats + 1),   # G / lanes
        "groups": range(1, max_beats + 1),        # n / G
        "tiles": range(1, max_tiles + 1),         # out / rows
        "w_exp": signed(EXP_BITS),                # E_w of the matrix
        "bias": 1,                                # add a bias beat per tile
        "kv": 1,                                  # attention scores: per-row scale A and exponent E
    })


class MatrixUnit(wiring.Component):
    def __init__(self, mac_rows: int = 4, mac_lanes: int = 8, max_tokens: int = 8, max_inputs: int = 256,
                 max_tiles: int = 64, max_group: int = 128, packed: bool = True, primitive: bool = False,
                 streamed: bool = False):
        rows, lanes = mac_rows, mac_lanes
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
        self.mac_rows, self.mac_lanes, self.max_tokens, self.packed = rows, lanes, max_tokens, bool(packed)
        self.primitive, self.streamed = bool(primitive), bool(streamed)
        self.max_inputs, self.max_tiles = max_inputs, max_tiles
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
            **({"avail": In(range(self.depth + 1))} if streamed else {}),
        })

    @property
    def macs_per_cycle(self):
        return self.mac_rows * self.mac_lanes

    def elaborate(self, platform):
        m = Module()
        P, K, TM = self.mac_rows, self.mac_lanes, self.max_tokens
        tb = max(ceil_log2(TM), 1)

        # --- activation buffer and row exponents -------------------------------------------
        m.submodules.abuf = abuf = memory.Memory(shape=K * MANT_BITS, depth=self.depth * TM, init=[])
        wr = abuf.write_port()
        rd = abuf.read_port()
        m.d.comb += [wr.en.eq(self.act.en), wr.addr.eq(self.act.addr), wr.data.eq(self.act.data)]
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
        m.d.comb += [self.busy.eq(running), self.cmd.ready.eq(~running)]
        with m.If(self.cmd.valid & ~running):
            m.d.sync += [cfg.eq(self.cmd.payload), running.eq(1), t.eq(0), j.eq(0), g.eq(0),
                         beat.eq(0), tile.eq(0)]

        adv = Signal()               # the pipeline moves (only the output register can stall)
        o_valid = Signal()
        m.d.comb += adv.eq(~o_valid | self.o.tready)

        last_t = t == cfg.tokens - 1
        last_j = j == cfg.group_beats - 1
        last_g = g == cfg.groups - 1
        last_tile = tile == cfg.tiles - 1
        need_bias = last_j & last_g & cfg.bias
        fire = Signal()
        m.d.comb += fire.eq(running & adv & self.w.tvalid & (~last_j | self.scale.valid)
                            & (~need_bias | self.bias.valid) & ((beat < self.avail) if self.streamed else 1))
        m.d.comb += [
            self.mac.eq(fire),
            self.w.tready.eq(fire & last_t),
            self.scale.ready.eq(fire & last_t & last_j),
            self.bias.ready.eq(fire & last_t & need_bias),
            rd.en.eq(adv),
            rd.addr.eq(Cat(t, beat) if TM > 1 else beat),
        ]
        with m.If(fire):
            m.d.sync += t.eq(t + 1)
            with m.If(last_t):
                m.d.sync += [t.eq(0), j.eq(j + 1), beat.eq(beat + 1)]
                with m.If(last_j):
                    m.d.sync += [j.eq(0), g.eq(g + 1)]
                    with m.If(last_g):
                        m.d.sync += [g.eq(0), beat.eq(0), tile.eq(tile + 1)]
                        with m.If(last_tile):
                            m.d.sync += running.eq(0)

        # Control carried down the pipeline with the data.
        ctl = data.StructLayout({"v": 1, "t": tb, "first_j": 1, "last_j": 1, "first_g": 1,
                                 "last_g": 1, "last": 1})
        s1 = Signal(ctl)
        w1 = Signal(P * K * W_BITS)
        scale1, bias1 = Signal(P * SCALE_BITS), Signal(P * 32)
        with m.If(adv):
            m.d.sync += [
                s1.v.eq(fire), s1.t.eq(t), s1.first_j.eq(j == 0), s1.last_j.eq(last_j),
                s1.first_g.eq(g == 0), s1.last_g.eq(last_g),
                s1.last.eq(last_t & last_j & last_g & last_tile),
                w1.eq(self.w.tdata), scale1.eq(self.scale.payload),
                bias1.eq(Mux(cfg.bias, self.bias.payload, 0)),
            ]

        def token_file(name, width, index, first, terms, we):
            """Per-token running sums of every row, read-modify-write: ``first ? 0 : file[index]``
            plus the row's term, written back when ``we``.  One word of rows x width bits per
            token in a memory with a combinational read port (LUT RAM, not rows x tokens
            registers and their multiplexers)."""
            mem = memory.Memory(shape=data.ArrayLayout(signed(width), P), depth=max(TM, 2), init=[])
            m.submodules[f"{name}_file"] = mem
            rp, wp = mem.read_port(domain="comb"), mem.write_port()
            m.d.comb += [rp.addr.eq(index), wp.addr.eq(index), wp.en.eq(we)]
            totals = []
            for p in range(P):
                total = Signal(signed(width), name=f"{name}_sum{p}")
                m.d.comb += [total.eq(Mux(first, 0, rp.data[p]) + terms[p]), wp.data[p].eq(total)]
                totals.append(total)
            return totals

        # --- stage 2: rows x lanes products and their per-row sums (hw/compute/dot_array.py) ---------
        # The dot products appear ``latency`` enabled cycles after stage 1; the control, scale
        # and bias go down the same number of (reset-less, shift-register friendly) stages.
        m.submodules.dot = dot = DotArray(P, K, packed=self.packed, primitive=self.primitive)
        m.d.comb += [dot.en.eq(adv), dot.w.eq(w1), dot.a.eq(rd.data)]
        dots = [dot.dots[p] for p in range(P)]
        s2, scale2, bias2 = s1, scale1, bias1
        for i in range(dot.latency):
            ns = Signal(ctl, name=f"s2_{i}")
            nscale = Signal.like(scale1, name=f"scale2_{i}", reset_less=True)
            nbias = Signal.like(bias1, name=f"bias2_{i}", reset_less=True)
            with m.If(adv):
                m.d.sync += [ns.eq(s2), nscale.eq(scale2), nbias.eq(bias2)]
            s2, scale2, bias2 = ns, nscale, nbias

        # --- stage 3: group partial sums (read-modify-write per token) ----------------------
        s3 = Signal(ctl)
        scale3, bias3 = Signal.like(scale1), Signal.like(bias1)
        ps3 = [Signal(signed(self.partial_width), name=f"ps{p}") for p in range(P)]
        for p, ps in enumerate(token_file("part", self.partial_width, s2.t, s2.first_j, dots, adv & s2.v)):
            with m.If(adv):
                m.d.sync += ps3[p].eq(ps)
        with m.If(adv):
            m.d.sync += [s3.eq(s2), s3.v.eq(s2.v & s2.last_j), scale3.eq(scale2), bias3.eq(bias2)]

        # --- stage 4: group scale (one uint16 x partial multiply per row and group) ----------
        s4 = Signal(ctl)
        bias4 = Signal.like(bias1)
        prod4 = [Signal(signed(self.partial_width + SCALE_BITS + 1), name=f"prod{p}") for p in range(P)]
        # kv: a scale word is A (uint8, low byte) | E (int8, high byte); the multiply takes A
        kv_a = SCALE_BITS // 2
        for p in range(P):
            word = scale3[p * SCALE_BITS:(p + 1) * SCALE_BITS]
            with m.If(adv):
                m.d.sync += prod4[p].eq(ps3[p] * Mux(cfg.kv, word[:kv_a], word))
        # kv: the row exponents E go down with the data (one group: the tile's scale beat)
        e4, e5 = Signal(P * kv_a), Signal(P * kv_a)
        kv_e = Cat(*[scale3[p * SCALE_BITS + kv_a:(p + 1) * SCALE_BITS] for p in range(P)])
        with m.If(adv):
            m.d.sync += [s4.eq(s3), bias4.eq(bias3), e4.eq(kv_e)]

        # --- stage 5: accumulate over groups --------------------------------------------------
        s5 = Signal(ctl)
        bias5 = Signal.like(bias1)
        acc5 = [Signal(signed(self.acc_width), name=f"accout{p}") for p in range(P)]
        for p, total in enumerate(token_file("acc", self.acc_width, s4.t, s4.first_g, prod4, adv & s4.v)):
            with m.If(adv):
                m.d.sync += acc5[p].eq(total)
        with m.If(adv):
            m.d.sync += [s5.eq(s4), s5.v.eq(s4.v & s4.last_g), bias5.eq(bias4), e5.eq(e4)]

        # --- stage 6: requantize to X32, add the bias, output register -----------------------
        # shift E_w - e - X_FRAC; kv (golden ``scores``): per row -(e + E_row + S_FRAC)
        sh = Signal(signed(EXP_BITS + 2))
        m.d.comb += sh.eq(cfg.w_exp - exps[s5.t] - X_FRAC)
        words = []
        for p in range(P):
            sh_kv = Signal(signed(EXP_BITS + 2), name=f"sh_kv{p}")
            m.d.comb += sh_kv.eq(-exps[s5.t] - e5[p * kv_a:(p + 1) * kv_a].as_signed() - S_FRAC)
            y = sat(m, rshr(m, acc5[p], Mux(cfg.kv, sh_kv, sh), max_left=33), 32)
            yb = sat(m, y + bias5[p * 32:(p + 1) * 32].as_signed(), 32)
            words.append(yb)
        o_data, o_last = Signal(P * 32), Signal()
        with m.If(adv):
            m.d.sync += [o_valid.eq(s5.v), o_data.eq(Cat(*words)), o_last.eq(s5.last)]
        m.d.comb += [self.o.tvalid.eq(o_valid), self.o.tdata.eq(o_data), self.o.tlast.eq(o_last),
                     self.o.tkeep.eq(-1)]
        return m


class TileReorder(wiring.Component):
    """Key-major tiles -> the matrix unit's weight beats (kv mode, attention scores on the array).

    A tile is ``rows`` (P) keys of ``beats`` (J) pieces each; a piece is ``lanes`` (K) INT4
    elements (K / 2 bytes), piece j of a key = its elements j K .. j K + K - 1.  In: the tile as
    DDR holds it (``spec/kv.py``: key-major), J beats of P pieces, beat i = keys i A .. i A + A - 1
    (A = P / J), piece a J + j of the beat = piece j of key i A + a.  Out: J beats of P pieces,
    beat j = piece j of keys 0 .. P - 1 (the weight beat order of ``spec.isa.BlobLayout``).

    Double-buffered (a tile is read while the next is written) in P banks of one piece x 2 J
    words (LUT RAM), skewed: piece j of key p lives in bank (p + j A) mod P at word buf J + j.  A
    written beat (A keys x J pieces) and a read beat (P keys x piece j) then touch each bank once:
    each side moves a beat a cycle, through a J-way rotation of the banks."""

    def __init__(self, rows: int, lanes: int, beats: int):
        P, J = rows, beats
        log2_exact(P, "rows")
        log2_exact(J, "beats")
        if J > P:
            raise ValueError(f"beats={J} > rows={P}: a tile beat would hold less than one key")
        self.rows, self.lanes, self.beats = P, lanes, J
        super().__init__({
            "i": In(stream.Signature(P * lanes * W_BITS)),
            "o": Out(stream.Signature(P * lanes * W_BITS)),
        })

    def elaborate(self, platform):
        m = Module()
        P, J = self.rows, self.beats
        A = P // J
        PB = self.lanes * W_BITS
        jb = max(ceil_log2(J), 1)
        pieces_in = [self.i.payload[x * PB:(x + 1) * PB] for x in range(P)]
        wsel, rsel = Signal(), Signal()
        wi, rj = Signal(range(J)), Signal(range(J))
        full = [Signal(name=f"full{b}") for b in range(2)]
        take = Signal()
        give = Signal()
        m.d.comb += [self.i.ready.eq(~Array(full)[wsel]), take.eq(self.i.valid & self.i.ready),
                     self.o.valid.eq(Array(full)[rsel]), give.eq(self.o.valid & self.o.ready)]
        outs = []
        for b in range(P):
            mem = memory.Memory(shape=PB, depth=2 * J, init=[])
            m.submodules[f"bank{b}"] = mem
            wp, rp = mem.write_port(), mem.read_port(domain="comb")
            a, c = b % A, b // A
            j = Signal(range(J), name=f"wj{b}")               # the piece of this bank in the written beat
            m.d.comb += j.eq((c - wi)[:jb] if J > 1 else 0)
            m.d.comb += [wp.en.eq(take), wp.addr.eq(Cat(j, wsel) if J > 1 else wsel),
                         wp.data.eq(Array(pieces_in[a * J + x] for x in range(J))[j]),
                         rp.addr.eq(Cat(rj, rsel) if J > 1 else rsel)]
            outs.append(rp.data)
        m.d.comb += self.o.payload.eq(Cat(*[Array(outs[(p + x * A) % P] for x in range(J))[rj] for p in range(P)]))
        with m.If(take):
            m.d.sync += wi.eq(wi + 1)
            with m.If(wi == J - 1):
                m.d.sync += [wi.eq(0), wsel.eq(~wsel)]
        with m.If(give):
            m.d.sync += rj.eq(rj + 1)
            with m.If(rj == J - 1):
                m.d.sync += [rj.eq(0), rsel.eq(~rsel)]
        for b in range(2):
            with m.If(take & (wi == J - 1) & (wsel == b)):
                m.d.sync += full[b].eq(1)
            with m.If(give & (rj == J - 1) & (rsel == b)):
                m.d.sync += full[b].eq(0)
        return m


@block("compute_matrix", "INT4 x BFP16 GEMM (MAC array mac_rows x mac_lanes) -> X32",
       variants=({"mac_rows": 8, "mac_lanes": 16}, {"packed": 0}, {"primitive": 1}), mac_rows=4, mac_lanes=8,
       max_tokens=8, max_inputs=256, max_tiles=64, packed=1, primitive=0,
       ranges={"mac_rows": Range(1, 256), "mac_lanes": Range(1, 256, pow2=True),
               "max_tokens": Range(1, 256, pow2=True), "max_inputs": Range(1, 1 << 16),
               "max_tiles": Range(1, 1 << 16), "packed": Range(0, 1), "primitive": Range(0, 1)})
def _matrix(mac_rows, mac_lanes, max_tokens, max_inputs, max_tiles, packed, primitive):
    return MatrixUnit(mac_rows, mac_lanes, max_tokens, max_inputs, max_tiles, packed=bool(packed),
                      primitive=bool(primitive))
