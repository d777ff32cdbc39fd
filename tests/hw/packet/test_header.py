"""Header serializer / deserializer: construction, Amaranth-simulator unit test, cocotb benches."""
import pytest
from amaranth.sim import Simulator

from mcf import spec
from mcf.hw.packet.header import HeaderDeserializer, HeaderSerializer
from mcf.sim.runner import run_cocotb

WIDTHS = [64, 128]


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
    run_cocotb(HeaderSerializer(width), "mcf.sim.packet.test_header", build_dir,
               testcase="serialize", params={"data_width": width, "packets": 120})


@pytest.mark.cocotb
@pytest.mark.parametrize("width", WIDTHS)
def test_deserializer_cocotb(width, build_dir):
    run_cocotb(HeaderDeserializer(width), "mcf.sim.packet.test_header", build_dir,
               testcase="deserialize", params={"data_width": width, "packets": 150})
