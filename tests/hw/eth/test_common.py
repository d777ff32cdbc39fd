"""The clock-enable convention (hw/eth/common.py): a stage under ``enabled(m, en)`` holds its
registers while ``en`` is low; the XGMII and block signatures name their members."""
from amaranth import Module, Signal
from amaranth.sim import Simulator

from mcf.hw.eth.common import BlockSignature, XgmiiSignature, enabled


def test_enabled_holds_registers():
    m = Module()
    en, count = Signal(), Signal(8)
    m.d.sync += count.eq(count + 1)
    top = enabled(m, en)
    seen = []

    async def bench(ctx):
        for k in range(12):
            ctx.set(en, k % 3 != 0)
            await ctx.tick()
            seen.append(ctx.get(count))

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [0, 1, 2, 2, 3, 4, 4, 5, 6, 6, 7, 8]


def test_signatures():
    assert set(XgmiiSignature().members) == {"data", "ctrl"}
    assert len(XgmiiSignature().create().data) == 64 and len(XgmiiSignature().create().ctrl) == 8
    assert len(BlockSignature().create().header) == 2
