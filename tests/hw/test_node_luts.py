"""``mcf.hw.lut.equal`` (round 29: the RX engine's tag compares as LUT6 instances, three bit pairs each;
round 30: moved from hw/node.py, and the NIC's slot key compares, ``same_key``): the primitive build
equals the plain compare in Verilog simulation (Icarus, tests/hw/test_lut.py's pair bench), on random
words and on words made equal but for one bit."""
import pytest
from amaranth import Const, Mux

from mcf.hw.lut import equal


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


def test_same_key_equals_the_plain_build(tmp_path):
    """The NIC's reduction key (``mcf.hw.nic.reduce.same_key``: route, seq, kv_id, length, op) on LUT6
    instances (round 30) against the plain field compares: random headers, headers equal but for one bit
    of the key, equal keys with other fields random (fields outside the key must not matter)."""
    from amaranth import Cat, Signal
    from mcf.hw.layouts import MetaLayout
    from mcf.hw.nic.reduce import same_key
    from tests.hw.test_lut import _Pair, _run
    W = MetaLayout.size
    from mcf.hw.nic.common import raw
    probe = Signal(MetaLayout)
    key_bits = sum(len(raw(getattr(probe, f))) for f in ("route_id", "seq", "kv_id", "length", "reduce_op"))

    def build(m, stim, primitive):
        a, b = Signal(MetaLayout, name=f"a{int(primitive)}"), Signal(MetaLayout, name=f"b{int(primitive)}")
        mode, flip = stim[:2], stim[2:9]
        m.d.comb += [a.eq(stim[9:9 + W]), b.eq(stim[9 + W:9 + 2 * W])]
        with m.If(mode != 0):               # b's key a's (its other fields stay random) ...
            for f in ("route_id", "seq", "kv_id", "length", "reduce_op"):
                m.d.comb += getattr(b, f).eq(getattr(a, f))
            with m.If(mode == 1):           # ... but for one bit of it
                for k, f in enumerate(("route_id", "seq", "kv_id", "length")):
                    width = len(getattr(a, f))
                    with m.If(flip[:2] == k):
                        m.d.comb += getattr(b, f).eq(getattr(a, f) ^ (Const(1, width) << flip[2:])[:width])
        return same_key(a, b, m, primitive, f"k{int(primitive)}"), same_key(a, b)
    assert key_bits > 40
    bad, fires = _run(tmp_path, _Pair(9 + 2 * W, build))
    assert bad == 0 and fires > 0
