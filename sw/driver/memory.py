"""DMA memory on the PS: the DDR that a node's DMA engines read and write, seen from Linux.

The node reaches DDR through S_AXI_HP0_FPD, which is **not cache-coherent**: what the CPU wrote
may still sit in its cache when the PL reads DDR, and what the PL wrote is hidden behind stale
cache lines until they are dropped.  So every buffer the PL touches is

* physically contiguous, at a physical address the runtime writes into the node's DMA window
  (DMA_WINDOW_BASE/SIZE) and into descriptors (``phys(offset)``),
* **flushed** (CPU cache -> DDR) before the PL reads it: ``flush(offset, n)``, or ``put``,
* **invalidated** (cache lines dropped) after the PL wrote it and before the CPU reads:
  ``invalidate(offset, n)``, or ``fetch``.

``DmaMemory`` is that interface; ``Driver.configure(..., memory=m)`` sets the window from it and
``Driver.load_from`` / ``Driver.store_to`` push descriptors with the maintenance in the right
place.  Implementations:

* ``PynqMemory``   — ``pynq.allocate`` (Kria-PYNQ's CMA pool; ``PynqBuffer.flush/invalidate``),
* ``UdmabufMemory`` — a u-dma-buf device (``/dev/udmabufN``, typically on a reserved-memory
  region of the device tree), mapped cached, synchronised through its sysfs
  ``sync_offset``/``sync_size``/``sync_direction``/``sync_for_device``/``sync_for_cpu``,
* ``ReservedMemory`` — a ``no-map`` reserved-memory region mapped uncached through ``/dev/mem``
  (flush and invalidate are no-ops: nothing is cached),
* ``HostMemory``   — in-process, for tests and the model backend: it keeps the CPU's view and
  DDR apart, so a missing flush or invalidate shows up as stale data.

Nothing here imports pynq or numpy at module import time (the board may lack them).
"""
from __future__ import annotations

import mmap
import os
from abc import ABC, abstractmethod
from pathlib import Path

from mcf.spec.window import PhysWindow


