"""DMA burst arithmetic (hw/dma/common.py) in the Amaranth simulator, against a direct Python
computation."""
import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from mcf.hw.dma.common import beats_and_keep, burst_beats

@pytest.mark.parametrize("bus_log2", [3, 4])
def test_burst_arithmetic(bus_log2):
    """burst_beats / beats_and_keep against a direct Python computation."""
    m = Module()
    addr, remaining, length = Signal(40), Signal(32), Signal(32)
    n = burst_beats(m, addr, remaining, bus_log2)
    beats, keep = beats_and_keep(m, length, bus_log2)
    nb = 1 << bus_log2
    cases = [(0, 1, 1), (4096 - nb, 300, nb + 1), (0, 1000, 4096), (128 * nb, 500, 0x1234), (4096 * 7 + 5 * nb, 2, 7)]

    async def bench(ctx):
        for a, r, ln in cases:
            ctx.set(addr, a); ctx.set(remaining, r); ctx.set(length, ln)
            expect = min(r, 256, (4096 - a % 4096) // nb)
            assert ctx.get(n) == expect, (a, r)
            assert ctx.get(beats) == -(-ln // nb)
            tail = ln % nb
            assert ctx.get(keep) == ((1 << nb) - 1 if tail == 0 else (1 << tail) - 1)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
