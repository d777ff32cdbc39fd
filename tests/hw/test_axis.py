"""The AXI4-Stream signature (hw/axis.py): members and widths, equality, refused widths."""
import pytest

from mcf.hw.axis import AXIStreamSignature
from mcf.spec import SpecError


@pytest.mark.parametrize("width", [32, 64, 128, 512])
def test_members(width):
    m = AXIStreamSignature(width).members
    assert {n: m[n].shape for n in m} == {"tdata": width, "tkeep": width // 8, "tlast": 1, "tvalid": 1,
                                          "tready": 1}
    assert AXIStreamSignature(width) == AXIStreamSignature(width)


@pytest.mark.parametrize("width", [16, 48, 100])
def test_bad_width(width):
    with pytest.raises(SpecError, match=f"^data_width={width}: must be a power of two >= 32$"):
        AXIStreamSignature(width)
