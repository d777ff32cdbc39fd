"""``PrefetchFIFO``: a FIFO whose reader's ready reaches only its output registers
(``BlockFIFO``: ``SyncFIFOBuffered`` in block RAM, its level and chosen bits from registers).

Amaranth's ``SyncFIFOBuffered`` reads its memory and counts its level on the reader's
``r_en``: a ready that comes from far away (another unit, another part of the node) then runs
on through the FIFO's read logic into its level counter's carry chain in the same cycle (issue
14's 250 MHz budget, docs/timing.md).  Here the memory's read, pointers and level move on
registered state alone (a word leaves the memory whenever it has one and the second output
register is free); the reader's ready drives only the two output registers' enables and valid
bits, one LUT deep.  Reads are as in ``SyncFIFOBuffered``: a word written in cycle t is on
``o`` in t + 2 at the earliest, one word a cycle.

``sync_read=True`` (deep FIFOs, e.g. the read streams' 512 x 128 bits: issue 14's LUTs): the memory's
read port is synchronous, addressed with the next cycle's read pointer (``consume`` + ``move``, from
registers) and transparent for the write port, so its data in every cycle is the combinational
read's, cycle for cycle; Yosys can then map the memory to block RAM instead of LUT RAM.
"""
from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out


def _ring_next(p, depth: int):
    """The pointer after ``p`` in a ring of ``depth`` words (a compare only when depth is not a power
    of two); the pointers of every FIFO here."""
    return p + 1 if depth & (depth - 1) == 0 else Mux(p == depth - 1, 0, p + 1)


class PrefetchFIFO(wiring.Component):
    """``w_en`` / ``w_data`` in, ``o`` (a stream) out, the memory in front of two output
    registers ``e0`` (the head, ``o.payload``) and ``e1``.

    ``exact=False``: ``depth`` words of memory and no ``w_rdy``: the writer keeps count of the
    memory's words (``moved`` strobes when one leaves it for the output registers); holds up to
    depth + 2 words.  ``exact=True`` (depth >= 3): a drop-in for ``SyncFIFOBuffered(depth)``:
    depth - 2 words of memory, ``w_rdy`` (from registers) low exactly when the FIFO holds
    ``depth`` words; valid, data and ``w_rdy`` the same as ``SyncFIFOBuffered``'s in every cycle.
    ``holds``: a word in the FIFO; ``level``: the words it holds (as ``SyncFIFOBuffered``'s,
    exact); ``r_rdy`` / ``r_data`` / ``r_en``: ``o``'s valid / payload / ready.  ``sync_read``: the
    memory read through a synchronous port (block RAM; the same behaviour, see the module's note)."""

    def __init__(self, width: int, depth: int, exact: bool = False, sync_read: bool = False):
        if depth < (3 if exact else 1):
            raise ValueError(f"depth={depth}: must be >= {3 if exact else 1}")
        self.width, self.depth, self.exact, self.sync_read = width, depth, exact, sync_read
        self.mem_depth = depth - 2 if exact else depth
        super().__init__({"w_en": In(1), "w_data": In(width), "o": Out(stream.Signature(width)),
                          "moved": Out(1), "holds": Out(1), "w_rdy": Out(1),
                          "level": Out(range(self.mem_depth + 3))})

    # ``SyncFIFOBuffered``'s names for the read side
    @property
    def r_rdy(self):
        return self.o.valid

    @property
    def r_data(self):
        return self.o.payload

    @property
    def r_en(self):
        return self.o.ready

    def elaborate(self, platform):
        m = Module()
        D = self.mem_depth
        m.submodules.mem = mem = Memory(shape=self.width, depth=D, init=[])
        wp = mem.write_port()
        produce, consume = Signal(range(D), name="produce"), Signal(range(D), name="consume")
        level = Signal(range(D + 1))            # words in the memory
        v0, v1 = Signal(), Signal()             # e0 / e1 hold a word (v1 implies v0)
        e0, e1 = Signal(self.width), Signal(self.width)
        move, ready, w = Signal(), self.o.ready, Signal()
        # exact: full when the memory is and e1 holds a word (then e0 does too); with e1 free a
        # word leaves the memory this cycle, so a write fits
        m.d.comb += [self.w_rdy.eq(~((level == D) & v1) if self.exact else 1), w.eq(self.w_en & self.w_rdy),
                     wp.addr.eq(produce), wp.data.eq(self.w_data), wp.en.eq(w),
                     move.eq((level != 0) & ~v1), self.moved.eq(move),
                     self.o.valid.eq(v0), self.o.payload.eq(e0), self.holds.eq((level != 0) | v0),
                     self.level.eq(level + v0 + v1)]

        with m.If(w):
            m.d.sync += produce.eq(_ring_next(produce, D))
        with m.If(move):
            m.d.sync += consume.eq(_ring_next(consume, D))
        if self.sync_read:
            # read at the edge into cycle t what the comb read sees in t: the word at t's consume
            # (this cycle's, moved on), with the write of t - 1 in it (transparent)
            rp = mem.read_port(transparent_for=(wp,))
            m.d.comb += rp.addr.eq(Mux(move, _ring_next(consume, D), consume))
        else:
            rp = mem.read_port(domain="comb")
            m.d.comb += rp.addr.eq(consume)
        m.d.sync += level.eq(level + w - move)
        # the head: e1 if it holds a word, else the memory's (don't-care when nothing moves and
        # e0 stays or falls empty); enabled when e0 is empty or taken
        with m.If(~v0 | ready):
            m.d.sync += e0.eq(Mux(v1, e1, rp.data))
        with m.If(move & ~ready):
            m.d.sync += e1.eq(rp.data)          # the word behind a head that stays
        m.d.sync += [v0.eq(v1 | move | (v0 & ~ready)), v1.eq(~ready & (v1 | (v0 & move)))]
        return m


