"""``mcf bench dma``: loader and writer bytes per cycle against cocotbext-axi AxiRam.

Long transfers, no backpressure anywhere: the loader gets whole-buffer LOADs alternating
between the two buffers (so draining one overlaps filling the other); the writer gets long
STOREs.  Cycles run from the first address handshake to the last R beat (loader) or B
response (writer); peak is one full beat per cycle.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

#: The loader's and the writer's bench (module, coroutine), run here without backpressure:
#: the scenario and its checks are written once, beside the blocks' tests.
LOADER_BENCH = ("tests.hw.dma.test_loader", "run_load")
WRITER_BENCH = ("tests.hw.dma.test_writer", "run_store")

NAME = "dma"
HELP = "DMA loader and writer throughput (bytes/cycle vs. the AXI4 peak) in simulation"


def add_arguments(p) -> None:
    p.add_argument("--data-width", type=int, default=128, help="AXI4 data width in bits (default: %(default)s)")
    p.add_argument("--buffer-bytes", type=int, default=4096, help="ping-pong buffer size (default: %(default)s)")
    p.add_argument("--descriptors", type=int, default=8, help="transfers per engine (default: %(default)s)")
    p.add_argument("--store-bytes", type=int, default=16384, help="bytes per writer transfer (default: %(default)s)")


def run(args) -> dict:
    from mcf.hw.dma import DmaLoader, DmaWriter
    from mcf.sim.runner import run_cocotb

    if args.descriptors < 2:
        raise ValueError("--descriptors must be >= 2 (the ping-pong needs two transfers to overlap)")
    out = {}
    with tempfile.TemporaryDirectory(prefix="mcf-bench-dma-") as tmp:
        tmp = Path(tmp)
        for name, dut, bench, extra in (
            ("loader", DmaLoader(args.data_width, buffer_bytes=args.buffer_bytes), LOADER_BENCH,
             {"buffer_bytes": args.buffer_bytes, "buffers": 2}),
            ("writer", DmaWriter(args.data_width), WRITER_BENCH, {"max_length": args.store_bytes}),
        ):
            report = tmp / f"{name}.json"
            run_cocotb(dut, bench[0], tmp / name, testcase=bench[1],
                       params={"data_width": args.data_width, "descriptors": args.descriptors,
                               "backpressure": False, "long": True, "report": str(report), **extra})
            figures = json.loads(report.read_text())
            out[name] = {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}
    return out
