"""hw/fifo.py's PrefetchFIFO and BlockFIFO against Amaranth's SyncFIFOBuffered, side by side in the
Amaranth simulator: the same valid and head word in every cycle (and, ``exact``, the same ``w_rdy``
and level)."""
import random

import pytest
from amaranth import Module
from amaranth.lib.fifo import SyncFIFOBuffered

from mcf.hw.fifo import BlockFIFO, PrefetchFIFO
from mcf.sim.amaranth_util import simulate


@pytest.mark.parametrize("depth,exact,kind", [(8, False, "prefetch"), (3, True, "prefetch"), (6, True, "prefetch"),
                                              (6, True, "block"), (5, True, "block")])
def test_cycle_exact_with_sync_fifo_buffered(depth, exact, kind):
    """Writes offered at random (``exact``: to both, each takes it on its own ``w_rdy``; else only
    while the reference has room), the same random ready, in phases of ready always / often /
    rarely and writes often / rarely.  ``block``: ``BlockFIFO`` with its top 3 bits in LUT RAM
    (memories of 5 and 4 words: the pointers' wrap with and without a compare)."""
    W = 16
    m = Module()
    m.submodules.dut = dut = PrefetchFIFO(W, depth, exact=exact) if kind == "prefetch" else BlockFIFO(W, depth, fast=3)
    m.submodules.ref = ref = SyncFIFOBuffered(width=W, depth=depth)
    rng = random.Random(depth)
    seen = {"taken": 0, "full_rate": 0, "full": 0}

    async def bench(ctx):
        run = 0
        for cyc in range(1600):
            p_ready, p_write = [(1.0, 0.9), (0.7, 0.7), (0.2, 0.9), (1.0, 0.3)][(cyc // 150) % 4]
            w = rng.random() < p_write
            if not exact:
                w = w and ctx.get(ref.w_rdy)
            data = rng.getrandbits(W)
            r = rng.random() < p_ready
            for x, en in ((dut.w_en, w), (dut.w_data, data), (ref.w_en, w), (ref.w_data, data),
                          (dut.r_en, r), (ref.r_en, r)):
                ctx.set(x, en)
            await ctx.delay(1e-9)
            assert ctx.get(dut.r_rdy) == ctx.get(ref.r_rdy), f"cycle {cyc}: valid"
            if exact:
                assert ctx.get(dut.w_rdy) == ctx.get(ref.w_rdy), f"cycle {cyc}: w_rdy"
                assert ctx.get(dut.level) == ctx.get(ref.level), f"cycle {cyc}: level"
                seen["full"] += not ctx.get(ref.w_rdy)
            if ctx.get(ref.r_rdy):
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data), f"cycle {cyc}: word"
                seen["taken"] += r
                run = run + 1 if r else 0
                seen["full_rate"] = max(seen["full_rate"], run)
            await ctx.tick()

    simulate(m, bench)
    assert seen["taken"] > 500 and seen["full_rate"] >= 20, seen
    assert seen["full"] > 50 or not exact, seen


def test_depth_refused():
    with pytest.raises(ValueError, match="^depth=2: must be >= 3$"):
        PrefetchFIFO(8, 2, exact=True)
