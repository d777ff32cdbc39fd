"""``AsyncQueue`` (hw/dma/common.py): Amaranth's ``AsyncFIFO`` with its pointers' next values in
registers.  Its claim is "the same ports and behaviour, cycle for cycle": both side by side in one
design, two unrelated clocks, random writes and reads, and every output of the two compared at
every edge of either clock (Amaranth's simulator)."""
import random

import pytest
from amaranth import ClockDomain, Module
from amaranth.lib import fifo
from amaranth.sim import Simulator

from mcf.hw.dma.common import AsyncQueue


@pytest.mark.parametrize("depth,w_period,r_period", [(4, 4, 7), (8, 5, 3), (16, 6, 6)])
def test_async_queue_equals_amaranths_async_fifo(depth, w_period, r_period):
    m = Module()
    wr, rd = ClockDomain("wr"), ClockDomain("rd")
    m.domains += [wr, rd]
    ref = m.submodules.ref = fifo.AsyncFIFO(width=8, depth=depth, r_domain="rd", w_domain="wr")
    dut = m.submodules.dut = AsyncQueue(width=8, depth=depth, r_domain="rd", w_domain="wr")
    outs = ("w_rdy", "w_level", "r_rdy", "r_level", "r_rst")
    sim = Simulator(m)
    sim.add_clock(w_period * 1e-9, domain="wr")
    sim.add_clock(r_period * 1e-9, phase=1.3e-9, domain="rd")
    rng = random.Random(depth * 100 + w_period * 10 + r_period)
    seen = {"writes": 0, "reads": 0, "full": 0}

    def check(ctx):
        for name in outs:
            assert ctx.get(getattr(dut, name)) == ctx.get(getattr(ref, name)), name
        if ctx.get(ref.r_rdy):
            assert ctx.get(dut.r_data) == ctx.get(ref.r_data)

    async def writer(ctx):
        for i in range(600):
            en = rng.random() < (0.9 if i < 300 else 0.3)       # fill it up, then let the reader drain
            data = rng.randrange(256)
            for f in (ref, dut):
                ctx.set(f.w_en, en)
                ctx.set(f.w_data, data)
            await ctx.tick("wr")
            check(ctx)
            seen["writes"] += en and ctx.get(ref.w_rdy)
            seen["full"] += not ctx.get(ref.w_rdy)
            if i == 450:                                         # the write domain's reset empties both
                ctx.set(wr.rst, 1)
                await ctx.tick("wr")
                ctx.set(wr.rst, 0)

    async def reader(ctx):
        for i in range(900):
            en = rng.random() < (0.3 if i < 300 else 0.8)
            for f in (ref, dut):
                ctx.set(f.r_en, en)
            await ctx.tick("rd")
            check(ctx)
            seen["reads"] += en and ctx.get(ref.r_rdy)

    sim.add_testbench(writer)
    sim.add_testbench(reader)
    sim.run()
    assert seen["writes"] > 50 and seen["reads"] > 50 and seen["full"] > 0, seen
