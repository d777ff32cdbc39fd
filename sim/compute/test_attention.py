"""cocotb bench: attention unit (with its replica directory) against the golden
``fixed.scores`` / ``partial_state`` / ``finalize`` / ``encode_state``; random pauses on K, V
and the output, several jobs back to back (final rows and (m, l, o) state words)."""
from __future__ import annotations

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamSink

from mcf.hw.compute.attention import APPLY, MAX, cmd_layout
from mcf.sim.cocotb_util import bounded, params, pauses, start
from mcf.sim.compute.jobs import attention_job
from mcf.sim.compute.streams import StreamSource, write_port


@cocotb.test()
async def attention(dut):
    p = params()
    seed = p.get("seed", 1)
    rng = np.random.default_rng(seed)
    d, group, tokens = p["head_dim"], p["group"], p["rows"] // p["group"]
    ksrc = StreamSource(dut, "k", dut.clk, pauses(seed + 1))
    vsrc = StreamSource(dut, "v", dut.clk, pauses(seed + 2))
    cmd = StreamSource(dut, "cmd", dut.clk)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "o", bus_separator="__"), dut.clk, dut.rst)
    sink.set_pause_generator(pauses(seed + 3))
    dut.q__en.value = 0
    dut.dir_en.value = 0
    await start(dut)
    layout = cmd_layout(p["max_keys"])
    for n in range(p.get("jobs", 4)):
        keys = int(rng.integers(1, p["max_keys"] + 1))
        job = attention_job(rng, d, group, tokens, keys, final=bool(n % 2))
        for blk, st in job.directory:
            dut.dir_block.value, dut.dir_state.value, dut.dir_en.value = blk, st, 1
            await cocotb.triggers.RisingEdge(dut.clk)
        dut.dir_en.value = 0
        await write_port(dut, "q", dut.clk, job.q)
        await cmd.send([layout.const(job.cmd).as_value().value])
        again = [] if p.get("score_buffer", True) else job.k      # no buffer: K again in pass 2
        cocotb.start_soon(ksrc.send(job.k + again))
        cocotb.start_soon(vsrc.send(job.v))
        frame = await bounded(sink.recv(), 200 * (keys + len(job.expected)) + 10_000, f"job {n}")
        data = bytes(frame.tdata)
        got = [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]
        assert len(got) == len(job.expected), f"job {n}: {len(got)} words, expected {len(job.expected)}"
        for i, (a, b) in enumerate(zip(got, job.expected)):
            assert a == b, f"job {n} word {i}: got {a:#x} expected {b:#x}"


@cocotb.test()
async def protocol(dut):
    """Decode protocol under backpressure: MAX job (local maxima), global M through ``mref``,
    APPLY job over the kept scores == ``partial_state(..., m_ref=M)``."""
    p = params()
    seed = p.get("seed", 1)
    rng = np.random.default_rng(seed + 100)
    d, group, tokens = p["head_dim"], p["group"], p["rows"] // p["group"]
    ksrc = StreamSource(dut, "k", dut.clk, pauses(seed + 1))
    vsrc = StreamSource(dut, "v", dut.clk, pauses(seed + 2))
    cmd = StreamSource(dut, "cmd", dut.clk)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "o", bus_separator="__"), dut.clk, dut.rst)
    sink.set_pause_generator(pauses(seed + 3))
    dut.q__en.value = 0
    dut.dir_en.value = 0
    dut.mref_en.value = 0
    await start(dut)
    layout = cmd_layout(p["max_keys"])

    async def words(what, n):
        frame = await bounded(sink.recv(), 200 * (p["max_keys"] + n) + 10_000, what)
        data = bytes(frame.tdata)
        return [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]

    for n in range(p.get("jobs", 2)):
        keys = int(rng.integers(1, p["max_keys"] + 1))
        job = attention_job(rng, d, group, tokens, keys, final=bool(n % 2), protocol=True)
        for blk, st in job.directory:
            dut.dir_block.value, dut.dir_state.value, dut.dir_en.value = blk, st, 1
            await RisingEdge(dut.clk)
        dut.dir_en.value = 0
        await write_port(dut, "q", dut.clk, job.q)
        await cmd.send([layout.const({**job.cmd, "phase": MAX}).as_value().value])
        cocotb.start_soon(ksrc.send(job.k))
        assert await words(f"job {n} maxima", len(job.max_words)) == job.max_words, f"job {n}: maxima"
        for r, mv in job.mref:
            dut.mref_row.value, dut.mref.value, dut.mref_en.value = r, mv, 1
            await RisingEdge(dut.clk)
        dut.mref_en.value = 0
        await cmd.send([layout.const({**job.cmd, "phase": APPLY}).as_value().value])
        if not p.get("score_buffer", True):
            cocotb.start_soon(ksrc.send(job.k))
        cocotb.start_soon(vsrc.send(job.v))
        got = await words(f"job {n} states", len(job.expected))
        assert got == job.expected, f"job {n}: states/rows differ"
