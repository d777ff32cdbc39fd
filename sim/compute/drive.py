"""Drive the compute units in the Amaranth simulator: jobs in, output words out (no expected
values here: callers compare with the golden model).  Used by the unit tests and by the
decoder-layer run (``mcf.sim.compute.layer``), where one unit's output feeds the next.  The
per-cycle loop is ``mcf.sim.amaranth_util.drive``."""
from __future__ import annotations

from mcf.sim.amaranth_util import Feed, drive, send_command, simulate, write_port
from mcf.sim.compute.jobs import unpack, vector_beats, vector_elements


def run_matrix(dut, jobs) -> list[list[int]]:
    """Each ``LinearJob`` -> its output beats (ints), always-valid streams, always-ready output."""
    results = []

    async def bench(ctx):
        ctx.set(dut.o.tready, 1)
        for job in jobs:
            got = []
            await write_port(ctx, dut.act, job.act)
            await write_port(ctx, dut.exp, job.exp)
            await send_command(ctx, dut.cmd, job.cmd)
            want = len(job.w) // (job.cmd["group_beats"] * job.cmd["groups"]) * job.cmd["tokens"]
            feeds = [Feed.of(dut.w, job.w), Feed.of(dut.scale, job.scale)]
            if job.bias:
                feeds.append(Feed.of(dut.bias, job.bias))

            def sample(ctx):
                if ctx.get(dut.o.tvalid):
                    got.append(ctx.get(dut.o.tdata))
                return len(got) == want

            await drive(ctx, feeds, sample, 4 * len(job.w) * job.cmd["tokens"] + 100)
            results.append(got)

    simulate(dut, bench)
    return results


def vector_feed(dut, job, lanes: int) -> Feed:
    """A vector job's operand beats: ``a`` and ``b`` move together (on ``a``'s ready)."""
    a, b = vector_beats(job, lanes)
    return Feed.of(dut.a, a, also=((dut.b.valid, dut.b.payload, b),))


def run_vector(dut, jobs) -> list[list[tuple[int, int, int]]]:
    """Each ``VectorJob`` -> its output elements (x, exp, last), ``dut.lanes`` per beat."""
    results = []
    L = dut.lanes

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        for job in jobs:
            got = []
            feed = vector_feed(dut, job, L)
            await send_command(ctx, dut.cmd, job.cmd)

            def sample(ctx):
                if ctx.get(dut.o.valid):
                    pl = ctx.get(dut.o.payload)
                    got.append((pl.x, pl.exp, pl.last))
                return bool(got and got[-1][2])

            await drive(ctx, [feed], sample, 8 * len(feed.items) + 20)
            results.append(vector_elements(got, L))

    simulate(dut, bench)
    return results


def run_kv_writer(dut, beats_in: list[int], blocks: int) -> list[int]:
    """Packed input beats -> packed output beats (``blocks`` x beats per block)."""
    got = []
    want = blocks * dut.beats

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)

        def sample(ctx):
            if ctx.get(dut.o.valid):
                got.append(ctx.get(dut.o.payload.as_value()))
            return len(got) == want

        await drive(ctx, [Feed.of(dut.i, beats_in, raw=True)], sample, 4 * want + 20)

    simulate(dut, bench)
    return got


async def load_attention_job(ctx, dut, job) -> None:
    """Write a job's replica-directory entries and query rows into the attention unit."""
    for blk, st in job.directory:
        ctx.set(dut.dir_en, 1); ctx.set(dut.dir_block, blk); ctx.set(dut.dir_state, st)
        await ctx.tick()
    ctx.set(dut.dir_en, 0)
    await write_port(ctx, dut.q, job.q)


def run_attention(dut, jobs) -> list[list[int]]:
    """Each ``AttentionJob`` (phase FULL) -> its 32-bit output words."""
    results = []

    async def bench(ctx):
        ctx.set(dut.o.tready, 1)
        for job in jobs:
            got = []
            await load_attention_job(ctx, dut, job)
            await send_command(ctx, dut.cmd, job.cmd)
            ks = job.k if dut.score_buffer else job.k + job.k     # no buffer: K again in pass 2
            feeds = [Feed.of(dut.k, ks, raw=True), Feed.of(dut.v, job.v, raw=True)]

            def sample(ctx):
                if ctx.get(dut.o.tvalid):
                    got.append(ctx.get(dut.o.tdata))
                    return bool(ctx.get(dut.o.tlast))
                return False

            await drive(ctx, feeds, sample, 4 * len(job.k) + 4 * len(job.q) * 40 + 100)
            results.append(got)

    simulate(dut, bench)
    return results


def words_to_int32(words: list[int]) -> list[int]:
    return [unpack(w, 32, 1)[0] for w in words]
