"""Random traffic for the packet and NIC benches: headers, route tables, good packets, bad
packets, reductions.

Pure Python (runs inside cocotb and in pytest).  Every good packet is unique (``kv_id``
counts up) so that a delivery can be matched to the packet it came from.
"""
from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field

from mcf import spec
from mcf.sw.golden.nic import RouteEntry, raw_header
from mcf.spec import Collective, ErrorCause, Op, ReduceOp, Stage
from mcf.spec.packet import HEADER_BYTES, pad_header


def random_meta(rng: random.Random, length: int) -> spec.Meta:
    """A valid Meta with every field random (the packet benches' headers)."""
    f = spec.META
    return spec.Meta(
        stage=rng.choice(list(spec.Stage)), op=rng.choice(list(spec.Op)),
        collective=rng.choice(list(spec.Collective)), reduce_op=rng.choice(list(spec.ReduceOp)),
        src=rng.randrange(f["src"].max + 1), dst=rng.randrange(f["dst"].max + 1),
        route_id=rng.randrange(f["route_id"].max + 1), kv_id=rng.randrange(f["kv_id"].max + 1),
        length=length, seq=rng.randrange(f["seq"].max + 1))


def random_states(rng: random.Random, rows: int, state_words: int) -> bytes:
    """(m, l, o) rows as the compute engine emits them (golden ``encode_state`` layout), with
    close and far maxima, empty states (m = INT32_MIN) and values that saturate."""
    words = []
    for _ in range(rows):
        r = rng.random()
        m = -(1 << 31) if r < 0.1 else rng.randrange(-(1 << 31), 1 << 31) if r < 0.2 else rng.randrange(-3000, 3000)
        words.append(m)
        words.append(rng.choice([0, rng.randrange(1 << 15, 1 << 22), (1 << 31) - 1]))
        for _ in range(state_words - 2):
            words.append(rng.choice([rng.randrange(-(1 << 20), 1 << 20), rng.randrange(-(1 << 31), 1 << 31)]))
    return struct.pack(f"<{len(words)}i", *words)


@dataclass
class Sent:
    """One packet as sent on an input: the wire bytes (header padded) and what it is."""
    wire: bytes
    kind: str                         # "good", "reduce" or an ErrorCause name
    reduction: int | None = None      # index of the reduction it contributes to
    meta: spec.Meta | None = None


