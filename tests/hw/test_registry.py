"""Every registered block (and its listed variants) passes ``verilator --lint-only``.

Amaranth's Verilog carries unsized constants and unused debug wires, so WIDTH, UNUSED* and
DECLFILENAME are off; CASEINCOMPLETE too, because Amaranth assigns every signal its default
before a ``case`` (``m.Switch`` / ``m.FSM``), so an uncovered value cannot infer a latch; everything else of -Wall (combinational loops, multiple drivers,
latches, ...) is an error.
"""
import shutil
import subprocess

import pytest

from mcf.hw import registry

#: Variants whose Verilog another test converts anyway and lints with ``lint`` below (one conversion
#: less in ``make test``): the KR260 board's node, by tests/boards/test_kr260.py's dry run; the
#: 10GBASE-R node, by tests/boards/test_eth10g.py's ``--network sfp`` dry run.
LINTED_ELSEWHERE = [("node", {"model": "tiny", "net_ports": 2, "hp_ports": 2, "weight_ports": 2}),
                    ("eth_node", {"model": "tiny", "data_width": 64})]
CASES = [(name, {}) for name, info in registry.blocks().items() if info.lint_default] + [
    (name, variant) for name, info in registry.blocks().items() for variant in info.variants
    if (name, variant) not in LINTED_ELSEWHERE]


def lint(path, top: str):
    """``verilator --lint-only -Wall`` (the warnings Amaranth's Verilog always has left out)."""
    result = subprocess.run(
        ["verilator", "--lint-only", "-Wall", "-Wno-WIDTH", "-Wno-UNUSEDSIGNAL", "-Wno-UNUSEDPARAM",
         "-Wno-DECLFILENAME", "-Wno-CASEINCOMPLETE", "--top-module", top, str(path)],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


def no_dead_always(iverilog_stderr: str):
    """No ``always @*`` without sensitivities (Icarus never runs one: what it drives stays X)."""
    dead = [line for line in iverilog_stderr.splitlines() if "no sensitivities" in line]
    assert not dead, "\n".join(dead[:10])


def test_registry_is_not_empty():
    assert "header_serializer" in registry.blocks()


@pytest.mark.parametrize("name,params", CASES, ids=[f"{n}-{p}" if p else n for n, p in CASES])
def test_lint_and_icarus(name, params, tmp_path):
    """One conversion per block, two checks: ``verilator --lint-only``, and no ``always @*``
    without sensitivities: Icarus never runs one, so what it drives stays X in every cocotb
    bench (Yosys emits one for the constant bits of a partially driven signal: drive whole
    signals instead).  The second check guards Icarus benches only: a block registered with
    ``icarus_default=False`` (a top too large for Icarus, only Verilator simulates it: the Qwen
    node) skips it for its default parameters; its variants (the tiny node, which Icarus
    benches do run) keep it."""
    for tool in ("verilator", "iverilog"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not found: run `make setup`")
    path = tmp_path / f"{name}.v"
    path.write_text(registry.get(name).verilog(**params))
    lint(path, name)
    if not params and not registry.get(name).icarus_default:
        return
    result = subprocess.run(["iverilog", "-g2005", "-o", str(tmp_path / "a.vvp"), str(path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    no_dead_always(result.stderr)
