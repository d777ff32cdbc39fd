"""The runtime's ``rtl`` backend (sim/rtlcluster/backend.py): a Node top that cannot run programs
is refused up front in one line, naming what is missing (never simulated into fake results);
options the RTL cluster cannot honour are one line too."""
from __future__ import annotations

import pytest

from mcf.hw.node import Node
from mcf.sim.rtlcluster import backend as rtl
from mcf.spec.node import NodeConfig
from mcf.sw import cli
from mcf.sw.errors import UserError


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    ck = tmp_path_factory.mktemp("rtl") / "ck"
    assert cli.main(["golden", "random-checkpoint", "--model", "tiny", "--out", str(ck), "--seed", "4"]) == 0
    return ck


def test_a_node_without_execute_unit_is_refused():
    """Node() alone (no execute unit, or no sequencer at all) cannot run the runtime's programs."""
    with pytest.raises(UserError, match="cannot run the runtime's programs"):
        rtl.RtlBackend(2, NodeConfig.tiny(), 1 << 16, node_class=Node)


def _one_line(capsys, argv) -> str:
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mcf: error: --backend rtl") and len(err.splitlines()) == 1, err
    return err


def test_cli_refusals_are_one_line(checkpoint, capsys, monkeypatch):
    base = ["run", "--backend", "rtl", "--checkpoint", str(checkpoint), "--tokens", "1,2,3"]
    assert "switch" in _one_line(capsys, base + ["--nodes", "2", "--topology", "ring"])
    monkeypatch.setattr(rtl, "node_factory", lambda: Node)     # a Node top without execute unit
    assert "cannot run the runtime's programs" in _one_line(capsys, base + ["--nodes", "2"])

