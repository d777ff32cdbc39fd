"""Python reference of the NIC's per-packet decision, written from ``mcf.spec`` and
docs/nic.md (not from the RTL): drop with a cause, or the set of outputs a packet goes to.

Outputs are named like the NIC numbers them: ``0..P-1`` network ports, ``"local"``, and
``"reduce"`` (the reduction engine).  Also the element-wise MAX / SUM of 32-bit words.
"""
from __future__ import annotations

from dataclasses import dataclass

from mcf import spec
from mcf.spec import Collective, ErrorCause, Op, ReduceOp, Stage
from mcf.spec.packet import HEADER_BYTES, MAGIC, header_beats, header_check


@dataclass(frozen=True)
class RouteEntry:
    port_mask: int = 0
    local: int = 0
    fan_in: int = 0
    valid: int = 1

    def word(self) -> int:
        return spec.ROUTE_ENTRY.pack({"port_mask": self.port_mask, "local": self.local,
                                      "fan_in": self.fan_in, "valid": self.valid})


INVALID = RouteEntry(valid=0)


def raw_header(**fields) -> bytes:
    """A header with any field values (also undefined enum values), magic and a correct
    check byte unless given."""
    f = {"magic": MAGIC, "reserved": 0, "check": None, "seq": 0, **fields}
    word = 0
    for field in spec.META.fields:
        if field.name == "check":
            continue
        word |= (int(f[field.name]) & field.max) << spec.META.offsets[field.name]
    check = header_check(word) if f["check"] is None else f["check"]
    word |= check << spec.META.offsets["check"]
    return word.to_bytes(HEADER_BYTES, "little")


@dataclass(frozen=True)
class Decision:
    cause: ErrorCause | None = None
    outputs: frozenset = frozenset()

    @property
    def dropped(self) -> bool:
        return self.cause is not None


def decide(wire: bytes, table: dict[int, RouteEntry], *, data_width: int, net_ports: int,
           from_local: bool, num_nodes: int, from_reduce: bool = False, buffer_depth: int, reduce_beats: int,
           route_entries: int = spec.ROUTE_TABLE_ENTRIES, softmax_fan_in: int = 0) -> Decision:
    nb = data_width // 8
    hdr_len = header_beats(data_width) * nb
    if len(wire) < hdr_len:
        return Decision(ErrorCause.SHORT_PACKET)
    word = int.from_bytes(wire[:HEADER_BYTES], "little")
    f = spec.META.unpack(word, check=False)
    if f["magic"] != MAGIC or f["reserved"] != 0 or header_check(word) != 0:
        return Decision(ErrorCause.BAD_HEADER)
    enums = [(Stage, "stage"), (Op, "op"), (Collective, "collective"), (ReduceOp, "reduce_op")]
    if any(f[name] not in {int(e) for e in en} for en, name in enums):
        return Decision(ErrorCause.UNKNOWN_OP)
    coll, rop = Collective(f["collective"]), ReduceOp(f["reduce_op"])
    reducing = coll in (Collective.REDUCE, Collective.ALL_REDUCE)
    defined = {ReduceOp.MAX, ReduceOp.SUM} | ({ReduceOp.SOFTMAX_MERGE} if softmax_fan_in else set())
    if reducing and rop not in defined:
        return Decision(ErrorCause.UNKNOWN_OP)     # NONE, or SOFTMAX_MERGE on a NIC without it
    if not reducing and rop != ReduceOp.NONE:
        return Decision(ErrorCause.UNKNOWN_OP)
    entry = table.get(f["route_id"], INVALID) if f["route_id"] < route_entries else INVALID
    if not entry.valid:
        return Decision(ErrorCause.BAD_ROUTE)
    ports = {p for p in range(net_ports) if entry.port_mask >> p & 1}
    # fan_in >= 2: this NIC is the route's reduction point (a result of a lower tree level
    # arriving from the network is a contribution too); results leave from the engine.
    to_reduce = reducing and entry.fan_in >= 2 and not from_reduce
    if to_reduce:
        own = from_local and coll == Collective.ALL_REDUCE     # own ALL_REDUCE part: to the others
        outputs = {"reduce"} | (ports if own else set())
    elif from_reduce and coll == Collective.ALL_REDUCE:
        outputs = {"local"}                                    # every member reduced it itself
    else:
        outputs = ports | ({"local"} if entry.local else set())
    if not outputs or (to_reduce and rop == ReduceOp.SOFTMAX_MERGE and entry.fan_in > softmax_fan_in):
        return Decision(ErrorCause.BAD_ROUTE)
    if coll in (Collective.UNICAST, Collective.ALL_TO_ALL, Collective.REDUCE) and f["dst"] >= num_nodes:
        return Decision(ErrorCause.BAD_DST)
    beats = -(-f["length"] // nb)
    if beats > buffer_depth or (to_reduce and beats > reduce_beats):
        return Decision(ErrorCause.LONG_PACKET)
    payload = wire[hdr_len:]
    if len(payload) < f["length"]:
        return Decision(ErrorCause.SHORT_PACKET)
    if len(payload) > f["length"]:
        return Decision(ErrorCause.LONG_PACKET)
    return Decision(None, frozenset(outputs))


def reduce_words(op: ReduceOp, payloads: list[bytes], state_words: int | None = None) -> bytes:
    """The golden model's reductions (``mcf.sw.golden.fixed``) on payload bytes: MAX / SUM
    of little-endian int32 words (a partial last word zero-padded, the result cut back to
    the payload length); SOFTMAX_MERGE folds (m, l, o) rows of ``state_words`` words in the
    order given (callers pass increasing src)."""
    length = len(payloads[0])
    if op == ReduceOp.SOFTMAX_MERGE:
        import numpy as np

        from mcf.sw.golden.fixed import fold_states
        rows = [np.frombuffer(p, dtype="<i4").reshape(-1, state_words) for p in payloads]
        return fold_states(rows).astype("<i4").tobytes()
    import numpy as np

    from mcf.sw.golden.fixed import reduce_max, reduce_sum
    pad = (-length) % 4
    words = [np.frombuffer(p + bytes(pad), dtype="<i4") for p in payloads]
    out = reduce_max(words) if op == ReduceOp.MAX else reduce_sum(words)
    return np.asarray(out, dtype="<i4").tobytes()[:length]
