"""A model of one direction of a serial 10GBASE-R link, for simulation (not synthesizable
intent): the transmitting GT's 64-bit words arrive at the receiving GT in the same clock
domain (a receiver's recovered clock is its far end's transmit clock) after ``delay`` words,
with faults a bench injects:

* ``slip`` (pulse): the received bit stream moves by one bit (one bit repeated; after 63
  slips the next one drops 63 bits), as when a CDR loses a bit;
* ``flip`` (64 bits): XORed into the word received this cycle (bit errors);
* ``cut``: the receiver sees all zeros (unplugged fibre).
"""
from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

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
