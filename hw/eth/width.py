"""AXI-Stream width conversion between the node's data width (64 or 128 bits) and the MAC's
64 bits, in the node's clock domain.  Bytes keep their order (byte 0 in the low lanes);
only a packet's last beat may be partial, and no output beat is empty.
"""
from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axis import AXIStreamSignature
from mcf.hw.registry import block


class Downsizer(wiring.Component):
    """``i`` (2 x 64 bits) -> ``o`` (64 bits): the low half, then the high half unless the
    beat is the packet's last and its high half is empty."""

    def __init__(self, in_width: int = 128, out_width: int = 64):
        if in_width != 2 * out_width:
            raise ValueError(f"Downsizer: {in_width} -> {out_width} bits is not a 2:1 ratio")
        self.in_width, self.out_width = in_width, out_width
        super().__init__({"i": In(AXIStreamSignature(in_width)), "o": Out(AXIStreamSignature(out_width))})

    def elaborate(self, platform):
        m = Module()
        w, nb = self.out_width, self.out_width // 8
        high = Signal()                      # the low half of the current beat has gone
        hi_empty = self.i.tkeep[nb:] == 0
        m.d.comb += [
            self.o.tvalid.eq(self.i.tvalid),
            self.o.tdata.eq(self.i.tdata[:w]),
            self.o.tkeep.eq(self.i.tkeep[:nb]),
            self.o.tlast.eq(self.i.tlast & hi_empty),
        ]
        with m.If(high):
            m.d.comb += [self.o.tdata.eq(self.i.tdata[w:]), self.o.tkeep.eq(self.i.tkeep[nb:]),
                         self.o.tlast.eq(self.i.tlast)]
        done = high | (self.i.tlast & hi_empty)   # this output beat finishes the input beat
        m.d.comb += self.i.tready.eq(self.o.tready & done)
        with m.If(self.o.tvalid & self.o.tready):
            m.d.sync += high.eq(~done)
        return m


class Upsizer(wiring.Component):
    """``i`` (64 bits) -> ``o`` (2 x 64 bits): two beats make one; a packet's last beat in the
    low half leaves at once with the high half empty.  One output register."""

    def __init__(self, in_width: int = 64, out_width: int = 128):
        if out_width != 2 * in_width:
            raise ValueError(f"Upsizer: {in_width} -> {out_width} bits is not a 1:2 ratio")
        self.in_width, self.out_width = in_width, out_width
        super().__init__({"i": In(AXIStreamSignature(in_width)), "o": Out(AXIStreamSignature(out_width))})

    def elaborate(self, platform):
        m = Module()
        w, nb = self.in_width, self.in_width // 8
        low_data, low_keep = Signal(w), Signal(nb)
        have_low = Signal()
        out_full = Signal()
        completes = have_low | self.i.tlast   # this input beat fills the output register
        m.d.comb += [self.o.tvalid.eq(out_full), self.i.tready.eq(~completes | ~out_full | self.o.tready)]
        with m.If(self.o.tvalid & self.o.tready):
            m.d.sync += out_full.eq(0)
        with m.If(self.i.tvalid & self.i.tready):
            with m.If(have_low):
                m.d.sync += [self.o.tdata.eq(Cat(low_data, self.i.tdata)), self.o.tkeep.eq(Cat(low_keep, self.i.tkeep)),
                             self.o.tlast.eq(self.i.tlast), out_full.eq(1), have_low.eq(0)]
            with m.Elif(self.i.tlast):
                m.d.sync += [self.o.tdata.eq(self.i.tdata), self.o.tkeep.eq(self.i.tkeep),
                             self.o.tlast.eq(1), out_full.eq(1)]
            with m.Else():
                m.d.sync += [low_data.eq(self.i.tdata), low_keep.eq(self.i.tkeep), have_low.eq(1)]
        return m


@block("eth_downsizer", "AXI-Stream 128 -> 64 bits")
def _down():
    return Downsizer()


@block("eth_upsizer", "AXI-Stream 64 -> 128 bits")
def _up():
    return Upsizer()
