"""``mcf bench compute --json`` prints the figures the issue asks for."""
import json
import subprocess
import sys
from pathlib import Path

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
    assert "[bench compute] building the 2x8 matrix unit" in out.stderr     # progress, not on stdout


def test_bench_compute_bad_args(capsys):
    out = subprocess.run([sys.executable, "-m", "mcf", "bench", "compute", "--mac-lanes", "6"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--mac-lanes" in out.stderr
    # --block pv-array on a node that builds no GEMM_PV (the tiny node: 4 array rows < VL 8); --write-profile
    # without the blocks it writes
    from mcf.sw.cli import main
    for extra, text in ((["--block", "pv-array"], "builds no GEMM_PV"),
                        (["--block", "prefill-array"], "--block prefill-array: this node builds no GEMM_PV"),
                        (["--block", "qk-array", "--write-profile"], "--write-profile needs"),
                        (["--block", "prefill-array", "--array-tokens-per-job", "5"],
                         "--array-tokens-per-job 5: 0 .. 4 (the unit's sm_rows=8)")):
        assert main(["bench", "compute", "--engine", "--model", "tiny", *extra]) == 2
        assert text in capsys.readouterr().err


# --- the engine bench writes the profile ---------------------------------------------------------------
def _profile_values(path):
    import yaml
    d = yaml.safe_load(Path(path).read_text())
    return d["compute_efficiency"], d["ddr_efficiency"]


def test_write_profile_replaces_two_figures_only(tmp_path):
    """write_profile on a copy of the KR260 profile: the two figures and their comment lines
    change, every other line stays; twice gives the same file; a profile without the key is refused."""
    from mcf.sim.benchmarks.compute import PROFILE, write_profile
    from mcf.sw.mars.profile import load_profile
    copy = tmp_path / "kr.yaml"
    # the profile as it was before its array fit (write_profile puts those lines in)
    text = PROFILE.read_text().splitlines()
    at = [i for i, line in enumerate(text) if line.startswith("attention_array_job_cycles")]
    if at:
        del text[at[0] - 2:at[0] + 3]                    # its two comment lines and the three fields
    copy.write_text("\n".join(text) + "\n")
    cal = {"compute_efficiency": 0.8765, "compute_efficiency_is": "what it is", "ddr_efficiency": 0.4321,
           "ddr_efficiency_is": "bytes over peak"}
    write_profile(copy, cal, "mcf bench compute --engine", "m", "4x8", date="2026-12-01")
    once = copy.read_text()
    assert _profile_values(copy) == (0.8765, 0.4321)
    assert "# MEASURED 2026-12-01 by `mcf bench compute --engine`:" in once
    before, after = load_profile(PROFILE).with_(attention_array_job_cycles=0.0, attention_array_key_cycles=0.0,
                                                attention_array_key_macs=0).to_dict(), load_profile(copy).to_dict()
    changed = {k for k in before if before[k] != after[k]} - {"name"}
    assert changed == {"compute_efficiency", "ddr_efficiency"}
    kept = [line for line in PROFILE.read_text().splitlines() if not line.startswith("#")
            and not line.startswith(("compute_efficiency", "ddr_efficiency", "attention_array_job_cycles",
                                     "attention_array_key_"))]
    assert all(line in once.splitlines() for line in kept)
    write_profile(copy, cal, "mcf bench compute --engine", "m", "4x8", date="2026-12-01")
    assert copy.read_text() == once
    # a run with the attention block writes its figure too, and only that one more
    write_profile(copy, {**cal, "attention_efficiency": 0.0123, "attention_efficiency_is": "attention"},
                  "mcf bench compute --engine", "m", "4x8", date="2026-12-01")
    after = load_profile(copy).to_dict()
    assert {k for k in before if before[k] != after[k]} - {"name"} == {"compute_efficiency", "ddr_efficiency",
                                                                         "attention_efficiency"}
    assert after["attention_efficiency"] == 0.0123
    # and a run with the prefill-array block its array figure (the path stays the profile's)
    write_profile(copy, {**cal, "attention_array_efficiency": 0.2345, "attention_array_efficiency_is": "array"},
                  "mcf bench compute --engine", "m", "4x8", date="2026-12-01")
    again = load_profile(copy).to_dict()
    assert {k for k in after if after[k] != again[k]} == {"attention_array_efficiency"}
    assert again["attention_array_efficiency"] == 0.2345 and again["attention_path"] == before["attention_path"]
    # and a run at two key counts its fit (new lines after attention_array_efficiency the first time)
    fit = {"attention_array_job_cycles": 321.5, "attention_array_job_cycles_is": "a line",
           "attention_array_key_cycles": 5.25, "attention_array_key_macs": 1536}
    write_profile(copy, {**cal, "attention_array_efficiency": 0.2345, "attention_array_efficiency_is": "array",
                         **fit}, "mcf bench compute --engine", "m", "4x8", date="2026-12-01")
    fitted = copy.read_text()
    lines = fitted.splitlines()
    at = lines.index("attention_array_efficiency: 0.2345")
    assert lines[at + 1:at + 6] == ["# MEASURED 2026-12-01 by `mcf bench compute --engine`:", "# a line.",
                                    "attention_array_job_cycles: 321.5",
                                    "attention_array_key_cycles: 5.25  # attn:array-fit (above)",
                                    "attention_array_key_macs: 1536  # attn:array-fit (above)"]
    third = load_profile(copy).to_dict()
    assert {k for k in again if again[k] != third[k]} == set(fit) - {"attention_array_job_cycles_is"}
    write_profile(copy, {**cal, "attention_array_efficiency": 0.2345, "attention_array_efficiency_is": "array",
                         **fit}, "mcf bench compute --engine", "m", "4x8", date="2026-12-01")
    assert copy.read_text() == fitted
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    with pytest.raises(ValueError, match="has 0 lines 'compute_efficiency:'"):
        write_profile(bad, cal, "c", "m", "a")


def test_array_fit_is_the_line_through_the_runs():
    """attn:array-fit: two runs whose jobs cost 300 + 5.5 x keys cycles (spread over instruction kinds, one
    kind fixed) give back 300 and 5.5, and the efficiency at 2048 keys is 2 x 128 x 6 x 2048 MACs /
    (300 + 5.5 x 2048) cycles / 2048 MACs a cycle; runs of one key count, or of two job sizes, are refused."""
    from mcf.sim.benchmarks.compute import array_fit
    from mcf.spec.node import NodeConfig
    node = NodeConfig(mac_rows=64, mac_lanes=32, head_dim=128)

    def op(keys, jobs, rows=6):
        return {"keys": keys, "jobs": jobs, "rows_per_job": rows,
                "per_kind": {"ATTN_EMIT": {"cycles": 100 * jobs}, "GEMM_QK": {"cycles": int((200 + 5.5 * keys) * jobs)}}}
    fit = array_fit([op(256, 16), op(2048, 2)], node)
    assert (fit["job_cycles"], fit["key_cycles"], fit["key_macs"]) == (300.0, 5.5, 1536)
    assert fit["by_kind"]["ATTN_EMIT"] == {"job_cycles": 100.0, "key_cycles": 0.0}
    assert fit["efficiency_at_keys"][2048] == round(1536 * 2048 / (300 + 5.5 * 2048) / 2048, 4)
    assert fit["residual_cycles"] == [0.0, 0.0]
    for bad in ([op(256, 16), op(256, 2)], [op(256, 16), op(2048, 2, rows=12)]):
        with pytest.raises(ValueError, match="attn:array-fit"):
            array_fit(bad, node)


@pytest.mark.cocotb
def test_bench_engine_writes_what_it_prints(tmp_path):
    """A small measurement (the tiny model's node, two weight ports, Icarus) written into a copy of
    the profile: the figures there are the ones the command printed, and they are plausible.  The
    GEMMs' activation load hides under the first tile (per instruction >= 0.75 of the array on
    8-tile slices; it was ~0.65 with the load before the MACs); the attention block (bit-exact
    inside the bench) reads each K / V segment once per job of a whole GQA group."""
    from mcf.sim.benchmarks.compute import PROFILE
    copy = tmp_path / "kr.yaml"
    copy.write_text(PROFILE.read_text())
    out = subprocess.run([sys.executable, "-m", "mcf", "bench", "compute", "--engine", "--model", "tiny",
                          "--weight-ports", "2", "--sim", "icarus", "--prefill-rows", "32", "--decode-rows", "64",
                          "--attn-keys", "128", "--qk-keys", "256", "--sm-keys", "128", "--json",
                          "--write-profile", str(copy)],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    fig = json.loads(out.stdout)
    assert "[bench compute] tiny: elaborating the execute unit" in out.stderr
    cal = fig["calibration"]
    assert _profile_values(copy) == (cal["compute_efficiency"], cal["ddr_efficiency"])
    assert 0.5 < fig["prefill"]["mac_utilization"] <= 1 and 0 < fig["decode"]["ddr_fraction_of_model"] <= 1
    assert fig["ops"]["prefill:q"]["steady_mac_utilization"] >= 0.9
    assert all(op["mac_utilization"] >= 0.75 for name, op in fig["ops"].items() if name.startswith("prefill:"))
    att = fig["attention"]
    for name, tokens in (("attn:prefill", 8), ("attn:decode", 1)):
        a = att[name]
        # att_rows 4 = 2 tokens x the group's 2 heads a job
        assert a["tokens"] == tokens and a["heads"] == 2 and a["rows_per_job"] == min(tokens, 2) * 2
        assert a["jobs"] == -(-tokens // 2) and a["keys"] == 128
        # K by MAX, K and V by APPLY: three segments' bytes per job, for both heads of the group
        assert a["kv_reads_per_job_per_segment"] == 1.0 and a["kv_bytes_read"] == a["jobs"] * 3 * a["kv_segment_bytes"]
        assert 0 < a["score_array_utilization"] <= 1 and 0 < a["pv_array_utilization"] <= 1
    assert fig["ddr_model"]["weight_ports_bandwidth"] == 16          # two 64-bit ports, 8 B a cycle each
    # ATTN_SM over 128 keys of one token x 2 heads (bit-exact inside the bench): R = 2 < VL = 8, APPLY a key
    # a cycle, MAX a row's SPAD beat a cycle (one bank: mac_lanes = VL) (sim/compute/cost.py); APPLY also
    # waits for its V scale words from the DDR model
    from mcf.sim.compute.cost import softmax_pass_cycles
    sm = fig["softmax_pass_on_spad"]["attn:softmax"]
    assert (sm["rows"], sm["keys"], sm["vec_lanes"]) == (2, 128, 8)
    assert abs(sm["max"]["cycles"] - softmax_pass_cycles(128, 2, 8, False)) <= 4
    apply_model = softmax_pass_cycles(128, 2, 8, True)
    assert apply_model - 4 <= sm["apply"]["cycles"] <= apply_model + 100
    # GEMM_QK over one K segment (bit-exact inside the bench): the array near its peak
    qk = fig["attention_scores_on_array"]["attn:qk-array"]
    assert qk["keys"] == 256 and qk["steady_fraction_of_array_peak"] >= 0.95 and 0.5 < qk["fraction_of_array_peak"] <= 1


def test_profile_figures_are_the_engine_bench_output():
    """The repository's profile holds what `mcf bench compute --model qwen2.5-1.5b --write-profile`
    wrote (its comment names the command), equal to the recorded output of that run
    (docs/bench/compute-qwen2.5-1.5b.json, the command's --json output)."""
    from mcf.sim.benchmarks.compute import PROFILE
    from mcf.spec.node import NodeConfig
    text = PROFILE.read_text()
    assert text.count("by `mcf bench compute --model qwen2.5-1.5b") == 5
    rec = json.loads((Path(__file__).resolve().parents[3] / "docs" / "bench" / "compute-qwen2.5-1.5b.json").read_text())
    cal = rec["calibration"]
    assert _profile_values(PROFILE) == (cal["compute_efficiency"], cal["ddr_efficiency"])
    import yaml
    prof = yaml.safe_load(PROFILE.read_text())
    assert prof["attention_efficiency"] == cal["attention_efficiency"]
    assert prof["attention_array_efficiency"] == cal["attention_array_efficiency"]
    prefill = rec["attention"]["attn:prefill"]
    arr = rec["attention_on_array"]["attn:prefill-array"]      # the same work as attn:prefill, on the array
    assert [arr[k] for k in ("tokens", "heads", "keys", "visible_keys")] == [
        prefill[k] for k in ("tokens", "heads", "keys", "visible_keys")]
    # measured on the preset node (the bench's: NodeConfig's non-shape fields for the model): the array path's jobs
    # min(sm_rows, max_tokens) // group tokens x the GQA group (12 rows on the KR260 node); the unit's block on
    # the node with att_rows = the group where the preset's has fewer (node_changes), jobs of att_rows rows
    from mcf.spec.node import MODEL_SHAPES
    from mcf.sw.models import load_model
    node = NodeConfig.for_model(load_model("qwen2.5-1.5b"),
                                **{k: v for k, v in NodeConfig().as_dict().items() if k not in MODEL_SHAPES})
    rows, unit_rows = min(node.sm_rows, node.max_tokens) // node.group * node.group, max(node.att_rows, node.group)
    assert rec["att_rows"] == node.att_rows and rec["attention_unit"]["att_rows"] == unit_rows
    assert rec.get("node_changes", {}).get("unit_att_rows", node.att_rows) == unit_rows
    assert arr["rows_per_job"] == rows and prefill["rows_per_job"] == unit_rows
    assert arr["jobs"] * rows == prefill["jobs"] * unit_rows
    assert cal["attention_array_efficiency"] == round(2 * rec["attention_unit"]["head_dim"] * arr["heads"]
                                                      * arr["visible_keys"] / arr["cycles"]
                                                      / rec["peak_macs_per_cycle"], 4)
    # the array's line in the keys: through the two runs' cycles a job, by hand
    runs = [rec["attention_on_array"][n] for n in ("attn:prefill-array", "attn:prefill-array:2048")]
    (k0, c0), (k1, c1) = [(r["keys"], r["cycles"] / r["jobs"]) for r in runs]
    assert runs[1]["rows_per_job"] == arr["rows_per_job"] == rows
    # the KV as the cluster model's MARS plan keeps it: segments of the preset's kv_block_keys (2048), a run of
    # fewer keys one block
    assert [r["block_keys"] for r in runs] == [min(k, NodeConfig().kv_block_keys) for k in (k0, k1)]
    assert prof["attention_array_key_cycles"] == cal["attention_array_key_cycles"] == round((c1 - c0) / (k1 - k0), 4)
    assert prof["attention_array_job_cycles"] == cal["attention_array_job_cycles"] == round(
        c0 - (c1 - c0) / (k1 - k0) * k0, 1)
    assert prof["attention_array_key_macs"] == cal["attention_array_key_macs"] == 2 * node.head_dim * rows
    # the figure is the attention block's, as measured
    assert cal["attention_efficiency"] == round(2 * rec["attention_unit"]["head_dim"] * prefill["heads"]
                                                * prefill["visible_keys"] / prefill["cycles"]
                                                / rec["peak_macs_per_cycle"], 4)