class DmaMemory(PhysWindow, ABC):
    """A physically contiguous DMA region: ``phys_base``, ``size``, CPU access and cache upkeep."""
    WHAT = "DMA memory"

    phys_base: int
    size: int

    @abstractmethod
    def write(self, offset: int, data: bytes) -> None:
        """CPU store (cached: ``flush`` before the PL reads it)."""

    @abstractmethod
    def read(self, offset: int, n: int) -> bytes:
        """CPU load (cached: ``invalidate`` first if the PL wrote it)."""

    @abstractmethod
    def flush(self, offset: int = 0, n: int | None = None) -> None:
        """Write the CPU's cached copy of the range back to DDR (before the PL reads it)."""

    @abstractmethod
    def invalidate(self, offset: int = 0, n: int | None = None) -> None:
        """Drop the CPU's cached copy of the range (after the PL wrote it, before reading)."""

    def put(self, offset: int, data: bytes) -> None:
        """``write`` then ``flush``: the PL will read these bytes."""
        self.write(offset, data)
        self.flush(offset, len(data))

    def fetch(self, offset: int, n: int) -> bytes:
        """``invalidate`` then ``read``: the bytes the PL wrote."""
        self.invalidate(offset, n)
        return self.read(offset, n)

    def close(self) -> None:
        """Release the region (idempotent)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"{type(self).__name__}(phys_base={self.phys_base:#x}, size={self.size:#x})"


class HostMemory(DmaMemory):
    """In-process DMA memory with a separate CPU view: ``write``/``read`` touch the CPU's copy,
    ``device_write``/``device_read`` (the PL's DMA, by physical address) touch DDR, and only
    ``flush``/``invalidate`` move bytes between them.  Counts the maintenance calls.  ``ddr``:
    the DDR's bytes when they live elsewhere (a simulated DDR's memory, ``size`` bytes); by
    default its own."""

    def __init__(self, size: int, phys_base: int = 0x7000_0000, ddr=None):
        if size <= 0:
            raise ValueError(f"DMA memory size {size} must be positive")
        self.phys_base, self.size = int(phys_base), int(size)
        self._cpu = bytearray(self.size)
        self._ddr = bytearray(self.size) if ddr is None else ddr
        self.flushes: list[tuple[int, int]] = []
        self.invalidates: list[tuple[int, int]] = []

    def write(self, offset: int, data: bytes) -> None:
        o, n = self._range(offset, len(data))
        self._cpu[o:o + n] = data

    def read(self, offset: int, n: int) -> bytes:
        o, n = self._range(offset, n)
        return bytes(self._cpu[o:o + n])

    def flush(self, offset: int = 0, n: int | None = None) -> None:
        o, n = self._whole(offset, n)
        self._ddr[o:o + n] = self._cpu[o:o + n]
        self.flushes.append((o, n))

    def invalidate(self, offset: int = 0, n: int | None = None) -> None:
        o, n = self._whole(offset, n)
        self._cpu[o:o + n] = self._ddr[o:o + n]
        self.invalidates.append((o, n))

    # --- the PL's side (a DMA engine, by physical address) -----------------------------------
    def device_read(self, addr: int, n: int) -> bytes:
        o, n = self._range(int(addr) - self.phys_base, n)
        return bytes(self._ddr[o:o + n])

    def device_write(self, addr: int, data: bytes) -> None:
        o, n = self._range(int(addr) - self.phys_base, len(data))
        self._ddr[o:o + n] = data


class PynqMemory(DmaMemory):
    """``pynq.allocate``: a contiguous buffer from the CMA pool (Kria-PYNQ).  PYNQ's
    ``flush``/``invalidate`` act on the whole buffer, so the ranges only bound-check."""

    def __init__(self, size: int, allocate=None):
        if size <= 0:
            raise ValueError(f"DMA memory size {size} must be positive")
        if allocate is None:
            try:
                from pynq import allocate   # only on the board
            except ImportError:
                raise OSError("PYNQ is not installed: PynqMemory runs on a Kria-PYNQ board "
                              "(use UdmabufMemory or ReservedMemory without PYNQ)") from None
        import numpy as np
        self._buf = allocate(shape=(int(size),), dtype=np.uint8)
        self.size = int(size)
        self.phys_base = int(self._buf.physical_address)

    def write(self, offset: int, data: bytes) -> None:
        import numpy as np
        o, n = self._range(offset, len(data))
        self._buf[o:o + n] = np.frombuffer(bytes(data), dtype=np.uint8)

    def read(self, offset: int, n: int) -> bytes:
        o, n = self._range(offset, n)
        return bytes(self._buf[o:o + n])

    def flush(self, offset: int = 0, n: int | None = None) -> None:
        self._whole(offset, n)
        self._buf.flush()

    def invalidate(self, offset: int = 0, n: int | None = None) -> None:
        self._whole(offset, n)
        self._buf.invalidate()

    def close(self) -> None:
        buf, self._buf = getattr(self, "_buf", None), None
        if buf is not None:
            (getattr(buf, "freebuffer", None) or buf.close)()


class _Mapped(DmaMemory):
    """Common part of the mmap-backed regions."""

    _mm: mmap.mmap | None = None

    def write(self, offset: int, data: bytes) -> None:
        o, n = self._range(offset, len(data))
        self._mm[o:o + n] = bytes(data)

    def read(self, offset: int, n: int) -> bytes:
        o, n = self._range(offset, n)
        return bytes(self._mm[o:o + n])

    def close(self) -> None:
        mm, self._mm = self._mm, None
        if mm is not None:
            mm.close()


def _map(path: str, size: int, offset: int, sync: bool) -> mmap.mmap:
    flags = os.O_RDWR | (os.O_SYNC if sync else 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise OSError(f"cannot open {path}: {e.strerror}") from None
    try:
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
    finally:
        os.close(fd)


class UdmabufMemory(_Mapped):
    """A u-dma-buf device (``/dev/udmabufN``; its buffer usually sits on a reserved-memory region).

    Mapped cached (no O_SYNC); cache upkeep through the driver's sysfs: ``sync_offset``,
    ``sync_size``, ``sync_direction`` (1 = to device, 2 = from device), then 1 into
    ``sync_for_device`` (flush) or ``sync_for_cpu`` (invalidate).  ``sys_root``/``dev_root``
    let tests point it at a fake tree."""

    TO_DEVICE, FROM_DEVICE = 1, 2

    def __init__(self, name: str = "udmabuf0", sys_root: str = "/sys/class/u-dma-buf",
                 dev_root: str = "/dev"):
        self.sys = Path(sys_root) / name
        if not self.sys.is_dir():
            raise OSError(f"no u-dma-buf device {name} ({self.sys} missing): load the u-dma-buf "
                          f"module with a region, see docs/board.md")
        self.phys_base = int(self._get("phys_addr"), 0)
        self.size = int(self._get("size"), 0)
        if self.size <= 0:
            raise OSError(f"u-dma-buf {name} has size {self.size}")
        self._mm = _map(str(Path(dev_root) / name), self.size, 0, sync=False)

    def _get(self, attr: str) -> str:
        try:
            return (self.sys / attr).read_text().strip()
        except OSError as e:
            raise OSError(f"cannot read {self.sys / attr}: {e.strerror}") from None

    def _sync(self, which: str, direction: int, offset: int, n: int | None) -> None:
        o, n = self._whole(offset, n)
        for attr, value in (("sync_offset", o), ("sync_size", n), ("sync_direction", direction),
                            (which, 1)):
            try:
                (self.sys / attr).write_text(f"{value}\n")
            except OSError as e:
                raise OSError(f"cannot write {self.sys / attr}: {e.strerror}") from None

    def flush(self, offset: int = 0, n: int | None = None) -> None:
        self._sync("sync_for_device", self.TO_DEVICE, offset, n)

    def invalidate(self, offset: int = 0, n: int | None = None) -> None:
        self._sync("sync_for_cpu", self.FROM_DEVICE, offset, n)


class ReservedMemory(_Mapped):
    """A ``no-map`` reserved-memory region (device tree) mapped through ``/dev/mem`` with O_SYNC:
    the mapping is uncached, so ``flush``/``invalidate`` only bound-check.  The region must be
    one Linux does not own (``/proc/iomem`` does not list it as System RAM)."""

    def __init__(self, phys_base: int, size: int, path: str = "/dev/mem"):
        if phys_base % mmap.PAGESIZE or size <= 0 or size % mmap.PAGESIZE:
            raise ValueError(f"reserved region {phys_base:#x}+{size:#x} must be page aligned and non-empty")
        self.phys_base, self.size = int(phys_base), int(size)
        self._mm = _map(path, self.size, self.phys_base, sync=True)

    def flush(self, offset: int = 0, n: int | None = None) -> None:
        self._whole(offset, n)

    def invalidate(self, offset: int = 0, n: int | None = None) -> None:
        self._whole(offset, n)
