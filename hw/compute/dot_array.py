"""The matrix unit's products: ``rows`` dot products of ``lanes`` INT4 weights x 16-bit activations
per cycle, laid out for DSP48E2 slices (two INT4 x 16-bit products per slice when ``packed``).

    dots[p] = sum_k q[p, k] * a[k]         (exact, MANT_BITS + W_BITS + log2(lanes) bits)

``w`` carries q[p, k] at bits [(p*lanes + k)*4 +: 4] (the matrix unit's weight beat), ``a`` the
activation mantissas a[k] at bits [k*16 +: 16].  ``en`` is the clock enable of every register
(the matrix pipeline's ``adv``); ``dots`` appear ``latency`` enabled cycles after their inputs.

Packing (docs/compute.md, "DSP48E2 packing"): rows 2i and 2i+1 share one 27 x 18 multiplier,

    W = q[2i+1, k] * 2^22 + q[2i, k]        (27-bit signed: -2^25 - 8 .. 2^25 - 2^22 + 7)
    W * a[k] = q[2i+1, k] a[k] 2^22 + q[2i, k] a[k],   |q[2i, k] a[k]| <= 2^18

and the products of ``CHAIN`` = 4 consecutive lanes are summed in a systolic chain (the form Yosys
maps onto DSP48E2 slices with A/B and P registers and the P -> PCIN cascade): lane c of a chain
gets its operands c cycles late, ``P_c = W_c a_c + P_{c-1}``.  The low field of the chain's sum
stays within +-2^20, inside a signed 22-bit field, so

    lo = P[21:0] (signed),   hi = (P >> 22) + P[21]   (the borrow a negative low field took)

are the two rows' exact partial dot products; the chains of a row are then summed in LUTs.
``packed=False`` builds the same pipeline with one 4 x 16-bit product per slice.

``primitive=True`` instantiates each slice as a ``DSP48E2`` (the chain on the dedicated
PCOUT -> PCIN cascade): Yosys 0.70's ``xilinx_dsp`` packs the post-adder and the P cascade only
for DSP48E1 (7-series), so on ``-family xcup`` the inferred form leaves every chain adder and P
register in the fabric.  The instances have the inferred form's timing exactly (A2/B2 register,
no M register, P register, all on ``en``); simulations read the model ``dsp48e2.v`` (``MODEL``,
appended by ``mcf.hw.primitives.with_models``; ``mcf synth`` drops it again), and the tests run the packed array and
the matrix unit on it against the exact sums and the golden model.  Two things the fabric would
do per slice the instances do inside it:

* the split's borrow: the first slice of a chain adds ``ROUND`` = 2^21 (the W multiplexer's RND
  constant), so its P' = P + 2^21 = hi 2^22 + (lo + 2^21) with lo + 2^21 in [0, 2^22):
  hi = P' >> 22 and lo = P'[21:0] with bit 21 inverted (read as signed) -- wiring, no adder;
* ``w_early`` (the weights come one enabled cycle before their activations): the packing
  hi 2^22 + lo is the slice's pre-adder (D = lo, A = hi 2^22, both sign-extended: wiring; the AD
  register is the weights' extra cycle), not a 5-bit adder per slice in the fabric.  Without
  instances (``primitive=False``) ``w_early`` is one more register on the weights.

**Joined chains** (``joined``, on instances: the matrix unit's array at Qwen, 32 lanes): the chains
go in pairs, the first one's P into the second one's last slice through its C port (W = C, no C
register), the second chain's lanes one cycle later still (its skew 1 .. CHAIN), so one field sum
covers 2 ``CHAIN`` = 8 lanes and the fabric's tree after the array adds half as many terms (a row
of 32 lanes: 3 adders, not 7), for one more cycle of latency.  An 8-lane low sum lies in
[-2^21 + 64, 2^21] (2^21 only when every q = -8 and every a = -32768): one past a signed 22-bit
field, so the pair's first slice adds ``ROUND_JOINED`` = 2^21 - 1 instead of 2^21, which puts
lo + 2^21 - 1 in [63, 2^22): the split stays wiring, the high field (up to 2^21, ``JOINED_FIELD``
= 23 bits) exact.  The row's n low fields are then each one short; the tree's n - 1 adders take
one each as their carry in, and the last one is the consumer's: a low row's (even row's) ``dots``
are q @ a - ``lo_carry`` (the matrix unit's partial-sum adders add it as their carry in).

``w_hold`` (the matrix unit's: a weight beat serves several consecutive items, tokens): ``w`` is
read only on the enabled cycles ``w_load`` is high, and the array holds that beat for the items
after it.  The first register of each lane's weight path is clock-enabled by the load (``en &
w_load``): the skew's first register for lanes 1 .. chain - 1, the multiplier operand itself for
lane 0 of a chain (the slices' A2 / D: CEA2 / CED), so the lanes keep the beat as the state they
have anyway; the registers after it stay on ``en`` (a held value delayed is the same value held,
the same number of enabled cycles later).  No register of the whole beat, no multiplexer in
front of the array: ``w`` may change as soon as it is loaded.
"""
from __future__ import annotations

