"""hw/seq/sequencer.py's ``pick`` (round 29): the LUT6-instance build (radix-4 layers of
``mcf.hw.lut.mux4``, an odd top index bit plain) equals the plain 2:1 tree in Verilog simulation
(Icarus, tests/hw/test_lut.py's pair bench): the queue heads' ``cur`` (32 values of 7 bits by a
5-bit index), SEM_DATA's value (16 bits), a shorter array (0 beyond it) and an even index."""
import pytest

from mcf.hw.seq.sequencer import pick


@pytest.mark.parametrize("n,bits,index_bits", [(32, 7, 5), (32, 16, 5), (20, 3, 5), (16, 2, 4)])
def test_pick_equals_the_plain_build(tmp_path, n, bits, index_bits):
    from tests.hw.test_lut import _Pair, _run

    def build(m, stim, primitive):
        index = stim[:index_bits]
        values = [stim[index_bits + k * bits:index_bits + (k + 1) * bits] for k in range(n)]
        return pick(m, values, index, primitive, f"pk{int(primitive)}"), stim[0]
    bad, fires = _run(tmp_path, _Pair(index_bits + n * bits, build))
    assert bad == 0 and fires > 0
