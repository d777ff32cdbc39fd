"""The one definition of MCF's formats: the wire format (``packet``), the register map
(``regmap``), the node configuration (``node``), fixed-point formats (``fixed``), KV blocks in
DDR (``kv``), topologies (``topology``), route ids (``routes``) and the plan vocabulary
(``plan``).

Pure Python, no hardware or runtime imports: ``mcf.hw`` builds Amaranth layouts from it,
the runtime encodes and decodes with it, ``mcf docs`` renders ``docs/reference.md`` from it.
"""
from .bits import BitLayout, Field, SpecError
from .packet import (HEADER_BITS, HEADER_BYTES, MAX_NODES, MAX_PAYLOAD_BYTES, META, META_FIELDS,
                     ROUTE_TABLE_ENTRIES, Collective, Meta, Op, Packet, ReduceOp,
                     Stage, header_beats, to_beats)

__all__ = ["BitLayout", "Field", "SpecError", "HEADER_BITS", "HEADER_BYTES", "MAX_NODES",
           "MAX_PAYLOAD_BYTES", "META", "META_FIELDS", "ROUTE_TABLE_ENTRIES", "SPEC_VERSION",
           "Collective", "Meta", "Op", "Packet", "ReduceOp", "Stage", "header_beats", "to_beats"]

from .regmap import (DMA_DESCRIPTOR, REGISTERS, ROUTE_ENTRY, SPEC_VERSION, Access, DmaDescriptor, DmaDir, ErrorCause,
                     Irq, LinkStatus, Register, RegisterMap)

__all__ += ["DMA_DESCRIPTOR", "REGISTERS", "ROUTE_ENTRY", "Access", "DmaDescriptor", "DmaDir", "ErrorCause", "Irq",
            "LinkStatus", "Register", "RegisterMap"]
