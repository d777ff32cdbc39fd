"""The driver over the /dev/mem backend, pointed at a temporary file (same mmap code path)."""
import asyncio
import mmap
import struct

import pytest

from mcf import spec
from mcf.spec import DMA_DESCRIPTOR, REGISTERS, ROUTE_ENTRY, DmaDir, ErrorCause
from mcf.sw.driver import Descriptor, Driver, DriverError, DriverTimeout, MmapBackend, SyncDriver

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
    if importlib.util.find_spec("pynq") is None:      # an OSError: `mcf board` prints one line
        with pytest.raises(OSError, match="--backend pynq: the pynq package is not importable"):
            PynqBackend(0xA000_0000)


# --- the fake-register backend: the waits, counters and refusals ----------------------------------
class FakeNode:
    """Registers in a dict with a fake clock: ``pause()`` advances it by ``step`` seconds, so a
    1 s timeout costs no wall time.  ``on_read[name](node)`` runs before a register is read
    (a counter that moves, a bit that sticks); pushes validate like the register block: a
    zero-length descriptor, a full queue are refused and counted."""

    def __init__(self, step: float = 0.01):
        self.words = {r.offset: r.reset for r in REGISTERS}
        self.by_offset = {r.offset: r.name for r in REGISTERS}
        self.t, self.step, self.polls = 0.0, step, 0
        self.on_read = {}
        self.pushed = []

    def now(self) -> float:
        return self.t

    def get(self, name):
        return REGISTERS[name].decode(self.words[REGISTERS[name].offset]) if REGISTERS[name].fields \
            else self.words[REGISTERS[name].offset]

    def set(self, name, **fields):
        self.words[REGISTERS[name].offset] = REGISTERS[name].encode(**fields)

    def bump(self, name, by=1):
        off = REGISTERS[name].offset
        self.words[off] = min(self.words[off] + by, 0xFFFF_FFFF)

    def done(self, count, tag=0):
        self.set("DESC_DONE", count=count % (1 << 16), tag=tag)

    async def read32(self, offset):
        name = self.by_offset[offset]
        if name in self.on_read:
            self.on_read[name](self)
        return self.words[offset]

    async def write32(self, offset, value):
        name = self.by_offset[offset]
        self.words[offset] = value
        if name == "DESC_PUSH":
            d = sum(self.words[REGISTERS[f"DESC_W{i}"].offset] << (32 * i) for i in range(3))
            desc = Descriptor.unpack(d)
            if desc.length == 0:
                self.bump("ERR_DESC_ZERO_LENGTH")
            elif self.get("STATUS")["desc_queue_full"]:
                self.bump("ERR_DESC_QUEUE_FULL")
            else:
                self.pushed.append(desc)
        elif name == "META_PUSH":
            if self.get("STATUS")["meta_queue_full"]:
                self.bump("ERR_META_QUEUE_FULL")
            else:
                self.pushed.append("meta")

    async def pause(self):
        self.t += self.step
        self.polls += 1


def test_wait_desc_done_counts_past_the_16_bit_wrap():
    node = FakeNode()
    seen = []

    def advance(n):                       # 7 000 completions between two reads
        seen.append(node.get("DESC_DONE")["count"])
        node.done(seen[-1] + 7000)
    node.on_read["DESC_DONE"] = advance
    drv = SyncDriver(node)
    got = drv.wait_desc_done(65536 + 5)
    # The raw count passes 5 (65541 mod 2^16) at no read, and the old equality test timed out;
    # the extended count reaches 65541 at the 10th read (70 000 completions), not before.
    assert len(seen) == 10 and got["count"] == 70000 % 65536
    assert drv.desc_done_total() == 77000


def test_wait_for_65536_does_not_return_on_the_reset_value():
    node = FakeNode()
    node.on_read["DESC_DONE"] = lambda n: n.done(n.get("DESC_DONE")["count"] + 1000)
    drv = SyncDriver(node)
    drv.wait_desc_done(65536)
    assert drv.desc_done_total() >= 65536 and node.polls >= 65


def test_wait_desc_done_returns_on_overshoot():
    node = FakeNode()
    node.done(2, tag=9)                   # two completed before the first read
    drv = SyncDriver(node, timeout_s=0.5)
    assert drv.wait_desc_done(1) == {"count": 2, "tag": 9}
    assert node.polls == 0                # no wait at all


