"""Packetization buffer (MCF section 5): payload FIFO + metadata FIFO -> ``{Meta, Payload}``.

The compute engine pushes payload beats and the PS (through the CSR metadata queue) pushes
headers; both are buffered so that the compute side keeps producing while the NIC
back-pressures, until a FIFO is full.  Nothing is dropped: a full FIFO de-asserts ready.
The payload FIFO is a ``BlockFIFO`` (``SyncFIFOBuffered`` cycle for cycle, in block RAM, TLAST
also read into a register: the serializer decides on it), the headers' a ``buffered_fifo`` (the
same behaviour, cycle for cycle).
"""
from __future__ import annotations

from amaranth import Cat, Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axis import AXIStreamSignature
from mcf.hw.fifo import BlockFIFO, buffered_fifo
from mcf.hw.layouts import MetaLayout
from mcf.hw.packet.header import HeaderSerializer
from mcf.hw.registry import block
from mcf.spec.params import Range


class Packetizer(wiring.Component):
    """``meta`` (one header per packet) + ``payload`` (the packet's payload beats, TLAST on
    the last one, TKEEP on a partial last beat) -> ``o`` AXI-Stream packets.

    A header with ``length == 0`` takes no payload beats.  ``payload_depth`` counts beats,
    ``meta_depth`` headers; both must be powers of two (block-RAM sized).
    """

    def __init__(self, data_width: int = 64, payload_depth: int = 512, meta_depth: int = 16):
        for name, d in (("payload_depth", payload_depth), ("meta_depth", meta_depth)):
            if d < 2 or d & (d - 1):
                raise ValueError(f"{name}={d}: must be a power of two >= 2")
        self.data_width = data_width
        self.payload_depth = payload_depth
        self.meta_depth = meta_depth
        super().__init__({
            "meta": In(stream.Signature(MetaLayout)),
            "payload": In(AXIStreamSignature(data_width)),
            "o": Out(AXIStreamSignature(data_width)),
            # Fill levels, for the CSR (META_LEVEL) and for benches.
            "meta_level": Out(range(meta_depth + 1)),
            "payload_level": Out(range(payload_depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        w = self.data_width
        # (the headers' queue: a ``buffered_fifo``, the serializer's ready reaches its output
        # registers only, not its level's adder; issue 14)
        m.submodules.meta_fifo = meta_fifo = buffered_fifo(MetaLayout.size, self.meta_depth)
        # (TLAST from a register, not from the block RAM's late read: the serializer's end of a
        # packet runs on into the headers' queue and its own state; the level without a carry
        # chain behind the TX engine's valid; issue 14)
        m.submodules.payload_fifo = pay_fifo = BlockFIFO(w + w // 8 + 1, self.payload_depth, fast=1)
        m.submodules.ser = ser = HeaderSerializer(w)

        m.d.comb += [
            meta_fifo.w_data.eq(self.meta.payload.as_value()),
            meta_fifo.w_en.eq(self.meta.valid),
            self.meta.ready.eq(meta_fifo.w_rdy),
            ser.meta.payload.eq(meta_fifo.r_data),
            ser.meta.valid.eq(meta_fifo.r_rdy),
            meta_fifo.r_en.eq(ser.meta.ready),

            pay_fifo.w_data.eq(Cat(self.payload.tdata, self.payload.tkeep, self.payload.tlast)),
            pay_fifo.w_en.eq(self.payload.tvalid),
            self.payload.tready.eq(pay_fifo.w_rdy),
            Cat(ser.payload.tdata, ser.payload.tkeep, ser.payload.tlast).eq(pay_fifo.r_data),
            ser.payload.tvalid.eq(pay_fifo.r_rdy),
            pay_fifo.r_en.eq(ser.payload.tready),

            self.meta_level.eq(meta_fifo.level),
            self.payload_level.eq(pay_fifo.level),
        ]
        wiring.connect(m, ser.o, wiring.flipped(self.o))
        return m


@block("packetizer", "payload FIFO + metadata FIFO -> {Meta, Payload} AXI-Stream packets",
       variants=({"data_width": 128},), data_width=64, payload_depth=512, meta_depth=16,
       ranges={"meta_depth": Range(2, 4096, pow2=True)})
def _packetizer(data_width, payload_depth, meta_depth):
    return Packetizer(data_width, payload_depth, meta_depth)
