"""cocotb bench: KV block writer against ``fixed.quantize_kv``, random pauses on both streams."""
from __future__ import annotations

import cocotb
import numpy as np

from mcf.sim.cocotb_util import bounded, params, pauses, start
from mcf.sim.compute.jobs import kv_blocks
from mcf.sim.compute.streams import StreamSink, StreamSource


@cocotb.test()
async def quantize(dut):
    p = params()
    seed = p.get("seed", 1)
    beats_in, expected = kv_blocks(np.random.default_rng(seed), p["blocks"], p["head_dim"], p["lanes"])
    src = StreamSource(dut, "i", dut.clk, pauses(seed + 1))
    sink = StreamSink(dut, "o", dut.clk, pauses(seed + 2))
    await start(dut)
    cocotb.start_soon(src.send(beats_in))
    got = await bounded(sink.recv(len(expected)), 40 * len(expected) * 10 + 5000, "KV blocks")
    for i, (a, b) in enumerate(zip(got, expected)):
        assert a == b, f"beat {i}: got {a:#x} expected {b:#x}"
