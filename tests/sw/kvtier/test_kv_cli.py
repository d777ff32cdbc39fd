"""``mcf kv``: replay (embedded servers, cluster model, compare, faults, trace file, plot), fit,
info, and one-line errors."""
import json

import pytest

from mcf.sw.cli import main

SMALL = ["--model", "small", "--chunk", "32", "--server-mb", "16"]
STREAM = ["--synthetic", "16", "--arrival-rate", "200", "--prefixes", "2", "--prefix-tokens", "256:512",
          "--suffix-tokens", "4:20"]


def run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_replay_compare_with_the_cluster_model(capsys, tmp_path):
    png = tmp_path / "kv.png"
    # prefixes of 1-2K tokens: on the measured 64 x 32 engine a 256-token prefix recomputes in ~1 ms,
    # as fast as loopback Redis loads it, and the p99 comparison would be noise; at 1-2K recompute
    # costs ~10 ms a request and the loads win by several times
    stream = [*STREAM[:STREAM.index("--prefix-tokens")], "--prefix-tokens", "1024:2048", "--suffix-tokens", "4:20"]
    out = run_json(capsys, ["kv", "replay", *stream, *SMALL, "--ranks", "2", "--compare", "--prime",
                            "--json", "--plot", str(png)])
    assert [a["label"] for a in out["arms"]] == ["no tier", "sync", "async"]
    assert out["cost_model"]["sources"]["R"].startswith("model: SimPy cluster model, MARS on 2 x kr260")
    assert out["cost_model"]["sources"]["B"].startswith("measured")
    none, sync, asyn = out["arms"]
    assert all(a["completed"] == a["requests"] == 16 for a in out["arms"])
    assert none["tokens_from_store"] == 0 and none["loads"] == 0
    for a in (sync, asyn):                   # primed: every request has a hit worth loading here
        assert a["loads"] == 16 and a["token_hit_ratio"] > 0.5 and a["fallbacks"] == 0
        assert a["ttft_p99_s"] < none["ttft_p99_s"] / 2
    assert png.stat().st_size > 10_000 and [f.name for f in tmp_path.iterdir()] == ["kv.png"]


def test_replay_fault_completes_every_request(capsys):
    out = run_json(capsys, ["kv", "replay", *STREAM, *SMALL, "--ranks", "3", "--prime", "--json",
                            "--fault", "kill-rank:1@0.02", "--io-timeout", "0.3"])
    (a,) = out["arms"]
    assert a["completed"] == 16 and a["loads"] > 0
    assert a["errors"].get("lookup_unavailable", 0) + a["errors"].get("skipped_down", 0) >= 1
    assert a["token_hit_ratio"] < 0.9                      # the killed rank's chunks were recomputed


def test_replay_of_a_trace_file_text_output(capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 0, "segments": [[1, 40], [2, 3]]}\n{"t": 0.5, "segments": [[1, 40], [3, 3]]}\n')
    assert main(["kv", "replay", "--trace", str(trace), *SMALL, "--ranks", "2", "--sync"]) == 0
    text = capsys.readouterr().out
    assert "p99 TTFT" in text and "\nsync" not in text and "  sync" in text
    assert "T0 =" in text and "(measured" in text


def test_fit_prints_fit_and_validation(capsys):
    out = run_json(capsys, ["kv", "fit", *SMALL, "--ranks-list", "1,2", "--hits", "2,8", "--fit-on", "2:8",
                            "--repeats", "2", "--json"])
    assert out["t0_s"] >= 0 and len(out["configs"]) == 4
    assert sum(c["fitted_here"] for c in out["configs"]) == 1
    assert all(c["load_measured_p50_s"] > 0 and len(c["bandwidth_Bps_per_rank"]) == c["ranks"]
               for c in out["configs"])
    assert out["validation_max_abs_error"] is not None


def test_info(capsys):
    out = run_json(capsys, ["kv", "info", "--json"])
    assert out["chunk_value_bytes"] == 28 * 4 * (512 + 256 * 64) and out["s_bytes_per_token"] == 7392
    assert 10 < out["prefill_rate_tokens_per_s"] < 10_000 and out["b_star_Bps"] < 100e6


