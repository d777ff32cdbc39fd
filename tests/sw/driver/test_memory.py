"""DMA memory on the PS (mcf.sw.driver.memory): allocation, the window the driver programs from
it, and the cache upkeep around every transfer (flush before the PL reads, invalidate after it
writes), with a fake PYNQ, a fake u-dma-buf tree and a file standing in for /dev/mem."""
import mmap
import sys
import types

import numpy as np
import pytest

from mcf.spec import DMA_DESCRIPTOR, REGISTERS, DmaDir
from mcf.sw.driver import HostMemory, PynqMemory, ReservedMemory, SyncDriver, UdmabufMemory
from mcf.sw.driver.memory import DmaMemory


class RegBackend:
    """Registers in a dict; every access and every memory upkeep call goes to one event log, so
    the order of cache maintenance and descriptor pushes is visible."""

    def __init__(self, log):
        self.regs, self.log = {}, log

    async def read32(self, offset):
        return self.regs.get(offset, 0)

    async def write32(self, offset, value):
        self.regs[offset] = value
        self.log.append(("write", REGISTERS.by_offset[offset].name, value))

    async def pause(self):
        pass

    def descriptor(self):
        word = sum(self.regs[REGISTERS[f"DESC_W{i}"].offset] << (32 * i) for i in range(3))
        return DMA_DESCRIPTOR.unpack(word)


class Logged(HostMemory):
    def __init__(self, log, *a, **kw):
        super().__init__(*a, **kw)
        self.log = log

    def flush(self, offset=0, n=None):
        self.log.append(("flush", offset, n))
        super().flush(offset, n)

    def invalidate(self, offset=0, n=None):
        self.log.append(("invalidate", offset, n))
        super().invalidate(offset, n)


def test_host_memory_keeps_cpu_and_ddr_apart():
    mem = HostMemory(4096, phys_base=0x6800_0000)
    mem.write(0, b"abcd")
    assert mem.device_read(0x6800_0000, 4) == bytes(4)        # not flushed: the PL sees old DDR
    mem.flush(0, 4)
    assert mem.device_read(0x6800_0000, 4) == b"abcd"
    mem.device_write(0x6800_0010, b"wxyz")
    assert mem.read(0x10, 4) == bytes(4)                       # stale cache until invalidated
    assert mem.fetch(0x10, 4) == b"wxyz"
    assert mem.phys(0x10) == 0x6800_0010 and mem.offset_of(0x6800_0010) == 0x10
    for bad in (lambda: mem.write(4094, b"abc"), lambda: mem.read(-1, 2), lambda: mem.phys(4097),
                lambda: mem.device_read(0x6800_1000, 1), lambda: mem.flush(4000, 200)):
        with pytest.raises(ValueError, match="outside the 0x1000-byte DMA memory"):
            bad()


def test_driver_programs_the_window_and_orders_the_upkeep():
    log = []
    mem = Logged(log, 1 << 20, phys_base=0x6000_0000)
    be = RegBackend(log)
    drv = SyncDriver(be)
    drv.configure(node_id=2, num_nodes=4, memory=mem)
    assert be.regs[REGISTERS["DMA_WINDOW_BASE_LO"].offset] == 0x6000_0000
    assert be.regs[REGISTERS["DMA_WINDOW_SIZE_LO"].offset] == 1 << 20
    assert REGISTERS["NODE_ID"].decode(be.regs[REGISTERS["NODE_ID"].offset])["node_id"] == 2
    log.clear()
    mem.write(0x100, b"k" * 64)
    drv.load_from(mem, 0x100, 64, buffer=1, tag=5)
    # the flush comes before the descriptor is pushed, and covers the range
    assert log[0] == ("flush", 0x100, 64) and log[-1][:2] == ("write", "DESC_PUSH")
    assert be.descriptor() == {"addr": 0x6000_0100, "length": 64, "buffer": 1, "dir": DmaDir.LOAD, "tag": 5}
    assert mem.device_read(0x6000_0100, 64) == b"k" * 64
    log.clear()
    drv.store_to(mem, 0x800, 32, tag=6)
    assert log[0] == ("invalidate", 0x800, 32) and be.descriptor()["dir"] == DmaDir.STORE
    mem.device_write(0x6000_0800, b"v" * 32)                  # the PL's STORE lands in DDR
    assert mem.fetch(0x800, 32) == b"v" * 32
    with pytest.raises(ValueError, match="not both"):
        drv.configure(node_id=0, num_nodes=1, window_base=0, window_size=16, memory=mem)
    with pytest.raises(ValueError, match="outside"):
        drv.load_from(mem, (1 << 20) - 8, 64)


class FakePynqBuffer(np.ndarray):
    pass


