"""Width conversion (hw/eth/width.py): 128 -> 64 and 64 -> 128 bits keep every byte in order,
never emit an empty beat, and respect backpressure (cocotbext-axi with random pauses).

The cocotb coroutines (``run_*``) and the pytest runner share this file and ``PARAMS``.
"""
from __future__ import annotations

import random

import cocotb
import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from mcf.sim.cocotb_util import bounded, params, pauses, start

PARAMS = {"seed": 41, "frames": 60}


class WidthTop(wiring.Component):
    def __init__(self):
        from mcf.hw.axis import AXIStreamSignature
        super().__init__({"d_i": In(AXIStreamSignature(128)), "d_o": Out(AXIStreamSignature(64)),
                          "u_i": In(AXIStreamSignature(64)), "u_o": Out(AXIStreamSignature(128))})

    def elaborate(self, platform):
        from mcf.hw.eth.width import Downsizer, Upsizer
        m = Module()
        m.submodules.down = down = Downsizer(128, 64)
        m.submodules.up = up = Upsizer(64, 128)
        wiring.connect(m, wiring.flipped(self.d_i), down.i)
        wiring.connect(m, down.o, wiring.flipped(self.d_o))
        wiring.connect(m, wiring.flipped(self.u_i), up.i)
        wiring.connect(m, up.o, wiring.flipped(self.u_o))
        return m


async def through(dut, i, o, seed):
    p = params()
    rng = random.Random(seed)
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, i, bus_separator="__"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, o, bus_separator="__"), dut.clk, dut.rst)
    src.set_pause_generator(pauses(seed, 0.3))
    sink.set_pause_generator(pauses(seed + 1, 0.3))
    valid, ready, keep = (getattr(dut, f"{o}__{n}") for n in ("tvalid", "tready", "tkeep"))
    beats = []

    async def watch():
        from cocotb.triggers import RisingEdge
        while True:
            await RisingEdge(dut.clk)
            if int(valid.value) and int(ready.value):
                beats.append(int(keep.value))
    cocotb.start_soon(watch())
    await start(dut)
    frames = [rng.randbytes(rng.choice([1, 7, 8, 9, 15, 16, 17, rng.randrange(1, 300)]))
              for _ in range(p["frames"])]
    for f in frames:
        await src.send(AxiStreamFrame(f))
    for k, f in enumerate(frames):
        got = await bounded(sink.recv(), 1_000_000, f"frame {k}")
        assert bytes(got.tdata) == f, f"frame {k} ({len(f)} bytes) differs"
    assert all(k and k & (k + 1) == 0 for k in beats), "an empty or non-contiguous beat"
    assert len(beats) == sum(-(-len(f) // (len(keep) or 1)) for f in frames)


@cocotb.test()
async def run_down(dut):
    dut.u_i__tvalid.value = 0
    dut.u_o__tready.value = 0
    await through(dut, "d_i", "d_o", params()["seed"])


@cocotb.test()
async def run_up(dut):
    dut.d_i__tvalid.value = 0
    dut.d_o__tready.value = 0
    await through(dut, "u_i", "u_o", params()["seed"] + 7)


@pytest.mark.cocotb
def test_width(build_dir):
    from mcf.sim.runner import run_cocotb
    run_cocotb(WidthTop(), __name__, build_dir, testcase=["run_down", "run_up"], params=PARAMS)


def test_ratio_checked():
    from mcf.hw.eth.width import Downsizer, Upsizer
    with pytest.raises(ValueError, match="2:1"):
        Downsizer(256, 64)
    with pytest.raises(ValueError, match="1:2"):
        Upsizer(64, 64)
