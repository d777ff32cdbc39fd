"""``mcf simulate`` and ``mcf bench paper`` as a user runs them."""
import json
import subprocess
import sys

import pytest

from mcf.sw.cli import main

MCF = [sys.executable, "-m", "mcf"]


def test_simulate_json_has_the_figures(capsys):
    assert main(["simulate", "--seq", "2048", "--nodes", "4", "--scheme", "ring", "--chunk", "256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("ttft_s", "comm_bytes", "peak_memory_per_node_bytes", "decode_tokens_per_s"):
        assert out[key] > 0, key
    assert out["scheme"] == "ring" and out["nodes"] == 4 and out["chunk_size"] == 256


def test_simulate_text(capsys):
    assert main(["simulate", "--seq", "1024", "--nodes", "2", "--chunk", "256"]) == 0
    out = capsys.readouterr().out
    assert "TTFT (simulated)" in out and "decode" in out


@pytest.mark.parametrize("args,word", [
    (["--seq", "0", "--nodes", "4"], "seq"),
    (["--seq", "1024", "--nodes", "0"], "nodes"),
    (["--seq", "1024", "--nodes", "4", "--scheme", "nope"], "scheme"),
    (["--seq", "1024", "--nodes", "4", "--decode", "nope"], "decode"),
    (["--seq", "1024", "--nodes", "4", "--link-gbps", "0"], "link-gbps"),
    (["--seq", "1024", "--nodes", "4", "--packet-payload", "0"], "packet-payload"),
    (["--seq", "1024", "--nodes", "4", "--lookahead", "-1"], "lookahead"),
    (["--seq", "1024", "--nodes", "4", "--budget", "10"], "budget"),
    (["--seq", "1024", "--nodes", "4", "--model", "nope"], "model"),
])
def test_simulate_bad_parameters_give_one_line(args, word, capsys, monkeypatch):
    monkeypatch.delenv("MCF_DEBUG", raising=False)
    assert main(["simulate"] + args) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0] and word in lines[0], err


def test_simulate_error_as_a_process():
    p = subprocess.run(MCF + ["simulate", "--seq", "-5", "--nodes", "4"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "seq" in p.stderr


def test_bench_paper_quick_writes_report_and_plots(tmp_path, capsys):
    out = tmp_path / "paper"
    assert main(["bench", "paper", "--quick", "--out", str(out), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    report = (out / "report.md").read_text()
    for png in ("table1.png", "fig3_ttft_vs_length.png", "fig4_memory.png", "fig5_chunk_size.png"):
        assert (out / png).stat().st_size > 1000, png
    assert "MARS / Ring" in report and "Roofline" in report and "Table 2" in report
    assert "{prof." not in report and "DDR 19.2 GB/s x" in report       # every figure formatted
    assert figures["fig4_n4_final_equals_owner_only"] is True
    # the attention path: the profile's measured unit and array rates, MARS TTFT with each, labeled
    from mcf.sw.mars.profile import load_profile
    prof = load_profile("kr260")
    for n in (2, 4):        # Table 1 takes the profile's path (kr260: the array, the lowering's auto choice)
        assert figures[f"attn_{prof.attention_path}_mars_n{n}_ttft_s"] == figures[f"t1_mars_n{n}_ttft_s"]
        if prof.attention_array_efficiency > 0:           # attention-bound: the faster path gives the shorter TTFT
            faster = prof.attention_array_efficiency > prof.attention_efficiency
            assert (figures[f"attn_array_mars_n{n}_ttft_s"] < figures[f"attn_unit_mars_n{n}_ttft_s"]) == faster
    if prof.attention_array_efficiency > 0:
        assert "array path: measured block attn:prefill-array; what `attention=auto` emits on the KR260 node" in report
    else:
        assert figures["attn_array_path"].startswith("not measured") and "array path not run" in report
