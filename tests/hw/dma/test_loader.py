"""DMA loader (hw/dma/loader.py): construction, and the cocotb benches with their pytest runners
against cocotbext-axi ``AxiRamRead``.

Every packet must equal the bytes at its descriptor's address.  A bus monitor checks every
burst (INCR, <= 256 beats, no 4 KiB crossing, full-width beats) and counts reads in flight.
``backpressure`` pauses all channels at random; without it the bench measures bytes per
cycle (``mcf bench dma`` runs it that way).
"""
import random

import cocotb
import pytest
from cocotb.triggers import FallingEdge
from cocotbext.axi import AxiRamRead, AxiReadBus, AxiStreamBus, AxiStreamSink

from mcf.hw.dma import DmaLoader
from mcf.sim.cocotb_util import (AxiBurstMonitor, FaultyRamRead, bounded, collect_done, drive_descriptors,
                                 falling_edges, params, pauses, report, reset_first, start)
from mcf.sim.runner import run_cocotb
from mcf.spec import DmaDir
from mcf.sw.driver import Descriptor

RAM_BYTES = 1 << 18
#: Addresses at which the faulty RAM answers SLVERR.
POISON = range(RAM_BYTES - 4096, RAM_BYTES)
#: The loader the pytest runners build (``mcf bench dma`` builds its own, larger one).
LOADER = {"data_width": 64, "buffer_bytes": 512, "buffers": 2}


def count_overlap(dut, counter: list):
    """Cycles in which the loader both fills (R beat) and drains (``o`` beat): the ping-pong."""
    async def run():
        while True:
            await FallingEdge(dut.clk)
            if (dut.m_axi__rvalid.value and dut.m_axi__rready.value
                    and dut.o__tvalid.value and dut.o__tready.value):
                counter[0] += 1
    return cocotb.start_soon(run())


