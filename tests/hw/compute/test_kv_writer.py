"""KV block writer (hw/compute/kv_writer.py): construction, an Amaranth-simulator test and the
cocotb bench with its pytest runner, against ``fixed.quantize_kv`` (random pauses on both
streams)."""
import cocotb
import numpy as np
import pytest

from mcf.hw.compute.kv_writer import KVWriter
from mcf.sim.cocotb_util import StreamSink, StreamSource, bounded, params, pauses, start
from mcf.sim.compute.drive import run_kv_writer
from mcf.sim.compute.jobs import kv_blocks
from mcf.sim.runner import run_cocotb


@cocotb.test()
async def run_quantize(dut):
    p = params()
    seed = p.get("seed", 1)
    beats_in, expected = kv_blocks(np.random.default_rng(seed), p["blocks"], p["head_dim"], p["lanes"])
    src = StreamSource(dut, "i", dut.clk, pauses(seed + 1))
    sink = StreamSink(dut, "o", dut.clk, pauses(seed + 2))
    await start(dut)
    cocotb.start_soon(src.send(beats_in))
    got = await bounded(sink.recv(len(expected)), 40 * len(expected) * 10 + 5000, "KV blocks")
    for i, (a, b) in enumerate(zip(got, expected)):
        assert a == b, f"beat {i}: got {a:#x} expected {b:#x}"


def test_construction():
    w = KVWriter(head_dim=128, lanes=16)
    assert w.beats == 8 and len(w.o.payload.q) == 64
    with pytest.raises(ValueError):
        KVWriter(head_dim=16, lanes=3)


def test_quantize_amaranth_sim():
    rng = np.random.default_rng(3)
    dut = KVWriter(head_dim=16, lanes=4)
    beats_in, expected = kv_blocks(rng, 6, 16, 4)
    assert run_kv_writer(dut, beats_in, 6) == expected


@pytest.mark.cocotb
@pytest.mark.parametrize("head_dim,lanes", [(16, 4), (16, 16)])
def test_quantize_cocotb(build_dir, head_dim, lanes):
    run_cocotb(KVWriter(head_dim, lanes), __name__, build_dir,
               testcase="run_quantize", params={"head_dim": head_dim, "lanes": lanes, "blocks": 40})
