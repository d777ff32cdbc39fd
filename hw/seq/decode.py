"""Instruction decode: which queue an instruction goes to, and whether this node may run it.

The word is viewed with each opcode's layout from ``spec/isa.py`` (``mcf.hw.layouts``); an
instruction is *illegal* (fault ILLEGAL_INSTRUCTION) if its opcode is unknown, a reserved field
is not zero, an enumerated field holds no defined value, a semaphore it names on this node is
beyond the build's ``num_sems``, a DDR address field lies beyond the node's address space, or
(TX / RX) a count that must be positive is zero: CREDIT.count, RECV.length.  The execute
unit checks the operand ranges of EX instructions against its own build (SPAD size, tokens,
...) and faults ILLEGAL_INSTRUCTION itself.  Combinational.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.layouts import InstrHeaderLayout, InstrLayouts
from mcf.spec.isa import DDR_ALIGN, INSTR_BITS, LAYOUTS, NUM_SEMS, QUEUE_OF, Opcode, Queue

#: Fields of each opcode that name a semaphore of this node (CREDIT.sem and RECV.credit_sem
#: name the remote node's).
LOCAL_SEM_FIELDS = ("wait_sem", "sig_sem", "done_sem")
#: Fields holding DDR addresses / DDR_ALIGN.
DDR_FIELDS = ("ddr", "ids", "table", "blob", "seg")
#: Fields that must not be zero, by opcode (TX / RX; EX operands are the execute unit's).
NONZERO = {Opcode.CREDIT: ("count",), Opcode.RECV: ("length",)}


#: The opcodes in the order of ``Decoder.legal_codes``.
CODES = tuple(LAYOUTS)


#: A reserved field's zero check is split on the word's aligned slices of this many bits.
RES_PIECE = 32


class Decoder(wiring.Component):
    """``word`` in; ``queue`` (``spec.isa.Queue``), ``end``, ``sync`` and ``illegal`` out, and
    the ``header`` fields.  ``legal_codes`` (bit k: the word's fields pass opcode ``CODES[k]``'s
    checks, whatever its opcode) is the deep part: a pipelined user registers the checks
    themselves (``checks``, one bit each), ANDs them per opcode with ``legal_codes_of`` and
    selects with ``legal_of`` a cycle later (the sequencer, for the 250 MHz budget)."""

    def __init__(self, num_sems: int = NUM_SEMS, ddr_addr_bits: int = 40):
        self.num_sems, self.ddr_addr_bits = num_sems, ddr_addr_bits
        # the checks of every opcode, one bit each: ``groups[k]``, the bits of ``CODES[k]``'s
        self.groups, n = [], 0
        for code in CODES:
            k = len(self._checks(code, None))
            self.groups.append(list(range(n, n + k)))
            n += k
        super().__init__({
            "word": In(INSTR_BITS),
            "header": Out(InstrHeaderLayout),
            "queue": Out(2),
            "end": Out(1),
            "sync": Out(1),
            "illegal": Out(1),
            "checks": Out(max(n, 1)),
            "legal_codes": Out(len(CODES)),
        })

    def _checks(self, code, word) -> list:
        """Opcode ``code``'s checks of ``word`` (``None``: only how many)."""
        layout = LAYOUTS[code]
        view = InstrLayouts[code](word if word is not None else Const(0, INSTR_BITS))
        ddr_field_limit = self.ddr_addr_bits - (DDR_ALIGN.bit_length() - 1)
        checks = []
        off = 0                     # the field's first bit in the word
        for f in layout.fields:
            raw = Value.cast(getattr(view, f.name))
            if f.reserved:
                # (round 27: in pieces on the word's aligned RES_PIECE-bit slices, the same
                # pieces for every opcode: the reserved tails all end at the word's top, and their
                # zero checks, one per opcode, were mapped as one chain shared across opcodes,
                # ``seq.word`` -> ``pw_checks`` 8 to 9 levels; ANDed per opcode a cycle later)
                lo = off
                while lo < off + f.width:
                    hi = min((lo // RES_PIECE + 1) * RES_PIECE, off + f.width)
                    checks.append(raw[lo - off:hi - off] == 0)
                    lo = hi
            elif f.enum is not None and f.name != "op":
                checks.append(Cat(*(raw == int(v) for v in f.enum)).any())
            if f.name in LOCAL_SEM_FIELDS and self.num_sems < (1 << f.width):
                checks.append(raw < self.num_sems)
            if f.name in DDR_FIELDS and ddr_field_limit < f.width:
                checks.append(raw[ddr_field_limit:] == 0)
            if f.name in NONZERO.get(code, ()):
                checks.append(raw != 0)
            off += f.width
        return checks

    def legal_codes_of(self, checks) -> Value:
        """``legal_codes`` from ``checks`` (the decoder's own, or registered ones)."""
        return Cat(*(Cat(*(checks[i] for i in g)).all() if g else Const(1) for g in self.groups))

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.header.eq(self.word[:InstrHeaderLayout.size])
        op = self.header.op
        bits = [c for code in CODES for c in self._checks(code, self.word)]
        if bits:
            m.d.comb += self.checks.eq(Cat(*bits))
        m.d.comb += self.legal_codes.eq(self.legal_codes_of(self.checks))
        legal = legal_of(m, op, self.legal_codes)
        with m.Switch(op):
            for code in CODES:
                with m.Case(int(code)):
                    view = InstrLayouts[code](self.word)
                    if code == Opcode.SYNC:
                        m.d.comb += [self.queue.eq(Value.cast(view.on)), self.sync.eq(1)]
                    else:
                        m.d.comb += self.queue.eq(int(QUEUE_OF[code]))
                    if code == Opcode.END:
                        m.d.comb += self.end.eq(1)
        m.d.comb += self.illegal.eq(~legal)
        return m


def legal_of(m, op, legal_codes) -> Signal:
    """Whether a word with opcode ``op`` whose ``Decoder.legal_codes`` are ``legal_codes`` is
    legal (0 for an unknown opcode)."""
    legal = Signal()
    with m.Switch(op):
        for k, code in enumerate(CODES):
            with m.Case(int(code)):
                m.d.comb += legal.eq(legal_codes[k])
    return legal


__all__ = ["CODES", "Decoder", "Queue", "legal_of"]
