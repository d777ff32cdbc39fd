"""Reduction engine arithmetic against the golden model (Amaranth simulator, no cocotb)."""
import random

import numpy as np
import pytest
from amaranth import Module, Mux, Signal
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
