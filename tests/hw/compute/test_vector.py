"""Vector unit (hw/compute/vector.py): every op against its golden function, in the Amaranth
simulator and in the cocotb bench (random pauses on the operand streams and the output) with
its pytest runner."""
import cocotb
import numpy as np
import pytest
from amaranth.sim import Simulator

from mcf.hw.compute.vector import VecOp, VectorUnit, a_layout, b_layout, cmd_layout
from mcf.sim.cocotb_util import StreamSink, StreamSource, bounded, params, pauses, start
from mcf.sim.compute.drive import run_vector
from mcf.sim.compute.jobs import unpack, vector_beats, vector_elements, vector_job
from mcf.sim.runner import run_cocotb


def const(layout, values: dict) -> int:
    return layout.const(values).as_value().value


@cocotb.test()
async def run_ops(dut):
    p = params()
    seed = p.get("seed", 1)
    L = p.get("lanes", 1)
    rng = np.random.default_rng(seed)
    cmd = StreamSource(dut, "cmd", dut.clk)
    a = StreamSource(dut, "a", dut.clk, pauses(seed + 1))
    b = StreamSource(dut, "b", dut.clk, pauses(seed + 2))
    sink = StreamSink(dut, "o", dut.clk, pauses(seed + 3))
    await start(dut)
    layout = cmd_layout(p["max_n"])
    names = [op.name for op in VecOp]
    for k in range(p.get("jobs", 14)):
        op = names[k % len(names)] if k < len(names) else str(rng.choice(names))
        n = int(rng.choice([8, 16, p["max_n"]]))
        job = vector_job(rng, op, n)
        uses_b = VecOp[op] in (VecOp.RMSNORM, VecOp.MUL, VecOp.ROPE, VecOp.RESIDUAL)
        abeats, bbeats = vector_beats(job, L)
        await cmd.send([const(layout, job.cmd)])
        cocotb.start_soon(a.send([const(a_layout(L), x) for x in abeats]))
        if uses_b:
            cocotb.start_soon(b.send([const(b_layout(L), x) for x in bbeats]))
        words = await bounded(sink.recv(n // L), 100 * n * 10 + 5000, f"{op} row")
        beats = [(w & ((1 << 32 * L) - 1), unpack(w >> 32 * L, 8, 1)[0], (w >> (32 * L + 8)) & 1) for w in words]
        got = vector_elements(beats, L)
        x32 = VecOp[op] in (VecOp.SILU, VecOp.RESIDUAL)
        for i, ((gx, ge, gl), (ex, ee, el)) in enumerate(zip(got, job.expected)):
            assert (gx, 0 if x32 else ge, gl) == (ex, ee, el), \
                f"{op} n={n} element {i}: got {(gx, ge, gl)} expected {(ex, ee, el)}"


OPS = [op.name for op in VecOp]


def amaranth_run(dut, jobs):
    outs = run_vector(dut, jobs)
    assert [len(o) for o in outs] == [len(j.expected) for j in jobs]
    return [e for o in outs for e in o]


def expected(jobs):
    return [e for j in jobs for e in j.expected]


def normalise(got, jobs):
    """X32 results carry no exponent: compare only x there."""
    out, k = [], 0
    for j in jobs:
        x32 = VecOp(j.cmd["op"]) in (VecOp.SILU, VecOp.RESIDUAL)
        for e in j.expected:
            g = got[k]
            out.append((g[0], 0 if x32 else g[1], g[2]))
            k += 1
    return out


def test_construction():
    assert VectorUnit(64).max_n == 64
    assert len(VectorUnit(64, lanes=8).o.payload.x) == 256
    with pytest.raises(ValueError):
        VectorUnit(64, lanes=3)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("lanes", [1, 4])
def test_op_amaranth_sim(op, lanes):
    rng = np.random.default_rng(OPS.index(op) + 1)
    dut = VectorUnit(max_n=32, lanes=lanes)
    # the shortest row (one beat, two for RoPE) waits for the block RAM after its load
    jobs = [vector_job(rng, op, n) for n in (16, (2 if op == "ROPE" else 1) * lanes, 32)]
    assert normalise(amaranth_run(dut, jobs), jobs) == expected(jobs)


@pytest.mark.cocotb
@pytest.mark.parametrize("lanes", [1, 4])
def test_ops_cocotb(build_dir, lanes):
    run_cocotb(VectorUnit(max_n=32, lanes=lanes), __name__, build_dir, testcase="run_ops",
               params={"max_n": 32, "jobs": 14, "lanes": lanes})


def _edge_rows(n):
    """X32 rows at the ends of the range: -2^31 and 2^31 - 1, powers of two and their
    neighbours (every bit length, so every normalize / RMSNORM shift), and mixed signs."""
    top = [-(1 << 31), (1 << 31) - 1]
    rows = [np.array((top * n)[:n], dtype=np.int64)]
    edge = 1 << (16 + 3)                 # SiLU's table ends: x = +-8.0, idx = +-512
    near = [edge, edge - 1, edge - 512, edge - 513, -edge, -edge - 511, -edge - 512, -edge - 513]
    rows.append(np.array((near * n)[:n], dtype=np.int64))
    for b in (0, 15, 16, 30):
        base = np.array([(1 << b), -(1 << b), (1 << b) - 1, -(1 << b) + 1] * (n // 4), dtype=np.int64)
        rows.append(np.clip(base, -(1 << 31), (1 << 31) - 1))
    rows.append(np.array([-(1 << 31)] + [1] * (n - 1), dtype=np.int64))
    return rows


def test_ops_at_the_range_ends_amaranth_sim():
    """TO_BFP, RMSNORM, SILU, RESIDUAL, ROPE (16-bit table extremes) and MUL on rows at the ends of the X32 / BFP16 ranges (normalize's
    and RMSNORM's 17-bit shift windows, SiLU without a clamp, RESIDUAL's clamp both ways) against golden."""
    from mcf.sim.compute.jobs import VectorJob
    from mcf.sw.golden import fixed as fx
    n, lanes = 16, 4
    rng = np.random.default_rng(11)
    jobs = []
    for x in _edge_rows(n):
        cmd = dict(n=n, gain_exp=0, eps=0, cm=0, ce=0)
        last = [int(i == n - 1) for i in range(n)]
        a = [(int(v), 0) for v in x]
        zeros = [(0, 0, 0)] * n
        mant, e = fx.x32_to_bfp(x[None])
        jobs.append(VectorJob(dict(cmd, op=int(VecOp.TO_BFP)), a, zeros,
                              [(int(v), int(e[0]), la) for v, la in zip(mant[0], last)]))
        gain = np.array([32767, -32768] * (n // 2), dtype=np.int64)
        eps = fx.eps_constant(n, 1e-6)
        rm, re = fx.rmsnorm_eps_n(x[None], gain, 0, eps)
        jobs.append(VectorJob(dict(cmd, op=int(VecOp.RMSNORM), eps=eps), a, [(int(g), 0, 0) for g in gain],
                              [(int(v), int(re[0]), la) for v, la in zip(rm[0], last)]))
        jobs.append(VectorJob(dict(cmd, op=int(VecOp.SILU)), a, zeros,
                              [(int(v), 0, la) for v, la in zip(fx.silu(x), last)]))
        r = x[::-1].copy()
        jobs.append(VectorJob(dict(cmd, op=int(VecOp.RESIDUAL)), a, [(int(v), 0, 0) for v in r],
                              [(int(v), 0, la) for v, la in zip(fx.sat(x + r, 32), last)]))
        half = n // 2                  # RoPE with the table's extremes (x cos + x' sin up to 2^31)
        cos = rng.choice([-32768, 32767, 16384], half)[None]
        sin = rng.choice([-32768, 32767, -16384], half)[None]
        ym, ye = fx.rope((mant[None], e[None]), cos, sin)
        jobs.append(VectorJob(dict(cmd, op=int(VecOp.ROPE)), [(int(v), int(e[0])) for v in mant[0]],
                              [(int(cos[0, i % half]), int(sin[0, i % half]), 0) for i in range(n)],
                              [(int(v), int(ye[0, 0]), la) for v, la in zip(ym[0, 0], last)]))
        bm = rng.choice([-32768, 32767, -1, 1], n)
        pm, pe = fx.bfp_mul((mant, e), (bm[None], np.array([3])))
        jobs.append(VectorJob(dict(cmd, op=int(VecOp.MUL)), [(int(v), int(e[0])) for v in mant[0]],
                              [(int(v), 0, 3) for v in bm], [(int(v), int(pe[0]), la) for v, la in zip(pm[0], last)]))
    dut = VectorUnit(max_n=32, lanes=lanes)
    assert normalise(amaranth_run(dut, jobs), jobs) == expected(jobs)


@pytest.mark.parametrize("xbits", [33, 37])
def test_coarse_shift_lut6_equals_the_plain_build(tmp_path, xbits):
    """normalize's coarse shift (round 28b; round 32: hw/lut.py's ``muxf``, 4:1 LUT6 under a MUXF7): the
    node's build equals the plain shift in Icarus, for v3's (33-bit) and v9's (37-bit) operands."""
    import shutil
    if shutil.which("iverilog") is None:
        pytest.skip("needs Icarus Verilog")
    from mcf.hw.compute.vector import COARSE_BITS, FINE_BITS, NORM_BITS, coarse_shift
    from tests.hw.test_lut import _Pair, _run

    def build(m, stim, primitive):
        s, x = stim[:COARSE_BITS], stim[COARSE_BITS:COARSE_BITS + xbits].as_signed()
        name = "p" if primitive else "q"
        return coarse_shift(m, x, s, NORM_BITS + (1 << FINE_BITS), primitive, name), stim[0]
    bad, fires = _run(tmp_path, _Pair(COARSE_BITS + xbits, build))
    assert bad == 0 and fires > 0


@pytest.mark.parametrize("lanes", [2, 8])
def test_unit_on_lut6_equals_the_plain_build(tmp_path, lanes):
    """(round 33) The unit's node build (``primitive``: the coarse shifts under MUXF7, the multipliers' 2:1
    operands two bits a LUT6_2) against its plain build in Icarus, side by side on the same random inputs every
    cycle (every input port: commands, a / b beats, the output's ready), every output compared every cycle;
    fired: an output beat taken."""
    import shutil
    if shutil.which("iverilog") is None:
        pytest.skip("needs Icarus Verilog")
    from tests.hw.compute.test_attention import unit_pair
    from tests.hw.test_lut import _Pair, _run
    bits, build = unit_pair(lambda primitive: VectorUnit(max_n=32, lanes=lanes, primitive=primitive),
                            lambda dut: dut.o.valid & dut.o.ready)
    bad, fires = _run(tmp_path, _Pair(bits, build))
    assert bad == 0 and fires > 0
