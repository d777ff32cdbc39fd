"""CRC-32 steps (hw/eth/crc.py) against zlib: the parallel XOR sets over 1..8 bytes a cycle,
chained over a frame, give zlib.crc32; a frame followed by its FCS leaves the residue."""
import random
import zlib

from amaranth import Module, Signal
from amaranth.sim import Simulator

from mcf.hw.eth.crc import PRESET, RESIDUE, crc_step_keep, serial_step


def test_serial_definition_is_zlib():
    rng = random.Random(1)
    for n in (0, 1, 7, 64, 1500):
        data = rng.randbytes(n)
        assert serial_step(PRESET, data) ^ PRESET == zlib.crc32(data)
        fcs = zlib.crc32(data).to_bytes(4, "little")
        assert serial_step(PRESET, data + fcs) == RESIDUE


def test_parallel_steps_match_zlib():
    rng = random.Random(2)
    m = Module()
    crc, data, nbytes, out = Signal(32), Signal(64), Signal(range(9)), Signal(32)
    m.d.comb += out.eq(crc_step_keep(crc, data, nbytes))
    frames = [rng.randbytes(rng.randrange(1, 80)) for _ in range(40)]

    async def bench(ctx):
        for frame in frames:
            value = PRESET
            for i in range(0, len(frame), 8):
                chunk = frame[i:i + 8]
                ctx.set(crc, value)
                ctx.set(data, int.from_bytes(chunk.ljust(8, b"\xa5"), "little"))   # junk past nbytes
                ctx.set(nbytes, len(chunk))
                await ctx.delay(1e-9)
                value = ctx.get(out)
            assert value ^ PRESET == zlib.crc32(frame), len(frame)
        ctx.set(nbytes, 0)                       # zero bytes: the register stays
        ctx.set(crc, 0x12345678)
        await ctx.delay(1e-9)
        assert ctx.get(out) == 0x12345678

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
