"""The simulated cluster (sw/golden/node/cluster.py, network.py): messages cut into packets and
matched to posted receives by tag, credits, multicast, the NIC's reductions (the golden fold),
drops counted by cause, and runs that stop report exactly why (fault, deadlock)."""
import numpy as np
import pytest

from mcf.spec import isa
from mcf.spec.isa import PerfCounter, SeqFault
from mcf.spec.node import NodeConfig
from mcf.spec.packet import Collective, Op, ReduceOp, Stage
from mcf.spec.regmap import ErrorCause
from mcf.spec.topology import Topology
from mcf.sw.golden import fixed as fx
from mcf.sw.golden.nic import RouteEntry
from mcf.sw.golden.node import ClusterSim, JitterCosts
from mcf.sw.mars.lower import RouteTables

CFG = NodeConfig.tiny(softmax_fan_in=4, reduce_slots=2, route_entries=64)
OUT, IN = 0x2000, 0x6000


def cluster(n, costs=None, topology="switch"):
    c = ClusterSim(CFG, n, topology, costs=costs, ddr_bytes=1 << 16)
    c.open_window()
    rt = RouteTables(Topology(topology, n), CFG.route_entries)
    return c, rt


def load_routes(c, rt):
    for node, table in zip(c.nodes, rt.tables):
        node.routes = {rid: RouteEntry(**e) for rid, e in table.items()}


def send(**kw):
    base = dict(stage=Stage.PREFILL, mop=Op.TENSOR, collective=Collective.UNICAST, reduce_op=ReduceOp.NONE, seq=0)
    return isa.Send(**{**base, **kw})


def run_all(c, programs):
    for i, p in enumerate(programs):
        c.load_program(i, list(p) + [isa.End()], addr=c.nodes[i].ddr.phys_base)
    c.start()
    return c.run(max_cycles=1 << 20)


@pytest.mark.parametrize("costs", [None, JitterCosts(3)])
def test_messages_credits_and_multicast(costs, rng):
    c, rt = cluster(3, costs)
    b = [n.ddr.phys_base for n in c.nodes]
    msg = rng.integers(0, 256, 3 * CFG.max_payload + 40, dtype=np.uint8).tobytes()   # 4 packets
    c.nodes[0].ddr.device_write(b[0] + OUT, msg)
    group = rt.multicast(0, [1, 2])
    load_routes(c, rt)
    recv = dict(tag=77, length=len(msg), done_sem=4, credit=1, credit_dst=0, credit_route=rt.unicast(0))
    progs = [[isa.Sync(on=isa.Queue.TX, wait_sem=1, wait_cnt=1),
              send(ddr=b[0] + OUT, length=len(msg), collective=Collective.MULTICAST, dst=1, route_id=group, tag=77,
                   wait_sem=2, wait_cnt=1)],
             [isa.Recv(ddr=b[1] + IN, credit_sem=1, **recv), isa.Sync(on=isa.Queue.EX, wait_sem=4, wait_cnt=1),
              isa.Credit(dst=2, route_id=rt.unicast(2), sem=9, count=5)],
             [isa.Recv(ddr=b[2] + IN, credit_sem=2, **recv), isa.Sync(on=isa.Queue.EX, wait_sem=9, wait_cnt=5)]]
    r = run_all(c, progs)
    assert r.ok, r.message
    for i in (1, 2):
        assert c.nodes[i].ddr.device_read(b[i] + IN, len(msg)) == msg
        assert c.nodes[i].perf[PerfCounter.NET_RX_BYTES] == len(msg)
    assert c.nodes[0].perf[PerfCounter.NET_TX_BYTES] == len(msg)
    assert not any(v for n in c.nodes for v in n.errors.values())


