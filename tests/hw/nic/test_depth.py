"""Logic depth of the NIC against the 250 MHz budget (docs/timing.md): one real Yosys run of the
NIC top (smaller buffers and route table than the registry default: the same logic, shorter
counters) through ``mcf synth nic --json``, whose timing figures the test reads."""
import json

from mcf.sw.cli import main
from mcf.sw.timing import BUDGET_LEVELS

SMALL = ["route_entries=256", "buffer_depth=64", "desc_depth=8", "reduce_beats=32", "state_words=34"]


def test_nic_meets_the_depth_budget(capsys):
    args = ["synth", "nic", "--json", "--paths", "5"]
    for p in SMALL:
        args += ["-p", p]
    assert main(args) == 0
    t = json.loads(capsys.readouterr().out)["timing"]
    assert t["budget_levels"] == BUDGET_LEVELS and t["clock_mhz"] == 250
    assert t["endpoints"] > 5000
    # Every unit of the NIC (ingress, egress, reduction engine, their FIFOs) and the top.
    units = {u for u in t["by_unit"] if u.split(".")[0].rstrip("0123456789") in ("ingress", "egress")}
    assert {"ingress0", "egress0", "reduce"} <= units | set(t["by_unit"]), t["by_unit"]
    over = {u: lv for u, lv in t["by_unit"].items() if lv > BUDGET_LEVELS}
    assert not over and t["max_levels"] <= BUDGET_LEVELS, (over, t["worst_paths"])
    assert t["endpoints_over_budget"] == 0
