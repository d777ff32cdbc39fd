"""hw/lut.py (round 28): the LUT6-instance builds of a 4:1 choice, of ``rotate_list`` / ``rotate_pieces``
and of the reorders, and (round 30) the three-input adder ``add3`` (LUT6_2 + CARRY4) and ``add_tree`` on it,
equal their plain (Mux, +) builds in Verilog simulation (Icarus, the LUT6 model
hw/lut6.v appended by ``with_models``): both builds side by side in one design, the same random inputs
every cycle, their outputs compared every cycle."""

import shutil
import subprocess

import pytest
from amaranth import Array, Cat, Const, Elaboratable, Module, Signal
from amaranth.back import verilog

from mcf.hw import lut
from mcf.hw.primitives import with_models

pytestmark = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs Icarus Verilog")

CYCLES = 600


class _Pair(Elaboratable):
    """``build(m, stim, primitive)`` -> (its outputs, a "fired" bit) twice, primitive and plain, on the
    same ``stim``; ``diff`` (registered) is high after a cycle in which the outputs differed."""

    def __init__(self, stim_bits, build):
        self.stim, self.diff, self.fired = Signal(stim_bits, name="stim"), Signal(name="diff"), Signal(name="fired")
        self.build = build

    def elaborate(self, platform):
        m = Module()
        a, fa = self.build(m, self.stim, True)
        b, fb = self.build(m, self.stim, False)
        m.d.sync += [self.diff.eq((a != b) | (fa != fb)), self.fired.eq(fa)]
        return m


def _run(tmp_path, pair):
    """Icarus: ``CYCLES`` cycles of random ``stim`` (reset for the first two); the cycles that differed,
    and the cycles ``fired`` was high."""
    W = len(pair.stim)
    src = tmp_path / "dut.v"
    src.write_text(with_models(verilog.convert(pair, name="dut", ports=[pair.stim, pair.diff, pair.fired])))
    text = src.read_text()
    assert (lut.MODEL_MARK in text) == any(f"{c} #(" in text or f"{c} " in text.split(lut.MODEL_MARK)[0]
                                           for c in lut.MODEL_CELLS)   # (a 2-way rotation alone: no instance)
    tb = tmp_path / "tb.v"
    tb.write_text(f"""
module tb;
  reg clk = 0, rst = 1;
  reg [{W - 1}:0] stim = 0;
  wire diff, fired;
  integer i, c, bad = 0, fires = 0;
  dut u(.clk(clk), .rst(rst), .stim(stim), .diff(diff), .fired(fired));
  initial begin
    for (c = 0; c < {CYCLES}; c = c + 1) begin
      for (i = 0; i < {W}; i = i + 32) stim[i +: 32] = $random;
      if (c == 2) rst = 0;
      #1 clk = 1; #1 clk = 0;
      if (!rst && diff) bad = bad + 1;
      if (!rst && fired) fires = fires + 1;
    end
    $display("RESULT %0d %0d", bad, fires);
    $finish;
  end
endmodule
""")
    exe = tmp_path / "sim.vvp"
    subprocess.run(["iverilog", "-g2012", "-o", str(exe), str(tb), str(src)], check=True, capture_output=True)
    out = subprocess.run(["vvp", "-n", str(exe)], check=True, capture_output=True, text=True).stdout
    bad, fires = (int(x) for x in out.split("RESULT")[1].split())
    return bad, fires


def test_mux4_init_is_a_choice():
    """INIT bit a = data input (a mod 4) of the LUT6's address a (I0, I1 the select, I2 .. I5 the data)."""
    for a in range(64):
        assert (lut.MUX4_INIT >> a) & 1 == (a >> (2 + (a & 3))) & 1
    assert lut.MUX4_INIT == 0xFEDCBA9876543210


@pytest.mark.parametrize("width", [1, 7])
def test_mux4_equals_the_plain_choice(tmp_path, width):
    def build(m, stim, primitive):
        sel, items = stim[:2], [stim[2 + k * width:2 + (k + 1) * width] for k in range(4)]
        return lut.mux4(m, sel, items, primitive=primitive, name="mx"), stim[0]
    bad, fires = _run(tmp_path, _Pair(2 + 4 * width, build))
    assert bad == 0 and fires > 0


