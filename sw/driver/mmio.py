"""Backend: the register window mapped through ``/dev/mem`` (boards without PYNQ).

Words move as single aligned 32-bit loads and stores (a ``memoryview`` cast to ``I``), as
AXI-Lite needs.  ``path`` may name an ordinary file: the tests map a temporary file through
the same code path.
"""
from __future__ import annotations

import mmap
import os
import sys
import time

from mcf.spec.regmap import ADDR_BITS


class MmapBackend:
    def __init__(self, phys_addr: int, size: int = 1 << ADDR_BITS, path: str = "/dev/mem",
                 poll_seconds: float = 1e-5):
        if sys.byteorder != "little":
            raise OSError("MmapBackend assumes a little-endian CPU (the PS is)")
        if phys_addr % mmap.PAGESIZE or size % 4 or size <= 0:
            raise ValueError(f"register window {phys_addr:#x}+{size:#x} must be page aligned")
        self.size, self.poll_seconds = size, poll_seconds
        fd = os.open(path, os.O_RDWR | os.O_SYNC)
        try:
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                                 offset=phys_addr)
        finally:
            os.close(fd)
        self._words = memoryview(self._mm).cast("I")

    def _index(self, offset: int) -> int:
        if offset % 4 or not 0 <= offset < self.size:
            raise ValueError(f"register offset {offset:#x} outside the {self.size:#x}-byte window")
        return offset // 4

    async def read32(self, offset: int) -> int:
        return self._words[self._index(offset)]

    async def write32(self, offset: int, value: int) -> None:
        self._words[self._index(offset)] = value

    async def pause(self) -> None:
        time.sleep(self.poll_seconds)

    def close(self) -> None:
        self._words.release()
        self._mm.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
