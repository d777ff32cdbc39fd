"""Drive the compute units in the Amaranth simulator: jobs in, output words out (no expected
values here: callers compare with the golden model).  Used by the unit tests and by the
decoder-layer run (``mcf.sim.compute.layer``), where one unit's output feeds the next."""
from __future__ import annotations

from amaranth.sim import Simulator

from mcf.sim.compute.jobs import unpack


def _run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def run_matrix(dut, jobs) -> list[list[int]]:
    """Each ``LinearJob`` -> its output beats (ints), always-valid streams, always-ready output."""
    results = []

    async def bench(ctx):
        ctx.set(dut.o.tready, 1)
        for job in jobs:
            got = []
            for a, d in job.act:
                ctx.set(dut.act.en, 1); ctx.set(dut.act.addr, a); ctx.set(dut.act.data, d)
                await ctx.tick()
            ctx.set(dut.act.en, 0)
            for a, d in job.exp:
                ctx.set(dut.exp.en, 1); ctx.set(dut.exp.addr, a); ctx.set(dut.exp.data, d)
                await ctx.tick()
            ctx.set(dut.exp.en, 0)
            ctx.set(dut.cmd.payload, job.cmd); ctx.set(dut.cmd.valid, 1)
            await ctx.tick()
            ctx.set(dut.cmd.valid, 0)
            want = len(job.w) // (job.cmd["group_beats"] * job.cmd["groups"]) * job.cmd["tokens"]
            wi = si = bi = 0
            for _ in range(4 * len(job.w) * job.cmd["tokens"] + 100):
                ctx.set(dut.w.tvalid, wi < len(job.w)); ctx.set(dut.w.tdata, job.w[min(wi, len(job.w) - 1)])
                ctx.set(dut.scale.valid, si < len(job.scale))
                ctx.set(dut.scale.payload, job.scale[min(si, len(job.scale) - 1)])
                if job.bias:
                    ctx.set(dut.bias.valid, bi < len(job.bias))
                    ctx.set(dut.bias.payload, job.bias[min(bi, len(job.bias) - 1)])
                await ctx.delay(1e-9)
                wr, sr, br = ctx.get(dut.w.tready), ctx.get(dut.scale.ready), ctx.get(dut.bias.ready)
                if ctx.get(dut.o.tvalid):
                    got.append(ctx.get(dut.o.tdata))
                await ctx.tick()
                wi += wr; si += sr; bi += br
                if len(got) == want:
                    break
            ctx.set(dut.w.tvalid, 0); ctx.set(dut.scale.valid, 0); ctx.set(dut.bias.valid, 0)
            results.append(got)

    _run(dut, bench)
    return results


def run_vector(dut, jobs) -> list[list[tuple[int, int, int]]]:
    """Each ``VectorJob`` -> its output elements (x, exp, last), ``dut.lanes`` per beat."""
    from mcf.sim.compute.jobs import vector_beats, vector_elements
    results = []
    L = dut.lanes

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        for job in jobs:
            got = []
            a, b = vector_beats(job, L)
            n = len(a)
            ctx.set(dut.cmd.payload, job.cmd); ctx.set(dut.cmd.valid, 1)
            await ctx.tick()
            ctx.set(dut.cmd.valid, 0)
            i = 0
            for _ in range(8 * n + 20):
                ctx.set(dut.a.valid, i < n); ctx.set(dut.b.valid, i < n)
                if i < n:
                    ctx.set(dut.a.payload, a[i])
                    ctx.set(dut.b.payload, b[i])
                await ctx.delay(1e-9)
                took = ctx.get(dut.a.ready)
                if ctx.get(dut.o.valid):
                    pl = ctx.get(dut.o.payload)
                    got.append((pl.x, pl.exp, pl.last))
                await ctx.tick()
                i += bool(took) and i < n
                if got and got[-1][2]:
                    break
            ctx.set(dut.a.valid, 0); ctx.set(dut.b.valid, 0)
            results.append(vector_elements(got, L))

    _run(dut, bench)
    return results


def run_kv_writer(dut, beats_in: list[int], blocks: int) -> list[int]:
    """Packed input beats -> packed output beats (``blocks`` x beats per block)."""
    got = []
    want = blocks * dut.beats

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        i = 0
        for _ in range(4 * want + 20):
            ctx.set(dut.i.valid, i < len(beats_in))
            if i < len(beats_in):
                ctx.set(dut.i.payload.as_value(), beats_in[i])
            await ctx.delay(1e-9)
            took = ctx.get(dut.i.ready) and i < len(beats_in)
            if ctx.get(dut.o.valid):
                got.append(ctx.get(dut.o.payload.as_value()))
            await ctx.tick()
            i += bool(took)
            if len(got) == want:
                break

    _run(dut, bench)
    return got


async def load_attention_job(ctx, dut, job) -> None:
    """Write a job's replica-directory entries and query rows into the attention unit."""
    for blk, st in job.directory:
        ctx.set(dut.dir_en, 1); ctx.set(dut.dir_block, blk); ctx.set(dut.dir_state, st)
        await ctx.tick()
    ctx.set(dut.dir_en, 0)
    for r, w in job.q:
        ctx.set(dut.q.en, 1); ctx.set(dut.q.addr, r); ctx.set(dut.q.data, w)
        await ctx.tick()
    ctx.set(dut.q.en, 0)


def run_attention(dut, jobs) -> list[list[int]]:
    """Each ``AttentionJob`` (phase FULL) -> its 32-bit output words."""
    results = []

    async def bench(ctx):
        ctx.set(dut.o.tready, 1)
        for job in jobs:
            got = []
            await load_attention_job(ctx, dut, job)
            ctx.set(dut.cmd.payload, job.cmd); ctx.set(dut.cmd.valid, 1)
            await ctx.tick()
            ctx.set(dut.cmd.valid, 0)
            nk = len(job.k)
            ks = job.k if dut.score_buffer else job.k + job.k     # no buffer: K again in pass 2
            ki = vi = 0
            for _ in range(4 * nk + 4 * len(job.q) * 40 + 100):
                ctx.set(dut.k.valid, ki < len(ks)); ctx.set(dut.k.payload.as_value(), ks[min(ki, len(ks) - 1)])
                ctx.set(dut.v.valid, vi < nk); ctx.set(dut.v.payload.as_value(), job.v[min(vi, nk - 1)])
                await ctx.delay(1e-9)
                kr, vr = ctx.get(dut.k.ready), ctx.get(dut.v.ready)
                done = False
                if ctx.get(dut.o.tvalid):
                    got.append(ctx.get(dut.o.tdata))
                    done = bool(ctx.get(dut.o.tlast))
                await ctx.tick()
                ki += kr and ki < len(ks); vi += vr and vi < nk
                if done:
                    break
            ctx.set(dut.k.valid, 0); ctx.set(dut.v.valid, 0)
            results.append(got)

    _run(dut, bench)
    return results


def words_to_int32(words: list[int]) -> list[int]:
    return [unpack(w, 32, 1)[0] for w in words]
