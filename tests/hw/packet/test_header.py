"""Header serializer / deserializer (hw/packet/header.py): construction, an Amaranth-simulator
unit test, and the cocotb benches with their pytest runners.

The benches run every port under random backpressure (cocotbext-axi pause generators) and
compare every packet byte for byte with ``mcf.spec.Packet.encode`` / ``mcf.spec.to_beats``.
"""
import random

import cocotb
import pytest
from amaranth.sim import Simulator
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from mcf import spec
from mcf.hw.packet.header import HeaderDeserializer, HeaderSerializer
from mcf.sim.cocotb_util import bounded, params, pauses, start
from mcf.sim.nic.traffic import random_meta
from mcf.sim.runner import run_cocotb
from mcf.spec.packet import HEADER_BYTES, pad_header

WIDTHS = [64, 128]


@cocotb.test()
async def run_serialize(dut):
    """Meta fields + payload in, header beats (magic and check filled by the RTL) + payload out."""
    p = params()
    width, count, seed = p["data_width"], p.get("packets", 150), p.get("seed", 1)
    rng = random.Random(seed)
    payload_src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "payload", bus_separator="__"),
                                  dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "o", bus_separator="__"), dut.clk, dut.rst)
    payload_src.set_pause_generator(pauses(seed + 1))
    sink.set_pause_generator(pauses(seed + 2))
    dut.meta__valid.value = 0
    await start(dut)

    packets = []
    for _ in range(count):
        length = rng.choice([0, 1, 7, 8, 15, 16, 17, rng.randrange(1, 300)])
        packets.append(spec.Packet(random_meta(rng, length), rng.randbytes(length)))

    async def drive_meta():
        for pkt in packets:
            # Garbage in the framing fields: the serializer must replace them.
            word = pkt.meta.to_int() ^ (rng.randrange(256) << spec.META.offsets["check"]) \
                ^ (rng.randrange(256) << spec.META.offsets["magic"])
            while rng.random() < 0.3:
                await RisingEdge(dut.clk)
            dut.meta__payload.value = word
            dut.meta__valid.value = 1
            await RisingEdge(dut.clk)
            while not dut.meta__ready.value:
                await RisingEdge(dut.clk)
            dut.meta__valid.value = 0

    cocotb.start_soon(drive_meta())
    for pkt in packets:
        if pkt.payload:
            await payload_src.send(AxiStreamFrame(pkt.payload))
    for i, pkt in enumerate(packets):
        frame = await bounded(sink.recv(), 200_000, f"packet {i}")
        expected = pad_header(pkt.meta.encode(), width) + pkt.payload
        assert bytes(frame.tdata) == expected, (
            f"packet {i} ({pkt.meta}): got {bytes(frame.tdata).hex()} expected {expected.hex()}")
        spec.Packet.decode(bytes(frame.tdata)[:HEADER_BYTES] + pkt.payload)  # round-trips
    assert sink.empty()


