"""What the compute units share: the write-port signature of their on-chip buffers and the
state enums of their sequencers (one place, not imported from a sibling unit)."""
from __future__ import annotations

from amaranth.lib import enum, wiring
from amaranth.lib.wiring import Out


class MemWriteSignature(wiring.Signature):
    """A plain synchronous write port into a unit's buffer (the producer drives all three):
    the matrix unit's activations and row exponents, the attention unit's query rows."""

    def __init__(self, addr_width: int, data_width: int):
        super().__init__({"en": Out(1), "addr": Out(addr_width), "data": Out(data_width)})


class AttentionState(enum.Enum, shape=2):
    """The attention unit: idle -> a pass over keys -> its pipeline drains; or idle -> output rows."""
    IDLE = 0
    PASS = 1
    DRAIN = 2
    OUT = 3


class VectorState(enum.Enum, shape=3):
    """The vector unit: load the row -> [sum of squares -> rsqrt] -> [products] -> emit."""
    IDLE = 0
    LOAD = 1
    SQ = 2
    RSQ = 3
    PROD = 4
    EMIT_N = 5      # emit after normalizing
    EMIT_D = 6      # emit directly (X32 results)


class KVWriterState(enum.Enum, shape=2):
    """The KV block writer: collect a block -> read its scale -> emit its beats."""
    COLLECT = 0
    SCALE = 1
    EMIT = 2
