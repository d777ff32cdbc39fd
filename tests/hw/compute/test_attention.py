"""Attention unit + replica directory (hw/compute/attention.py): Amaranth-simulator tests and
the cocotb benches with their pytest runner, against the golden ``fixed.scores`` /
``partial_state`` / ``finalize`` / ``encode_state`` (GQA rows, causal and directory masks).

The benches put random pauses on K, V and the output and run several jobs back to back (final
rows and (m, l, o) state words); ``run_decode_protocol`` runs the decode protocol (MAX job, global M
through ``mref``, APPLY job).
"""
import cocotb
import numpy as np
import pytest
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamSink

from mcf.hw.compute.attention import AttentionUnit, Phase, cmd_layout
from mcf.hw.compute.directory import ReplicaDirectory
from mcf.sim.cocotb_util import StreamSource, bounded, params, pauses, start, write_port
from mcf.sim.amaranth_util import Feed, drive, send_command, simulate
from mcf.sim.compute.drive import load_attention_job, run_attention
from mcf.sim.compute.jobs import attention_job
from mcf.sim.runner import run_cocotb


@cocotb.test()
async def run_jobs(dut):
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
async def run_decode_protocol(dut):
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
        await cmd.send([layout.const({**job.cmd, "phase": Phase.MAX}).as_value().value])
        cocotb.start_soon(ksrc.send(job.k))
        assert await words(f"job {n} maxima", len(job.max_words)) == job.max_words, f"job {n}: maxima"
        for r, mv in job.mref:
            dut.mref_row.value, dut.mref.value, dut.mref_en.value = r, mv, 1
            await RisingEdge(dut.clk)
        dut.mref_en.value = 0
        await cmd.send([layout.const({**job.cmd, "phase": Phase.APPLY}).as_value().value])
        if not p.get("score_buffer", True):
            cocotb.start_soon(ksrc.send(job.k))
        cocotb.start_soon(vsrc.send(job.v))
        got = await words(f"job {n} states", len(job.expected))
        assert got == job.expected, f"job {n}: states/rows differ"


def test_construction():
    a = AttentionUnit(head_dim=16, rows=2, max_keys=64)
    assert len(a.o.tdata) == 32
    with pytest.raises(ValueError):
        AttentionUnit(max_keys=48)
    assert ReplicaDirectory(10).block_bits == 10


def amaranth_run(dut, job):
    """One job through the shared Amaranth-simulator driver (mcf.sim.compute.drive)."""
    return run_attention(dut, [job])[0]


@pytest.mark.parametrize("final,buffer", [(False, True), (True, True), (False, False), (True, False)])
def test_attention_amaranth_sim(final, buffer):
    rng = np.random.default_rng(5 + final)
    dut = AttentionUnit(head_dim=8, rows=4, max_keys=16, score_buffer=buffer)
    job = attention_job(rng, d=8, group=2, tokens=2, keys=11, final=final)
    assert amaranth_run(dut, job) == job.expected


@pytest.mark.cocotb
@pytest.mark.parametrize("buffer", [True, False])
def test_attention_cocotb(build_dir, buffer):
    p = dict(head_dim=8, rows=4, max_keys=16)
    run_cocotb(AttentionUnit(**p, score_buffer=buffer), __name__, build_dir,
               testcase=["run_jobs", "run_decode_protocol"],
               params={**p, "group": 2, "jobs": 4, "score_buffer": buffer})


def amaranth_protocol(dut, job):
    """MAX job (local maxima out), global M written through mref, then APPLY (pass 2 only)."""
    got_max, got = [], []

    async def bench(ctx):
        await load_attention_job(ctx, dut, job)
        ctx.set(dut.o.tready, 1)
        for phase, out in ((Phase.MAX, got_max), (Phase.APPLY, got)):
            if phase == Phase.APPLY:
                for r, mv in job.mref:
                    ctx.set(dut.mref_en, 1); ctx.set(dut.mref_row, r); ctx.set(dut.mref, mv)
                    await ctx.tick()
                ctx.set(dut.mref_en, 0)
            await send_command(ctx, dut.cmd, {**job.cmd, "phase": phase})
            want = len(job.max_words) if phase == Phase.MAX else len(job.expected)
            feeds = ([Feed.of(dut.k, job.k, raw=True)] if phase == Phase.MAX else
                     [Feed.of(dut.v, job.v, raw=True)] + ([] if dut.score_buffer else [Feed.of(dut.k, job.k, raw=True)]))

            def sample(ctx, out=out, want=want):
                if ctx.get(dut.o.tvalid):
                    out.append(ctx.get(dut.o.tdata))
                return len(out) == want

            await drive(ctx, feeds, sample, 10 * len(job.k) + 10 * want + 100)

    simulate(dut, bench)
    return got_max, got


@pytest.mark.parametrize("final,buffer", [(False, True), (True, True), (True, False)])
def test_decode_protocol_amaranth_sim(final, buffer):
    """Local max (ReduceOp.MAX input), then the state with the global M: partial_state(m_ref=M)."""
    rng = np.random.default_rng(11 + final)
    dut = AttentionUnit(head_dim=8, rows=4, max_keys=16, score_buffer=buffer)
    job = attention_job(rng, d=8, group=2, tokens=2, keys=12, final=final, protocol=True)
    got_max, got = amaranth_protocol(dut, job)
    assert got_max == job.max_words
    assert got == job.expected
