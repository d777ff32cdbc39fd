"""hw/fifo.py's PrefetchFIFO and ReadyFIFO against Amaranth's SyncFIFOBuffered, side by side in the
Amaranth simulator: the same valid and head word in every cycle (and, ``exact`` / ReadyFIFO, the same
``w_rdy`` and level)."""
import random

import pytest
from amaranth import Module
from amaranth.lib.fifo import SyncFIFOBuffered

from mcf.hw.fifo import PrefetchFIFO, ReadyFIFO
from mcf.sim.amaranth_util import simulate


@pytest.mark.parametrize("depth,exact", [(8, False), (3, True), (6, True)])
def test_cycle_exact_with_sync_fifo_buffered(depth, exact):
    """Writes offered at random (``exact``: to both, each takes it on its own ``w_rdy``; else only
    while the reference has room), the same random ready, in phases of ready always / often /
    rarely and writes often / rarely."""
    W = 16
    m = Module()
    m.submodules.dut = dut = PrefetchFIFO(W, depth, exact=exact)
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
                          (dut.o.ready, r), (ref.r_en, r)):
                ctx.set(x, en)
            await ctx.delay(1e-9)
            assert ctx.get(dut.o.valid) == ctx.get(ref.r_rdy), f"cycle {cyc}: valid"
            if exact:
                assert ctx.get(dut.w_rdy) == ctx.get(ref.w_rdy), f"cycle {cyc}: w_rdy"
                assert ctx.get(dut.level) == ctx.get(ref.level), f"cycle {cyc}: level"
                seen["full"] += not ctx.get(ref.w_rdy)
            if ctx.get(ref.r_rdy):
                assert ctx.get(dut.o.payload) == ctx.get(ref.r_data), f"cycle {cyc}: word"
                seen["taken"] += r
                run = run + 1 if r else 0
                seen["full_rate"] = max(seen["full_rate"], run)
            await ctx.tick()

    simulate(m, bench)
    assert seen["taken"] > 500 and seen["full_rate"] >= 20, seen
    assert seen["full"] > 50 or not exact, seen


@pytest.mark.parametrize("depth", [2, 5])
def test_ready_fifo_cycle_exact_with_sync_fifo_buffered(depth):
    """ReadyFIFO (``w_rdy`` a register) and SyncFIFOBuffered: the same random writes (each taken on its own
    ``w_rdy``) and reads, in phases of writes often / rarely and reads often / rarely."""
    W = 16
    m = Module()
    m.submodules.dut = dut = ReadyFIFO(W, depth)
    m.submodules.ref = ref = SyncFIFOBuffered(width=W, depth=depth)
    rng = random.Random(depth)
    seen = {"full": 0, "taken": 0}

    async def bench(ctx):
        for cyc in range(1200):
            p_ready, p_write = [(1.0, 0.9), (0.7, 0.7), (0.2, 0.9), (1.0, 0.3)][(cyc // 100) % 4]
            w, data, r = rng.random() < p_write, rng.getrandbits(W), rng.random() < p_ready
            for f in (dut, ref):
                ctx.set(f.w_en, w)
                ctx.set(f.w_data, data)
                ctx.set(f.r_en, r)
            await ctx.delay(1e-9)
            for name in ("w_rdy", "r_rdy", "level"):
                assert ctx.get(getattr(dut, name)) == ctx.get(getattr(ref, name)), f"cycle {cyc}: {name}"
            if ctx.get(ref.r_rdy):
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data), f"cycle {cyc}: word"
                seen["taken"] += r
            seen["full"] += not ctx.get(ref.w_rdy)
            await ctx.tick()

    simulate(m, bench)
    assert seen["taken"] > 300 and seen["full"] > 50, seen


def test_depth_refused():
    with pytest.raises(ValueError, match="^depth=2: must be >= 3$"):
        PrefetchFIFO(8, 2, exact=True)
