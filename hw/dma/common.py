"""Pieces the DMA loader and writer share: burst splitting and descriptor arithmetic.

Addressing rules (the CSR enforces them before a descriptor reaches a DMA engine):
addresses are multiples of the bus width in bytes (DESC_UNALIGNED otherwise); lengths are any
number of bytes > 0 — the transfer covers ``ceil(length / bus_bytes)`` beats and only the last
beat is partial (TKEEP on the loader's stream, WSTRB on the writer's bursts).  Bursts are
INCR, at most 256 beats and never cross a 4 KiB boundary.
"""
from __future__ import annotations

from amaranth import Const, Module, Mux, Signal

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
