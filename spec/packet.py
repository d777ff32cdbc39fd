"""The MCF wire format: Packet = {Meta, Payload} (MCF paper, section 5).

Meta = {stage, op, src, dst, kv_id, route_id, collective, reduce_op} plus the framing a
real link needs (magic, payload length, sequence tag, header check byte).  The header is
``HEADER_BITS`` = 128 bits, little-endian, first field at bit 0, and travels as the first
``ceil(128 / W)`` beats of an AXI-Stream packet of data width W (zero padded when W > 128),
so the payload always starts on a beat boundary.

Destination sets are *route ids*, not bitmaps: every NIC holds a route table written by the
PS (route_id -> output-port mask + local-delivery bit).  MARS knows the topology and
precomputes, per hop, which ports a packet leaves on, so the hardware does one table
lookup per packet.  A node bitmap would cost 64+ header bits, cap the cluster at the header
width and force every NIC to turn node sets into port sets.
"""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass

from .bits import BitLayout, Field, SpecError

#: Node ids are 8 bits: clusters of up to 256 nodes.
NODE_BITS = 8
MAX_NODES = 1 << NODE_BITS
#: 24-bit KV block ids (16 M blocks; the brief asks for >= 2^20).
KV_ID_BITS = 24
#: 12-bit route ids index the per-node route table.
ROUTE_ID_BITS = 12
ROUTE_TABLE_ENTRIES = 1 << ROUTE_ID_BITS
#: Payload length in bytes, 24 bits: up to 16 MiB - 1 per packet.
LENGTH_BITS = 24
MAX_PAYLOAD_BYTES = (1 << LENGTH_BITS) - 1
SEQ_BITS = 16
MAGIC = 0xA5
HEADER_BITS = 128
HEADER_BYTES = HEADER_BITS // 8
#: Reductions (max, sum, online-softmax merge) operate on 32-bit little-endian words.
REDUCE_WORD_BITS = 32


class Stage(enum.IntEnum):
    """Inference stage the packet belongs to."""
    PREFILL = 0
    DECODE = 1
    CONTROL = 2


class Op(enum.IntEnum):
    """What the payload is.  0 is not an op, so an all-zero header is rejected."""
    KV_REPLICA = 1      # a KV block copied to a replica holder (kept until drained)
    KV_FETCH = 2        # a KV block sent to a consumer for scheduled chunks (remote access)
    KV_DRAIN = 3        # mark a replica DRAINING (no payload)
    KV_INVALIDATE = 4   # free a replica (no payload)
    QUERY = 5           # decode query vector multicast to KV holders
    PARTIAL_STATE = 6   # decode partial softmax state (m, l, o)
    REDUCE_RESULT = 7   # result of a reduction
    TENSOR = 8          # generic activation tensor (all-to-all, forwarding)
    CREDIT = 9          # control: sem[kv_id] += seq at the destination node (no payload; spec/isa.py)


class Collective(enum.IntEnum):
    """How the NIC moves the packet."""
    UNICAST = 0      # point-to-point forwarding along the route
    MULTICAST = 1    # one packet in, copies on every port of the route's port mask
    ALL_TO_ALL = 2   # personalised exchange: each packet goes to one peer (dst)
    ALL_REDUCE = 3   # reduce contributions, then deliver the result to every member
    REDUCE = 4       # reduce contributions towards one root (dst)


class ReduceOp(enum.IntEnum):
    """Reduction applied by the NIC reduction engine (decode)."""
    NONE = 0
    MAX = 1
    SUM = 2
    SOFTMAX_MERGE = 3   # online-softmax merge of (m, l, o) partial states


META = BitLayout("Meta", [
    Field("magic", 8, "Constant 0xA5: marks a header, catches misaligned streams.", const=MAGIC),
    Field("stage", 2, "Inference stage.", enum=Stage),
    Field("op", 4, "Payload kind.", enum=Op),
    Field("collective", 3, "Communication pattern the NIC applies.", enum=Collective),
    Field("reduce_op", 3, "Reduction operator (NONE unless the collective reduces).", enum=ReduceOp),
    Field("src", NODE_BITS, "Node that produced the payload."),
    Field("dst", NODE_BITS, "Destination node (UNICAST, ALL_TO_ALL, REDUCE root); "
          "destination-group tag for MULTICAST / ALL_REDUCE."),
    Field("route_id", ROUTE_ID_BITS, "Index into every NIC's route table (output ports, local delivery)."),
    Field("kv_id", KV_ID_BITS, "KV block id (prefill) or tensor/state id (decode)."),
    Field("length", LENGTH_BITS, "Payload length in bytes (0 for control ops)."),
    Field("seq", SEQ_BITS, "Sequence tag: chunk or decode step (and layer), for matching reductions."),
    Field("reserved", 8, "Must be zero.", reserved=True),
    Field("check", 8, "Header check byte: the XOR of all 16 header bytes is zero."),
], total_bits=HEADER_BITS, doc="Packet header, 128 bits, little-endian, LSB first.")

