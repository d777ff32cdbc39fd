"""A model of the KR260's PS DDR as the PL sees it through its HP ports: equipment outside our
RTL, for the benches (cocotb).

    port 0 ─┐                                       ┌─ per port: read latency, outstanding limit,
    port 1 ─┼─ DdrModel (one cocotbext-axi Memory) ─┤           bandwidth cap (bytes / cycle)
     ...   ─┘                                       └─ all ports: one total bandwidth cap

Reads: each HP port (on its own clock: a port of the weight loaders may run faster than the
engine, ``NodeConfig.weight_clock_hz``) accepts an AR while fewer than ``outstanding`` of its read bursts are
unfinished (ARREADY low otherwise), answers a burst's first beat no earlier than ``latency``
reference cycles after its AR was accepted, and sends at most one beat per cycle of its clock, in
AR order, while the port's and the DDR's byte credits allow (token buckets: ``port_bytes_per_cycle``
each per cycle of its clock, ``total_bytes_per_cycle`` per reference cycle shared and earned with
simulated time, ports of one clock served round-robin).  REFRESH: every ``refresh_interval``
reference cycles (tREFI) the DDR earns nothing for ``refresh_cycles`` (tRFC): what was earned
before (at most one cycle's worth plus a beat per port) drains, then the ports wait.  The data comes from one
cocotbext-axi ``Memory`` that every port shares.  Writes go through cocotbext-axi's
``AxiRamWrite`` on the same memory (no latency or cap: the engine's writes are small).

Parameters (one definition each): the DDR's peak bandwidth, the read latency and the
outstanding-read limit from the hardware profile (``sw/mars/profiles/kr260.yaml``:
``ddr_bandwidth_Bps``, ``ddr_read_latency_s``, ``hp_read_outstanding``, ``ddr_refresh_interval_s``,
``ddr_refresh_s``), the clock and the HP port's width from ``spec.node.NodeConfig`` (a 128-bit port
at 250 MHz carries 4 GB/s: one beat per cycle).  ``DdrTiming.from_node`` derives them (in cycles
of the reference clock, the engine's); a bench may override any one.

The model has no DRAM page or bank timing: its total cap is the DDR's peak less refresh, so a
stream's ``bytes_per_cycle / total_bytes_per_cycle`` is the fraction of the DDR4 peak it reached
with the latency and outstanding limits of the HP ports and the DRAM's refresh.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

import cocotb
from cocotb.triggers import RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus, AxiRamWrite, AxiReadBus
from cocotbext.axi.memory import Memory


@dataclass(frozen=True)
class DdrTiming:
    """The model's parameters, in cycles of the reference (engine) clock and bytes."""
    latency: int                      # cycles from AR accepted to the burst's first R beat
    outstanding: int                  # unfinished read bursts a port accepts
    port_bytes_per_cycle: float       # each HP port's cap, per cycle of the port's own clock
    total_bytes_per_cycle: float      # the DDR's cap, all ports together
    refresh_interval: float = 0.0     # tREFI, cycles (0: no refresh)
    refresh_cycles: float = 0.0       # tRFC, cycles: the DDR moves nothing

    def __post_init__(self):
        if self.latency < 1 or self.outstanding < 1:
            raise ValueError(f"DdrTiming: latency={self.latency}, outstanding={self.outstanding} must be >= 1")
        if not self.port_bytes_per_cycle > 0 or not self.total_bytes_per_cycle > 0:
            raise ValueError("DdrTiming: bandwidth caps must be > 0")
        if self.refresh_interval < 0 or not 0 <= self.refresh_cycles < max(self.refresh_interval, 1e-300):
            raise ValueError(f"DdrTiming: refresh_cycles={self.refresh_cycles} must be >= 0 and shorter than "
                             f"refresh_interval={self.refresh_interval}")

    @property
    def refresh_fraction(self) -> float:
        """The fraction of time the DDR refreshes (tRFC / tREFI)."""
        return self.refresh_cycles / self.refresh_interval if self.refresh_interval else 0.0

    @property
    def sustained_bytes_per_cycle(self) -> float:
        """The DDR's cap less refresh."""
        return self.total_bytes_per_cycle * (1 - self.refresh_fraction)

    @classmethod
    def from_node(cls, node, profile=None, **changes) -> "DdrTiming":
        """The KR260's figures for ``node`` (a ``NodeConfig``): profile ``kr260`` unless given."""
        if profile is None:
            from mcf.sw.mars.profile import load_profile
            profile = load_profile("kr260")
        clock = node.clock_hz
        base = cls(latency=max(1, round(profile.ddr_read_latency_s * clock)),
                   outstanding=profile.hp_read_outstanding,
                   port_bytes_per_cycle=float(node.data_bytes),
                   total_bytes_per_cycle=profile.ddr_bandwidth_Bps / clock,
                   refresh_interval=profile.ddr_refresh_interval_s * clock,
                   refresh_cycles=profile.ddr_refresh_s * clock)
        return replace(base, **changes)

    def bandwidth(self, ports: int, bus_bytes: int, port_ratio: float = 1.0) -> float:
        """Bytes per reference cycle ``ports`` ports of ``bus_bytes`` can get at most, each on a
        clock ``port_ratio`` times the reference's, refresh included."""
        return min(ports * min(self.port_bytes_per_cycle, bus_bytes) * port_ratio, self.sustained_bytes_per_cycle)

    def as_dict(self) -> dict:
        return {"latency_cycles": self.latency, "outstanding": self.outstanding,
                "port_bytes_per_cycle": self.port_bytes_per_cycle,
                "total_bytes_per_cycle": round(self.total_bytes_per_cycle, 3),
                "refresh_interval_cycles": round(self.refresh_interval, 2),
                "refresh_cycles": round(self.refresh_cycles, 2),
                "sustained_bytes_per_cycle": round(self.sustained_bytes_per_cycle, 3)}