@dataclass
class SingleNicTraffic:
    """Traffic for one NIC with ``net_ports`` network inputs plus the local input."""
    data_width: int
    net_ports: int
    node_id: int = 0
    num_nodes: int = 4
    seed: int = 1
    max_len: int = 200
    state_words: int = 0     # > 0: also SOFTMAX_MERGE reductions, rows of this many words
    table: dict = field(default_factory=dict)
    inputs: list = field(default_factory=list)       # per input (P network + local): [Sent]
    reductions: list = field(default_factory=list)   # (op, key meta, {src: payload})

    def __post_init__(self):
        self.rng = random.Random(self.seed)
        self.kv = 0
        n_in = self.net_ports + 1
        self.inputs = [[] for _ in range(n_in)]
        rng, P = self.rng, self.net_ports
        # Forwarding routes 1..40: random port sets and local bit; some invalid.
        self.forward_routes = []
        for rid in range(1, 41):
            if rng.random() < 0.15:
                self.table[rid] = RouteEntry(port_mask=rng.randrange(1 << P), valid=0)
                continue
            mask = rng.randrange(1 << P)
            local = int(mask == 0 or rng.random() < 0.3)
            self.table[rid] = RouteEntry(port_mask=mask, local=local)
            self.forward_routes.append(rid)
        self.bad_routes = [r for r in range(1, 41) if not self.table[r].valid] + [100, 101]
        # Reduction routes: every input contributes (fan_in = P + 1); the node's own
        # contribution is also multicast on the route's ports.
        self.reduce_routes = []
        for rid in range(200, 204):
            self.table[rid] = RouteEntry(port_mask=rng.randrange(1 << P), local=1, fan_in=n_in)
            self.reduce_routes.append(rid)

    def _meta(self, **kw) -> spec.Meta:
        rng = self.rng
        self.kv += 1
        d = dict(stage=rng.choice(list(Stage)), op=rng.choice([o for o in Op if o != Op.REDUCE_RESULT]),
                 collective=rng.choice([Collective.UNICAST, Collective.MULTICAST, Collective.ALL_TO_ALL]),
                 reduce_op=ReduceOp.NONE, src=rng.randrange(self.num_nodes),
                 dst=rng.randrange(self.num_nodes), route_id=rng.choice(self.forward_routes),
                 kv_id=self.kv, length=0, seq=rng.randrange(1 << 16))
        d.update(kw)
        return spec.Meta(**d)

    def _length(self) -> int:
        return self.rng.choice([0, 1, 4, 8, 16, 17, 64, self.rng.randrange(1, self.max_len)])

    def good(self, port: int, length: int | None = None) -> Sent:
        length = self._length() if length is None else length
        meta = self._meta(length=length)
        wire = pad_header(meta.encode(), self.data_width) + self.rng.randbytes(length)
        return Sent(wire, "good", meta=meta)

    def bad(self, cause: ErrorCause) -> Sent:
        rng, w = self.rng, self.data_width
        length = rng.randrange(1, 60)
        meta = self._meta(length=length)
        payload = rng.randbytes(length)
        hdr = meta.encode()
        if cause == ErrorCause.BAD_HEADER:
            b = bytearray(hdr)
            b[rng.randrange(HEADER_BYTES)] ^= 1 << rng.randrange(8)
            hdr = bytes(b)
        elif cause == ErrorCause.UNKNOWN_OP:
            fields = meta.as_dict()
            which = rng.choice(["op0", "op", "stage", "collective", "rop"])
            if which == "op0":
                fields["op"] = 0
            elif which == "op":
                fields["op"] = rng.randrange(max(Op) + 1, 16)
            elif which == "stage":
                fields["stage"] = 3
            elif which == "collective":
                fields["collective"] = rng.randrange(5, 8)
            else:
                fields["reduce_op"] = rng.choice([ReduceOp.MAX, ReduceOp.SUM])   # on a non-reducing collective
            hdr = raw_header(**fields)
        elif cause == ErrorCause.BAD_ROUTE:
            hdr = meta.replace(route_id=rng.choice(self.bad_routes)).encode()
        elif cause == ErrorCause.BAD_DST:
            hdr = meta.replace(collective=Collective.UNICAST,
                               dst=rng.randrange(self.num_nodes, 256)).encode()
        elif cause == ErrorCause.SHORT_PACKET:
            if rng.random() < 0.25:
                return Sent(hdr[:rng.randrange(1, HEADER_BYTES)], cause.name)
            payload = payload[:rng.randrange(0, length)]
        elif cause == ErrorCause.LONG_PACKET:
            payload += rng.randbytes(rng.randrange(1, 20))
        return Sent(pad_header(hdr, w) + payload, cause.name)

    def reduction(self, index: int, length: int | None = None):
        """One reduction: a contribution on every input (network port p from node p + 1)."""
        rng = self.rng
        length = rng.choice([4, 8, 32, 36, 100]) if length is None else length
        op = rng.choice([ReduceOp.MAX, ReduceOp.SUM] + ([ReduceOp.SOFTMAX_MERGE] * 2 if self.state_words else []))
        if op == ReduceOp.SOFTMAX_MERGE:
            length = 4 * self.state_words * rng.randrange(1, 4)
        self.kv += 1
        key = spec.Meta(stage=Stage.DECODE, op=Op.PARTIAL_STATE,
                        collective=rng.choice([Collective.REDUCE, Collective.ALL_REDUCE]),
                        reduce_op=op, src=0, dst=self.node_id,
                        route_id=rng.choice(self.reduce_routes), kv_id=self.kv, length=length,
                        seq=index & 0xFFFF)
        contributions = {}
        for i in range(self.net_ports + 1):
            src = self.node_id if i == self.net_ports else (self.node_id + 1 + i) % 256
            payload = (random_states(rng, length // (4 * self.state_words), self.state_words)
                       if op == ReduceOp.SOFTMAX_MERGE else rng.randbytes(length))
            meta = key.replace(src=src)
            if i < self.net_ports and rng.random() < 0.3:
                meta = meta.replace(op=Op.REDUCE_RESULT)   # a lower tree level's result
            contributions[src] = payload
            self.inputs[i].append(Sent(pad_header(meta.encode(), self.data_width) + payload,
                                       "reduce", reduction=index, meta=meta))
        self.reductions.append((op, key, contributions))

    def build(self, packets: int, error_rate: float = 0.15, reductions: int = 0):
        """``packets`` packets spread over the inputs, errors among them, and
        ``reductions`` reductions interleaved."""
        rng = self.rng
        n_in = self.net_ports + 1
        red_at = sorted(rng.sample(range(packets), min(reductions, packets)))
        causes = [c for c in ErrorCause if c <= ErrorCause.LONG_PACKET]
        for n in range(packets):
            while red_at and red_at[0] == n:
                red_at.pop(0)
                self.reduction(len(self.reductions))
            port = rng.randrange(n_in)
            if rng.random() < error_rate:
                self.inputs[port].append(self.bad(rng.choice(causes)))
            else:
                self.inputs[port].append(self.good(port))
        return self
