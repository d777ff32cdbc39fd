"""The cycle formulas of mcf.sim.compute.cost against cycle counts in the Amaranth simulator."""
import numpy as np
import pytest

from mcf.hw.compute.attention import AttentionUnit
from mcf.hw.compute.kv_writer import KVWriter
from mcf.hw.compute.vector import VectorUnit
from mcf.sim.amaranth_util import Feed, drive, send_command, simulate
from mcf.sim.compute import cost
from mcf.sim.compute.drive import load_queries, vector_feed
from mcf.sim.compute.jobs import attention_job, k_run, kv_blocks, vector_job
from mcf.spec.node import NodeConfig
from mcf.sw.models import load_model


def cycles_vector(op, n, lanes):
    """Cycles from the command to the last output element, always-valid operands."""
    rng = np.random.default_rng(1)
    job = vector_job(rng, op, n)
    dut = VectorUnit(max_n=n, lanes=lanes)
    out = {}

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        await send_command(ctx, dut.cmd, job.cmd)
        out["cycles"] = 1 + await drive(ctx, [vector_feed(dut, job, lanes)],
                                        lambda ctx: bool(ctx.get(dut.o.valid) and ctx.get(dut.o.payload.last)),
                                        10_000)

    simulate(dut, bench)
    return out["cycles"]


@pytest.mark.parametrize("op", ["RMSNORM", "SILU", "MUL"])
@pytest.mark.parametrize("lanes", [1, 4])
def test_vector_cycles(op, lanes):
    assert cycles_vector(op, 16, lanes) == cost.vector_cycles(op, 16, lanes)


@pytest.mark.parametrize("d,keys", [(16, 10), (32, 11)])
def test_attention_cycles(d, keys):
    """MAX pass + APPLY pass over every key (always valid) + FINAL emit, commands back to back,
    at the default folding (4 and 8 cycles per key pair; an even and an odd number of keys)."""
    from mcf.spec.isa import AttnPass, EmitMode
    rng = np.random.default_rng(2)
    job = attention_job(rng, d=d, group=2, tokens=2, keys=keys, final=True)
    dut = AttentionUnit(head_dim=d, rows=4, max_keys=16)
    out = {}

    async def bench(ctx):
        await load_queries(ctx, dut, job)
        ctx.set(dut.o.tready, 1)
        cycles = 0
        for phase in (AttnPass.MAX, AttnPass.APPLY):
            await send_command(ctx, dut.cmd, {"emit": 0, "phase": phase, "first": 1, "mode": 0, "rows": 1})
            feeds = [Feed.of(dut.k, k_run(job, job.runs[0], d), raw=True), Feed.of(dut.v, job.v, raw=True)]
            cycles += 1 + await drive(ctx, feeds, lambda ctx: not ctx.get(dut.busy), 10_000)
        await send_command(ctx, dut.cmd, {"emit": 1, "phase": 0, "first": 0, "mode": EmitMode.FINAL, "rows": 4})
        cycles += 1 + await drive(ctx, [], lambda ctx: bool(ctx.get(dut.o.tvalid) and ctx.get(dut.o.tlast)), 10_000)
        out["cycles"] = cycles

    simulate(dut, bench)
    assert out["cycles"] == cost.attention_cycles(keys, 4, d, final=True)


def test_layer_cycles_tiny_and_qwen():
    tiny = load_model("tiny")
    c = cost.layer_cycles(tiny, tokens=8, context=8)
    assert c["total"] == c["gemm"] + c["vector"] + c["kv_writer"] + c["attention"]
    q = cost.layer_cycles(load_model("qwen2.5-1.5b"), tokens=1, context=4096)
    # decode is GEMM-bound: one weight beat per cycle for every weight of the layer
    assert q["gemm"] >= load_model("qwen2.5-1.5b").params_per_layer / NodeConfig().macs_per_cycle
