"""Run a cocotb test module against an Amaranth component, in a few lines.

A block's bench lives in its test module (``tests/hw/packet/test_header.py``): the cocotb
coroutines (``@cocotb.test()``, named ``run_*`` so that pytest does not collect them) beside
the pytest functions that run them::

    run_cocotb(HeaderSerializer(64), __name__, build_dir,
               testcase="run_serialize", params={"data_width": 64})

The component is converted to Verilog, built with Icarus (timescale 1ns/1ps: Amaranth's
Verilog carries none) and the named cocotb test module runs against it; the repository root
is on the simulator's Python path, so ``tests.hw.packet.test_header`` imports there as it
does under pytest.  ``params`` reach the test module as JSON in ``MCF_PARAMS`` (read them
with ``mcf.sim.cocotb_util.params()``).
The call raises ``AssertionError`` unless at least one test ran and none failed.  Waits
inside a bench are bounded in simulated time (``mcf.sim.cocotb_util.bounded``); the test
suite bounds wall-clock time per test (pytest-timeout).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from amaranth.back import verilog


#: The repository root (``sim/`` is one of its folders): test modules import from here.
REPO_ROOT = Path(__file__).resolve().parents[1]


class SimulationError(AssertionError):
    """A simulation did not pass (an AssertionError: pytest shows it as a failure).  The ``mcf``
    command prints its first line and the log's path as one ``mcf: error:`` line (exit 2)."""
    user_error = True


@contextlib.contextmanager
def _repo_on_path():
    """cocotb's runner hands the simulator ``PYTHONPATH = sys.path`` of this process: make
    sure the repository root is on it (``mcf bench`` and ``mcf demo`` run from any folder)."""
    root = str(REPO_ROOT)
    added = root not in sys.path
    if added:
        sys.path.append(root)
    try:
        yield
    finally:
        if added:
            sys.path.remove(root)


def write_verilog(component, toplevel: str, build_dir: Path) -> Path:
    build_dir.mkdir(parents=True, exist_ok=True)
    path = build_dir / f"{toplevel}.v"
    path.write_text(verilog.convert(component, name=toplevel))
    return path


def run_cocotb(component, test_module: str, build_dir, *, toplevel: str = "dut",
               testcase: str | list[str] | None = None, params: dict | None = None,
               seed: int | None = None, sim: str = "icarus", waves: bool = False) -> dict:
    """Build ``component`` and run ``test_module`` on it; returns ``{"tests", "failed", "results"}``."""
    from cocotb_tools.runner import get_results, get_runner

    build_dir = Path(build_dir).resolve()
    source = write_verilog(component, toplevel, build_dir)
    if sim == "icarus" and shutil.which("iverilog") is None:
        raise SimulationError("iverilog not found: run `make setup` (installs Icarus Verilog)")
    runner = get_runner(sim)
    # Icarus: Verilog-2005 semantics, so the declaration initialiser that Yosys's Verilog uses
    # to run every ``always @*`` once at time 0 is an event (under -g2012 it is not, and
    # combinational outputs of an FSM or ``m.Switch`` stay X until an input changes).
    build_args = ["-g2005"] if sim == "icarus" else []
    runner.build(sources=[source], hdl_toplevel=toplevel, build_dir=build_dir, always=True,
                 timescale=("1ns", "1ps"), waves=waves, log_file=build_dir / "build.log",
                 build_args=build_args)
    results_xml = build_dir / "results.xml"
    results_xml.unlink(missing_ok=True)
    env = {"MCF_PARAMS": json.dumps(params or {}),
           "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING")}
    log_file = build_dir / "sim.log"
    # Exact test names (cocotb's own ``testcase`` matches suffixes: "serialize" would
    # also run "deserialize").
    names = [testcase] if isinstance(testcase, str) else testcase
    test_filter = rf"\.({'|'.join(re.escape(n) for n in names)})$" if names else None
    try:
        with _repo_on_path():
            runner.test(test_module=test_module, hdl_toplevel=toplevel, test_filter=test_filter,
                        seed=seed, build_dir=build_dir, test_dir=build_dir, extra_env=env,
                        results_xml=str(results_xml), waves=waves, log_file=log_file)
    except SystemExit:
        pass  # under pytest the runner exits on failures; the results file says which
    except subprocess.CalledProcessError as exc:  # the simulator itself crashed
        raise SimulationError(f"simulator failed ({exc}); log: {log_file}\n{_tail(log_file)}") from None
    if not results_xml.exists():
        raise SimulationError(f"no results from {test_module}; log: {log_file}\n{_tail(log_file)}")
    tests, failed = get_results(results_xml)
    if tests == 0:
        raise SimulationError(f"{test_module}: no cocotb test ran (testcase={testcase!r})")
    if failed:
        raise SimulationError(f"{test_module}: {failed} of {tests} cocotb tests failed:\n"
                              f"{_failures(results_xml)}\nlog: {log_file}")
    return {"tests": tests, "failed": failed, "results": results_xml}


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _failures(results_xml: Path) -> str:
    out = []
    for case in ET.parse(results_xml).getroot().iter("testcase"):
        for fail in list(case.iter("failure")) + list(case.iter("error")):
            out.append(f"  {case.get('name')}: {fail.get('message', '')[:2000]}")
    return "\n".join(out)
