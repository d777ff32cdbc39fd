"""Attention unit (hw/compute/attention.py): Amaranth-simulator tests and the cocotb bench with
its pytest runner, against the golden ``fixed.scores`` / ``partial_state`` / ``finalize`` /
``encode_state`` (GQA rows, causal mask).

Every job runs the way the ATTN_* instructions drive the unit: query rows loaded, a MAX pass per
run of keys, the maxima emitted, (decode protocol: the global maxima loaded as state word 0), an
APPLY pass per run, then every row emitted as final X32 rows or (m, l, o) state words.  Keys
split over several runs must give the single golden state.  The bench puts random pauses on K,
V and the output; ``run_state_load`` loads whole (m, l, o) states and finalizes them.
"""
import shutil

import cocotb
import numpy as np
import pytest
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamSink

from mcf.hw.compute.attention import (AttentionUnit, cmd_layout, out_words, q_writes, rshr_biased_staged,
                                      rshr_sat_staged)
from mcf.sim.amaranth_util import send_command, simulate
from mcf.sim.cocotb_util import StreamSource, bounded, params, pauses, start, write_port
from mcf.sim.compute.drive import run_attention
from mcf.sim.compute.jobs import attention_job, k_run
from mcf.sim.runner import run_cocotb
from mcf.spec.isa import AttnPass, EmitMode
from mcf.sw.golden import fixed as fx


def _cmd(layout, **kw):
    return layout.const({"emit": 0, "phase": 0, "first": 0, "mode": 0, "rows": 1, **kw}).as_value().value


class Bench:
    def __init__(self, dut, p):
        seed = p.get("seed", 1)
        self.dut, self.p = dut, p
        self.ksrc = StreamSource(dut, "k", dut.clk, pauses(seed + 1))
        self.vsrc = StreamSource(dut, "v", dut.clk, pauses(seed + 2))
        self.cmd = StreamSource(dut, "cmd", dut.clk)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "o", bus_separator="__"), dut.clk, dut.rst)
        self.sink.set_pause_generator(pauses(seed + 3))
        self.layout = cmd_layout(p["rows"])
        dut.q__en.value = 0
        dut.st__en.value = 0
        dut.ow__en.value = 0            # the o load port (ATTN_Q O): undriven it is X under Icarus
        dut.mx__en.value = 0            # the row maxima port (ATTN_SM MAX): likewise
        dut.clear.value = 0

    async def words(self, what, n):
        frame = await bounded(self.sink.recv(), 200 * n + 10_000, what)
        data = bytes(frame.tdata)
        return [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]

    async def idle(self):
        await RisingEdge(self.dut.clk)
        for _ in range(1000):
            if not self.dut.busy.value:
                return
            await RisingEdge(self.dut.clk)
        raise AssertionError("unit still busy")

    async def write_state(self, writes):
        d = self.dut
        for row, word, value in writes:
            d.st__row.value, d.st__word.value, d.st__data.value, d.st__en.value = row, word, value & 0xFFFFFFFF, 1
            await RisingEdge(d.clk)
        d.st__en.value = 0

    async def run_job(self, job, n):
        d = self.p["head_dim"]
        await write_port(self.dut, "q", self.dut.clk, q_writes(self.p["rows"], d, self.p.get("words", 1), job.q))
        got_max = None
        for phase in (AttnPass.MAX, AttnPass.APPLY):
            if phase == AttnPass.APPLY:
                await self.cmd.send([_cmd(self.layout, emit=1, mode=EmitMode.MAX, rows=job.rows)])
                got_max = await self.words(f"job {n} maxima", job.rows)
                await self.write_state([(r, 0, mv) for r, mv in job.mref])
            for i, run in enumerate(job.runs):
                await self.cmd.send([_cmd(self.layout, phase=phase, first=int(i == 0))])
                sends = [cocotb.start_soon(self.ksrc.send(k_run(job, run, d)))]
                if phase == AttnPass.APPLY:
                    sends.append(cocotb.start_soon(self.vsrc.send(job.v[run[0]:run[1]])))
                for s in sends:
                    await s
                await self.idle()
        await self.cmd.send([_cmd(self.layout, emit=1, mode=job.mode, rows=job.rows)])
        got = await self.words(f"job {n} rows", len(job.expected))
        assert got_max == job.max_words, f"job {n}: maxima differ"
        assert len(got) == len(job.expected), f"job {n}: {len(got)} words, expected {len(job.expected)}"
        for i, (a, b) in enumerate(zip(got, job.expected)):
            assert a == b, f"job {n} word {i}: got {a:#x} expected {b:#x}"


