"""The scratchpad (SPAD): the node's on-chip activation memory (spec/isa.py).

``beats`` beats of ``lanes`` (the ISA's VL) 32-bit words plus one signed 8-bit exponent per
beat, as two ``lib.memory`` arrays at the same addresses (words with a write enable per
32-bit word, so a GEMM tile narrower than VL writes only its words; exponents with their own
enable, so a BFP LOAD can set a row's exponent after its words).  Large arrays map to block
RAM or UltraRAM: one write port, one read port with one cycle of latency (a simple dual-port
RAM).  The execute unit runs one instruction at a time, so its movers take these two ports in
turn.

``banks`` > 1: the beats are interleaved over ``banks`` memories (beat a in bank a mod banks, at
row a / banks), so one read returns ``banks`` consecutive beats a .. a + banks - 1 at once on
``rd.wide`` (whatever a's alignment: each bank reads its row, the beats are rotated back into
order), while ``rd.data`` / ``rd.exp`` stay beat a's.  The GEMM mover fills the MAC array's
``mac_lanes``-wide token buffer from it at one buffer word per cycle (``mac_lanes / VL`` banks);
the other movers use beat a only.  Writes are one beat per cycle (into one bank), or with
``wr.wide_en`` ``banks`` beats at once (``wr.addr`` a multiple of ``banks``: beat addr + i from
``wr.wide[i]`` into bank i, the same ``lanes`` and exponent for each; a GEMM_QK writes its scores
so).  The banks together hold what one memory would (same block RAM / UltraRAM count for these
depths).  ``primitive`` (round 28): the wide read's rotation (4 banks: one 4:1 choice a bit) as LUT6
instances (``mcf.hw.lut.mux4``; the node's build).

``placed`` (round 31, the execute unit's build, ``banks`` > 1): ``wr.wide`` is every write's data, a narrow
write's beat in (at least) the slice of its bank, ``wr.data`` not read: the writer's choice of its data places it
(``unit.spad_wide_data``: one 4:1 choice a bit), not a 2:1 choice of ``wide`` and ``data`` a bank in front of the
memories (round 30b: the glue's 2:1 of the wide writers, its choice of the narrow data and this one, ~2.5 K LUT).
"""
from __future__ import annotations

from amaranth import Array, Cat, Module, Mux, Signal, signed
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from mcf.hw.lut import mux4
from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec.fixed import EXP_BITS

WORD_BITS = 32


class SpadReadSignature(wiring.Signature):
    """Reader's view: ``en`` + ``addr`` now, ``data`` + ``exp`` on the next cycle (held while
    ``en`` is low); with ``banks`` > 1 also ``wide``, beats addr .. addr + banks - 1."""

    def __init__(self, beats: int, lanes: int, banks: int = 1):
        super().__init__({"en": Out(1), "addr": Out(range(beats)),
                          "data": In(lanes * WORD_BITS), "exp": In(signed(EXP_BITS)),
                          **({"wide": In(banks * lanes * WORD_BITS)} if banks > 1 else {})})


class SpadWriteSignature(wiring.Signature):
    """Writer's view: word ``k`` of beat ``addr`` is written when ``lanes[k]``; the beat's
    exponent when ``exp_en``.  With ``banks`` > 1 also ``wide_en`` + ``wide``: beats addr ..
    addr + banks - 1 (addr a multiple of banks) from ``wide`` instead of beat addr from ``data``,
    but not the beats of the banks set in ``wide_skip`` (0: all of them).

    ``alt`` (round 31, the movers' bus, ``banks`` > 1): also ``wide_alt`` + ``wide_alt_en``, a second wide word that
    is the wide data instead of ``wide`` while ``wide_alt_en`` (GEMM's two output pieces: the 2:1 choice of them
    goes into the execute unit's choice of the SPAD's data, ``unit.spad_wide_data``)."""

    def __init__(self, beats: int, lanes: int, banks: int = 1, alt: bool = False):
        super().__init__({"lanes": Out(lanes), "exp_en": Out(1), "addr": Out(range(beats)),
                          "data": Out(lanes * WORD_BITS), "exp": Out(signed(EXP_BITS)),
                          **({"wide_en": Out(1), "wide": Out(banks * lanes * WORD_BITS), "wide_skip": Out(banks)}
                             if banks > 1 else {}),
                          **({"wide_alt": Out(banks * lanes * WORD_BITS), "wide_alt_en": Out(1)}
                             if banks > 1 and alt else {})})


