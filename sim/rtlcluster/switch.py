"""A model of the 10G Ethernet switch the boards meet at, in Amaranth (it is equipment outside
the FPGA, not our RTL: it lives in ``sim/``).  It is elaborated together with the nodes into one
cluster top (``mcf.sim.rtlcluster.top``), so a simulator steps the links, not Python.

    i[0] ─► ingress link (10G) ─► route ─┐            ┌─► FIFO ─► latency ─► egress link ─► o[0]
    i[1] ─►          …           ─► route ─┼─ crossbar ─┼─► FIFO ─►    …    ─►     …      ─► o[1]
    …                                      ┘            └─► …

* **Forwarding**: every MCF packet names a route id (``Meta.route_id``, a field of the first beat);
  the switch's forwarding table maps it to a set of output ports (``table`` write port), as a
  managed switch's static unicast/multicast table maps a destination MAC address: the table is
  configured outside MCF (the harness fills it from the cluster's route tables,
  ``forwarding_table``).  A packet is never sent back out of the port it came in on; a packet
  whose set is empty is dropped and counted (``unrouted``).
* **Multicast**: one packet in, a copy on every port of its set; an input starts a packet only
  when every output of its set is free, and the highest-priority waiting input reserves its
  outputs, so no two multicasts hold one output each and wait for the other's (no deadlock) and
  no input waits forever (the priority pointer moves on only when its input is served).
* **In order** per (input, output): an input sends one packet at a time, an output takes one
  input's packet at a time, and every FIFO is first in, first out.
* **Backpressure**: a full output FIFO stops the input feeding it, which stops the sending node's
  NIC (a lossless fabric, like Ethernet with PAUSE frames).
* **Timing** (``SwitchTiming``): each link carries ``link_bps`` (10 Gb/s) of Ethernet frame
  bytes: an MCF packet plus ``frame_overhead`` bytes (preamble, MAC header, FCS, inter-frame gap)
  and padding up to the minimum frame; both the node-to-switch link (ingress) and the
  switch-to-node link (egress) are paced; every beat leaves ``latency_cycles`` after it entered
  (the switch and both PHYs, cut-through).
* **Faults** for the tests: ``drop_at[i] = k`` drops the k-th packet (1-based, counted from reset)
  that arrives at input i; ``corrupt_at[i] = k`` flips a bit of that packet's header (the
  receiving NIC must catch it by the header check byte).  A corrupted *payload* never reaches a node on a real link:
  the receiving MAC's FCS check drops the frame (issue 16's MAC counts it), which is a drop.
* **Counters** per input and output port: packets and bytes (MCF bytes: header and payload, no
  Ethernet overhead), and the drops by cause.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from amaranth import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf.hw.axis import AXIStreamSignature
from mcf.spec import packet as wire
from mcf.spec.node import NodeConfig

#: Where the route id sits in a header (it must lie in the first beat).
ROUTE_LO = wire.META.offsets["route_id"]
ROUTE_HI = ROUTE_LO + wire.ROUTE_ID_BITS
#: The bit the ``corrupt_at`` fault flips: the lowest bit of ``Meta.dst`` (in the first beat at
#: any width the switch takes); the header check byte no longer matches.
CORRUPT_BIT = wire.META.offsets["dst"]
#: Fractional bits of the link pacing credit (bytes x 2^FRAC).
FRAC = 8
COUNTER_BITS = 32
BYTE_COUNTER_BITS = 48
TIME_BITS = 32
#: Beats buffered behind each ingress link.
INGRESS_DEPTH = 8


@dataclass(frozen=True)
class SwitchTiming:
    """The switch and its links, in the units a model needs (bytes, cycles of the node clock)."""
    link_bps: float = 10e9            # the MAC data rate of 10GBASE-R (10.3125 Gbaud, 64b/66b)
    latency_ns: float = 1000.0        # PHY + MAC + switch + MAC + PHY, first bit in to first bit out
    frame_overhead: int = 38          # preamble+SFD 8, MAC header 14, FCS 4, inter-frame gap 12
    min_frame_payload: int = 46       # Ethernet pads shorter payloads to 46 bytes
    paced: bool = True                # False: links at the node's datapath rate, no overhead

    def bytes_per_cycle(self, clock_hz: int) -> float:
        return self.link_bps / 8 / clock_hz

    def rate_q(self, clock_hz: int) -> int:
        """Link bytes per node-clock cycle in units of 2^-FRAC bytes (0: not paced)."""
        return round(self.bytes_per_cycle(clock_hz) * (1 << FRAC)) if self.paced else 0

    def latency_cycles(self, clock_hz: int) -> int:
        return math.ceil(round(self.latency_ns * clock_hz / 1e9, 6))

    def fifo_depth(self, clock_hz: int, data_width: int) -> int:
        """Output FIFO beats: twice what a link has in flight over the latency, at least 64."""
        beats = self.latency_cycles(clock_hz) * max(1.0, self.bytes_per_cycle(clock_hz)) / (data_width // 8)
        return max(64, 1 << math.ceil(math.log2(2 * beats + 1)))

    def as_dict(self) -> dict:
        return {"link_bps": self.link_bps, "latency_ns": self.latency_ns,
                "frame_overhead": self.frame_overhead, "min_frame_payload": self.min_frame_payload,
                "paced": self.paced}


class TableWriteSignature(wiring.Signature):
    """A write port of the forwarding table (route id -> output port set), driver's side."""

    def __init__(self, ports: int):
        super().__init__({"addr": Out(wire.ROUTE_ID_BITS), "data": Out(ports), "en": Out(1)})


