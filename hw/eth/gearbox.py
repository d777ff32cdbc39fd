"""66:64 gearboxes between the PCS (one 66-bit block per enabled cycle) and the GT's 64-bit
raw user interface (10.3125 Gb/s / 64 = 161.13 MHz, a word every cycle).

Transmit: 32 blocks make 33 words.  The gearbox holds the bits not yet sent (an even count,
0..64); on the 33rd cycle of a sequence it holds a whole word and takes no block, so ``req``
(the PCS and MAC clock enable) is low one cycle in 33.  Bit 0 of a block (the sync header's
first bit) goes out first, then payload bit 0; GT bit 0 is sent first unless ``bit_reverse``.

Receive: every word is appended to the held bits; whenever 66 or more are held a block
leaves (``valid``), 32 blocks per 33 words.  A ``slip`` pulse drops one bit, moving the block
boundary by one bit: the block-lock state machine slips until sync headers line up.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.eth.common import HEADER_BITS, BlockSignature
from mcf.hw.registry import block
from mcf.spec.eth import BLOCK_BITS, GT_DATA_BITS

W = GT_DATA_BITS


def _reverse(v):
    return Cat(*(v[i] for i in reversed(range(len(v)))))


class TxGearbox(wiring.Component):
    def __init__(self, bit_reverse: bool = False):
        self.bit_reverse = bit_reverse
        super().__init__({"i": In(BlockSignature()), "req": Out(1), "gt_data": Out(W)})

    def elaborate(self, platform):
        m = Module()
        half = Signal(range(W // 2 + 1))         # held bits / 2 (0..32)
        held = Signal(W)
        blk = Cat(self.i.header, self.i.data)
        combined = Signal(W + BLOCK_BITS)
        m.d.comb += self.req.eq(half != W // 2)
        with m.Switch(half):
            for h in range(W // 2):
                with m.Case(h):
                    m.d.comb += combined.eq(held | (blk << (2 * h)))
            with m.Default():
                m.d.comb += combined.eq(held)
        out = combined[:W]
        m.d.sync += [
            self.gt_data.eq(_reverse(out) if self.bit_reverse else out),
            held.eq(combined[W:2 * W]),
            half.eq(Mux(self.req, half + 1, 0)),
        ]
        return m


class RxGearbox(wiring.Component):
    def __init__(self, bit_reverse: bool = False):
        self.bit_reverse = bit_reverse
        super().__init__({"gt_data": In(W), "slip": In(1), "o": Out(BlockSignature()), "valid": Out(1)})

    def elaborate(self, platform):
        m = Module()
        max_held = BLOCK_BITS - 1                      # 65: after a word, 64..129 bits
        count = Signal(range(max_held + 1))
        held = Signal(max_held)
        word = _reverse(self.gt_data) if self.bit_reverse else self.gt_data
        joined = Signal(max_held + W)
        with m.Switch(count):
            for c in range(max_held + 1):
                with m.Case(c):
                    m.d.comb += joined.eq(held[:c] | (word << c) if c else word)
        total = Signal(range(max_held + W + 1))
        bits = Signal(max_held + W)
        m.d.comb += [
            bits.eq(Mux(self.slip, joined[1:], joined)),
            total.eq(count + W - self.slip),
        ]
        m.d.sync += self.valid.eq(0)
        with m.If(total >= BLOCK_BITS):
            m.d.sync += [
                self.o.header.eq(bits[:HEADER_BITS]),
                self.o.data.eq(bits[HEADER_BITS:BLOCK_BITS]),
                self.valid.eq(1),
                held.eq(bits[BLOCK_BITS:]),
                count.eq(total - BLOCK_BITS),
            ]
        with m.Else():
            m.d.sync += [held.eq(bits), count.eq(total)]
        return m


@block("eth_tx_gearbox", "66:64 transmit gearbox (a block on 32 cycles of 33)")
def _tx_gearbox():
    return TxGearbox()


@block("eth_rx_gearbox", "64:66 receive gearbox with bit slip")
def _rx_gearbox():
    return RxGearbox()
