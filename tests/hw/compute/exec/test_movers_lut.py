"""(round 29, gl29) The movers' LUT6-instance builds equal their plain builds in Icarus (the LUT6 model hw/lut6.v):
both side by side on the same random inputs every cycle, their outputs compared every cycle (tests/hw/test_lut.py's
harness).  The plain builds are the ones the Python simulator runs in every mover test."""

import pytest
from amaranth import signed

from mcf.hw.compute.exec.movers import _embed_shift
from mcf.spec.fixed import W_BITS

PW = W_BITS + 17                    # EMBED's product bits (``EmbedMover``)


@pytest.mark.parametrize("sha_bits, out_bits", [(6, None), (5, None), (6, 33)])
def test_embed_shift_lut6_equals_the_plain_build(tmp_path, sha_bits, out_bits):
    """EMBED's ``(prod << 35) >> sha``: random prod and sha (all of sha's values, past its clamp 1 .. 56 too; an odd
    count of sha's bits: a last 2:1 layer); (round 32) its low 33 bits only, the node's build."""
    from tests.hw.test_lut import _Pair, _run

    def build(m, stim, primitive):
        prod, sha = stim[:PW].as_signed(), stim[PW:PW + sha_bits]
        out = _embed_shift(m, prod, sha, primitive, "p" if primitive else "q", out_bits=out_bits)
        return out, out[40 if out_bits is None else 30]
    bad, fires = _run(tmp_path, _Pair(PW + sha_bits, build))
    assert bad == 0 and fires > 0


@pytest.mark.parametrize("codes", [(0, 1, 2, 3, 4), (0, 1, 2, 3, 4, 5), (0, 2, 3, 4, 5, 6, 7)])
def test_code_tree_lut6_equals_the_plain_build(tmp_path, codes):
    """``code_tree`` (the SPAD's data choice by ``spad_sel``): its full 4:1 choices by the low two bits as LUT6 (the node's
    build) against the plain choices; random select (codes no driver has too) and values."""
    from mcf.hw.compute.exec.unit import code_tree
    from tests.hw.test_lut import _Pair, _run
    width = 12

    def build(m, stim, primitive):
        sel = stim[:3]
        values = {c: stim[3 + width * i:3 + width * (i + 1)] for i, c in enumerate(codes)}
        out = code_tree(sel, values, 2, m, primitive, "p" if primitive else "q")
        return out, out[0]
    bad, fires = _run(tmp_path, _Pair(3 + width * len(codes), build))
    assert bad == 0 and fires > 0


@pytest.mark.parametrize("banks", [4, 2])
def test_spad_wide_data_lut6_equals_the_plain_build(tmp_path, banks):
    """(round 31) ``spad_wide_data`` (the SPAD's one write-data bus: the wide writers' slices, GEMM's second word, or
    the narrow beat of the codes 0 .. 4, by ``spad_sel``, ``wide_en`` and ``wide_alt_en``): its 4:1 choices as LUT6
    (the node's build) against the plain choices; random selects (codes no writer has too) and values."""
    from mcf.hw.compute.exec.unit import spad_wide_data
    from tests.hw.test_lut import _Pair, _run
    width, codes = 6, (0, 1, 2, 3, 4)

    def build(m, stim, primitive):
        sel, wide_en, alt_en = stim[:3], stim[3], stim[4]
        at = 5 + width * len(codes)
        data = {c: stim[5 + width * i:5 + width * (i + 1)] for i, c in enumerate(codes)}
        ww = [stim[at + width * banks * x:at + width * banks * (x + 1)] for x in range(3)]
        out = spad_wide_data(m, sel, wide_en, data, {3: ww[0], 4: ww[1]}, ww[2], alt_en, banks, primitive,
                             "p" if primitive else "q")
        return out, out[0]
    bad, fires = _run(tmp_path, _Pair(5 + width * len(codes) + 3 * width * banks, build))
    assert bad == 0 and fires > 0
