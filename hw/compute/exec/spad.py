"""The scratchpad (SPAD): the node's on-chip activation memory (spec/isa.py).

``beats`` beats of ``lanes`` (the ISA's VL) 32-bit words plus one signed 8-bit exponent per
beat, as two ``lib.memory`` arrays at the same addresses (words with a write enable per
32-bit word, so a GEMM tile narrower than VL writes only its words; exponents with their own
enable, so a BFP LOAD can set a row's exponent after its words).  Large arrays map to block
RAM or UltraRAM: one write port, one read port with one cycle of latency (a simple dual-port
RAM).  The execute unit runs one instruction at a time, so its movers take these two ports in
turn.
"""
from __future__ import annotations

from amaranth import Module, signed
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec.fixed import EXP_BITS

WORD_BITS = 32


class SpadReadSignature(wiring.Signature):
    """Reader's view: ``en`` + ``addr`` now, ``data`` + ``exp`` on the next cycle (held while
    ``en`` is low)."""

    def __init__(self, beats: int, lanes: int):
        super().__init__({"en": Out(1), "addr": Out(range(beats)),
                          "data": In(lanes * WORD_BITS), "exp": In(signed(EXP_BITS))})


class SpadWriteSignature(wiring.Signature):
    """Writer's view: word ``k`` of beat ``addr`` is written when ``lanes[k]``; the beat's
    exponent when ``exp_en``."""

    def __init__(self, beats: int, lanes: int):
        super().__init__({"lanes": Out(lanes), "exp_en": Out(1), "addr": Out(range(beats)),
                          "data": Out(lanes * WORD_BITS), "exp": Out(signed(EXP_BITS))})


class Scratchpad(wiring.Component):
    def __init__(self, beats: int = 2048, lanes: int = 8):
        if beats < 2 or lanes < 1:
            raise ValueError(f"beats={beats}, lanes={lanes}: need beats >= 2 and lanes >= 1")
        self.beats, self.lanes = beats, lanes
        self.addr_bits = ceil_log2(beats)
        super().__init__({
            "rd": In(SpadReadSignature(beats, lanes)),
            "wr": In(SpadWriteSignature(beats, lanes)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.words = words = memory.Memory(shape=self.lanes * WORD_BITS, depth=self.beats, init=[])
        m.submodules.exps = exps = memory.Memory(shape=signed(EXP_BITS), depth=self.beats, init=[])
        ww = words.write_port(granularity=WORD_BITS)
        we = exps.write_port()
        rw, re = words.read_port(), exps.read_port()
        m.d.comb += [
            ww.addr.eq(self.wr.addr), ww.data.eq(self.wr.data), ww.en.eq(self.wr.lanes),
            we.addr.eq(self.wr.addr), we.data.eq(self.wr.exp), we.en.eq(self.wr.exp_en),
            rw.addr.eq(self.rd.addr), rw.en.eq(self.rd.en), re.addr.eq(self.rd.addr), re.en.eq(self.rd.en),
            self.rd.data.eq(rw.data), self.rd.exp.eq(re.data),
        ]
        return m


@block("exec_spad", "execute unit scratchpad: beats x (lanes 32-bit words + exponent), 1R1W",
       beats=2048, lanes=8, ranges={"beats": Range(2, 1 << 20), "lanes": Range(1, 256)})
def _spad(beats, lanes):
    return Scratchpad(beats, lanes)
