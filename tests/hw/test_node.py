"""The node top: construction, and a MARS plan's KV movement on two RTL nodes via the driver."""
import pytest

from mcf.hw.node import Node, NodePair
from mcf.sim.runner import run_cocotb

SMALL = dict(buffer_bytes=512, buffer_depth=64, reduce_beats=32, softmax_fan_in=0, reduce_slots=1,
             route_entries=16, desc_depth=4, payload_depth=64, meta_queue_depth=16, desc_queue_depth=16)


def test_construction():
    node = Node(64, 2, **SMALL)
    assert len(node.tx) == len(node.rx) == 2 and len(node.m_axi.rdata) == 64


@pytest.mark.cocotb
def test_mars_kv_moves_between_two_nodes(build_dir):
    run_cocotb(NodePair(data_width=64, **SMALL), "mcf.sim.node.test_node", build_dir,
               testcase="mars_kv_moves",
               params={"seq": 16, "chunk": 4, "budget_tokens": 12, "desc_queue_depth": SMALL["desc_queue_depth"]})
