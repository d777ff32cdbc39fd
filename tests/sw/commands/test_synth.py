"""``mcf synth``: resource counting (fast) and one real Yosys run on a small block (slow)."""
import json

import pytest

from mcf.sw.cli import main
from mcf.sw.commands.synth import K26, count


def test_count_from_cells():
    cells = {"LUT2": 10, "LUT6": 5, "INV": 2, "RAM32M16": 3, "SRLC32E": 4, "FDRE": 100, "FDSE": 3,
             "RAMB36E2": 2, "RAMB18E2": 3, "URAM288": 1, "DSP48E2": 7, "CARRY8": 9, "BUFG": 1}
    assert count(cells) == {"LUT": 17 + 24 + 4, "LUT_logic": 17, "LUT_memory": 28, "FF": 103,
                            "BRAM36": 3.5, "URAM": 1, "DSP": 7}
    assert K26 == {"LUT": 117_120, "FF": 234_240, "BRAM36": 144, "URAM": 64, "DSP": 1_248}


def test_unknown_block(capsys):
    assert main(["synth", "no_such_block"]) == 2
    assert "unknown block" in capsys.readouterr().err


@pytest.mark.slow
def test_synth_small_block(capsys):
    """A 32-bit writer: some LUTs and FFs, no block RAM (the first yowasp run is slow)."""
    assert main(["synth", "dma_writer", "-p", "data_width=32", "-p", "max_outstanding=2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    res = out["resources"]
    assert out["block"] == "dma_writer" and out["params"]["data_width"] == 32
    assert 50 < res["LUT"] < 5000 and 50 < res["FF"] < 5000
    assert res["BRAM36"] == 0 and res["DSP"] == 0
