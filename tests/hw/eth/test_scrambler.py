"""Scrambler and descrambler (hw/eth/scrambler.py) against a bit-serial LFSR written from the
polynomial of IEEE 802.3 49.2.6, 1 + x^39 + x^58, with random clock-enable pauses.

The cocotb coroutines (``run_*``) and the pytest runner share this file and ``PARAMS``.
"""
from __future__ import annotations

import random

import cocotb
import pytest
from cocotb.triggers import FallingEdge

from mcf.sim.cocotb_util import params, start

PARAMS = {"blocks": 300, "seed": 11, "en_probability": 0.8}


# --- the independent reference -------------------------------------------------------------
class SerialScrambler:
    """One bit at a time: s = d ^ s[-39] ^ s[-58] (scramble) / d = s ^ s[-39] ^ s[-58]."""

    def __init__(self, state_ones: bool = True):
        self.history = [1 if state_ones else 0] * 58   # history[-1] = most recent line bit

    def scramble(self, bit: int) -> int:
        out = bit ^ self.history[-39] ^ self.history[-58]
        self.history = self.history[1:] + [out]
        return out

    def descramble(self, bit: int) -> int:
        out = bit ^ self.history[-39] ^ self.history[-58]
        self.history = self.history[1:] + [bit]
        return out

    def block(self, word: int, descramble: bool = False) -> int:
        f = self.descramble if descramble else self.scramble
        return sum(f((word >> i) & 1) << i for i in range(64))


# --- cocotb ----------------------------------------------------------------------------------
async def drive(dut, blocks, rng, p_en):
    """Feed (data, header) blocks with random ``en`` pauses; return what ``o`` produced on
    each enabled cycle (one register stage: visible after the enabling edge)."""
    got = []
    await start(dut)
    await FallingEdge(dut.clk)
    pending = False
    i = 0
    while i < len(blocks) or pending:
        if pending:
            got.append((int(dut.o__data.value), int(dut.o__header.value)))
        en = rng.random() < p_en and i < len(blocks)
        dut.en.value = int(en)
        if en:
            dut.i__data.value, dut.i__header.value = blocks[i]
            i += 1
        pending = en
        await FallingEdge(dut.clk)
    return got


@cocotb.test()
async def run_scrambler(dut):
    p = params()
    rng = random.Random(p["seed"])
    blocks = [(rng.getrandbits(64), rng.choice([1, 2])) for _ in range(p["blocks"])]
    blocks[:4] = [(0, 1)] * 4          # all-zero payloads still come out scrambled
    ref = SerialScrambler()
    want = [(ref.block(d), h) for d, h in blocks]
    got = await drive(dut, blocks, rng, p["en_probability"])
    assert got == want, next(f"block {k}: {g} != {w}" for k, (g, w) in enumerate(zip(got, want)) if g != w)
    assert any(d != 0 for d, _ in got[:4])


@cocotb.test()
async def run_descrambler(dut):
    p = params()
    rng = random.Random(p["seed"] + 1)
    plain = [(rng.getrandbits(64), rng.choice([1, 2])) for _ in range(p["blocks"])]
    # a transmitter whose state the receiver does not know: it synchronises within 58 bits
    tx = SerialScrambler(state_ones=False)
    for _ in range(3):
        tx.block(rng.getrandbits(64))
    line = [(tx.block(d), h) for d, h in plain]
    got = await drive(dut, line, rng, p["en_probability"])
    assert got[1:] == plain[1:], next(f"block {k}" for k in range(1, len(got)) if got[k] != plain[k])
    assert got[0][1] == plain[0][1]


# --- pytest ----------------------------------------------------------------------------------
@pytest.mark.cocotb
@pytest.mark.parametrize("which", ["scrambler", "descrambler"])
def test_scrambling(which, build_dir):
    from mcf.hw.eth.scrambler import Descrambler, Scrambler
    from mcf.sim.runner import run_cocotb
    dut = Scrambler() if which == "scrambler" else Descrambler()
    run_cocotb(dut, __name__, build_dir, testcase=f"run_{which}", params=PARAMS)


def test_unrolled_matches_serial():
    """The elaboration-time XOR sets are the serial recurrence (no simulator needed)."""
    from mcf.hw.eth.scrambler import unrolled
    rng = random.Random(3)
    outs, nxt = unrolled(64, True)
    ref = SerialScrambler()
    state = [1] * 58
    for _ in range(5):
        word = rng.getrandbits(64)
        want = ref.block(word)
        bits = [(word >> i) & 1 for i in range(64)]
        got = sum((sum(bits[i] for i in ins) + sum(state[s] for s in sts)) % 2 << k
                  for k, (ins, sts) in enumerate(outs))
        assert got == want
        state = [(sum(bits[i] for i in ins) + sum(state[s] for s in sts)) % 2 for ins, sts in nxt]
        assert state == ref.history
