"""Signatures and layouts shared by the NIC blocks (all field widths come from ``mcf.spec``)."""
from __future__ import annotations

from amaranth import Const, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from mcf import spec
from mcf.spec import packet as wire
from mcf.hw.layouts import MetaLayout, RouteEntryLayout

ROUTE_WORD_BITS = spec.ROUTE_ENTRY.total_bits


class RouteLookupSignature(wiring.Signature):
    """A read port of the route table, seen from the block that looks routes up
    (``entry`` is valid the cycle after ``addr``; ``addr`` held -> ``entry`` held)."""

    def __init__(self):
        super().__init__({
            "addr": Out(wire.ROUTE_ID_BITS),
            "entry": In(RouteEntryLayout),
        })


def beat_layout(data_width: int) -> data.StructLayout:
    """One buffered AXI-Stream beat."""
    return data.StructLayout({"data": data_width, "keep": data_width // 8, "last": 1})


def desc_layout(n_out: int, depth: int) -> data.StructLayout:
    """One stored packet: its header, the outputs it goes to, where its payload is."""
    return data.StructLayout({
        "meta": MetaLayout,
        "mask": n_out,
        "start": range(depth),
        "nbeats": range(depth + 1),
    })


class BufferReadSignature(wiring.Signature):
    """A read port into an ingress packet buffer, seen from the reader (1 cycle latency;
    ``en`` low holds ``data``; ``en`` with ``zero``: ``data`` becomes 0, a word of the buffer's
    memory never written -- round 28: the egress ORs its inputs' words instead of choosing one)."""

    def __init__(self, data_width: int, depth: int):
        super().__init__({
            "addr": Out(range(depth)),
            "en": Out(1),
            "zero": Out(1),
            "data": In(beat_layout(data_width)),
        })


def payload_beats(length, data_width: int):
    """Beats a payload of ``length`` bytes takes (an Amaranth expression)."""
    shift = (data_width // 8).bit_length() - 1
    return (length + (data_width // 8 - 1)) >> shift


def last_keep(length, data_width: int):
    """TKEEP of the last payload beat of a ``length``-byte payload."""
    nb = data_width // 8
    rem = length[:(nb.bit_length() - 1)]
    full = Const((1 << nb) - 1, nb)
    return Mux(rem == 0, full, ~(full << rem)[:nb])


def raw(view) -> Signal:
    """The bits of a layout view / enum field (for comparisons with integers)."""
    return view.as_value() if hasattr(view, "as_value") else view
