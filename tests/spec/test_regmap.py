"""The register map: no overlaps, every error cause has a counter, layouts fit their registers."""
import enum

import pytest

from mcf import spec
from mcf.spec import REGISTERS, Access, ErrorCause, SpecError
from mcf.spec.regmap import ERROR_COUNTER_BASE, RegField, Register, RegisterMap


def test_offsets_unique_and_aligned():
    offsets = [r.offset for r in REGISTERS]
    assert len(offsets) == len(set(offsets))
    assert all(o % 4 == 0 for o in offsets)


def test_every_error_cause_has_a_counter():
    for cause in ErrorCause:
        r = REGISTERS[f"ERR_{cause.name}"]
        assert r.offset == ERROR_COUNTER_BASE + 4 * cause and r.access is Access.RO


def test_staging_registers_cover_meta_and_descriptor():
    meta_words = [r for r in REGISTERS if r.name.startswith("META_W")]
    assert len(meta_words) * 32 == spec.HEADER_BITS
    desc_words = [r for r in REGISTERS if r.name.startswith("DESC_W")]
    assert len(desc_words) * 32 >= spec.DMA_DESCRIPTOR.total_bits


def test_route_entry_fits_one_register():
    assert spec.ROUTE_ENTRY.total_bits == 32
    data = REGISTERS["ROUTE_DATA"]
    assert data.field("valid").lsb == 31 and data.field("port_mask").width == 16


def test_overlap_is_refused():
    with pytest.raises(SpecError, match="overlaps"):
        RegisterMap([Register("A", 0, Access.RO, ""), Register("B", 0, Access.RO, "")])


def test_dma_descriptor_round_trip():
    d = {"addr": 0x8_0000_1000, "length": 4096, "buffer": 1, "dir": spec.DmaDir.LOAD, "tag": 5}
    word = spec.DMA_DESCRIPTOR.pack(d)
    assert spec.DMA_DESCRIPTOR.unpack(word) == {k: int(v) for k, v in d.items()}
    with pytest.raises(SpecError, match="length"):
        spec.DMA_DESCRIPTOR.pack({**d, "length": 1 << 32})


def test_register_codec():
    """encode / decode / mask, like BitLayout's: fields by name, range-checked, others 0."""
    caps = REGISTERS["CAPS"]
    word = caps.encode(data_bytes=16, net_ports=3, desc_queue_log2=2)
    assert word == 16 | 3 << 8 | 2 << 16
    assert caps.decode(word | 0xFFF0_0000) == {"data_bytes": 16, "net_ports": 3, "meta_queue_log2": 0,
                                               "desc_queue_log2": 2}
    assert caps.mask == 0x000F_FFFF and REGISTERS["DMA_WINDOW_BASE_LO"].mask == 0xFFFF_FFFF
    assert REGISTERS["DESC_DONE"].field("tag").mask == 0x07FF_0000
    with pytest.raises(SpecError, match=r"^CAPS\.net_ports=16 does not fit in 4 bits$"):
        caps.encode(net_ports=16)
    with pytest.raises(KeyError, match="CAPS has no field bogus"):
        caps.encode(bogus=1)


def test_sequencer_registers_live_in_their_window():
    from mcf.spec.regmap import NETWORK_FAULTS, SEQ_BASE, SEQ_WINDOW
    seq = [r for r in REGISTERS if r.offset in SEQ_WINDOW]
    assert seq[0].name == "SEQ_CAPS" and seq[0].offset == SEQ_BASE
    assert {"PROG_BASE_LO", "PROG_BASE_HI", "PROG_COUNT", "SEQ_CONTROL", "SEQ_STATUS", "SEQ_PC", "SEQ_WAIT",
            "FAULT_MASK", "WATCHDOG", "RX_WAIT", "SEM_INDEX", "SEM_DATA", "DIR_INDEX", "DIR_DATA",
            "PERF_INDEX", "PERF_LO", "PERF_HI"} <= {r.name for r in seq}
    assert REGISTERS["FAULT_MASK"].reset == sum(1 << int(c) for c in NETWORK_FAULTS)
    # PROG_BASE stores only DDR_ALIGN multiples
    assert REGISTERS["PROG_BASE_LO"].mask == 0xFFFF_FFC0


def test_spec_fingerprint_follows_encodings_not_docs():
    """VERSION reads the spec's fingerprint: it changes when a field's width, an offset, an enum value
    or a constant changes, not when a doc does; a NumPy table is left out (its float construction
    may differ in an ulp on the board's A53)."""
    import numpy as np

    from mcf.spec.bits import BitLayout, Field, fingerprint
    from mcf.spec.regmap import SPEC_VERSION

    assert REGISTERS["VERSION"].reset == SPEC_VERSION and 0 < SPEC_VERSION < 1 << 32

    def ns(width=8, doc="a", offset=0x10, blue=2, const=5, table=(1, 2)):
        color = enum.IntEnum("Color", {"RED": 1, "BLUE": blue})
        return {"L": BitLayout("L", [Field("x", width, doc), Field("y", 32 - width, "b")]),
                "R": (Register("R", offset, Access.RW, doc, (RegField("f", 0, 4, doc),), reset=7),),
                "Color": color, "K": const, "T": np.array(table), "_private": 9, "f": len}

    base = fingerprint(ns())
    assert fingerprint(ns(doc="another doc")) == base
    assert fingerprint(ns(table=(3, 4))) == base
    assert fingerprint({**ns(), "@py_assert1": None}) == base      # a tool's name in a module
    for change in ({"width": 9}, {"offset": 0x14}, {"blue": 3}, {"const": 6}):
        assert fingerprint(ns(**change)) != base, change
