"""``mcf bench dma --json``: the loader and writer reach >= 90% of the bus peak (small config)."""
import json

import pytest

from mcf.sw.cli import main


@pytest.mark.cocotb
def test_bench_dma_json(capsys):
    assert main(["bench", "dma", "--json", "--data-width", "64", "--buffer-bytes", "1024",
                 "--descriptors", "4", "--store-bytes", "4096"]) == 0
    figures = json.loads(capsys.readouterr().out)
    for engine in ("loader", "writer"):
        f = figures[engine]
        assert f["peak_bytes_per_cycle"] == 8
        assert f["bytes_per_cycle"] == pytest.approx(f["utilization"] * 8, rel=1e-3)
        assert f["utilization"] >= 0.9, (engine, f)
    assert figures["loader"]["max_reads_in_flight"] >= 2


def test_bench_dma_refuses_one_descriptor(capsys):
    assert main(["bench", "dma", "--descriptors", "1"]) == 2
    assert "descriptors" in capsys.readouterr().err