@dataclass
class _Burst:
    arid: int
    addr: int
    beats: int
    size: int
    accepted: int                # the port's cycle
    ready_at: float              # simulated time, ps
    sent: int = 0


@dataclass
class _Port:
    ar: object                   # AxiARBus
    r: object                    # AxiRBus
    bytes: int                   # bus width in bytes
    clock: object
    bursts: deque = field(default_factory=deque)
    credit: float = 0.0
    rvalid: bool = False
    arready: bool = False
    cycle: int = 0               # cycles of the port's clock
    # statistics
    beats: int = 0
    max_outstanding: int = 0
    first_beat_latency: list = field(default_factory=list)


class DdrModel(Memory):
    """``buses``: AXI4 buses (cocotbext-axi ``AxiBus``; ``write`` None for a read-only port) into one
    memory of ``size`` bytes.  ``clock`` is the reference clock (period ``period_ps``: the timing's
    cycles); ``clocks``: each bus's clock (default: ``clock``).

    Statistics: ``read_beats(p)``, ``read_bytes``, ``max_outstanding(p)``, ``latencies(p)``
    (cycles of the port's clock from AR accepted to first beat, per burst), ``cycle`` (the
    reference clock's, counted by the ports on it)."""

    def __init__(self, buses: list, clock, reset, timing: DdrTiming, size: int = 1 << 24,
                 clocks: list | None = None, period_ps: float = 10_000):
        super().__init__(size)
        self.clock, self.timing, self.period_ps = clock, timing, period_ps
        clocks = clocks or [clock] * len(buses)
        self.write_ifs = [AxiRamWrite(b.write, c, reset, mem=self.mem) for b, c in zip(buses, clocks)
                          if b.write is not None]
        self.ports = [_Port(b.read.ar, b.read.r, len(b.read.r.rdata) // 8, c) for b, c in zip(buses, clocks)]
        for p in self.ports:
            p.ar.arready.value = 0
            p.r.rvalid.value = 0
        self.total_credit = 0.0
        self._earned_to = None       # the simulated time (ps) the DDR's credit was earned up to
        self.groups = []
        for c in dict.fromkeys(clocks):
            group = [p for p in self.ports if p.clock is c]
            self.groups.append(group)
            cocotb.start_soon(self._run(group, [0]))

    @classmethod
    def from_prefixes(cls, dut, prefixes: list[str], clock, reset, timing: DdrTiming, size: int = 1 << 24,
                      clocks: list | None = None, period_ps: float = 10_000):
        buses = [AxiBus.from_prefix(dut, prefix, bus_separator="__") if hasattr(dut, f"{prefix}__awvalid")
                 else AxiBus(read=AxiReadBus.from_prefix(dut, prefix, bus_separator="__")) for prefix in prefixes]
        return cls(buses, clock, reset, timing, size, clocks, period_ps)

    # --- statistics ----------------------------------------------------------------------------------
    @property
    def cycle(self) -> int:
        ref = [p for p in self.ports if p.clock is self.clock]
        return ref[0].cycle if ref else 0

    def read_beats(self, p: int) -> int:
        return self.ports[p].beats

    @property
    def read_bytes(self) -> int:
        return sum(p.beats * p.bytes for p in self.ports)

    def max_outstanding(self, p: int) -> int:
        return self.ports[p].max_outstanding

    def latencies(self, p: int) -> list[int]:
        return self.ports[p].first_beat_latency

    # --- the DDR's shared credit -----------------------------------------------------------------------
    def _refreshing_before(self, t: float) -> float:
        """Picoseconds of refresh in [0, t)."""
        tm = self.timing
        if not tm.refresh_interval:
            return 0.0
        interval, busy = tm.refresh_interval * self.period_ps, tm.refresh_cycles * self.period_ps
        k, rest = divmod(t, interval)
        return k * busy + min(rest, busy)

    def _earn(self, now: float):
        """The DDR's credit earned up to ``now`` (ps), none while it refreshes; a bucket holds at
        most the longest port cycle's worth plus one beat per port (idle time does not pile up)."""
        if self._earned_to is None:
            self._earned_to = now
            return
        if now <= self._earned_to:
            return
        working = (now - self._earned_to) - (self._refreshing_before(now) - self._refreshing_before(self._earned_to))
        self._earned_to = now
        rate = self.timing.total_bytes_per_cycle / self.period_ps
        cap = self.timing.total_bytes_per_cycle * max(self._max_period, 1.0) + sum(p.bytes for p in self.ports)
        self.total_credit = min(self.total_credit + rate * working, cap)

    _max_period = 1.0                # the slowest port clock's period in reference cycles (measured)

    # --- the clocked process of one clock's ports ----------------------------------------------------
    def _burst(self, p: _Port, now: float) -> _Burst:
        ar = p.ar
        size = int(ar.arsize.value) if hasattr(ar, "arsize") else (p.bytes - 1).bit_length()
        return _Burst(arid=int(ar.arid.value) if hasattr(ar, "arid") else 0, addr=int(ar.araddr.value),
                      beats=int(ar.arlen.value) + 1, size=size, accepted=p.cycle - 1,
                      ready_at=now - self._period_of(p) + self.timing.latency * self.period_ps)

    def _period_of(self, p: _Port) -> float:
        return getattr(p, "period", self.period_ps)

    async def _run(self, ports: list, _state):
        edge = RisingEdge(ports[0].clock)
        n = len(ports)
        rr = 0
        last = None
        while True:
            await edge
            now = get_sim_time("ps")
            if last is not None:                 # the clock's period, measured
                for p in ports:
                    p.period = now - last
                self._max_period = max(self._max_period, (now - last) / self.period_ps)
            last = now
            for p in ports:
                p.cycle += 1
            t = self.timing
            # the handshakes of the cycle that just ended
            for p in ports:
                if p.arready and p.ar.arvalid.value:
                    p.bursts.append(self._burst(p, now))
                    p.max_outstanding = max(p.max_outstanding, len(p.bursts))
                if p.rvalid and p.r.rready.value:
                    b = p.bursts[0]
                    if b.sent == 0:
                        p.first_beat_latency.append(p.cycle - 1 - b.accepted)
                    b.sent += 1
                    p.beats += 1
                    if b.sent == b.beats:
                        p.bursts.popleft()
                    p.rvalid = False
            self._earn(now)
            granted = None
            for k in range(n):
                i = (rr + k) % n
                p = ports[i]
                p.credit = min(p.credit + t.port_bytes_per_cycle, t.port_bytes_per_cycle + p.bytes)
                if p.rvalid:                         # a beat waiting for RREADY stays on the bus
                    continue
                b = p.bursts[0] if p.bursts else None
                # a beat pays when it is put on the bus (the DDR has read it)
                if (b is not None and b.ready_at <= now + 1e-6 and p.credit >= p.bytes
                        and self.total_credit >= p.bytes):
                    self.total_credit -= p.bytes
                    p.credit -= p.bytes
                    self._drive_beat(p, b)
                    granted = i
                else:
                    p.r.rvalid.value = 0
            if granted is not None:                  # round robin: after the last port served
                rr = (granted + 1) % n
            for p in ports:
                p.arready = len(p.bursts) < t.outstanding
                p.ar.arready.value = int(p.arready)

    def _drive_beat(self, p: _Port, b: _Burst):
        nbytes = 1 << b.size
        addr = (b.addr // nbytes) * nbytes + b.sent * nbytes
        word = (addr // p.bytes) * p.bytes
        r = p.r
        r.rdata.value = int.from_bytes(self.read(word % self.size, p.bytes), "little")
        if hasattr(r, "rid"):
            r.rid.value = b.arid
        if hasattr(r, "rresp"):
            r.rresp.value = 0
        r.rlast.value = int(b.sent == b.beats - 1)
        r.rvalid.value = 1
        p.rvalid = True


__all__ = ["DdrTiming", "DdrModel"]
