"""cocotb bench: matrix unit against ``fixed.linear`` (golden), random backpressure on every
stream; and a steady-state tile with every stream ready, for the MAC utilization figure."""
from __future__ import annotations

import json

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from mcf.hw.compute.matrix import cmd_layout
from mcf.sim.cocotb_util import bounded, params, pauses, start
from mcf.sim.compute.jobs import linear_job
from mcf.sim.compute.streams import StreamSource, write_port


def setup(dut, p, stall: bool):
    seed = p.get("seed", 1)
    w = AxiStreamSource(AxiStreamBus.from_prefix(dut, "w", bus_separator="__"), dut.clk, dut.rst)
    o = AxiStreamSink(AxiStreamBus.from_prefix(dut, "o", bus_separator="__"), dut.clk, dut.rst)
    if stall:
        w.set_pause_generator(pauses(seed + 1))
        o.set_pause_generator(pauses(seed + 2))
    scale = StreamSource(dut, "scale", dut.clk, pauses(seed + 3, 0.2) if stall else None)
    bias = StreamSource(dut, "bias", dut.clk, pauses(seed + 4, 0.2) if stall else None)
    cmd = StreamSource(dut, "cmd", dut.clk)
    dut.act__en.value = 0
    dut.exp__en.value = 0
    return w, o, scale, bias, cmd


async def run_job(dut, p, job, w, o, scale, bias, cmd):
    layout = cmd_layout(p["max_tokens"], p["max_inputs"] // p["lanes"], p["max_tiles"])
    await write_port(dut, "act", dut.clk, job.act)
    await write_port(dut, "exp", dut.clk, job.exp)
    await cmd.send([layout.const(job.cmd).as_value().value])
    cocotb.start_soon(scale.send(job.scale))
    cocotb.start_soon(bias.send(job.bias))
    nbytes = p["rows"] * p["lanes"] // 2
    await w.send(AxiStreamFrame(b"".join(x.to_bytes(nbytes, "little") for x in job.w)))
    frame = await bounded(o.recv(), 50 * len(job.w) * job.cmd["tokens"] * 10 + 10_000, "output frame")
    nb = p["rows"] * 4
    got = [int.from_bytes(bytes(frame.tdata)[i:i + nb], "little") for i in range(0, len(frame.tdata), nb)]
    assert len(got) == len(job.expected), f"{len(got)} output beats, expected {len(job.expected)}"
    for i, (a, b) in enumerate(zip(got, job.expected)):
        assert a == b, f"beat {i}: got {a:#x} expected {b:#x}"


@cocotb.test()
async def linear(dut):
    """Random shapes, token counts, group sizes, with and without bias, under backpressure."""
    p = params()
    rng = np.random.default_rng(p.get("seed", 1))
    ports = setup(dut, p, stall=True)
    await start(dut)
    R, K, TM = p["rows"], p["lanes"], p["max_tokens"]
    for _ in range(p.get("jobs", 4)):
        group = K * int(rng.choice([1, 2]))
        n = group * int(rng.integers(1, p["max_inputs"] // group + 1))
        out = R * int(rng.integers(1, 4))
        t = int(rng.integers(1, TM + 1))
        job = linear_job(rng, R, K, TM, t, n, out, group, bias=bool(rng.integers(0, 2)))
        await run_job(dut, p, job, *ports)


@cocotb.test()
async def utilization(dut):
    """A steady-state GEMM (every stream ready): MAC strobes / cycles from first to last issue."""
    p = params()
    rng = np.random.default_rng(p.get("seed", 1))
    ports = setup(dut, p, stall=False)
    await start(dut)
    R, K, TM = p["rows"], p["lanes"], p["max_tokens"]
    job = linear_job(rng, R, K, TM, p["tokens"], p["max_inputs"], R * p["tiles"], p["group"])
    counts = {"mac": 0, "cycles": 0, "first": None, "last": None}

    async def count():
        cyc = 0
        while True:
            await ReadOnly()
            if dut.mac.value:
                counts["mac"] += 1
                counts["first"] = cyc if counts["first"] is None else counts["first"]
                counts["last"] = cyc
            await RisingEdge(dut.clk)
            cyc += 1

    cocotb.start_soon(count())
    await run_job(dut, p, job, *ports)
    span = counts["last"] - counts["first"] + 1
    report = {"mac_cycles": counts["mac"], "span_cycles": span,
              "mac_utilization": counts["mac"] / span, "macs": job.macs,
              "macs_per_cycle": job.macs / span}
    assert counts["mac"] * R * K == job.macs
    if p.get("report"):
        with open(p["report"], "w") as f:
            json.dump(report, f)