def test_calibrate_measures_r_from_a_run_and_replay_uses_it(capsys, tmp_path):
    """R from a cold prefill run through the node runtime (here the model backend: the ISA
    simulator with the timing model; ``--backend rtl`` is the default and reads the RTL nodes'
    CYCLES counters -- tests/sim/rtlcluster/test_backend_kvtier.py checks those), not typed in;
    the replay takes it from the file."""
    cal = tmp_path / "cal.json"
    out = run_json(capsys, ["kv", "calibrate", "--backend", "model", "--nodes", "2", "--seq", "12", "--chunk", "4",
                            "--server-mb", "4", "--json", "--out", str(cal)])
    assert out["backend"] == "model" and out["ttft_cycles"] > 0 and out["hit_chunks"] == 2
    assert out["prefill_rate_tokens_per_s"] == pytest.approx(12 * out["clock_hz"] / out["ttft_cycles"])
    cm = out["cost_model"]
    assert cm["sources"]["R"].startswith("model: ISA simulator with the timing model: cold MARS prefill of 12 tokens")
    assert "mcf kv calibrate --backend model" in cm["sources"]["R"] and cm["sources"]["B"].startswith("measured")
    assert len(cm["bandwidth_Bps_per_rank"]) == 2 and out["b_star_Bps"] == pytest.approx(256 * out[
        "prefill_rate_tokens_per_s"])
    assert out["choice"] == ("load" if out["recompute_s"] > out["load_s"] else "recompute")
    assert json.loads(cal.read_text()) == out
    rep = run_json(capsys, ["kv", "replay", "--synthetic", "3", "--model", "tiny", "--chunk", "4", "--ranks", "2",
                            "--server-mb", "4", "--prefix-tokens", "8:16", "--suffix-tokens", "1:4",
                            "--prefill-from", str(cal), "--t0", "0", "--json"])
    assert rep["cost_model"]["sources"]["R"] == cm["sources"]["R"]
    assert rep["cost_model"]["prefill_rate_tokens_per_s_at_max"] == pytest.approx(out["prefill_rate_tokens_per_s"])
    assert main(["kv", "replay", "--synthetic", "2", *SMALL, "--prefill-from", str(cal)]) == 2
    assert "measured for model tiny on 2 ranks, chunk 4" in capsys.readouterr().err


@pytest.mark.parametrize("argv,match", [
    (["kv", "replay", "--synthetic", "2", *SMALL, "--fault", "kill-rank:9@1"], "rank 9"),
    (["kv", "replay", "--synthetic", "2", *SMALL, "--fault", "oops"], "KIND:RANK@SECONDS"),
    (["kv", "replay", "--synthetic", "2", *SMALL, "--url", "redis://h:1/{rank}", "--fault", "kill-rank:0@1"],
     "embedded"),
    (["kv", "replay", "--synthetic", "2", *SMALL, "--url", "redis://h:6379"], "{rank}"),
    (["kv", "replay", "--trace", "/nonexistent/t.jsonl", *SMALL], "No such file"),
    (["kv", "replay", "--synthetic", "0", *SMALL], "synthetic N=0"),
    (["kv", "replay", "--synthetic", "2", *SMALL, "--prefix-tokens", "x"], "LOW:HIGH"),
    (["kv", "replay", "--synthetic", "2", *SMALL, "--ranks", "0"], "ranks=0"),
    (["kv", "replay", "--synthetic", "2", "--model", "small", "--chunk", "32", "--ranks", "2",
      "--url", "redis://127.0.0.1:1{rank}"], "does not answer"),
    (["kv", "fit", *SMALL, "--fit-on", "3:8"], "fit-on"),
    (["kv", "info", "--chunk", "0"], "chunk"),
    (["kv", "replay", "--synthetic", "2", *SMALL, "--prefill-from", "/nonexistent.json"], "No such file"),
    (["kv", "calibrate", "--backend", "gpu"], "--backend 'gpu'"),
    (["kv", "calibrate", "--seq", "4", "--chunk", "4"], "chunk < seq"),
    (["kv", "calibrate", "--nodes", "0"], "ranks=0"),
])
def test_errors_are_one_line(capsys, argv, match):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mcf: error:") and match in err[0], err


def test_help(capsys):
    for argv in (["kv", "--help"], ["kv", "replay", "--help"], ["kv", "fit", "--help"], ["kv", "info", "--help"],
                 ["kv", "calibrate", "--help"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0
    assert "--fault" in capsys.readouterr().out
    assert main(["kv"]) == 2