@pytest.mark.parametrize("n,width", [(8, 3), (16, 2), (32, 5)])
def test_muxf_equals_the_plain_choice(tmp_path, n, width):
    """(round 32) 4:1 LUT6 under MUXF7 / F8 / F9: the same choice as the plain build, n / 4 LUT6 a bit."""
    k = n.bit_length() - 1

    def build(m, stim, primitive):
        sel, items = stim[:k], [stim[k + i * width:k + (i + 1) * width] for i in range(n)]
        return lut.muxf(m, sel, items, primitive=primitive, name="mf"), stim[0]
    pair = _Pair(k + n * width, build)
    text = verilog.convert(pair, name="dut", ports=[pair.stim, pair.diff, pair.fired])
    assert text.count("LUT6 #(") == n // 4 * width
    assert [text.count(f"MUXF{f} ") for f in (7, 8, 9)] == [(n // 8 >> i) * width if n >> (3 + i) else 0
                                                            for i in range(3)]
    bad, fires = _run(tmp_path, pair)
    assert bad == 0 and fires > 0


@pytest.mark.parametrize("n,bits,index_bits", [(32, 7, 5), (32, 16, 5), (20, 3, 5), (16, 2, 4), (40, 2, 6),
                                                 (20, 2, 6), (128, 1, 7), (6, 3, 3), (4, 3, 2), (3, 2, 2)])
def test_pick_equals_the_plain_build(tmp_path, n, bits, index_bits):
    """``pick`` (round 29, the sequencer's; here since round 32): the LUT6 / MUXF build (the first 3 .. 5
    index bits ``muxf`` a group, then radix-4 layers, an odd top bit plain) equals the plain 2:1 tree: the
    queue heads' ``cur`` (32 values of 7 bits), SEM_DATA's value (16 bits), shorter arrays (0 beyond them,
    a group of constants only), a 64- and a 128-way choice, a 4-way one (no MUXF)."""
    def build(m, stim, primitive):
        index = stim[:index_bits]
        values = [stim[index_bits + k * bits:index_bits + (k + 1) * bits] for k in range(n)]
        return lut.pick(m, values, index, primitive, f"pk{int(primitive)}"), stim[0]
    bad, fires = _run(tmp_path, _Pair(index_bits + n * bits, build))
    assert bad == 0 and fires > 0


def test_muxf_refuses_other_sizes():
    with pytest.raises(ValueError, match="8, 16 or 32"):
        lut.muxf(Module(), Signal(2), [Signal(1)] * 4, primitive=True)


@pytest.mark.parametrize("step", [1, 2, 8])
def test_mux4_shared_equals_the_plain_choice(tmp_path, step):
    """(round 31, mx31's ``mux4_shared``) a shifter's first layer: bit j of x >> (k step), k = sel, x's sign
    above its top; the bits whose four choices read at most three signals pair up in LUT6_2 instances."""
    W = 12
    seen = {}

    def build(m, stim, primitive):
        sel, xs = stim[:2], [stim[2 + i] for i in range(W)]           # one object a bit (mux4_shared: by identity)
        sign = xs[-1]
        choices = [[xs[j + k * step] if j + k * step < W else sign for k in range(4)] for j in range(W)]
        choices[0][3] = Const(1, 1)                                     # a constant folded into the INIT
        if primitive:
            out = Cat(*lut.mux4_shared(m, sel, choices, "ms"))
        else:
            out = Cat(*[Array(ch)[sel] for ch in choices])
        return out, out.any()
    pair = _Pair(2 + W, build)
    text = verilog.convert(pair, name="dut", ports=[pair.stim, pair.diff, pair.fired])
    seen["pairs"] = text.count("LUT6_2 #(")
    assert seen["pairs"] >= (2 if step > 1 else 1)                     # some bits share a LUT6_2
    bad, fires = _run(tmp_path, pair)
    assert bad == 0 and fires > CYCLES // 2


@pytest.mark.parametrize("N,bits,sign,step,amount_bits", [(16, 3, 1, 1, 4), (8, 2, -1, 1, 3), (8, 5, 1, 2, 2),
                                                         (64, 1, -1, 1, 6), (4, 4, 1, 1, 1)])
def test_rotate_list_equals_the_plain_build(tmp_path, N, bits, sign, step, amount_bits):
    """Radix-4 stages as LUT6, a 2-way stage (odd log2 N) plain, a shorter amount, a step."""
    from mcf.hw.compute.matrix import rotate_list

    def build(m, stim, primitive):
        amount = stim[:amount_bits]
        items = [stim[amount_bits + x * bits:amount_bits + (x + 1) * bits] for x in range(N)]
        name = "p" if primitive else "q"
        return Cat(*rotate_list(items, amount, sign=sign, step=step, m=m, name=name, primitive=primitive)), stim[0]
    bad, fires = _run(tmp_path, _Pair(amount_bits + N * bits, build))
    assert bad == 0 and fires > 0


def _stream_pair(make):
    """A reorder's two builds on the same random stream inputs (valid, payload, ready, ...): the
    outputs compared; fired = a beat taken on the out side."""
    def build(m, stim, primitive):
        dut = make(primitive)
        m.submodules["prim" if primitive else "plain"] = dut
        WB = len(dut.i.payload)
        m.d.comb += [dut.i.valid.eq(stim[0]), dut.o.ready.eq(stim[1]), dut.i.payload.eq(stim[8:8 + WB])]
        if hasattr(dut, "skip"):
            m.d.comb += dut.skip.eq(stim[2] & stim[3] & stim[4])
        outs = [dut.o.payload, dut.o.valid, dut.i.ready] + ([dut.rot] if hasattr(dut, "rot") else [])
        return Cat(*outs), dut.o.valid & dut.o.ready
    return build


@pytest.mark.parametrize("rows,lanes,beats,words,pre", [(8, 4, 4, 2, 0), (16, 2, 16, 1, 0), (16, 2, 16, 1, 1)])
def test_tile_reorder_equals_the_plain_build(tmp_path, rows, lanes, beats, words, pre):
    from mcf.hw.compute.matrix import TileReorder
    make = (lambda p: TileReorder(rows, lanes, beats, prerotated=bool(pre), words=words, primitive=p))
    WB = rows * lanes * 4 // words
    bad, fires = _run(tmp_path, _Pair(8 + WB, _stream_pair(make)))
    assert bad == 0 and fires > 20


@pytest.mark.parametrize("rows,lanes,head_dim,words", [(8, 8, 16, 2), (4, 16, 16, 4), (8, 8, 16, 1)])
def test_pv_reorder_equals_the_plain_build(tmp_path, rows, lanes, head_dim, words):
    from mcf.hw.compute.matrix import PvReorder
    make = (lambda p: PvReorder(rows, lanes, head_dim, words=words, primitive=p))
    WB = rows * lanes * 4 // words
    bad, fires = _run(tmp_path, _Pair(8 + WB, _stream_pair(make)))
    assert bad == 0 and fires > 20


def test_rotate_pieces_on_lut6(tmp_path):
    """The GEMM mover's shared write rotation (``rotate_pieces``: 16 pieces a key, two keys)."""
    from mcf.hw.compute.matrix import rotate_pieces

    def build(m, stim, primitive):
        return rotate_pieces(stim[4:4 + 2 * 16 * 3], stim[:4], 3, 16, m=m, primitive=primitive), stim[0]
    bad, fires = _run(tmp_path, _Pair(4 + 2 * 16 * 3, build))
    assert bad == 0 and fires > 0


@pytest.mark.parametrize("rows,cols,rows_in", [(12, 16, 1), (12, 16, 0), (4, 8, 0)])
def test_skew_transpose_equals_the_plain_build(tmp_path, rows, cols, rows_in):
    """ATTN_SM's transposes (a row or a column a cycle through LUT-RAM banks; 12 rows: padded words
    and unread outputs of the rotations), random writes and reads."""
    from mcf.hw.compute.exec.movers import SkewTranspose

    def build(m, stim, primitive):
        dut = SkewTranspose(rows, cols, rows_in=bool(rows_in), r_ahead=bool(rows_in), r_rot=not rows_in,
                            primitive=primitive)
        m.submodules["prim" if primitive else "plain"] = dut
        ins = [dut.w_en, dut.w_sel, dut.w_idx, dut.r_sel, dut.r_idx, dut.w_data]
        ins += [dut.r_idx_next] if rows_in else [dut.r_rot]
        at = 0
        for v in ins:
            m.d.comb += v.eq(stim[at:at + len(v)])
            at += len(v)
        return dut.r_data, stim[0]
    bad, fires = _run(tmp_path, _Pair(16 + 32 * max(rows, cols) + 24, build))
    assert bad == 0 and fires > 0


def test_spad_wide_read_equals_the_plain_build(tmp_path):
    """The SPAD's wide read rotation (4 banks) on LUT6: random writes (narrow and wide) and reads."""
    from mcf.hw.compute.exec.spad import Scratchpad

    def build(m, stim, primitive):
        dut = Scratchpad(32, 2, 4, primitive=primitive)
        m.submodules["prim" if primitive else "plain"] = dut
        ins = [dut.rd.en, dut.rd.addr, dut.wr.lanes, dut.wr.exp_en, dut.wr.addr, dut.wr.exp, dut.wr.wide_en,
               dut.wr.wide_skip, dut.wr.data, dut.wr.wide]
        at = 0
        for v in ins:
            m.d.comb += v.eq(stim[at:at + len(v)])
            at += len(v)
        return Cat(dut.rd.data, dut.rd.exp, dut.rd.wide), stim[0]
    bad, fires = _run(tmp_path, _Pair(40 + 5 * 64, build))
    assert bad == 0 and fires > 0


@pytest.mark.parametrize("wa,wb,wc,sa,sb,sc,n,cin", [(7, 5, 9, 1, 0, 1, 12, 0), (7, 5, 9, 1, 0, 1, 12, 2),
                                                     (8, 8, 8, 0, 0, 0, 10, 1), (22, 22, 22, 1, 1, 1, 24, 2),
                                                     (3, 3, 3, 1, 1, 1, 5, 0)])
def test_add3_equals_the_plain_sum(tmp_path, wa, wb, wc, sa, sb, sc, n, cin):
    """``add3`` (round 30: a LUT6_2 and the carry chain a bit) against Amaranth's a + b + c + cin: signed
    and unsigned terms of different widths, the sum's width the bound (n bits hold every sum here), the
    carries in; a width not a multiple of 4 (the chain's last CARRY4 part used)."""
    from amaranth import signed as _s, unsigned as _u

    def build(m, stim, primitive):
        a, b, c = stim[1:1 + wa], stim[1 + wa:1 + wa + wb], stim[1 + wa + wb:1 + wa + wb + wc]
        a, b, c = (x.as_signed() if sg else x for x, sg in ((a, sa), (b, sb), (c, sc)))
        shape = _s(n) if (sa or sb or sc) else _u(n)
        return lut.add3(m, a, b, c, shape, "t" if primitive else "u", primitive=primitive, cin=cin), stim[0]
    bad, fires = _run(tmp_path, _Pair(1 + wa + wb + wc, build))
    assert bad == 0 and fires > 0


@pytest.mark.parametrize("terms,width,carry", [(4, 22, True), (4, 22, False), (5, 9, True), (3, 23, False), (7, 6, True)])
def test_add_tree_on_add3_equals_the_plain_tree(tmp_path, terms, width, carry):
    """``add_tree(primitive=True)`` (three terms an adder; the dot array's row sums) against the plain tree
    of two-input adders: signed terms, the carries in (every adder's, len(terms) - 1 in all)."""
    from mcf.hw.arith import add_tree

    def build(m, stim, primitive):
        ts = [stim[1 + k * width:1 + (k + 1) * width].as_signed() for k in range(terms)]
        total = add_tree(m, ts, "t" if primitive else "u", width + 3, carry=carry, primitive=primitive)
        return total, stim[0]
    bad, fires = _run(tmp_path, _Pair(1 + terms * width, build))
    assert bad == 0 and fires > 0


def test_add3_init():
    """add3's LUT6_2: O6 (I5 = 1) the parity of I0 .. I3, O5 the majority of I0 .. I2 (neither reads I4)."""
    for a in range(32):
        assert (lut.ADD3_INIT >> (32 + a)) & 1 == bin(a & 15).count("1") % 2
        assert (lut.ADD3_INIT >> a) & 1 == (bin(a & 7).count("1") >= 2)


@pytest.mark.parametrize("width,sgn", [(32, 1), (32, 0), (7, 1), (5, 0), (1, 0), (2, 1)])
def test_greater_equals_the_plain_compare(tmp_path, width, sgn):
    """``greater`` (round 30: two bit pairs a LUT6_2 on a CARRY4 chain) against Amaranth's a > b: random
    words, b = a, and b = a with one bit flipped (the compare's hard cases: every pair equal but one)."""
    from amaranth import Const, Mux

    def build(m, stim, primitive):
        a = stim[1:1 + width]
        rand, flip, mode = stim[1 + width:1 + 2 * width], stim[1 + 2 * width:7 + 2 * width], stim[7 + 2 * width:9 + 2 * width]
        one = (Const(1, width) << flip)[:width]
        b = Mux(mode == 0, rand, Mux(mode == 1, a ^ one, a))
        bs = Signal(width, name="b" + ("p" if primitive else "q"))
        m.d.comb += bs.eq(b)
        aa, bb = (a.as_signed(), bs.as_signed()) if sgn else (a, bs)
        return lut.greater(m, aa, bb, "g" if primitive else "h", primitive=primitive), stim[0]
    bad, fires = _run(tmp_path, _Pair(9 + 2 * width, build))
    assert bad == 0 and fires > 0


@pytest.mark.parametrize("wa,wb,wd,n", [(34, 16, 32, 34), (9, 5, 7, 10), (3, 3, 3, 3)])
def test_add_load_equals_the_plain_choice(tmp_path, wa, wb, wd, n):
    """``add_load`` (round 30b: load ? d : a + b, one LUT6_2 a bit on the carry chain) against Amaranth's
    choice of the sum: signed a and d, unsigned b, the load at random, the sum wrapping at n bits."""
    from amaranth import signed as _s

    def build(m, stim, primitive):
        a = stim[2:2 + wa].as_signed()
        b = stim[2 + wa:2 + wa + wb]
        d = stim[2 + wa + wb:2 + wa + wb + wd].as_signed()
        return lut.add_load(m, a, b, d, stim[1], _s(n), "t" if primitive else "u", primitive=primitive), stim[0]
    bad, fires = _run(tmp_path, _Pair(2 + wa + wb + wd, build))
    assert bad == 0 and fires > 0


@pytest.mark.parametrize("n", [3, 4])
def test_mux2_pairs_on_lut6_2(tmp_path, n):
    """``mux2_pairs`` (round 32: two bits' 2:1 choice a LUT6_2 instance, the select shared; the accumulator's
    top C bits, the activation buffer's fields) equals the plain choice in Icarus (the model hw/lut6.v), an odd last bit
    plain; and the INIT's two halves are the choices at each of the 32 addresses."""
    for a in range(32):
        bit = lambda k: (a >> k) & 1
        assert (lut.MUX2_PAIR_INIT >> (32 + a)) & 1 == (bit(1) if bit(0) else bit(2))
        assert (lut.MUX2_PAIR_INIT >> a) & 1 == (bit(3) if bit(0) else bit(4))

    def build(m, stim, primitive):
        z_c, cs, fs = stim[0], stim[1:1 + n], stim[1 + n:1 + 2 * n]
        return lut.mux2_pairs(m, z_c, cs, fs, primitive=primitive, name="p" if primitive else "q"), z_c
    bad, fires = _run(tmp_path, _Pair(1 + 2 * n, build))
    assert bad == 0 and fires > 0
