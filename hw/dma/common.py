"""Pieces the DMA loader and writer share: burst splitting and descriptor arithmetic.

Addressing rules (the CSR enforces them before a descriptor reaches a DMA engine):
addresses are multiples of the bus width in bytes (DESC_UNALIGNED otherwise); lengths are any
number of bytes > 0 — the transfer covers ``ceil(length / bus_bytes)`` beats and only the last
beat is partial (TKEEP on the loader's stream, WSTRB on the writer's bursts).  Bursts are
INCR, at most 256 beats and never cross a 4 KiB boundary.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, ResetSignal, Signal
from amaranth.lib import cdc, fifo
from amaranth.lib.memory import Memory

from mcf.hw.axi.full import BOUNDARY_BYTES, MAX_BURST_BEATS

#: AxCACHE for DDR: normal, non-cacheable, bufferable (what Xilinx's DMA IPs emit).
AXCACHE = 0b0011


def _burst_cap(m: Module, addr, bus_log2: int, max_beats: int = MAX_BURST_BEATS) -> Signal:
    """min(``max_beats``, beats left before the 4 KiB boundary) at ``addr``."""
    page_beats = BOUNDARY_BYTES >> bus_log2
    to_boundary = Signal(range(page_beats + 1))
    m.d.comb += to_boundary.eq(page_beats - addr[bus_log2:12])
    cap = Signal(range(MAX_BURST_BEATS + 1))
    if page_beats > max_beats:
        m.d.comb += cap.eq(Mux(to_boundary < max_beats, to_boundary, max_beats))
    else:
        m.d.comb += cap.eq(to_boundary)
    return cap


def burst_beats(m: Module, addr, remaining, bus_log2: int) -> Signal:
    """Beats of the next burst: min(remaining, 256, beats left before the 4 KiB boundary)."""
    cap = _burst_cap(m, addr, bus_log2)
    n = Signal(range(MAX_BURST_BEATS + 1))
    m.d.comb += n.eq(Mux(remaining < cap, remaining, cap))
    return n


def next_burst(m: Module, addr, remaining, bus_log2: int, changed,
               max_beats: int = MAX_BURST_BEATS, domain: str = "sync") -> tuple[Signal, Signal, Signal]:
    """``burst_beats`` registered, for the 250 MHz budget (docs/timing.md): ``(n, last, ok)``
    -- the next burst's beats, whether it is the transfer's last (``remaining <= cap``, which
    is ``remaining == n``) and whether both are current.  They are computed from ``addr`` and
    ``remaining`` of the cycle before, so ``changed`` (a descriptor taken or a burst issued
    this cycle) makes them stale for the next cycle: ``ok`` is low then, one bubble per burst
    and per descriptor on the address channel.  ``max_beats`` caps a burst below 256.
    ``domain``: the clock domain of ``addr`` and ``remaining`` (a loader's AXI side may run on
    its own clock)."""
    cap = _burst_cap(m, addr, bus_log2, max_beats)
    n, last, ok = Signal(range(MAX_BURST_BEATS + 1)), Signal(), Signal()
    m.d[domain] += [n.eq(Mux(remaining < cap, remaining, cap)), last.eq(remaining <= cap), ok.eq(~changed)]
    return n, last, ok


def beats_and_keep(m: Module, length, bus_log2: int):
    """``ceil(length / bus_bytes)`` and the byte mask of the last beat."""
    nbytes = 1 << bus_log2
    beats = Signal(len(length) - bus_log2 + 1)
    keep = Signal(nbytes)
    if bus_log2 == 0:
        m.d.comb += [beats.eq(length), keep.eq(1)]
        return beats, keep
    tail = length[:bus_log2]
    m.d.comb += beats.eq(length[bus_log2:] + (tail != 0))
    # Bytes 0..tail-1 of the last beat are valid (all of them when tail == 0).
    m.d.comb += keep.eq(Mux(tail == 0, all_ones(nbytes), (Const(1, nbytes + 1) << tail) - 1))
    return beats, keep


def all_ones(width: int) -> Const:
    return Const((1 << width) - 1, width)


__all__ = ["AXCACHE", "burst_beats", "next_burst", "beats_and_keep", "all_ones"]


def _gray(v, width: int):
    """The Gray code of ``v``'s low ``width`` bits."""
    v = v[:width]
    return v ^ (v >> 1)


