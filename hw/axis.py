"""AXI4-Stream as an Amaranth interface.

Port names follow AXI (``tdata``, ``tkeep``, ``tlast``, ``tvalid``, ``tready``) so that the
generated Verilog ports read ``<name>__tdata`` … and cocotbext-axi binds them with
``AxiStreamBus.from_prefix(dut, name, bus_separator="__")``.  Internal, single-word
hand-offs use ``amaranth.lib.stream`` instead.
"""
from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.lut import mux2_pairs
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


class AxisRegister(wiring.Component):
    """A register stage on an AXI4-Stream (``i`` -> ``o``), both ways: ``o`` comes from
    registers and ``i.tready`` is a register (``~skid``), so neither side's logic reaches the
    other's in one cycle.  A beat taken in cycle t is on ``o`` in t + 1; a beat a cycle, no
    bubbles (the skid register holds the beat taken while ``o`` stalls).  ``busy``: a beat held."""

    def __init__(self, data_width: int, primitive: bool = False):
        self.data_width = data_width
        #: (round 33) the output register's 2:1 choice two bits a LUT6_2 (``skid_register``'s ``primitive``)
        self.primitive = bool(primitive)
        super().__init__({"i": In(AXIStreamSignature(data_width)), "o": Out(AXIStreamSignature(data_width)),
                          "busy": Out(1)})

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        m.d.comb += self.busy.eq(skid_register(m, i.tvalid, i.tready, Cat(i.tdata, i.tkeep, i.tlast),
                                               o.tvalid, o.tready, Cat(o.tdata, o.tkeep, o.tlast),
                                               primitive=self.primitive))
        return m


def skid_register(m: Module, i_valid, i_ready, i_beat, o_valid, o_ready, o_beat, name: str = "",
                  primitive: bool = False):
    """The register stage of ``AxisRegister`` on any valid / ready handshake carrying ``i_beat``
    (a ``Value``; ``o_beat`` the same width): drives ``i_ready``, ``o_valid`` and ``o_beat`` from
    registers.  Returns ``busy`` (a beat held).  ``primitive`` (round 33): the output register's choice
    of the skid's beat or the input's two bits a LUT6_2 (``mcf.hw.lut.mux2_pairs``), half a LUT a bit."""
    held, skid = Signal(len(i_beat), name=f"{name}held"), Signal(len(i_beat), name=f"{name}skid")
    valid, skid_valid = Signal(name=f"{name}valid"), Signal(name=f"{name}skid_valid")
    m.d.comb += [o_beat.eq(held), o_valid.eq(valid), i_ready.eq(~skid_valid)]
    held_n = mux2_pairs(m, skid_valid, skid, i_beat, primitive, f"{name}held_n")   # (outside the If: not gated)
    with m.If(o_ready | ~valid):           # the output register takes the skid's beat, else the input's
        m.d.sync += [held.eq(held_n), valid.eq(skid_valid | i_valid),
                     skid_valid.eq(0)]
    with m.Elif(i_valid & ~skid_valid):    # the output stalls: the input's beat waits in the skid
        m.d.sync += [skid.eq(i_beat), skid_valid.eq(1)]
    return valid | skid_valid
