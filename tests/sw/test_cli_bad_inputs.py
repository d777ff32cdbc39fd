"""Every class of bad input of issue 12, through the real ``mcf`` command (a subprocess, as a
user runs it): exit status 2, one line on stderr starting with ``mcf: error:``, no traceback,
nothing left behind in the working folder, and an existing output untouched.  Plus strict JSON,
atomic outputs and a quiet closed pipe.

Each case costs one ``mcf`` process (~0.6 s of CPU); the module adds ~25 s to ``make test``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mcf.sw.golden import safetensors
from mcf.sw.golden.checkpoint import hf_config_dict, write_checkpoint
from mcf.sw.golden.weights import random_weights
from mcf.sw.models import load_model

def mcf(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MCF_DEBUG"}
    return subprocess.run([sys.executable, "-m", "mcf", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A folder of bad inputs beside one good tiny checkpoint."""
    d = tmp_path_factory.mktemp("bad-inputs")
    cfg = load_model("tiny")
    w = random_weights(cfg, seed=1)
    write_checkpoint(d / "ck", cfg, w)
    nan = dict(w)
    nan["model.layers.1.mlp.up_proj.weight"] = w["model.layers.1.mlp.up_proj.weight"].copy()
    nan["model.layers.1.mlp.up_proj.weight"][3, 5] = np.inf
    write_checkpoint(d / "ck_inf", cfg, nan)
    for name, change in (("ck_gelu", {"hidden_act": "gelu_pytorch_tanh"}), ("ck_list", None)):
        write_checkpoint(d / name, cfg, w)
        doc = [1, 2] if change is None else {**hf_config_dict(cfg), **change}
        (d / name / "config.json").write_text(json.dumps(doc))
    dup = d / "ck_dup"                       # the same tensor in two shards
    dup.mkdir()
    (dup / "config.json").write_text(json.dumps(hf_config_dict(cfg)))
    names = list(w)
    safetensors.save_file({k: w[k] for k in names}, dup / "model-00001-of-00002.safetensors", "F32")
    safetensors.save_file({names[3]: w[names[3]]}, dup / "model-00002-of-00002.safetensors", "F32")
    (d / "broken.yaml").write_text("num_layers: 2\nhidden_size: [1\n")
    (d / "incomplete.yaml").write_text("num_layers: 2\nhidden_size: 64\n")
    (d / "list.yaml").write_text("- 1\n- 2\n")
    (d / "huge.yaml").write_text("num_layers: 64\nhidden_size: 65536\nnum_heads: 64\nnum_kv_heads: 8\n"
                                 "head_dim: 1024\nintermediate_size: 262144\nvocab_size: 262144\n")
    (d / "afile").write_text("not a folder\n")
    return d


def listing(d: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.rglob("*"))}


CK = ["--checkpoint", "ck", "--tokens", "1,2,3"]

