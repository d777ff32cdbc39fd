"""Simulation models of 10GBASE-R links (not meant for synthesis).

``SerialLink`` models one direction of a serial link: the transmitting GT's 64-bit words arrive at the receiving GT in the same clock
domain (a receiver's recovered clock is its far end's transmit clock) after ``delay`` words,
with faults a bench injects:

* ``slip`` (pulse): the received bit stream moves by one bit (one bit repeated; after 63
  slips the next one drops 63 bits), as when a CDR loses a bit;
* ``flip`` (64 bits): XORed into the word received this cycle (bit errors);
* ``cut``: the receiver sees all zeros (unplugged fibre).

``PortLoop`` is one ``EthPort`` whose GT output returns to its own GT input through a
``SerialLink`` (the port's benches and ``mcf bench eth``).
"""
from __future__ import annotations

from amaranth import Cat, ClockDomain, ClockSignal, Module, ResetSignal, Signal
from amaranth.hdl import DomainRenamer
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axis import AXIStreamSignature
from mcf.hw.csr.ports import EthControlPort
from mcf.hw.eth.port import EthPort
from mcf.spec import eth
from mcf.spec.regmap import ErrorCause

W = 64


class SerialLink(wiring.Component):
    def __init__(self, delay: int = 2):
        if delay < 1:
            raise ValueError("delay must be >= 1 word")
        self.delay = delay
        super().__init__({"tx": In(W), "rx": Out(W), "slip": In(1), "flip": In(W), "cut": In(1)})

    def elaborate(self, platform):
        m = Module()
        pipe = [Signal(W, name=f"word{i}") for i in range(self.delay + 1)]
        m.d.comb += pipe[0].eq(self.tx)
        for a, b in zip(pipe, pipe[1:]):
            m.d.sync += b.eq(a)
        prev, cur = pipe[-1], pipe[-2]
        offset = Signal(range(W))            # bits of delay beyond whole words
        with m.If(self.slip):
            m.d.sync += offset.eq(offset + 1)
        window = Cat(prev, cur)              # prev's bits first on the line
        seen = Signal(W)
        with m.Switch(offset):
            for o in range(W):
                with m.Case(o):
                    m.d.comb += seen.eq(window[W - o:2 * W - o])
        m.d.comb += self.rx.eq(0)
        with m.If(~self.cut):
            m.d.comb += self.rx.eq(seen ^ self.flip)
        return m


class PortLoop(wiring.Component):
    """``EthPort`` looped back through ``SerialLink`` in one clock (``eth_tx``): the receive
    clock is the transmit clock, as a recovered clock would be.  The link's fault inputs,
    the port's node side, register side and SFP+ pins are ports of this top."""

    def __init__(self, data_width: int = 128, max_frame: int = eth.MAX_FRAME_BYTES,
                 ber_window: int = eth.BER_WINDOW_BLOCKS, delay: int = 2):
        self.port = EthPort(data_width, max_frame, ber_window=ber_window)
        self.delay = delay
        axis = AXIStreamSignature(data_width)
        super().__init__({"tx": In(axis), "rx": Out(axis), "ctl": In(EthControlPort()),
                          "errors": Out(len(ErrorCause)), "slip": In(1), "flip": In(W), "cut": In(1),
                          "sfp_mod_abs": In(1), "sfp_rx_los": In(1), "sfp_tx_fault": In(1),
                          "sfp_tx_disable": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.domains.eth_rx = cd = ClockDomain("eth_rx")
        m.d.comb += [cd.clk.eq(ClockSignal("eth_tx")), cd.rst.eq(ResetSignal("eth_tx"))]
        m.submodules.port = port = self.port
        m.submodules.link = link = DomainRenamer("eth_tx")(SerialLink(self.delay))
        wiring.connect(m, wiring.flipped(self.tx), port.tx)
        wiring.connect(m, port.rx, wiring.flipped(self.rx))
        wiring.connect(m, wiring.flipped(self.ctl), port.ctl)
        m.d.comb += [link.tx.eq(port.gt_tx), port.gt_rx.eq(link.rx), link.slip.eq(self.slip),
                     link.flip.eq(self.flip), link.cut.eq(self.cut), self.errors.eq(port.errors),
                     port.sfp_mod_abs.eq(self.sfp_mod_abs), port.sfp_rx_los.eq(self.sfp_rx_los),
                     port.sfp_tx_fault.eq(self.sfp_tx_fault), self.sfp_tx_disable.eq(port.sfp_tx_disable)]
        return m
