"""The vocabulary of a MARS plan, shared by the planner, the lowering, the replica directory
(the runtime's and the RTL's), the cluster model and the commands: the schemes, the replica
states and the directory events.  One definition each.

The string-valued enums compare equal to their values (``Scheme.MARS == "mars"``) and print as
them, so requests, JSON and command lines keep using the plain names.
"""
from __future__ import annotations

import enum


class _Name(str, enum.Enum):
    """A str-valued enum that prints, hashes and compares as its value."""
    __str__ = str.__str__
    __format__ = str.__format__
    __hash__ = str.__hash__


class Scheme(_Name):
    """Context-parallel prefill schemes (MCF paper, section 6 baselines)."""
    MARS = "mars"        # memory-aware replication (this paper)
    RING = "ring"        # ring attention: KV passed around the ring of nodes
    ZIGZAG = "zigzag"    # ring attention with zigzag sharding (load balance)
    FULL = "full"        # full replication of the KV history on every node
    PD = "pd"            # prefill/decode disaggregation: prefill nodes hand the KV over
    PASSQ = "passq"      # pass-Q: queries and partial states travel, KV stays


SCHEMES = tuple(s.value for s in Scheme)


class ReplicaState(enum.IntEnum):
    """Replica directory states of a KV block's copy on a node: VALID -> DRAINING -> INVALID
    (owner shards and live replicas are readable)."""
    # DRAINING copies stay readable by chunks in flight but are excluded from new decisions;
    # INVALID frees the buffer.  Owner copies are VALID from the moment they are written.
    INVALID = 0
    VALID = 1
    DRAINING = 2

    @property
    def readable(self) -> bool:
        return self in (ReplicaState.VALID, ReplicaState.DRAINING)


#: Bits of a replica state in the RTL directory.
REPLICA_STATE_BITS = 2


class EventKind(_Name):
    """A replica-directory transition of a plan."""
    OWNER = "OWNER"            # owner copy written (VALID)
    REPLICATE = "REPLICATE"    # replica written (VALID)
    DRAIN = "DRAIN"            # VALID -> DRAINING
    INVALIDATE = "INVALIDATE"  # DRAINING -> INVALID, buffer freed
    HANDOFF = "HANDOFF"        # pd only: the owner copy arrives from the prefill node


class EventPhase(_Name):
    """When in its step an event happens: before the step's chunk is computed, or after."""
    START = "start"
    END = "end"