@cocotb.test()
async def run_deserialize(dut):
    """Packets in; parsed header (with malformed / truncated flags) and payload beats out."""
    p = params()
    width, count, seed = p["data_width"], p.get("packets", 150), p.get("seed", 3)
    rng = random.Random(seed)
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "i", bus_separator="__"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "o", bus_separator="__"), dut.clk, dut.rst)
    src.set_pause_generator(pauses(seed + 1))
    sink.set_pause_generator(pauses(seed + 2))
    dut.meta__ready.value = 0
    await start(dut)

    cases = []   # (bytes on the wire, expected header int or None, truncated, malformed, payload)
    for _ in range(count):
        kind = rng.choices(["good", "bad_check", "truncated"], [6, 1, 1])[0]
        length = rng.choice([0, 1, 8, 16, rng.randrange(1, 200)])
        pkt = spec.Packet(random_meta(rng, length), rng.randbytes(length))
        wire = pad_header(pkt.meta.encode(), width) + pkt.payload
        if kind == "good":
            cases.append((wire, pkt.meta.to_int(), 0, 0, pkt.payload))
        elif kind == "bad_check":
            bad = bytearray(wire)
            bad[rng.randrange(HEADER_BYTES)] ^= 1 << rng.randrange(8)
            cases.append((bytes(bad), int.from_bytes(bad[:HEADER_BYTES], "little"), 0, 1, pkt.payload))
        else:
            cut = rng.randrange(1, HEADER_BYTES)
            cases.append((wire[:cut], None, 1, None, b""))

    async def take_meta():
        got = []
        for _ in cases:
            while True:
                dut.meta__ready.value = int(rng.random() < 0.7)
                await RisingEdge(dut.clk)
                if dut.meta__valid.value and dut.meta__ready.value:
                    got.append(dut.meta__payload.value.to_unsigned())
                    break
        dut.meta__ready.value = 0
        return got

    meta_task = cocotb.start_soon(take_meta())
    for wire, *_ in cases:
        await src.send(AxiStreamFrame(wire))
    metas = await bounded(meta_task, 500_000, "parsed headers")

    for i, ((wire, hdr, truncated, malformed, payload), word) in enumerate(zip(cases, metas)):
        got_hdr = word & ((1 << spec.HEADER_BITS) - 1)
        got_trunc = (word >> spec.HEADER_BITS) & 1
        got_malformed = (word >> (spec.HEADER_BITS + 1)) & 1
        got_payload_flag = (word >> (spec.HEADER_BITS + 2)) & 1
        assert got_trunc == truncated, f"case {i}: truncated={got_trunc}, expected {truncated}"
        if truncated:
            continue
        assert got_hdr == hdr, f"case {i}: header {got_hdr:#x} expected {hdr:#x}"
        assert got_malformed == malformed, f"case {i}: malformed={got_malformed}"
        if not malformed:
            assert spec.Meta.from_int(got_hdr).to_int() == hdr
        assert got_payload_flag == (len(payload) > 0), f"case {i}: has_payload={got_payload_flag}"
        if payload:
            frame = await bounded(sink.recv(), 100_000, f"payload of case {i}")
            assert bytes(frame.tdata) == payload, f"case {i}: payload differs"
    assert sink.empty(), "payload beats left over"


@pytest.mark.parametrize("width", [32, 64, 128, 256])
def test_construction(width):
    ser, des = HeaderSerializer(width), HeaderDeserializer(width)
    assert ser.beats == des.beats == max(1, 128 // width)
    assert len(ser.o.tdata) == width and len(des.i.tkeep) == width // 8


@pytest.mark.parametrize("width", [0, 48, 16])
def test_bad_width(width):
    with pytest.raises(ValueError, match="data_width"):
        HeaderSerializer(width)


def test_serializer_amaranth_sim():
    """One packet through the Amaranth simulator: beats equal mcf.spec.to_beats."""
    dut = HeaderSerializer(64)
    meta = spec.Meta(stage=spec.Stage.DECODE, op=spec.Op.PARTIAL_STATE, collective=spec.Collective.REDUCE,
                     reduce_op=spec.ReduceOp.SOFTMAX_MERGE, src=3, dst=1, route_id=77, kv_id=123456,
                     length=0, seq=9)
    beats = []

    async def bench(ctx):
        ctx.set(dut.meta.payload.as_value(), meta.to_int() & ~(0xFF << 120))  # check byte left for the RTL
        ctx.set(dut.meta.valid, 1)
        ctx.set(dut.o.tready, 1)
        for _ in range(10):
            await ctx.tick()
            if ctx.get(dut.meta.ready):
                ctx.set(dut.meta.valid, 0)
            if ctx.get(dut.o.tvalid):
                beats.append((ctx.get(dut.o.tdata), ctx.get(dut.o.tkeep), bool(ctx.get(dut.o.tlast))))
            if beats and beats[-1][2]:
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert beats[:2] == spec.to_beats(spec.Packet(meta), 64)


@pytest.mark.cocotb
@pytest.mark.parametrize("width", WIDTHS)
def test_serializer_cocotb(width, build_dir):
    run_cocotb(HeaderSerializer(width), __name__, build_dir, testcase="run_serialize",
               params={"data_width": width, "packets": 120})


@pytest.mark.cocotb
@pytest.mark.parametrize("width", WIDTHS)
def test_deserializer_cocotb(width, build_dir):
    run_cocotb(HeaderDeserializer(width), __name__, build_dir, testcase="run_deserialize",
               params={"data_width": width, "packets": 150})
