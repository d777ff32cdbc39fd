"""The AXI4-Lite signature (hw/axi/lite.py): AXI's member names and widths, xRESP codes, and the
parameters it refuses."""
import pytest

from mcf.hw.axi.lite import AXI4LiteSignature, Resp
from mcf.spec.regmap import ADDR_BITS, DATA_BITS


def test_members_and_widths():
    m = AXI4LiteSignature(ADDR_BITS, DATA_BITS).members
    assert len(m) == 19 and m["awaddr"].shape == m["araddr"].shape == ADDR_BITS
    assert m["wdata"].shape == m["rdata"].shape == DATA_BITS and m["wstrb"].shape == DATA_BITS // 8
    assert m["bresp"].shape == m["rresp"].shape == 2
    assert [r.value for r in Resp] == [0, 1, 2, 3] and Resp.SLVERR == 2   # AXI4 A3.4.4


@pytest.mark.parametrize("kw,message", [
    (dict(data_width=16), "AXI4-Lite data_width=16: must be 32 or 64"),
    (dict(addr_width=1), "AXI4-Lite addr_width=1: must be 2..64"),
])
def test_bad_parameters(kw, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        AXI4LiteSignature(**kw)
