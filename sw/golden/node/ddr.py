"""A node's DDR in the simulator: a physically contiguous region with the PS's view and the
PL's view kept apart.

The runtime writes through the CPU view (``write``/``read``) and makes bytes visible to the
node with ``flush`` (CPU -> DDR) and the node's results visible with ``invalidate`` (DDR ->
CPU), exactly as on a board whose HP port is not cache-coherent, so a runtime that forgets one
reads stale bytes here too.  The node reads and writes DDR by physical address
(``device_read``/``device_write``).  The method names are those of the driver's DMA memory
(``write``, ``read``, ``flush``, ``invalidate``, ``put``, ``fetch``, ``phys``, ``phys_base``,
``size``), so one runtime drives the simulator, the RTL and a board.
"""
from __future__ import annotations

from mcf.spec.window import PhysWindow


class SimDdr(PhysWindow):
    WHAT = "DDR"

    def __init__(self, size: int, phys_base: int = 0x4000_0000):
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(f"DDR size {size!r} must be a positive integer")
        if phys_base < 0 or phys_base % 4096:
            raise ValueError(f"DDR base {phys_base:#x} must be a non-negative multiple of 4096")
        self.phys_base, self.size = int(phys_base), int(size)
        self._cpu = bytearray(size)
        self._ddr = bytearray(size)
        self.flushes = 0
        self.invalidates = 0

    def __repr__(self):
        return f"SimDdr(phys_base={self.phys_base:#x}, size={self.size:#x})"

    # --- the PS's side (phys, offset_of: PhysWindow) --------------------------------------
    def write(self, offset: int, data: bytes) -> None:
        o, n = self._range(offset, len(data))
        self._cpu[o:o + n] = data

    def read(self, offset: int, n: int) -> bytes:
        o, n = self._range(offset, n)
        return bytes(self._cpu[o:o + n])

    def flush(self, offset: int = 0, n: int | None = None) -> None:
        o, n = self._whole(offset, n)
        self._ddr[o:o + n] = self._cpu[o:o + n]
        self.flushes += 1

    def invalidate(self, offset: int = 0, n: int | None = None) -> None:
        o, n = self._whole(offset, n)
        self._cpu[o:o + n] = self._ddr[o:o + n]
        self.invalidates += 1

    def put(self, offset: int, data: bytes) -> None:
        self.write(offset, data)
        self.flush(offset, len(data))

    def fetch(self, offset: int, n: int) -> bytes:
        self.invalidate(offset, n)
        return self.read(offset, n)

    def close(self) -> None:
        pass

    # --- the node's side (by physical address) ----------------------------------------------
    def contains(self, addr: int, n: int) -> bool:
        return self.phys_base <= addr and addr + n <= self.phys_base + self.size

    def device_read(self, addr: int, n: int) -> bytes:
        o, n = self._range(int(addr) - self.phys_base, n)
        return bytes(self._ddr[o:o + n])

    def device_write(self, addr: int, data: bytes) -> None:
        o, n = self._range(int(addr) - self.phys_base, len(data))
        self._ddr[o:o + n] = data
