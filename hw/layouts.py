"""Amaranth views of the one wire-format definition in ``mcf.spec``.

Nothing here defines a field: layouts and enums are built from ``mcf.spec`` tables, so the
RTL, the runtime and the reference page cannot disagree.
"""
from __future__ import annotations

import enum
import types

from amaranth import Cat, Const, Value, signed
from amaranth.lib import data
from amaranth.lib import enum as aenum

from mcf import spec
from mcf.spec import isa
from mcf.spec.bits import BitLayout


def amaranth_enum(py_enum: type[enum.IntEnum], width: int) -> type[aenum.Enum]:
    """An Amaranth enum with the members of a spec ``IntEnum`` and an explicit width."""
    def body(ns):
        for member in py_enum:
            ns[member.name] = member.value
    return types.new_class(py_enum.__name__, (aenum.Enum,), {"shape": width}, body)


def struct_layout(layout: BitLayout) -> data.StructLayout:
    """The ``StructLayout`` of a spec ``BitLayout`` (same order, same widths, LSB first; a field the spec
    calls signed is ``signed`` here: round 31b, EMBED's ``w_exp`` had reached its mover unsigned)."""
    members = {}
    for f in layout.fields:
        members[f.name] = amaranth_enum(f.enum, f.width) if f.enum else signed(f.width) if f.signed else f.width
    result = data.StructLayout(members)
    assert result.size == layout.total_bits
    return result


Stage = amaranth_enum(spec.Stage, spec.META["stage"].width)
Op = amaranth_enum(spec.Op, spec.META["op"].width)
Collective = amaranth_enum(spec.Collective, spec.META["collective"].width)
ReduceOp = amaranth_enum(spec.ReduceOp, spec.META["reduce_op"].width)

MetaLayout = data.StructLayout({
    f.name: {"stage": Stage, "op": Op, "collective": Collective, "reduce_op": ReduceOp}.get(f.name, f.width)
    for f in spec.META.fields
})
assert MetaLayout.size == spec.HEADER_BITS

RouteEntryLayout = struct_layout(spec.ROUTE_ENTRY)
DmaDescriptorLayout = struct_layout(spec.DMA_DESCRIPTOR)

# --- the instruction set (spec/isa.py) --------------------------------------------------------------
Opcode = amaranth_enum(isa.Opcode, isa.HEADER_FIELDS[0].width)
#: The header every instruction starts with (op, wait_sem, wait_cnt, sig_sem, sig, hres).
InstrHeaderLayout = data.StructLayout({f.name: f.width for f in isa.HEADER_FIELDS})
#: Each opcode's 256-bit instruction word as a ``StructLayout`` (view the word with it).
InstrLayouts = {op: struct_layout(layout) for op, layout in isa.LAYOUTS.items()}


# --- registers ---------------------------------------------------------------------------------------
def register_word(reg, **values):
    """A register word (``Register`` fields from ``values``, other bits 0) as one ``Cat``: a
    vector driven in pieces becomes an `always @*` block that Icarus never runs."""
    parts, pos = [], 0
    for f in sorted(reg.fields, key=lambda f: f.lsb):
        if f.lsb > pos:
            parts.append(Const(0, f.lsb - pos))
        v = Value.cast(values.pop(f.name, 0))
        parts.append(v[:f.width] if len(v) >= f.width else Cat(v, Const(0, f.width - len(v))))
        pos = f.lsb + f.width
    if values:
        raise ValueError(f"{reg.name} has no field(s) {', '.join(values)}")
    if pos < spec.regmap.DATA_BITS:
        parts.append(Const(0, spec.regmap.DATA_BITS - pos))
    return Cat(*parts)
