"""Local replica directory: which KV block ids may be read on this node (MCF section 5).

The execute unit's DIR instructions and the receive engine's KV_DRAIN / KV_INVALIDATE packets
write one ``mcf.spec.plan.ReplicaState`` per block id: an owner shard or
a live replica is VALID, a replica MARS has told to drain (``Op.KV_DRAIN``) stays readable
as DRAINING until the invalidation frees it; anything else is INVALID.  A gated ATTN_KV looks
every block of its run up first and faults (UNREADABLE_BLOCK) on an unreadable one; the
registers read the table through the second port.
"""
from __future__ import annotations

from amaranth import Module
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec.plan import REPLICA_STATE_BITS, ReplicaState


class ReplicaDirectory(wiring.Component):
    """``wr``: the write port; ``lookup``: block id in, ``readable`` and ``state`` one cycle
    later (the execute unit's ATTN gate); ``rd``: a second read port, block id in, ``rd_state``
    one cycle later (the registers' DIR_INDEX / DIR_DATA)."""

    def __init__(self, block_bits: int = 8):
        self.block_bits = block_bits
        super().__init__({
            "wr_en": In(1), "wr_block": In(block_bits), "wr_state": In(REPLICA_STATE_BITS),
            "lookup_en": In(1), "lookup_block": In(block_bits),
            "readable": Out(1), "state": Out(REPLICA_STATE_BITS),
            "rd_en": In(1), "rd_block": In(block_bits), "rd_state": Out(REPLICA_STATE_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.table = table = memory.Memory(shape=REPLICA_STATE_BITS, depth=1 << self.block_bits, init=[])
        wr = table.write_port()
        rd = table.read_port()
        rd2 = table.read_port()
        m.d.comb += [
            rd2.en.eq(self.rd_en), rd2.addr.eq(self.rd_block), self.rd_state.eq(rd2.data),
            wr.en.eq(self.wr_en), wr.addr.eq(self.wr_block), wr.data.eq(self.wr_state),
            rd.en.eq(self.lookup_en), rd.addr.eq(self.lookup_block),
            self.state.eq(rd.data),
            self.readable.eq((rd.data == ReplicaState.VALID) | (rd.data == ReplicaState.DRAINING)),
        ]
        return m


@block("compute_replica_directory", "KV block id -> INVALID / VALID / DRAINING", block_bits=8,
       ranges={"block_bits": Range(1, 16)})
def _directory(block_bits):
    return ReplicaDirectory(block_bits)
