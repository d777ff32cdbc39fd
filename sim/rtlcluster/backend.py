"""The runtime's ``rtl`` backend (``mcf run --backend rtl``): the PS runtime
(``mcf.sw.runtime.runtime.Session``) drives N RTL ``Node`` tops on the switch model under
Verilator (``ClusterTop``), through the same ``Driver`` it uses on the ISA simulator and on a
board.

    factory(nodes, node_config, ddr_bytes, topology) -> RtlBackend       (in the mcf process)
    Session(..., factory=rtl_backend).run()
        -> RtlBackend.run_session(session): build the cluster (cached), start the simulator;
           in it (``mcf.sim.rtlcluster.session``, a cocotb test) the session gets the simulated
           boards -- per node a ``Driver`` over ``CocotbBackend`` (AXI-Lite) and a
           ``SimDmaMemory`` over the node's DDR (``AxiRam``) -- and runs ``session.main()``:
           weights, tables, token ids and programs into each DDR, start, bounded wait, results;
        <- the ``RunReport``, the switch's link bytes and every node's final DDR image.

The session goes to the simulator process and the report comes back pickled (files in the run's
build folder): the runtime runs inside the simulator as a coroutine on the cocotb clock, as the
harness's contract says, and nothing of it is re-implemented here.  After the run, ``memories``
hold each node's final DDR (so a test reads the KV the RTL wrote, as on the ISA backend).

Faults can be injected in the switch (``drop_at`` / ``corrupt_at``: ``{node: k}``, the k-th
packet node sends, 1-based) and random pauses on the DDR channels (``pause_probability``).

A failure inside the simulation (a node fault, a bounded wait that ran out, a driver error) is
raised again here as the runtime's own exception: the ``mcf`` command prints it as one line.

The node the cluster instantiates is ``mcf.hw.node.Node`` (sequencer + execute unit
``mcf.hw.compute.exec.unit.ExecUnit``); a Node top that cannot run programs (no sequencer or no execute unit)
is refused up front with one line saying what is missing, never simulated into fake results.
"""
from __future__ import annotations

import inspect
import os
import pickle
import sys
import tempfile
import threading
import time
from pathlib import Path

from mcf.spec.node import NodeConfig
from mcf.spec.isa import SeqFault
from mcf.sw.driver import DriverError, DriverTimeout, NodeFault
from mcf.sw.driver.memory import HostMemory
from mcf.sw.errors import UserError
from mcf.sw.runtime.backend import Backend

#: Where every node's DMA window starts in its physical address space (the KR260's PS DDR
#: begins at 0; a non-zero base proves that nothing confuses offsets and addresses).
PHYS_BASE = 0x1000_0000
#: Wall-clock bound of a whole simulation, beyond the runtime's per-step bound (seconds).
DEFAULT_WALL_S = 3600.0
#: One Verilator build serves every run of up to this many nodes (a smaller run leaves the
#: other node slots idle): the build (minutes) is shared, the simulation (seconds) pays.
MIN_SLOTS = 4
#: Capacities the built nodes have at least (a run's lowering sizes them to what it uses, so
#: each run would otherwise build its own cluster): route table entries, reductions in
#: progress, SOFTMAX_MERGE fan-in.  Larger tables than a program uses change nothing it does.
#: And two weight loaders on two HP ports (``NodeConfig.weight_ports`` / ``hp_ports``, placed by
#: ``NodeConfig.ddr_masters``): every RTL run streams its GEMM weights over two AXI4 masters into
#: two DDR ports, as the KR260 node does over four (the programs do not depend on the ports).
BUILD_FLOOR = {"route_entries": 32, "reduce_slots": 2, "softmax_fan_in": 4, "weight_ports": 2, "hp_ports": 2}


#: The model shapes the cluster is built with at least.  The execute unit depends on a model's
#: shapes only through the widest row it handles (``max(hidden, intermediate, heads x head_dim)``,
#: ``hw.compute.exec.movers.Geometry``) and through ``head_dim`` (the attention unit and KV
#: writer are built for one); every other shape (hidden size, head counts, GQA ratio, vocabulary,
#: tied or untied LM head) is a field of the instructions.  So a build takes these shapes with
#: the widest row raised to the model's: every model with the same head_dim and no wider row
#: than the tiny model's runs on the tiny model's build.
SHAPE_FLOOR = {"hidden_size": 64, "intermediate_size": 128, "num_heads": 4, "num_kv_heads": 2}


def widest_row(node: NodeConfig) -> int:
    """The widest row of ``node``'s model shapes (what the execute unit is sized for)."""
    return max(node.hidden_size, node.intermediate_size, node.num_heads * node.head_dim)