class InState(enum.Enum):
    IDLE = 0      # a packet's first beat is awaited (or looked up)
    REQ = 1       # waiting until every output of the packet's set is free and granted
    XFER = 2      # beats flow into the outputs' FIFOs
    DROP = 3      # beats are taken and discarded up to tlast


def _popcount(bits):
    return sum((bits[k] for k in range(len(bits))), Const(0, range(len(bits) + 1)))


class LinkPacer(wiring.Component):
    """Paces one AXI-Stream link to ``rate_q`` bytes x 2^-FRAC per cycle, charging every packet
    its MCF bytes plus the Ethernet overhead (and padding to the minimum frame).  A credit
    counter: a beat may go while it is >= 0; an idle link saves up at most one cycle's bytes
    (no bursts above line rate; two links in series lose no fractions).  ``rate_q = 0`` passes the stream through unpaced."""

    def __init__(self, data_width: int, rate_q: int, frame_overhead: int, min_frame_payload: int):
        self.data_width, self.rate_q = data_width, rate_q
        self.frame_overhead, self.min_frame_payload = frame_overhead, min_frame_payload
        axis = AXIStreamSignature(data_width)
        super().__init__({"i": In(axis), "o": Out(axis)})

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        m.d.comb += [o.tdata.eq(i.tdata), o.tkeep.eq(i.tkeep), o.tlast.eq(i.tlast)]
        if not self.rate_q:
            m.d.comb += [o.tvalid.eq(i.tvalid), i.tready.eq(o.tready)]
            return m
        nb = self.data_width // 8
        scale = 1 << FRAC
        worst = (nb + self.frame_overhead + self.min_frame_payload) * scale + self.rate_q
        credit = Signal(range(-2 * worst, 2 * worst))
        pkt_bytes = Signal(range(self.min_frame_payload + nb + 1))      # saturates at the pad limit
        ok = credit >= 0
        m.d.comb += [o.tvalid.eq(i.tvalid & ok), i.tready.eq(o.tready & ok)]
        beat = o.tvalid & o.tready
        nbytes = _popcount(i.tkeep)
        total = pkt_bytes + nbytes
        pad = Mux(total < self.min_frame_payload, self.min_frame_payload - total, 0)
        cost = Signal(range(worst + 1))
        m.d.comb += cost.eq((nbytes + Mux(i.tlast, self.frame_overhead + pad, 0)) * scale)
        with m.If(beat):
            m.d.sync += credit.eq(credit + self.rate_q - cost)
            m.d.sync += pkt_bytes.eq(Mux(i.tlast, 0, Mux(total > self.min_frame_payload,
                                                           self.min_frame_payload, total)))
        with m.Elif(credit >= 0):
            m.d.sync += credit.eq(self.rate_q)  # idle: at most one cycle's bytes are saved up
        with m.Else():
            m.d.sync += credit.eq(credit + self.rate_q)
        return m


