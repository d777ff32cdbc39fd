"""The weight loaders with one shared buffer memory (hw/dma/weights.py, round 30): construction, and a
cocotb bench with its pytest runners against one cocotbext-axi ``AxiRamRead`` a port.

Random descriptors (full buffers, one beat, a few beats, any length; random gaps) are dealt to the
ports in turn; every packet must equal its port's RAM bytes at the descriptor's address (the Python
model: descriptor i reads port i mod W), in descriptor order, with its ``done`` tag.  Every AXI channel
and the output pause at random.  Variants: the LUT6 build of the 4:1 choices (``primitive``) and the
AXI side on its own, faster clock (``axi_domain``).
"""
import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge
from cocotbext.axi import AxiRamRead, AxiReadBus, AxiStreamBus, AxiStreamSink

from mcf.hw.dma.weights import WeightLoaders
from mcf.sim.cocotb_util import (FaultyRamRead, bounded, collect_done, drive_descriptors, falling_edges, params,
                                 pauses, reset_first, start)
from mcf.sim.runner import run_cocotb
from mcf.spec import DmaDir
from mcf.sw.driver import Descriptor

RAM_BYTES = 1 << 16
#: Addresses at which port 1's RAM answers SLVERR (``poison``).
POISON = range(RAM_BYTES - 1024, RAM_BYTES)
#: The loaders the pytest runners build: 4 ports of 64 bits, words of 4 beats, 512-byte buffers.
LOADERS = {"ports": 4, "data_width": 64, "buffer_bytes": 512, "buffers": 2, "out_beats": 4}


@cocotb.test()
async def run_weights(dut):
    p = params()
    seed = p.get("seed", 1)
    rng = random.Random(seed)
    W, nbytes, bufsz = p["ports"], p["data_width"] // 8, p["buffer_bytes"]
    cross = p.get("axi_domain", "sync") != "sync"
    await reset_first(dut)
    aclk, arst = (dut.axi_clk, dut.axi_rst) if cross else (dut.clk, dut.rst)
    if cross:
        arst.value = 1
        cocotb.start_soon(Clock(aclk, 6, unit="ns").start())
    rams = []
    for k in range(W):
        bus = AxiReadBus.from_prefix(dut, f"m_axi{k}", bus_separator="__")
        ram = (FaultyRamRead if p.get("poison") else AxiRamRead)(bus, aclk, arst, size=RAM_BYTES)
        if p.get("poison"):
            ram.poison = POISON if k == 1 else range(0)
        ram.write(0, rng.randbytes(RAM_BYTES))
        ram.ar_channel.set_pause_generator(pauses(seed + 10 + k, 0.3))
        ram.r_channel.set_pause_generator(pauses(seed + 20 + k, 0.3))
        rams.append(ram)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "o", bus_separator="__"), dut.clk, dut.rst)
    sink.set_pause_generator(pauses(seed + 3, 0.3))
    done = []
    collect_done(dut, done)
    dut.desc__valid.value = 0
    if cross:
        cocotb.start_soon(_release(aclk, arst))
    await start(dut)

    descs = []
    for i in range(p.get("descriptors", 40)):
        length = rng.choice([bufsz, bufsz, nbytes, rng.randrange(1, 4 * nbytes), rng.randrange(1, bufsz + 1)])
        addr = rng.randrange((POISON.start - bufsz) // nbytes) * nbytes
        if p.get("poison") and i % W == 1 and rng.random() < 0.5:
            addr = POISON.start + rng.randrange(4) * nbytes     # every burst SLVERR (its data zeros)
            length = min(length, 3 * nbytes)
        descs.append(Descriptor(addr, length, rng.randrange(2), DmaDir.LOAD, i & 0xFF))
    cocotb.start_soon(drive_descriptors(dut, descs, rng, 0.3))
    for i, d in enumerate(descs):
        frame = await bounded(sink.recv(), 50 * d.length + 200_000, f"packet of descriptor {i}")
        expected = bytes(d.length) if d.addr in POISON else rams[i % W].read(d.addr, d.length)
        assert bytes(frame.tdata) == expected, (
            f"descriptor {i} ({d}, port {i % W}): {len(frame.tdata)} bytes, first difference at "
            f"{next((k for k, (a, b) in enumerate(zip(frame.tdata, expected)) if a != b), None)}")
    await falling_edges(dut, 20)
    assert sink.empty()
    assert [t for t, _ in done] == [d.tag for d in descs], done
    errs = [bool(e) for _, e in done]
    assert errs == [d.addr in POISON for d in descs], done
    assert not dut.busy.value


async def _release(aclk, arst):
    await ClockCycles(aclk, 6)
    arst.value = 0


def test_construction():
    wl = WeightLoaders(4, 128, buffer_bytes=4096, out_beats=8)
    assert len(wl.o.tdata) == 1024 and len(wl.m_axi3.rdata) == 128 and not hasattr(wl, "m_axi4")
    for kw in [{"ports": 1}, {"ports": 3}, {"out_beats": 3}, {"buffer_bytes": 64, "out_beats": 8},
               {"buffers": 1}, {"max_outstanding": 0}]:
        with pytest.raises(ValueError):
            WeightLoaders(**kw)


@pytest.mark.cocotb
@pytest.mark.parametrize("case", ["plain", "primitive", "cross", "poison", "one_beat_words"])
def test_weights_cocotb(case, build_dir):
    """The plain build; the LUT6 build of its 4:1 choices (the Qwen node's); two ports on their own clock;
    SLVERR answers on port 1; words of one beat (every beat a pending word: RREADY held)."""
    kw = {"plain": LOADERS, "primitive": {**LOADERS, "primitive": True}, "poison": LOADERS,
          "cross": {**LOADERS, "ports": 2, "out_beats": 2, "axi_domain": "axi"},
          "one_beat_words": {**LOADERS, "out_beats": 1}}[case]
    run_cocotb(WeightLoaders(**kw), __name__, build_dir, testcase="run_weights",
               params={**kw, "seed": 5 + len(case), "poison": case == "poison"})
