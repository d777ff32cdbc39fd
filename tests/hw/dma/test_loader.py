"""DMA loader and writer: construction, burst splitting in the Amaranth simulator, cocotb benches."""
import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from mcf.hw.dma import DmaLoader, DmaWriter
from mcf.hw.dma.common import beats_and_keep, burst_beats
from mcf.sim.runner import run_cocotb

LOADER = {"data_width": 64, "buffer_bytes": 512, "buffers": 2}


@pytest.mark.parametrize("kw", [{"data_width": 48}, {"buffer_bytes": 1000}, {"buffers": 1},
                                {"buffer_bytes": 4, "data_width": 64}, {"max_outstanding": 0}])
def test_loader_bad_parameters(kw):
    with pytest.raises(ValueError):
        DmaLoader(**kw)


def test_construction():
    ld, wr = DmaLoader(128, buffer_bytes=4096), DmaWriter(64)
    assert ld.buffer_beats == 256 and len(ld.o.tdata) == 128 and len(wr.m_axi.wstrb) == 8
    assert not hasattr(ld.m_axi, "awvalid") and not hasattr(wr.m_axi, "arvalid")


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


@pytest.mark.cocotb
@pytest.mark.parametrize("case", ["load", "load_resp_error"])
def test_loader_cocotb(case, build_dir):
    run_cocotb(DmaLoader(**LOADER), "mcf.sim.dma.test_dma", build_dir, testcase=case,
               params={**LOADER, "descriptors": 24})


@pytest.mark.cocotb
@pytest.mark.parametrize("case", ["store", "store_resp_error"])
def test_writer_cocotb(case, build_dir):
    run_cocotb(DmaWriter(64), "mcf.sim.dma.test_dma", build_dir, testcase=case,
               params={"data_width": 64, "descriptors": 10, "max_length": 2000})


SYSTEM = {"data_width": 64, "buffer_bytes": 512, "buffers": 2, "meta_queue_depth": 4, "desc_queue_depth": 4}


@pytest.mark.cocotb
@pytest.mark.parametrize("case", ["bad_input", "program"])
def test_csr_dma_cocotb(case, build_dir):
    from mcf.hw.dma import ControlAndDma
    run_cocotb(ControlAndDma(**SYSTEM), "mcf.sim.dma.test_system", build_dir, testcase=case, params=SYSTEM)
