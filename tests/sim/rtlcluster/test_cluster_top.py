"""The cluster top (sim/rtlcluster/top.py): N nodes and the switch in one component, the node's
ports repeated per node slot, the switch with one port per node.

What runs on the top is proven elsewhere, on the very build every RTL run shares (4 node slots):
the PS runtime's programs on 1, 2 and 4 nodes through the switch, bit-exact against the golden
model, with the switch's link counters equal to the bytes the ISA simulator sends and the
faults (dropped, corrupted packet; out-of-window access; illegal instruction) in
tests/sim/rtlcluster/test_backend.py and tests/hw/test_node.py; the switch's own contract
(unicast, multicast once per holder, drops, corruptions, every counter) in test_switch.py; the
PS debug path (Metas + descriptors moving a MARS plan's KV) in tests/hw/test_node.py.
"""
import pytest

from mcf.sim.rtlcluster.backend import tiny_cluster_config
from mcf.sim.rtlcluster.top import ClusterTop

#: The nodes the RTL runs build: the tiny model's (one build for every cluster size up to 4).
CONFIG = tiny_cluster_config()


def test_construction():
    top = ClusterTop(3, CONFIG)
    assert len(top.s_axil) == len(top.m_axi) == len(top.irq) == 3
    assert top.node.config.net_ports == 1 and top.switch.ports == 3
    with pytest.raises(ValueError, match="1..16"):
        ClusterTop(0, CONFIG)
