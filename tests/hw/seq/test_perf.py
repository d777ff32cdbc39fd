"""The performance counters (hw/seq/perf.py) in the Amaranth simulator: per-cycle increments
(strobes and byte counts) counted only if ``enable`` was set in the cycle they stand for (the
same cycle, or ``latency`` cycles before they arrive), the DDR totals the sums of the HP ports'
bytes, 64 bits wide, cleared by ``clear``, read by ``index`` one cycle later; an index beyond
the counters reads 0."""
import random

import pytest
from amaranth.sim import Simulator

from mcf.hw.seq.perf import SUMS, PerfCounters
from mcf.spec.isa import MAX_HP_PORTS, PerfCounter

LATE = {PerfCounter[f"HP{p}_{d}_BYTES"]: 2 for p in (1, 3) for d in ("RD", "WR")}


@pytest.mark.parametrize("latency", [{}, LATE])
def test_counts_enable_clear_and_read(latency):
    rng = random.Random(3)
    dut = PerfCounters(latency)
    n = len(PerfCounter)
    plan = [[rng.choice([0, 1, 16, 65535 // MAX_HP_PORTS]) for _ in range(n)] for _ in range(60)]
    enable = [rng.random() < 0.7 for _ in plan]
    want = [0] * n
    for cyc, incs in enumerate(plan):
        for c in PerfCounter:
            back = cyc - latency.get(c, 0)          # the cycle the increment stands for
            if c not in SUMS and back >= 0 and enable[back]:
                want[c] += incs[c]
    for total, parts in SUMS.items():
        want[total] = sum(want[p] for p in parts)
    got = {}

    async def read_all(ctx):
        out = []
        for c in list(PerfCounter) + [n + 3]:
            ctx.set(dut.index, int(c))
            await ctx.tick()
            out.append(ctx.get(dut.value))
        return out

    async def bench(ctx):
        for incs, en in zip(plan, enable):
            for c, v in enumerate(incs):
                ctx.set(dut.inc[c], v)
            ctx.set(dut.enable, en)
            await ctx.tick()
        for c in range(n):
            ctx.set(dut.inc[c], 0)
        ctx.set(dut.enable, 0)
        await ctx.tick().repeat(3)              # the registered increments and sums land
        got["counts"] = await read_all(ctx)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        await ctx.tick()
        got["cleared"] = await read_all(ctx)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got["counts"] == want + [0]
    assert len(dut.value) == 64
    assert got["cleared"] == [0] * (n + 1)
