"""Drive the compute units in the Amaranth simulator: jobs in, output words out (no expected
values here: callers compare with the golden model).  Used by the unit tests, the cost
checks and the demo; the decoder layer runs on the execute unit (``mcf.sim.compute.exec_layer``).
The per-cycle loop is ``mcf.sim.amaranth_util.drive``."""
from __future__ import annotations

from mcf.sim.amaranth_util import Feed, drive, send_command, simulate, write_port
from mcf.sim.compute.jobs import k_run, unpack, vector_beats, vector_elements


def run_matrix(dut, jobs, scale_ahead: int = 0, scale_feed=None, slack: int = 1) -> list[list[int]]:
    """Each ``LinearJob`` -> its output beats (ints), always-valid streams, always-ready output.
    ``scale_ahead``: up to that many of a job's scale beats go in before its command (as the glue's
    scale mover may send them).  ``scale_feed(beats)``: the scale stream's ``Feed`` of a job's beats
    (default: always valid); a slower one needs ``slack`` times the cycle bound."""
    results = []

    async def bench(ctx):
        ctx.set(dut.o.tready, 1)
        for job in jobs:
            got = []
            await write_port(ctx, dut.act, job.act)
            await write_port(ctx, dut.exp, job.exp)
            scale = scale_feed(list(job.scale)) if scale_feed else Feed.of(dut.scale, job.scale)
            ahead = min(scale_ahead, len(job.scale))
            if ahead:
                await drive(ctx, [scale], lambda ctx: scale.index >= ahead, 10 * ahead)
            await send_command(ctx, dut.cmd, job.cmd)
            want = len(job.expected)
            feeds = [Feed.of(dut.w, job.w), scale]
            if job.bias:
                feeds.append(Feed.of(dut.bias, job.bias))
            if job.prev:
                feeds.append(Feed.of(dut.prev, job.prev))

            def sample(ctx):
                if ctx.get(dut.o.tvalid):
                    got.append(ctx.get(dut.o.tdata))
                return len(got) == want

            await drive(ctx, feeds, sample, slack * (8 * len(job.w) * job.cmd["tokens"] + 100))
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

            await drive(ctx, [feed], sample, 8 * len(feed.items) + 80)   # + the passes' pipeline latency
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


async def load_queries(ctx, dut, job) -> None:
    """Write a job's query rows into the attention unit (``words`` mantissas a write: ``q_writes``)."""
    from mcf.hw.compute.attention import q_writes
    await write_port(ctx, dut.q, q_writes(dut.rows, dut.head_dim, dut.words, job.q))


