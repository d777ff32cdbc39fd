"""The driver over the /dev/mem backend, pointed at a temporary file (same mmap code path)."""
import asyncio
import mmap
import struct

import pytest

from mcf import spec
from mcf.spec import DMA_DESCRIPTOR, REGISTERS, ROUTE_ENTRY, DmaDir, ErrorCause
from mcf.sw.driver import (Descriptor, Driver, DriverTimeout, MmapBackend, SyncDriver)

WINDOW = 1 << 16


@pytest.fixture
def regfile(tmp_path):
    """A file standing in for physical memory: one page of padding, then the register window."""
    path = tmp_path / "mem"
    path.write_bytes(bytes(mmap.PAGESIZE + WINDOW))
    return path


def word(path, name):
    data = path.read_bytes()
    return struct.unpack_from("<I", data, mmap.PAGESIZE + REGISTERS[name].offset)[0]


def poke(path, name, value):
    with open(path, "r+b") as f:
        f.seek(mmap.PAGESIZE + REGISTERS[name].offset)
        f.write(struct.pack("<I", value))


def meta():
    return spec.Meta(stage=spec.Stage.PREFILL, op=spec.Op.KV_REPLICA, collective=spec.Collective.MULTICAST,
                     reduce_op=spec.ReduceOp.NONE, src=1, dst=2, route_id=300, kv_id=0xABCDE, length=4096, seq=7)


def test_words_land_at_spec_offsets(regfile):
    with MmapBackend(mmap.PAGESIZE, WINDOW, path=str(regfile)) as backend:
        drv = SyncDriver(backend)
        drv.write32("NODE_ID", 5)
        drv.push_meta(meta())
        drv.push_descriptor(Descriptor(0x12_3456_7890, 1000, 1, DmaDir.STORE, 9))
        drv.write_route(77, {"port_mask": 0b101, "local": 1, "fan_in": 3, "valid": 1})
        drv.set_window(0x8_0000_0000, 0x4000_0000)
        assert drv.read32("NODE_ID") == 5
    assert word(regfile, "NODE_ID") == 5
    m = sum(word(regfile, f"META_W{i}") << (32 * i) for i in range(4))
    assert spec.Meta.from_int(m) == meta()
    d = sum(word(regfile, f"DESC_W{i}") << (32 * i) for i in range(3))
    assert DMA_DESCRIPTOR.unpack(d) == {"addr": 0x12_3456_7890, "length": 1000, "buffer": 1,
                                        "dir": DmaDir.STORE, "tag": 9}
    assert word(regfile, "META_PUSH") == 1 and word(regfile, "DESC_PUSH") == 1
    assert word(regfile, "ROUTE_INDEX") == 77
    assert ROUTE_ENTRY.unpack(word(regfile, "ROUTE_DATA"))["fan_in"] == 3
    assert word(regfile, "DMA_WINDOW_BASE_HI") == 8 and word(regfile, "DMA_WINDOW_SIZE_LO") == 0x4000_0000


def test_read_errors_and_fields(regfile):
    for c in ErrorCause:
        poke(regfile, f"ERR_{c.name}", 10 + c)
    poke(regfile, "STATUS", REGISTERS["STATUS"].encode(busy=1, desc_queue_full=1))
    with MmapBackend(mmap.PAGESIZE, WINDOW, path=str(regfile)) as backend:
        drv = SyncDriver(backend)
        assert drv.read_errors() == {c: 10 + c for c in ErrorCause}
        st = drv.status()
        assert st["busy"] == 1 and st["desc_queue_full"] == 1 and st["meta_queue_full"] == 0


def test_full_queue_wait_is_bounded(regfile):
    poke(regfile, "STATUS", REGISTERS["STATUS"].encode(meta_queue_full=1))
    with MmapBackend(mmap.PAGESIZE, WINDOW, path=str(regfile), poll_seconds=0) as backend:
        drv = SyncDriver(backend, max_polls=50)
        with pytest.raises(DriverTimeout, match="metadata queue"):
            drv.push_meta(meta())
        assert word(regfile, "META_PUSH") == 0          # nothing pushed
        drv.push_meta(meta(), wait=False)                # forced: the hardware would refuse it
        assert word(regfile, "META_PUSH") == 1


def test_bad_arguments(regfile):
    with MmapBackend(mmap.PAGESIZE, WINDOW, path=str(regfile)) as backend:
        drv = SyncDriver(backend)
        with pytest.raises(KeyError, match="NOPE"):
            drv.read32("NOPE")
        with pytest.raises(ValueError, match="NODE_ID.node_id"):
            drv.write_fields("NODE_ID", node_id=256)
        with pytest.raises(spec.SpecError):
            drv.push_descriptor(Descriptor(0, 1 << 32))
        with pytest.raises(ValueError, match="window"):
            drv.set_window(1 << 47, (1 << 47) + 1)
    with pytest.raises(ValueError, match="page aligned"):
        MmapBackend(12, WINDOW, path=str(regfile))


def test_sync_driver_refuses_a_suspending_backend():
    class Suspends:
        async def read32(self, offset):
            await asyncio.sleep(0)
            return 0
    with pytest.raises(RuntimeError, match="suspended"):
        SyncDriver(Suspends()).read32("ID")


def test_async_driver_with_asyncio(regfile):
    """The same Driver also runs under an event loop (as in cocotb)."""
    poke(regfile, "DESC_DONE", REGISTERS["DESC_DONE"].encode(count=3, tag=42))
    with MmapBackend(mmap.PAGESIZE, WINDOW, path=str(regfile)) as backend:
        got = asyncio.run(Driver(backend).wait_desc_done(3))
    assert got == {"count": 3, "tag": 42} == REGISTERS["DESC_DONE"].decode(REGISTERS["DESC_DONE"].encode(count=3, tag=42))


def test_pynq_backend_needs_pynq_only_when_built():
    import importlib.util
    from mcf.sw.driver import PynqBackend   # importable without pynq
    if importlib.util.find_spec("pynq") is None:
        with pytest.raises(ImportError):
            PynqBackend(0xA000_0000)