def test_a_wait_that_keeps_progressing_never_times_out():
    node = FakeNode(step=0.1)
    state = {"reads": 0}

    def slow(n):                          # one completion every 0.5 s of the fake clock
        state["reads"] += 1
        n.done(state["reads"] // 5)
    node.on_read["DESC_DONE"] = slow
    drv = SyncDriver(node, timeout_s=1.0)
    drv.wait_desc_done(10)                # 5 s in all, never 1 s without progress
    assert node.t >= 4.5


def test_stuck_busy_is_detected_and_reported():
    node = FakeNode()
    node.set("STATUS", busy=1, meta_queue_empty=1, desc_queue_empty=1, error=1)
    node.words[REGISTERS["ERR_BAD_ROUTE"].offset] = 3
    drv = SyncDriver(node, timeout_s=0.5)
    with pytest.raises(DriverTimeout) as exc:
        drv.wait_desc_done(1)
    msg = str(exc.value)
    assert "1 completed descriptors" in msg and "busy=1" in msg and "BAD_ROUTE=3" in msg
    assert "busy stuck at 1" in msg and "no progress for the last 0.5 s" in msg
    assert 0.5 <= node.t <= 0.52           # the timeout is seconds of the backend's clock
    with pytest.raises(DriverTimeout, match="the node to go idle.*busy stuck"):
        drv.wait_idle(timeout_s=0.2)


def test_timeouts_are_seconds_and_configurable():
    node = FakeNode()
    node.set("STATUS", meta_queue_full=1)
    drv = SyncDriver(node, timeout_s=0.3)
    with pytest.raises(DriverTimeout, match="space in the metadata queue.*meta_queue_full=1.*errors none"):
        drv.push_meta(meta())
    assert 0.3 <= node.t <= 0.32 and node.pushed == []
    node.t = 0.0
    with pytest.raises(DriverTimeout):
        drv.wait_until("never", lambda w: False, "ID", timeout_s=0.05)
    assert 0.05 <= node.t <= 0.07
    with pytest.raises(ValueError, match="timeout_s"):
        SyncDriver(node, timeout_s=0)


def test_refused_pushes_and_rejected_descriptors_are_reported():
    from mcf.sw.driver import PushRefused
    node = FakeNode()
    drv = SyncDriver(node)
    drv.push_descriptor(Descriptor(0x1000, 64, 0))             # taken: no counter moved
    with pytest.raises(PushRefused, match="DESC_ZERO_LENGTH") as exc:
        drv.push_descriptor(Descriptor(0x1000, 0, 0))
    assert exc.value.cause == ErrorCause.DESC_ZERO_LENGTH
    node.set("STATUS", desc_queue_full=1, meta_queue_full=1)
    with pytest.raises(PushRefused, match="DESC_QUEUE_FULL"):
        drv.push_descriptor(Descriptor(0x2000, 64, 1), wait=False)
    with pytest.raises(PushRefused, match="META_QUEUE_FULL"):
        drv.push_meta(meta(), wait=False)
    drv.push_descriptor(Descriptor(0x2000, 64, 1), wait=False, check=False)   # unchecked: silent
    assert len(node.pushed) == 1
    # A counter another path cleared (CONTROL) is read afresh, not taken for a refusal.
    node.set("STATUS")
    drv.clear_errors()
    for name in ("ERR_DESC_ZERO_LENGTH", "ERR_DESC_QUEUE_FULL", "ERR_META_QUEUE_FULL"):
        node.words[REGISTERS[name].offset] = 0
    drv.push_descriptor(Descriptor(0x3000, 64, 0))
    drv.push_meta(meta())
    assert len(node.pushed) == 3
    # A saturated counter cannot tell: said, not guessed.
    node.words[REGISTERS["ERR_DESC_ZERO_LENGTH"].offset] = 0xFFFF_FFFF
    drv.write32("CONTROL", 0)
    with pytest.raises(PushRefused, match="saturated"):
        drv.push_descriptor(Descriptor(0x3000, 64, 0))


def test_check_id_checks_the_version():
    node = FakeNode()
    drv = SyncDriver(node)
    assert drv.check_id() == spec.SPEC_VERSION
    node.words[REGISTERS["VERSION"].offset] = spec.SPEC_VERSION + 1
    with pytest.raises(DriverError, match=f"spec {spec.SPEC_VERSION + 1:#010x}, this mcf is spec {spec.SPEC_VERSION:#010x}"):
        drv.check_id()
