"""Matrix unit (hw/compute/matrix.py): construction, Amaranth-simulator tests, and the cocotb
benches with their pytest runners, against ``fixed.linear``.

``run_linear`` puts random backpressure on every stream; ``run_utilization`` runs a steady-state
tile with every stream ready and reports the MAC utilization (``mcf bench compute`` runs it).
"""
import json
import re

import cocotb
import numpy as np
import pytest
from cocotb.triggers import ReadOnly, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from mcf.hw.compute.matrix import MatrixUnit, cmd_layout
from mcf.sim.cocotb_util import StreamSource, bounded, params, pauses, start, write_port
from mcf.sim.compute.drive import run_matrix
from mcf.sim.compute.jobs import linear_job
from mcf.sim.runner import run_cocotb


def open_ports(dut, p, stall: bool):
    seed = p.get("seed", 1)
    w = AxiStreamSource(AxiStreamBus.from_prefix(dut, "w", bus_separator="__"), dut.clk, dut.rst)
    o = AxiStreamSink(AxiStreamBus.from_prefix(dut, "o", bus_separator="__"), dut.clk, dut.rst)
    if stall:
        w.set_pause_generator(pauses(seed + 1))
        o.set_pause_generator(pauses(seed + 2))
    scale = StreamSource(dut, "scale", dut.clk, pauses(seed + 3, 0.2) if stall else None)
    bias = StreamSource(dut, "bias", dut.clk, pauses(seed + 4, 0.2) if stall else None)
    cmd = StreamSource(dut, "cmd", dut.clk)
    dut.act__en.value = 0
    dut.exp__en.value = 0
    return w, o, scale, bias, cmd


