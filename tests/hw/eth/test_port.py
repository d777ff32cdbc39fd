"""One 10GBASE-R port (hw/eth/port.py) looped back through a serial-link model: MCF packets
in at the node clock come back byte for byte across both clock crossings, the MAC, the PCS
and the gearboxes; a bit error costs one frame (bad FCS, then a sequence gap of one), a
packet too long for a frame is dropped at TX and counted, a bit slip loses and regains block
lock, a node that stops reading overflows the RX FIFO (counted, never a partial packet),
and the SFP+ pins reach the link status.

The cocotb coroutines (``run_*``) and the pytest runner share this file and ``PARAMS``.
"""
from __future__ import annotations

import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Edge, FallingEdge, RisingEdge, Timer
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from mcf.sim.cocotb_util import bounded, params, pauses
from mcf.sim.eth.link import PortLoop
from mcf.spec import Collective, ErrorCause, LinkStatus, Meta, Op, ReduceOp, Stage

PARAMS = {"seed": 61, "packets": 24, "data_width": 128, "max_frame": 600, "ber_window": 512}
NODE_NS, ETH_NS = 5.0, 6.206        # 200 MHz node clock; 10.3125 GHz / 64


def packet(rng, length, dst=1):
    meta = Meta(stage=Stage.PREFILL, op=Op.KV_REPLICA, collective=Collective.UNICAST, reduce_op=ReduceOp.NONE,
                src=0, dst=dst, route_id=rng.randrange(4096), kv_id=rng.randrange(1 << 24), length=length)
    return meta.encode() + rng.randbytes(length)


class Errors:
    def __init__(self, dut):
        self.counts = {c: 0 for c in ErrorCause}
        self.missing = 0                        # sum of ``seq_missing`` (frames lost)
        cocotb.start_soon(self._run(dut))

    async def _run(self, dut):
        while True:
            if not int(dut.errors.value):
                await Edge(dut.errors)          # strobes are rare: no Python work per cycle
            await RisingEdge(dut.clk)
            v = int(dut.errors.value)
            for c in ErrorCause:
                self.counts[c] += (v >> c) & 1
            if (v >> ErrorCause.ETH_SEQ_GAP) & 1:
                self.missing += int(dut.ctl__seq_missing.value)

    def moved(self):
        return {c.name: n for c, n in self.counts.items() if n}


async def setup(dut):
    for name in ("tx__tvalid", "rx__tready", "ctl__mac_w_en", "ctl__resync", "slip", "flip", "cut", "sfp_mod_abs",
                 "sfp_rx_los", "sfp_tx_fault"):
        getattr(dut, name).value = 0
    dut.ctl__node_id.value = 0
    cocotb.start_soon(Clock(dut.clk, NODE_NS, unit="ns").start())
    cocotb.start_soon(Clock(dut.eth_tx_clk, ETH_NS, unit="ns").start())
    dut.rst.value = dut.eth_tx_rst.value = 1
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "tx", bus_separator="__"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "rx", bus_separator="__"), dut.clk, dut.rst)
    await ClockCycles(dut.clk, 4)
    dut.rst.value = dut.eth_tx_rst.value = 0
    for index, mac in ((0, 0x02_4D_43_46_00_00), (1, 0x02_4D_43_46_00_01)):
        await FallingEdge(dut.clk)
        dut.ctl__mac_w_en.value, dut.ctl__mac_index.value, dut.ctl__mac_data.value = 1, index, mac
    await FallingEdge(dut.clk)
    dut.ctl__mac_w_en.value = 0
    errors = Errors(dut)
    await wait_status(dut, LinkStatus.LINK_UP, 1, "link up")
    return src, sink, errors


async def wait_status(dut, bit, value, what, ns=400_000):
    async def poll():
        while True:
            await RisingEdge(dut.clk)        # settled values (no delta-cycle glitches)
            if ((int(dut.ctl__status.value) >> bit) & 1) == value:
                return
            await Edge(dut.ctl__status)
    await bounded(poll(), ns, what)


async def exchange(src, sink, packets, what):
    for pk in packets:
        await src.send(AxiStreamFrame(pk))
    for k, pk in enumerate(packets):
        got = await bounded(sink.recv(), 500_000, f"{what}: packet {k}")
        assert bytes(got.tdata) == pk, f"{what}: packet {k} ({len(pk)} bytes) differs"


