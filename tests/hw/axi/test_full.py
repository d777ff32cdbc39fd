"""The AXI4 signature (hw/axi/full.py): AXI's member names and widths, one-direction ports,
and the parameters it refuses."""
import pytest

from mcf.hw.axi.full import BOUNDARY_BYTES, BURST_INCR, MAX_BURST_BEATS, AXI4Signature


def test_members_and_widths():
    sig = AXI4Signature(40, 128, 2)
    m = sig.members
    assert m["araddr"].shape == m["awaddr"].shape == 40 and m["rdata"].shape == m["wdata"].shape == 128
    assert m["wstrb"].shape == 16 and m["arlen"].shape == 8 and m["awid"].shape == m["rid"].shape == 2
    assert {n for n in m if n.startswith("ar")} == {"arid", "araddr", "arlen", "arsize", "arburst", "arlock",
                                                     "arcache", "arprot", "arqos", "arvalid", "arready"}
    writes = {n for n in m if n.startswith(("aw", "w", "b"))}
    assert set(AXI4Signature(read=False).members) == writes
    assert set(AXI4Signature(write=False).members) == set(m) - writes == {n for n in m if n.startswith(("ar", "r"))}
    assert (BURST_INCR, MAX_BURST_BEATS, BOUNDARY_BYTES) == (1, 256, 4096)      # AXI4 A3.4.1
    assert AXI4Signature(40, 64) == AXI4Signature(40, 64) != AXI4Signature(40, 128)


@pytest.mark.parametrize("kw,message", [
    (dict(data_width=48), "AXI4 data_width=48: must be a power of two 8..1024"),
    (dict(addr_width=8), "AXI4 addr_width=8: must be 12..64"),
    (dict(id_width=0), "AXI4 id_width=0: must be 1..32"),
    (dict(read=False, write=False), "AXI4Signature: neither read nor write channels"),
])
def test_bad_parameters(kw, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        AXI4Signature(**kw)