def fake_pynq(calls):
    def allocate(shape, dtype):
        buf = np.zeros(shape, dtype=dtype).view(FakePynqBuffer)
        buf.physical_address = 0x7880_0000
        buf.flush = lambda: calls.append("flush")
        buf.invalidate = lambda: calls.append("invalidate")
        buf.freebuffer = lambda: calls.append("free")
        calls.append(("allocate", shape, np.dtype(dtype).name))
        return buf
    return types.SimpleNamespace(allocate=allocate)


def test_pynq_memory_with_a_fake_pynq(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "pynq", fake_pynq(calls))
    with PynqMemory(8192) as mem:
        assert calls == [("allocate", (8192,), "uint8")]
        assert (mem.phys_base, mem.size) == (0x7880_0000, 8192)
        mem.put(10, b"hello")
        assert calls[-1] == "flush" and mem.read(10, 5) == b"hello"
        assert mem.fetch(10, 5) == b"hello" and calls[-1] == "invalidate"
        log = []
        drv = SyncDriver(RegBackend(log))
        drv.configure(node_id=0, num_nodes=1, memory=mem)
        drv.load_from(mem, 0, 4096)
        assert calls[-1] == "flush" and drv.backend.descriptor()["addr"] == 0x7880_0000
    assert calls[-1] == "free"


def test_pynq_memory_without_pynq_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynq", None)
    with pytest.raises(OSError, match="PYNQ is not installed"):
        PynqMemory(4096)


@pytest.fixture
def udmabuf(tmp_path):
    sysdir = tmp_path / "sys" / "udmabuf0"
    sysdir.mkdir(parents=True)
    (sysdir / "phys_addr").write_text("0x0000000060000000\n")
    (sysdir / "size").write_text(f"{4 * mmap.PAGESIZE}\n")
    for attr in ("sync_offset", "sync_size", "sync_direction", "sync_for_cpu", "sync_for_device"):
        (sysdir / attr).write_text("0\n")
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "udmabuf0").write_bytes(bytes(4 * mmap.PAGESIZE))
    return tmp_path


def test_udmabuf_memory_syncs_through_sysfs(udmabuf):
    sysdir = udmabuf / "sys" / "udmabuf0"
    attrs = lambda: {a: (sysdir / a).read_text().strip() for a in
                     ("sync_offset", "sync_size", "sync_direction", "sync_for_cpu", "sync_for_device")}
    with UdmabufMemory("udmabuf0", sys_root=str(udmabuf / "sys"), dev_root=str(udmabuf / "dev")) as mem:
        assert (mem.phys_base, mem.size) == (0x6000_0000, 4 * mmap.PAGESIZE)
        mem.put(0x40, b"payload")
        assert attrs() == {"sync_offset": "64", "sync_size": "7", "sync_direction": "1",
                           "sync_for_cpu": "0", "sync_for_device": "1"}
        assert mem.fetch(0x80, 16) == bytes(16)
        assert attrs()["sync_for_cpu"] == "1" and attrs()["sync_direction"] == "2"
        assert attrs()["sync_offset"] == "128" and attrs()["sync_size"] == "16"
        mem.flush()
        assert attrs()["sync_offset"] == "0" and attrs()["sync_size"] == str(4 * mmap.PAGESIZE)
    assert (udmabuf / "dev" / "udmabuf0").read_bytes()[0x40:0x47] == b"payload"   # through the mapping


def test_udmabuf_missing_is_one_line(tmp_path):
    with pytest.raises(OSError, match="no u-dma-buf device udmabuf3") as e:
        UdmabufMemory("udmabuf3", sys_root=str(tmp_path))
    assert "\n" not in str(e.value)


def test_reserved_memory_maps_the_physical_range(tmp_path):
    devmem = tmp_path / "mem"
    devmem.write_bytes(bytes(4 * mmap.PAGESIZE))
    base = 2 * mmap.PAGESIZE
    with ReservedMemory(base, mmap.PAGESIZE, path=str(devmem)) as mem:
        mem.put(8, b"\x01\x02\x03")
        assert mem.fetch(8, 3) == b"\x01\x02\x03" and mem.phys(8) == base + 8
    assert devmem.read_bytes()[base + 8:base + 11] == b"\x01\x02\x03"
    with pytest.raises(ValueError, match="page aligned"):
        ReservedMemory(base + 1, mmap.PAGESIZE, path=str(devmem))


def test_every_implementation_is_a_dma_memory():
    for cls in (HostMemory, PynqMemory, UdmabufMemory, ReservedMemory):
        assert issubclass(cls, DmaMemory)
        for name in ("write", "read", "flush", "invalidate", "close", "put", "fetch", "phys"):
            assert callable(getattr(cls, name))
