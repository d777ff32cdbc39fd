"""DMA engine and ``ControlAndDma`` (hw/dma/engine.py): the register block + DMA engine
programmed through the PS driver, a cocotb bench with its pytest runner.

The same ``mcf.sw.driver.Driver`` code that runs on the board pushes descriptors over
AXI-Lite (cocotbext-axi ``AxiLiteMaster``); the engine moves data against ``AxiRam``.
Bad descriptors must be refused with their own error counter and cause no AXI transaction.
"""
import random

import cocotb
import pytest
from cocotb.triggers import ClockCycles, FallingEdge, Timer
from cocotbext.axi import (AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam, AxiStreamBus, AxiStreamFrame,
                           AxiStreamSink, AxiStreamSource)

from mcf.hw.dma import ControlAndDma, DmaEngine
from mcf.sim.cocotb_util import bounded, params, pauses, refused, start
from mcf.sim.runner import run_cocotb
from mcf.spec import DmaDir, ErrorCause, Irq
from mcf.spec.node import NodeConfig
from mcf.sw.driver import CocotbBackend, Descriptor, Driver, DriverTimeout

#: The system the pytest runner builds; the bench reads the same numbers through ``params()``.
CONFIG = NodeConfig(data_width=64, buffer_bytes=512, buffers=2, meta_queue_depth=4, desc_queue_depth=4)
RAM_BYTES = 1 << 16
TIMEOUT_NS = 5_000_000


class System:
    async def setup(self, dut, seed: int, backpressure: bool, max_polls: int = 2000):
        self.dut = dut
        dut.rst.value = 1
        dut.net_errors.value = 0
        dut.rx_packet.value = 0
        dut.meta__ready.value = 0
        dut.route__r_data.value = 0
        await Timer(1, "ns")
        self.master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__"), dut.clk, dut.rst)
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst, size=RAM_BYTES)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "o", bus_separator="__"), dut.clk, dut.rst)
        self.src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "i", bus_separator="__"), dut.clk, dut.rst)
        if backpressure:
            chans = [self.ram.write_if.aw_channel, self.ram.write_if.w_channel, self.ram.write_if.b_channel,
                     self.ram.read_if.ar_channel, self.ram.read_if.r_channel, self.sink, self.src,
                     self.master.write_if.aw_channel, self.master.read_if.r_channel]
            for i, ch in enumerate(chans):
                ch.set_pause_generator(pauses(seed + i, 0.3))
        self.activity = 0     # cycles with ARVALID or AWVALID or WVALID high
        cocotb.start_soon(self._watch())
        await start(dut)
        self.drv = Driver(CocotbBackend(self.master, dut.clk), max_polls=max_polls)
        return self.drv

    async def _watch(self):
        d = self.dut
        while True:
            await FallingEdge(d.clk)
            if d.m_axi__arvalid.value or d.m_axi__awvalid.value or d.m_axi__wvalid.value:
                self.activity += 1


