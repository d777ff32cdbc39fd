"""A physically contiguous window of DDR seen by byte offset: the range checks and the
offset <-> physical-address arithmetic that the driver's DMA memory (``mcf.sw.driver.memory``)
and the simulator's DDR (``mcf.sw.golden.node.ddr``) share."""
from __future__ import annotations


class PhysWindow:
    """Mixin: a subclass sets ``phys_base`` and ``size`` (bytes); ``WHAT`` names it in errors."""
    phys_base: int
    size: int
    WHAT = "window"

    def _range(self, offset: int, n: int) -> tuple[int, int]:
        offset, n = int(offset), int(n)
        if n < 0 or offset < 0 or offset + n > self.size:
            raise ValueError(f"range {offset:#x}+{n:#x} outside the {self.size:#x}-byte {self.WHAT} "
                             f"at {self.phys_base:#x}")
        return offset, n

    def _whole(self, offset: int, n: int | None) -> tuple[int, int]:
        return self._range(offset, self.size - offset if n is None else n)

    def phys(self, offset: int = 0) -> int:
        """The physical (bus) address of ``offset``, for descriptors."""
        self._range(offset, 0)
        return self.phys_base + int(offset)

    def offset_of(self, phys_addr: int) -> int:
        """The offset of a physical address inside this window (ValueError outside)."""
        off = int(phys_addr) - self.phys_base
        self._range(off, 0)
        return off