CASES = {
    # -p KEY=VALUE: not an integer, out of range (checked before elaboration)
    "param-not-int": (["verilog", "nic", "-p", "data_width=wide", "-o", "nic.v"], "data_width"),
    "param-zero": (["verilog", "nic", "-p", "data_width=0", "-o", "nic.v"], "fits: 32, 64"),
    # group sizes: zero, or not dividing the widths (which sizes fit is said)
    "group-zero": (["golden", "logits", *CK, "--fixed", "--group-size", "0"], "--group-size"),
    "group-no-divide": (["golden", "logits", *CK, "--fixed", "--group-size", "24"], "sizes that fit"),
    # --seq / --nodes far beyond what fits, decided before allocating
    "seq-beyond-isa": (["plan", "--seq", "99999999", "--nodes", "4"], "--seq"),
    "nodes-beyond-ids": (["run", "--nodes", "1000", *CK], "--nodes"),
    "plan-cells": (["plan", "--seq", "1048576", "--nodes", "255", "--chunk", "16", "--budget", str(1 << 44),
                    "--buffer", str(1 << 40)], "more than the planner holds"),
    "node-kv-memory": (["node", "--world", "local", "--nodes", "64", "--seq", "1048576",
                        "--model", "qwen2.5-1.5b"], "GiB of arrays"),
    "model-memory": (["golden", "random-checkpoint", "--model", "huge.yaml", "--out", "new"], "GiB of arrays"),
    "decode-beyond": (["golden", "generate", *CK, "--decode", "1048576"], "positions"),
    # token ids beyond int64 / the vocabulary
    "token-int64": (["golden", "logits", "--checkpoint", "ck", "--tokens", "1,9223372036854775808"], "token id"),
    "token-vocab": (["run", "--nodes", "2", "--checkpoint", "ck", "--tokens", "1,256"], "token ids"),
    # config.json that is not an object; broken / incomplete / non-mapping model YAML
    "config-list": (["golden", "generate", "--checkpoint", "ck_list", "--tokens", "1"], "JSON object"),
    "yaml-broken": (["plan", "--model", "broken.yaml", "--seq", "1024", "--nodes", "2"], "not valid YAML"),
    "yaml-incomplete": (["simulate", "--model", "incomplete.yaml", "--seq", "1024", "--nodes", "2",
                         "--scheme", "mars"], "missing key(s) num_heads"),
    "yaml-list": (["kv", "info", "--model", "list.yaml"], "expected a mapping"),
    # inputs that make no sense are refused, not run
    "weights-inf": (["run", "--nodes", "2", "--checkpoint", "ck_inf", "--tokens", "1,2"], "non-finite"),
    "hidden-act": (["golden", "generate", "--checkpoint", "ck_gelu", "--tokens", "1"], "hidden_act"),
    "tensor-twice": (["golden", "logits", "--checkpoint", "ck_dup", "--tokens", "1"], "in two shards"),
    "packets-zero": (["bench", "nic", "--packets", "0"], "--packets"),
    "repeat-zero": (["bench", "mars-plan", "--repeat", "0"], "--repeat"),
    "frames-zero": (["bench", "eth", "--frames", "0"], "--frames"),
    "isa-costs-chunks": (["bench", "isa-costs", "--chunks", "2,9"], "--chunks"),
    "repeats-zero": (["kv", "fit", "--repeats", "0"], "repeats"),
    "node-timeout-nan": (["node", "--world", "local", "--nodes", "2", "--timeout", "nan"], "--timeout"),
    "board-base": (["board", "info", "--base", "0x3"], "--base"),
    # output files: an existing checkpoint is not replaced without --force; no folder to write in
    "checkpoint-exists": (["golden", "random-checkpoint", "--out", "ck"], "--force"),
    "plot-in-a-file": (["plan", "--seq", "4096", "--nodes", "2", "--plot", "afile/plan.png"], "afile"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(work, name):
    argv, words = CASES[name]
    before = listing(work)
    r = mcf(argv, work)
    lines = r.stderr.splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("mcf: error: "), r.stderr[-2000:]
    assert "Traceback" not in r.stderr + r.stdout
    assert words in lines[0], lines[0]
    assert listing(work) == before, "a file was left behind or changed"


def test_infeasible_rows_give_non_zero_status_and_strict_json(work):
    """A multi-value run prints every row (strict JSON: no NaN/Infinity) and ends with status 2
    and one line when some rows are infeasible."""
    r = mcf(["plan", "--seq", "200000", "--nodes", "1,2", "--json"], work)   # N = 1: over 1 GiB of KV
    assert r.returncode == 2 and r.stderr.startswith("mcf: error: 1 of 2 configurations are infeasible")
    assert len(r.stderr.splitlines()) == 1

    def no_constants(word):
        raise AssertionError(f"{word} in --json output")
    rows = json.loads(r.stdout, parse_constant=no_constants)
    assert [("error" in row) for row in rows] == [True, False]
    assert mcf(["plan", "--seq", "4096", "--nodes", "2,4", "--json"], work).returncode == 0


def test_checkpoint_written_atomically_and_replaced_only_with_force(work):
    out = work / "fresh"
    assert mcf(["golden", "random-checkpoint", "--out", "fresh", "--seed", "3"], work).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    first = (out / "model.safetensors").read_bytes()
    r = mcf(["golden", "random-checkpoint", "--out", "fresh", "--seed", "4"], work)
    assert r.returncode == 2 and (out / "model.safetensors").read_bytes() == first
    r = mcf(["golden", "random-checkpoint", "--out", "fresh", "--seed", "4", "--force"], work)
    assert r.returncode == 0 and (out / "model.safetensors").read_bytes() != first
    assert not [p for p in work.iterdir() if p.name.startswith(".fresh")], "temporary folder left behind"


def test_closed_pipe_ends_quietly(work):
    """``mcf ... | head``: no BrokenPipeError traceback, no error line."""
    env = {k: v for k, v in os.environ.items() if k != "MCF_DEBUG"}
    r = subprocess.run(f"'{sys.executable}' -m mcf plan --seq 65536 --nodes 16 --json | head -c 100", shell=True,
                       cwd=work, env=env, capture_output=True, text=True, timeout=120)   # ~170 kB > a pipe
    assert len(r.stdout) == 100 and r.stderr == ""


def test_a_bench_whose_simulator_fails_is_one_line(monkeypatch, capsys):
    """A bench's own simulator failing (SimulationError, with the log's tail) is one line that
    names the failure and the log, exit 2; --debug shows the traceback."""
    from mcf.sim import runner
    from mcf.sim.benchmarks import nic
    from mcf.sw import cli

    def fails(args):
        raise runner.SimulationError("tests.hw.nic.test_nic: 1 of 2 cocotb tests failed:\n  run_x: boom\n"
                                     "log: /tmp/sim.log\nlast log line")
    monkeypatch.setattr(nic, "run", fails)
    assert cli.main(["bench", "nic"]) == 2
    err = capsys.readouterr().err
    assert err == "mcf: error: tests.hw.nic.test_nic: 1 of 2 cocotb tests failed: (log: /tmp/sim.log)\n"
    with pytest.raises(runner.SimulationError):
        cli.main(["bench", "nic", "--debug"])

