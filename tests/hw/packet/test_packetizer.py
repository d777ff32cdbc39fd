"""Packetizer: construction, cocotb benches (random backpressure; FIFOs fill, nothing dropped)."""
import pytest

from mcf.hw.packet.packetizer import Packetizer
from mcf.sim.runner import run_cocotb


def test_construction():
    p = Packetizer(128, payload_depth=64, meta_depth=8)
    assert len(p.o.tdata) == 128 and len(p.meta.payload.as_value()) == 128


@pytest.mark.parametrize("depth", [0, 3, 100])
def test_bad_depth(depth):
    with pytest.raises(ValueError, match="power of two"):
        Packetizer(64, payload_depth=depth)


@pytest.mark.cocotb
@pytest.mark.parametrize("width", [64, 128])
def test_packetize_cocotb(width, build_dir):
    run_cocotb(Packetizer(width, 64, 8), "mcf.sim.packet.test_packetizer", build_dir,
               testcase="packetize", params={"data_width": width, "packets": 120})


@pytest.mark.cocotb
@pytest.mark.parametrize("width", [64, 128])
def test_backpressure_cocotb(width, build_dir):
    run_cocotb(Packetizer(width, 32, 4), "mcf.sim.packet.test_packetizer", build_dir,
               testcase="backpressure",
               params={"data_width": width, "payload_depth": 32, "meta_depth": 4})
