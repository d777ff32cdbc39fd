"""Data flows one way (README, "Layout"): spec imports nothing of ours but spec; hw imports
spec (never the golden model, the runtime or the simulation); the golden model, MARS and the
driver import neither hw nor each other's internals; the prefix KV tier (PS code) imports
neither the simulators nor the golden model; and no code of the package imports the tests
(benches and the demo name a test module as a string, for the simulator to import)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ("spec", "hw", "sw", "sim", "boards", "mcf")
RULES = {                       # folder -> modules it must not import
    "spec": ("mcf.hw", "mcf.sw", "mcf.sim", "mcf.boards"),
    "hw": ("mcf.sw", "mcf.sim", "mcf.boards"),
    "sw/golden": ("mcf.hw", "mcf.sim", "mcf.boards", "mcf.sw.mars", "mcf.sw.driver"),
    "sw/mars": ("mcf.hw", "mcf.sim", "mcf.boards", "mcf.sw.golden", "mcf.sw.driver"),
    "sw/driver": ("mcf.hw", "mcf.sim", "mcf.boards", "mcf.sw.golden", "mcf.sw.mars", "mcf.sw.commands"),
    "sw/models": ("mcf.hw", "mcf.sim", "mcf.boards", "mcf.sw.golden", "mcf.sw.mars", "mcf.sw.driver"),
    # the launcher runs on the boards (Python 3.10, no RTL stack: tests/test_python310.py)
    "sw/launch": ("mcf.hw", "mcf.sim", "mcf.boards", "mcf.sw.golden", "amaranth", "cocotb"),
    "boards/kr260/ps.py": ("mcf.hw", "mcf.sim", "amaranth"),
    # the prefix KV tier runs on the PS: spec, models and errors only (the cluster model and the
    # golden cache reach it through arguments: a PrefillCurve, a KVSink)
    "sw/kvtier": ("mcf.hw", "mcf.sim", "mcf.boards", "mcf.sw.golden", "mcf.sw.driver", "mcf.sw.mars",
                  "mcf.sw.commands"),
    # the PS runtime: golden model (quantization), MARS, driver; backends come in as factories
    "sw/runtime": ("mcf.hw", "mcf.sim", "mcf.boards", "mcf.sw.commands"),
    "sim": ("mcf.boards",),
}
for _folder in PACKAGE:          # no package code imports the tests
    RULES[_folder] = RULES.get(_folder, ()) + ("tests",)


def imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def forbidden(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("folder", sorted(RULES))
def test_no_backward_imports(folder):
    bad = []
    paths = [ROOT / folder] if folder.endswith(".py") else sorted((ROOT / folder).rglob("*.py"))
    for path in paths:
        for name in imports(path):
            if forbidden(name, RULES[folder]):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


def test_the_rule_catches_a_backward_import():
    assert forbidden("mcf.sw.golden.fixed", RULES["hw"]) and forbidden("tests.hw.nic", RULES["sim"])
    assert forbidden("mcf.boards.kr260", RULES["sim"]) and forbidden("mcf.hw", RULES["spec"])
    assert not forbidden("mcf.spec.node", RULES["hw"]) and not forbidden("testsuite", ("tests",))
