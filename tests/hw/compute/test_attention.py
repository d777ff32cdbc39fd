"""Attention unit + replica directory: Amaranth-simulator and cocotb benches vs the golden
``fixed.scores`` / ``partial_state`` / ``finalize`` / ``encode_state`` (GQA rows, causal and
directory masks)."""
import numpy as np
import pytest
from amaranth.sim import Simulator

from mcf.hw.compute.attention import AttentionUnit
from mcf.hw.compute.directory import ReplicaDirectory
from mcf.sim.compute.jobs import attention_job
from mcf.sim.compute.drive import load_attention_job, run_attention
from mcf.sim.runner import run_cocotb


def test_construction():
    a = AttentionUnit(head_dim=16, rows=2, max_keys=64)
    assert len(a.o.tdata) == 32
    with pytest.raises(ValueError):
        AttentionUnit(max_keys=48)
    assert ReplicaDirectory(10).block_bits == 10


def run_amaranth(dut, job):
    """One job through the shared Amaranth-simulator driver (mcf.sim.compute.drive)."""
    return run_attention(dut, [job])[0]


@pytest.mark.parametrize("final,buffer", [(False, True), (True, True), (False, False), (True, False)])
def test_attention_amaranth_sim(final, buffer):
    rng = np.random.default_rng(5 + final)
    dut = AttentionUnit(head_dim=8, rows=4, max_keys=16, score_buffer=buffer)
    job = attention_job(rng, d=8, group=2, tokens=2, keys=11, final=final)
    assert run_amaranth(dut, job) == job.expected


@pytest.mark.cocotb
@pytest.mark.parametrize("buffer", [True, False])
def test_attention_cocotb(build_dir, buffer):
    p = dict(head_dim=8, rows=4, max_keys=16)
    run_cocotb(AttentionUnit(**p, score_buffer=buffer), "mcf.sim.compute.test_attention", build_dir,
               testcase=["attention", "protocol"],
               params={**p, "group": 2, "jobs": 4, "score_buffer": buffer})


def run_protocol(dut, job):
    """MAX job (local maxima out), global M written through mref, then APPLY (pass 2 only)."""
    got_max, got = [], []

    async def bench(ctx):
        await load_attention_job(ctx, dut, job)
        ctx.set(dut.o.tready, 1)
        for phase, out, streams in ((1, got_max, ("k",)), (2, got, ("v",))):
            if phase == 2:
                for r, mv in job.mref:
                    ctx.set(dut.mref_en, 1); ctx.set(dut.mref_row, r); ctx.set(dut.mref, mv)
                    await ctx.tick()
                ctx.set(dut.mref_en, 0)
            ctx.set(dut.cmd.payload, {**job.cmd, "phase": phase}); ctx.set(dut.cmd.valid, 1)
            await ctx.tick()
            ctx.set(dut.cmd.valid, 0)
            want = len(job.max_words) if phase == 1 else len(job.expected)
            feeds = [(dut.k, job.k)] if phase == 1 else [(dut.v, job.v)] + ([] if dut.score_buffer else [(dut.k, job.k)])
            idx = [0] * len(feeds)
            for _ in range(10 * len(job.k) + 10 * want + 100):
                for (port, beats), i in zip(feeds, idx):
                    ctx.set(port.valid, i < len(beats)); ctx.set(port.payload.as_value(), beats[min(i, len(beats) - 1)])
                await ctx.delay(1e-9)
                rdy = [ctx.get(port.ready) for port, _ in feeds]
                if ctx.get(dut.o.tvalid):
                    out.append(ctx.get(dut.o.tdata))
                await ctx.tick()
                idx = [i + (r and i < len(b)) for i, r, (_, b) in zip(idx, rdy, feeds)]
                if len(out) == want:
                    break
            for port, _ in feeds:
                ctx.set(port.valid, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got_max, got


@pytest.mark.parametrize("final,buffer", [(False, True), (True, True), (True, False)])
def test_decode_protocol_amaranth_sim(final, buffer):
    """Local max (ReduceOp.MAX input), then the state with the global M: partial_state(m_ref=M)."""
    rng = np.random.default_rng(11 + final)
    dut = AttentionUnit(head_dim=8, rows=4, max_keys=16, score_buffer=buffer)
    job = attention_job(rng, d=8, group=2, tokens=2, keys=12, final=final, protocol=True)
    got_max, got = run_protocol(dut, job)
    assert got_max == job.max_words
    assert got == job.expected
