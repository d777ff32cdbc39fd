"""Network and engine of the cluster model against hand-derived numbers.

The expected values are computed here from the KR260 profile's published figures (10 Gb/s x 0.95,
tau 2 us, 16 B Meta header per 1024 B packet; 64 x 32 MACs x 2 ops x 250 MHz x compute_efficiency;
19.2 GB/s x ddr_efficiency, both measured by `mcf bench compute`), not by calling the code under test.
"""
from pathlib import Path

import pytest
import yaml
import simpy

from mcf.sim.cluster.resources import Network, Node
from mcf.sw.mars.profile import load_profile
from mcf.spec.topology import Topology

PROF = load_profile("kr260")
BW = 10e9 / 8 * 0.95            # payload bytes/s per port and direction
TAU = 2e-6
PAYLOAD = 1 << 20               # 1 MiB = 1024 packets of 1024 B
WIRE = PAYLOAD + 1024 * 16      # one 16-byte Meta header per packet
# the two efficiencies as the engine bench measured and wrote them (`mcf bench compute --model
# qwen2.5-1.5b --write-profile`): inputs read from the YAML, not from the code under test
_YAML = yaml.safe_load((Path(__file__).resolve().parents[3] / "sw/mars/profiles/kr260.yaml").read_text())
P_NODE = 64 * 32 * 2 * 250e6 * _YAML["compute_efficiency"]
DDR = 19.2e9 * _YAML["ddr_efficiency"]
SETUP = 32 / 250e6


def _net(kind, n):
    env = simpy.Environment()
    return env, Network(env, Topology(kind, n), PROF, packet_payload=1024)


def test_profile_is_the_published_kr260():
    assert PROF.bw_eff == pytest.approx(BW)
    assert PROF.p_node == pytest.approx(P_NODE)
    assert PROF.ddr_Bps == pytest.approx(DDR)
    assert PROF.link_latency_s == TAU


@pytest.mark.parametrize("kind,n,src,dst,hops", [("switch", 4, 0, 3, 1), ("ring", 8, 0, 3, 3),
                                                  ("ring", 8, 0, 6, 2), ("grid", 16, 0, 15, 6)])
def test_single_transfer_on_idle_links(kind, n, src, dst, hops):
    env, net = _net(kind, n)
    arr = net.transmit(src, [dst], PAYLOAD)
    assert arr[dst] == pytest.approx(WIRE / BW + hops * TAU, rel=1e-12)
    assert net.payload_bytes == PAYLOAD
    assert net.link_wire_bytes == pytest.approx(WIRE * (2 if kind == "switch" else hops))


def test_two_flows_sharing_a_link_take_twice_as_long():
    env, net = _net("switch", 4)
    a = net.transmit(0, [2], PAYLOAD)[2]       # both need node 2's downlink
    b = net.transmit(1, [2], PAYLOAD)[2]
    assert a == pytest.approx(WIRE / BW + TAU)
    assert max(a, b) == pytest.approx(2 * WIRE / BW + TAU)


def test_disjoint_flows_do_not_interfere():
    env, net = _net("switch", 4)
    a = net.transmit(0, [1], PAYLOAD)[1]
    b = net.transmit(2, [3], PAYLOAD)[3]
    assert a == b == pytest.approx(WIRE / BW + TAU)


def test_ring_flows_sharing_a_hop():
    # on a ring 0->2 and 1->2 both cross link (1, port 0); 0->1 does not conflict with 1->2's
    # second half, but the shared link serialises the two flows
    env, net = _net("ring", 6)
    a = net.transmit(0, [2], PAYLOAD)[2]
    b = net.transmit(1, [2], PAYLOAD)[2]
    assert a == pytest.approx(WIRE / BW + 2 * TAU)
    assert b == pytest.approx(2 * WIRE / BW + TAU)


def test_switch_multicast_sends_once_and_copies_to_each_downlink():
    env, net = _net("switch", 8)
    arr = net.transmit(0, [1, 2, 3], PAYLOAD)
    assert all(t == pytest.approx(WIRE / BW + TAU) for t in arr.values())
    assert net.payload_bytes == 3 * PAYLOAD
    assert net.link_wire_bytes == pytest.approx(4 * WIRE)          # 1 uplink + 3 downlinks


def test_transfer_in_simpy_time():
    env, net = _net("switch", 2)
    done = []

    def proc():
        yield env.timeout(1.0)
        yield from net.send(0, [1], PAYLOAD)
        done.append(env.now)

    env.process(proc())
    env.run()
    assert done[0] == pytest.approx(1.0 + WIRE / BW + TAU)


def test_compute_bound_op_takes_flops_over_throughput():
    env = simpy.Environment()
    node = Node(env, 0, PROF)
    flops = 1e12
    env.process(node.op(flops, 1e6))                  # 1 MB of DDR: far below the compute time
    env.run()
    assert env.now == pytest.approx(flops / P_NODE + SETUP, rel=1e-12)


def test_ddr_bound_op_takes_bytes_over_bandwidth():
    env = simpy.Environment()
    node = Node(env, 0, PROF)
    nbytes = 655e6                                    # ~ Qwen2.5-1.5B INT4 layer weights
    env.process(node.op(1e6, nbytes))
    env.run()
    assert env.now == pytest.approx(nbytes / DDR + SETUP, rel=1e-12)


def test_engine_ops_are_sequential_and_memory_is_tracked():
    env = simpy.Environment()
    node = Node(env, 0, PROF)

    def proc():
        yield from node.op(P_NODE, 0)                 # 1 s
        node.alloc(100)
        node.alloc(50, staging=True)
        yield from node.op(P_NODE, 0)
        node.free(50, staging=True)

    env.process(proc())
    env.run()
    assert env.now == pytest.approx(2 + 2 * SETUP)
    assert node.peak_total == 150 and node.pool == 100 and node.staging == 0


def test_ring_pass_kv_store_and_forward_vs_cut_through():
    """One KV group walking a 4-node logical ring on idle switch links: store and forward takes
    3 x (wire / BW + tau) to reach the last node; cut-through 1 x wire / BW + 2 packet times +
    3 tau (each forwarder starts once the first packet is in)."""
    import numpy as np
    from mcf.sim.cluster import make_plan
    from mcf.sim.cluster.prefill import PrefillSim

    # 2 chunks of 1024 tokens on 4 nodes: in step 1 block 0 (owner 0) walks 0 -> 1 -> 2 -> 3
    plan = make_plan("qwen2.5-1.5b", 2048, 4, "ring", chunk=1024)
    nbytes = 1024 * 7168
    wire = nbytes + (nbytes // 1024) * 16
    pkt = (1024 + 16) / BW
    for mode, last in (("store", 3 * (wire / BW + TAU)), ("cut-through", wire / BW + 2 * pkt + 3 * TAU)):
        sim = PrefillSim(plan, ring_forward=mode, lookahead=1)
        sim.run()
        arrivals = sorted(at for at, _, _ in sim.ring_sched[1][3])
        start = sim.prod_time[0]          # owner 0 wrote block 0 (lookahead 1: step 1 may start early)
        assert np.isclose(arrivals[0] - start, last, rtol=1e-9), mode
