"""``mcf bench compute --json`` prints the figures the issue asks for."""
import json
import subprocess
import sys

import pytest


@pytest.mark.cocotb
def test_bench_compute_json():
    out = subprocess.run([sys.executable, "-m", "mcf", "bench", "compute", "--json", "--mac-rows", "2",
                          "--mac-lanes", "8", "--inputs", "64", "--tiles", "4", "--tokens", "2", "--no-layer"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout)
    for key in ("mac_utilization", "macs_per_cycle", "cycles_per_layer"):
        assert key in figures
    assert figures["mac_utilization"] >= 0.9
    assert figures["macs_per_cycle"] >= 0.9 * 16
    assert figures["qwen2.5-1.5b"]["cycles_per_layer_decode"] > figures["cycles_per_layer_decode"]
    assert "exec_layer" not in figures        # --no-layer; tests/hw/compute/exec/test_unit.py checks its figures


def test_bench_compute_bad_args():
    out = subprocess.run([sys.executable, "-m", "mcf", "bench", "compute", "--mac-lanes", "6"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--mac-lanes" in out.stderr
