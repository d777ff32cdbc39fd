"""Replica directory (hw/compute/directory.py) in the Amaranth simulator: states written by the
runtime read back one cycle after a lookup, readable exactly for VALID and DRAINING (the
spec's ReplicaState, the MARS directory's encoding)."""
import random

from mcf.hw.compute.directory import ReplicaDirectory
from mcf.sim.amaranth_util import simulate
from mcf.spec.plan import ReplicaState


def test_write_then_lookup():
    dut = ReplicaDirectory(block_bits=6)
    rng = random.Random(4)
    table = {b: rng.choice(list(ReplicaState)) for b in rng.sample(range(64), 40)}

    async def bench(ctx):
        for b, st in table.items():
            ctx.set(dut.wr_en, 1); ctx.set(dut.wr_block, b); ctx.set(dut.wr_state, st)
            await ctx.tick()
        ctx.set(dut.wr_en, 0)
        ctx.set(dut.lookup_en, 1)
        for b in range(64):
            ctx.set(dut.lookup_block, b)
            await ctx.tick()
            want = table.get(b, ReplicaState.INVALID)
            assert ctx.get(dut.state) == want, b
            assert ctx.get(dut.readable) == want.readable, b
        ctx.set(dut.lookup_en, 0)
        ctx.set(dut.rd_en, 1)
        for b in range(64):             # the registers' port reads the same table
            ctx.set(dut.rd_block, b)
            await ctx.tick()
            assert ctx.get(dut.rd_state) == table.get(b, ReplicaState.INVALID), b

    simulate(dut, bench)
    assert ReplicaDirectory(10).block_bits == 10
