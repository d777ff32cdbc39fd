"""Local replica directory: which KV block ids may be read on this node (MCF section 5).

The runtime (PS, through the CSR block) writes one ``mcf.spec.plan.ReplicaState`` per block id: an owner shard or
a live replica is VALID, a replica MARS has told to drain (``Op.KV_DRAIN``) stays readable
as DRAINING until the invalidation frees it; anything else is INVALID.  The attention unit
looks every key's block id up and masks keys of unreadable blocks out of the softmax.
"""
from __future__ import annotations

from amaranth import Module
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.registry import block
from mcf.spec.plan import REPLICA_STATE_BITS, ReplicaState


class ReplicaDirectory(wiring.Component):
    """``wr``: the runtime's write port; ``lookup``: block id in, ``readable`` one cycle later."""

    def __init__(self, block_bits: int = 8):
        self.block_bits = block_bits
        super().__init__({
            "wr_en": In(1), "wr_block": In(block_bits), "wr_state": In(REPLICA_STATE_BITS),
            "lookup_en": In(1), "lookup_block": In(block_bits),
            "readable": Out(1), "state": Out(REPLICA_STATE_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.table = table = memory.Memory(shape=REPLICA_STATE_BITS, depth=1 << self.block_bits, init=[])
        wr = table.write_port()
        rd = table.read_port()
        m.d.comb += [
            wr.en.eq(self.wr_en), wr.addr.eq(self.wr_block), wr.data.eq(self.wr_state),
            rd.en.eq(self.lookup_en), rd.addr.eq(self.lookup_block),
            self.state.eq(rd.data),
            self.readable.eq((rd.data == ReplicaState.VALID) | (rd.data == ReplicaState.DRAINING)),
        ]
        return m


@block("compute_replica_directory", "KV block id -> INVALID / VALID / DRAINING", block_bits=8)
def _directory(block_bits):
    return ReplicaDirectory(block_bits)