class BlockFIFO(wiring.Component):
    """Amaranth's ``SyncFIFOBuffered(width, depth)``, cycle for cycle (the same ``w_rdy``,
    ``r_rdy``, ``r_data`` and ``level`` in every cycle), for a deep FIFO in block RAM whose
    reader's and writer's strobes arrive late (issue 14):

    * the memory's word is on ``r_data`` straight from the block RAM's read, which comes late in
      the cycle (``mcf.sw.timing.BRAM_START_LEVELS``).  The word's top ``fast`` bits (a packet's
      TLAST, say) are also kept in a copy in LUT RAM, read with the block RAM's read into a
      register: on ``r_data`` they come from a flip-flop, for a reader that decides on them;
    * the memory's level moves to ``level + 1`` or ``level - 1`` held in registers beside it (a
      multiplexer on the strobes), not through an adder behind them.

    ``depth - 1`` words of memory, the last word in the read's output (as ``SyncFIFOBuffered``)."""

    def __init__(self, width: int, depth: int, fast: int = 0):
        if depth < 2:
            raise ValueError(f"depth={depth}: must be >= 2")
        if not 0 <= fast <= width:
            raise ValueError(f"fast={fast}: must be in 0 .. width={width}")
        self.width, self.depth, self.fast = width, depth, fast
        super().__init__({"w_en": In(1), "w_data": In(width), "w_rdy": Out(1),
                          "r_en": In(1), "r_data": Out(width), "r_rdy": Out(1),
                          "level": Out(range(depth + 1))})

    def elaborate(self, platform):
        m = Module()
        D, W, F = self.depth - 1, self.width, self.fast
        level = Signal(range(D + 1), name="inner_level")
        up, down = Signal.like(level, name="inner_level_p1", init=1), Signal.like(level, name="inner_level_m1")
        w, r = Signal(), Signal()
        m.d.comb += [self.w_rdy.eq(level != D), w.eq(self.w_en & self.w_rdy),
                     r.eq((level != 0) & (~self.r_rdy | self.r_en)),
                     self.level.eq(level + self.r_rdy)]
        produce, consume = Signal(range(D), name="produce"), Signal(range(D), name="consume")

        with m.If(w):
            m.d.sync += produce.eq(_ring_next(produce, D))
        with m.If(r):
            m.d.sync += consume.eq(_ring_next(consume, D))
        with m.If(w & ~r):
            m.d.sync += [level.eq(up), up.eq(up + 1), down.eq(level)]
        with m.If(r & ~w):
            m.d.sync += [level.eq(down), up.eq(level), down.eq(down - 1)]
        with m.If(r):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        slow = []
        if W - F:
            m.submodules.storage = mem = Memory(shape=W - F, depth=D, init=[])
            wp, rp = mem.write_port(), mem.read_port(domain="sync")
            m.d.comb += [wp.addr.eq(produce), wp.data.eq(self.w_data[:W - F]), wp.en.eq(w),
                         rp.addr.eq(consume), rp.en.eq(r)]
            slow = [rp.data]
        fast = []
        if F:
            m.submodules.fast = fmem = Memory(shape=F, depth=D, init=[])
            fwp, frp = fmem.write_port(), fmem.read_port(domain="comb")
            head = Signal(F, name="fast_head")
            m.d.comb += [fwp.addr.eq(produce), fwp.data.eq(self.w_data[W - F:]), fwp.en.eq(w),
                         frp.addr.eq(consume)]
            with m.If(r):
                m.d.sync += head.eq(frp.data)
            fast = [head]
        m.d.comb += self.r_data.eq(Cat(*slow, *fast))
        return m