#: The fields a user sets (magic, reserved and check are framing, filled by ``encode``).
META_FIELDS = tuple(f.name for f in META.fields if f.const is None and not f.reserved and f.name != "check")


@dataclass(frozen=True)
class Meta:
    stage: Stage
    op: Op
    collective: Collective
    reduce_op: ReduceOp
    src: int
    dst: int
    route_id: int
    kv_id: int
    length: int
    seq: int = 0

    def __post_init__(self):
        # Validate eagerly (ValueError naming the field and its range) and normalise enums.
        for name in META_FIELDS:
            f = META[name]
            v = f.check(getattr(self, name), "Meta")
            object.__setattr__(self, name, f.enum(v) if f.enum else v)

    def as_dict(self) -> dict[str, int]:
        return {k: int(v) for k, v in asdict(self).items()}

    def replace(self, **changes) -> "Meta":
        d = asdict(self)
        d.update(changes)
        return Meta(**d)

    # --- encoding --------------------------------------------------------------------------
    def to_int(self) -> int:
        word = META.pack({**self.as_dict(), "check": 0})
        return word | (header_check(word) << META.offsets["check"])

    def encode(self) -> bytes:
        return self.to_int().to_bytes(HEADER_BYTES, "little")

    @classmethod
    def from_int(cls, word: int) -> "Meta":
        if header_check(word) != 0:
            raise SpecError("malformed Meta: header check byte mismatch (XOR of header bytes != 0)")
        fields = META.unpack(word)
        return cls(**{k: fields[k] for k in META_FIELDS})

    @classmethod
    def decode(cls, data: bytes) -> "Meta":
        if len(data) < HEADER_BYTES:
            raise SpecError(f"truncated Meta: {len(data)} bytes, a header has {HEADER_BYTES}")
        return cls.from_int(int.from_bytes(bytes(data[:HEADER_BYTES]), "little"))


def header_check(word: int) -> int:
    """XOR of the 16 header bytes.  Encoders store the XOR of the other 15 in ``check``."""
    x = 0
    for i in range(HEADER_BYTES):
        x ^= (word >> (8 * i)) & 0xFF
    return x


@dataclass(frozen=True)
class Packet:
    meta: Meta
    payload: bytes = b""

    def __post_init__(self):
        if len(self.payload) != self.meta.length:
            raise SpecError(f"Packet: payload has {len(self.payload)} bytes, "
                            f"Meta.length says {self.meta.length}")

    def encode(self) -> bytes:
        return self.meta.encode() + bytes(self.payload)

    @classmethod
    def decode(cls, data: bytes) -> "Packet":
        meta = Meta.decode(data)
        payload = bytes(data[HEADER_BYTES:])
        if len(payload) != meta.length:
            raise SpecError(f"malformed Packet: {len(payload)} payload bytes, "
                            f"Meta.length says {meta.length}")
        return cls(meta, payload)


def header_beats(data_width: int) -> int:
    """Beats the header takes on an AXI-Stream bus of ``data_width`` bits."""
    check_data_width(data_width)
    return max(1, HEADER_BITS // data_width)


def check_data_width(data_width: int) -> int:
    if data_width < 32 or data_width & (data_width - 1):
        raise SpecError(f"data_width={data_width}: must be a power of two >= 32")
    return data_width


def pad_header(header: bytes, data_width: int) -> bytes:
    """The header as it travels on a bus of ``data_width`` bits: zero padded to whole beats."""
    return bytes(header) + bytes(header_beats(data_width) * data_width // 8 - len(header))


def to_beats(packet: Packet | bytes, data_width: int) -> list[tuple[int, int, bool]]:
    """Split an encoded packet into AXI-Stream beats ``(tdata, tkeep, tlast)``.

    The header is padded to whole beats; the payload starts on a beat boundary and only its
    last beat may be partial (TKEEP marks the valid bytes, low bytes first)."""
    nb = check_data_width(data_width) // 8
    if isinstance(packet, Packet):
        hdr, payload = packet.meta.encode(), packet.payload
    else:
        hdr, payload = bytes(packet[:HEADER_BYTES]), bytes(packet[HEADER_BYTES:])
    hdr = pad_header(hdr, data_width)
    chunks = [hdr[i:i + nb] for i in range(0, len(hdr), nb)]
    chunks += [payload[i:i + nb] for i in range(0, len(payload), nb)]
    beats = []
    for i, c in enumerate(chunks):
        keep = (1 << len(c)) - 1
        beats.append((int.from_bytes(c, "little"), keep, i == len(chunks) - 1))
    return beats
