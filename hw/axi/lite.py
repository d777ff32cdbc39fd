"""AXI4-Lite as an Amaranth interface.

The signature is the master's view (``Out`` = driven by the master); a register block takes
``In(AXI4LiteSignature())``.  Member names are AXI's, so the Verilog ports read
``s_axil__awaddr`` … and cocotbext-axi binds them with
``AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__")``.
"""
from __future__ import annotations

import enum

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class Resp(enum.IntEnum):
    """xRESP encodings (AXI4 / AXI4-Lite)."""
    OKAY = 0
    EXOKAY = 1
    SLVERR = 2
    DECERR = 3


class AXI4LiteSignature(wiring.Signature):
    def __init__(self, addr_width: int = 16, data_width: int = 32):
        if data_width not in (32, 64):
            raise ValueError(f"AXI4-Lite data_width={data_width}: must be 32 or 64")
        if not 2 <= addr_width <= 64:
            raise ValueError(f"AXI4-Lite addr_width={addr_width}: must be 2..64")
        self.addr_width, self.data_width = addr_width, data_width
        super().__init__({
            "awaddr": Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1), "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })

    def __eq__(self, other):
        return (isinstance(other, AXI4LiteSignature) and other.addr_width == self.addr_width
                and other.data_width == self.data_width)

    def __hash__(self):
        return hash((type(self), self.addr_width, self.data_width))

    def __repr__(self):
        return f"AXI4LiteSignature({self.addr_width}, {self.data_width})"
