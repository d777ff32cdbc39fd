"""The performance counters (hw/seq/perf.py) in the Amaranth simulator: per-cycle increments
(strobes and byte counts) counted only if ``enable`` was set in the cycle they stand for (the
same cycle, or ``latency`` cycles before they arrive), the DDR totals the sums of the HP ports'
bytes, 64 bits wide, cleared by ``clear``, read by ``index`` one cycle later; an index beyond
the counters reads 0."""
import random

import pytest
from amaranth import Cat
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


@pytest.mark.parametrize("cycles,clear_bits", [(600, 3), (4000, 8)])
def test_perf_split_counters_equal_the_plain_build(tmp_path, monkeypatch, cycles, clear_bits):
    """The node's build equals the plain one in Icarus, every cycle: round 28b's read choice (4:1 LUT6
    instance layers, hw/lut.py) and round 31's counters (low 22 bits in flip-flops, the high ones in
    LUT RAM brought up to date one counter a cycle, ``LO_BITS``).  Random 16-bit increments, enable 3
    cycles in 4, the index within the counters but 1 in 16 past them, clear 1 cycle in 2^clear_bits: in
    8, or in 256 over 4 000 cycles (the low bits carry ~3 times a counter between clears; after a clear
    the RAM's stale words are read while the pointer sweeps; ``fired``: a read with the high bits set)."""
    import shutil
    if shutil.which("iverilog") is None:
        pytest.skip("needs Icarus Verilog")
    import tests.hw.test_lut
    from mcf.hw.seq.perf import LO_BITS
    from tests.hw.test_lut import _Pair, _run
    monkeypatch.setattr(tests.hw.test_lut, "CYCLES", cycles)
    n, inc_bits = len(PerfCounter), 16

    def build(m, stim, primitive):
        m.submodules[f"perf{int(primitive)}"] = pc = PerfCounters(
            latency={PerfCounter.HP1_RD_BYTES: 2}, primitive=primitive)
        m.d.comb += [pc.inc[c].eq(stim[c * inc_bits:(c + 1) * inc_bits]) for c in range(n)]
        o = n * inc_bits
        m.d.comb += [pc.enable.eq(stim[o:o + 2].any()), pc.clear.eq(stim[o + 2:o + 2 + clear_bits].all()),
                     pc.index.eq(Cat(stim[o + 10:o + 15], stim[o + 15:o + 19].all(), stim[o + 19:o + 23].all(), 0))]
        return pc.value, pc.value[LO_BITS if clear_bits > 3 else 0:] != 0
    bad, fires = _run(tmp_path, _Pair(n * inc_bits + 23, build))
    assert bad == 0 and fires > 0
