"""The Qwen2.5-1.5B node's resources and depth, kept in docs/bench by ``mcf synth node --write``."""
import json

from mcf.sw.commands.synth import K26


def test_the_qwen_node_record_is_of_todays_preset_and_in_the_docs():
    """``docs/bench/synth-node-qwen2.5-1.5b.json`` is what ``mcf synth node --model qwen2.5-1.5b
    --json --write`` printed (a sum-of-blocks run: each part of the node in its own Yosys run, tens
    of minutes on this machine, not in make test): it was made for today's Qwen preset and parts,
    its totals are the sums of its parts, its fit follows from its figures, and docs/timing.md
    shows its table."""
    from pathlib import Path

    from mcf.hw.node import NODE_PARTS
    from mcf.spec.node import NodeConfig
    from mcf.sw.commands.synth import BENCH_DIR, fit, markdown
    rec = json.loads((BENCH_DIR / "synth-node-qwen2.5-1.5b.json").read_text())
    assert rec["block"] == "node" and rec["params"]["model"] == "qwen2.5-1.5b"
    # max_group became a NodeConfig field after the record; the execute unit was built with 128 then
    config = {"max_group": 128, **rec["config"]}
    assert config == NodeConfig.qwen2_5_1_5b().as_dict(), (
        "the Qwen preset changed since the record: rerun `mcf synth node --model qwen2.5-1.5b --json --write`")
    assert rec["method"] == "sum-of-blocks" and [p["part"] for p in rec["blocks"]] == [*NODE_PARTS, "(top)"]
    for key in ("FF", "BRAM36", "URAM", "DSP", "LUT_memory"):
        parts = [p["resources"][key] for p in rec["blocks"]]
        if None in parts:      # a part stopped before any count: the sums unknown, the rest a lower bound
            assert rec["resources"][key] is None and rec["at_least"][key] == sum(v or 0 for v in parts), key
        else:
            assert rec["resources"][key] == sum(parts), key
    done = [p for p in rec["blocks"] if p["finished"]]
    assert rec["timing"]["max_levels"] == max(p["timing"]["max_levels"] for p in done)
    assert rec["timing"]["not_timed"] == [p["part"] for p in rec["blocks"] if not p["finished"]]
    assert rec["k26"] == K26
    if "at_least" not in rec:
        assert rec["fit"] == fit(rec["resources"])
    else:
        assert rec["fit"]["share"] == fit(rec["resources"])["share"]
    docs = (Path(__file__).resolve().parents[3] / "docs" / "timing.md").read_text()
    assert markdown(rec) in docs, "docs/timing.md does not show the record's table (mcf.sw.commands.synth.markdown)"
