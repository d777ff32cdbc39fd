"""Packetizer (hw/packet/packetizer.py): construction, and the cocotb benches with their
pytest runners against ``mcf.spec`` encoding.

Random pauses on all three ports; every packet out equals ``spec.to_beats`` of the packet
in.  ``run_backpressure`` holds the output and checks that the compute side can keep pushing
until the FIFOs are full, and that nothing is lost once the output runs again.
"""
import random

import cocotb
import pytest
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from mcf import spec
from mcf.hw.packet.packetizer import Packetizer
from mcf.sim.cocotb_util import bounded, params, pauses, start
from mcf.sim.nic.traffic import random_meta
from mcf.sim.runner import run_cocotb
from mcf.spec.packet import pad_header


def _ports(dut, seed, sink_pause=0.3):
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "payload", bus_separator="__"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "o", bus_separator="__"), dut.clk, dut.rst)
    src.set_pause_generator(pauses(seed + 1))
    if sink_pause:
        sink.set_pause_generator(pauses(seed + 2, sink_pause))
    return src, sink


async def _drive_meta(dut, metas, rng, gap=0.3):
    for meta in metas:
        while rng.random() < gap:
            await RisingEdge(dut.clk)
        dut.meta__payload.value = meta.to_int()
        dut.meta__valid.value = 1
        await RisingEdge(dut.clk)
        while not dut.meta__ready.value:
            await RisingEdge(dut.clk)
        dut.meta__valid.value = 0


@cocotb.test()
async def run_packetize(dut):
    p = params()
    width, count, seed = p["data_width"], p.get("packets", 150), p.get("seed", 5)
    rng = random.Random(seed)
    dut.meta__valid.value = 0
    await start(dut)   # bus models after reset: Icarus leaves some comb outputs X until then
    src, sink = _ports(dut, seed)
    packets = []
    for _ in range(count):
        length = rng.choice([0, 1, 8, 15, 16, 17, rng.randrange(1, 400)])
        packets.append(spec.Packet(random_meta(rng, length), rng.randbytes(length)))
    cocotb.start_soon(_drive_meta(dut, [pk.meta for pk in packets], random.Random(seed + 7)))
    for pk in packets:
        if pk.payload:
            await src.send(AxiStreamFrame(pk.payload))
    for i, pk in enumerate(packets):
        frame = await bounded(sink.recv(), 500_000, f"packet {i}")
        expected = pad_header(pk.meta.encode(), width) + pk.payload
        assert bytes(frame.tdata) == expected, f"packet {i}: differs from spec encoding"
    await ClockCycles(dut.clk, 50)
    assert sink.empty(), "extra packets"


@cocotb.test()
async def run_backpressure(dut):
    """Output held: payload and metadata FIFOs fill to their depths, then everything drains."""
    p = params()
    width, seed = p["data_width"], p.get("seed", 9)
    pdepth, mdepth = p["payload_depth"], p["meta_depth"]
    nb = width // 8
    rng = random.Random(seed)
    dut.meta__valid.value = 0
    await start(dut)
    src, sink = _ports(dut, seed, sink_pause=0)
    sink.pause = True
    # More payload than the FIFO holds, in packets of 4 beats; more headers than the meta FIFO.
    n = max(pdepth // 4 + 4, mdepth + 4)
    packets = [spec.Packet(random_meta(rng, 4 * nb), rng.randbytes(4 * nb)) for _ in range(n)]
    cocotb.start_soon(_drive_meta(dut, [pk.meta for pk in packets], rng, gap=0))
    for pk in packets:
        await src.send(AxiStreamFrame(pk.payload))
    await ClockCycles(dut.clk, pdepth + mdepth + 50)
    # The serializer may hold a header and one beat; the FIFOs are full, nothing got lost.
    assert int(dut.payload_level.value) == pdepth, f"payload level {int(dut.payload_level.value)}"
    assert int(dut.meta_level.value) == mdepth, f"meta level {int(dut.meta_level.value)}"
    assert not dut.payload__tready.value and not dut.meta__ready.value
    sink.pause = False
    for i, pk in enumerate(packets):
        frame = await bounded(sink.recv(), 200_000, f"packet {i}")
        assert bytes(frame.tdata) == pad_header(pk.meta.encode(), width) + pk.payload, f"packet {i}"
    assert sink.empty()


def test_construction():
    p = Packetizer(128, payload_depth=64, meta_depth=8)
    assert len(p.o.tdata) == 128 and len(p.meta.payload.as_value()) == 128


@pytest.mark.parametrize("depth", [0, 3, 100])
def test_bad_depth(depth):
    with pytest.raises(ValueError, match="power of two"):
        Packetizer(64, payload_depth=depth)


#: Packetizer parameters of each bench (the bench reads them back through ``params()``).
PACKETIZE = {"payload_depth": 64, "meta_depth": 8}
BACKPRESSURE = {"payload_depth": 32, "meta_depth": 4}


@pytest.mark.cocotb
@pytest.mark.parametrize("width", [64, 128])
def test_packetize_cocotb(width, build_dir):
    run_cocotb(Packetizer(width, **PACKETIZE), __name__, build_dir, testcase="run_packetize",
               params={"data_width": width, "packets": 120, **PACKETIZE})


@pytest.mark.cocotb
@pytest.mark.parametrize("width", [64, 128])
def test_backpressure_cocotb(width, build_dir):
    run_cocotb(Packetizer(width, **BACKPRESSURE), __name__, build_dir, testcase="run_backpressure",
               params={"data_width": width, **BACKPRESSURE})
