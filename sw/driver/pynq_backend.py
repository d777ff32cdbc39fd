"""Backend: PYNQ's ``MMIO`` on a Kria board (``pynq`` is imported here only)."""
from __future__ import annotations

import time

from mcf.spec.regmap import ADDR_BITS


class PynqBackend:
    def __init__(self, phys_addr: int, size: int = 1 << ADDR_BITS, poll_seconds: float = 1e-5):
        from pynq import MMIO   # only on the board
        self._mmio = MMIO(phys_addr, size)
        self.poll_seconds = poll_seconds

    async def read32(self, offset: int) -> int:
        return int(self._mmio.read(offset))

    async def write32(self, offset: int, value: int) -> None:
        self._mmio.write(offset, value)

    async def pause(self) -> None:
        time.sleep(self.poll_seconds)
