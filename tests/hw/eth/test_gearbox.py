"""66:64 gearboxes (hw/eth/gearbox.py), in Amaranth's simulator against a bit-list model of
the line: the transmit gearbox sends every block, header bit 0 first, 32 blocks per 33
words; the receive gearbox cuts the line into 66-bit blocks and each slip moves the cut by
one bit."""
from __future__ import annotations

import random

from amaranth.sim import Simulator

from mcf.hw.eth.gearbox import RxGearbox, TxGearbox

PARAMS = {"seed": 9, "words": 200}


def bits_of(value, n):
    return [(value >> i) & 1 for i in range(n)]


def value_of(bits):
    return sum(b << i for i, b in enumerate(bits))


def test_tx_gearbox():
    rng = random.Random(PARAMS["seed"])
    dut = TxGearbox()
    blocks = [(rng.getrandbits(2), rng.getrandbits(64)) for _ in range(PARAMS["words"])]
    line, requests = [], []

    async def bench(ctx):
        i = 0
        for cycle in range(PARAMS["words"]):
            header, data = blocks[i]
            ctx.set(dut.i.header, header)
            ctx.set(dut.i.data, data)
            req = ctx.get(dut.req)
            requests.append(req)
            await ctx.tick()
            if req:
                i += 1
            line.extend(bits_of(ctx.get(dut.gt_data), 64))     # the word this edge registered
        return i

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    sent = []
    for header, data in blocks[:sum(requests)]:
        sent += bits_of(header, 2) + bits_of(data, 64)
    assert line == sent[:len(line)]
    # one cycle in 33 asks for no block
    assert [k for k, r in enumerate(requests) if not r][:3] == [32, 65, 98]


def test_rx_gearbox_with_slips():
    rng = random.Random(PARAMS["seed"] + 1)
    dut = RxGearbox()
    line = [rng.getrandbits(1) for _ in range(64 * PARAMS["words"])]
    got, slips = [], []

    async def bench(ctx):
        dropped = 0
        for w in range(PARAMS["words"]):
            ctx.set(dut.gt_data, value_of(line[64 * w:64 * w + 64]))
            slip = rng.random() < 0.05
            ctx.set(dut.slip, slip)
            await ctx.tick()
            dropped += slip
            if ctx.get(dut.valid):
                got.append((ctx.get(dut.o.header), ctx.get(dut.o.data), dropped))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert len(got) > PARAMS["words"] * 0.9
    # each block is the next 66 line bits after the bits dropped by slips so far; a slip
    # drops one bit before the block that leaves with it
    pos = 0
    for k, (header, data, dropped) in enumerate(got):
        prev = got[k - 1][2] if k else 0
        pos += dropped - prev
        want = line[pos:pos + 66]
        assert value_of(bits_of(header, 2) + bits_of(data, 64)) == value_of(want), f"block {k}"
        pos += 66
