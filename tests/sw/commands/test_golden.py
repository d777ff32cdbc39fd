"""``mcf golden ...`` and ``mcf bench golden`` on tiny shapes."""
from __future__ import annotations

import json

import numpy as np

from mcf.sw import cli
from mcf.sw.golden import FloatModel, load_checkpoint


def test_logits_json_matches_the_model(tmp_path, capsys):
    ck = tmp_path / "ck"
    assert cli.main(["golden", "random-checkpoint", "--model", "tiny", "--out", str(ck), "--dtype", "BF16"]) == 0
    capsys.readouterr()
    assert cli.main(["golden", "logits", "--checkpoint", str(ck), "--tokens", "1,2,3", "--json"]) == 0
    got = np.array(json.loads(capsys.readouterr().out)["logits"])
    cfg, w = load_checkpoint(ck)
    assert got.shape == (3, cfg.vocab_size)
    assert np.abs(got - FloatModel(cfg, w).forward([1, 2, 3])).max() <= 1e-6


def test_logits_text_and_fixed(tmp_path, capsys):
    ck = tmp_path / "ck"
    cli.main(["golden", "random-checkpoint", "--model", "tiny", "--out", str(ck)])
    capsys.readouterr()
    assert cli.main(["golden", "logits", "--checkpoint", str(ck), "--tokens", "5, 6", "--fixed",
                     "--group-size", "32"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and len(lines[0].split()) == 256


def test_user_errors_are_one_line(tmp_path, capsys):
    ck = tmp_path / "ck"
    cli.main(["golden", "random-checkpoint", "--model", "tiny", "--out", str(ck)])
    capsys.readouterr()
    for argv, msg in [(["--tokens", "1,x"], "comma-separated"), (["--tokens", "1,256"], "token ids"),
                      (["--tokens", "1", "--fixed", "--group-size", "48"], "group size 48")]:
        assert cli.main(["golden", "logits", "--checkpoint", str(ck)] + argv) == 2
        err = capsys.readouterr().err.strip()
        assert msg in err and len(err.splitlines()) == 1
    assert cli.main(["golden", "logits", "--checkpoint", str(tmp_path / "none"), "--tokens", "1"]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_accuracy_json(capsys):
    assert cli.main(["golden", "accuracy", "--model", "tiny", "--group-size", "32", "--tokens", "8",
                     "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["cases"]) == {"random", "motif", "outliers"}
    assert 0.8 < out["cases"]["random"]["vs_float_w4"]["cosine_mean"] <= 1.0


def test_bench_golden_small(capsys):
    assert cli.main(["bench", "golden", "--model", "tiny", "--tokens", "16", "--group-size", "32",
                     "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["prefill_tokens"] == 16 and figures["float_prefill_seconds"] >= 0
    assert figures["fixed_decode_step_seconds"] >= 0