def build_config(node: NodeConfig) -> NodeConfig:
    """The node the cluster is built with for a run lowered for ``node``: its capacities
    raised to ``BUILD_FLOOR`` and its model shapes made ``SHAPE_FLOOR`` with the widest row
    raised to ``node``'s (so runs of different sizes, schemes and models share one build).
    The cluster's harness drives one clock: the weight loaders of its nodes run on it
    (``weight_clock_hz`` 0; the two-clock loaders are verified in tests/hw/compute/exec)."""
    shapes = dict(SHAPE_FLOOR)
    floor = max(shapes["hidden_size"], shapes["intermediate_size"], shapes["num_heads"] * node.head_dim)
    shapes["intermediate_size"] = max(floor, widest_row(node))
    return node.replace(**{k: max(getattr(node, k), v) for k, v in BUILD_FLOOR.items()}, **shapes,
                        weight_clock_hz=0)


def _cache_dir() -> Path:
    """Verilator builds of the cluster, kept between runs: ``$MCF_SIM_CACHE`` or
    ``$XDG_CACHE_HOME/mcf/verilator``."""
    if os.environ.get("MCF_SIM_CACHE"):
        return Path(os.environ["MCF_SIM_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mcf" / "verilator"


def node_factory():
    """The RTL node that runs programs: ``mcf.hw.node.Node`` (sequencer + execute unit).
    UserError (one line) naming what is missing when the Node top of this build cannot."""
    from mcf.hw import node as hw_node
    if "exec_unit" not in inspect.signature(hw_node.Node.__init__).parameters:
        raise UserError("--backend rtl: the RTL Node top (mcf.hw.node.Node) has no sequencer and execute "
                        "unit in this build, so it cannot run the runtime's programs")
    return hw_node.Node


def check_node(node) -> None:
    """Refuse an elaborated node that cannot run programs (no sequencer, or no execute unit)."""
    from mcf.hw.compute.exec.unit import ExecUnit
    missing = [what for what, ok in (("sequencer", hasattr(node, "seq")),
                                     ("execute unit", isinstance(getattr(node, "exec", None), ExecUnit))) if not ok]
    if missing:
        raise UserError(f"--backend rtl: the RTL Node top ({type(node).__module__}.{type(node).__qualname__}) "
                        f"has no {' and no '.join(missing)}, so it cannot run the runtime's programs")


def tiny_cluster_config() -> NodeConfig:
    """The node of the tiny model's runs on up to ``MIN_SLOTS`` nodes, as built (the benches of
    ``tests/sim/rtlcluster`` use it too, so make test builds one cluster)."""
    from mcf.sw.models import load_model
    from mcf.sw.runtime.runtime import node_config
    return build_config(node_config(load_model("tiny"), MIN_SLOTS))


def model_profile(profile: str = "kr260"):
    """``profile`` with the link figures of the RTL cluster's switch (``SwitchTiming``: line
    rate and latency), so that the model backend and the RTL cluster run the same network and
    their difference is the nodes' (``mcf bench isa-costs``, the model-vs-RTL test)."""
    from mcf.sw.mars.profile import load_profile
    from .switch import SwitchTiming
    t = SwitchTiming()
    return load_profile(profile).with_(link_bandwidth_bps=t.link_bps, link_latency_s=t.latency_ns * 1e-9)


class RtlBackend(Backend):
    """N RTL nodes under Verilator; see the module docstring."""

    def __init__(self, nodes: int, node: NodeConfig, ddr_bytes: int, *, pause_probability: float = 0.0,
                 seed: int = 1, cache_dir=None, work_dir=None, wall_s: float = DEFAULT_WALL_S,
                 progress=None, node_class=None, require_exec: bool = True, drop_at: dict | None = None,
                 corrupt_at: dict | None = None):
        from .top import ClusterTop
        if not 1 <= nodes <= 16:
            raise UserError(f"--backend rtl: --nodes={nodes}: the RTL cluster has 1..16 nodes")
        window = -(-int(ddr_bytes) // 4096) * 4096
        if PHYS_BASE + window > 1 << node.ddr_addr_bits:
            raise UserError(f"--backend rtl: the DDR map needs {window:#x} bytes, more than the node's "
                            f"{node.ddr_addr_bits}-bit DDR address space holds above {PHYS_BASE:#x}")
        self.hw_config = build_config(node)
        self.slots = max(nodes, MIN_SLOTS)
        self.top = ClusterTop(self.slots, self.hw_config, node_class=node_class or node_factory())
        if require_exec:                        # False only for tests of the plumbing itself
            check_node(self.top.node)
        super().__init__("rtl", [None] * nodes, [HostMemory(window, PHYS_BASE) for _ in range(nodes)],
                         node.clock_hz)
        self.n, self.node_cfg, self.window = nodes, node, window
        self.pause_probability, self.seed, self.wall_s = pause_probability, seed, wall_s
        self.drop_at, self.corrupt_at = dict(drop_at or {}), dict(corrupt_at or {})   # faults the switch injects
        self.cache_dir = Path(cache_dir) if cache_dir is not None else _cache_dir()
        self.work_dir = work_dir
        self.progress = progress if progress is not None else (lambda msg: None)
        self._link_bytes = None
        self.switch = None                      # the switch's counters after the run
        self.sim_seconds = self.cycles = None   # wall-clock seconds and node cycles the run simulated

    def run(self, coro):
        coro.close()
        raise RuntimeError("the rtl backend runs a whole session in the simulator: Session.run() "
                           "calls run_session")

    def run_session(self, session):
        from mcf.sim.runner import run_cocotb
        own = self.work_dir is None
        work = Path(tempfile.mkdtemp(prefix="mcf-rtl-")) if own else Path(self.work_dir)
        work.mkdir(parents=True, exist_ok=True)
        try:
            backend, session.backend = session.backend, None     # the simulator gives its own
            try:
                with open(work / "session.pkl", "wb") as f:
                    pickle.dump(session, f, protocol=pickle.HIGHEST_PROTOCOL)
            finally:
                session.backend = backend
            out = work / "result.pkl"
            self.progress(f"rtl: {self.n} node(s) on a {self.slots}-node RTL cluster under Verilator "
                          f"(build cached in {self.cache_dir})")
            t0 = time.monotonic()
            progress = work / "progress.txt"
            progress.unlink(missing_ok=True)
            stop = threading.Event()
            tail = threading.Thread(target=_tail, args=(progress, stop, self.progress), daemon=True)
            tail.start()
            try:
                run_cocotb(self.top, "mcf.sim.rtlcluster.session", work / "sim", sim="verilator",
                           testcase="run_session", cache_dir=self.cache_dir,
                           params={"session": str(work / "session.pkl"), "out": str(out), "nodes": self.n,
                                   "config": self.top.config.as_dict(), "phys_base": PHYS_BASE,
                                   "window": self.window, "pauses": self.pause_probability, "seed": self.seed,
                                   "wall_s": self.wall_s, "progress": str(progress),
                                   "drop_at": sorted(self.drop_at.items()),
                                   "corrupt_at": sorted(self.corrupt_at.items())})
            finally:
                stop.set()
                tail.join(timeout=5)
            self.sim_seconds = time.monotonic() - t0
            if not out.is_file():
                raise DriverError(f"--backend rtl: the simulation left no result (log: {work / 'sim' / 'sim.log'})")
            with open(out, "rb") as f:
                result = pickle.load(f)
        finally:
            if own:
                import shutil
                shutil.rmtree(work, ignore_errors=True)
        self._link_bytes, self.switch, self.cycles = result["link_bytes"], result["switch"], result["cycles"]
        for mem, image in zip(self.memories, result["ddr"]):
            mem.device_write(mem.phys_base, image)
            mem.invalidate()
        if result.get("error") is not None:
            raise _error(result["error"])
        report = result["report"]
        report.lowered = session.lw
        self.progress(f"rtl: simulated in {self.sim_seconds:.1f} s")
        return report

    def link_bytes(self) -> dict | None:
        return self._link_bytes


def _tail(path: Path, stop: threading.Event, show) -> None:
    """Show the simulation's progress lines as they come."""
    seen = 0
    while not stop.wait(2.0):
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for line in lines[seen:]:
            show(f"rtl: {line}")
        seen = len(lines)


def _error(err: dict) -> Exception:
    """The simulator side's exception, raised again here (pickled when it can be)."""
    exc = None
    if err.get("pickled") is not None:
        try:
            exc = pickle.loads(err["pickled"])
        except Exception:
            exc = None
    if isinstance(exc, Exception):
        return exc
    if err["type"] == "NodeFault":             # its constructor takes the cause and the pc
        return NodeFault(err["message"], SeqFault(err["cause"]), err["pc"])
    if err["type"] == "DriverTimeout":
        return DriverTimeout(err["message"])
    return DriverError(f"{err['type']}: {err['message']}")


def rtl_backend(nodes: int, node: NodeConfig, ddr_bytes: int, topology: str = "switch", **kw) -> RtlBackend:
    """The runtime's backend factory for ``--backend rtl`` (``mcf.sw.runtime.backend``)."""
    if topology != "switch":
        raise UserError(f"--backend rtl: --topology {topology}: the RTL cluster's nodes meet at a switch "
                        f"(a KR260 has one SFP+ cage); use --topology switch")
    kw.setdefault("progress", lambda msg: print(msg, file=sys.stderr, flush=True))
    return RtlBackend(nodes, node, ddr_bytes, **kw)