from pathlib import Path

from amaranth import Cat, ClockSignal, Const, Instance, Module, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from mcf.hw.arith import add_tree
from mcf.hw.registry import block
from mcf.spec.fixed import MANT_BITS, W_BITS
from mcf.spec.params import Range

#: The high row's weight sits PACK_SHIFT bits up in the packed multiplier operand.
PACK_SHIFT = 22
#: Lanes summed in one DSP cascade before the packed fields are split (4 x 2^18 < 2^21).
CHAIN = 4
#: Widths of the DSP48E2 multiplier inputs and of its P register.
DSP_A_BITS, DSP_B_BITS, DSP_P_BITS = 27, 18, 48
#: What the first slice of a chain adds (``primitive``): the low field's offset to unsigned.
ROUND = 1 << (PACK_SHIFT - 1)
#: Signed bits that hold one chain's sum of a row (|q a| <= 2^18, CHAIN of them: <= 2^20).
FIELD = 22
#: A joined pair's high field (its sum reaches 2 CHAIN 2^18 = 2^21: one bit more than FIELD).
JOINED_FIELD = FIELD + 1
#: What a joined pair's first slice adds: the low field's offset to unsigned, one short of ROUND
#: (the pair's low sum lies in [-2^21 + 64, 2^21]: plus 2^21 - 1 it is in [63, 2^22)).
ROUND_JOINED = ROUND - 1


#: The DSP48E2 simulation model (hw/compute/dsp48e2.v) and the line from which ``mcf synth``
#: drops it from a design's Verilog (``mcf.hw.primitives``).
MODEL = Path(__file__).with_name("dsp48e2.v")
MODEL_MARK = "// MCF simulation model of the AMD DSP48E2"


def pack_pair(w_lo: int, w_hi: int) -> int:
    """The packed multiplier operand of two INT4 weights (what the RTL forms), as an integer."""
    return w_hi * (1 << PACK_SHIFT) + w_lo


def split_pair(p: int) -> tuple[int, int]:
    """The two exact sums inside a chain's P (an integer): (low row, high row)."""
    mask = (1 << PACK_SHIFT) - 1
    lo = p & mask
    if lo >> (PACK_SHIFT - 1):
        lo -= 1 << PACK_SHIFT
    return lo, (p - lo) >> PACK_SHIFT


