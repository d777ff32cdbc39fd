"""The network between simulated nodes: each node's NIC decides per packet with the NIC's
reference model (``mcf.sw.golden.nic.decide``: route table, drops by cause, outputs), reduces
REDUCE / ALL_REDUCE contributions in its reduction engine (``reduce_words``: MAX and SUM of
int32 words, SOFTMAX_MERGE folded in increasing ``src``), and moves packets over links that
keep order per (source, destination).

Topologies are ``mcf.spec.topology``'s.  Point-to-point wirings (ring, grid, full mesh) connect
port p of node a to ``peers(a)[p]``.  On a ``switch`` every node's port 0 leads to the switch,
which delivers a packet to every other node whose route-table entry for the packet's route
delivers it locally or reduces it (the switch's multicast groups are the route's members).

Time: a link carries one packet at a time (``costs.link(nbytes)`` gives its serialization and
latency in cycles), so packets on one link never overtake each other.
"""
from __future__ import annotations

from mcf.spec.packet import Op, Packet, pad_header
from mcf.spec.topology import Topology

from ..nic import decide, reduce_words


class Network:
    def __init__(self, topology: Topology, nodes, costs, schedule, clock):
        """``schedule(time, fn)`` queues an event of the cluster; ``clock()`` is its time."""
        self.topo, self.nodes, self.costs, self.schedule, self.clock = topology, nodes, costs, schedule, clock
        self.link_free: dict = {}           # link key -> cycle it is free again
        self.link_bytes: dict = {}          # link key -> wire bytes carried
        self.reduce_slots = [dict() for _ in nodes]     # per node: key -> [(src, packet)]
        self.reduce_wait = [list() for _ in nodes]       # contributions waiting for a slot
        self.in_flight = 0
        self.nic_free: dict = {}            # node -> cycle its NIC took the last local packet

    # --- links --------------------------------------------------------------------------------
    def _send_on(self, key, pkt: Packet, now: int, then) -> None:
        ser, lat = self.costs.link(len(pkt.payload) + len(pkt.meta.encode()))
        start = max(now, self.link_free.get(key, 0))
        self.link_free[key] = start + ser
        self.link_bytes[key] = self.link_bytes.get(key, 0) + len(pkt.payload) + len(pkt.meta.encode())
        self.in_flight += 1

        def arrive():
            self.in_flight -= 1
            then()
        self.schedule(start + ser + lat, arrive)

    def _port_out(self, node: int, port: int, pkt: Packet, now: int) -> None:
        if self.topo.kind == "switch":
            self._send_on(("up", node), pkt, now, lambda: self._switch(node, pkt, self._now()))
            return
        peer = self.topo.peers(node)[port]
        if peer is None:
            return
        back = self.topo.peers(peer).index(node) if self.topo.kind != "full_mesh" else None
        self._send_on(("link", node, port), pkt, now,
                      lambda: self.nic(peer, pkt, self._now(), from_local=False, port=back))

    def _switch(self, src: int, pkt: Packet, now: int) -> None:
        rid = pkt.meta.route_id
        for d, node in enumerate(self.nodes):
            if d == src:
                continue
            e = node.routes.get(rid)
            if e is not None and e.valid and (e.local or e.fan_in >= 2):
                self._send_on(("down", d), pkt, now,
                              lambda d=d: self.nic(d, pkt, self._now(), from_local=False))

    def _now(self) -> int:
        return self.clock()

    # --- the NIC --------------------------------------------------------------------------------
    def inject(self, node: int, pkt: Packet, now: int, done=None) -> None:
        """A packet leaves node's packetizer into its NIC (``done`` once the NIC took it)."""
        def enter():
            self.nic(node, pkt, self._now(), from_local=True)
            if done:
                done()
        t = max(now + self.costs.nic_cycles(), self.nic_free.get(node, 0))    # the NIC takes them in order
        self.nic_free[node] = t
        self.schedule(t, enter)

    def nic(self, node: int, pkt: Packet, now: int, from_local: bool, from_reduce: bool = False,
            port=None) -> None:
        n = self.nodes[node]
        cfg = n.cfg
        wire = pad_header(pkt.meta.encode(), cfg.data_width) + pkt.payload
        dec = decide(wire, n.routes, data_width=cfg.data_width, net_ports=cfg.net_ports,
                     from_local=from_local, num_nodes=n.num_nodes, from_reduce=from_reduce,
                     buffer_depth=cfg.nic_buffer_depth, reduce_beats=cfg.reduce_beats,
                     route_entries=cfg.route_entries, softmax_fan_in=cfg.softmax_fan_in)
        if dec.dropped:
            m = pkt.meta
            n.count_error(dec.cause, f"{m.op.name} tag {m.kv_id} route {m.route_id} from node {m.src}")
            return
        for out in sorted(dec.outputs, key=str):
            if out == "local":
                self.schedule(now + 1, lambda: self._local(node, pkt))
            elif out == "reduce":
                self._reduce(node, pkt, now)
            else:
                self._port_out(node, out, pkt, now)

    def _local(self, node: int, pkt: Packet) -> None:
        self.nodes[node].deliver(pkt)

    # --- the reduction engine --------------------------------------------------------------------
    @staticmethod
    def _key(m):
        return (m.route_id, m.seq, m.kv_id, m.length, int(m.reduce_op))

    def _reduce(self, node: int, pkt: Packet, now: int) -> None:
        slots = self.reduce_slots[node]
        key = self._key(pkt.meta)
        if key not in slots and len(slots) >= self.nodes[node].cfg.reduce_slots:
            self.reduce_wait[node].append(pkt)
            return
        slots.setdefault(key, []).append(pkt)
        fan_in = self.nodes[node].routes[pkt.meta.route_id].fan_in
        if len(slots[key]) < fan_in:
            return
        parts = sorted(slots.pop(key), key=lambda p: p.meta.src)
        cfg = self.nodes[node].cfg
        payload = reduce_words(parts[0].meta.reduce_op, [p.payload for p in parts], cfg.state_words)
        meta = parts[0].meta.replace(src=self.nodes[node].node_id, op=Op.REDUCE_RESULT)
        result = Packet(meta, payload)
        self.schedule(now + self.costs.reduce_cycles(len(payload), len(parts), int(parts[0].meta.reduce_op)),
                      lambda: self.nic(node, result, self._now(), from_local=False, from_reduce=True))
        waiting, self.reduce_wait[node] = self.reduce_wait[node], []
        for p in waiting:
            self._reduce(node, p, now)

    # --- reporting -------------------------------------------------------------------------------
    def open_reductions(self) -> list[str]:
        out = []
        for i, slots in enumerate(self.reduce_slots):
            for (rid, seq, tag, length, op), parts in slots.items():
                out.append(f"node {i}'s NIC holds {len(parts)} contribution(s) of reduction tag {tag} "
                           f"(route {rid}) from nodes {[p.meta.src for p in parts]}")
            if self.reduce_wait[i]:
                out.append(f"node {i}'s NIC has {len(self.reduce_wait[i])} contribution(s) waiting for a "
                           f"reduction slot")
        return out

    def wire_bytes(self) -> dict:
        """Bytes carried per directed link (header included), by a readable link name."""
        out = {}
        for key, b in sorted(self.link_bytes.items(), key=str):
            if key[0] == "up":
                name = f"{key[1]}->switch"
            elif key[0] == "down":
                name = f"switch->{key[1]}"
            else:
                peer = self.topo.peers(key[1])[key[2]]
                name = f"{key[1]}->{peer}"
            out[name] = b
        return out

