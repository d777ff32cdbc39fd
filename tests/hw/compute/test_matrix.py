"""Matrix unit: construction, Amaranth-simulator unit test and cocotb bench vs ``fixed.linear``."""
import numpy as np
import pytest

from mcf.hw.compute.matrix import MatrixUnit
from mcf.sim.compute.jobs import linear_job
from mcf.sim.compute.drive import run_matrix
from mcf.sim.runner import run_cocotb


def test_construction():
    mu = MatrixUnit(rows=4, lanes=8, max_tokens=8, max_inputs=256)
    assert mu.macs_per_cycle == 32 and len(mu.w.tdata) == 128 and len(mu.o.tdata) == 128
    assert (256 * 2 ** 15 * 8 * (2 ** 16 - 1)).bit_length() + 1 <= mu.acc_width   # exact accumulator
    assert MatrixUnit(16, 16, 16, 8960, 9496).acc_width == 49      # Qwen2.5-1.5B down_proj


def test_bad_params():
    with pytest.raises(ValueError):
        MatrixUnit(lanes=6)
    with pytest.raises(ValueError):
        MatrixUnit(rows=3)


def run_amaranth(dut, job):
    """One job through the shared Amaranth-simulator driver (mcf.sim.compute.drive)."""
    return run_matrix(dut, [job])[0]


@pytest.mark.parametrize("t,packed,lanes", [(1, True, 4), (3, True, 8), (3, False, 4)])
def test_linear_amaranth_sim(t, packed, lanes):
    rng = np.random.default_rng(t)
    dut = MatrixUnit(rows=2, lanes=lanes, max_tokens=4, max_inputs=32, max_tiles=4, packed=packed)
    job = linear_job(rng, 2, lanes, 4, t=t, n=32, out=4, group=8)
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


@pytest.mark.parametrize("w_exp,e,packed", [(0, -10, True), (60, -16, True), (20, -16, True), (20, -16, False)])
def test_extremes_amaranth_sim(w_exp, e, packed):
    """Largest products and scales, left shifts that saturate and right shifts past the width.
    (Not much larger left shifts: golden rshr shifts int64 left unchecked, so acc << 26 wraps.)"""
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
    job = pack_linear(m, ex, qw, b, y, 2, 4, 4)
    dut = MatrixUnit(rows=2, lanes=4, max_tokens=4, max_inputs=32, max_tiles=4, packed=packed)
    assert run_amaranth(dut, job) == job.expected
