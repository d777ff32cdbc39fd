"""cocotb bench: vector unit, every op in random order against its golden function, random
pauses on the operand streams and the output."""
from __future__ import annotations

import cocotb
import numpy as np

from mcf.hw.compute.vector import A_LAYOUT, B_LAYOUT, O_LAYOUT, VecOp, cmd_layout
from mcf.sim.cocotb_util import bounded, params, pauses, start
from mcf.sim.compute.jobs import vector_job
from mcf.sim.compute.streams import StreamSink, StreamSource


def const(layout, values: dict) -> int:
    return layout.const(values).as_value().value


@cocotb.test()
async def ops(dut):
    p = params()
    seed = p.get("seed", 1)
    rng = np.random.default_rng(seed)
    cmd = StreamSource(dut, "cmd", dut.clk)
    a = StreamSource(dut, "a", dut.clk, pauses(seed + 1))
    b = StreamSource(dut, "b", dut.clk, pauses(seed + 2))
    sink = StreamSink(dut, "o", dut.clk, pauses(seed + 3))
    await start(dut)
    layout = cmd_layout(p["max_n"])
    names = [op.name for op in VecOp]
    for k in range(p.get("jobs", 14)):
        op = names[k % len(names)] if k < len(names) else str(rng.choice(names))
        n = int(rng.choice([8, 16, p["max_n"]]))
        job = vector_job(rng, op, n)
        uses_b = VecOp[op] in (VecOp.RMSNORM, VecOp.MUL, VecOp.ROPE, VecOp.RESIDUAL)
        await cmd.send([const(layout, job.cmd)])
        cocotb.start_soon(a.send([const(A_LAYOUT, {"x": x, "exp": e}) for x, e in job.a]))
        if uses_b:
            cocotb.start_soon(b.send([const(B_LAYOUT, {"x": x, "y": y, "exp": e}) for x, y, e in job.b]))
        words = await bounded(sink.recv(n), 100 * n * 10 + 5000, f"{op} row")
        x32 = VecOp[op] in (VecOp.SILU, VecOp.RESIDUAL)
        for i, (w, (ex, ee, el)) in enumerate(zip(words, job.expected)):
            gx = w & 0xFFFFFFFF
            gx -= (gx >> 31) << 32
            ge = (w >> 32) & 0xFF
            ge -= (ge >> 7) << 8
            gl = (w >> 40) & 1
            assert (gx, 0 if x32 else ge, gl) == (ex, ee, el), f"{op} n={n} element {i}: got {(gx, ge, gl)} expected {(ex, ee, el)}"