@cocotb.test()
async def run_jobs(dut):
    """Jobs back to back under backpressure: FINAL and STATE emits, one or several runs, the
    decode protocol (global maxima loaded before APPLY)."""
    p = params()
    rng = np.random.default_rng(p.get("seed", 1))
    group, tokens = p["group"], p["rows"] // p["group"]
    bench = Bench(dut, p)
    await start(dut)
    for n in range(p.get("jobs", 4)):
        keys = int(rng.integers(2, p["max_keys"] // 2 + 1))
        job = attention_job(rng, p["head_dim"], group, tokens, keys, final=bool(n % 2), protocol=n % 3 == 2,
                            runs=1 + n % 3)
        await bench.run_job(job, n)


@cocotb.test()
async def run_state_load(dut):
    """(m, l, o) states loaded word by word (ATTN_Q STATE), then emitted as FINAL (the merged
    state finalized) and as STATE (read back unchanged); an EMIT of fewer rows."""
    p = params()
    rng = np.random.default_rng(p.get("seed", 1) + 7)
    R, d = p["rows"], p["head_dim"]
    bench = Bench(dut, p)
    await start(dut)
    m = rng.integers(-2**20, 2**20, size=R)
    l = rng.integers(1, 2**31 - 1, size=R)
    l[0] = 0
    o = rng.integers(-2**31, 2**31, size=(R, d))
    words = fx.encode_state(fx.State(m, l, o))                       # [R, d + 2]
    await bench.write_state([(r, w, int(words[r, w])) for r in range(R) for w in range(d + 2)])
    await bench.cmd.send([_cmd(bench.layout, emit=1, mode=EmitMode.FINAL, rows=R)])
    got = await bench.words("final rows", R * d)
    want = fx.finalize(fx.State(m[None], l[None], o[None]))[:, 0]     # [R, d]
    assert got == [int(w) & 0xFFFFFFFF for w in want.reshape(-1)]
    rows = max(1, R - 1)
    await bench.cmd.send([_cmd(bench.layout, emit=1, mode=EmitMode.STATE, rows=rows)])
    got = await bench.words("state words", rows * (d + 2))
    assert got == [int(w) & 0xFFFFFFFF for w in words[:rows].reshape(-1)]


def test_construction():
    a = AttentionUnit(head_dim=16, rows=2, max_keys=64)
    assert len(a.o.tdata) == 32 and a.l_width == 34 and a.o_width == 44
    assert (a.lanes, a.chunks) == (4, 4) and a.cycles_per_key == (2, 4)
    q = AttentionUnit(head_dim=128, rows=6, max_keys=4096)       # the default folding at head_dim 128
    assert (q.lanes, q.chunks, q.cycles_per_key, q.multipliers) == (16, 8, (4, 8), 6 * 32)
    n = AttentionUnit(head_dim=128, rows=6, max_keys=4096, lanes=2, words=8)    # the KR260 node's (att_lanes)
    assert (n.lanes, n.chunks, n.cycles_per_key, n.multipliers, n.o_lanes) == (2, 64, (32, 64), 6 * 4, 8)
    with pytest.raises(ValueError, match="^lanes=6: must divide head_dim=16"):
        AttentionUnit(head_dim=16, lanes=6)
    with pytest.raises(ValueError, match="^max_keys=48: must be a power of two$"):
        AttentionUnit(max_keys=48)
    with pytest.raises(ValueError, match="^rows=0, head_dim=16: must be >= 1$"):
        AttentionUnit(rows=0)
    for bad in (0, 3):
        with pytest.raises(ValueError, match=f"^prod_rows={bad}: must be 1 .. rows=2$"):
            AttentionUnit(rows=2, prod_rows=bad)
    for bad in (3, 32, 0):          # W: a power of two dividing lanes = 4, or a multiple of them dividing 16
        with pytest.raises(ValueError, match=f"^words={bad}: must be a power of two dividing lanes=4 or a multiple "
                                             f"of lanes dividing head_dim=16$"):
            AttentionUnit(head_dim=16, words=bad)
    assert AttentionUnit(head_dim=16, words=8).o_lanes == 8 and AttentionUnit(head_dim=16, words=2).o_lanes == 4
    assert len(AttentionUnit(head_dim=16, words=4).o.tdata) == 128
    assert (out_words(128, 8), out_words(16, 8), out_words(16, 4), out_words(96, 8)) == (8, 4, 4, 4)


@pytest.mark.parametrize("width,signed_x,max_left,s_bits", [(36, True, 33, 10), (24, False, 33, 10), (49, True, 5, 6)])
def test_rshr_sat_staged(width, signed_x, max_left, s_bits):
    """The post's and FINAL's shifts (rs, wr, fin: 32-bit left shifts with an overflow flag) against
    golden sat(rshr(x, s), 32): x at its extremes, 0, +-1, powers of two and random, s over every
    left shift the caller allows and right shifts past x's width (or up to s's largest, FINAL's
    6-bit shift); one operand a cycle."""
    from amaranth import Module, Signal, signed, unsigned
    from mcf.hw.arith import sat
    from mcf.sw.golden import fixed as gf
    rng = np.random.default_rng(width)
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed_x else (0, (1 << width) - 1)
    xs = [lo, hi, 0, 1, -1 if signed_x else 2, lo + 1, hi - 1] + [v for k in range(width - 1) for v in
                                                                   ((1 << k), -(1 << k), (1 << k) - 1, -(1 << k) - 1)
                                                                   if lo <= v <= hi]
    xs += [int(v) for v in rng.integers(lo, hi, 64, endpoint=True)]
    ss = list(range(-max_left, min(width + 3, 1 << (s_bits - 1))))
    cases = [(x, s) for x in xs for s in ss]
    cases = [cases[i] for i in rng.choice(len(cases), min(len(cases), 1500), replace=False)]
    m = Module()
    x = Signal(signed(width) if signed_x else unsigned(width))
    s = Signal(signed(s_bits))
    out = sat(m, rshr_sat_staged(m, x, s, max_left, 32, "t"), 32)
    got = []

    async def bench(ctx):
        for i in range(len(cases) + 3):
            if i < len(cases):
                ctx.set(x, cases[i][0])
                ctx.set(s, cases[i][1])
            await ctx.tick()
            if i >= 2:
                got.append(ctx.get(out))
    simulate(m, bench)
    want = [int(gf.sat(gf.rshr(xv, sv), 32)) for xv, sv in cases]
    assert got[:len(cases)] == want


@pytest.mark.parametrize("final,runs,protocol", [(False, 1, False), (True, 3, False), (True, 2, True),
                                                 (False, 1, True)])
def test_attention_amaranth_sim(final, runs, protocol):
    rng = np.random.default_rng(5 + final + 3 * runs)
    dut = AttentionUnit(head_dim=8, rows=4, max_keys=16)
    job = attention_job(rng, d=8, group=2, tokens=2, keys=11, final=final, runs=runs, protocol=protocol)
    got_max, got = run_attention(dut, [job])[0]
    assert got_max == job.max_words
    assert got == job.expected


def test_attention_w_bound():
    """w = min(rshr(p A_v, 3 - E_v), W_MAX) (docs/fixed-point.md 5.8): a crafted V key at
    exponent 60 gives every row o = (W_MAX, -W_MAX, 0, ..) in the emitted state (a 32-bit
    saturation of w would give 2^31 - 1)."""
    rng = np.random.default_rng(3)
    dut = AttentionUnit(head_dim=8, rows=4, max_keys=16)
    job = attention_job(rng, d=8, group=2, tokens=2, keys=5, final=False, w_bound=True)
    words = np.array(job.expected, dtype=np.uint32).view(np.int32).reshape(4, 10)
    assert (words[:, 2] == fx.W_MAX).all() and (words[:, 3] == -fx.W_MAX).all() and not words[:, 4:].any()
    got_max, got = run_attention(dut, [job])[0]
    assert got_max == job.max_words
    assert got == job.expected


def test_attention_w_at_the_v_scale_extremes():
    """w = min(rshr(p A_v, 3 - E_v), W_MAX) at the ends of E_v and A_v (docs/fixed-point.md
    5.8): eight one-hot V keys, equal scores (p = 2^15), so o[j] = +-w_j.  E_v = 127 shifts left
    by 124 (beyond the unit's 33-bit shifter: W_MAX for any A_v > 0, 0 for A_v = 0); E_v = -128
    shifts right by 131 (0); E_v = -20 / -21 are the last shifts whose rounding gives 1 / 0."""
    scales = [(255, 127), (0, 127), (255, -128), (0, -128), (255, -20), (255, -21), (1, 127), (200, 1)]
    w = [fx.W_MAX, 0, 0, 0, 1, 0, fx.W_MAX, 200 << 13]
    job = attention_job(np.random.default_rng(4), d=8, group=2, tokens=2, keys=8, final=False, v_scales=scales)
    words = np.array(job.expected, dtype=np.uint32).view(np.int32).reshape(4, 10)
    assert (words[:, 1] == 8 << 15).all()                                  # l: eight keys of p = 2^15
    assert (words[:, 2:] == np.array(w) * np.tile([1, -1], 4)).all(), words[:, 2:]
    dut = AttentionUnit(head_dim=8, rows=4, max_keys=16)
    got_max, got = run_attention(dut, [job])[0]
    assert got_max == job.max_words
    assert got == job.expected


@pytest.mark.parametrize("lanes", [8, 4])
def test_attention_folded_amaranth_sim(lanes):
    """head_dim 32 folded to 8 (4 chunks a key pair) or 4 lanes (8 chunks): odd key counts (a
    pair of one key at a run's end), several runs, both emit modes.  (Fewer lanes than ``words``, o
    in W memories a row as on the KR260 node: ``test_attention_cocotb[d8-lanes2-words4]``.)"""
    rng = np.random.default_rng(11 + lanes)
    dut = AttentionUnit(head_dim=32, rows=4, max_keys=64, lanes=lanes)
    assert dut.chunks == 32 // lanes
    jobs = [attention_job(rng, d=32, group=2, tokens=2, keys=keys, final=final, runs=runs, protocol=protocol)
            for keys, final, runs, protocol in ((13, True, 2, False), (6, False, 3, True))]
    for job, (got_max, got) in zip(jobs, run_attention(dut, jobs)):
        assert got_max == job.max_words
        assert got == job.expected


def test_first_resets_only_its_pass():
    """APPLY with ``first`` clears l and o but keeps m; ``clear`` empties the whole state."""
    dut = AttentionUnit(head_dim=4, rows=1, max_keys=16)
    got = []

    async def until_idle(ctx):
        for _ in range(100):
            if not ctx.get(dut.busy):
                return
            await ctx.tick()
        raise AssertionError("unit still busy")

    async def take_words(ctx):
        for _ in range(40):         # one STATE row: 6 words and the emit pipeline's latency
            if ctx.get(dut.o.tvalid):
                got.append(ctx.get(dut.o.tdata))
                if ctx.get(dut.o.tlast):
                    await ctx.tick()
                    return
            await ctx.tick()
        raise AssertionError("no TLAST")

    async def bench(ctx):
        ctx.set(dut.o.tready, 1)
        for word, value in ((0, 1234), (1, 77), (2, -5), (3, 6), (4, 7), (5, 8)):
            ctx.set(dut.st.en, 1); ctx.set(dut.st.row, 0); ctx.set(dut.st.word, word)
            ctx.set(dut.st.data, value & 0xFFFFFFFF)
            await ctx.tick()
        ctx.set(dut.st.en, 0)
        # an APPLY pass with first over one invisible key (position beyond the row's): l = o = 0
        ctx.set(dut.k.payload.pos, 5)
        ctx.set(dut.k.payload.last, 1)
        await send_command(ctx, dut.cmd, {"emit": 0, "phase": AttnPass.APPLY, "first": 1, "mode": 0, "rows": 1})
        ctx.set(dut.k.valid, 1); ctx.set(dut.v.valid, 1)
        await ctx.tick()
        ctx.set(dut.k.valid, 0); ctx.set(dut.v.valid, 0)
        await until_idle(ctx)
        await send_command(ctx, dut.cmd, {"emit": 1, "phase": 0, "first": 0, "mode": EmitMode.STATE, "rows": 1})
        await take_words(ctx)

        # clear (ATTN_Q QUERY) empties the state
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        await send_command(ctx, dut.cmd, {"emit": 1, "phase": 0, "first": 0, "mode": EmitMode.STATE, "rows": 1})
        await take_words(ctx)

    simulate(dut, bench)
    assert got == [1234, 0, 0, 0, 0, 0] + [fx.INT32_MIN & 0xFFFFFFFF, 0, 0, 0, 0, 0]


@pytest.mark.cocotb
@pytest.mark.parametrize("p", [dict(head_dim=8, rows=4, max_keys=32), dict(head_dim=16, rows=4, max_keys=32),
                               dict(head_dim=8, rows=4, max_keys=32, lanes=2, words=4),
                               dict(head_dim=16, rows=8, max_keys=32, lanes=2, primitive=True)],
                         ids=["d8", "d16", "d8-lanes2-words4", "d16-rows8-lanes2-primitive"])
def test_attention_cocotb(build_dir, p):
    """Random pauses on K, V and the output at 2 and 4 cycles per key pair (lanes 4), and at 4 on 2
    lanes with FINAL 4 words a transfer (o in 4 memories a row, a chunk fills 2: state words loaded
    one by one and P.V written back to the chunk's half)."""
    unit = AttentionUnit(**p)
    run_cocotb(unit, __name__, build_dir, testcase=["run_jobs", "run_state_load"],
               params={**p, "group": 2, "jobs": 6 if p["head_dim"] == 8 and "lanes" not in p else 3},
               sim="verilator" if p.get("primitive") else "icarus")


@pytest.mark.parametrize("runs,protocol,stall,words,lanes,prod_rows", [
    (1, False, False, 1, None, None), (3, True, True, 4, None, None), (2, False, True, 2, None, 2),
    (3, True, True, 4, 2, 3)])
def test_attention_streamed_scores_amaranth_sim(runs, protocol, stall, words, lanes, prod_rows):
    """The softmax pass over streamed scores (``cmd.src``, ATTN_SM): MAX gives the golden
    ``partial_state`` m (several runs, saturated scores, rows that see no key), APPLY sends the
    golden ``attn_weights`` w out key by key (``stall``: ``w`` not ready 2 cycles in 5) and sums
    ``state_sums``' l, o untouched (0); the decode protocol loads the global maxima between the
    passes; then o loaded (ATTN_Q O) and FINAL emitted == ``finalize``, ``words`` o words a cycle
    each way (``ow``, and FINAL's W-word transfers; W = 4 on 2 lanes: o in W memories a row).
    ``prod_rows``: only the first rows have query mantissas and products (the array path's state rows
    past them, ``NodeConfig.sm_rows``): the same values on every row.  Then every row's state loaded word
    by word (ATTN_Q STATE, the rows without products too) and emitted as STATE unchanged."""
    from mcf.sim.compute.drive import run_softmax
    from mcf.sim.compute.jobs import softmax_job, unpack
    rng = np.random.default_rng(21 + runs + 4 * protocol)
    dut = AttentionUnit(head_dim=8, rows=6, max_keys=32, words=words, lanes=lanes, prod_rows=prod_rows)
    assert dut.multipliers == (prod_rows or 6) * (dut.lanes + 2 * (-(-dut.lanes // 2)))
    jobs = [softmax_job(rng, d=8, group=3, tokens=2, keys=keys, runs=runs, protocol=protocol)
            for keys in (19, 7)]
    results = run_softmax(dut, jobs, (lambda i: i % 5 >= 2) if stall else (lambda i: True), reload=True)
    for job, got in zip(jobs, results):
        assert got["reloaded"] == got["reload"], "ATTN_Q STATE: the words loaded are not emitted"
        assert got["max"] == job.max_words
        assert [unpack(w, 32, job.rows, signed=False) for w in got["w"]] == job.w
        assert got["state"] == job.state_words
        assert got["final"] == job.final_words


@pytest.mark.parametrize("max_words,shuffle,protocol", [(8, False, False), (3, True, True)])
def test_attention_row_maxima_amaranth_sim(max_words, shuffle, protocol):
    """Row maxima (``mx``, ATTN_SM MAX): each row's scores ``max_words`` keys a beat (the last beat
    padded) give the golden ``partial_state`` m over several runs (saturated scores, a row that sees
    no key, a beat half visible); shuffled: a row's beats back to back, idle cycles between; then
    APPLY over streamed scores, STATE and FINAL as ATTN_SM APPLY / ATTN_EMIT run them.  The maxima
    take one beat a cycle: a pass's cycles = its beats (+ idles) + ``max_write_latency``."""
    from mcf.hw.compute.attention import max_write_latency
    from mcf.sim.compute.drive import run_softmax
    from mcf.sim.compute.jobs import softmax_job, unpack
    rng = np.random.default_rng(5 + max_words)
    dut = AttentionUnit(head_dim=8, rows=6, max_keys=32, words=2, max_words=max_words)
    jobs = [softmax_job(rng, d=8, group=3, tokens=2, keys=keys, runs=3, protocol=protocol) for keys in (19, 7)]
    results = run_softmax(dut, jobs, mx=True, mx_rng=rng if shuffle else None)
    for job, got in zip(jobs, results):
        assert got["max"] == job.max_words
        assert [unpack(w, 32, job.rows, signed=False) for w in got["w"]] == job.w
        assert got["state"] == job.state_words
        assert got["final"] == job.final_words
        if not shuffle:                 # per run: its beats, then the pipeline drains
            want = sum(job.rows * -(-(b - a) // max_words) + max_write_latency(max_words) - 1 for a, b in job.runs)
            assert got["cycles"][AttnPass.MAX] == [want]


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs Icarus Verilog")
@pytest.mark.parametrize("width,bias,step,k_bits,signed_x,bound",
                         [(47, 4, 2, 4, True, None), (23, 31, 0, 6, True, None), (10, 1, 1, 3, True, None),
                          (12, 0, 2, 5, True, None), (26, 31, 2, 4, False, fx.W_MAX), (9, 3, 1, 3, False, None),
                          (9, 3, 1, 3, False, 300)],
                         ids=["fin", "wr-step1", "odd-k", "k-past-cap", "wr", "unsigned-odd-k", "unsigned-bound"])
def test_rshr_biased_staged_lut6_equals_the_plain_build(tmp_path, width, bias, step, k_bits, signed_x, bound):
    """(round 28b) ``rshr_biased_staged``'s shift as LUT6 4:1 layers (``primitive``, the node's build)
    against its plain build (the Python simulator's, checked against golden above and in every unit
    test) in Icarus: both on the same random x and k every cycle (FINAL's 47 bits in steps of 4; a w
    shift in steps of 1; an odd number of k's bits; k past the clamp; round 29: the rows' w shift, an
    unsigned 26-bit u 2^c in steps of 4 bounded by W_MAX, whose zero sign the layers pass on and whose
    bits past the bound's they do not build), their outputs compared every cycle."""
    from tests.hw.test_lut import _Pair, _run

    def build(m, stim, primitive):
        x, k = stim[:width], stim[width:width + k_bits]
        x = x.as_signed() if signed_x else x
        out = rshr_biased_staged(m, x, k, bias, "p" if primitive else "q", step=step, primitive=primitive,
                                 bound=bound)
        return out, out[0]
    bad, fires = _run(tmp_path, _Pair(width + k_bits, build))
    assert bad == 0 and fires > 0


def unit_pair(make, fired):
    """(round 33: the attention and vector units' pair tests) A component's primitive and plain builds for
    ``tests.hw.test_lut._Pair``: (the stimulus bits, ``build``), every input port driven from the stimulus, the
    outputs concatenated; ``make(primitive)`` the component, ``fired(dut)`` an output beat taken."""
    from amaranth import Cat, Value
    from amaranth.lib.wiring import In
    probe = make(False)
    probe._MustUse__silence = True          # (only its ports' widths are read)
    bits = sum(len(Value.cast(v)) for _, mb, v in probe.signature.flatten(probe) if mb.flow == In)

    def build(m, stim, primitive):
        dut = make(primitive)
        m.submodules["prim" if primitive else "plain"] = dut
        at, outs = 0, []
        for _, mb, v in dut.signature.flatten(dut):
            v = Value.cast(v)
            if mb.flow == In:
                m.d.comb += v.eq(stim[at:at + len(v)])
                at += len(v)
            else:
                outs.append(v)
        return Cat(*outs), fired(dut)
    return bits, build


@pytest.mark.parametrize("p", [dict(head_dim=32, lanes=4, words=8, rows=4, max_keys=64),
                               dict(head_dim=64, lanes=2, words=8, rows=2, max_keys=64)])
def test_unit_on_lut6_equals_the_plain_build(tmp_path, p):
    """(round 30) The unit's primitive build (the node's: DSP48E2 and LUT6 instances, e.g. the rows' m
    written through one 4:1 LUT6 a bit) against its plain build in Icarus, side by side on the same random
    inputs every cycle (every input port: commands, K / V / score beats, state loads, clear), every output
    compared every cycle; fired: an output beat taken."""
    from tests.hw.test_lut import _Pair, _run
    bits, build = unit_pair(lambda primitive: AttentionUnit(**p, primitive=primitive),
                            lambda dut: dut.o.tvalid & dut.o.tready)
    bad, fires = _run(tmp_path, _Pair(bits, build))
    assert bad == 0 and fires > 0
