"""The simulated node's register block (sw/golden/node/regs.py) under the real driver
(``mcf.sw.driver.SyncDriver``): identity, configuration, the route table, programs started and
waited for, and a fault or a stall reported in one line with the node, cause and waits."""
import pytest

from mcf.spec import isa
from mcf.spec.isa import PerfCounter, SeqFault
from mcf.spec.node import NodeConfig
from mcf.spec.plan import ReplicaState
from mcf.sw.driver import DriverError, NodeFault, SyncDriver
from mcf.sw.golden.node import ClusterSim, NodeRegisters, RegisterError

CFG = NodeConfig.tiny()


def setup(nodes=1):
    c = ClusterSim(CFG, nodes, ddr_bytes=1 << 16)
    drivers = [SyncDriver(NodeRegisters(c, i, poll_cycles=64)) for i in range(nodes)]
    for i, d in enumerate(drivers):
        d.check_id()
        d.configure(node_id=i, num_nodes=nodes, memory=c.nodes[i].ddr)
    return c, drivers


def program(c, drv, node, prog):
    mem = c.nodes[node].ddr
    mem.put(0, isa.encode_program(prog))
    drv.load_program(mem.phys(0), len(prog))


def test_configuration_reaches_the_node():
    c, (drv,) = setup()
    n = c.nodes[0]
    assert (n.window_base, n.window_size) == (n.ddr.phys_base, n.ddr.size)
    drv.write_route(7, {"port_mask": 1, "local": 1, "fan_in": 3, "valid": 1})
    assert drv.read_route(7) == {"port_mask": 1, "local": 1, "fan_in": 3, "reserved": 0, "valid": 1}
    assert n.routes[7].fan_in == 3
    assert drv.seq_caps()["num_sems"] == CFG.num_sems
    with pytest.raises(RegisterError):
        drv.write32("META_PUSH", 1)


def test_a_program_runs_to_done_with_its_counters():
    c, (drv,) = setup()
    program(c, drv, 0, [isa.Dir(block=3, count=2, stride=4, state=ReplicaState.VALID),
                        isa.Sync(on=isa.Queue.EX, sig=1, sig_sem=2), isa.End()])
    drv.start()
    st = drv.wait_done(timeout_s=5)
    assert st["done"] and not st["fault"]
    assert drv.read_directory([3, 7, 11]) == {3: ReplicaState.VALID, 7: ReplicaState.VALID, 11: ReplicaState.INVALID}
    perf = drv.read_perf()
    assert perf[PerfCounter.RETIRED_EX] == 3 and perf[PerfCounter.CYCLES] >= 3
    assert drv.read_sem(2) == 1
    assert drv.irq_pending()["seq_done"] == 1


def test_a_fault_is_one_line_with_cause_instruction_and_errors():
    c, (drv,) = setup()
    n = c.nodes[0]
    program(c, drv, 0, [isa.Sync(on=isa.Queue.EX), isa.Load(ddr=n.ddr.phys_base + n.ddr.size, spad=0, beats=1,
                                                            row_beats=0), isa.End()])
    drv.start()
    with pytest.raises(NodeFault) as e:
        drv.wait_done(timeout_s=5)
    assert e.value.cause == SeqFault.OUT_OF_WINDOW and e.value.pc == 1
    assert "node 0: fault OUT_OF_WINDOW at instruction 1" in str(e.value) and "\n" not in str(e.value)


def test_a_stall_ends_in_the_watchdog_and_says_what_it_waits_on():
    c, (drv,) = setup()
    program(c, drv, 0, [isa.Sync(on=isa.Queue.TX, wait_sem=5, wait_cnt=1), isa.End()])
    drv.start()
    with pytest.raises(NodeFault, match="WATCHDOG"):
        drv.wait_done(timeout_s=5)
    drv.set_watchdog(0)                                  # no watchdog: the bounded wait says why
    drv.start()
    with pytest.raises(DriverError, match=r"timed out waiting for the program: .*no progress for the last \d+(\.\d+)? s.*node 0: running.*TX on sem 5 \(= 0\)"):
        drv.wait_done(timeout_s=0.2)
