"""The scratchpad (hw/compute/exec/spad.py) in the Amaranth simulator: word-enable writes leave
the other words, exponents are written on their own enable, a read answers on the next cycle and
holds while not enabled."""
import random

import pytest

from mcf.hw.compute.exec.spad import Scratchpad
from mcf.sim.amaranth_util import simulate


def test_lane_and_exponent_writes_then_reads():
    dut = Scratchpad(beats=16, lanes=4)
    rng = random.Random(1)
    model = {a: ([0] * 4, 0) for a in range(16)}
    writes = []
    for _ in range(60):
        a, lanes, exp_en = rng.randrange(16), rng.randrange(16), rng.random() < 0.5
        words = [rng.getrandbits(32) for _ in range(4)]
        e = rng.randrange(-128, 128)
        writes.append((a, lanes, exp_en, words, e))
        old, olde = model[a]
        model[a] = ([words[k] if lanes >> k & 1 else old[k] for k in range(4)], e if exp_en else olde)

    async def bench(ctx):
        for a, lanes, exp_en, words, e in writes:
            ctx.set(dut.wr.addr, a); ctx.set(dut.wr.lanes, lanes); ctx.set(dut.wr.exp_en, exp_en)
            ctx.set(dut.wr.data, sum(w << (32 * k) for k, w in enumerate(words))); ctx.set(dut.wr.exp, e)
            await ctx.tick()
        ctx.set(dut.wr.lanes, 0); ctx.set(dut.wr.exp_en, 0)
        for a in range(16):
            ctx.set(dut.rd.en, 1); ctx.set(dut.rd.addr, a)
            await ctx.tick()
            ctx.set(dut.rd.en, 0); ctx.set(dut.rd.addr, (a + 5) % 16)
            await ctx.tick()          # held while en is low
            words, e = model[a]
            assert ctx.get(dut.rd.data) == sum(w << (32 * k) for k, w in enumerate(words)), a
            assert ctx.get(dut.rd.exp) == e, a

    simulate(dut, bench)


def test_construction():
    assert Scratchpad(2048, 8).addr_bits == 11
    with pytest.raises(ValueError, match="^beats=1, lanes=8: need beats >= 2 and lanes >= 1$"):
        Scratchpad(1, 8)


def test_banked_reads_return_consecutive_beats():
    """Four banks: beat a in bank a mod 4; a read at any a returns beats a .. a + 3 on ``wide``
    (in order, whatever a's alignment) and beat a on ``data`` / ``exp``; writes go to one bank."""
    B, beats, lanes = 4, 32, 2
    dut = Scratchpad(beats=beats, lanes=lanes, banks=B)
    rng = random.Random(2)
    model = {a: ([rng.getrandbits(32) for _ in range(lanes)], rng.randrange(-128, 128)) for a in range(beats)}

    async def bench(ctx):
        for a, (words, e) in model.items():
            ctx.set(dut.wr.addr, a); ctx.set(dut.wr.lanes, (1 << lanes) - 1); ctx.set(dut.wr.exp_en, 1)
            ctx.set(dut.wr.data, sum(w << (32 * k) for k, w in enumerate(words))); ctx.set(dut.wr.exp, e)
            await ctx.tick()
        ctx.set(dut.wr.lanes, 0); ctx.set(dut.wr.exp_en, 0)
        for a in list(range(beats - B + 1)) + [rng.randrange(beats - B + 1) for _ in range(20)]:
            ctx.set(dut.rd.en, 1); ctx.set(dut.rd.addr, a)
            await ctx.tick()
            ctx.set(dut.rd.en, 0); ctx.set(dut.rd.addr, (a + 3) % beats)
            await ctx.tick()          # held while en is low
            beat = [sum(w << (32 * k) for k, w in enumerate(model[a + x][0])) for x in range(B)]
            assert ctx.get(dut.rd.wide) == sum(v << (32 * lanes * x) for x, v in enumerate(beat)), a
            assert ctx.get(dut.rd.data) == beat[0] and ctx.get(dut.rd.exp) == model[a][1], a

    simulate(dut, bench)
    with pytest.raises(ValueError, match="^banks=3: a power of two dividing beats=32"):
        Scratchpad(32, 2, banks=3)


def test_wide_writes_skip_banks():
    """Wide writes (``wide_en``) at bank-aligned addresses write every bank's beat but those set in
    ``wide_skip`` (their words and exponents stay): random masks, then every beat read back."""
    B, beats, lanes = 4, 32, 2
    dut = Scratchpad(beats=beats, lanes=lanes, banks=B)
    rng = random.Random(3)
    model = {a: ([0] * lanes, 0) for a in range(beats)}
    writes = []
    for _ in range(40):
        a, skip, e = rng.randrange(beats // B) * B, rng.randrange(1 << B), rng.randrange(-128, 128)
        data = [[rng.getrandbits(32) for _ in range(lanes)] for _ in range(B)]
        writes.append((a, skip, e, data))
        for x in range(B):
            if not skip >> x & 1:
                model[a + x] = (data[x], e)

    async def bench(ctx):
        for a, skip, e, data in writes:
            ctx.set(dut.wr.addr, a); ctx.set(dut.wr.lanes, (1 << lanes) - 1); ctx.set(dut.wr.exp_en, 1)
            ctx.set(dut.wr.wide_en, 1); ctx.set(dut.wr.wide_skip, skip); ctx.set(dut.wr.exp, e)
            ctx.set(dut.wr.wide, sum(w << (32 * (x * lanes + k)) for x in range(B) for k, w in enumerate(data[x])))
            await ctx.tick()
        ctx.set(dut.wr.lanes, 0); ctx.set(dut.wr.exp_en, 0); ctx.set(dut.wr.wide_en, 0)
        for a in range(beats):
            ctx.set(dut.rd.en, 1); ctx.set(dut.rd.addr, a)
            await ctx.tick()
            ctx.set(dut.rd.en, 0)
            await ctx.tick()
            words, e = model[a]
            assert ctx.get(dut.rd.data) == sum(w << (32 * k) for k, w in enumerate(words)), a
            assert ctx.get(dut.rd.exp) == e, a

    simulate(dut, bench)