@cocotb.test()
async def run_bad_input(dut):
    """Zero length, outside the window, bad buffer, unaligned, too long, full queue: each is
    counted, none reaches the bus, nothing hangs; good descriptors still work afterwards."""
    p = params()
    nbytes, bufsz, depth = p["data_width"] // 8, p["buffer_bytes"], p["desc_queue_depth"]
    s = System()
    drv = await s.setup(dut, p.get("seed", 1), backpressure=False, max_polls=30)
    s.ram.write(0, random.Random(1).randbytes(RAM_BYTES))
    base, size = 0x1000, RAM_BYTES - 0x2000
    await drv.check_id()
    await drv.configure(node_id=3, num_nodes=4, window_base=base, window_size=size)
    await drv.enable()
    bad = [
        (ErrorCause.DESC_ZERO_LENGTH, Descriptor(base, 0, 0)),
        (ErrorCause.DESC_OUT_OF_WINDOW, Descriptor(base - nbytes, nbytes, 0)),
        (ErrorCause.DESC_OUT_OF_WINDOW, Descriptor(base + size - nbytes, 2 * nbytes, 1, DmaDir.STORE)),
        (ErrorCause.DESC_BAD_BUFFER, Descriptor(base, nbytes, p["buffers"])),
        (ErrorCause.DESC_UNALIGNED, Descriptor(base + nbytes // 2, nbytes, 0)),
        (ErrorCause.DESC_TOO_LONG, Descriptor(base, bufsz + 1, 0)),
    ]
    expected = {c: 0 for c in ErrorCause}
    for cause, d in bad:
        await refused(drv.push_descriptor(d), cause)
        expected[cause] += 1
        assert await drv.read_errors() == expected, d
    await ClockCycles(dut.clk, 20)
    assert s.activity == 0, "a refused descriptor reached the AXI bus"
    st = await drv.status()
    assert st["desc_queue_empty"] and not st["busy"] and st["error"], st
    assert (await drv.read_fields("DESC_DONE"))["count"] == 0

    # Full queue while disabled: refused and counted; the driver's wait is bounded.
    await drv.enable(False)
    good = [Descriptor(base + i * bufsz, bufsz - i, i % 2, DmaDir.LOAD, 100 + i) for i in range(depth)]
    for d in good:
        await drv.push_descriptor(d)
    extra = Descriptor(base, nbytes, 0, DmaDir.LOAD, 99)
    try:
        await drv.push_descriptor(extra)
    except DriverTimeout:
        pass
    else:
        raise AssertionError("push to a full descriptor queue did not time out")
    await refused(drv.push_descriptor(extra, wait=False), ErrorCause.DESC_QUEUE_FULL)
    expected[ErrorCause.DESC_QUEUE_FULL] += 1
    assert await drv.read_errors() == expected
    assert s.activity == 0, "the DMA ran while CONTROL.enable = 0"

    await drv.enable()
    done = await bounded(drv.wait_desc_done(depth), TIMEOUT_NS, "the queued descriptors")
    assert done["tag"] == good[-1].tag
    for d in good:
        frame = await bounded(s.sink.recv(), TIMEOUT_NS, f"packet {d.tag}")
        assert bytes(frame.tdata) == s.ram.read(d.addr, d.length)
    assert s.sink.empty() and s.activity > 0
    assert await drv.read_errors() == expected


@cocotb.test()
async def run_program(dut):
    """A node program (LOADs and STOREs) through Driver.execute, random backpressure on every
    channel: loaded packets equal the RAM, stored bytes land (and nothing else changes)."""
    p = params()
    rng = random.Random(p.get("seed", 2))
    nbytes, bufsz, nbuf = p["data_width"] // 8, p["buffer_bytes"], p["buffers"]
    s = System()
    drv = await s.setup(dut, p.get("seed", 2), backpressure=True)
    image = bytearray(rng.randbytes(RAM_BYTES))
    s.ram.write(0, bytes(image))
    await drv.configure(node_id=1, num_nodes=2, window_base=0, window_size=RAM_BYTES,
                        irq_enable=1 << Irq.DESC_DONE)
    await drv.enable()

    # Loads read the lower half, stores write the upper half (so loads see the initial image).
    prog, loads, stores = [], [], []
    for i in range(p.get("descriptors", 12)):
        if rng.random() < 0.5:
            length = rng.randrange(1, bufsz + 1)
            d = Descriptor(rng.randrange((RAM_BYTES // 2 - bufsz) // nbytes) * nbytes, length,
                           rng.randrange(nbuf), DmaDir.LOAD, i)
            loads.append(d)
        else:
            length = rng.randrange(1, 3 * bufsz)
            d = Descriptor(RAM_BYTES // 2 + rng.randrange((RAM_BYTES // 2 - length) // nbytes) * nbytes,
                           length, 0, DmaDir.STORE, i)
            data = rng.randbytes(-(-length // nbytes) * nbytes)
            stores.append((d, data))
            image[d.addr:d.addr + length] = data[:length]
        prog.append(d)

    async def feed():
        for _, data in stores:
            await s.src.send(AxiStreamFrame(data))
    cocotb.start_soon(feed())
    await bounded(drv.execute(prog), TIMEOUT_NS, "the program to be queued")
    done = await bounded(drv.wait_desc_done(len(prog)), TIMEOUT_NS, "all descriptors")
    assert done["count"] == len(prog)
    for d in loads:
        frame = await bounded(s.sink.recv(), TIMEOUT_NS, f"packet {d.tag}")
        assert bytes(frame.tdata) == bytes(image[d.addr:d.addr + d.length]), f"load {d}"
    got = s.ram.read(0, RAM_BYTES)
    assert got == bytes(image), "RAM differs from the model of the stores"
    assert dut.irq.value == 1 and (await drv.irq_pending())["desc_done"] == 1
    assert not any((await drv.read_errors()).values())
    await ClockCycles(dut.clk, 5)
    assert (await drv.status())["busy"] == 0


def test_construction():
    eng = DmaEngine(64, buffer_bytes=1024)
    assert len(eng.o.tdata) == len(eng.i.tdata) == 64
    assert hasattr(eng.m_axi, "arvalid") and hasattr(eng.m_axi, "awvalid")


@pytest.mark.cocotb
@pytest.mark.parametrize("case", ["bad_input", "program"])
def test_csr_dma_cocotb(case, build_dir):
    run_cocotb(ControlAndDma(CONFIG), __name__, build_dir, testcase=f"run_{case}", params=CONFIG.as_dict())