async def drive_job(dut, p, job, w, o, scale, bias, cmd):
    layout = cmd_layout(p["max_tokens"], p["max_inputs"] // p["mac_lanes"], p["max_tiles"])
    await write_port(dut, "act", dut.clk, job.act)
    await write_port(dut, "exp", dut.clk, job.exp)
    await cmd.send([layout.const(job.cmd).as_value().value])
    cocotb.start_soon(scale.send(job.scale))
    cocotb.start_soon(bias.send(job.bias))
    nbytes = p["mac_rows"] * p["mac_lanes"] // 2
    await w.send(AxiStreamFrame(b"".join(x.to_bytes(nbytes, "little") for x in job.w)))
    frame = await bounded(o.recv(), 50 * len(job.w) * job.cmd["tokens"] * 10 + 10_000, "output frame")
    nb = p["mac_rows"] * 4
    got = [int.from_bytes(bytes(frame.tdata)[i:i + nb], "little") for i in range(0, len(frame.tdata), nb)]
    assert len(got) == len(job.expected), f"{len(got)} output beats, expected {len(job.expected)}"
    for i, (a, b) in enumerate(zip(got, job.expected)):
        assert a == b, f"beat {i}: got {a:#x} expected {b:#x}"


@cocotb.test()
async def run_linear(dut):
    """Random shapes, token counts, group sizes, with and without bias, under backpressure."""
    p = params()
    rng = np.random.default_rng(p.get("seed", 1))
    ports = open_ports(dut, p, stall=True)
    await start(dut)
    R, K, TM = p["mac_rows"], p["mac_lanes"], p["max_tokens"]
    for _ in range(p.get("jobs", 4)):
        group = K * int(rng.choice([1, 2]))
        n = group * int(rng.integers(1, p["max_inputs"] // group + 1))
        out = R * int(rng.integers(1, 4))
        t = int(rng.integers(1, TM + 1))
        job = linear_job(rng, R, K, TM, t, n, out, group, bias=bool(rng.integers(0, 2)))
        await drive_job(dut, p, job, *ports)


@cocotb.test()
async def run_utilization(dut):
    """A steady-state GEMM (every stream ready): MAC strobes / cycles from first to last issue."""
    p = params()
    rng = np.random.default_rng(p.get("seed", 1))
    ports = open_ports(dut, p, stall=False)
    await start(dut)
    R, K, TM = p["mac_rows"], p["mac_lanes"], p["max_tokens"]
    job = linear_job(rng, R, K, TM, p["tokens"], p["max_inputs"], R * p["tiles"], p["group"])
    counts = {"mac": 0, "cycles": 0, "first": None, "last": None}

    async def count():
        cyc = 0
        while True:
            await ReadOnly()
            if dut.mac.value:
                counts["mac"] += 1
                counts["first"] = cyc if counts["first"] is None else counts["first"]
                counts["last"] = cyc
            await RisingEdge(dut.clk)
            cyc += 1

    cocotb.start_soon(count())
    await drive_job(dut, p, job, *ports)
    span = counts["last"] - counts["first"] + 1
    report = {"mac_cycles": counts["mac"], "span_cycles": span,
              "mac_utilization": counts["mac"] / span, "macs": job.macs,
              "macs_per_cycle": job.macs / span}
    assert counts["mac"] * R * K == job.macs
    if p.get("report"):
        with open(p["report"], "w") as f:
            json.dump(report, f)


def test_construction():
    mu = MatrixUnit(mac_rows=4, mac_lanes=8, max_tokens=8, max_inputs=256)
    assert mu.macs_per_cycle == 32 and len(mu.w.tdata) == 128 and len(mu.o.tdata) == 128
    assert (256 * 2 ** 15 * 8 * (2 ** 16 - 1)).bit_length() + 1 <= mu.acc_width   # exact accumulator
    assert MatrixUnit(16, 16, 16, 8960, 9496).acc_width == 49      # Qwen2.5-1.5B down_proj


@pytest.mark.parametrize("kw,message", [
    (dict(mac_lanes=6), "mac_lanes=6: must be a power of two"),
    (dict(max_tokens=3), "max_tokens=3: must be a power of two"),
    (dict(mac_rows=3), "mac_rows=3: packed products need an even number of rows"),
    (dict(mac_rows=0), "mac_rows=0: must be >= 1"),
    (dict(mac_lanes=8, max_inputs=100), "mac_lanes=8 does not divide max_inputs=100"),
])
def test_bad_params(kw, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        MatrixUnit(**kw)


def amaranth_run(dut, job):
    """One job through the shared Amaranth-simulator driver (mcf.sim.compute.drive)."""
    return run_matrix(dut, [job])[0]


@pytest.mark.parametrize("t,packed,lanes", [(1, True, 4), (3, True, 8), (3, False, 4)])
def test_linear_amaranth_sim(t, packed, lanes):
    rng = np.random.default_rng(t)
    dut = MatrixUnit(mac_rows=2, mac_lanes=lanes, max_tokens=4, max_inputs=32, max_tiles=4, packed=packed)
    job = linear_job(rng, 2, lanes, 4, t=t, n=32, out=4, group=8)
    assert amaranth_run(dut, job) == job.expected


PARAMS = dict(mac_rows=2, mac_lanes=4, max_tokens=4, max_inputs=32, max_tiles=4)


@pytest.mark.cocotb
def test_linear_cocotb(build_dir):
    run_cocotb(MatrixUnit(**PARAMS), __name__, build_dir,
               testcase="run_linear", params={**PARAMS, "jobs": 5})


def _primitive_src(build_dir, p, **kw):
    """The unit as the Qwen node builds it (``primitive``, the models of hw/primitives.py) in build_dir/dut.v."""
    from amaranth.back import verilog
    from mcf.hw.primitives import with_models
    build_dir.mkdir(parents=True)
    src = build_dir / "dut.v"
    src.write_text(with_models(verilog.convert(MatrixUnit(**p, primitive=True, **kw), name="dut")))
    return src


@pytest.mark.cocotb
def test_linear_cocotb_on_dsp48e2_model(build_dir):
    """The unit as the Qwen node builds it (products on DSP48E2 instances, the model
    hw/compute/dsp48e2.v in Icarus) against ``fixed.linear``: 8 lanes, two chains joined into one
    field (``DotArray.joined``), so the low rows' dots take the array's missing one at the unit's
    stage 3 (without it this fails)."""
    p = {**PARAMS, "mac_lanes": 8, "max_inputs": 64}
    src = _primitive_src(build_dir, p)
    assert "DSP48E2 " in src.read_text()
    run_cocotb(src, __name__, build_dir, testcase="run_linear", params={**p, "jobs": 4, "seed": 3})


@pytest.mark.cocotb
def test_linear_cocotb_on_split_dots(build_dir):
    """As above at the node's 32 lanes (four joined pairs a row): round 33's ``DotArray.split``, a row's last
    field sum into the accumulator slice's D register and pre-adder (AD = A + D, not registered), the low
    rows' two missing ones at stage 3, against ``fixed.linear`` (the model hw/compute/dsp48e2.v in Icarus)."""
    p = {**PARAMS, "mac_lanes": 32, "max_inputs": 64}
    src = _primitive_src(build_dir, p)
    assert "acc_d0 " in src.read_text()
    run_cocotb(src, __name__, build_dir, testcase="run_linear", params={**p, "jobs": 4, "seed": 11})


@pytest.mark.cocotb
def test_linear_cocotb_on_dsp48e2_model_t1(build_dir):
    """As above at max_tokens 2 (T = 1 or 2, groups of one or two beats, under backpressure): the
    accumulator slices' P feedback (one-beat groups at T = 1) and their file writes during stalls."""
    p = {**PARAMS, "max_tokens": 2, "mac_lanes": 8, "max_inputs": 64}
    src = _primitive_src(build_dir, p)
    run_cocotb(src, __name__, build_dir, testcase="run_linear", params={**p, "jobs": 8, "seed": 5})


@pytest.mark.cocotb
def test_linear_cocotb_on_lut6_chunks(build_dir):
    """As above with 4 chunks of requantizer rows (mac_rows 4, requant_rows 1: NC = 4, as the node's
    16 of 64): the chunk choices of the accumulators and bias words as LUT6 instances (round 28b; the
    model hw/lut6.v in Icarus) against ``fixed.linear``."""
    p = {**PARAMS, "mac_rows": 4, "mac_lanes": 8, "max_inputs": 64}
    src = _primitive_src(build_dir, p, requant_rows=1)
    assert "rq_asel0_0 " in src.read_text() and "rq_bsel0_0 " in src.read_text()
    run_cocotb(src, __name__, build_dir, testcase="run_linear", params={**p, "jobs": 4, "seed": 7})


@pytest.mark.cocotb
def test_linear_cocotb_on_abuf_fields(build_dir, monkeypatch):
    """As above with the activation buffer deeper than a URAM (round 32: two fields of one word, the read's
    choice two bits a LUT6_2, ``mux2_pairs``; the model hw/lut6.v in Icarus), at a URAM depth of 16 here
    (32 buffer words: addresses 16 .. 31 in the high field) against ``fixed.linear``."""
    from mcf.hw.compute import matrix
    monkeypatch.setattr(matrix, "URAM_DEPTH", 16)
    p = {**PARAMS, "mac_lanes": 8, "max_inputs": 64}
    src = _primitive_src(build_dir, p)
    assert "a_pick0_lut " in src.read_text()
    run_cocotb(src, __name__, build_dir, testcase="run_linear", params={**p, "jobs": 6, "seed": 9})


def test_rq_window_on_lut6(tmp_path):
    """``rq_window``'s 4-way layers as LUT6 instances (round 28b) equal the plain build in Icarus: a
    49-bit accumulator, every 7-bit offset (random, both builds on the same inputs every cycle)."""
    from tests.hw.test_lut import _Pair, _run
    from mcf.hw.compute.matrix import rq_window

    def build(m, stim, primitive):
        return rq_window(stim[7:56].as_signed(), stim[:7], m=m, primitive=primitive,
                         name="p" if primitive else "q"), stim[0]
    bad, fires = _run(tmp_path, _Pair(56, build))
    assert bad == 0 and fires > 0


def test_rq_window_on_dsp48e2(tmp_path):
    """``rq_window_dsp`` (round 30: the window's low layers on two DSP48E2 slices, the model
    hw/compute/dsp48e2.v) equals the plain ``rq_window`` registered, in Icarus: a 49-bit accumulator, every
    7-bit offset (random, both on the same inputs every cycle, the register's enable random too)."""
    from amaranth import Signal, signed
    from tests.hw.test_lut import _Pair, _run
    from mcf.hw.compute.matrix import RQ_DSP_FINE, RQ_WIN, rq_window, rq_window_dsp

    def build(m, stim, primitive):
        x, a, en = stim[7:56].as_signed(), stim[:7], stim[56]
        if primitive:
            u = rq_window(x, a, m=m, primitive=True, name="p", stop=RQ_DSP_FINE)
            return rq_window_dsp(m, u, a, en, name="p"), stim[0]
        w = Signal(signed(RQ_WIN + 1), reset_less=True)     # (as the slices' P: no reset)
        with m.If(en):
            m.d.sync += w.eq(rq_window(x, a))
        return w, stim[0]
    bad, fires = _run(tmp_path, _Pair(57, build))
    assert bad == 0 and fires > 0


def test_rq_over_near_on_dsp48e2(tmp_path):
    """The requantizer's overflow with its near terms from the high slice's bits above the window (round 33:
    ``rq_window_dsp(top=True)`` + ``rq_over_near`` a stage later, ``rq_over_win(near_terms=False)`` at stage C)
    equals the plain ``rq_over_win`` registered, in Icarus (the model hw/compute/dsp48e2.v): a 49-bit
    accumulator (a sign with one bit flipped near the window's top, or shifted right: its top bit there or a
    random amount), random 7-bit offsets and
    rnd, the stage's enable random; the window compared too."""
    from amaranth import Cat, Const, Mux, Signal, signed
    from tests.hw.test_lut import _Pair, _run
    from mcf.hw.compute.matrix import RQ_DSP_FINE, RQ_WIN, rq_over_near, rq_over_win, rq_window, rq_window_dsp

    def build(m, stim, primitive):
        sfx = "p" if primitive else "q"
        x, amt = Signal(signed(49), name=f"x{sfx}"), Signal(signed(9), name=f"a{sfx}")
        en, rnd = stim[56], stim[57]
        a = Signal(7, name=f"off{sfx}")             # (half the flipped-bit cycles a mod 8 = 0: every top bit counts)
        m.d.comb += a.eq(Cat(stim[:3] & Mux(stim[63] & stim[62], 0, 7), stim[3:7]))
        pos, one = Signal(signed(9), name=f"pos{sfx}"), Signal(49, name=f"one{sfx}")
        # (a quarter of the cycles x's top significant bit near the window's top, at a - 2 .. a + 8; a half the
        # sign with one bit flipped at a - 4 .. a + 11, every place of the near terms' edge; else a random shift)
        m.d.comb += [amt.eq(46 - a + Mux(stim[61], stim[58:60], -stim[58:61])),
                     pos.eq(a - 4 + stim[58:62]), one.eq(Const(1, 49) << Mux(pos < 0, 0, pos[:7])),
                     x.eq(Mux(stim[63], (stim[7].replicate(49) ^ Mux(pos > 48, 0, one)).as_signed(),
                              stim[7:56].as_signed() >> Mux(stim[62], stim[58:64], Mux(amt < 0, 0, amt[:8]))))]
        if primitive:
            u = rq_window(x, a, m=m, primitive=True, name="p", stop=RQ_DSP_FINE)
            w, top = rq_window_dsp(m, u, a, en, name="p", top=True)
            far, sign, rr = (Signal(reset_less=True, name=f"p_{k}") for k in ("far", "sign", "rnd"))
            with m.If(en):
                m.d.sync += [far.eq(rq_over_win(x, u, a, rnd, near_terms=False)), sign.eq(x[48]), rr.eq(rnd)]
            over = far | rq_over_near(w, top, sign, rr, m=m, primitive=True, name="p_near")
            return Cat(w, over), over
        w = Signal(signed(RQ_WIN + 1), reset_less=True)
        over = Signal(reset_less=True)
        with m.If(en):
            m.d.sync += [w.eq(rq_window(x, a)), over.eq(rq_over_win(x, rq_window(x, a, stop=RQ_DSP_FINE), a, rnd))]
        return Cat(w, over), over
    bad, fires = _run(tmp_path, _Pair(64, build))
    assert bad == 0 and fires > 0


def test_o_bits_on_lut6_2(tmp_path):
    """The pv build's output bits (``o_bits``, round 31: two bits of a row a LUT6_2 instance, the row's ones
    shared) equal the plain ORs in Icarus (the model hw/lut6.v): a row of 8 bits, random terms every cycle,
    both builds on the same inputs; and the INIT's two halves are the ORs at each of the 32 addresses."""
    from amaranth import Cat
    from tests.hw.test_lut import _Pair, _run
    from mcf.hw.compute.matrix import O_OR2_INIT, o_bits
    for a in range(32):
        assert (O_OR2_INIT >> (32 + a)) & 1 == (a & 1) | ((a >> 1) & 1) | ((a >> 2) & 1)
        assert (O_OR2_INIT >> a) & 1 == (a & 1) | ((a >> 3) & 1) | ((a >> 4) & 1)

    def build(m, stim, primitive):
        ones = stim[0] & stim[1] & stim[2]              # (rare: the ys and gs show through)
        bits = o_bits(m, ones, [stim[3 + k] for k in range(8)], [stim[11 + k] & stim[19 + k] for k in range(8)],
                      primitive=primitive, name="p" if primitive else "q")
        return Cat(*bits), ones
    bad, fires = _run(tmp_path, _Pair(27, build))
    assert bad == 0 and fires > 0


@pytest.mark.parametrize("n", [50, 64, 41])
def test_pv_y_on_carry_chain(tmp_path, n):
    """pv's y (round 31: ``add_load`` with ``en``, load ? hi : acc + (en ? prev : 0), a LUT6_2 a bit on a CARRY4 chain)
    equals the plain build in Icarus: a 49-bit acc, an n-bit prev (y's ``pv_bits``), a 32-bit high word;
    half the cycles prev is acc's complement with a few bits flipped, so carries ripple far up the chain."""
    from amaranth import Cat, Mux, signed
    from tests.hw.test_lut import _Pair, _run
    from mcf.hw.lut import add_load

    def build(m, stim, primitive):
        acc = stim[0:49].as_signed()
        flips = Cat(*[stim[49 + k] & stim[49 + n + k] & stim[49 + 2 * n + k] for k in range(n)])
        far = (~acc.as_signed() ^ flips.as_signed())[:n]
        prev = Mux(stim[49 + 3 * n], far, stim[49:49 + n]).as_signed()
        hi, en, load = stim[50 + 3 * n:82 + 3 * n], stim[82 + 3 * n], stim[83 + 3 * n]
        y = add_load(m, acc, prev, hi, load, signed(n), "p" if primitive else "q", primitive=primitive, en=en)
        return y, load
    bad, fires = _run(tmp_path, _Pair(84 + 3 * n, build))
    assert bad == 0 and fires > 0


def test_rq_sub_e_on_carry_chain(tmp_path):
    """The requantizer's row shift sh - (kv ? E : 0) (round 33: ``rq_sub_e``, two bits' propagates a LUT6_2 on a
    CARRY4 chain) equals the plain build in Icarus: a 10-bit sh, an 8-bit signed E, random kv (with E near
    sh's complement a quarter of the cycles, carries ripple)."""
    from amaranth import Mux
    from tests.hw.test_lut import _Pair, _run
    from mcf.hw.compute.matrix import rq_sub_e

    def build(m, stim, primitive):
        sh = stim[0:10].as_signed()
        e = Mux(stim[18] & stim[19], stim[0:8] ^ (stim[20] & stim[21] & stim[22]), stim[10:18]).as_signed()
        return rq_sub_e(m, sh, e, stim[23], primitive=primitive, name="p" if primitive else "q"), stim[23]
    bad, fires = _run(tmp_path, _Pair(24, build))
    assert bad == 0 and fires > 0


def test_rq_add_fill_on_carry_chain(tmp_path):
    """The requantizer's bias add (round 33: ``rq_add_fill``, the propagates two bits a LUT6_2 on a CARRY4 chain,
    the carry in as bit 0's generate) equals the plain build in Icarus: random y, b, c and fill bits; half the
    cycles b is ~y with rare flips (the carry ripples the whole chain), a quarter y zero (a saturating word)."""
    from amaranth import Cat, Mux
    from tests.hw.test_lut import _Pair, _run
    from mcf.hw.compute.matrix import rq_add_fill

    def build(m, stim, primitive):
        y0, b0 = stim[0:32], stim[32:64]
        flips = Cat(*[stim[64 + k] & stim[96 + k] & stim[128 + k] for k in range(32)])
        y = Mux(stim[160] & stim[161], 0, y0).as_signed()
        b = Mux(stim[162], ~y0 ^ flips, b0).as_signed()
        c, fl, fh = stim[163], stim[164] & stim[165], stim[166] & stim[167]
        return rq_add_fill(m, y, fl, fh, c, b, primitive=primitive, name="p" if primitive else "q"), c
    bad, fires = _run(tmp_path, _Pair(168, build))
    assert bad == 0 and fires > 0


@pytest.mark.parametrize("n,seed_bits", [(33, 4), (33, 6), (19, 4), (16, 3), (21, 4), (24, 4), (30, 4)])
def test_o_ones_on_lut6(tmp_path, n, seed_bits):
    """A row's saturations (``o_ones``: pv's clamp of y's top bits -- 33, or 19 with y on 50 bits, the node's
    ``pv_keys`` --, GEMM's overflow) as the LUT6 tree (round 29) equal the plain build in Icarus: the top bits
    a sign with rare flips (each bit flips when ``seed_bits`` random bits are all one), so "all equal" and a
    single differing bit anywhere both occur."""
    from amaranth import Cat
    from tests.hw.test_lut import _Pair, _run
    from mcf.hw.compute.matrix import o_ones

    def build(m, stim, primitive):
        flips = [Cat(*[stim[1 + j * n + k] for j in range(seed_bits)]).all() for k in range(n)]
        top = Cat(*[stim[0] ^ f for f in flips])
        en, ovf = stim[1 + seed_bits * n], stim[2 + seed_bits * n] & stim[3 + seed_bits * n]
        ones, clamp = o_ones(m, top, en, ovf, primitive=primitive, name="p" if primitive else "q")
        return Cat(ones, clamp), en & ~clamp
    bad, fires = _run(tmp_path, _Pair(4 + seed_bits * n, build))
    assert bad == 0 and fires > 0


@pytest.mark.cocotb
def test_utilization_cocotb(build_dir, tmp_path):
    import json
    report = tmp_path / "util.json"
    run_cocotb(MatrixUnit(**PARAMS), __name__, build_dir, testcase="run_utilization",
               params={**PARAMS, "tokens": 1, "tiles": 4, "group": 8, "report": str(report)})
    figures = json.loads(report.read_text())
    assert figures["mac_utilization"] >= 0.9, figures


@pytest.mark.parametrize("tm,t,n,group,rq", [(4, 4, 4, 4, 1), (16, 16, 8, 4, 2)])
def test_requant_stalls_amaranth_sim(tm, t, n, group, rq):
    """The requantizer (R = ``requant_rows`` of P rows a cycle) behind long ``o`` stalls: tiles of
    one or two weight beats, all inputs always valid, so the result queue and the bias queue fill
    (the issue waits) while ``o`` is held off for 60-cycle stretches; T = 16 tokens: a tile's bias
    is there before its first token's word.  Against ``fixed.linear`` (``linear_job``)."""
    from mcf.sim.amaranth_util import send_command, simulate, write_port
    rng = np.random.default_rng(tm + rq)
    P, K = 4, 4
    dut = MatrixUnit(mac_rows=P, mac_lanes=K, max_tokens=tm, max_inputs=16, max_tiles=16, requant_rows=rq)
    job = linear_job(rng, P, K, tm, t=t, n=n, out=P * 10, group=group)
    got, waits = [], 0

    async def bench(ctx):
        nonlocal waits
        await write_port(ctx, dut.act, job.act)
        await write_port(ctx, dut.exp, job.exp)
        await send_command(ctx, dut.cmd, job.cmd)
        idx = {"w": 0, "scale": 0, "bias": 0}
        for cyc in range(40 * len(job.expected) * P // rq + 500):
            ctx.set(dut.w.tvalid, idx["w"] < len(job.w))
            ctx.set(dut.w.tdata, job.w[min(idx["w"], len(job.w) - 1)])
            for name in ("scale", "bias"):
                items = getattr(job, name)
                ctx.set(getattr(dut, name).valid, idx[name] < len(items))
                ctx.set(getattr(dut, name).payload, items[min(idx[name], len(items) - 1)])
            ready = (cyc // 60) % 2 == 1 and rng.random() < 0.8
            ctx.set(dut.o.tready, ready)
            await ctx.delay(1e-9)
            waits += idx["w"] < len(job.w) and not ctx.get(dut.w.tready) and not ctx.get(dut.mac)
            took = {"w": ctx.get(dut.w.tready), "scale": ctx.get(dut.scale.ready), "bias": ctx.get(dut.bias.ready)}
            if ctx.get(dut.o.tvalid) and ready:
                got.append(ctx.get(dut.o.tdata))
                assert ctx.get(dut.o.tlast) == (len(got) == len(job.expected))
            await ctx.tick()
            for name in idx:
                idx[name] += bool(took[name])
            if len(got) == len(job.expected):
                break

    simulate(dut, bench)
    assert got == job.expected
    assert waits > 100, "the issue never waited for the requantizer"


@pytest.mark.parametrize("w_exp,e,packed", [(0, -10, True), (60, -16, True), (20, -16, True), (20, -16, False)])
def test_extremes_amaranth_sim(w_exp, e, packed):
    """Largest products and scales, left shifts that saturate and right shifts past the width.
    (Not much larger left shifts: golden rshr shifts int64 left unchecked, so acc << 26 wraps.)"""
    dut = MatrixUnit(mac_rows=2, mac_lanes=4, max_tokens=4, max_inputs=32, max_tiles=4, packed=packed)
    job = extreme_linear_job(w_exp, e)
    assert amaranth_run(dut, job) == job.expected


@pytest.mark.parametrize("t,group,max_inputs,max_group,aw", [(1, 4, 16384, 128, 49), (2, 4, 16384, 128, 49),
                                                             (1, 8, 16384, 128, 49), (1, 4, 32768, 128, 50),
                                                             (1, 4, 2048, 1024, 47)])
def test_acc_feedback_amaranth_sim(t, group, max_inputs, max_group, aw):
    """The accumulator (the slices' P = M + Z, the file written from P a cycle later) at acc_width 49
    (max_inputs 16 384: bit 48 in the fabric) and 50 (bits 48, 49): one-beat groups at T = 1 read a word
    the cycle after its add (the P feedback), at T = 2 a cycle after its write; random signs, so the sums
    cross zero (the 48-bit add wraps, the top bits follow).  max_group 1 024: products of 47 bits, the
    fabric's read-modify-write instead.  Against ``fixed.linear``."""
    rng = np.random.default_rng(10 * t + group)
    dut = MatrixUnit(mac_rows=2, mac_lanes=4, max_tokens=4, max_inputs=max_inputs, max_tiles=4, max_group=max_group)
    assert dut.acc_width == aw
    jobs = [linear_job(rng, 2, 4, 4, t=t, n=64, out=4, group=group, w_scale=2.0 ** -k) for k in (0, 6)]
    assert run_matrix(dut, jobs) == [j.expected for j in jobs]


@pytest.mark.parametrize("t,group,gap", [(1, 8, 13), (2, 16, 11), (1, 16, 17), (1, 4, 3)])
def test_slow_scale_amaranth_sim(t, group, gap):
    """Every beat of a group is scaled and accumulated (round 27: no partial sums), so a group's scale
    beat must be in the queue's head from its first beat on: the issue claims it at the group's first
    beat.  The scale stream here offers a beat only every ``gap`` cycles, longer than the issue's way to
    the multiply (groups of 2 and 4 beats at T = 1, 2: the weights would run ahead of it); the three
    multi-beat cases fail with the claim at the group's last beat (the pre-round-27 issue)."""
    from mcf.sim.amaranth_util import Feed

    class Slow(Feed):           # valid one cycle in ``gap`` (``drive`` moves a feed on ready & pending)
        cycle, off = 0, False

        @property
        def pending(self):
            return self.index < len(self.items) and not self.off

        def present(self, ctx):
            Slow.cycle += 1
            self.off = bool(Slow.cycle % gap)
            super().present(ctx)
            if self.off:
                ctx.set(self.valid, 0)

    rng = np.random.default_rng(gap)
    dut = MatrixUnit(mac_rows=2, mac_lanes=4, max_tokens=4, max_inputs=64, max_tiles=4, max_group=16)
    jobs = [linear_job(rng, 2, 4, 4, t=t, n=64, out=4, group=group) for _ in range(2)]
    results = run_matrix(dut, jobs, scale_feed=lambda beats: Slow(dut.scale.valid, dut.scale.ready,
                                                                  dut.scale.payload, beats), slack=3 * gap)
    assert results == [j.expected for j in jobs]


def test_acc_bit48_amaranth_sim():
    """The accumulator past 2^47 (n = 16 384 of the largest products and scales: acc up to 2^48 - 2^32):
    bit 48 when the 48-bit add crosses 2^47 (no wrap: C[47:46] = 01 -> 10), back, and below -2^47;
    a right shift of 18 so the words read the top bits.  Against ``fixed.linear``."""
    from mcf.sim.compute.jobs import pack_linear
    from mcf.sw.golden import fixed as fx
    t, n, out, g, K = 2, 16384, 2, 128, 16
    dut = MatrixUnit(mac_rows=2, mac_lanes=K, max_tokens=4, max_inputs=n, max_tiles=1)
    assert dut.acc_width == 49
    m = np.full((t, n), -32768, dtype=np.int64)
    m[1, n // 2:] = 32767                       # token 1: up to ~2^47, then back down
    qw = fx.QLinear(np.full((out, n), -8, dtype=np.int8), np.full((out, n // g), 65535, dtype=np.uint16), 20, g)
    qw.q[1] = 7
    ex = np.full(t, -14, dtype=np.int64)
    y = fx.linear((m, ex), qw, None)
    assert (np.abs(y) < fx.INT32_MAX).all() and (np.abs(y) > 1 << 28).any()
    job = pack_linear(m, ex, qw, None, y, 2, K, 4)
    assert amaranth_run(dut, job) == job.expected


def extreme_linear_job(w_exp, e):
    """A 2 x 4 array's GEMM of the largest products and scales (2 tokens, n 32, 4 outputs, groups of 8)
    at ``w_exp`` and row exponents ``e``, biases int32's bounds and +-5."""
    from mcf.sim.compute.jobs import pack_linear
    from mcf.sw.golden import fixed as fx
    t, n, out, g = 2, 32, 4, 8
    m = np.full((t, n), -32768, dtype=np.int64)
    m[1, ::2] = 32767
    qw = fx.QLinear(np.full((out, n), -8, dtype=np.int8), np.full((out, n // g), 65535, dtype=np.uint16), w_exp, g)
    qw.q[1] = 7
    ex = np.full(t, e, dtype=np.int64)
    b = np.array([fx.INT32_MAX, fx.INT32_MIN, 5, -5])
    y = fx.linear((m, ex), qw, b)
    return pack_linear(m, ex, qw, b, y, 2, 4, 4)


# --- kv mode: attention scores QK^T with a per-row scale A and exponent E (golden ``scores``) -----
def score_job(rng, rows, lanes, max_tokens, r, d, keys, extreme=False):
    """``r`` query rows (BFP16, prescaled) against ``keys`` INT4 keys (KV4: q, A, E): the matrix
    unit's traffic in kv mode (one group of G = d, scale word A | E << 8 per key) and the expected
    beats from ``fixed.scores``."""
    from mcf.sim.compute.jobs import LinearJob, pack, pack_activations, random_bfp_rows
    from mcf.sw.golden import fixed as fx
    m, e = random_bfp_rows(rng, r, d)
    kq, ka, ke = fx.quantize_kv(random_bfp_rows(rng, keys, d))
    ka[rng.random(keys) < 0.15] = 0                             # some all-zero keys (A = 0)
    if extreme:
        # largest |dot| (mantissa -2^15 against q = -8), A = 255 and left shifts that saturate;
        # E near both ends, e + E + 12 up to 29 and past int64 (E = 127: 2^40 x 2^139)
        m[0] = -32768
        kq[: keys // 2] = -8
        ka[: keys // 2] = 255
        e[:] = rng.integers(-20, 5, size=r)
        e[-1] = 127
        ke[:] = rng.choice([-128, -100, -40, 0, 12, 127], size=keys)
        ke[1::4] = 29 - 12 - e[:-1].max()
    s = fx.scores((m[:, None, :], e[:, None]), kq[:, None, :], ka[:, None], ke[:, None], 1)[0]   # [r, keys]
    job = LinearJob(cmd=dict(tokens=r, group_beats=d // lanes, groups=1, tiles=keys // rows, w_exp=0, bias=0,
                             kv=1))
    pack_activations(job, m, e, lanes, max_tokens)
    for tile in range(keys // rows):
        k = slice(tile * rows, (tile + 1) * rows)
        for jb in range(d // lanes):
            job.w.append(pack(kq[k, jb * lanes:(jb + 1) * lanes], 4))
        job.scale.append(pack((ka[k] & 0xFF) | ((ke[k] & 0xFF) << 8), 16))
        for tok in range(r):
            job.expected.append(pack(s[tok, k], 32))
    job.macs = r * d * keys
    return job, s


@pytest.mark.parametrize("r,extreme", [(3, False), (4, True)])
def test_scores_amaranth_sim(r, extreme):
    """kv mode against ``fixed.scores``: several tiles, A = 0 keys, saturating scores, extreme E;
    then an ordinary GEMM on the same unit (the mode is per command), its first scale beats sent
    before its command."""
    rng = np.random.default_rng(r)
    dut = MatrixUnit(mac_rows=2, mac_lanes=4, max_tokens=4, max_inputs=32, max_tiles=8)
    job, s = score_job(rng, 2, 4, 4, r, 16, 12, extreme)
    if extreme:
        assert (np.abs(s) == 2 ** 31 - 1).any() or (s == -2 ** 31).any(), "no saturating score"
        assert (s == 0).any()
    lin = linear_job(rng, 2, 4, 4, t=2, n=32, out=4, group=8)
    # (each job's first scale beats in the queue before its command: the kv job's mode must not reach them)
    assert run_matrix(dut, [job, lin], scale_ahead=2) == [job.expected, lin.expected]


def _stream_through(dut, beats_in, n_out: int, rng, fixed=None, feed=None) -> list:
    """The beats a reorder buffer (stream ``i`` -> stream ``o``) gives for ``beats_in``, with random
    valid gaps on its input and random backpressure on its output; stops at ``n_out`` beats."""
    from amaranth.sim import Simulator
    got = []

    async def bench(ctx):
        i = 0
        for sig, v in fixed or ():
            ctx.set(sig, v)
        for _ in range(40 * n_out):
            offer = i < len(beats_in) and rng.random() < 0.7
            ctx.set(dut.i.valid, offer)
            beat = beats_in[min(i, len(beats_in) - 1)]
            ctx.set(dut.i.payload, feed(ctx, beat) if feed else beat)
            ctx.set(dut.o.ready, rng.random() < 0.6)
            await ctx.delay(1e-9)
            took = offer and ctx.get(dut.i.ready)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                got.append(ctx.get(dut.o.payload))
            await ctx.tick()
            i += took
            if len(got) == n_out:
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize("rows,lanes,beats", [(8, 4, 2), (4, 8, 4), (4, 2, 1)])
def test_tile_reorder(rows, lanes, beats):
    """Key-major tiles (spec/kv.py rows) in, BlobLayout weight beats out, random stalls on both
    sides; the expected beats are the keys' nibbles packed as ``spec.isa.BlobLayout`` says."""
    from mcf.hw.compute.matrix import TileReorder
    from mcf.sim.compute.jobs import pack
    rng = np.random.default_rng(rows * beats)
    tiles = 5
    q = rng.integers(-8, 8, size=(tiles * rows, beats * lanes))          # keys x d
    from mcf.spec.kv import pack_segment, scale_bytes
    n = len(q)
    seg = pack_segment(q, np.zeros(n, int), np.zeros(n, int))
    flat = np.frombuffer(seg[scale_bytes(n):scale_bytes(n) + n * q.shape[1] // 2], np.uint8)
    nb = rows * lanes // 2
    beats_in = [int.from_bytes(flat[i:i + nb].tobytes(), "little") for i in range(0, flat.size, nb)]
    want = [pack(q[t * rows:(t + 1) * rows, j * lanes:(j + 1) * lanes], 4) for t in range(tiles) for j in range(beats)]
    dut = TileReorder(rows, lanes, beats)
    assert _stream_through(dut, beats_in, len(want), rng) == want
    # prerotated: the feeder rotates each key's pieces up by ``rot`` (the contract, modelled here)
    pb, kb = lanes * 4, beats * lanes * 4

    def rotated(beat, amount):
        out = 0
        for k in range(rows * lanes * 4 // kb):
            for c in range(beats):
                piece = (beat >> (k * kb + ((c - amount) % beats) * pb)) & ((1 << pb) - 1)
                out |= piece << (k * kb + c * pb)
        return out
    dut = TileReorder(rows, lanes, beats, prerotated=True)
    assert _stream_through(dut, beats_in, len(want), np.random.default_rng(rows * beats),
                           feed=lambda ctx, beat: rotated(beat, ctx.get(dut.rot))) == want


@pytest.mark.parametrize("lanes,beats,keys", [(2, 4, 2), (4, 2, 3), (8, 1, 2)])
def test_tile_reorder_rotate(lanes, beats, keys):
    """``TileReorder.rotate``: piece c of each key out = piece (c - amount) mod beats in."""
    from amaranth import Module, Signal
    from amaranth.sim import Simulator
    from mcf.hw.compute.matrix import TileReorder
    pb, kb = lanes * 4, beats * lanes * 4
    word, amount, out = Signal(keys * kb), Signal(range(max(beats, 2))), Signal(keys * kb)
    m = Module()
    m.d.comb += out.eq(TileReorder.rotate(word, amount, lanes, beats))
    rng = np.random.default_rng(lanes * beats)

    async def bench(ctx):
        for _ in range(6):
            pieces = [int(x) for x in rng.integers(0, 1 << pb, size=keys * beats)]
            for a in range(beats):
                ctx.set(word, sum(p << (i * pb) for i, p in enumerate(pieces)))
                ctx.set(amount, a)
                await ctx.delay(1e-9)
                want = sum(pieces[k * beats + (c - a) % beats] << (k * kb + c * pb)
                           for k in range(keys) for c in range(beats))
                assert ctx.get(out) == want

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


# --- pv mode: attention PV on the array, V^T as the matrix, w in two digits (golden ``state_sums``) ----
@pytest.mark.parametrize("r,keys,acc,wide,extreme,v_max,pv_keys", [(3, 16, False, False, True, -8, 0),
                                                                    (3, 16, False, False, True, 7, 0),
                                                                    (4, 24, True, True, True, -8, 0),
                                                                    (2, 8, True, False, False, -8, 0),
                                                                    (1, 16, True, True, False, 7, 0),
                                                                    (4, 24, True, True, True, -8, 4096),
                                                                    (3, 16, True, False, True, 7, 64),
                                                                    (3, 16, False, False, True, -8, 64)])
def test_pv_amaranth_sim(r, keys, acc, wide, extreme, v_max, pv_keys):
    """pv mode against ``fixed.state_sums``' exact o (sat32, or wide with a previous wide value
    added): w = W_MAX and w = 0 keys, V = -8 (o below int32) or 7 (above: sat32's other bound),
    several key counts (multiples of K); then an ordinary GEMM on the same unit (the mode is per
    command)."""
    from mcf.sim.compute.jobs import pv_job, pv_weights
    from mcf.sw.golden import fixed as fx
    rng = np.random.default_rng(keys + r)
    P, K, TM, d = 2, 4, 4, 8
    # (``pv_keys``, round 29: y on its significant bits, ceil_log2(pv_keys) + 35: 47 at 4 096, 41 at 64 -- the
    # previous wide values below the bound, as the glue's sums of at most pv_keys keys are)
    dut = MatrixUnit(mac_rows=P, mac_lanes=K, max_tokens=TM, max_inputs=64, max_tiles=8, pv_tiles=d // P,
                     pv_keys=pv_keys)
    w, vq, o = pv_weights(rng, r, keys, d, extreme, v_max=v_max)
    if extreme:
        assert (w == fx.W_MAX).any() and (w == 0).any() and (vq == v_max).any()
        assert ((o > fx.INT32_MAX) if v_max > 0 else (o < fx.INT32_MIN)).any(), "no o beyond int32 that side"
    prev = rng.integers(-(1 << (45 if wide else 28)), 1 << (45 if wide else 28), size=o.shape) if acc else None
    job = pv_job(w, vq, o, P, K, TM, prev=prev, wide=wide)
    y = o if prev is None else o + prev
    if not wide:
        assert (np.abs(y) < fx.INT32_MAX).sum() >= y.size // 4, "too few outputs inside int32"
    lin = linear_job(rng, P, K, TM, t=2, n=32, out=4, group=8)
    # a GEMM whose bias adds saturate both ways before the pv job (its sat32 in the output register's
    # reset; the requantizer's words out of the pv job's), an ordinary one (its rounding carries left in
    # the requantizer: out of the pv job's too) before and after it
    ext = extreme_linear_job(0, -10)
    assert run_matrix(dut, [ext, lin, job, lin]) == [ext.expected, lin.expected, job.expected, lin.expected]


@pytest.mark.parametrize("pv_keys", [1, 64, 4096, 32768, 1 << 29, 1 << 30])
def test_pv_bits_bound(pv_keys):
    """``pv_bits`` (round 29) holds a sum of pv_keys products w v at either extreme (w <= W_MAX, v in
    [-8, 7]), and at least y's 33 bits that sat32 reads; 64 (modulo 2^64, as without a bound) at most."""
    from mcf.sw.golden import fixed as fx
    YB = MatrixUnit(mac_rows=2, mac_lanes=4, max_tokens=4, max_inputs=64, max_tiles=8, pv_tiles=4,
                    pv_keys=pv_keys).pv_bits
    assert 33 <= YB <= 64
    if YB < 64:
        assert -(1 << (YB - 1)) <= pv_keys * fx.W_MAX * -8 and pv_keys * fx.W_MAX * 7 < 1 << (YB - 1)
    assert MatrixUnit(mac_rows=2, mac_lanes=4, max_tokens=4, max_inputs=64, max_tiles=8, pv_tiles=4).pv_bits == 64
    if pv_keys == 32768:
        assert YB == 50


def _pv_beats(rows, lanes, d, groups, rng):
    """``groups`` x ``lanes`` random INT4 keys of ``d`` channels as a KV segment's beats of rows x
    lanes nibbles (the reorder's input, spec packing) and the beats PvReorder must give: per group
    and channel tile, the group's keys' ``rows`` channels (``pack``)."""
    from mcf.sim.compute.jobs import pack
    from mcf.spec.kv import pack_segment, scale_bytes
    n = groups * lanes
    q = rng.integers(-8, 8, size=(n, d))
    seg = pack_segment(q, np.zeros(n, int), np.zeros(n, int))
    flat = np.frombuffer(seg[scale_bytes(n):scale_bytes(n) + n * d // 2], np.uint8)
    nb = rows * lanes // 2
    beats_in = [int.from_bytes(flat[i:i + nb].tobytes(), "little") for i in range(0, flat.size, nb)]
    want = [pack(q[b * lanes:(b + 1) * lanes, c * rows:(c + 1) * rows].T, 4)
            for b in range(groups) for c in range(d // rows)]
    return beats_in, want


@pytest.mark.parametrize("rows,lanes,d", [(4, 8, 16), (2, 4, 8), (4, 4, 4)])
def test_pv_reorder(rows, lanes, d):
    """Key-major V rows (spec/kv.py segment rows) in, pv weight beats out (channel tile c: nibble p K
    + k = channel c P + p of key k), random stalls on both sides."""
    from mcf.hw.compute.matrix import PvReorder
    rng = np.random.default_rng(rows * d)
    beats_in, want = _pv_beats(rows, lanes, d, 5, rng)
    nb = rows * lanes // 2
    dut = PvReorder(rows, lanes, d)
    assert _stream_through(dut, beats_in, len(want), rng) == want
    # prerotated: the feeder rotates each key's channel tiles (rows nibbles) up by ``rot`` (the contract)
    tb, kb = rows * 4, d * 4

    def rotated(beat, amount):
        out = 0
        for k in range(rows * lanes // d):
            for c in range(d // rows):
                tile = (beat >> (k * kb + ((c - amount) % (d // rows)) * tb)) & ((1 << tb) - 1)
                out |= tile << (k * kb + c * tb)
        return out
    dut = PvReorder(rows, lanes, d, prerotated=True)
    assert _stream_through(dut, beats_in, len(want), np.random.default_rng(rows * d),
                           feed=lambda ctx, beat: rotated(beat, ctx.get(dut.rot))) == want
    # with alternates: alt_sel 0 is the reorder's beat, k alternate k - 1 (the same random stalls)
    alt = [int.from_bytes(rng.bytes(nb), "little") for _ in range(2)]       # beats of rows x lanes nibbles
    for sel in range(3):
        dut = PvReorder(rows, lanes, d, alternates=2)
        got = _stream_through(dut, beats_in, len(want), np.random.default_rng(rows * d),
                              fixed=[(dut.alt_sel, sel), (dut.alt[0], alt[0]), (dut.alt[1], alt[1])])
        assert got == (want if sel == 0 else [alt[sel - 1]] * len(want))


def test_pv_reorder_alt_sel_registered():
    """``alt_sel`` is a register: a beat leaving in a cycle is the choice ``alt_sel`` had the cycle
    before (the reorder's beat for 0, alternate k - 1 for k), with ``alt_sel`` random every cycle
    and random stalls on both sides; the reorder's beats still come in order, one per give."""
    from amaranth.sim import Simulator
    from mcf.hw.compute.matrix import PvReorder
    rows, lanes, d, groups = 4, 4, 8, 6
    rng = np.random.default_rng(11)
    beats_in, want = _pv_beats(rows, lanes, d, groups, rng)
    nb = rows * lanes // 2
    alt = [int.from_bytes(rng.bytes(nb), "little") for _ in range(2)]
    dut = PvReorder(rows, lanes, d, alternates=2)
    got, exp = [], []

    async def bench(ctx):
        ctx.set(dut.alt[0], alt[0])
        ctx.set(dut.alt[1], alt[1])
        i, prev = 0, 0
        for _ in range(40 * len(want)):
            offer = i < len(beats_in) and rng.random() < 0.7
            sel = int(rng.integers(0, 3))
            ctx.set(dut.i.valid, offer)
            ctx.set(dut.i.payload, beats_in[min(i, len(beats_in) - 1)])
            ctx.set(dut.o.ready, rng.random() < 0.6)
            ctx.set(dut.alt_sel, sel)
            await ctx.delay(1e-9)
            took = offer and ctx.get(dut.i.ready)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                got.append(ctx.get(dut.o.payload))
                exp.append(want[len(exp)] if prev == 0 else alt[prev - 1])
            await ctx.tick()
            i, prev = i + took, sel
            if len(got) == len(want):
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert len(got) == len(want) and got == exp
    assert 0 < sum(g in alt for g in got) < len(got), "both kinds of beat must leave"


def _words(beats, n, bits):
    """Beats of ``bits`` bits as their ``n`` words, low end first (the reorders' ``words``)."""
    wb = bits // n
    return [(b >> (x * wb)) & ((1 << wb) - 1) for b in beats for x in range(n)]


def _rotated(word, amount, piece_bits, per_key, keys):
    """``word``'s keys with their ``per_key`` pieces rotated up by ``amount`` (the feeder's side of a
    ``prerotated`` reorder, modelled here: piece c out = piece (c - amount) mod per_key in)."""
    kb, out = piece_bits * per_key, 0
    for k in range(keys):
        for c in range(per_key):
            piece = (word >> (k * kb + ((c - amount) % per_key) * piece_bits)) & ((1 << piece_bits) - 1)
            out |= piece << (k * kb + c * piece_bits)
    return out


@pytest.mark.parametrize("rows,lanes,beats,words", [(8, 4, 2, 4), (16, 8, 4, 4), (4, 8, 2, 2), (8, 2, 1, 8)])
def test_tile_reorder_words(rows, lanes, beats, words):
    """``words``: the tile reorder moving words of a beat / words on both sides gives the beats of
    ``test_tile_reorder`` as their words (low end first), random stalls; plain and prerotated."""
    from mcf.hw.compute.matrix import TileReorder
    from mcf.sim.compute.jobs import pack
    from mcf.spec.kv import pack_segment, scale_bytes
    rng = np.random.default_rng(rows * beats + words)
    tiles, bits = 4, rows * lanes * 4
    q = rng.integers(-8, 8, size=(tiles * rows, beats * lanes))
    n = len(q)
    seg = pack_segment(q, np.zeros(n, int), np.zeros(n, int))
    flat = np.frombuffer(seg[scale_bytes(n):scale_bytes(n) + n * q.shape[1] // 2], np.uint8)
    nb = bits // 8
    beats_in = [int.from_bytes(flat[i:i + nb].tobytes(), "little") for i in range(0, flat.size, nb)]
    want = _words([pack(q[t * rows:(t + 1) * rows, j * lanes:(j + 1) * lanes], 4)
                   for t in range(tiles) for j in range(beats)], words, bits)
    words_in = _words(beats_in, words, bits)
    dut = TileReorder(rows, lanes, beats, words=words)
    assert _stream_through(dut, words_in, len(want), rng) == want
    dut = TileReorder(rows, lanes, beats, prerotated=True, words=words)
    keys = rows // (words * beats)
    assert _stream_through(dut, words_in, len(want), rng,
                           feed=lambda ctx, w: _rotated(w, ctx.get(dut.rot), lanes * 4, beats, keys)) == want


@pytest.mark.parametrize("rows,lanes,d,words", [(4, 8, 16, 2), (8, 8, 16, 4), (8, 4, 8, 2), (16, 8, 32, 4)])
def test_pv_reorder_words(rows, lanes, d, words):
    """``words``: the pv reorder moving words of a beat / words on both sides gives the beats of
    ``test_pv_reorder`` as their words (low end first), random stalls; plain and prerotated (each
    key's pieces of rows / words channels rotated)."""
    from mcf.hw.compute.matrix import PvReorder
    rng = np.random.default_rng(rows * d + words)
    bits = rows * lanes * 4
    beats_in, want = _pv_beats(rows, lanes, d, 4, rng)
    words_in, want = _words(beats_in, words, bits), _words(want, words, bits)
    dut = PvReorder(rows, lanes, d, words=words)
    assert dut.blocks == d // rows * words
    assert _stream_through(dut, words_in, len(want), rng) == want
    dut = PvReorder(rows, lanes, d, prerotated=True, words=words)
    R, keys = rows // words, rows * lanes // d // words
    assert _stream_through(dut, words_in, len(want), rng,
                           feed=lambda ctx, w: _rotated(w, ctx.get(dut.rot), R * 4, d // R, keys)) == want


@pytest.mark.parametrize("wide", [True, False])
def test_pv_stalls_amaranth_sim(wide):
    """pv mode with random stalls on the weights, the previous wide values and the output (a
    beat must leave once, also while the next one waits for ``prev``)."""
    from mcf.sim.amaranth_util import send_command, simulate, write_port
    from mcf.sim.compute.jobs import pv_job, pv_weights
    rng = np.random.default_rng(7 + wide)
    P, K, TM, d = 4, 8, 8, 16
    dut = MatrixUnit(mac_rows=P, mac_lanes=K, max_tokens=TM, max_inputs=64, max_tiles=8, pv_tiles=d // P)
    w, vq, o = pv_weights(rng, 5, 24, d, extreme=True)
    prev = rng.integers(-(1 << (45 if wide else 28)), 1 << (45 if wide else 28), size=o.shape)
    job = pv_job(w, vq, o, P, K, TM, prev=prev, wide=wide)
    got = []

    async def bench(ctx):
        await write_port(ctx, dut.act, job.act)
        await send_command(ctx, dut.cmd, job.cmd)
        wi = pi = 0
        for _ in range(20 * len(job.w) * 5 + 1000):
            w_ok = wi < len(job.w) and rng.random() < 0.7
            p_ok = pi < len(job.prev) and rng.random() < 0.3
            ctx.set(dut.w.tvalid, w_ok)
            ctx.set(dut.w.tdata, job.w[min(wi, len(job.w) - 1)])
            ctx.set(dut.prev.valid, p_ok)
            ctx.set(dut.prev.payload, job.prev[min(pi, len(job.prev) - 1)])
            ctx.set(dut.o.tready, rng.random() < 0.7)
            await ctx.delay(1e-9)
            wi += w_ok and ctx.get(dut.w.tready)
            pi += p_ok and ctx.get(dut.prev.ready)
            if ctx.get(dut.o.tvalid) and ctx.get(dut.o.tready):
                got.append(ctx.get(dut.o.tdata))
            await ctx.tick()
            if len(got) == len(job.expected):
                break

    simulate(dut, bench)
    assert got == job.expected


@pytest.mark.parametrize("width", [49, 33])
def test_requant_shift_boundaries(width):
    """The requantizer's shift (``rq_decode`` -> ``rq_window`` -> ``rq_sat32`` / ``rq_carry``, then the bias
    add's y + c + b: one window for both directions, the overflow from the accumulator's significant
    bits, a right shift's rounding as the bias add's carry c): y + c equals golden sat32(rshr(x, s)) for x
    at every power of two of a 49-bit accumulator, one either side, 0 and -1, at every shift s from -40
    (left shifts past the cap) to 55 (right shifts past the width); also a 33-bit one (round 28: d's 32
    positions a power of two, the overflow threshold's clamp ``rq_thr_bits``).  And (round 30) ``rq_over_win``
    (the overflow from the window's coarse layers) equals ``rq_over`` at every one of them."""
    from amaranth import Module, Signal, signed
    from amaranth.sim import Simulator
    from mcf.hw.compute.matrix import (RQ_DSP_FINE, RQ_WIN, rq_carry, rq_decode, rq_over, rq_over_win, rq_sat32,
                                       rq_window)
    from mcf.sw.golden import fixed as fx
    xs = sorted({v for k in range(width - 1) for b in (1 << k, -(1 << k))
                 for v in (b - 1, b, b + 1) if -(1 << (width - 1)) <= v < 1 << (width - 1)} | {0, -1})
    m = Module()
    x, s = Signal(signed(width)), Signal(signed(10))
    y, c = Signal(signed(32)), Signal()
    a, rnd, code = rq_decode(x, s)
    w, t = Signal(signed(RQ_WIN + 1)), Signal(signed(RQ_WIN))
    # (signals, as the unit's registers: the simulator would repeat the code's expression in every use)
    code_s, over = Signal(len(code)), Signal()
    m.d.comb += [code_s.eq(code), over.eq(rq_over(x, code_s))]
    a_s, rnd_s, u, over_w = Signal(len(a)), Signal(), Signal(RQ_WIN + (1 << RQ_DSP_FINE)), Signal()
    m.d.comb += [a_s.eq(a), rnd_s.eq(rnd), u.eq(rq_window(x, a_s, stop=RQ_DSP_FINE)),
                 over_w.eq(rq_over_win(x, u, a_s, rnd_s))]
    m.d.comb += [w.eq(rq_window(x, a)), t.eq(w[1:]), y.eq(rq_sat32(t, over, x[width - 1])),
                 c.eq(rq_carry(t, w[0] & rnd, over))]
    shifts = range(-40, 56)
    want = fx.sat(fx.rshr(np.array(xs, dtype=np.int64)[:, None], np.array(shifts)[None, :]), 32)
    bad = []

    async def bench(ctx):
        for i, v in enumerate(xs):
            ctx.set(x, v)
            for j, sh in enumerate(shifts):
                ctx.set(s, sh)
                got = ctx.get(y) + ctx.get(c)           # the bias add's y + c + b: exact
                if got != want[i, j] or ctx.get(over_w) != ctx.get(over):
                    bad.append((v, sh, got, int(want[i, j]), ctx.get(over_w), ctx.get(over)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert not bad, bad[:5]


def test_pv_reorder_words_skip():
    """``skip``: beats given with ``skip`` at their first word leave whole in one cycle, unread; the
    other beats' words come as before (random beats skipped, random stalls on both sides)."""
    from amaranth.sim import Simulator
    from mcf.hw.compute.matrix import PvReorder
    rows, lanes, d, words, groups = 8, 8, 16, 4, 5
    rng = np.random.default_rng(23)
    bits = rows * lanes * 4
    beats_in, want = _pv_beats(rows, lanes, d, groups, rng)
    words_in = _words(beats_in, words, bits)
    skipped = [bool(rng.random() < 0.4) for _ in want]
    dut = PvReorder(rows, lanes, d, words=words)
    got, cycles = [], []

    async def bench(ctx):
        i, beat, w = 0, 0, 0
        for cyc in range(60 * len(words_in)):
            offer = i < len(words_in) and rng.random() < 0.7
            skip = beat < len(want) and skipped[beat]
            ctx.set(dut.i.valid, offer)
            ctx.set(dut.i.payload, words_in[min(i, len(words_in) - 1)])
            ctx.set(dut.skip, skip)
            ctx.set(dut.o.ready, skip or rng.random() < 0.6)
            await ctx.delay(1e-9)
            took = offer and ctx.get(dut.i.ready)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                if skip:
                    cycles.append(cyc)
                    beat += 1
                else:
                    got.append(ctx.get(dut.o.payload))
                    w += 1
                    if w == words:
                        w, beat = 0, beat + 1
            await ctx.tick()
            i += took
            if beat == len(want):
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert 0 < len(cycles) < len(want), "some beats and not all must be skipped"
    assert got == _words([b for b, s in zip(want, skipped) if not s], words, bits)


def test_tile_reorder_words_first_beat():
    """``words``: a tile's beat 0 leaves as its keys come in -- with words offered every cycle and the
    output always ready, beat 0's last word leaves the cycle after the tile's last word went in."""
    from amaranth.sim import Simulator
    from mcf.hw.compute.matrix import TileReorder
    rows, lanes, beats, words = 16, 8, 2, 4
    dut = TileReorder(rows, lanes, beats, words=words)
    log = {"in": [], "out": []}

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        for cyc in range(3 * beats * words):
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, cyc)
            await ctx.delay(1e-9)
            if ctx.get(dut.i.ready):
                log["in"].append(cyc)
            if ctx.get(dut.o.valid):
                log["out"].append(cyc)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    last_in = log["in"][beats * words - 1]                 # the first tile's last word
    assert log["out"][words - 1] == last_in + 1
