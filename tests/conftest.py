import pytest


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    """A tiny-model checkpoint written by ``mcf golden random-checkpoint`` (seed 4), read only by
    the tests of the session that run commands on it (one per xdist worker)."""
    from mcf.sw import cli
    ck = tmp_path_factory.mktemp("tiny-ck") / "ck"
    assert cli.main(["golden", "random-checkpoint", "--model", "tiny", "--out", str(ck), "--seed", "4"]) == 0
    return ck


@pytest.fixture
def build_dir(tmp_path):
    """A private build directory per test (pytest-xdist workers never share one)."""
    return tmp_path / "build"


@pytest.fixture(scope="session")
def verilator_cache(tmp_path_factory, worker_id):
    """Verilator builds shared by the tests of one session (``run_cocotb(..., cache_dir=)``): in
    pytest's temporary folder of the session, which every xdist worker's lies in; a build is
    keyed by its Verilog and locked while it is made, so workers share it.  ``MCF_SIM_CACHE``
    (a folder) keeps them between sessions instead (a developer's repeated runs)."""
    import os
    from pathlib import Path
    if os.environ.get("MCF_SIM_CACHE"):
        return Path(os.environ["MCF_SIM_CACHE"])
    base = tmp_path_factory.getbasetemp()
    return (base if worker_id == "master" else base.parent) / "verilator-cache"


#: The longest tests of ``make test`` (seconds on 2 idle cores, fresh-clone CI of 3ea7932), started
#: before every other test so that the short ones fill the end of the run and no worker idles
#: while the other finishes a long test.  ``make test`` hands out tests one at a time in this
#: order (``--dist loadgroup --no-loadscope-reorder``: each test its own unit of work but for the
#: groups below), each worker keeping two or three queued: the first four go 0, 2 to one worker
#: and 1, 3 to the other.  The first pays the session's Verilator build of the tiny cluster (make
#: -j on both cores) while the other worker runs the long tests that need no cluster; the
#: cluster's runs follow once it is built, so no worker waits on the build's lock (and none
#: converts the cluster's Verilog twice).  A test missing here (renamed, deleted) only loses its
#: place: the rest run in collection order.
LONG_FIRST = [
    "tests/hw/test_node.py::test_two_nodes_run_programs",                                   # 148 (the build)
    "tests/hw/test_registry.py::test_lint_and_icarus[node]",                                # 143
    "tests/hw/nic/test_depth.py::test_nic_meets_the_depth_budget",                          # 101
    "tests/hw/compute/exec/test_unit.py::test_unit_cocotb",                                 # 92
    "tests/hw/eth/test_eth_node.py::test_mars_over_ethernet",                               # 81
    "tests/sim/benchmarks/test_bench_compute.py::test_bench_engine_writes_what_it_prints",  # 57
    "tests/boards/test_kr260.py::test_board_build_dry_run_with_the_real_node",              # 39
    "tests/hw/compute/exec/test_scores.py::test_scores_cocotb",                             # 39
    "tests/hw/nic/test_top.py::test_cluster_cocotb[full_mesh]",                             # 37
    "tests/hw/eth/test_port.py::test_port_loopback",                                        # 35
    "tests/hw/test_registry.py::test_lint_and_icarus[node-{'model': 'tiny'}]",              # 35
    "tests/sw/commands/test_synth.py::test_sum_of_blocks_in_yosys",                         # 34
    "tests/hw/compute/exec/test_movers.py::test_movers_cocotb",                             # 32
    "tests/hw/compute/exec/test_pv.py::test_pv_cocotb",                                     # 32
    "tests/hw/compute/test_dot_array.py::test_yosys_maps_packed_pairs_to_dsp48e2",          # 30
    "tests/hw/nic/test_top.py::test_cluster_cocotb[ring]",                                  # 29
    "tests/hw/test_registry.py::test_lint_and_icarus[compute-{'mac_rows': 16, 'mac_lanes': 16}]",  # 21
    # on the cluster build (the first of them waits for it if the build is not done yet)
    "tests/sim/rtlcluster/test_backend.py::test_rtl_cluster_runs_the_tiny_model_bit_exact[2-mars-16-4-8-2-0.0]",
    "tests/sim/rtlcluster/test_backend.py::test_rtl_cluster_runs_the_tiny_model_bit_exact[2-ring-8-2-None-0-0.25]",
    "tests/sim/rtlcluster/test_backend.py::test_rtl_cluster_runs_the_tiny_model_bit_exact[4-mars-16-2-6-1-0.0]",
    "tests/sim/rtlcluster/test_backend_kvtier.py::test_prefix_stored_by_one_rtl_run_loads_into_another_bit_exact",
    "tests/sim/rtlcluster/test_backend.py::test_a_transformers_checkpoint_of_another_shape_runs_on_the_tiny_build",
    "tests/sim/rtlcluster/test_backend.py::test_mcf_run_rtl_equals_golden_generate",
    "tests/sim/rtlcluster/test_backend.py::test_rtl_cluster_runs_the_tiny_model_bit_exact[3-zigzag-8-2-None-0-0.0]",
    "tests/sim/rtlcluster/test_backend.py::test_a_dropped_packet_ends_on_the_watchdog",
    "tests/sim/rtlcluster/test_backend.py::test_rtl_cluster_runs_tensor_parallel_bit_exact",
    "tests/sim/rtlcluster/test_backend.py::test_rtl_cluster_splits_the_tensor_parallel_decode_attention",
]


def _module_fixtures(item) -> bool:
    """Does ``item`` use a module-scoped fixture (set up once per module and worker)?"""
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    return any(d and d[-1].scope == "module" for d in defs.values())


@pytest.hookimpl(tryfirst=True)           # before xdist's, which reads the groups
def pytest_collection_modifyitems(config, items):
    """``LONG_FIRST`` first, in its order; every other test after them in collection order (a
    stable sort).  The tests of a module with a module-scoped fixture (the SFP board build of
    tests/boards/test_eth10g.py: 21 s) form one group (``xdist_group``), run by one worker, so the
    fixture is set up once, not once per worker."""
    rank = {nodeid: k for k, nodeid in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))
    for item in items:
        if item.nodeid not in rank and _module_fixtures(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
