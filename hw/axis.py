"""AXI4-Stream as an Amaranth interface.

Port names follow AXI (``tdata``, ``tkeep``, ``tlast``, ``tvalid``, ``tready``) so that the
generated Verilog ports read ``<name>__tdata`` … and cocotbext-axi binds them with
``AxiStreamBus.from_prefix(dut, name, bus_separator="__")``.  Internal, single-word
hand-offs use ``amaranth.lib.stream`` instead.
"""
from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.spec.packet import check_data_width


class AXIStreamSignature(wiring.Signature):
    """A source-side (``Out``) AXI4-Stream: flip it for the sink side."""

    def __init__(self, data_width: int):
        check_data_width(data_width)
        self.data_width = data_width
        super().__init__({
            "tdata": Out(data_width),
            "tkeep": Out(data_width // 8),
            "tlast": Out(1),
            "tvalid": Out(1),
            "tready": In(1),
        })

    def __eq__(self, other):
        return isinstance(other, AXIStreamSignature) and other.data_width == self.data_width

    def __hash__(self):
        return hash((type(self), self.data_width))

    def __repr__(self):
        return f"AXIStreamSignature({self.data_width})"