class TwoRegisterFIFO(wiring.Component):
    """``SyncFIFOBuffered(width, depth=2)``, cycle for cycle (the same ports: ``w_en``, ``w_data``,
    ``w_rdy``, ``r_rdy``, ``r_data``, ``r_en``, ``level``), as two registers with clock enables and
    no memory: the word written goes into ``mem`` (SyncFIFOBuffered's one-entry memory), from there
    into the output register ``r_data``; each register loads from one source only, so a wide queue
    costs flip-flops and no LUT a bit (LUT RAM: ~0.57 LUT a bit).  (Amaranth's depth 2 writes its
    one-entry memory's address as ``[-1:0]`` in Verilog.)"""

    def __init__(self, width: int):
        self.width, self.depth = width, 2
        super().__init__({"w_en": In(1), "w_data": In(width), "w_rdy": Out(1), "r_rdy": Out(1),
                          "r_data": Out(width), "r_en": In(1), "level": Out(range(3))})

    def elaborate(self, platform):
        m = Module()
        mem, held = Signal(self.width), Signal()            # the inner word and whether it is there
        write, move = Signal(), Signal()
        m.d.comb += [self.w_rdy.eq(~held), write.eq(self.w_en & ~held),
                     move.eq(held & (~self.r_rdy | self.r_en)), self.level.eq(held + self.r_rdy)]
        with m.If(write):
            m.d.sync += [mem.eq(self.w_data), held.eq(1)]
        with m.Elif(move):
            m.d.sync += held.eq(0)
        with m.If(move):
            m.d.sync += [self.r_data.eq(mem), self.r_rdy.eq(1)]
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        return m


class ReadyFIFO(wiring.Component):
    """``SyncFIFOBuffered(width, depth)`` (depth >= 2), the same ports and the same behaviour cycle for
    cycle, with ``w_rdy`` a register of its own (``SyncFIFOBuffered``'s is a compare of its memory's level:
    a LUT between the level and a writer in another part, whose own logic behind its ready may already
    fill the cycle -- the matrix unit's ``o.tready``).  Its next value: full (the memory's ``depth - 1``
    words) after a write with no read of the memory at depth - 2, or when full and not read."""

    def __init__(self, width: int, depth: int):
        if depth < 2:
            raise ValueError(f"depth={depth}: must be >= 2")
        self.width, self.depth = width, depth
        super().__init__({"w_en": In(1), "w_data": In(width), "w_rdy": Out(1, init=1),
                          "r_en": In(1), "r_data": Out(width), "r_rdy": Out(1),
                          "level": Out(range(depth + 1))})

    def elaborate(self, platform):
        m = Module()
        D = self.depth - 1                      # the memory's words (the read port's register holds one more)
        mem = m.submodules.storage = Memory(shape=self.width, depth=D, init=[])
        wp, rp = mem.write_port(), mem.read_port(domain="sync")
        produce, consume = Signal(range(D), name="produce"), Signal(range(D), name="consume")
        inner = Signal(range(D + 1), name="inner_level")
        do_write = self.w_rdy & self.w_en
        do_inner_read = Signal()
        m.d.comb += [do_inner_read.eq((inner != 0) & (~self.r_rdy | self.r_en)),
                     wp.addr.eq(produce), wp.data.eq(self.w_data), wp.en.eq(do_write),
                     rp.addr.eq(consume), rp.en.eq(do_inner_read), self.r_data.eq(rp.data),
                     self.level.eq(inner + self.r_rdy)]

        with m.If(do_write):
            m.d.sync += produce.eq(_ring_next(produce, D))
        with m.If(do_inner_read):
            m.d.sync += consume.eq(_ring_next(consume, D))
        with m.If(do_write & ~do_inner_read):
            m.d.sync += inner.eq(inner + 1)
        with m.If(do_inner_read & ~do_write):
            m.d.sync += inner.eq(inner - 1)
        with m.If(do_inner_read):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        # w_rdy = inner != D after this cycle's moves
        m.d.sync += self.w_rdy.eq(~(Mux(self.w_rdy, do_write & (inner == D - 1), 1) & ~do_inner_read))
        return m


def buffered_fifo(width: int, depth: int):
    """``PrefetchFIFO(exact=True)`` where the depth allows (>= 3), else ``SyncFIFOBuffered``: the
    same ports (``w_en``, ``w_data``, ``w_rdy``, ``r_rdy``, ``r_data``, ``r_en``, ``level``) and
    the same behaviour, cycle for cycle."""
    if depth >= 3:
        return PrefetchFIFO(width, depth, exact=True)
    from amaranth.lib.fifo import SyncFIFOBuffered
    return SyncFIFOBuffered(width=width, depth=depth)


def nonempty(f):
    """Whether a ``buffered_fifo`` holds a word: ``holds`` (registers, an OR) or ``level != 0``."""
    return f.holds if isinstance(f, PrefetchFIFO) else f.level != 0