class DotArray(wiring.Component):
    """``rows`` x ``lanes`` INT4 x 16-bit products summed per row; see the module docstring."""

    def __init__(self, rows: int, lanes: int, packed: bool = True, primitive: bool = False,
                 w_early: bool = False, w_hold: bool = False, joined: bool = False, split: bool = False):
        if rows < 1 or lanes < 1:
            raise ValueError(f"rows={rows}, lanes={lanes}: must be >= 1")
        if packed and rows % 2:
            raise ValueError(f"mac_rows={rows}: packed products need an even number of rows")
        if primitive and not packed:
            raise ValueError("primitive=True: DSP48E2 instances are built for packed products only")
        self.rows, self.lanes, self.packed, self.primitive = rows, lanes, bool(packed), bool(primitive)
        #: the weights ``w`` come one enabled cycle before their activations ``a``
        self.w_early = bool(w_early)
        #: ``w`` is read when ``w_load`` (and ``en``) and held for the items after it
        self.w_hold = bool(w_hold)
        self.chain = min(CHAIN, lanes)
        if lanes % self.chain:
            raise ValueError(f"mac_lanes={lanes}: must be a multiple of {self.chain} (the DSP chain)")
        #: chains in pairs, the first one's P into the second one's last slice (its C port): one
        #: field sum of 2 ``CHAIN`` lanes (``JOINED_FIELD`` wide), half the fabric's adders
        self.joined = bool(joined)
        if self.joined and not (self.primitive and lanes % (2 * CHAIN) == 0):
            raise ValueError(f"joined chains need DSP48E2 instances (primitive) and lanes={lanes} a multiple "
                             f"of {2 * CHAIN}")
        #: lanes summed inside the DSPs for one field (a chain, or a joined pair of chains)
        self.span = self.chain * (2 if self.joined else 1)
        #: field sums per row (the terms of the fabric's adder tree)
        self.chains = -(-lanes // self.span)
        #: (round 33) a row's last field sum leaves beside the others' sum, on ``dots_b``: the consumer adds
        #: the two (the matrix unit: its accumulator slice's pre-adder, AD = A + D), not a fabric adder here
        self.split = bool(split)
        if self.split and not (self.primitive and self.chains >= 2):
            raise ValueError(f"split: needs DSP48E2 instances (primitive) and two field sums a row or more "
                             f"(lanes={lanes})")
        #: what the low rows' (even rows') dots lack when ``joined``: 1, their consumer's carry in
        #: (the module docstring, "Joined chains"), 2 with ``split`` (``dots + dots_b``: the tree's carries
        #: in are one adder's fewer); 0 otherwise.  The high rows' are exact.
        self.lo_carry = (2 if self.split else 1) if self.joined else 0
        self.dot_width = MANT_BITS + W_BITS + ceil_log2(lanes)
        #: enabled cycles from ``a`` (and ``w``, or one more from ``w`` when ``w_early``) to
        #: ``dots``: the last lane's skew (chain - 1, one more for a joined pair's second chain),
        #: A/B, its P register, the sum over chains.
        self.latency = self.chain + 2 + self.joined
        super().__init__({
            "en": In(1),
            "w": In(rows * lanes * W_BITS),
            **({"w_load": In(1)} if self.w_hold else {}),
            "a": In(lanes * MANT_BITS),
            "dots": Out(data.ArrayLayout(signed(self.dot_width), rows)),
            # (``split``: a row's dot is dots + dots_b)
            **({"dots_b": Out(data.ArrayLayout(signed(self.dot_width), rows))} if self.split else {}),
        })

    @property
    def multipliers(self) -> int:
        """DSP48E2 slices of the products."""
        return (self.rows // 2 if self.packed else self.rows) * self.lanes

    def elaborate(self, platform):
        m = Module()
        P, K, C = self.rows, self.lanes, self.chain
        en = self.en

        def delayed(value, n, name, first=None):
            """``value`` after ``n`` enabled registers (reset-less: shift-register friendly);
            ``first``: the first one's enable instead of ``en`` (the weights' load)."""
            for i in range(n):
                r = Signal.like(value, name=f"{name}_d{i}", reset_less=True)
                with m.If(en if i or first is None else first):
                    m.d.sync += r.eq(value)
                value = r
            return value

        # the enable of a lane's first weight register (w_hold: only when a beat is loaded)
        load = en & self.w_load if self.w_hold else en

        def q(p, k):
            return self.w[(p * K + k) * W_BITS:(p * K + k + 1) * W_BITS]

        # Activations: lane k (chain position c = k % C) c cycles late, then the B register
        # (shared by every multiplier of the lane).
        acts, acts_in = [], []
        J = self.joined
        for k in range(K):
            # (joined: the second chain of a pair one cycle later still, behind the first's P)
            a_in = delayed(self.a[k * MANT_BITS:(k + 1) * MANT_BITS], k % C + (J and (k // C) % 2), f"a{k}")
            acts_in.append(a_in.as_signed())
            if not self.primitive:
                acts.append(delayed(a_in, 1, f"b{k}").as_signed())

        if self.packed:
            columns = [(p, (p, p + 1)) for p in range(0, P, 2)]     # (name, rows sharing a slice)
        else:
            columns = [(p, (p,)) for p in range(P)]

        # (``primitive``: the low fields summed unsigned when the chains are a power of two)
        uoffset = self.packed and self.primitive and not self.chains & (self.chains - 1)
        for col, rows in columns:
            fields = [[] for _ in rows]          # per row: one exact partial sum per chain
            for c0 in range(0, K, C):
                second = J and (c0 // C) % 2     # the second chain of a joined pair
                if not second:
                    prev = None
                joins = prev if second else None  # the first chain's P, into this one's last slice
                pcout = None
                for k in range(c0, min(c0 + C, K)):
                    c = k - c0 + second
                    early = self.w_early and not self.primitive     # (the slice's AD register)
                    raw = delayed(Cat(*[q(r, k) for r in rows]), c + early, f"w{col}_{k}", first=load)
                    lo = raw[:W_BITS].as_signed()
                    # A register: the multiplier operand (27-bit packed pair, or one weight).
                    wa = Signal(signed(DSP_A_BITS if self.packed else W_BITS), name=f"wa{col}_{k}",
                                reset_less=True)
                    if self.packed:
                        hi = raw[W_BITS:].as_signed()
                        value = hi * (1 << PACK_SHIFT) + lo
                    else:
                        value = lo
                    if self.primitive:
                        # Fabric: the skew only; the slice holds A2 (the packed operand) or A2, D
                        # and AD (the pre-adder packs it: w_early), B2, P.
                        last = k == min(c0 + C, K) - 1
                        prev, pcout = self._slice(m, f"dsp{col}_{k}", value, acts_in[k], pcout,
                                                  pre=(hi * (1 << PACK_SHIFT), lo) if self.w_early else None,
                                                  ce_a=load if c == 0 else en,
                                                  rnd=(None if second else ROUND_JOINED if J else ROUND)
                                                  if k == c0 else None,
                                                  c=joins if second and last else None)
                        continue
                    with m.If(load if c + early == 0 else en):
                        m.d.sync += wa.eq(value)
                    # The chain's P register: the product plus the previous lane's P (the
                    # DSP's post-adder on PCIN; no M register, the form Yosys cascades).
                    # (Every width the P register's: the mapper packs a multiply and an add of
                    # the same width into one slice.)
                    pr = Signal(signed(DSP_P_BITS), name=f"p{col}_{k}", reset_less=True)
                    product = Signal(signed(DSP_P_BITS), name=f"prod{col}_{k}")
                    m.d.comb += product.eq(wa * acts[k])
                    with m.If(en):
                        m.d.sync += pr.eq(product if prev is None else product + prev)
                    prev = pr
                if J and not second:
                    continue                     # the pair's sum leaves its second chain
                # Each chain's sum of a row fits FIELD bits signed (|sum| <= CHAIN 2^18 = 2^20): the
                # fields are read that wide, not as the P register's 48 bits (a joined pair's high
                # field JOINED_FIELD: its sum reaches 2 CHAIN 2^18 = 2^21).
                hi_top = PACK_SHIFT + (JOINED_FIELD if J else FIELD)
                if self.packed and self.primitive:     # P' = P + ROUND: wiring (module docstring)
                    # lo = P'[21:0] - 2^21: unsigned here, the 2^21s taken off the row's total (uoffset)
                    fields[0].append(prev[:PACK_SHIFT] if uoffset else
                                     Cat(prev[:PACK_SHIFT - 1], ~prev[PACK_SHIFT - 1]).as_signed())
                    fields[1].append(prev[PACK_SHIFT:hi_top].as_signed())
                elif self.packed:
                    lo_f = prev[:PACK_SHIFT].as_signed()
                    hi_f = prev[PACK_SHIFT:hi_top].as_signed() + prev[PACK_SHIFT - 1]
                    fields[0].append(lo_f)
                    fields[1].append(hi_f)
                else:
                    fields[0].append(prev[:FIELD].as_signed())
            # The chains of a row summed by a tree of adders (``add_tree``: each on a carry chain; on
            # instances (round 30) three terms an adder, ``mcf.hw.lut.add3``: a row of 4 chains two adders
            # at one LUT a bit, not three).
            for i, (r, terms) in enumerate(zip(rows, fields)):
                if self.split:          # (round 33) the last field sum leaves as it is, on ``dots_b``
                    with m.If(en):
                        m.d.sync += self.dots_b[r].eq(terms[-1])
                    terms = terms[:-1]
                # (joined: the low row's adders each carry one in, chains - 1 of the chains' ones)
                total = add_tree(m, terms, f"rsum{r}", self.dot_width, carry=J and i == 0, primitive=self.primitive)
                if i == 0 and uoffset:
                    # sum of the chains' P'[21:0] = lo + chains 2^21 = lo + 2^(top) in [0, 2^(top + 1)):
                    # lo is that with its top bit inverted (read as signed)
                    # (``split``: the others' sum, in [0, 2^(top + 1)) as well, less 2^top: dots + dots_b = lo)
                    top = PACK_SHIFT - 1 + ceil_log2(self.chains)
                    t = Cat(total.as_unsigned(), Const(0, max(top + 1 - len(total), 0)))
                    total = Cat(t[:top], ~t[top]).as_signed()
                with m.If(en):
                    m.d.sync += self.dots[r].eq(total)
        return m

    def _slice(self, m, name, a, b, pcin, pre=None, ce_a=None, rnd=None, c=None):
        """One DSP48E2: P <= A2 x B2 (+ PCIN unless the first of its chain) + W, W = ``rnd`` (the
        RND constant) or ``c`` (its C port, not registered: a joined pair's first P) or 0;
        ``pre`` = (A, D): P <= AD x B2, AD <= A2 + D (the pre-adder, its own register); ``ce_a``:
        the enable of A2 (and D) if not ``en`` (the weights' load); returns P, PCOUT."""
        a30, b18, p = Signal(signed(30), name=f"{name}_a"), Signal(signed(18), name=f"{name}_b"), \
            Signal(signed(DSP_P_BITS), name=f"{name}_p")
        pcout = Signal(DSP_P_BITS, name=f"{name}_pcout")
        m.d.comb += [a30.eq(a if pre is None else pre[0]), b18.eq(b)]
        en = self.en
        ce_a = en if ce_a is None else ce_a
        # (without the pre-adder its D port and register tied off: every pin of the model connected)
        ports = dict(i_D=Const(0, DSP_A_BITS), i_CED=Const(0, 1), i_CEAD=Const(0, 1), i_RSTD=Const(0, 1))
        if pre is not None:
            d27 = Signal(signed(DSP_A_BITS), name=f"{name}_d")
            m.d.comb += d27.eq(pre[1])
            ports = dict(p_DREG=1, p_ADREG=1, i_D=d27, i_CED=ce_a, i_CEAD=en, i_RSTD=Const(0, 1))
        assert rnd is None or c is None
        w_sel = 0b10 if rnd is not None else 0b11 if c is not None else 0b00
        m.submodules[name] = Instance(
            "DSP48E2",
            p_AREG=1, p_BREG=1, p_MREG=0, p_PREG=1, p_A_INPUT="DIRECT", p_B_INPUT="DIRECT",
            p_AMULTSEL="A" if pre is None else "AD", p_BMULTSEL="B", p_USE_MULT="MULTIPLY",
            p_USE_SIMD="ONE48", p_INMODEREG=0, p_OPMODEREG=0, p_CREG=0,
            p_RND=Const(ROUND if rnd is None else rnd, DSP_P_BITS),
            i_CLK=ClockSignal(), i_A=a30, i_B=b18, i_C=Const(0, DSP_P_BITS) if c is None else c,
            i_PCIN=Const(0, DSP_P_BITS) if pcin is None else pcin, i_CEM=Const(0, 1), i_RSTM=Const(0, 1),
            # W = RND (the first of a chain) / C (a joined pair's last) / 0, Z = 0 / PCIN, Y = X = M;
            # ALUMODE 0000: P = Z + W + X + Y + CIN
            i_OPMODE=Const((w_sel << 7) | (0b000_0101 if pcin is None else 0b001_0101), 9),
            # INMODE 00100: the multiplier's A operand is D + A2 (the pre-adder), else A2
            i_ALUMODE=Const(0, 4), i_INMODE=Const(0 if pre is None else 0b00100, 5), i_CARRYIN=Const(0, 1),
            i_CEA2=ce_a, i_CEB2=en, i_CEP=en,
            i_RSTA=Const(0, 1), i_RSTB=Const(0, 1), i_RSTP=Const(0, 1),
            o_P=p, o_PCOUT=pcout, **ports)
        return p, pcout


@block("compute_dot_array", "MAC array products: rows x lanes INT4 x 16-bit, two per DSP48E2 when packed",
       variants=({"packed": 0, "primitive": 0}, {"primitive": 1}), rows=2, lanes=4, packed=1, primitive=0,
       ranges={"rows": Range(1, 256), "lanes": Range(1, 256), "packed": Range(0, 1),
               "primitive": Range(0, 1)})
def _dot_array(rows, lanes, packed, primitive):
    return DotArray(rows, lanes, packed=bool(packed), primitive=bool(primitive))
