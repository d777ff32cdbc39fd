"""hw/fifo.py's PrefetchFIFO (the combinational and the synchronous, ``sync_read``, memory read),
BlockFIFO, ReadyFIFO and TwoRegisterFIFO against Amaranth's SyncFIFOBuffered, side by side in the Amaranth
simulator: the same valid and head word in every cycle (and, ``exact``, the same ``w_rdy`` and
level)."""
import random

import pytest
from amaranth import Module
from amaranth.lib.fifo import SyncFIFOBuffered

from mcf.hw.fifo import BlockFIFO, PrefetchFIFO, ReadyFIFO, TwoRegisterFIFO
from mcf.sim.amaranth_util import simulate


@pytest.mark.parametrize("depth,exact,kind", [(8, False, "prefetch"), (3, True, "prefetch"), (7, True, "prefetch"),
                                              (6, True, "block"), (5, True, "block")])
def test_cycle_exact_with_sync_fifo_buffered(depth, exact, kind):
    """Writes offered at random (``exact``: to both, each takes it on its own ``w_rdy``; else only
    while the reference has room), the same random ready, in phases of ready always / often /
    rarely and writes often / rarely.  ``prefetch``: two PrefetchFIFOs, the comb read and the
    synchronous one (``sync_read``: a wrong read address or a read not transparent for the write
    fails here); ``block``: ``BlockFIFO`` with its top 3 bits in LUT RAM (memories of 5 and 4
    words: the pointers' wrap with and without a compare)."""
    W = 16
    m = Module()
    if kind == "prefetch":
        m.submodules.dut = dut = PrefetchFIFO(W, depth, exact=exact)
        m.submodules.dut2 = dut2 = PrefetchFIFO(W, depth, exact=exact, sync_read=True)
        duts = (dut, dut2)
    else:
        m.submodules.dut = dut = BlockFIFO(W, depth, fast=3)
        duts = (dut,)
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
            for x, en in ((ref.w_en, w), (ref.w_data, data), (ref.r_en, r)):
                ctx.set(x, en)
            for d in duts:
                for x, en in ((d.w_en, w), (d.w_data, data), (d.r_en, r)):
                    ctx.set(x, en)
            await ctx.delay(1e-9)
            for d in duts:
                assert ctx.get(d.r_rdy) == ctx.get(ref.r_rdy), f"cycle {cyc}: valid"
                if exact:
                    assert ctx.get(d.w_rdy) == ctx.get(ref.w_rdy), f"cycle {cyc}: w_rdy"
                    assert ctx.get(d.level) == ctx.get(ref.level), f"cycle {cyc}: level"
                if ctx.get(ref.r_rdy):
                    assert ctx.get(d.r_data) == ctx.get(ref.r_data), f"cycle {cyc}: word"
            seen["full"] += exact and not ctx.get(ref.w_rdy)
            if ctx.get(ref.r_rdy):
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


def test_two_register_fifo_cycle_exact():
    """TwoRegisterFIFO against SyncFIFOBuffered(depth=2): random writes and reads, every output
    compared in every cycle."""
    W = 16
    m = Module()
    m.submodules.dut = dut = TwoRegisterFIFO(W)
    m.submodules.ref = ref = SyncFIFOBuffered(width=W, depth=2)
    rng = random.Random(2)
    seen = {"both": 0, "full": 0}

    async def bench(ctx):
        for cyc in range(600):
            p_ready, p_write = [(1.0, 0.9), (0.5, 0.7), (0.2, 0.9)][(cyc // 100) % 3]
            w, r, data = rng.random() < p_write, rng.random() < p_ready, rng.getrandbits(W)
            for x, v in ((dut.w_en, w), (dut.w_data, data), (dut.r_en, r),
                         (ref.w_en, w), (ref.w_data, data), (ref.r_en, r)):
                ctx.set(x, v)
            await ctx.delay(1e-9)
            for name in ("w_rdy", "r_rdy", "level"):
                assert ctx.get(getattr(dut, name)) == ctx.get(getattr(ref, name)), f"cycle {cyc}: {name}"
            if ctx.get(ref.r_rdy):
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data), f"cycle {cyc}: word"
            seen["both"] += ctx.get(ref.r_rdy) and r and w and ctx.get(ref.w_rdy)
            seen["full"] += not ctx.get(ref.w_rdy)
            await ctx.tick()

    simulate(m, bench)
    assert seen["both"] > 20 and seen["full"] > 100, seen
