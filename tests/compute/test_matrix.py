"""Matrix unit: construction, Amaranth-simulator unit test and cocotb bench vs ``fixed.linear``."""
import numpy as np
import pytest
from amaranth.sim import Simulator

from mcf.hw.compute.matrix import MatrixUnit
from mcf.sim.compute.jobs import linear_job
from mcf.sim.runner import run_cocotb


def test_construction():
    mu = MatrixUnit(rows=4, lanes=8, max_tokens=8, max_inputs=256)
    assert mu.macs_per_cycle == 32 and len(mu.w.tdata) == 128 and len(mu.o.tdata) == 128
    assert mu.acc_width >= 20 + 8 + 16 + 5   # exact: n * 2^15 * 8 * (2^16 - 1) fits


def test_bad_params():
    with pytest.raises(ValueError):
        MatrixUnit(lanes=6)


def run_amaranth(dut, job):
    """Drive one job with always-valid streams and an always-ready output."""
    got = []

    async def bench(ctx):
        for a, d in job.act:
            ctx.set(dut.act.en, 1); ctx.set(dut.act.addr, a); ctx.set(dut.act.data, d)
            await ctx.tick()
        ctx.set(dut.act.en, 0)
        for a, d in job.exp:
            ctx.set(dut.exp.en, 1); ctx.set(dut.exp.addr, a); ctx.set(dut.exp.data, d)
            await ctx.tick()
        ctx.set(dut.exp.en, 0)
        ctx.set(dut.cmd.payload, job.cmd)
        ctx.set(dut.cmd.valid, 1)
        await ctx.tick()
        ctx.set(dut.cmd.valid, 0)
        wi = si = bi = 0
        ctx.set(dut.o.tready, 1)
        for _ in range(20 * len(job.w) * job.cmd["tokens"] + 50):
            ctx.set(dut.w.tvalid, wi < len(job.w)); ctx.set(dut.w.tdata, job.w[min(wi, len(job.w) - 1)])
            ctx.set(dut.scale.valid, si < len(job.scale)); ctx.set(dut.scale.payload, job.scale[min(si, len(job.scale) - 1)])
            if job.bias:
                ctx.set(dut.bias.valid, bi < len(job.bias)); ctx.set(dut.bias.payload, job.bias[min(bi, len(job.bias) - 1)])
            await ctx.delay(1e-9)
            wr, sr, br = ctx.get(dut.w.tready), ctx.get(dut.scale.ready), ctx.get(dut.bias.ready)
            if ctx.get(dut.o.tvalid):
                got.append(ctx.get(dut.o.tdata))
            await ctx.tick()
            wi += wr; si += sr; bi += br
            if len(got) == len(job.expected):
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize("t", [1, 3])
def test_linear_amaranth_sim(t):
    rng = np.random.default_rng(t)
    dut = MatrixUnit(rows=2, lanes=4, max_tokens=4, max_inputs=32, max_tiles=4)
    job = linear_job(rng, 2, 4, 4, t=t, n=32, out=4, group=8)
    assert run_amaranth(dut, job) == job.expected


PARAMS = dict(rows=2, lanes=4, max_tokens=4, max_inputs=32, max_tiles=4)


@pytest.mark.cocotb
def test_linear_cocotb(build_dir):
    run_cocotb(MatrixUnit(**PARAMS), "mcf.sim.compute.test_matrix", build_dir,
               testcase="linear", params={**PARAMS, "jobs": 5})


@pytest.mark.cocotb
def test_utilization_cocotb(build_dir, tmp_path):
    import json
    report = tmp_path / "util.json"
    run_cocotb(MatrixUnit(**PARAMS), "mcf.sim.compute.test_matrix", build_dir, testcase="utilization",
               params={**PARAMS, "tokens": 1, "tiles": 4, "group": 8, "report": str(report)})
    figures = json.loads(report.read_text())
    assert figures["mac_utilization"] >= 0.9, figures