class Switch(wiring.Component):
    """An N-port switch of ``data_width``-bit AXI-Stream ports (see the module docstring).

    ``i[p]``/``o[p]`` are the switch's side of node p's link: ``i`` takes what the node sends,
    ``o`` delivers to it.  ``rate_q``, ``latency`` (cycles) and the frame sizes come from a
    ``SwitchTiming`` at the node clock (``Switch.for_config``); ``fifo_depth`` beats per output.
    """

    def __init__(self, ports: int, data_width: int, *, table_entries: int = 16, fifo_depth: int = 64,
                 latency: int = 0, rate_q: int = 0, frame_overhead: int = 38, min_frame_payload: int = 46):
        if ports < 1:
            raise ValueError(f"ports={ports}: must be >= 1")
        wire.check_data_width(data_width)
        if data_width < max(ROUTE_HI, CORRUPT_BIT + 1):
            raise ValueError(f"data_width={data_width}: the route id (header bits {ROUTE_LO}..{ROUTE_HI - 1}) "
                             "must lie in the first beat")
        if not 1 <= table_entries <= wire.ROUTE_TABLE_ENTRIES or table_entries & (table_entries - 1):
            raise ValueError(f"table_entries={table_entries}: a power of two <= {wire.ROUTE_TABLE_ENTRIES}")
        if fifo_depth < 2 or latency < 0 or latency >= 1 << (TIME_BITS - 1) or rate_q < 0:
            raise ValueError(f"fifo_depth={fifo_depth}, latency={latency}, rate_q={rate_q}: out of range")
        self.ports, self.data_width = ports, data_width
        self.table_entries, self.fifo_depth, self.latency = table_entries, fifo_depth, latency
        self.rate_q, self.frame_overhead, self.min_frame_payload = rate_q, frame_overhead, min_frame_payload
        axis = AXIStreamSignature(data_width)
        super().__init__({
            "i": In(axis).array(ports),
            "o": Out(axis).array(ports),
            "table": In(TableWriteSignature(ports)),
            "drop_at": In(COUNTER_BITS).array(ports),
            "corrupt_at": In(COUNTER_BITS).array(ports),
            "in_packets": Out(COUNTER_BITS).array(ports),
            "in_bytes": Out(BYTE_COUNTER_BITS).array(ports),
            "out_packets": Out(COUNTER_BITS).array(ports),
            "out_bytes": Out(BYTE_COUNTER_BITS).array(ports),
            "dropped": Out(COUNTER_BITS),
            "corrupted": Out(COUNTER_BITS),
            "unrouted": Out(COUNTER_BITS),
        })

    @classmethod
    def for_config(cls, ports: int, config: NodeConfig, timing: SwitchTiming = SwitchTiming()) -> "Switch":
        return cls(ports, config.data_width, table_entries=config.route_entries,
                   fifo_depth=timing.fifo_depth(config.clock_hz, config.data_width),
                   latency=timing.latency_cycles(config.clock_hz), rate_q=timing.rate_q(config.clock_hz),
                   frame_overhead=timing.frame_overhead, min_frame_payload=timing.min_frame_payload)

    def elaborate(self, platform):
        m = Module()
        n, w = self.ports, self.data_width
        nb = w // 8
        now = Signal(TIME_BITS)
        m.d.sync += now.eq(now + 1)

        # --- forwarding table -------------------------------------------------------------
        m.submodules.table = table = Memory(shape=n, depth=self.table_entries, init=[])
        abits = max(1, (self.table_entries - 1).bit_length())
        wp = table.write_port()
        in_range = (self.table.addr >> abits) == 0 if abits < wire.ROUTE_ID_BITS else 1
        m.d.comb += [wp.addr.eq(self.table.addr[:abits]), wp.data.eq(self.table.data),
                     wp.en.eq(self.table.en & in_range)]

        # --- ingress: link pacing, lookup, per-input state ----------------------------------
        links = []
        for p in range(n):
            pacer = LinkPacer(w, self.rate_q, self.frame_overhead, self.min_frame_payload)
            m.submodules[f"ingress_link{p}"] = pacer
            wiring.connect(m, wiring.flipped(self.i[p]), pacer.i)
            # The link delivers into a small FIFO: the crossbar's cycles between packets
            # (lookup, grant) do not slow the link down.
            fifo = SyncFIFOBuffered(width=w + nb + 1, depth=INGRESS_DEPTH)
            m.submodules[f"ingress_fifo{p}"] = fifo
            m.d.comb += [fifo.w_data.eq(Cat(pacer.o.tdata, pacer.o.tkeep, pacer.o.tlast)),
                         fifo.w_en.eq(pacer.o.tvalid), pacer.o.tready.eq(fifo.w_rdy)]
            link = AXIStreamSignature(w).create(path=(f"in{p}_link",))
            m.d.comb += [link.tdata.eq(fifo.r_data[:w]), link.tkeep.eq(fifo.r_data[w:w + nb]),
                         link.tlast.eq(fifo.r_data[w + nb]), link.tvalid.eq(fifo.r_rdy),
                         fifo.r_en.eq(link.tready)]
            links.append(link)

        states = [Signal(InState, name=f"in{p}_state") for p in range(n)]
        masks = [Signal(n, name=f"in{p}_mask") for p in range(n)]
        corrupt = [Signal(name=f"in{p}_corrupt") for p in range(n)]
        first = [Signal(init=1, name=f"in{p}_first") for p in range(n)]
        arrivals = [Signal(COUNTER_BITS, name=f"in{p}_arrivals") for p in range(n)]
        beat_in = [Signal(name=f"in{p}_beat") for p in range(n)]
        req = Cat(st == InState.REQ for st in states)
        grant = Signal(n)
        owned = Signal(n)                      # output j belongs to an input's packet
        owner = [Signal(range(max(2, n)), name=f"out{j}_owner") for j in range(n)]
        fifo_ready = Signal(n)

        drop_events, unrouted_events = [], []
        for p, src in enumerate(links):
            rp = table.read_port(domain="comb")
            rid = src.tdata[ROUTE_LO:ROUTE_HI]
            rid_ok = (rid >> abits) == 0 if abits < wire.ROUTE_ID_BITS else 1
            m.d.comb += rp.addr.eq(rid[:abits])
            lookup = Signal(n, name=f"in{p}_lookup")
            m.d.comb += lookup.eq(Mux(rid_ok, rp.data, 0) & ~Const(1 << p, n))
            drop_now, unrouted_now = Signal(name=f"in{p}_drop_now"), Signal(name=f"in{p}_unrouted_now")
            drop_events.append(drop_now)
            unrouted_events.append(unrouted_now)
            # All the outputs of the packet's set take the beat.
            all_ready = ((fifo_ready | ~masks[p]) == (1 << n) - 1)
            with m.Switch(states[p]):
                with m.Case(InState.IDLE):
                    with m.If(src.tvalid):
                        number = arrivals[p] + 1
                        m.d.sync += arrivals[p].eq(number)
                        with m.If(number == self.drop_at[p]):
                            m.d.comb += drop_now.eq(1)
                            m.d.sync += states[p].eq(InState.DROP)
                        with m.Elif(lookup == 0):
                            m.d.comb += unrouted_now.eq(1)
                            m.d.sync += states[p].eq(InState.DROP)
                        with m.Else():
                            m.d.sync += [masks[p].eq(lookup), corrupt[p].eq(number == self.corrupt_at[p]),
                                         states[p].eq(InState.REQ)]
                with m.Case(InState.REQ):
                    with m.If(grant[p]):
                        m.d.sync += [states[p].eq(InState.XFER), first[p].eq(1)]
                with m.Case(InState.XFER):
                    m.d.comb += src.tready.eq(all_ready)
                    m.d.comb += beat_in[p].eq(src.tvalid & all_ready)
                    with m.If(beat_in[p]):
                        m.d.sync += first[p].eq(0)
                        with m.If(src.tlast):
                            m.d.sync += states[p].eq(InState.IDLE)
                with m.Case(InState.DROP):
                    m.d.comb += src.tready.eq(1)
                    with m.If(src.tvalid & src.tlast):
                        m.d.sync += states[p].eq(InState.IDLE)

        # --- scheduler: rotating priority with reservation --------------------------------------
        ptr = Signal(range(max(2, n)))
        busy = owned
        options = []
        for start in range(n):
            reserved = Const(0, n)
            g = [None] * n
            for k in range(n):
                p = (start + k) % n
                g[p] = req[p] & ((masks[p] & (busy | reserved)) == 0)
                reserved = reserved | Mux(req[p], masks[p], 0)
            options.append(Cat(*g))
        with m.Switch(ptr):
            for start in range(n):
                with m.Case(start):
                    m.d.comb += grant.eq(options[start])
        with m.If(~req.bit_select(ptr, 1) | grant.bit_select(ptr, 1)):
            m.d.sync += ptr.eq(Mux(ptr == n - 1, 0, ptr + 1))

        releases = Signal(n)      # outputs whose packet ends this cycle
        rel_terms = [Mux(beat_in[p] & links[p].tlast, masks[p], 0) for p in range(n)]
        m.d.comb += releases.eq(_or(rel_terms, n))
        grant_masks = _or([Mux(grant[p], masks[p], 0) for p in range(n)], n)
        m.d.sync += owned.eq((owned & ~releases) | grant_masks)
        for j in range(n):
            for p in range(n):
                with m.If(grant[p] & masks[p][j]):
                    m.d.sync += owner[j].eq(p)

        # --- outputs: FIFO, latency, egress link -------------------------------------------------
        entry_bits = w + nb + 1 + TIME_BITS
        for j in range(n):
            fifo = SyncFIFOBuffered(width=entry_bits, depth=self.fifo_depth)
            m.submodules[f"out_fifo{j}"] = fifo
            m.d.comb += fifo_ready[j].eq(fifo.w_rdy)
            sel_data, sel_keep, sel_last, sel_beat, sel_corrupt = (
                Signal(w, name=f"out{j}_data"), Signal(nb, name=f"out{j}_keep"), Signal(name=f"out{j}_last"),
                Signal(name=f"out{j}_beat"), Signal(name=f"out{j}_corrupt"))
            with m.Switch(owner[j]):
                for p in range(n):
                    with m.Case(p):
                        m.d.comb += [sel_data.eq(links[p].tdata), sel_keep.eq(links[p].tkeep),
                                     sel_last.eq(links[p].tlast), sel_beat.eq(beat_in[p]),
                                     sel_corrupt.eq(corrupt[p] & first[p])]
            flip = Mux(sel_corrupt, Const(1 << CORRUPT_BIT, w), 0)
            m.d.comb += [fifo.w_data.eq(Cat(sel_data ^ flip, sel_keep, sel_last, now)),
                         fifo.w_en.eq(owned[j] & sel_beat)]

            pacer = LinkPacer(w, self.rate_q, self.frame_overhead, self.min_frame_payload)
            m.submodules[f"egress_link{j}"] = pacer
            stamp = fifo.r_data[w + nb + 1:]
            due = (now - stamp)[:TIME_BITS] >= self.latency if self.latency else Const(1)
            m.d.comb += [pacer.i.tdata.eq(fifo.r_data[:w]), pacer.i.tkeep.eq(fifo.r_data[w:w + nb]),
                         pacer.i.tlast.eq(fifo.r_data[w + nb]), pacer.i.tvalid.eq(fifo.r_rdy & due),
                         fifo.r_en.eq(pacer.i.tready & due)]
            wiring.connect(m, pacer.o, wiring.flipped(self.o[j]))

        # --- counters ---------------------------------------------------------------------------------
        for p in range(n):
            src = self.i[p]
            with m.If(src.tvalid & src.tready):
                m.d.sync += self.in_bytes[p].eq(self.in_bytes[p] + _popcount(src.tkeep))
                with m.If(src.tlast):
                    m.d.sync += self.in_packets[p].eq(self.in_packets[p] + 1)
            dst = self.o[p]
            with m.If(dst.tvalid & dst.tready):
                m.d.sync += self.out_bytes[p].eq(self.out_bytes[p] + _popcount(dst.tkeep))
                with m.If(dst.tlast):
                    m.d.sync += self.out_packets[p].eq(self.out_packets[p] + 1)
        corrupted_now = [beat_in[p] & first[p] & corrupt[p] for p in range(n)]
        m.d.sync += [self.dropped.eq(self.dropped + _sum(drop_events)),
                     self.unrouted.eq(self.unrouted + _sum(unrouted_events)),
                     self.corrupted.eq(self.corrupted + _sum(corrupted_now))]
        return m


def _or(terms, width):
    out = Const(0, width)
    for t in terms:
        out = out | t
    return out


def _sum(bits):
    return sum((b for b in bits), Const(0, range(len(bits) + 1)))


def forwarding_table(route_tables: list[dict[int, dict]], entries: int) -> dict[int, int]:
    """The switch's table from the nodes' route tables (``mcf.sw.mars.lower.RouteTables.tables``
    or a runtime's): a route id goes to every node whose entry delivers it locally.  Route ids
    name the same route on every node (``mcf.spec.routes``), so one table serves every input."""
    table: dict[int, int] = {}
    for node, routes in enumerate(route_tables):
        for rid, entry in routes.items():
            if rid < entries and entry.get("valid", 1) and entry.get("local"):
                table[rid] = table.get(rid, 0) | (1 << node)
    return table
