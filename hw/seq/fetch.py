"""Instruction fetch: DMA read bursts from PROG_BASE into a small prefetch FIFO.

On ``start`` the unit reads the program's ``count`` instructions (``INSTR_BYTES`` each) from
``base`` with INCR bursts (never across 4 KiB, at most 256 beats), never more than the FIFO
has room for (space is reserved when a burst is issued, so R data is always taken).  Words
leave on ``o`` in order with their index (``pc``).  ``stop`` (END dispatched, or the node
halted) issues no further burst; bursts in flight still land.  ``busy`` while a burst is in
flight.  A new program needs a reset of this unit (the sequencer resets it at start).
"""
from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axi.full import BOUNDARY_BYTES, BURST_INCR, MAX_BURST_BEATS, AXI4Signature
from mcf.hw.dma.common import AXCACHE
from mcf.spec.isa import INSTR_BITS, INSTR_BYTES
from mcf.spec.regmap import DMA_ADDR_BITS, PC_BITS

#: An instruction word with its index in the program.
FetchedLayout = data.StructLayout({"word": INSTR_BITS, "pc": PC_BITS})


class Fetch(wiring.Component):
    """Ports: ``m_axi`` (AXI4 read channels), ``start`` + ``base`` + ``count``, ``stop``,
    ``o`` (instruction words), ``busy``, ``pc`` (index of the next instruction to request)."""

    def __init__(self, data_width: int = 128, addr_width: int = 40, depth: int = 8):
        if data_width > INSTR_BITS or INSTR_BITS % data_width:
            raise ValueError(f"fetch: data_width={data_width} must divide {INSTR_BITS}")
        if depth < 2 or depth & (depth - 1):
            raise ValueError(f"fetch: depth={depth} must be a power of two >= 2")
        self.data_width, self.addr_width, self.depth = data_width, addr_width, depth
        self.beats = INSTR_BITS // data_width
        super().__init__({
            "m_axi": Out(AXI4Signature(addr_width, data_width, 1, write=False)),
            "start": In(1),
            "base": In(DMA_ADDR_BITS),
            "count": In(PC_BITS),
            "stop": In(1),
            "o": Out(stream.Signature(FetchedLayout)),
            "busy": Out(1),
            "pc": Out(PC_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        axi, depth, B = self.m_axi, self.depth, self.beats
        bus_log2 = (self.data_width // 8).bit_length() - 1
        instr_log2 = INSTR_BYTES.bit_length() - 1
        m.submodules.words = words = fifo.SyncFIFOBuffered(width=FetchedLayout.size, depth=depth)

        active = Signal()
        addr = Signal(self.addr_width)
        nxt = Signal(PC_BITS)            # instructions requested
        count = Signal(PC_BITS)
        reserved = Signal(range(depth + 1))   # requested, not yet in the FIFO
        pending = Signal()               # AR valid
        m.d.comb += self.pc.eq(nxt)

        # --- burst sizing: min(free space, rest of the program, rest of the 4 KiB page, 256 beats)
        free = Signal(range(depth + 1))
        m.d.comb += free.eq(depth - words.level - reserved)
        left = Signal(PC_BITS)
        m.d.comb += left.eq(count - nxt)
        page = Signal(range(BOUNDARY_BYTES // INSTR_BYTES + 1))
        m.d.comb += page.eq((BOUNDARY_BYTES - addr[:12]) >> instr_log2)
        cap = min(depth, MAX_BURST_BEATS // B)
        k = Signal(range(cap + 1))
        k1 = Mux(free < left, free, left)
        k2 = Mux(page < k1, page, k1)
        m.d.comb += k.eq(Mux(k2 < cap, k2, cap))
        # Wait for half the FIFO (or all that remains) so bursts are not one instruction long.
        want = Signal(range(depth + 1))
        half = max(1, depth // 2)
        m.d.comb += want.eq(Mux(left < half, left, half))
        want2 = Mux(page < want, page, want)

        issue = Signal()
        m.d.comb += issue.eq(active & ~self.start & ~self.stop & ~pending & (k != 0) & (k >= want2))
        with m.If(self.start):
            m.d.sync += [active.eq(1), addr.eq(self.base), nxt.eq(0), count.eq(self.count)]
        with m.Elif(issue):
            m.d.sync += [pending.eq(1), axi.araddr.eq(addr), axi.arlen.eq(k * B - 1),
                         addr.eq(addr + (k << instr_log2)), nxt.eq(nxt + k)]
        ar_fire = axi.arvalid & axi.arready
        with m.If(ar_fire):
            m.d.sync += pending.eq(0)
        m.d.comb += [axi.arvalid.eq(pending), axi.arsize.eq(bus_log2), axi.arburst.eq(BURST_INCR),
                     axi.arcache.eq(AXCACHE), axi.arid.eq(0)]

        # --- R beats -> words ------------------------------------------------------------------
        beat = Signal(range(B))
        shift = Signal(INSTR_BITS)
        pc = Signal(PC_BITS)
        r_fire = axi.rvalid & axi.rready
        m.d.comb += axi.rready.eq(1)         # room was reserved
        full_word = Signal(INSTR_BITS)
        if B == 1:
            m.d.comb += full_word.eq(axi.rdata)
        else:
            m.d.comb += full_word.eq(Cat(shift[self.data_width:], axi.rdata))
        push = Signal()
        out = Signal(FetchedLayout)
        m.d.comb += [out.word.eq(full_word), out.pc.eq(pc), words.w_data.eq(out), words.w_en.eq(push)]
        with m.If(r_fire):
            m.d.sync += shift.eq(full_word)
            if B > 1:
                m.d.sync += beat.eq(beat + 1)
            with m.If(beat == B - 1):
                m.d.comb += push.eq(1)
                m.d.sync += [beat.eq(0), pc.eq(pc + 1)]
        # reserved: + k at issue, - 1 per word pushed
        issued = Signal(range(cap + 1))
        with m.If(issue):
            m.d.comb += issued.eq(k)
        m.d.sync += reserved.eq(reserved + issued - push)

        m.d.comb += [self.o.valid.eq(words.r_rdy), self.o.payload.eq(words.r_data), words.r_en.eq(self.o.ready),
                     self.busy.eq(pending | (reserved != 0))]
        return m
