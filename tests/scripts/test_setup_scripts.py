"""The set-up scripts `make` runs: quiet no-ops when all is there, one clear line when not."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENSURE = ROOT / "scripts" / "ensure-simulators.sh"


def test_scripts_parse():
    for script in (ROOT / "scripts").glob("*.sh"):
        subprocess.run(["bash", "-n", str(script)], check=True)


def test_simulators_present_is_a_silent_no_op():
    r = subprocess.run(["bash", str(ENSURE)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root to drop to an unprivileged user")
def test_missing_simulator_without_privileges_is_one_clear_error(tmp_path):
    # A PATH with bash and coreutils but no iverilog/verilator/sudo, as user nobody.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "id", "sed", "head"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    tmp_path.chmod(0o755)
    # The script comes on stdin: the checkout may sit in a 0700 folder (a fresh clone under
    # `mktemp -d`) that user nobody cannot read.
    with open(ENSURE) as script:
        r = subprocess.run([shutil.which("setpriv"), "--reuid=65534", "--regid=65534", "--clear-groups",
                            str(bin_dir / "bash"), "-s"],
                           stdin=script, capture_output=True, text=True, timeout=60,
                           env={"PATH": str(bin_dir)})
    assert r.returncode == 1
    lines = [l for l in r.stderr.splitlines() if l.startswith("mcf: error")]
    assert len(lines) == 1 and "iverilog" in lines[0] and "sudo apt-get install" in lines[0]


@pytest.mark.parametrize("pytest_rc,make_ok", [(5, False), (0, True), (1, False)])
def test_make_test_exit_codes(tmp_path, pytest_rc, make_ok):
    """`make test` fails when pytest collects no tests (exit 5), passes only on exit 0."""
    for name in ("Makefile", "pyproject.toml", "setup.py"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    fake = venv_bin / "python"
    fake.write_text(f"#!/bin/sh\nexit {pytest_rc}\n")
    fake.chmod(0o755)
    (tmp_path / ".venv" / ".mcf-installed").touch()  # newer than the requirements: no re-install
    r = subprocess.run(["make", "-s", "test"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert (r.returncode == 0) == make_ok, r.stderr
    if pytest_rc == 5:
        assert "collected no tests" in r.stderr


def test_ci_runs_make_test():
    lines = [l for l in (ROOT / ".ci" / "run").read_text().splitlines() if l and not l.startswith("#")]
    assert lines[-1].strip() == "make test"
