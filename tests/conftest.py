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
