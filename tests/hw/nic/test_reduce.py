"""Reduction engine arithmetic against the golden model (Amaranth simulator, no cocotb)."""
import random

import numpy as np
import pytest
from amaranth import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from mcf.hw.nic.reduce import ReduceEngine, _exp2, _rshr15_sat_sum
from mcf.sw.golden.fixed import INT32_MAX, INT32_MIN, M_EMPTY, merge_states


class MergeRow(wiring.Component):
    """One (m, l, o) row merge, combinationally, with the engine's helpers."""
    ma: In(32)
    la: In(32)
    oa: In(32)
    mb: In(32)
    lb: In(32)
    ob: In(32)
    m: Out(32)
    l: Out(32)
    o: Out(32)

    def elaborate(self, platform):
        m = Module()
        mx = Mux(self.ma.as_signed() >= self.mb.as_signed(), self.ma, self.mb)
        fa = _exp2(m, self.ma.as_signed() - mx.as_signed())
        fb = _exp2(m, self.mb.as_signed() - mx.as_signed())
        m.d.comb += [self.m.eq(mx), self.l.eq(_rshr15_sat_sum(m, self.la, fa, self.lb, fb)),
                     self.o.eq(_rshr15_sat_sum(m, self.oa, fa, self.ob, fb))]
        return m


def _rows(rng, n):
    specials = [M_EMPTY, INT32_MIN, INT32_MAX, 0, -1, 1]
    for _ in range(n):
        ms = [rng.choice(specials) if rng.random() < 0.2 else rng.randrange(-70000, 70000) for _ in range(2)]
        if rng.random() < 0.3:
            ms[1] = ms[0] + rng.randrange(-20, 20)
        vals = [rng.choice([INT32_MIN, INT32_MAX, 0, rng.randrange(-(1 << 31), 1 << 31),
                            rng.randrange(-(1 << 16), 1 << 16)]) for _ in range(4)]
        ms = [max(INT32_MIN, min(INT32_MAX, x)) for x in ms]
        yield [ms[0], vals[0], vals[1]], [ms[1], vals[2], vals[3]]


def test_softmax_merge_matches_golden():
    dut = MergeRow()
    rows = list(_rows(random.Random(7), 400))

    async def bench(ctx):
        for a, b in rows:
            for port, v in zip((dut.ma, dut.la, dut.oa, dut.mb, dut.lb, dut.ob), a + b):
                ctx.set(port, v & 0xFFFFFFFF)
            await ctx.delay(1e-9)
            got = [int(np.int32(np.uint32(ctx.get(s)))) for s in (dut.m, dut.l, dut.o)]
            want = merge_states(np.array(a, dtype=np.int32), np.array(b, dtype=np.int32)).tolist()
            assert got == want, f"merge({a}, {b}) = {got}, golden {want}"

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("kw", [dict(softmax_fan_in=3), dict(max_beats=12), dict(state_words=2),
                                dict(data_width=48)])
def test_bad_params(kw):
    with pytest.raises(ValueError):
        ReduceEngine(**kw)


def test_combine_write_primitive_equals_the_plain_build(tmp_path):
    """Round 32: the accumulator's write word as LUT6_2 + CARRY4 and ``greater`` instances (the node's build)
    equals the plain ``Mux(first, new, combine(...))`` (or the softmax fold's word) in Icarus (hw/lut6.v's
    models), every cycle: random ops (MAX, SUM, the others), first beats 1 in 4, the softmax word 1 in 4, and
    a lane of ``new`` half the time ``acc``'s with its low bits or its sign flipped (equal words, near ties,
    sign changes)."""
    import shutil
    if shutil.which("iverilog") is None:
        pytest.skip("needs Icarus Verilog")
    from amaranth import Cat
    from mcf.hw.nic.reduce import WORD, combine_write
    from tests.hw.test_lut import _Pair, _run
    w = 2 * WORD

    def build(m, stim, primitive):
        op, first, alt_v, near = stim[:2], stim[2] & stim[3], stim[4] & stim[5], stim[6:6 + w // WORD]
        acc, raw, alt = stim[8:8 + w], stim[8 + w:8 + 2 * w], stim[8 + 2 * w:8 + 2 * w + WORD]
        flips = stim[8 + 2 * w + WORD:8 + 2 * w + WORD + 3]
        new = Cat(*(Mux(near[i], acc[i * WORD:(i + 1) * WORD] ^ Cat(flips[:2], Const(0, WORD - 3), flips[2]),
                        raw[i * WORD:(i + 1) * WORD]) for i in range(w // WORD)))
        out = Signal(w, name="out_p" if primitive else "out_q")
        m.d.comb += out.eq(combine_write(m, op, first, acc, new, w, primitive, "cw_p" if primitive else "cw_q",
                                         alt=alt, alt_v=alt_v))
        return out, (op == 1) & ~alt_v
    bad, fires = _run(tmp_path, _Pair(8 + 2 * w + WORD + 3, build))
    assert bad == 0 and fires > 0
