"""The cycle formulas of mcf.sim.compute.cost against cycle counts in the Amaranth simulator."""
import numpy as np
import pytest
from amaranth.sim import Simulator

from mcf.hw.compute.attention import AttentionUnit
from mcf.hw.compute.kv_writer import KVWriter
from mcf.hw.compute.vector import VectorUnit
from mcf.sim.compute import cost
from mcf.sim.compute.jobs import attention_job, kv_blocks, vector_job
from mcf.spec.node import NodeConfig
from mcf.sw.models import load_model


def cycles_vector(op, n, lanes):
    from mcf.sim.compute.jobs import vector_beats
    rng = np.random.default_rng(1)
    job = vector_job(rng, op, n)
    dut = VectorUnit(max_n=n, lanes=lanes)
    a, b = vector_beats(job, lanes)
    n = len(a)
    out = {}

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.cmd.payload, job.cmd); ctx.set(dut.cmd.valid, 1)
        await ctx.tick()
        ctx.set(dut.cmd.valid, 0)
        cyc, i = 1, 0
        while True:
            ctx.set(dut.a.valid, i < n); ctx.set(dut.b.valid, i < n)
            if i < n:
                ctx.set(dut.a.payload, a[i])
                ctx.set(dut.b.payload, b[i])
            await ctx.delay(1e-9)
            took = ctx.get(dut.a.ready)
            done = ctx.get(dut.o.valid) and ctx.get(dut.o.payload.last)
            await ctx.tick()
            cyc += 1
            i += bool(took) and i < n
            if done:
                out["cycles"] = cyc
                return

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out["cycles"]


@pytest.mark.parametrize("op", ["RMSNORM", "SILU", "MUL"])
@pytest.mark.parametrize("lanes", [1, 4])
def test_vector_cycles(op, lanes):
    assert cycles_vector(op, 16, lanes) == cost.vector_cycles(op, 16, lanes)


def test_attention_cycles():
    rng = np.random.default_rng(2)
    job = attention_job(rng, d=8, group=2, tokens=2, keys=10, final=True)
    dut = AttentionUnit(head_dim=8, rows=4, max_keys=16)
    out = {}

    async def bench(ctx):
        for r, w in job.q:
            ctx.set(dut.q.en, 1); ctx.set(dut.q.addr, r); ctx.set(dut.q.data, w)
            await ctx.tick()
        ctx.set(dut.q.en, 0)
        ctx.set(dut.o.tready, 1)
        ctx.set(dut.cmd.payload, job.cmd); ctx.set(dut.cmd.valid, 1)
        await ctx.tick()
        ctx.set(dut.cmd.valid, 0)
        cyc, ki, vi = 1, 0, 0
        while True:
            ctx.set(dut.k.valid, ki < 10); ctx.set(dut.k.payload.as_value(), job.k[min(ki, 9)])
            ctx.set(dut.v.valid, vi < 10); ctx.set(dut.v.payload.as_value(), job.v[min(vi, 9)])
            await ctx.delay(1e-9)
            kr, vr = ctx.get(dut.k.ready), ctx.get(dut.v.ready)
            done = ctx.get(dut.o.tvalid) and ctx.get(dut.o.tlast)
            await ctx.tick()
            cyc += 1
            ki += kr and ki < 10; vi += vr and vi < 10
            if done:
                out["cycles"] = cyc
                return

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert out["cycles"] == cost.attention_cycles(10, 4, 8, final=True)


def test_layer_cycles_tiny_and_qwen():
    tiny = load_model("tiny")
    c = cost.layer_cycles(tiny, tokens=8, context=8)
    assert c["total"] == c["gemm"] + c["vector"] + c["kv_writer"] + c["attention"]
    q = cost.layer_cycles(load_model("qwen2.5-1.5b"), tokens=1, context=4096)
    # decode is GEMM-bound: one weight beat per cycle for every weight of the layer
    assert q["gemm"] >= load_model("qwen2.5-1.5b").params_per_layer / NodeConfig().macs_per_cycle
