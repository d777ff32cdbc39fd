"""Shared RTL helpers (hw/arith.py) against the golden model: sat, rshr and bitlen in the
Amaranth simulator on random and edge values, the exp2 ROM's contents, log2_exact."""
import random

import numpy as np
import pytest
from amaranth import Module, Signal, signed

from mcf.hw.arith import add_tree, bitlen, exp2_rom, log2_exact, rshr, sat
from mcf.sim.amaranth_util import simulate
from mcf.spec.fixed import EXP2_LUT
from mcf.sw.golden import fixed as fx


def test_sat_rshr_bitlen_match_golden():
    m = Module()
    x, s = Signal(signed(40)), Signal(signed(8))
    u = Signal(40)
    y_sat = sat(m, x, 16)
    y_rshr = rshr(m, x, s, max_left=12)
    n = bitlen(m, u)
    rng = random.Random(3)
    cases = [(v, sh) for v in (0, 1, -1, (1 << 38) - 1, -(1 << 38), 32767, -32768, 32768, -32769)
             for sh in (-12, -1, 0, 1, 5, 39, 60)]
    cases += [(rng.randrange(-(1 << 38), 1 << 38), rng.randrange(-12, 63)) for _ in range(300)]

    async def bench(ctx):
        for v, sh in cases:
            ctx.set(x, v); ctx.set(s, sh); ctx.set(u, abs(v))
            await ctx.delay(1e-9)
            assert ctx.get(y_sat) == int(fx.sat(v, 16)), v
            assert ctx.get(y_rshr) == int(fx.rshr(np.int64(v), sh)), (v, sh)
            assert ctx.get(n) == int(fx.bitlen(abs(v))), v

    simulate(m, bench, clock=False)


def test_sat_unsigned_narrow_and_bounds():
    """sat of an unsigned value (read as non-negative), of a value no wider than the result (never
    clamped) and of a signed one at each bound +-1, against golden ``sat``."""
    m = Module()
    u, n, x = Signal(20), Signal(signed(12)), Signal(signed(17))
    y_u, y_n, y_x = sat(m, u, 16), sat(m, n, 16), sat(m, x, 16)
    cases = [0, 1, 32766, 32767, 32768, 32769, 65535, 65536, 65537, -1, -2048, 2047,
             -32767, -32768, -32769, -65536, 65535]

    async def bench(ctx):
        for v in cases:
            ctx.set(u, v & 0xFFFFF); ctx.set(n, max(-2048, min(2047, v))); ctx.set(x, max(-65536, min(65535, v)))
            await ctx.delay(1e-9)
            assert ctx.get(y_u) == int(fx.sat(v & 0xFFFFF, 16)), v
            assert ctx.get(y_n) == max(-2048, min(2047, v)), v
            assert ctx.get(y_x) == int(fx.sat(max(-65536, min(65535, v)), 16)), v

    simulate(m, bench, clock=False)


@pytest.mark.parametrize("n,signed_", [(1, True), (3, True), (5, True), (8, False), (7, False)])
def test_add_tree_sums(n, signed_):
    """add_tree of n terms of mixed widths (odd counts carry a term up a level) at their extremes
    and random values equals the integer sum."""
    m = Module()
    widths = [22, 9, 26, 22, 5, 17, 22, 3][:n]
    terms = [Signal(signed(w) if signed_ else w, name=f"t{i}") for i, w in enumerate(widths)]
    bound = sum(1 << w for w in widths).bit_length() + 1
    total = add_tree(m, terms, "s", bound)
    rng = random.Random(n)

    def lo_hi(w):
        return (-(1 << (w - 1)), (1 << (w - 1)) - 1) if signed_ else (0, (1 << w) - 1)
    cases = [[lo_hi(w)[0] for w in widths], [lo_hi(w)[1] for w in widths]]
    cases += [[rng.randint(*lo_hi(w)) for w in widths] for _ in range(50)]

    async def bench(ctx):
        for vals in cases:
            for t, v in zip(terms, vals):
                ctx.set(t, v)
            await ctx.delay(1e-9)
            assert ctx.get(total) == sum(vals), vals

    simulate(m, bench, clock=False)


@pytest.mark.parametrize("width", [1, 3, 6, 31, 40])
def test_bitlen_every_top_bit_position(width):
    """bitlen's tree of 2:1 choices at widths that are and are not powers of two: each position of
    the highest one, alone, with every lower bit set, and with random lower bits."""
    m = Module()
    u = Signal(width)
    n = bitlen(m, u)
    rng = random.Random(width)
    values = [0] + [v for k in range(width)
                    for v in (1 << k, (2 << k) - 1, (1 << k) | rng.randrange(1 << k) if k else 1)]

    async def bench(ctx):
        for v in values:
            ctx.set(u, v)
            await ctx.delay(1e-9)
            assert ctx.get(n) == int(fx.bitlen(v)), (width, v)

    simulate(m, bench, clock=False)


def test_exp2_rom_holds_the_spec_table():
    m = Module()
    m.submodules.rom = rom = exp2_rom()
    rd = rom.read_port(domain="comb")
    got = []

    async def bench(ctx):
        for f in range(len(EXP2_LUT)):
            ctx.set(rd.addr, f)
            await ctx.delay(1e-9)
            got.append(ctx.get(rd.data))

    simulate(m, bench, clock=False)
    assert got == [int(v) for v in EXP2_LUT] and got[0] == 1 << 15


def test_log2_exact():
    assert [log2_exact(v, "x") for v in (1, 2, 64, 4096)] == [0, 1, 6, 12]
    for bad in (0, 3, 100, -4):
        with pytest.raises(ValueError, match=f"^depth={bad}: must be a power of two$"):
            log2_exact(bad, "depth")