class Scratchpad(wiring.Component):
    def __init__(self, beats: int = 2048, lanes: int = 8, banks: int = 1, primitive: bool = False,
                 placed: bool = False):
        if beats < 2 or lanes < 1:
            raise ValueError(f"beats={beats}, lanes={lanes}: need beats >= 2 and lanes >= 1")
        if banks < 1 or banks & (banks - 1) or beats % banks or beats // banks < 2:
            raise ValueError(f"banks={banks}: a power of two dividing beats={beats} (at least 2 beats a bank)")
        self.beats, self.lanes, self.banks, self.primitive = beats, lanes, banks, bool(primitive)
        self.placed = bool(placed) and banks > 1
        self.addr_bits = ceil_log2(beats)
        super().__init__({
            "rd": In(SpadReadSignature(beats, lanes, banks)),
            "wr": In(SpadWriteSignature(beats, lanes, banks)),
        })

    def elaborate(self, platform):
        m = Module()
        B, lb = self.banks, ceil_log2(self.banks)
        depth = self.beats // B
        rd_words, rd_exps = [], []
        sel = Signal(max(lb, 1))                # addr mod banks of the read in flight
        with m.If(self.rd.en):
            m.d.sync += sel.eq(self.rd.addr[:lb] if lb else 0)
        wbank = self.wr.addr[:lb] if lb else 0
        for i in range(B):
            words = memory.Memory(shape=self.lanes * WORD_BITS, depth=depth, init=[])
            exps = memory.Memory(shape=signed(EXP_BITS), depth=depth, init=[])
            m.submodules[f"words{i}" if B > 1 else "words"] = words
            m.submodules[f"exps{i}" if B > 1 else "exps"] = exps
            ww = words.write_port(granularity=WORD_BITS)
            we = exps.write_port()
            rw, re = words.read_port(), exps.read_port()
            # beat a + x of bank i: x = (i - a) mod B, at row (a + x) / B = (a + B - 1 - i) / B -- one add of a
            # constant, no compare and choice after it (round 27: the SPAD's 3.2 levels behind ``rd.addr``)
            row = ((self.rd.addr + (B - 1 - i)) >> lb)[:ceil_log2(depth)] if i < B - 1 else self.rd.addr >> lb
            hit = Mux(self.wr.wide_en, ~self.wr.wide_skip[i], wbank == i) if B > 1 else 1
            wide = self.wr.wide[i * self.lanes * WORD_BITS:(i + 1) * self.lanes * WORD_BITS] if B > 1 else None
            wdata = wide if self.placed else Mux(self.wr.wide_en, wide, self.wr.data) if B > 1 else self.wr.data
            m.d.comb += [
                ww.addr.eq(self.wr.addr >> lb), ww.data.eq(wdata), ww.en.eq(Mux(hit, self.wr.lanes, 0)),
                we.addr.eq(self.wr.addr >> lb), we.data.eq(self.wr.exp), we.en.eq(hit & self.wr.exp_en),
                rw.addr.eq(row), rw.en.eq(self.rd.en), re.addr.eq(row), re.en.eq(self.rd.en),
            ]
            rd_words.append(rw.data)
            rd_exps.append(re.data)
        if B == 1:
            m.d.comb += [self.rd.data.eq(rd_words[0]), self.rd.exp.eq(rd_exps[0])]
        else:
            words_of, exps_of = Array(rd_words), Array(rd_exps)
            if self.primitive and B == 4:
                beats = [mux4(m, sel, [rd_words[(x + d) % B] for d in range(B)], primitive=True, name=f"rot{x}")
                         for x in range(B)]
            else:
                beats = [words_of[(sel + x)[:lb]] for x in range(B)]    # beat a + x is in bank (a + x) mod B
            m.d.comb += [self.rd.data.eq(beats[0]), self.rd.exp.eq(exps_of[sel]), self.rd.wide.eq(Cat(*beats))]
        return m


@block("exec_spad", "execute unit scratchpad: beats x (lanes 32-bit words + exponent), 1R1W, banks interleaved",
       variants=({"banks": 4},), beats=2048, lanes=8, banks=1,
       ranges={"beats": Range(2, 1 << 20), "lanes": Range(1, 256), "banks": Range(1, 64, pow2=True)})
def _spad(beats, lanes, banks):
    return Scratchpad(beats, lanes, banks)
