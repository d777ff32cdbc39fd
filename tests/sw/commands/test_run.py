"""``mcf run`` and ``mcf golden generate`` through the real CLI: the model backend's tokens are the
golden fixed-point model's greedy tokens, the JSON carries the issue's fields, text output is
readable, and bad input is one line with exit status 2."""
from __future__ import annotations

import json

import pytest

from mcf.sw import cli

PROMPT = "5,9,200,3,17,33,1,8,90,2"


def test_model_backend_tokens_equal_golden_generate(checkpoint, capsys):
    capsys.readouterr()
    assert cli.main(["golden", "generate", "--checkpoint", str(checkpoint), "--tokens", PROMPT, "--decode", "2",
                     "--fixed", "--json"]) == 0
    golden = json.loads(capsys.readouterr().out)
    assert len(golden["tokens"]) == 3 and golden["fixed"]
    assert cli.main(["run", "--backend", "model", "--nodes", "3", "--checkpoint", str(checkpoint), "--tokens", PROMPT,
                     "--decode", "2", "--chunk", "2", "--budget", "500", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"] == golden["tokens"]
    for key in ("ttft_cycles", "decode_cycles_per_token", "link_bytes", "peak_kv_bytes_per_node",
                "replica_factor_per_step", "kv_bytes_course"):
        assert out[key] is not None, key
    assert out["ttft_cycles"] > 0 and out["decode_cycles_per_token"] > 0 and out["link_bytes_total"] > 0
    assert len(out["peak_kv_bytes_per_node"]) == 3 and out["directory_after_prefill"] == [[0, 3], [1, 4], [2]]
    # the text form, and the float model's greedy tokens as plain text
    assert cli.main(["run", "--backend", "isa", "--nodes", "2", "--checkpoint", str(checkpoint), "--tokens", "1,2,3",
                     "--scheme", "ring", "--chunk", "2"]) == 0
    text = capsys.readouterr().out
    assert "tokens: " in text and "TTFT: " in text and "link bytes" in text
    # the attention path and why (attention = auto: the tiny checkpoint's node builds no GEMM_PV)
    assert "attention: unit (auto -> unit: " in text and "builds no GEMM_PV" in text
    assert out["attention"] == "unit" and out["attention_reason"].startswith("auto -> unit: ")
    assert cli.main(["golden", "generate", "--checkpoint", str(checkpoint), "--tokens", "1,2,3"]) == 0
    assert len(capsys.readouterr().out.strip().split(",")) == 1


@pytest.mark.parametrize("argv,message", [
    (["--backend", "gpu"], "--backend 'gpu': one of model, isa, rtl"),
    (["--scheme", "passq"], "--scheme 'passq'"),
    (["--nodes", "0"], "argument --nodes: 0 is out of range: must be an integer in [1, 256]"),
    (["--tokens", "1,999"], "token ids must be in [0, 256)"),
    (["--chunk", "16", "--tokens", "1,2,3,4,5,6,7,8,9,10,11,12"], "at most max_tokens=8"),
    (["--group-size", "4"], "group size 4 must be a power of two, a multiple of mac_lanes=8"),
    (["--decode", "-1"], "argument --decode: -1 is out of range"),
])
def test_bad_input_is_one_line(checkpoint, capsys, argv, message):
    base = {"--nodes": "2", "--tokens": "1,2,3,4", "--backend": "isa"}
    args = dict(base)
    for i in range(0, len(argv), 2):
        args[argv[i]] = argv[i + 1]
    flat = [x for kv in args.items() for x in kv]
    capsys.readouterr()
    assert cli.main(["run", "--checkpoint", str(checkpoint)] + flat) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mcf: error:") and message in err and len(err.splitlines()) == 1