@cocotb.test()
async def run_loopback(dut):
    p = params()
    rng = random.Random(p["seed"])
    src, sink, errors = await setup(dut)
    src.set_pause_generator(pauses(p["seed"], 0.2))
    sink.set_pause_generator(pauses(p["seed"] + 1, 0.2))
    from mcf.hw.eth.port import EthPort
    longest = EthPort(p["data_width"], p["max_frame"]).max_packet - 16     # payload bytes
    sizes = [0, 1, 27, 28, 29, longest] + [rng.randrange(0, longest + 1) for _ in range(p["packets"])]
    await exchange(src, sink, [packet(rng, n) for n in sizes], "clean")
    assert not errors.moved(), errors.moved()
    assert dut.sfp_tx_disable.value == 0

    # one bit error inside a frame: that frame is dropped (bad FCS), the next shows a gap of one
    src.set_pause_generator(None)
    sink.set_pause_generator(None)
    await src.send(AxiStreamFrame(packet(rng, 400)))
    ctrl = dut.port.mac_pcs.mac_tx.o__ctrl                     # leaving the MAC: wait for frame data
    while int(ctrl.value) == 0xFF:
        await FallingEdge(dut.eth_tx_clk)
    await ClockCycles(dut.eth_tx_clk, 20, rising=False)
    dut.flip.value = 1 << 40
    await FallingEdge(dut.eth_tx_clk)
    dut.flip.value = 0
    follow = [packet(rng, 100) for _ in range(3)]
    await exchange(src, sink, follow, "after a bit error")
    assert errors.moved() == {"ETH_BAD_FCS": 1, "ETH_SEQ_GAP": 1}, errors.moved()
    assert errors.missing == 1

    # too long for a frame: dropped before the MAC, counted; the receiver sees a gap
    await src.send(AxiStreamFrame(packet(rng, longest + 1)))
    await exchange(src, sink, [packet(rng, 50)], "after an oversize packet")
    assert errors.moved() == {"ETH_BAD_FCS": 1, "ETH_SEQ_GAP": 2, "ETH_TX_OVERSIZE": 1}, errors.moved()

    # a bit slip: block lock lost and regained, traffic resumes
    dut.slip.value = 1
    await FallingEdge(dut.eth_tx_clk)
    dut.slip.value = 0
    await wait_status(dut, LinkStatus.BLOCK_LOCK, 0, "block lock lost")
    await wait_status(dut, LinkStatus.LINK_UP, 1, "link up again")
    await exchange(src, sink, [packet(rng, 200) for _ in range(2)], "after a slip")
    assert errors.counts[ErrorCause.ETH_BLOCK_LOCK_LOSS] == 1

    # SFP+ pins: module absent / loss of signal take the link down; tx fault is reported
    for pin, bit in (("sfp_mod_abs", LinkStatus.MODULE_ABSENT), ("sfp_rx_los", LinkStatus.RX_LOS),
                     ("sfp_tx_fault", LinkStatus.TX_FAULT)):
        getattr(dut, pin).value = 1
        await wait_status(dut, bit, 1, pin)
        if bit != LinkStatus.TX_FAULT:
            await wait_status(dut, LinkStatus.LINK_UP, 0, f"link down on {pin}")
        getattr(dut, pin).value = 0
        await wait_status(dut, bit, 0, f"{pin} cleared")
    await wait_status(dut, LinkStatus.LINK_UP, 1, "link up after the pins")


@cocotb.test()
async def run_rx_overflow(dut):
    """The node stops reading: the RX FIFO fills, whole frames are dropped and counted; when it
    reads again, what it gets is whole packets, in order, and the gaps add up."""
    p = params()
    rng = random.Random(p["seed"] + 1)
    src, sink, errors = await setup(dut)
    sink.pause = True
    sent = [packet(rng, 500) for _ in range(12)]
    for pk in sent:
        await src.send(AxiStreamFrame(pk))
    await src.wait()
    await Timer(8, "us")                 # 12 frames of ~550 bytes leave in ~5.3 us
    sink.pause = False
    await Timer(4, "us")
    got = []
    while not sink.empty():
        got.append(bytes(sink.recv_nowait().tdata))
    it = iter(sent)
    assert got and all(any(g == s for s in it) for g in got), "not an in-order subset of whole packets"
    lost = len(sent) - len(got)
    assert lost > 0 and errors.counts[ErrorCause.ETH_RX_OVERFLOW] == lost, errors.moved()
    # the next frame shows the rest of the gap: the frames missing add up to those lost
    await exchange(src, sink, [packet(rng, 10)], "after the overflow")
    await ClockCycles(dut.clk, 4)
    assert errors.missing == lost, (errors.missing, lost)


@pytest.mark.cocotb
def test_port_loopback(build_dir):
    from mcf.sim.runner import run_cocotb
    p = PARAMS
    run_cocotb(PortLoop(p["data_width"], p["max_frame"], p["ber_window"]), __name__, build_dir,
               testcase=["run_loopback", "run_rx_overflow"], params=p)


def test_bad_max_frame():
    from mcf.hw.eth.port import EthPort
    with pytest.raises(ValueError, match="max_frame"):
        EthPort(max_frame=20)
