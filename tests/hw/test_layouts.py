"""The Amaranth layouts are the spec's layouts: same fields, offsets and widths."""
from amaranth.lib import data

from mcf import spec
from mcf.hw import layouts


def _offsets(layout: data.StructLayout):
    return {name: (field.offset, field.width) for name, field in layout}


def test_meta_layout_matches_spec():
    assert _offsets(layouts.MetaLayout) == {f.name: (spec.META.offsets[f.name], f.width)
                                            for f in spec.META.fields}


def test_enums_match_spec():
    for hw_enum, py_enum in [(layouts.Op, spec.Op), (layouts.Stage, spec.Stage),
                             (layouts.Collective, spec.Collective), (layouts.ReduceOp, spec.ReduceOp)]:
        assert {m.name: m.value for m in hw_enum} == {m.name: m.value for m in py_enum}


def test_route_and_descriptor_layouts():
    for hw, sp in [(layouts.RouteEntryLayout, spec.ROUTE_ENTRY), (layouts.DmaDescriptorLayout, spec.DMA_DESCRIPTOR)]:
        assert _offsets(hw) == {f.name: (sp.offsets[f.name], f.width) for f in sp.fields}


def test_instruction_layouts_match_spec():
    from mcf.spec import isa
    assert {m.name: m.value for m in layouts.Opcode} == {m.name: m.value for m in isa.Opcode}
    assert set(layouts.InstrLayouts) == set(isa.Opcode)
    for op, layout in isa.LAYOUTS.items():
        assert layouts.InstrLayouts[op].size == isa.INSTR_BITS
        assert _offsets(layouts.InstrLayouts[op]) == {f.name: (layout.offsets[f.name], f.width)
                                                      for f in layout.fields}
    header = {f.name: (isa.LAYOUTS[isa.Opcode.END].offsets[f.name], f.width) for f in isa.HEADER_FIELDS}
    assert _offsets(layouts.InstrHeaderLayout) == header
