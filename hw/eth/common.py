"""Interfaces shared by the 10GBASE-R blocks, and the clock-enable convention.

Every PCS/MAC stage runs one 64-bit word (or one 66-bit block) per *enabled* cycle of its
domain: the GT's user clock is 10.3125 GHz / 64 = 161.13 MHz, and the gearbox needs a
66-bit block on only 32 cycles of 33.  A stage has an ``en`` input and advances only while
it is high (``EnableInserter``); its outputs are meaningful on enabled cycles, so a consumer
outside the enabled chain (a FIFO) qualifies them with the same ``en``.  On the transmit side
``en`` is the gearbox's request, on the receive side the gearbox's block valid: a whole
chain shares one ``en`` and stays in lock-step.
"""
from __future__ import annotations

from amaranth.hdl import EnableInserter
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from mcf.spec.eth import BLOCK_BITS, XGMII_BITS

LANES = XGMII_BITS // 8
HEADER_BITS = BLOCK_BITS - XGMII_BITS


class XgmiiSignature(wiring.Signature):
    """64-bit XGMII (two 32-bit transfers per cycle): ``data`` lane k = bits 8k..8k+7,
    ``ctrl`` bit k = lane k carries a control character.  Source side."""

    def __init__(self):
        super().__init__({"data": Out(XGMII_BITS), "ctrl": Out(LANES)})


class BlockSignature(wiring.Signature):
    """One 64b/66b block: 2-bit sync ``header`` (bit 0 first on the wire) and 64-bit
    ``data`` (the block type field in bits 7:0 of a control block).  Source side."""

    def __init__(self):
        super().__init__({"data": Out(XGMII_BITS), "header": Out(HEADER_BITS)})


def enabled(module, en):
    """``module`` with every synchronous statement gated by ``en`` (all domains)."""
    return EnableInserter({"sync": en})(module)
