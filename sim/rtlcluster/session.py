"""The simulator side of the ``rtl`` backend (``mcf.sim.rtlcluster.backend``): a cocotb test that
runs the PS runtime's session on the RTL cluster.

It unpickles the ``Session`` the mcf process built (plan, lowering, quantized model), gives it
the simulated boards -- per node a ``Driver`` over ``CocotbBackend`` and a ``SimDmaMemory`` over
the node's ``AxiRam`` DDR (``ClusterHarness``) -- fills the switch's forwarding table from the
lowering's route tables (the switch is equipment outside the nodes: its table is set up the way
an operator configures a real switch's VLANs), runs ``session.main()`` and pickles back the
report, the switch's link bytes and counters, every node's final DDR, or the runtime's error.
"""
from __future__ import annotations

import os
import pickle
import time
import traceback

import cocotb
from cocotb.triggers import ClockCycles

from mcf.sim.cocotb_util import params
from mcf.spec.node import NodeConfig
from mcf.sw.runtime.backend import Backend

from .harness import ClusterHarness


class _SimBoards(Backend):
    """The session's backend inside the simulator."""

    def __init__(self, h: ClusterHarness):
        super().__init__("rtl", [p.driver for p in h.nodes], [p.memory for p in h.nodes], h.config.clock_hz)
        self.h = h

    def link_bytes(self) -> dict:
        return self.h.link_bytes()


def _dump(path: str, obj) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)                       # atomic: the mcf process reads all or nothing


async def _progress(h: ClusterHarness, path: str | None, every: int) -> None:
    """Every ``every`` cycles a line (cycle, wall-clock seconds, each node's SEQ_PC) appended to
    ``path``: the mcf process shows it.  Single register reads only, which the runtime's own
    index/data register pairs do not mind."""
    if not path:
        return
    t0 = time.monotonic()
    while True:
        await ClockCycles(h.dut.clk, every)
        pcs = [await n.driver.read32("SEQ_PC") for n in h.nodes]
        with open(path, "a") as f:
            f.write(f"cycle {h.cycle()}, {time.monotonic() - t0:.0f} s: SEQ_PC {pcs}\n")


@cocotb.test()
async def run_session(dut):
    p = params()
    with open(p["session"], "rb") as f:
        session = pickle.load(f)
    cfg = NodeConfig(**p["config"])             # the built node (capacities >= the session's)
    h = ClusterHarness(dut, p["nodes"], cfg, phys_base=p["phys_base"], window_bytes=p["window"],
                       pause_probability=p["pauses"], seed=p["seed"])
    await h.start()
    watchdog = h.watchdog(p["wall_s"], "the rtl session")
    ticker = cocotb.start_soon(_progress(h, p.get("progress"), p.get("progress_cycles", 100_000)))
    await h.configure_switch(session.lw.routes)
    h.inject(drop_at=dict(p.get("drop_at", [])), corrupt_at=dict(p.get("corrupt_at", [])))
    session.backend = _SimBoards(h)
    report, error = None, None
    try:
        report = await session.main()
        report.lowered = None                   # the mcf process has it
    except Exception as exc:                     # the runtime's error goes back, as one line there
        try:
            pickled = pickle.dumps(exc)
            pickle.loads(pickled)
        except Exception:
            pickled = None
        error = {"type": type(exc).__name__, "message": str(exc), "pickled": pickled,
                 "cause": getattr(exc, "cause", None), "pc": getattr(exc, "pc", None),
                 "traceback": traceback.format_exc()}
    watchdog.cancel()
    ticker.cancel()
    _dump(p["out"], {
        "report": report, "error": error, "link_bytes": h.link_bytes(), "switch": h.switch_counters(),
        "violations": h.violations(), "cycles": h.cycle(),
        "ddr": [bytes(n.ddr.ddr) for n in h.nodes],
    })
