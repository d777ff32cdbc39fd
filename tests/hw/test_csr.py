"""Register block: construction, an Amaranth-simulator unit test, the cocotb bench."""
import pytest
from amaranth.sim import Simulator

from mcf import spec
from mcf.hw.csr import ControlRegisters
from mcf.sim.runner import run_cocotb
from mcf.spec import REGISTERS, ErrorCause


def test_construction_and_caps():
    dut = ControlRegisters(meta_queue_depth=8, desc_queue_depth=4, data_bytes=16, net_ports=3)
    caps = REGISTERS["CAPS"]
    assert (dut.caps >> caps.field("data_bytes").lsb) & 0xFF == 16
    assert (dut.caps >> caps.field("meta_queue_log2").lsb) & 0xF == 3
    assert (dut.caps >> caps.field("desc_queue_log2").lsb) & 0xF == 2
    assert len(dut.errors) == len(ErrorCause)
    assert len(dut.meta.payload.as_value()) == spec.HEADER_BITS


@pytest.mark.parametrize("kw", [{"meta_queue_depth": 12}, {"dma_bus_bytes": 3}, {"net_ports": 16}])
def test_bad_parameters(kw):
    with pytest.raises(ValueError):
        ControlRegisters(**kw)


def _axil_sim(dut, body):
    """Run ``body(ctx, write, read)`` with plain AXI-Lite transactions (no bus model)."""
    bus = dut.s_axil

    async def write(ctx, addr, value, strb=0xF):
        ctx.set(bus.awaddr, addr); ctx.set(bus.awvalid, 1)
        ctx.set(bus.wdata, value); ctx.set(bus.wstrb, strb); ctx.set(bus.wvalid, 1)
        ctx.set(bus.bready, 1)
        aw = w = False
        for _ in range(20):
            await ctx.tick()
            aw = aw or ctx.get(bus.awready) or False
            w = w or ctx.get(bus.wready) or False
            # (ready is sampled after the edge: both are accepted on the first edge here)
            ctx.set(bus.awvalid, 0); ctx.set(bus.wvalid, 0)
            if ctx.get(bus.bvalid):
                resp = ctx.get(bus.bresp)
                await ctx.tick()
                ctx.set(bus.bready, 0)
                return resp
        raise AssertionError("no write response")

    async def read(ctx, addr):
        ctx.set(bus.araddr, addr); ctx.set(bus.arvalid, 1); ctx.set(bus.rready, 1)
        await ctx.tick()
        ctx.set(bus.arvalid, 0)
        for _ in range(20):
            if ctx.get(bus.rvalid):
                v, r = ctx.get(bus.rdata), ctx.get(bus.rresp)
                await ctx.tick()
                ctx.set(bus.rready, 0)
                return v, r
            await ctx.tick()
        raise AssertionError("no read response")

    async def bench(ctx):
        await body(ctx, lambda *a, **k: write(ctx, *a, **k), lambda *a: read(ctx, *a))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_amaranth_sim_basic():
    dut = ControlRegisters(meta_queue_depth=4, desc_queue_depth=4)
    off = {r.name: r.offset for r in REGISTERS}

    async def body(ctx, write, read):
        assert await read(off["ID"]) == (spec.regmap.ID_VALUE, 0)
        assert (await read(0x3FC))[1] == 2                       # unmapped: SLVERR
        assert await write(off["ID"], 0) == 2                     # RO: SLVERR
        assert await write(off["NODE_ID"], 0x1234_5607) == 0
        assert await read(off["NODE_ID"]) == (0x07, 0)           # only the field is stored
        assert ctx.get(dut.node_id) == 7
        assert await write(off["META_W0"], 0xAABBCCDD, strb=0b0101) == 0
        assert (await read(off["META_W0"]))[0] == 0x00BB00DD
        assert await write(off["META_PUSH"], 1) == 0
        assert (await read(off["META_LEVEL"]))[0] == 1
        assert not ctx.get(dut.meta.valid)                        # held while disabled
        assert await write(off["CONTROL"], 1) == 0
        assert ctx.get(dut.meta.valid) and ctx.get(dut.meta.payload.as_value()) == 0x00BB00DD

    _axil_sim(dut, body)


CSR_PARAMS = {"meta_queue_depth": 4, "desc_queue_depth": 4, "data_bytes": 8, "net_ports": 2,
              "dma_bus_bytes": 16, "dma_buffers": 2, "dma_buffer_bytes": 1024}


@pytest.mark.cocotb
@pytest.mark.parametrize("case", ["registers", "route", "queues", "bad_descriptors", "errors_and_irq",
                                  "concurrent", "eth"])
def test_csr_cocotb(case, build_dir):
    run_cocotb(ControlRegisters(**CSR_PARAMS), "mcf.sim.csr.test_csr", build_dir, testcase=case,
               params=CSR_PARAMS)
