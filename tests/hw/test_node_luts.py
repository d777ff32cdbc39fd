"""hw/node.py's ``equal`` (round 29: the RX engine's tag compares as LUT6 instances, three bit
pairs each): the primitive build equals the plain compare in Verilog simulation (Icarus,
tests/hw/test_lut.py's pair bench), on random words and on words made equal but for one bit."""
import pytest
from amaranth import Const, Mux

from mcf.hw.node import equal


@pytest.mark.parametrize("width", [24, 7, 1])
def test_equal_equals_the_plain_build(tmp_path, width):
    from tests.hw.test_lut import _Pair, _run

    def build(m, stim, primitive):
        a = stim[:width]
        # b: a itself with one bit flipped by stim's choice, or random, or a: every case often
        flip = stim[width:width + 5]
        rand = stim[width + 5:2 * width + 5]
        mode = stim[2 * width + 5:2 * width + 7]
        one = (Const(1, width) << flip)[:width]
        b = Mux(mode == 0, rand, Mux(mode == 1, a ^ one, a))
        return equal(m, a, b, primitive, f"eq{int(primitive)}"), equal(m, a, b, False, "x")
    bad, fires = _run(tmp_path, _Pair(2 * width + 7, build))
    assert bad == 0 and fires > 0
