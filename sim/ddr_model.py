"""A model of the KR260's PS DDR as the PL sees it through its HP ports: equipment outside our
RTL, for the benches (cocotb).

    port 0 ─┐                                       ┌─ per port: read latency, outstanding limit,
    port 1 ─┼─ DdrModel (one cocotbext-axi Memory) ─┤           bandwidth cap (bytes / cycle)
     ...   ─┘                                       └─ all ports: one total bandwidth cap

Reads: each HP port accepts an AR while fewer than ``outstanding`` of its read bursts are
unfinished (ARREADY low otherwise), answers a burst's first beat no earlier than ``latency``
cycles after its AR was accepted, and sends at most one beat per cycle, in AR order, while the
port's and the DDR's byte credits allow (token buckets: ``port_bytes_per_cycle`` each,
``total_bytes_per_cycle`` shared, ports served round-robin).  The data comes from one
cocotbext-axi ``Memory`` that every port shares.  Writes go through cocotbext-axi's
``AxiRamWrite`` on the same memory (no latency or cap: the engine's writes are small).

Parameters (one definition each): the DDR's peak bandwidth, the read latency and the
outstanding-read limit from the hardware profile (``sw/mars/profiles/kr260.yaml``:
``ddr_bandwidth_Bps``, ``ddr_read_latency_s``, ``hp_read_outstanding``), the clock and the HP
port's width from ``spec.node.NodeConfig`` (a 128-bit port at 250 MHz carries 4 GB/s: one
beat per cycle).  ``DdrTiming.from_node`` derives them; a bench may override any one.

The model has no DRAM page, bank or refresh timing: its total cap is the DDR's peak, so a
stream's ``bytes_per_cycle / total_bytes_per_cycle`` is the fraction of the DDR4 peak it
reached with the latency and outstanding limits of the HP ports.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

import cocotb
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiBus, AxiRamWrite, AxiReadBus
from cocotbext.axi.memory import Memory


@dataclass(frozen=True)
class DdrTiming:
    """The model's parameters, in cycles of the PL clock and bytes."""
    latency: int                      # cycles from AR accepted to the burst's first R beat
    outstanding: int                  # unfinished read bursts a port accepts
    port_bytes_per_cycle: float       # each HP port's cap
    total_bytes_per_cycle: float      # the DDR's cap, all ports together

    def __post_init__(self):
        if self.latency < 1 or self.outstanding < 1:
            raise ValueError(f"DdrTiming: latency={self.latency}, outstanding={self.outstanding} must be >= 1")
        if not self.port_bytes_per_cycle > 0 or not self.total_bytes_per_cycle > 0:
            raise ValueError("DdrTiming: bandwidth caps must be > 0")

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
                   total_bytes_per_cycle=profile.ddr_bandwidth_Bps / clock)
        return replace(base, **changes)

    def bandwidth(self, ports: int, bus_bytes: int) -> float:
        """Bytes per cycle ``ports`` ports of ``bus_bytes`` can get at most."""
        return min(ports * min(self.port_bytes_per_cycle, bus_bytes), self.total_bytes_per_cycle)

    def as_dict(self) -> dict:
        return {"latency_cycles": self.latency, "outstanding": self.outstanding,
                "port_bytes_per_cycle": self.port_bytes_per_cycle,
                "total_bytes_per_cycle": round(self.total_bytes_per_cycle, 3)}


@dataclass
class _Burst:
    arid: int
    addr: int
    beats: int
    size: int
    accepted: int
    ready_at: int
    sent: int = 0


@dataclass
class _Port:
    ar: object                   # AxiARBus
    r: object                    # AxiRBus
    bytes: int                   # bus width in bytes
    bursts: deque = field(default_factory=deque)
    credit: float = 0.0
    rvalid: bool = False
    arready: bool = False
    # statistics
    beats: int = 0
    max_outstanding: int = 0
    first_beat_latency: list = field(default_factory=list)


