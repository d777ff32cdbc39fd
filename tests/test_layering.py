"""Data flows one way (ARCHITECTURE.md): spec imports nothing of ours but spec; hw imports
spec (never the golden model or the runtime); the golden model imports nothing from hw; the
prefix KV tier (PS code) imports neither the simulators nor the golden model."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RULES = {                       # folder -> mcf packages it must not import
    "spec": ("mcf.hw", "mcf.sw", "mcf.sim", "mcf.boards"),
    "hw": ("mcf.sw", "mcf.sim", "mcf.boards"),
    "sw/golden": ("mcf.hw", "mcf.sim", "mcf.boards", "mcf.sw.mars", "mcf.sw.driver"),
    "sw/mars": ("mcf.hw", "mcf.sim", "mcf.boards", "mcf.sw.golden", "mcf.sw.driver"),
    # the prefix KV tier runs on the PS: spec, models and errors only (the cluster model and the
    # golden cache reach it through arguments: a PrefillCurve, a KVSink)
    "sw/kvtier": ("mcf.hw", "mcf.sim", "mcf.boards", "mcf.sw.golden", "mcf.sw.driver", "mcf.sw.mars",
                  "mcf.sw.commands"),
}


def imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


@pytest.mark.parametrize("folder", sorted(RULES))
def test_no_backward_imports(folder):
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for name in imports(path):
            if name.startswith(RULES[folder]):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)
