"""The mcf command: help, one-line errors, Verilog output, docs in sync with the spec."""
import subprocess
import sys
from pathlib import Path

import pytest

from mcf.sw.cli import main

ROOT = Path(__file__).resolve().parents[2]


def mcf(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "mcf", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_help_lists_subcommands():
    r = mcf("--help")
    assert r.returncode == 0
    for cmd in ("verilog", "bench", "docs", "demo"):
        assert cmd in r.stdout


def test_every_subcommand_has_help(capsys):
    """Every subcommand's ``--help`` through ``main`` in this process (one interpreter start per
    subcommand cost ~24 s of the suite; the entry point itself runs as a process above)."""
    from mcf.sw.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert len(sub.choices) > 10
    for name in sub.choices:
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        out = capsys.readouterr()
        assert done.value.code == 0 and out.out.startswith(f"usage: mcf {name}"), name


def test_unknown_block_lists_known_ones(capsys):
    assert main(["verilog", "no_such_block"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "header_serializer" in err and "no_such_block" in err


def test_bad_param_is_one_line(capsys):
    assert main(["verilog", "header_serializer", "-p", "data_width=48"]) == 2
    err = capsys.readouterr().err.strip()
    assert "data_width=48" in err and "\n" not in err
    assert main(["verilog", "header_serializer", "-p", "nonsense=1"]) == 2
    assert "unknown parameter" in capsys.readouterr().err


def test_verilog_to_file(tmp_path):
    out = tmp_path / "x" / "hs.v"
    assert main(["verilog", "header_serializer", "-o", str(out), "-p", "data_width=128"]) == 0
    text = out.read_text()
    assert "module header_serializer" in text and "[127:0] o__tdata" in text


def test_docs_reference_is_up_to_date():
    """docs/reference.md is what `mcf docs` renders from the spec (run `make docs` after a change)."""
    assert main(["docs", "--check", "-o", str(ROOT / "docs" / "reference.md")]) == 0


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "commands" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["bench", "--help"], ["docs", "--help"]])
def test_help_exits_zero(argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