class DdrModel(Memory):
    """``ports``: AXI4 buses (cocotbext-axi ``AxiBus``; ``write`` None for a read-only port) into one
    memory of ``size`` bytes.

    Statistics: ``read_beats(p)``, ``read_bytes``, ``max_outstanding(p)``, ``latencies(p)``
    (cycles from AR accepted to first beat, per burst), ``cycle``."""

    def __init__(self, buses: list, clock, reset, timing: DdrTiming, size: int = 1 << 24):
        super().__init__(size)
        self.clock, self.timing = clock, timing
        self.cycle = 0
        self.total_credit = 0.0
        self.write_ifs = [AxiRamWrite(b.write, clock, reset, mem=self.mem) for b in buses if b.write is not None]
        self.ports = [_Port(b.read.ar, b.read.r, len(b.read.r.rdata) // 8) for b in buses]
        for p in self.ports:
            p.ar.arready.value = 0
            p.r.rvalid.value = 0
        self._rr = 0
        cocotb.start_soon(self._run())

    @classmethod
    def from_prefixes(cls, dut, prefixes: list[str], clock, reset, timing: DdrTiming, size: int = 1 << 24):
        buses = [AxiBus.from_prefix(dut, prefix, bus_separator="__") if hasattr(dut, f"{prefix}__awvalid")
                 else AxiBus(read=AxiReadBus.from_prefix(dut, prefix, bus_separator="__")) for prefix in prefixes]
        return cls(buses, clock, reset, timing, size)

    # --- statistics ----------------------------------------------------------------------------------
    def read_beats(self, p: int) -> int:
        return self.ports[p].beats

    @property
    def read_bytes(self) -> int:
        return sum(p.beats * p.bytes for p in self.ports)

    def max_outstanding(self, p: int) -> int:
        return self.ports[p].max_outstanding

    def latencies(self, p: int) -> list[int]:
        return self.ports[p].first_beat_latency

    # --- the clocked process -------------------------------------------------------------------------
    def _burst(self, p: _Port) -> _Burst:
        ar = p.ar
        size = int(ar.arsize.value) if hasattr(ar, "arsize") else (p.bytes - 1).bit_length()
        return _Burst(arid=int(ar.arid.value) if hasattr(ar, "arid") else 0, addr=int(ar.araddr.value),
                      beats=int(ar.arlen.value) + 1, size=size, accepted=self.cycle - 1,
                      ready_at=self.cycle - 1 + self.timing.latency)

    async def _run(self):
        edge = RisingEdge(self.clock)
        n = len(self.ports)
        while True:
            await edge
            self.cycle += 1
            t = self.timing
            # the handshakes of the cycle that just ended
            for p in self.ports:
                if p.arready and p.ar.arvalid.value:
                    p.bursts.append(self._burst(p))
                    p.max_outstanding = max(p.max_outstanding, len(p.bursts))
                if p.rvalid and p.r.rready.value:
                    b = p.bursts[0]
                    if b.sent == 0:
                        p.first_beat_latency.append(self.cycle - 1 - b.accepted)
                    b.sent += 1
                    p.beats += 1
                    if b.sent == b.beats:
                        p.bursts.popleft()
                    p.rvalid = False
                    p.credit -= p.bytes
                    self.total_credit -= p.bytes
            # credits for this cycle (a bucket holds at most one cycle's worth plus one beat: what is
            # left of the last cycle's worth is kept, idle cycles do not pile up)
            widest = max(p.bytes for p in self.ports)
            self.total_credit = min(self.total_credit + t.total_bytes_per_cycle, t.total_bytes_per_cycle + widest)
            spare = self.total_credit - sum(p.bytes for p in self.ports if p.rvalid)
            granted = None
            for k in range(n):
                i = (self._rr + k) % n
                p = self.ports[i]
                p.credit = min(p.credit + t.port_bytes_per_cycle, t.port_bytes_per_cycle + p.bytes)
                if p.rvalid:                         # a beat waiting for RREADY stays on the bus
                    continue
                b = p.bursts[0] if p.bursts else None
                if b is not None and b.ready_at <= self.cycle and p.credit >= p.bytes and spare >= p.bytes:
                    spare -= p.bytes
                    self._drive_beat(p, b)
                    granted = i
                else:
                    p.r.rvalid.value = 0
            if granted is not None:                  # round robin: after the last port served
                self._rr = (granted + 1) % n
            for p in self.ports:
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