def _gray_decode(v):
    bits = [v[-1]]
    for i in reversed(range(len(v) - 1)):
        bits.insert(0, bits[0] ^ v[i])
    return Cat(*bits)


class AsyncQueue(fifo.AsyncFIFO):
    """``amaranth.lib.fifo.AsyncFIFO`` (the same ports, depths, reset rule and behaviour, cycle for
    cycle) with each pointer's next value -- the binary count + 1 and its Gray code -- held in a
    register: a write (read) moves a pointer by a choice between two registers, one LUT after its
    enable, where the library's adds the enable to the count and encodes the sum (a carry chain
    and an XOR after the enable).  The DMA loader's crossings: their enables come late (the weight
    path's ready, the last R beat of a job)."""

    def elaborate(self, platform):
        m = Module()
        W, R, nb = self._w_domain, self._r_domain, self._ctr_bits
        do_write = self.w_rdy & self.w_en
        do_read = self.r_rdy & self.r_en

        # write side: the count, count + 1, and their Gray codes
        p_bin, p_inc = Signal(nb), Signal(nb, init=1)
        p_gry, p_gry_inc = Signal(nb), Signal(nb, init=1)
        with m.If(do_write):
            m.d[W] += [p_bin.eq(p_inc), p_inc.eq(p_inc + 1), p_gry.eq(p_gry_inc), p_gry_inc.eq(_gray(p_inc + 1, nb))]
        p_gry_r = Signal(nb)
        m.submodules.produce_cdc = cdc.FFSynchronizer(p_gry, p_gry_r, o_domain=R)

        # read side (reset-less: the write domain's reset empties the queue through ``r_rst``)
        c_bin, c_inc = Signal(nb, reset_less=True), Signal(nb, init=1, reset_less=True)
        c_gry, c_gry_inc = Signal(nb, reset_less=True), Signal(nb, init=1, reset_less=True)
        c_nxt = Signal(nb)
        m.d.comb += c_nxt.eq(Mux(do_read, c_inc, c_bin))
        with m.If(do_read):
            m.d[R] += [c_bin.eq(c_inc), c_inc.eq(c_inc + 1), c_gry.eq(c_gry_inc), c_gry_inc.eq(_gray(c_inc + 1, nb))]
        c_gry_w = Signal(nb)
        m.submodules.consume_cdc = cdc.FFSynchronizer(c_gry, c_gry_w, o_domain=W)
        c_bin_w = Signal(nb)
        m.d[W] += c_bin_w.eq(_gray_decode(c_gry_w))
        p_bin_r = Signal(nb)
        m.d.comb += p_bin_r.eq(_gray_decode(p_gry_r))

        w_full, r_empty = Signal(), Signal()
        m.d.comb += [w_full.eq((p_gry[-1] != c_gry_w[-1]) & (p_gry[-2] != c_gry_w[-2]) & (p_gry[:-2] == c_gry_w[:-2])),
                     r_empty.eq(c_gry == p_gry_r)]
        m.d[W] += self.w_level.eq(p_bin - c_bin_w)
        m.d.comb += self.r_level.eq(p_bin_r - c_bin)

        storage = m.submodules.storage = Memory(shape=self.width, depth=self.depth, init=[])
        w_port = storage.write_port(domain=W)
        r_port = storage.read_port(domain=R)
        m.d.comb += [w_port.addr.eq(p_bin[:-1]), w_port.data.eq(self.w_data), w_port.en.eq(do_write),
                     self.w_rdy.eq(~w_full),
                     r_port.addr.eq(c_nxt[:-1]), self.r_data.eq(r_port.data), r_port.en.eq(1),
                     self.r_rdy.eq(~r_empty)]

        # the write domain's reset empties the queue (the library's rule)
        w_rst = ResetSignal(domain=W, allow_reset_less=True)
        r_rst = Signal()
        m.submodules.rst_cdc = cdc.AsyncFFSynchronizer(w_rst, r_rst, o_domain=R)
        with m.If(r_rst):
            p_now = _gray_decode(p_gry_r)
            m.d.comb += r_empty.eq(1)
            m.d[R] += [c_gry.eq(p_gry_r), c_bin.eq(p_now), c_inc.eq(p_now + 1), c_gry_inc.eq(_gray(p_now + 1, nb)),
                       self.r_rst.eq(1)]
        with m.Else():
            m.d[R] += self.r_rst.eq(0)
        return m
