"""AXI4 (full) as an Amaranth interface, master's view.

``AXI4Signature(addr_width, data_width, id_width)`` has all five channels; ``read=False`` or
``write=False`` leaves one direction out (the DMA loader only reads, the writer only
writes).  Names are AXI's: ``m_axi__araddr`` … binds with cocotbext-axi
``AxiBus.from_prefix(dut, "m_axi", bus_separator="__")`` (``AxiReadBus`` / ``AxiWriteBus``
for a one-direction port).
"""
from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

#: AxBURST encodings.
BURST_FIXED, BURST_INCR, BURST_WRAP = 0, 1, 2
#: An INCR burst has at most 256 beats and never crosses a 4 KiB boundary (AXI4 A3.4.1).
MAX_BURST_BEATS = 256
BOUNDARY_BYTES = 4096


class AXI4Signature(wiring.Signature):
    def __init__(self, addr_width: int = 40, data_width: int = 128, id_width: int = 1, *,
                 read: bool = True, write: bool = True):
        if data_width < 8 or data_width > 1024 or data_width & (data_width - 1):
            raise ValueError(f"AXI4 data_width={data_width}: must be a power of two 8..1024")
        if not 12 <= addr_width <= 64:
            raise ValueError(f"AXI4 addr_width={addr_width}: must be 12..64")
        if not 1 <= id_width <= 32:
            raise ValueError(f"AXI4 id_width={id_width}: must be 1..32")
        if not (read or write):
            raise ValueError("AXI4Signature: neither read nor write channels")
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        self.read, self.write = read, write
        members = {}

        def addr_channel(p):
            return {
                f"{p}id": Out(id_width), f"{p}addr": Out(addr_width), f"{p}len": Out(8),
                f"{p}size": Out(3), f"{p}burst": Out(2), f"{p}lock": Out(1), f"{p}cache": Out(4),
                f"{p}prot": Out(3), f"{p}qos": Out(4), f"{p}valid": Out(1), f"{p}ready": In(1),
            }
        if write:
            members.update(addr_channel("aw"))
            members.update({
                "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
                "wvalid": Out(1), "wready": In(1),
                "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            })
        if read:
            members.update(addr_channel("ar"))
            members.update({
                "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
                "rvalid": In(1), "rready": Out(1),
            })
        super().__init__(members)

    def _key(self):
        return (self.addr_width, self.data_width, self.id_width, self.read, self.write)

    def __eq__(self, other):
        return isinstance(other, AXI4Signature) and other._key() == self._key()

    def __hash__(self):
        return hash((type(self), self._key()))

    def __repr__(self):
        return "AXI4Signature({}, {}, {}, read={}, write={})".format(*self._key())
