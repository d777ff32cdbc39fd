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
        writes.append((a, True, skip, e, (1 << lanes) - 1, data))
        for x in range(B):
            if not skip >> x & 1:
                model[a + x] = (data[x], e)
    _write_then_read_back(dut, writes, model, rng)


def _write_then_read_back(dut, writes, model, rng):
    """The writes (addr, wide_en, wide_skip, exp, lanes, the banks' words: on ``wide``; random ``data``), one a
    cycle, then every beat read back against ``model`` (beat -> (words, exp))."""
    B, lanes = dut.banks, dut.lanes

    async def bench(ctx):
        for a, wide, skip, e, lmask, data in writes:
            ctx.set(dut.wr.addr, a); ctx.set(dut.wr.lanes, lmask); ctx.set(dut.wr.exp_en, 1)
            ctx.set(dut.wr.wide_en, wide); ctx.set(dut.wr.wide_skip, skip); ctx.set(dut.wr.exp, e)
            ctx.set(dut.wr.data, rng.getrandbits(32 * lanes))
            ctx.set(dut.wr.wide, sum(w << (32 * (x * lanes + k)) for x in range(B) for k, w in enumerate(data[x])))
            await ctx.tick()
        ctx.set(dut.wr.lanes, 0); ctx.set(dut.wr.exp_en, 0); ctx.set(dut.wr.wide_en, 0)
        for a in range(dut.beats):
            ctx.set(dut.rd.en, 1); ctx.set(dut.rd.addr, a)
            await ctx.tick()
            ctx.set(dut.rd.en, 0)
            await ctx.tick()
            words, e = model[a]
            assert ctx.get(dut.rd.data) == sum(w << (32 * k) for k, w in enumerate(words)), a
            assert ctx.get(dut.rd.exp) == e, a

    simulate(dut, bench)


def test_placed_writes_take_the_bank_slice():
    """(round 31) ``placed``: every write's data on ``wide`` -- a narrow write (``wide_en`` low) takes the slice of
    its address's bank (random words in the other slices, unwritten), a wide one every bank's but those skipped;
    ``data`` is not read (random).  Mixed random writes, then every beat read back."""
    B, beats, lanes = 4, 32, 2
    dut = Scratchpad(beats=beats, lanes=lanes, banks=B, placed=True)
    rng = random.Random(4)
    model = {a: ([0] * lanes, 0) for a in range(beats)}
    writes = []
    for _ in range(80):
        wide, e, lmask = rng.random() < 0.5, rng.randrange(-128, 128), rng.randrange(1, 1 << lanes)
        a = rng.randrange(beats // B) * B if wide else rng.randrange(beats)
        skip = rng.randrange(1 << B) if wide else 0
        data = [[rng.getrandbits(32) for _ in range(lanes)] for _ in range(B)]
        writes.append((a, wide, skip, e, lmask, data))
        for x in (range(B) if wide else [a % B]):
            if not skip >> x & 1:
                addr = a + x if wide else a
                old = model[addr][0]
                model[addr] = ([data[x][k] if lmask >> k & 1 else old[k] for k in range(lanes)], e)

    _write_then_read_back(dut, writes, model, rng)
