"""Clock-domain crossing between the node clock and the 10GBASE-R clocks.

``AsyncFrameFifo`` — a frame FIFO across two clocks whose read side only ever sees whole,
good frames (store and forward):

* the write side writes a frame's words at a tentative pointer; at the frame's last word it
  *commits* the frame (a frame counter, Gray-coded, crosses to the read side, which reads
  only frames it has seen committed) or, when the frame is marked bad (``w_bad``), rolls the
  pointer back: the frame vanishes;
* ``mode="wait"`` (transmit): ``w.tready`` falls while the FIFO is full; a frame longer than
  ``max_bytes`` is dropped (``too_long``): it could never fit, or it is too long to send;
* ``mode="drop"`` (receive, which cannot be paused): ``w.tready`` is always 1; a frame that
  meets a full FIFO is dropped whole (``overflow``), as is one longer than ``max_bytes``.

A dropped frame raises one event: none if it was marked bad anyway (its producer counted
it), else ``overflow`` or ``too_long``.

A word stores 64 data bits, the byte count and the last flag.  The read side knows at once
whether the word it asks for ends a frame (the last flags sit in a small memory read
without latency), so it reads one word per cycle and never past the committed frames.
Both sides must be reset together.

``EventSync`` — event strobes (at most one per cause per cycle) into another clock domain,
none lost: each cause has a small Gray counter on the source side; the destination pulses
once per cycle until it has caught up.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf.hw.axis import AXIStreamSignature
from mcf.hw.registry import block
from mcf.spec.params import Choice, Range

W = 64
LANES = W // 8


def gray(value):
    return value ^ (value >> 1)


def ungray(m: Module, g, name: str):
    """Binary from Gray code (a chain of XORs from the top bit)."""
    b = Signal(len(g), name=name)
    bits = [None] * len(g)
    bits[-1] = g[-1]
    for i in reversed(range(len(g) - 1)):
        bits[i] = bits[i + 1] ^ g[i]
    m.d.comb += b.eq(Cat(*bits))
    return b


def _log2(value: int, what: str) -> int:
    if value < 2 or value & (value - 1):
        raise ValueError(f"{what}={value}: must be a power of two >= 2")
    return value.bit_length() - 1


WordLayout = data.StructLayout({"data": W, "nbytes": range(LANES + 1)})


class AsyncFrameFifo(wiring.Component):
    def __init__(self, depth: int, max_bytes: int | None = None, mode: str = "wait",
                 w_domain: str = "sync", r_domain: str = "sync"):
        self.abits = _log2(depth, "depth")
        self.depth = depth
        self.max_bytes = LANES * depth if max_bytes is None else max_bytes
        self.max_words = -(-self.max_bytes // LANES)
        if not 1 <= self.max_words <= depth:
            raise ValueError(f"max_bytes={max_bytes}: 1..{LANES * depth} (depth {depth} words)")
        if mode not in ("wait", "drop"):
            raise ValueError(f"mode={mode!r}: 'wait' or 'drop'")
        self.mode, self.w_domain, self.r_domain = mode, w_domain, r_domain
        super().__init__({"w": In(AXIStreamSignature(W)), "w_bad": In(1),
                          "r": Out(AXIStreamSignature(W)),
                          "overflow": Out(1), "too_long": Out(1), "dropped_bad": Out(1)})

    def elaborate(self, platform):
        m = Module()
        a = self.abits
        wd, rd = m.d[self.w_domain], m.d[self.r_domain]
        m.submodules.mem = mem = Memory(shape=WordLayout, depth=self.depth, init=[])
        m.submodules.lasts = lasts = Memory(shape=1, depth=self.depth, init=[])
        wp = mem.write_port(domain=self.w_domain)
        lwp = lasts.write_port(domain=self.w_domain)
        rp = mem.read_port(domain=self.r_domain, transparent_for=())
        lrp = lasts.read_port(domain="comb")

        # --- write side -------------------------------------------------------------------------
        wr_ptr = Signal(a + 1)          # next word (tentative)
        start = Signal(a + 1)           # first word of the frame being written
        w_frames = Signal(a + 1)        # frames committed (binary)
        w_frames_gray = Signal(a + 1)
        rd_ptr_gray = Signal(a + 1)     # read side's pointer, Gray-coded (read domain)
        rd_ptr_gray_w = Signal(a + 1)
        m.submodules.rd_sync = FFSynchronizer(rd_ptr_gray, rd_ptr_gray_w, o_domain=self.w_domain)
        rd_ptr_w = ungray(m, rd_ptr_gray_w, "rd_ptr_w")
        full = Signal()
        m.d.comb += full.eq((wr_ptr - rd_ptr_w)[:a + 1] == self.depth)
        length = Signal(range(self.max_words + 1))
        dropping = Signal()
        drop_overflow = Signal()        # the frame being dropped met a full FIFO
        w = self.w
        if self.mode == "wait":
            m.d.comb += w.tready.eq(~full | dropping | (length == self.max_words))
        else:
            m.d.comb += w.tready.eq(1)
        nbytes = Signal(range(LANES + 1))
        for k in range(LANES):
            with m.If(w.tkeep[k]):
                m.d.comb += nbytes.eq(k + 1)
        word = Signal(WordLayout)
        m.d.comb += [word.data.eq(w.tdata), word.nbytes.eq(nbytes),
                     wp.addr.eq(wr_ptr[:a]), wp.data.eq(word),
                     lwp.addr.eq(wr_ptr[:a]), lwp.data.eq(w.tlast)]
        wd += [self.overflow.eq(0), self.too_long.eq(0), self.dropped_bad.eq(0)]
        with m.If(w.tvalid & w.tready):
            with m.If(dropping):
                with m.If(w.tlast):
                    wd += [dropping.eq(0), length.eq(0),
                           self.overflow.eq(drop_overflow & ~self.w_bad),
                           self.too_long.eq(~drop_overflow & ~self.w_bad)]
            with m.Elif((length == self.max_words) | full):
                # cannot store this word: the whole frame goes
                wd += [wr_ptr.eq(start), length.eq(0)]
                with m.If(w.tlast):
                    wd += [self.overflow.eq((length != self.max_words) & ~self.w_bad),
                           self.too_long.eq((length == self.max_words) & ~self.w_bad)]
                with m.Else():
                    wd += [dropping.eq(1), drop_overflow.eq(length != self.max_words)]
            with m.Else():
                m.d.comb += [wp.en.eq(1), lwp.en.eq(1)]
                with m.If(w.tlast):
                    wd += length.eq(0)
                    with m.If(self.w_bad):
                        wd += [wr_ptr.eq(start), self.dropped_bad.eq(1)]
                    with m.Elif(length * LANES + nbytes > self.max_bytes):
                        wd += [wr_ptr.eq(start), self.too_long.eq(1)]
                    with m.Else():
                        wd += [wr_ptr.eq(wr_ptr + 1), start.eq(wr_ptr + 1), w_frames.eq(w_frames + 1),
                               w_frames_gray.eq(gray(w_frames + 1))]
                with m.Else():
                    wd += [wr_ptr.eq(wr_ptr + 1), length.eq(length + 1)]

        # --- read side --------------------------------------------------------------------------
        rd_ptr = Signal(a + 1)
        r_frames = Signal(a + 1)        # frames whose last word has been fetched
        frames_gray_r = Signal(a + 1)
        m.submodules.frames_sync = FFSynchronizer(w_frames_gray, frames_gray_r, o_domain=self.r_domain)
        frames_r = ungray(m, frames_gray_r, "frames_r")
        out_valid = Signal()
        fetch = Signal()
        m.d.comb += [
            fetch.eq((frames_r != r_frames) & (~out_valid | self.r.tready)),
            rp.addr.eq(rd_ptr[:a]), rp.en.eq(fetch), lrp.addr.eq(rd_ptr[:a]),
        ]
        with m.If(fetch):
            rd += [rd_ptr.eq(rd_ptr + 1), out_valid.eq(1), rd_ptr_gray.eq(gray(rd_ptr + 1))]
            with m.If(lrp.data):
                rd += r_frames.eq(r_frames + 1)
        with m.Elif(self.r.tready):
            rd += out_valid.eq(0)
        last_out = Signal()
        with m.If(fetch):
            rd += last_out.eq(lrp.data)
        out = Signal(WordLayout)
        m.d.comb += [
            out.eq(rp.data),
            self.r.tvalid.eq(out_valid), self.r.tdata.eq(out.data), self.r.tlast.eq(last_out),
            self.r.tkeep.eq((Const(1, LANES + 1) << out.nbytes) - 1),
        ]
        return m


class EventSync(wiring.Component):
    """``i`` (one strobe per cause, ``i_domain``) -> ``o`` (one pulse per event, ``o_domain``)."""

    def __init__(self, width: int, i_domain: str, o_domain: str, count_bits: int = 4):
        self.width, self.i_domain, self.o_domain, self.count_bits = width, i_domain, o_domain, count_bits
        super().__init__({"i": In(width), "o": Out(width)})

    def elaborate(self, platform):
        m = Module()
        n = self.count_bits
        for k in range(self.width):
            src = Signal(n, name=f"src{k}")
            src_gray = Signal(n, name=f"src_gray{k}")
            with m.If(self.i[k]):
                m.d[self.i_domain] += [src.eq(src + 1), src_gray.eq(gray(src + 1))]
            seen_gray = Signal(n, name=f"seen_gray{k}")
            m.submodules[f"sync{k}"] = FFSynchronizer(src_gray, seen_gray, o_domain=self.o_domain)
            seen = ungray(m, seen_gray, f"seen{k}")
            done = Signal(n, name=f"done{k}")
            with m.If(seen != done):
                m.d[self.o_domain] += done.eq(done + 1)
            pulse = Signal(name=f"pulse{k}")
            m.d.comb += pulse.eq(seen != done)
            m.d.comb += self.o[k].eq(pulse)
        return m


@block("eth_frame_fifo", "asynchronous store-and-forward frame FIFO (64-bit words)",
       variants=({"depth": 64, "mode": "drop"},), depth=2048, mode="wait",
       ranges={"depth": Range(2, 1 << 16, pow2=True), "mode": Choice(("wait", "drop"))})
def _fifo(depth, mode):
    return AsyncFrameFifo(depth, mode=mode, w_domain="sync", r_domain="sync")
