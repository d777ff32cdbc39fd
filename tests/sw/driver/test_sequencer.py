"""The driver's sequencer methods over a fake register backend that answers like the node's
register block (SEQ_* registers of ``mcf.spec.regmap``): words land at the spec offsets,
indexed registers read what their index selects, waits are bounded and a fault or a timeout
is one line that names the node, the cause, the waits and the error counters."""
import pytest

from mcf.spec import REGISTERS, ErrorCause
from mcf.spec.isa import PerfCounter, SeqFault
from mcf.spec.plan import ReplicaState
from mcf.sw.driver import DriverTimeout, NodeFault, SyncDriver


class FakeNode:
    """Register words by offset; SEM_DATA / DIR_DATA / PERF_LO / PERF_HI follow their index
    registers as the hardware's do (PERF_LO snapshots the high half)."""

    def __init__(self):
        self.words = {r.offset: r.reset for r in REGISTERS}
        self.sems = [0] * 32
        self.dir = {}
        self.perf = {}
        self.status_script = []      # SEQ_STATUS words returned by successive reads
        self.writes = []
        self.snapshot = 0

    def reg(self, name):
        return self.words[REGISTERS[name].offset]

    def set(self, name, value):
        self.words[REGISTERS[name].offset] = value

    async def read32(self, offset):
        name = REGISTERS.by_offset[offset].name
        if name == "SEQ_STATUS" and self.status_script:
            word = self.status_script.pop(0) if len(self.status_script) > 1 else self.status_script[0]
            return word
        if name == "SEM_DATA":
            return self.sems[self.reg("SEM_INDEX")]
        if name == "DIR_DATA":
            return int(self.dir.get(self.reg("DIR_INDEX"), ReplicaState.INVALID))
        if name == "PERF_LO":
            value = self.perf.get(self.reg("PERF_INDEX"), 0)
            self.snapshot = value >> 32
            return value & 0xFFFF_FFFF
        if name == "PERF_HI":
            return self.snapshot
        return self.words[offset]

    async def write32(self, offset, value):
        reg = REGISTERS.by_offset[offset]
        self.writes.append((reg.name, value))
        self.words[offset] = value & reg.mask

    async def pause(self):
        pass


def status(**fields):
    return REGISTERS["SEQ_STATUS"].encode(**fields)


@pytest.fixture
def node():
    return FakeNode()


def test_load_program_writes_the_spec_registers(node):
    drv = SyncDriver(node)
    drv.load_program(0x12_3456_7840, 300)
    assert node.reg("PROG_BASE_LO") == 0x3456_7840 and node.reg("PROG_BASE_HI") == 0x12
    assert node.reg("PROG_COUNT") == 300
    for base in (0x20, -64, 1 << 48):
        with pytest.raises(ValueError, match="program base"):
            drv.load_program(base, 1)
    with pytest.raises(ValueError, match="program count"):
        drv.load_program(0, 0)


def test_configuration_words(node):
    drv = SyncDriver(node)
    drv.set_fault_mask([ErrorCause.RX_UNEXPECTED, ErrorCause.BAD_HEADER])
    assert node.reg("FAULT_MASK") == (1 << ErrorCause.RX_UNEXPECTED) | (1 << ErrorCause.BAD_HEADER)
    drv.set_watchdog(1000)
    drv.set_rx_wait(0)
    assert node.reg("WATCHDOG") == 1000 and node.reg("RX_WAIT") == 0
    with pytest.raises(ValueError, match="watchdog"):
        drv.set_watchdog(1 << 32)


def test_start_waits_until_taken_and_is_bounded(node):
    drv = SyncDriver(node, max_polls=20)
    node.status_script = [status(start_pending=1), status(start_pending=1), status(running=1)]
    drv.start()
    assert ("SEQ_CONTROL", REGISTERS["SEQ_CONTROL"].encode(start=1)) in node.writes
    node.status_script = [status(start_pending=1)]
    with pytest.raises(DriverTimeout, match="take the start"):
        drv.start()


def test_wait_done_returns_on_done(node):
    drv = SyncDriver(node)
    node.status_script = [status(running=1), status(running=1), status(done=1, idle=1)]
    st = drv.wait_done(timeout_s=5)
    assert st["done"] == 1 and st["fault_cause"] is SeqFault.NONE


def test_fault_is_one_line_with_cause_waits_and_errors(node):
    drv = SyncDriver(node)
    node.set("NODE_ID", 3)
    node.set("SEQ_PC", 17)
    node.set("SEQ_FAULT_PC", 12)
    node.set("SEQ_WAIT", REGISTERS["SEQ_WAIT"].encode(tx_sem_wait=1, tx_sem=5, rx_slot=1))
    node.sems[5] = 2
    node.set("ERR_RX_UNEXPECTED", 4)
    node.status_script = [status(fault=1, fault_cause=SeqFault.NETWORK)]
    with pytest.raises(NodeFault) as info:
        drv.wait_done(timeout_s=5)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg == ("node 3: fault NETWORK at instruction 12; 17 dispatched; waiting: TX on sem 5 (= 2), "
                   "RX on a free receive slot; errors: RX_UNEXPECTED=4")
    assert info.value.cause is SeqFault.NETWORK and info.value.pc == 12


def test_wait_done_times_out_in_seconds(node):
    drv = SyncDriver(node)
    node.set("SEQ_WAIT", REGISTERS["SEQ_WAIT"].encode(ex_sem_wait=1, ex_sem=0))
    node.status_script = [status(running=1)]
    with pytest.raises(DriverTimeout) as info:
        drv.wait_done(timeout_s=0.01)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith("timed out after 0.01 s waiting for the program: node 0: running; "
                                      "0 dispatched; waiting: EX on sem 0 (= 0)")


def test_indexed_state(node):
    drv = SyncDriver(node)
    node.sems[:4] = [7, 0, 65535, 1]
    node.set("SEQ_CAPS", REGISTERS["SEQ_CAPS"].encode(num_sems=4))
    assert drv.read_sems() == [7, 0, 65535, 1]
    node.dir = {2: ReplicaState.VALID, 5: ReplicaState.DRAINING}
    assert drv.read_directory([2, 5, 9]) == {2: ReplicaState.VALID, 5: ReplicaState.DRAINING,
                                             9: ReplicaState.INVALID}
    node.perf = {int(PerfCounter.CYCLES): 0x1_2345_6789, int(PerfCounter.MAC_BEATS): 42}
    perf = drv.read_perf()
    assert perf[PerfCounter.CYCLES] == 0x1_2345_6789 and perf[PerfCounter.MAC_BEATS] == 42
    assert set(perf) == set(PerfCounter)
