"""DMA writer (hw/dma/writer.py): construction, and the cocotb benches with their pytest runners
against cocotbext-axi ``AxiRamWrite``.

The whole RAM must equal a Python model of the writes, so bytes a partial WSTRB must keep
are checked too.  A bus monitor checks every burst (INCR, <= 256 beats, no 4 KiB crossing,
full-width beats) and counts writes in flight.  ``backpressure`` pauses all channels at
random; without it the bench measures bytes per cycle (``mcf bench dma`` runs it that way).
"""
import random

import cocotb
import pytest
from cocotb.triggers import FallingEdge
from cocotbext.axi import AxiRamWrite, AxiStreamBus, AxiStreamFrame, AxiStreamSource, AxiWriteBus

from mcf.hw.dma import DmaWriter
from mcf.sim.cocotb_util import (AxiBurstMonitor, FaultyRamWrite, bounded, collect_done, drive_descriptors,
                                 falling_edges, params, pauses, report, reset_first, start)
from mcf.sim.runner import run_cocotb
from mcf.spec import DmaDir
from mcf.sw.driver import Descriptor

RAM_BYTES = 1 << 18
#: Addresses at which the faulty RAM answers SLVERR.
POISON = range(RAM_BYTES - 4096, RAM_BYTES)
#: The writer the pytest runners build, and its bench's transfers.
WRITER = {"data_width": 64}


@cocotb.test()
async def run_store(dut):
    """Descriptors + stream -> AW/W bursts; the RAM equals a model of the writes."""
    p = params()
    seed, bp = p.get("seed", 2), p.get("backpressure", True)
    rng = random.Random(seed)
    nbytes = p["data_width"] // 8
    await reset_first(dut)
    ram = AxiRamWrite(AxiWriteBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst,
                      size=RAM_BYTES)
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "i", bus_separator="__"), dut.clk, dut.rst)
    if bp:
        ram.aw_channel.set_pause_generator(pauses(seed + 1, 0.3))
        ram.w_channel.set_pause_generator(pauses(seed + 2, 0.3))
        ram.b_channel.set_pause_generator(pauses(seed + 3, 0.3))
        src.set_pause_generator(pauses(seed + 4, 0.3))
    model = bytearray([0xEE]) * RAM_BYTES
    ram.write(0, bytes(model))
    mon = AxiBurstMonitor(dut, "aw", nbytes)
    cocotb.start_soon(mon.run())
    done = []
    collect_done(dut, done)
    dut.desc__valid.value = 0
    await start(dut)

    descs, payloads = [], []
    max_len = p.get("max_length", 3000)
    for i in range(p.get("descriptors", 24)):
        if p.get("long"):
            length = max_len
            addr = rng.randrange((RAM_BYTES - length) // 4096) * 4096
        else:
            length = rng.choice([1, nbytes, nbytes + 1, rng.randrange(1, max_len + 1), 4096 + 3 * nbytes])
            addr = rng.randrange((RAM_BYTES - length) // nbytes) * nbytes
        beats = -(-length // nbytes)
        data = rng.randbytes(beats * nbytes)      # the tail past ``length`` must not be written
        descs.append(Descriptor(addr, length, 0, DmaDir.STORE, i))
        payloads.append(data)
        model[addr:addr + length] = data[:length]
    cocotb.start_soon(drive_descriptors(dut, descs, rng, 0.0 if p.get("long") else 0.3))
    for data in payloads:
        await src.send(AxiStreamFrame(data))
    for i in range(len(descs)):
        while len(done) <= i:
            await bounded(FallingEdge(dut.clk), 500_000, f"completion of descriptor {i}")
    assert [t for t, _ in done] == [d.tag for d in descs], done
    assert not any(e for _, e in done)
    assert not mon.errors, mon.errors[:5]
    got = ram.read(0, RAM_BYTES)
    if got != bytes(model):
        k = next(k for k in range(RAM_BYTES) if got[k] != model[k])
        raise AssertionError(f"RAM differs from the model at {k:#x}: {got[k]:#x} != {model[k]:#x}")
    await falling_edges(dut, 4)
    assert not dut.busy.value
    total = sum(d.length for d in descs)
    cycles = mon.last_cycle - mon.first_cycle + 1
    report(p, {"bytes": total, "cycles": cycles, "bytes_per_cycle": total / cycles,
               "peak_bytes_per_cycle": nbytes, "utilization": total / cycles / nbytes,
               "max_writes_in_flight": mon.max_in_flight, "bursts": len(mon.bursts)})


@cocotb.test()
async def run_store_resp_error(dut):
    """A write the RAM refuses (SLVERR) completes its descriptor with resp_error."""
    p = params()
    nbytes = p["data_width"] // 8
    await reset_first(dut)
    FaultyRamWrite(AxiWriteBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst,
                   size=RAM_BYTES).poison = POISON
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "i", bus_separator="__"), dut.clk, dut.rst)
    done = []
    collect_done(dut, done)
    await start(dut)
    descs = [Descriptor(POISON.start - 4096, 4096 + nbytes, 0, DmaDir.STORE, 9),
             Descriptor(0, 3 * nbytes, 0, DmaDir.STORE, 10)]
    cocotb.start_soon(drive_descriptors(dut, descs, random.Random(0), 0))
    for d in descs:
        await src.send(AxiStreamFrame(bytes(-(-d.length // nbytes) * nbytes)))
    while len(done) < 2:
        await bounded(FallingEdge(dut.clk), 100_000, "completions")
    assert done == [(9, 1), (10, 0)], done


def test_construction():
    wr = DmaWriter(64)
    assert len(wr.m_axi.wstrb) == 8 and len(wr.i.tdata) == 64
    assert not hasattr(wr.m_axi, "arvalid")


@pytest.mark.cocotb
@pytest.mark.parametrize("case", ["store", "store_resp_error"])
def test_writer_cocotb(case, build_dir):
    run_cocotb(DmaWriter(**WRITER), __name__, build_dir, testcase=f"run_{case}",
               params={**WRITER, "descriptors": 10, "max_length": 2000})