@pytest.mark.parametrize("op", [ReduceOp.MAX, ReduceOp.SOFTMAX_MERGE])
def test_reductions_fold_in_source_order(op, rng):
    c, rt = cluster(3)
    b = [n.ddr.phys_base for n in c.nodes]
    rows, d = 3, CFG.head_dim
    parts = []
    for i in range(3):
        if op == ReduceOp.MAX:
            w = rng.integers(-(1 << 31), 1 << 31, rows * (d + 2))
        else:
            st = fx.State(rng.integers(-(1 << 20), 1 << 20, rows), rng.integers(1, 1 << 20, rows),
                          rng.integers(-(1 << 24), 1 << 24, (rows, d)))
            w = fx.encode_state(st).reshape(-1)
        parts.append(w.astype("<i4").tobytes())
        c.nodes[i].ddr.device_write(b[i] + OUT, parts[-1])
    route = rt.reduce(0)
    load_routes(c, rt)
    length = len(parts[0])
    contrib = dict(length=length, collective=Collective.REDUCE, reduce_op=op, mop=Op.PARTIAL_STATE, dst=0,
                   route_id=route, tag=5)
    progs = [[isa.Recv(tag=5, ddr=b[0] + IN, length=length, done_sem=0, credit=0, credit_dst=0, credit_route=0,
                       credit_sem=0, sig=1, sig_sem=3),
              send(ddr=b[0] + OUT, wait_sem=3, wait_cnt=1, **contrib), isa.Sync(on=isa.Queue.EX, wait_sem=0, wait_cnt=1)],
             [send(ddr=b[1] + OUT, **contrib)], [send(ddr=b[2] + OUT, **contrib)]]
    r = run_all(c, progs)
    assert r.ok, r.message
    got = np.frombuffer(c.nodes[0].ddr.device_read(b[0] + IN, length), "<i4")
    words = [np.frombuffer(p, "<i4") for p in parts]
    want = fx.reduce_max(words) if op == ReduceOp.MAX else \
        fx.fold_states([w.reshape(rows, d + 2) for w in words]).reshape(-1)
    assert np.array_equal(got, want)


def test_a_packet_nobody_waits_for_is_dropped_and_stops_the_node():
    c, rt = cluster(2)
    b = [n.ddr.phys_base for n in c.nodes]
    load_routes(c, rt)
    c.nodes[1].rx_wait = 50
    r = run_all(c, [[send(ddr=b[0], length=64, dst=1, route_id=rt.unicast(1), tag=9)],
                    [isa.Sync(on=isa.Queue.EX, wait_sem=0, wait_cnt=1)]])
    assert r.status == "fault" and c.nodes[1].errors[ErrorCause.RX_UNEXPECTED] == 1
    assert c.nodes[1].fault_cause == SeqFault.NETWORK and "RX_UNEXPECTED" in r.message and "tag 9" in r.message


def test_a_bad_route_is_counted_by_the_nic():
    c, rt = cluster(2)
    load_routes(c, rt)
    r = run_all(c, [[send(ddr=c.nodes[0].ddr.phys_base, length=8, dst=1, route_id=60, tag=1)], []])
    assert r.status == "fault" and c.nodes[0].errors[ErrorCause.BAD_ROUTE] == 1
    assert "BAD_ROUTE" in r.message


def test_a_deadlock_names_every_wait():
    c, rt = cluster(2)
    load_routes(c, rt)
    c.nodes[1].watchdog = 0
    r = run_all(c, [[isa.Sync(on=isa.Queue.TX, wait_sem=6, wait_cnt=2)],
                    [isa.Recv(tag=3, ddr=c.nodes[1].ddr.phys_base, length=64, done_sem=1, credit=0, credit_dst=0,
                              credit_route=0, credit_sem=0)]])
    assert r.status == "deadlock"
    assert "node 0: running" in r.message and "TX #0 SYNC waits for sem 6 >= 2 (it is 0)" in r.message
    assert "node 1: running" in r.message and "END waits for 1 receives (tags [3])" in r.message
    assert c.nodes[0].state == "fault" and c.nodes[0].fault_cause == SeqFault.WATCHDOG
    assert c.nodes[1].running                                    # its watchdog is off
