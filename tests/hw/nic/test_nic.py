"""NIC: construction, the Python routing model, cocotb benches (one NIC; four NICs in a mesh)."""
import pytest

from mcf.hw.nic.nic import Nic
from mcf.spec import ErrorCause
from mcf.sim.runner import run_cocotb

SMALL = dict(buffer_depth=64, desc_depth=8, route_entries=256, reduce_slots=4, reduce_beats=32,
             softmax_fan_in=4, state_words=6)


def test_construction():
    nic = Nic(64, net_ports=3, **SMALL)
    assert len(nic.rx) == len(nic.tx) == 3 and len(nic.errors) == len(ErrorCause)
    assert len(Nic(128, net_ports=2, **SMALL).local_out.tdata) == 128


@pytest.mark.parametrize("kw", [dict(buffer_depth=100), dict(net_ports=0), dict(net_ports=17),
                                dict(route_entries=5000), dict(reduce_beats=3),
                                dict(buffer_depth=32, reduce_beats=64), dict(softmax_fan_in=3)])
def test_bad_params(kw):
    with pytest.raises(ValueError):
        Nic(64, **kw)


@pytest.mark.cocotb
@pytest.mark.parametrize("width", [64, 128])
def test_nic_traffic_cocotb(width, build_dir):
    params = dict(data_width=width, net_ports=3, packets=250, reductions=12, **SMALL)
    nic = Nic(width, net_ports=3, **SMALL)
    run_cocotb(nic, "mcf.sim.nic.test_nic", build_dir, testcase="traffic", params=params)


MESH = SMALL


@pytest.mark.cocotb
@pytest.mark.parametrize("topology", ["full", "ring"])
def test_mesh_cocotb(topology, build_dir):
    """Four nodes: full mesh (one hop, ALL_REDUCE by every member) and ring (two hops,
    reduction trees that reduce on the way)."""
    from mcf.hw.nic.top import NicMesh
    params = dict(nodes=4, data_width=64, packets_per_node=40, reductions=6, topology=topology, **MESH)
    mesh = NicMesh(4, 64, topology=topology, meta_queue_depth=8, payload_depth=64, **MESH)
    run_cocotb(mesh, "mcf.sim.nic.test_mesh", build_dir, testcase="mesh", params=params)


@pytest.mark.slow
@pytest.mark.cocotb
@pytest.mark.parametrize("width", [64, 128])
def test_nic_traffic_large(width, build_dir):
    """Thousands of packets through one NIC (two seeds)."""
    nic = Nic(width, net_ports=3, **SMALL)
    for seed in (21, 22):
        params = dict(data_width=width, net_ports=3, packets=1500, reductions=100, seed=seed, **SMALL)
        run_cocotb(nic, "mcf.sim.nic.test_nic", build_dir / str(seed), testcase="traffic", params=params)


@pytest.mark.slow
@pytest.mark.cocotb
@pytest.mark.parametrize("width,topology", [(64, "ring"), (128, "full")])
def test_mesh_large(width, topology, build_dir):
    """A thousand packets of a 4-node plan through four NICs."""
    from mcf.hw.nic.top import NicMesh
    params = dict(nodes=4, data_width=width, packets_per_node=250, reductions=30, seed=5,
                  topology=topology, **MESH)
    mesh = NicMesh(4, width, topology=topology, meta_queue_depth=8, payload_depth=64, **MESH)
    run_cocotb(mesh, "mcf.sim.nic.test_mesh", build_dir, testcase="mesh", params=params)
