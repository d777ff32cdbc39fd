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
exponents).  ``o`` carries one beat of ``rows`` X32 words per (tile, token), TLAST on the last.

Pipeline: issue (buffer read) -> products -> partial (read-modify-write per token) -> scale
multiply -> accumulate -> requantize -> ``o``.  Only ``o`` can stall it; ``mac`` is high on
every cycle that issues a weight beat x token (a performance-counter strobe).

DSP48E2 packing (``packed``, the default): the ``rows`` products of one activation element
share the 16-bit operand, so two INT4 weights of adjacent rows fit one 27x18 multiplier:
(w_hi * 2^22 + w_lo) * a = w_hi a 2^22 + w_lo a with |w_lo a| <= 2^18.  Sums of 4 lanes
stay within the low 22 bits; the low field is read as signed and the high field gets the
borrow back.  rows x lanes / 2 multipliers; ``packed=False`` writes one per product.
See docs/compute.md.
"""
from __future__ import annotations

from amaranth import Array, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from mcf.hw.arith import log2_exact, rshr, sat, write_indexed
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.compute.common import MemWriteSignature
from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec.fixed import EXP_BITS, MANT_BITS, SCALE_BITS, W_BITS, X_FRAC

PACK_SHIFT = 22     # packed products: the high row's weight sits 22 bits up
CHAIN = 4           # lanes summed before the two fields are split


def cmd_layout(max_tokens, max_beats, max_tiles):
    return data.StructLayout({
        "tokens": range(1, max_tokens + 1),       # T
        "group_beats": range(1, max_beats + 1),   # G / lanes
        "groups": range(1, max_beats + 1),        # n / G
        "tiles": range(1, max_tiles + 1),         # out / rows
        "w_exp": signed(EXP_BITS),                # E_w of the matrix
        "bias": 1,                                # add a bias beat per tile
    })


class MatrixUnit(wiring.Component):
    def __init__(self, mac_rows: int = 4, mac_lanes: int = 8, max_tokens: int = 8, max_inputs: int = 256,
                 max_tiles: int = 64, max_group: int = 128, packed: bool = True):
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
                            & (~need_bias | self.bias.valid))
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

        # --- stage 2: rows x lanes products and their per-row sums --------------------------
        s2 = Signal(ctl)
        scale2, bias2 = Signal.like(scale1), Signal.like(bias1)
        dots = [Signal(signed(self.dot_width), name=f"dot{p}") for p in range(P)]

        def wq(p, k):
            return w1[(p * K + k) * W_BITS:(p * K + k + 1) * W_BITS].as_signed()

        def act(k):
            return rd.data[k * MANT_BITS:(k + 1) * MANT_BITS].as_signed()

        def tree(terms):
            total = terms[0]
            for term in terms[1:]:
                total = total + term
            return total

        if self.packed:
            # Two rows per multiplier: (w_hi 2^22 + w_lo) * a, 27 x 16 bits (one DSP48E2);
            # chains of CHAIN lanes keep |sum w_lo a| <= 4 * 2^18 inside the low 22 bits.
            for p in range(0, P, 2):
                lo_sum, hi_sum = [], []
                for c0 in range(0, K, CHAIN):
                    prods = []
                    for k in range(c0, min(c0 + CHAIN, K)):
                        w = Signal(signed(27), name=f"wpair{p}_{k}")
                        m.d.comb += w.eq(wq(p + 1, k) * (1 << PACK_SHIFT) + wq(p, k))
                        prods.append(w * act(k))
                    chain = Signal(signed(48), name=f"chain{p}_{c0}")
                    m.d.comb += chain.eq(tree(prods))
                    lo = chain[:PACK_SHIFT].as_signed()
                    hi = (chain >> PACK_SHIFT) + chain[PACK_SHIFT - 1]   # borrow from a negative lo
                    lo_sum.append(lo)
                    hi_sum.append(hi)
                with m.If(adv):
                    m.d.sync += [dots[p].eq(tree(lo_sum)), dots[p + 1].eq(tree(hi_sum))]
        else:
            for p in range(P):
                with m.If(adv):
                    m.d.sync += dots[p].eq(tree([wq(p, k) * act(k) for k in range(K)]))
        with m.If(adv):
            m.d.sync += [s2.eq(s1), scale2.eq(scale1), bias2.eq(bias1)]

        # --- stage 3: group partial sums (read-modify-write per token) ----------------------
        s3 = Signal(ctl)
        scale3, bias3 = Signal.like(scale1), Signal.like(bias1)
        ps3 = [Signal(signed(self.partial_width), name=f"ps{p}") for p in range(P)]
        for p in range(P):
            regs = [Signal(signed(self.partial_width), name=f"part{p}_{i}") for i in range(TM)]
            ps = Signal(signed(self.partial_width), name=f"psum{p}")
            m.d.comb += ps.eq(Mux(s2.first_j, 0, Array(regs)[s2.t]) + dots[p])
            with m.If(adv):
                m.d.sync += ps3[p].eq(ps)
            write_indexed(m, regs, s2.t, ps, adv & s2.v)
        with m.If(adv):
            m.d.sync += [s3.eq(s2), s3.v.eq(s2.v & s2.last_j), scale3.eq(scale2), bias3.eq(bias2)]

        # --- stage 4: group scale (one uint16 x partial multiply per row and group) ----------
        s4 = Signal(ctl)
        bias4 = Signal.like(bias1)
        prod4 = [Signal(signed(self.partial_width + SCALE_BITS + 1), name=f"prod{p}") for p in range(P)]
        for p in range(P):
            with m.If(adv):
                m.d.sync += prod4[p].eq(ps3[p] * scale3[p * SCALE_BITS:(p + 1) * SCALE_BITS])
        with m.If(adv):
            m.d.sync += [s4.eq(s3), bias4.eq(bias3)]

        # --- stage 5: accumulate over groups --------------------------------------------------
        s5 = Signal(ctl)
        bias5 = Signal.like(bias1)
        acc5 = [Signal(signed(self.acc_width), name=f"accout{p}") for p in range(P)]
        for p in range(P):
            regs = [Signal(signed(self.acc_width), name=f"acc{p}_{i}") for i in range(TM)]
            total = Signal(signed(self.acc_width), name=f"atot{p}")
            m.d.comb += total.eq(Mux(s4.first_g, 0, Array(regs)[s4.t]) + prod4[p])
            with m.If(adv):
                m.d.sync += acc5[p].eq(total)
            write_indexed(m, regs, s4.t, total, adv & s4.v)
        with m.If(adv):
            m.d.sync += [s5.eq(s4), s5.v.eq(s4.v & s4.last_g), bias5.eq(bias4)]

        # --- stage 6: requantize to X32, add the bias, output register -----------------------
        sh = Signal(signed(EXP_BITS + 2))
        m.d.comb += sh.eq(cfg.w_exp - exps[s5.t] - X_FRAC)
        words = []
        for p in range(P):
            y = sat(m, rshr(m, acc5[p], sh, max_left=33), 32)
            yb = sat(m, y + bias5[p * 32:(p + 1) * 32].as_signed(), 32)
            words.append(yb)
        o_data, o_last = Signal(P * 32), Signal()
        with m.If(adv):
            m.d.sync += [o_valid.eq(s5.v), o_data.eq(Cat(*words)), o_last.eq(s5.last)]
        m.d.comb += [self.o.tvalid.eq(o_valid), self.o.tdata.eq(o_data), self.o.tlast.eq(o_last),
                     self.o.tkeep.eq(-1)]
        return m


@block("compute_matrix", "INT4 x BFP16 GEMM (MAC array mac_rows x mac_lanes) -> X32",
       variants=({"mac_rows": 8, "mac_lanes": 16}, {"packed": 0}), mac_rows=4, mac_lanes=8, max_tokens=8,
       max_inputs=256, max_tiles=64, packed=1,
       ranges={"mac_rows": Range(1, 256), "mac_lanes": Range(1, 256, pow2=True),
               "max_tokens": Range(1, 256, pow2=True), "max_inputs": Range(1, 1 << 16),
               "max_tiles": Range(1, 1 << 16), "packed": Range(0, 1)})
def _matrix(mac_rows, mac_lanes, max_tokens, max_inputs, max_tiles, packed):
    return MatrixUnit(mac_rows, mac_lanes, max_tokens, max_inputs, max_tiles, packed=bool(packed))
