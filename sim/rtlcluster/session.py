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
import traceback

import cocotb

from mcf.sim.cocotb_util import params
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


@cocotb.test()
async def run_session(dut):
    p = params()
    with open(p["session"], "rb") as f:
        session = pickle.load(f)
    cfg = session.node
    h = ClusterHarness(dut, p["nodes"], cfg, phys_base=p["phys_base"], window_bytes=p["window"],
                       pause_probability=p["pauses"], seed=p["seed"])
    await h.start()
    watchdog = h.watchdog(p["wall_s"], "the rtl session")
    await h.configure_switch(session.lw.routes)
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
                 "traceback": traceback.format_exc()}
    watchdog.cancel()
    _dump(p["out"], {
        "report": report, "error": error, "link_bytes": h.link_bytes(), "switch": h.switch_counters(),
        "violations": h.violations(), "cycles": h.cycle(),
        "ddr": [bytes(n.ddr.ddr) for n in h.nodes],
    })
