"""Simulated hardware: each node's compute engine, DDR and KV memory; the network's links.

Granularity: one reservation per *message* (a KV block group, a query, a partial state), never
one event per packet.  A message reserves every directed link of its route (unicast path or
multicast tree, from the MARS ``Topology``) for its serialization time, starting when all of them
are free (first come, first served in issue order); it reaches a destination ``hops * tau`` after
the serialization ends (cut-through).  Packet headers are counted as bytes, not as events.

Links: on a ``switch`` every node has an uplink (node -> switch) and a downlink (switch -> node);
one hop is node -> switch -> node (the profile's tau covers both NICs and the switch), and the
switch copies multicast frames onto each destination's downlink.  On a ``ring``, a ``grid`` or a ``full_mesh`` a
link is one output port of one node (``(node, port)``); a multicast reserves each link of the
routing tree once (the NIC replicates at branch points).
"""
from __future__ import annotations

from collections import defaultdict

from . import costs


class Network:
    def __init__(self, env, topo, profile, packet_payload: int = costs.DEFAULT_PACKET_PAYLOAD):
        if packet_payload < 1:
            from mcf.sw.errors import UserError
            raise UserError(f"packet_payload={packet_payload}: must be >= 1 byte")
        self.env, self.topo, self.profile = env, topo, profile
        self.packet_payload = packet_payload
        self.tau = profile.link_latency_s
        self.free_at: dict = defaultdict(float)
        self.busy: dict = defaultdict(float)
        self.payload_bytes = 0.0        # payload x destinations (what a receiver gets)
        self.by_kind: dict = defaultdict(float)
        self.link_wire_bytes = 0.0      # wire bytes x links crossed (hop-weighted, headers in)
        self.messages = 0
        self._paths: dict = {}
        self._ser: dict = {}

    # routing ------------------------------------------------------------------------------
    def _path_links(self, src: int, dst: int) -> tuple:
        key = (src, dst)
        p = self._paths.get(key)
        if p is None:
            p = tuple((node, port) for node, port, _ in self.topo.path(src, dst))
            self._paths[key] = p
        return p

    def route(self, src: int, dsts) -> tuple[list, dict]:
        """(links reserved, hop count to each destination) for a unicast or multicast."""
        if self.topo.kind == "switch":
            links = [("up", src)] + [("dn", d) for d in dsts]
            return links, {d: 1 for d in dsts}
        links: dict = {}
        for d in dsts:
            for link in self._path_links(src, d):
                links[link] = True
        dist = self.topo.dist
        return list(links), {d: int(dist[src, d]) for d in dsts}

    # transfers ----------------------------------------------------------------------------
    def transmit(self, src: int, dsts, payload: float, kind: str = "data",
                 earliest: float | None = None) -> dict:
        """Reserve the route from now, or from ``earliest``: the instant the sender is ready (the
        caller may pass a past instant when it knows the route's links were booked only through
        this method since then); return {dst: absolute arrival time}."""
        now = self.env.now if earliest is None else earliest
        dsts = [int(d) for d in dsts if int(d) != src]
        if not dsts or payload <= 0:
            return {d: now for d in dsts}
        links, hops = self.route(src, dsts)
        dur = self._ser.get(payload)
        if dur is None:
            dur = self._ser[payload] = costs.serialization_time(self.profile, payload, self.packet_payload)
        start = max([now] + [self.free_at[l] for l in links])
        end = start + dur
        for l in links:
            self.free_at[l] = end
            self.busy[l] += dur
        self.messages += 1
        self.payload_bytes += payload * len(dsts)
        self.by_kind[kind] += payload * len(dsts)
        self.link_wire_bytes += costs.wire_bytes(payload, self.packet_payload) * len(links)
        return {d: end + hops[d] * self.tau for d in dsts}

    def send(self, src: int, dsts, payload: float, kind: str = "data"):
        """SimPy process: transmit and wait until the last destination has the message."""
        arr = self.transmit(src, dsts, payload, kind)
        last = max(arr.values(), default=self.env.now)
        yield self.env.timeout(last - self.env.now)
        return arr

    def max_link_utilization(self, horizon: float) -> float:
        return max(self.busy.values(), default=0.0) / horizon if horizon > 0 else 0.0


class Node:
    """One node: compute engine (sequential ops), DDR (reservation shared by the engine's
    streaming and the NIC's DMA), KV pool (owner copies + replicas) and staging buffer."""

    def __init__(self, env, idx: int, profile):
        self.env, self.idx, self.profile = env, idx, profile
        self.engine_free = 0.0
        self.ddr_free = 0.0
        self.busy_compute = 0.0
        self.busy_engine = 0.0
        self.ddr_bytes = 0.0
        self.flops = 0.0
        self.pool = 0.0
        self.staging = 0.0
        self.peak_pool = 0.0
        self.peak_total = 0.0
        self.trace: list = [(0.0, 0.0, 0.0)]      # (time, pool bytes, staging bytes)

    def reserve(self, flops: float, ddr_bytes: float, start: float | None = None, attn_flops: float = 0.0,
                attn_keys: float | None = None) -> float:
        """Book one engine operation (roofline of MACs vs DDR streaming) starting no earlier
        than ``start`` (default now; an earlier instant is allowed when the engine was idle,
        waiting, since then); return its end time.  ``flops`` run on the MAC array,
        ``attn_flops`` on the attention path, jobs over ``attn_keys`` keys (``costs.engine_times``)."""
        c, d, fixed = costs.engine_times(self.profile, flops, ddr_bytes, attn_flops, attn_keys)
        start = max(self.env.now if start is None else start, self.engine_free)
        ddr_start = max(start, self.ddr_free) if start >= self.env.now else start
        ddr_end = ddr_start + d
        end = max(start + c, ddr_end) + fixed
        self.engine_free = end
        self.ddr_free = max(self.ddr_free, ddr_end)
        self.busy_compute += c
        self.busy_engine += end - start
        self.ddr_bytes += ddr_bytes
        self.flops += flops + attn_flops
        return end

    def op(self, flops: float, ddr_bytes: float, attn_flops: float = 0.0, attn_keys: float | None = None):
        """SimPy process: one engine operation, now."""
        end = self.reserve(flops, ddr_bytes, attn_flops=attn_flops, attn_keys=attn_keys)
        yield self.env.timeout(end - self.env.now)

    def dma(self, nbytes: float) -> float:
        """NIC DMA to/from DDR: reserves DDR time (delays later engine streaming); returns the
        time the transfer ends."""
        start = max(self.env.now, self.ddr_free)
        self.ddr_free = start + nbytes / self.profile.ddr_Bps
        self.ddr_bytes += nbytes
        return self.ddr_free

    def _mark(self):
        total = self.pool + self.staging
        self.peak_pool = max(self.peak_pool, self.pool)
        self.peak_total = max(self.peak_total, total)
        self.trace.append((self.env.now, self.pool, self.staging))

    def alloc(self, nbytes: float, staging: bool = False):
        if staging:
            self.staging += nbytes
        else:
            self.pool += nbytes
        self._mark()

    def free(self, nbytes: float, staging: bool = False):
        if staging:
            self.staging -= nbytes
        else:
            self.pool -= nbytes
        self._mark()
