"""cocotb bench: vector unit, every op in random order against its golden function, random
pauses on the operand streams and the output."""
from __future__ import annotations

import cocotb
import numpy as np

from mcf.hw.compute.vector import VecOp, a_layout, b_layout, cmd_layout
from mcf.sim.cocotb_util import bounded, params, pauses, start
from mcf.sim.compute.jobs import unpack, vector_beats, vector_elements, vector_job
from mcf.sim.compute.streams import StreamSink, StreamSource


def const(layout, values: dict) -> int:
    return layout.const(values).as_value().value


@cocotb.test()
async def ops(dut):
    p = params()
    seed = p.get("seed", 1)
    L = p.get("lanes", 1)
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
        abeats, bbeats = vector_beats(job, L)
        await cmd.send([const(layout, job.cmd)])
        cocotb.start_soon(a.send([const(a_layout(L), x) for x in abeats]))
        if uses_b:
            cocotb.start_soon(b.send([const(b_layout(L), x) for x in bbeats]))
        words = await bounded(sink.recv(n // L), 100 * n * 10 + 5000, f"{op} row")
        beats = [(w & ((1 << 32 * L) - 1), unpack(w >> 32 * L, 8, 1)[0], (w >> (32 * L + 8)) & 1) for w in words]
        got = vector_elements(beats, L)
        x32 = VecOp[op] in (VecOp.SILU, VecOp.RESIDUAL)
        for i, ((gx, ge, gl), (ex, ee, el)) in enumerate(zip(got, job.expected)):
            assert (gx, 0 if x32 else ge, gl) == (ex, ee, el), \
                f"{op} n={n} element {i}: got {(gx, ge, gl)} expected {(ex, ee, el)}"