@cocotb.test()
async def run_load(dut):
    """Descriptors -> AR bursts -> buffers -> one packet per descriptor equal to the RAM bytes."""
    p = params()
    seed, bp = p.get("seed", 1), p.get("backpressure", True)
    rng = random.Random(seed)
    nbytes, bufsz, nbuf = p["data_width"] // 8, p["buffer_bytes"], p["buffers"]
    await reset_first(dut)
    ram = AxiRamRead(AxiReadBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst,
                     size=RAM_BYTES)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "o", bus_separator="__"), dut.clk, dut.rst)
    if bp:
        ram.ar_channel.set_pause_generator(pauses(seed + 1, 0.3))
        ram.r_channel.set_pause_generator(pauses(seed + 2, 0.3))
        sink.set_pause_generator(pauses(seed + 3, 0.3))
    ram.write(0, rng.randbytes(RAM_BYTES))
    mon = AxiBurstMonitor(dut, "ar", nbytes)
    cocotb.start_soon(mon.run())
    done, overlap = [], [0]
    collect_done(dut, done)
    count_overlap(dut, overlap)
    dut.desc__valid.value = 0
    await start(dut)

    descs = []
    for i in range(p.get("descriptors", 24)):
        if p.get("long"):
            length, addr = bufsz, rng.randrange(RAM_BYTES // bufsz) * bufsz
        else:
            length = rng.choice([nbytes, bufsz, rng.randrange(1, bufsz + 1), rng.randrange(1, 3 * nbytes)])
            addr = rng.randrange((RAM_BYTES - bufsz) // nbytes) * nbytes
        buffer = i % nbuf if p.get("long") or rng.random() < 0.7 else rng.randrange(nbuf)
        descs.append(Descriptor(addr, length, buffer, DmaDir.LOAD, i))
    cocotb.start_soon(drive_descriptors(dut, descs, rng, 0.0 if p.get("long") else 0.3))
    for i, d in enumerate(descs):
        frame = await bounded(sink.recv(), 50 * d.length + 200_000, f"packet of descriptor {i}")
        expected = ram.read(d.addr, d.length)
        assert bytes(frame.tdata) == expected, (
            f"descriptor {i} ({d}): {len(frame.tdata)} bytes, first difference at "
            f"{next((k for k, (a, b) in enumerate(zip(frame.tdata, expected)) if a != b), None)}")
    await falling_edges(dut, 4)
    assert sink.empty()
    assert not mon.errors, mon.errors[:5]
    assert [t for t, _ in done] == [d.tag for d in descs], done
    assert not any(e for _, e in done)
    expect_beats = sum(-(-d.length // nbytes) for d in descs)
    assert sum(b for _, b in mon.bursts) == expect_beats
    assert not dut.busy.value
    total = sum(d.length for d in descs)
    cycles = mon.last_cycle - mon.first_cycle + 1
    report(p, {"bytes": total, "cycles": cycles, "bytes_per_cycle": total / cycles,
               "peak_bytes_per_cycle": nbytes, "utilization": total / cycles / nbytes,
               "max_reads_in_flight": mon.max_in_flight, "bursts": len(mon.bursts),
               "fill_drain_overlap_cycles": overlap[0]})
    if not bp:
        assert mon.max_in_flight >= 2, f"only {mon.max_in_flight} read burst(s) in flight"
    if p.get("long"):
        # Whole-buffer loads alternating buffers: each drain overlaps the next fill.
        assert overlap[0] >= (len(descs) - 1) * (bufsz // nbytes) // 2, f"overlap {overlap[0]} cycles"


@cocotb.test()
async def run_load_resp_error(dut):
    """A read beyond the RAM answers SLVERR: the descriptor completes with resp_error."""
    p = params()
    nbytes = p["data_width"] // 8
    await reset_first(dut)
    FaultyRamRead(AxiReadBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst,
                  size=RAM_BYTES).poison = POISON
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "o", bus_separator="__"), dut.clk, dut.rst)
    done = []
    collect_done(dut, done)
    await start(dut)
    descs = [Descriptor(POISON.start - 2 * nbytes, 4 * nbytes, 0, DmaDir.LOAD, 5),
             Descriptor(0, nbytes, 1, DmaDir.LOAD, 6)]
    cocotb.start_soon(drive_descriptors(dut, descs, random.Random(0), 0))
    for d in descs:
        frame = await bounded(sink.recv(), 100_000, "packet")
        assert len(frame.tdata) == d.length
    await falling_edges(dut, 4)
    assert done == [(5, 1), (6, 0)], done


@pytest.mark.parametrize("kw", [{"data_width": 48}, {"buffer_bytes": 1000}, {"buffers": 1},
                                {"buffer_bytes": 4, "data_width": 64}, {"max_outstanding": 0}])
def test_loader_bad_parameters(kw):
    with pytest.raises(ValueError):
        DmaLoader(**kw)


def test_construction():
    ld = DmaLoader(128, buffer_bytes=4096)
    assert ld.buffer_beats == 256 and len(ld.o.tdata) == 128
    assert not hasattr(ld.m_axi, "awvalid")


@pytest.mark.cocotb
@pytest.mark.parametrize("case", ["load", "load_resp_error"])
def test_loader_cocotb(case, build_dir):
    run_cocotb(DmaLoader(**LOADER), __name__, build_dir, testcase=f"run_{case}",
               params={**LOADER, "descriptors": 24})


def test_wide_construction():
    """``out_beats``: the output is that many bus beats wide, each buffer that many banks."""
    ld = DmaLoader(64, buffer_bytes=512, out_beats=2)
    assert len(ld.o.tdata) == 128 and len(ld.o.tkeep) == 16 and len(ld.m_axi.rdata) == 64
    with pytest.raises(ValueError, match="out_beats=3: must be a power of two"):
        DmaLoader(64, out_beats=3)
    with pytest.raises(ValueError, match="smaller than one 4-beat output word"):
        DmaLoader(64, buffer_bytes=16, out_beats=4)


@pytest.mark.cocotb
def test_loader_wide_cocotb(build_dir):
    """The execute unit's weight loader (two beats per output word): random lengths (partial last
    words and beats) and buffers, all channels paused at random: every packet equals the RAM."""
    run_cocotb(DmaLoader(**LOADER, out_beats=2), __name__, build_dir, testcase="run_load",
               params={**LOADER, "descriptors": 24, "seed": 7})
