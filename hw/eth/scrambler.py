"""The 10GBASE-R self-synchronous scrambler, 1 + x^39 + x^58 (IEEE 802.3 49.2.6), over the
64 payload bits of each block (the sync header is not scrambled), bit 0 first.

    scrambled[t] = data[t] ^ scrambled[t - 39] ^ scrambled[t - 58]     (transmit)
    data[t]      = scrambled[t] ^ scrambled[t - 39] ^ scrambled[t - 58] (receive)

A block's 64 bits are one step: each output bit is the XOR of a fixed set of input bits and
of the 58 bits kept from earlier blocks, found at elaboration by unrolling the recurrence on
symbolic bit vectors.  The descrambler needs no lock: after 58 received bits its state is
the transmitter's.
"""
from __future__ import annotations

from functools import lru_cache

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.eth.common import BlockSignature, enabled
from mcf.hw.registry import block
from mcf.spec.eth import SCRAMBLER_TAPS, XGMII_BITS

STATE_BITS = max(SCRAMBLER_TAPS)


@lru_cache(maxsize=None)
def unrolled(width: int = XGMII_BITS, feedback: bool = True):
    """Per output bit, (input bits, state bits) whose XOR it is; then the next state's bits
    as (input bits, state bits).  ``feedback``: the scrambler (taps on its own output);
    otherwise the descrambler (taps on its input)."""
    # symbolic masks: bits 0..width-1 = inputs, width..width+STATE_BITS-1 = state
    def state(t):   # bit t < 0 of the stream, kept in the state register (t = -58 .. -1)
        return 1 << (width + t + STATE_BITS)
    out = []
    for t in range(width):
        mask = 1 << t
        for tap in SCRAMBLER_TAPS:
            u = t - tap
            if u >= 0:
                mask ^= out[u] if feedback else (1 << u)
            else:
                mask ^= state(u)
        out.append(mask)
    history = out if feedback else [1 << t for t in range(width)]
    # next state: the last STATE_BITS bits of the (scrambled) stream
    nxt = [history[width - STATE_BITS + k] if width >= STATE_BITS else None for k in range(STATE_BITS)]
    split = lambda mask: (tuple(i for i in range(width) if (mask >> i) & 1),
                          tuple(s for s in range(STATE_BITS) if (mask >> (width + s)) & 1))
    return tuple(map(split, out)), tuple(map(split, nxt))


def _xor(terms):
    return Cat(*terms).xor() if terms else Const(0, 1)


class _Scrambling(wiring.Component):
    feedback = True

    def __init__(self):
        super().__init__({"i": In(BlockSignature()), "o": Out(BlockSignature()), "en": In(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        state = Signal(STATE_BITS, init=(1 << STATE_BITS) - 1)
        outs, nxt = unrolled(XGMII_BITS, self.feedback)
        data = self.i.data
        m.d.sync += [
            self.o.data.eq(Cat(*(_xor([data[i] for i in ins] + [state[s] for s in sts]) for ins, sts in outs))),
            self.o.header.eq(self.i.header),
            state.eq(Cat(*(_xor([data[i] for i in ins] + [state[s] for s in sts]) for ins, sts in nxt))),
        ]
        return enabled(m, self.en)


class Scrambler(_Scrambling):
    """Transmit side: ``o`` = ``i`` scrambled, one register stage (header passes through)."""
    feedback = True


class Descrambler(_Scrambling):
    """Receive side: ``o`` = ``i`` descrambled, one register stage (header passes through)."""
    feedback = False


@block("eth_scrambler", "10GBASE-R scrambler 1 + x^39 + x^58, 64 bits a cycle")
def _scrambler():
    return Scrambler()


@block("eth_descrambler", "10GBASE-R descrambler 1 + x^39 + x^58, 64 bits a cycle")
def _descrambler():
    return Descrambler()