async def collect_frame(ctx, dut, want: int) -> list[int]:
    """The attention unit's next output frame (``o`` words up to TLAST, the kept 32-bit words of
    each transfer in order), within 4 x ``want`` + 40 cycles (``o.tready`` is the caller's)."""
    got = []

    def sample(ctx):
        if ctx.get(dut.o.tvalid):
            data, keep = ctx.get(dut.o.tdata), ctx.get(dut.o.tkeep)
            got.extend((data >> 32 * k) & 0xFFFFFFFF for k in range(len(dut.o.tkeep) // 4) if (keep >> 4 * k) & 0xF)
            return bool(ctx.get(dut.o.tlast))
        return False
    await drive(ctx, [], sample, 4 * want + 40)
    return got


async def attention_sequence(ctx, dut, job) -> tuple[list[int], list[int]]:
    """One job the way ATTN_* instructions run it: load the queries; a MAX pass per run (the
    first with ``first``); emit the maxima (EmitMode.MAX); for the decode protocol load the
    global maxima (``job.mref``, state word 0); an APPLY pass per run; emit every row in
    ``job.mode``.  Returns (maxima words, final words)."""
    from mcf.spec.isa import AttnPass, EmitMode
    d = dut.head_dim
    await load_queries(ctx, dut, job)
    ctx.set(dut.o.tready, 1)
    outs = []

    async def collect(want):
        return await collect_frame(ctx, dut, want)

    for phase in (AttnPass.MAX, AttnPass.APPLY):
        if phase == AttnPass.APPLY:
            await send_command(ctx, dut.cmd, {"emit": 1, "phase": 0, "first": 0, "mode": EmitMode.MAX,
                                              "rows": job.rows})
            outs.append(await collect(job.rows))
            for r, mv in job.mref:
                ctx.set(dut.st.en, 1); ctx.set(dut.st.row, r); ctx.set(dut.st.word, 0)
                ctx.set(dut.st.data, mv & 0xFFFFFFFF)
                await ctx.tick()
            ctx.set(dut.st.en, 0)
        for i, run in enumerate(job.runs):
            await send_command(ctx, dut.cmd, {"emit": 0, "phase": phase, "first": int(i == 0), "mode": 0,
                                              "rows": 1})
            feeds = [Feed.of(dut.k, k_run(job, run, d), raw=True)]
            if phase == AttnPass.APPLY:
                feeds.append(Feed.of(dut.v, job.v[run[0]:run[1]], raw=True))
            per_key = dut.cycles_per_key[1 if phase == AttnPass.APPLY else 0]

            def done(ctx, feeds=feeds):
                # v.ready is v_room & k.valid & v.valid (the exec mover makes it so from ``v_room``)
                assert ctx.get(dut.v.ready) == (ctx.get(dut.v_room) & ctx.get(dut.k.valid) & ctx.get(dut.v.valid))
                return not any(f.pending for f in feeds)
            await drive(ctx, feeds, done, int(4 * per_key) * (run[1] - run[0]) + 40)
            while ctx.get(dut.busy):
                await ctx.tick()
    await send_command(ctx, dut.cmd, {"emit": 1, "phase": 0, "first": 0, "mode": job.mode, "rows": job.rows})
    outs.append(await collect(job.rows * (d + 2)))
    return outs[0], outs[1]


def run_attention(dut, jobs) -> list[tuple[list[int], list[int]]]:
    """Each ``AttentionJob`` -> (its maxima words, its final words), every stream always valid."""
    results = []

    async def bench(ctx):
        for job in jobs:
            results.append(await attention_sequence(ctx, dut, job))

    simulate(dut, bench)
    return results


def words_to_int32(words: list[int]) -> list[int]:
    return [unpack(w, 32, 1)[0] for w in words]


async def max_beats(ctx, dut, job, runs, order_rng=None) -> int:
    """The MAX passes of ``runs`` the way ATTN_SM MAX drives the unit: per run, each row's scores in
    beats of ``dut.max_words`` keys on ``mx`` (the last one's ``count`` short of them, its other words
    INT32_MAX: ignored, though their positions are visible), ``first`` on each row's
    first beat of run 0; beats in (beat, row) order, or shuffled by ``order_rng`` (a row's beats back to
    back too) with an idle cycle now and then.  Returns the cycles from the first write to idle."""
    from mcf.spec.fixed import INT32_MAX, POS_BITS
    R, MW = job.rows, dut.max_words
    u32, pmask = 0xFFFFFFFF, (1 << POS_BITS) - 1
    cycles = 0
    for i, (a, b) in enumerate(runs):
        beats = [(x, r) for x in range(a, b, MW) for r in range(R)]
        if order_rng is not None:
            beats = [beats[k] for k in order_rng.permutation(len(beats))]
        seen = set()
        for x, r in beats:
            if order_rng is not None and order_rng.random() < 0.2:
                ctx.set(dut.mx.en, 0)
                await ctx.tick()
                cycles += 1
            words = [(job.s[j] >> (32 * r)) & u32 if j < b else INT32_MAX for j in range(x, x + MW)]
            ctx.set(dut.mx.en, 1); ctx.set(dut.mx.row, r); ctx.set(dut.mx.first, int(i == 0 and r not in seen))
            ctx.set(dut.mx.count, min(MW, b - x))
            ctx.set(dut.mx.pos, (job.s[x] >> (32 * R)) & pmask)
            ctx.set(dut.mx.data, sum(w << (32 * k) for k, w in enumerate(words)))
            seen.add(r)
            await ctx.tick()
            cycles += 1
        ctx.set(dut.mx.en, 0)
        while ctx.get(dut.busy):
            await ctx.tick()
            cycles += 1
    return cycles


async def softmax_sequence(ctx, dut, job, w_ready=lambda i: True, mx_rng=None, mx=False, reload=False) -> dict:
    """A ``SoftmaxJob`` the way ATTN_SM / ATTN_Q / ATTN_EMIT run it on the unit: load the query
    rows (positions) and clear the states (ATTN_Q QUERY); a MAX pass over streamed scores per run (the first with ``first``); emit the
    maxima; for the decode protocol load the global maxima; an APPLY pass per run (w words
    collected from ``w``; ``w_ready(i)``: ready in the pass's cycle i); emit STATE (o still 0);
    load every row's o (``ow``, ``dut.words`` words a cycle: ATTN_Q O); emit FINAL.  Returns the words and the
    cycles of each pass (command to idle).  ``mx``: the MAX passes by row beats on ``mx`` instead
    (``max_beats``, shuffled by ``mx_rng`` if given), as ATTN_SM MAX runs them.  ``reload``: then every
    row's state words loaded (ATTN_Q STATE: the emitted state with m + 1 and o's words changed) and emitted
    as STATE again (``reload``: the words loaded, ``reloaded``: emitted)."""
    from mcf.hw.compute.attention import s_layout
    from mcf.sim.compute.jobs import s_run
    from mcf.spec.isa import AttnPass, EmitMode
    R, d = job.rows, dut.head_dim
    await load_queries(ctx, dut, job)
    ctx.set(dut.clear, 1)                       # ATTN_Q QUERY empties every state
    await ctx.tick()
    ctx.set(dut.clear, 0)
    ctx.set(dut.o.tready, 1)
    out = {"w": [], "cycles": {AttnPass.MAX: [], AttnPass.APPLY: []}}

    async def collect(want):
        return await collect_frame(ctx, dut, want)

    async def emit(mode, rows):
        await send_command(ctx, dut.cmd, {"emit": 1, "phase": 0, "first": 0, "src": 0, "mode": mode, "rows": rows})
        return await collect(rows * (d + 2))

    async def write_state(writes):
        for r, word, value in writes:
            ctx.set(dut.st.en, 1); ctx.set(dut.st.row, r); ctx.set(dut.st.word, word)
            ctx.set(dut.st.data, value & 0xFFFFFFFF)
            await ctx.tick()
        ctx.set(dut.st.en, 0)

    for phase in (AttnPass.MAX, AttnPass.APPLY):
        if phase == AttnPass.APPLY:
            out["max"] = await emit(EmitMode.MAX, R)
            await write_state([(r, 0, mv) for r, mv in job.mref])
        if phase == AttnPass.MAX and mx:
            out["cycles"][phase].append(await max_beats(ctx, dut, job, job.runs, mx_rng))
            continue
        for i, run in enumerate(job.runs):
            await send_command(ctx, dut.cmd, {"emit": 0, "phase": phase, "first": int(i == 0), "src": 1,
                                              "mode": 0, "rows": 1})
            feed = Feed.of(dut.s, s_run(job, run, R), raw=True)
            n = 0

            def sample(ctx):
                nonlocal n
                ready = bool(w_ready(n))
                ctx.set(dut.w.ready, ready)
                if ready and ctx.get(dut.w.valid):
                    out["w"].append(ctx.get(dut.w.payload))
                n += 1
                return not feed.pending and not ctx.get(dut.busy)
            cycles = await drive(ctx, [feed], sample, 8 * (run[1] - run[0]) + 60)
            ctx.set(dut.w.ready, 0)
            out["cycles"][phase].append(cycles + 1)           # + the command's cycle
    out["state"] = await emit(EmitMode.STATE, R)
    W = dut.words
    for r in range(R):
        for x in range(d // W):
            ctx.set(dut.ow.en, 1); ctx.set(dut.ow.row, r); ctx.set(dut.ow.slice, x)
            ctx.set(dut.ow.data, sum((job.o_words[r][x * W + k] & 0xFFFFFFFF) << (32 * k) for k in range(W)))
            await ctx.tick()
    ctx.set(dut.ow.en, 0)
    out["final"] = await emit(EmitMode.FINAL, R)
    if reload:                                  # ATTN_Q STATE: every row's words, then emitted again
        dw = d + 2
        words = [w if i % dw < 2 else ~w & 0xFFFFFFFF for i, w in enumerate(out["state"])]
        words = [(w + 1) & 0xFFFFFFFF if i % dw == 0 else w for i, w in enumerate(words)]
        words[2::dw] = [(o_[0] ^ 0x5A5A5A5A) & 0xFFFFFFFF for o_ in job.o_words]
        await write_state([(i // dw, i % dw, w) for i, w in enumerate(words)])
        out["reload"], out["reloaded"] = words, await emit(EmitMode.STATE, R)
    return out


def run_softmax(dut, jobs, w_ready=lambda i: True, mx=False, mx_rng=None, reload=False) -> list[dict]:
    """Each ``SoftmaxJob`` -> ``softmax_sequence``'s words and cycles."""
    results = []

    async def bench(ctx):
        for job in jobs:
            results.append(await softmax_sequence(ctx, dut, job, w_ready, mx_rng, mx, reload))

    simulate(dut, bench)
    return results
