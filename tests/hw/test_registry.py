"""Every registered block (and its listed variants) passes ``verilator --lint-only``.

Amaranth's Verilog carries unsized constants and unused debug wires, so WIDTH, UNUSED* and
DECLFILENAME are off; CASEINCOMPLETE too, because Amaranth assigns every signal its default
before a ``case`` (``m.Switch`` / ``m.FSM``), so an uncovered value cannot infer a latch; everything else of -Wall (combinational loops, multiple drivers,
latches, ...) is an error.
"""
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from mcf.hw import registry

#: Variants whose Verilog another test converts anyway and lints with ``lint`` below (one conversion
#: less in ``make test``): the KR260 board's node, by tests/boards/test_kr260.py's dry run; the
#: 10GBASE-R node, by tests/boards/test_eth10g.py's ``--network sfp`` dry run.
LINTED_ELSEWHERE = [("node", {"model": "tiny", "net_ports": 2, "hp_ports": 2, "weight_ports": 2}),
                    ("eth_node", {"model": "tiny", "data_width": 64})]
#: Blocks linted (and checked with Icarus) as a submodule of a larger case of this list, built by the
#: same code with the same parameters (``test_linted_inside_is_the_same_block`` checks that): the
#: outer case's Verilog holds every module of the block's own conversion, the same text but for
#: Yosys's generated names (``$<n>``) and the order of ports and declarations (compared on
#: 3ea7932: the tiny execute unit's 60 modules inside the tiny node, the NIC's inside the NIC
#: node at both widths), so Verilator and Icarus see the same logic; one conversion and lint less.
LINTED_INSIDE = {("exec", ()): ("node", (("model", "tiny"),)),
                 ("nic", ()): ("nic_node", ()),
                 ("nic", (("data_width", 128),)): ("nic_node", (("data_width", 128),))}
CASES = [(name, {}) for name, info in registry.blocks().items() if info.lint_default] + [
    (name, variant) for name, info in registry.blocks().items() for variant in info.variants
    if (name, variant) not in LINTED_ELSEWHERE]
CASES = [(n, p) for n, p in CASES if (n, tuple(sorted(p.items()))) not in LINTED_INSIDE]


def lint(path, top: str):
    """``verilator --lint-only -Wall`` (the warnings Amaranth's Verilog always has left out), on
    the Verilog without the memories' all-zero initial blocks (``strip_zero_inits``, as ``mcf
    synth`` reads it): Amaranth's backend writes a line per word even for ``init=[]``, constants
    that can make no loop, latch or second driver (an initial block drives nothing Verilator
    counts), and over a quarter of the Qwen node's lint time (its 4 x 8 192-beat SPAD: 58 -> 41
    CPU s).  Every other line, non-zero contents (ROMs) too, is linted as written."""
    from mcf.sw.commands.synth import strip_zero_inits
    with tempfile.TemporaryDirectory() as tmp:        # beside nothing of the caller's build
        source = Path(tmp) / Path(path).name
        source.write_text(strip_zero_inits(Path(path).read_text()))
        result = subprocess.run(
            ["verilator", "--lint-only", "-Wall", "-Wno-WIDTH", "-Wno-UNUSEDSIGNAL", "-Wno-UNUSEDPARAM",
             "-Wno-DECLFILENAME", "-Wno-CASEINCOMPLETE", "--top-module", top, str(source)],
            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


def no_dead_always(iverilog_stderr: str):
    """No ``always @*`` without sensitivities (Icarus never runs one: what it drives stays X)."""
    dead = [line for line in iverilog_stderr.splitlines() if "no sensitivities" in line]
    assert not dead, "\n".join(dead[:10])


def test_registry_is_not_empty():
    assert "header_serializer" in registry.blocks()


def test_linted_inside_is_the_same_block():
    """Each block of ``LINTED_INSIDE`` is built inside its outer case with the parameters it would
    be linted with alone, and the outer case is linted here (construction only: no conversion)."""
    from mcf.hw.compute.exec.unit import ExecUnit
    cases = [(n, tuple(sorted(p.items()))) for n, p in CASES]
    for (inner, inner_params), (outer, outer_params) in LINTED_INSIDE.items():
        assert (outer, outer_params) in cases, (outer, outer_params)
        built = registry.get(outer).build(**dict(outer_params))
        if inner == "exec":
            alone = registry.get("exec").build(**dict(inner_params))
            assert isinstance(built.exec, ExecUnit) and type(built.exec) is type(alone)
            assert built.exec.config == alone.config
        else:                                   # NicNode elaborates Nic(data_width, net_ports, **nic_params())
            cfg = built.config
            assert {"data_width": cfg.data_width, "net_ports": cfg.net_ports, **cfg.nic_params()} == \
                registry.get("nic").check(dict(inner_params))


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
