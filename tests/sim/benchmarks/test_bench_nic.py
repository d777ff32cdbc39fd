"""``mcf bench nic --json`` prints the figures the issue asks for (a short run)."""
import json
import subprocess
import sys

import pytest


@pytest.mark.cocotb
def test_bench_nic_json():
    out = subprocess.run([sys.executable, "-m", "mcf", "bench", "nic", "--json", "--packet-beats", "16",
                          "--packets", "4", "--reduce-beats", "8"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("beats_per_cycle", "latency_cycles", "reduce_elements_per_cycle"):
        assert key in figures
    # 16 payload + 2 header beats, 2 decode cycles per packet: 18/20 at best.
    assert 0.85 <= figures["beats_per_cycle"] <= 1.0
    assert 0 < figures["latency_cycles"] < 40
    assert 0 < figures["reduce_elements_per_cycle"] <= 2
