"""``mcf demo``: the main job, end to end, printing what was checked at each step.

Steps: Verilog for every registered block, a cocotb simulation of the packet framing
against the spec's encoder, the PS driver programming the register block and DMA against
cocotbext-axi's AxiRam (more steps join as the system grows).
"""
from __future__ import annotations

import time
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the end-to-end demo and report what was checked",
                       description="Generate Verilog for every block, run RTL simulations against "
                                   "the golden references, and print what was checked.")
    p.add_argument("--out", default="build/demo", help="output folder (default: %(default)s)")
    p.set_defaults(func=run)


def step_verilog(out: Path) -> str:
    from mcf.hw import registry
    folder = out / "verilog"
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for name, info in registry.blocks().items():
        for variant in ({}, *info.variants):
            suffix = "".join(f"_{k}{v}" for k, v in variant.items())
            (folder / f"{name}{suffix}.v").write_text(info.verilog(**variant))
            written += 1
    return f"generated Verilog for {written} block configurations in {folder}/"


def step_header_sim(out: Path) -> str:
    from mcf.hw.packet.header import HeaderDeserializer, HeaderSerializer
    from mcf.sim.runner import run_cocotb
    checked = []
    for width in (64, 128):
        run_cocotb(HeaderSerializer(width), "mcf.sim.packet.test_header", out / f"sim_ser{width}",
                   testcase="serialize", params={"data_width": width, "packets": 200})
        run_cocotb(HeaderDeserializer(width), "mcf.sim.packet.test_header", out / f"sim_des{width}",
                   testcase="deserialize", params={"data_width": width, "packets": 200})
        checked.append(str(width))
    return ("header serializer/deserializer (Icarus, random backpressure): 200 packets each at "
            f"{' and '.join(checked)} bits equal mcf.spec's encoder byte for byte; "
            "truncated and corrupted headers flagged")


def step_csr_dma(out: Path) -> str:
    from argparse import Namespace

    from mcf.hw.dma import ControlAndDma
    from mcf.sim.benchmarks import dma as dma_bench
    from mcf.sim.runner import run_cocotb
    cfg = {"data_width": 64, "buffer_bytes": 512, "buffers": 2, "meta_queue_depth": 4,
           "desc_queue_depth": 4, "descriptors": 16}
    run_cocotb(ControlAndDma(**{k: v for k, v in cfg.items() if k != "descriptors"}),
               "mcf.sim.dma.test_system", out / "sim_csr_dma", testcase=["bad_input", "program"], params=cfg)
    fig = dma_bench.run(Namespace(data_width=128, buffer_bytes=4096, descriptors=4, store_bytes=8192))
    return ("PS driver (cocotb backend) -> AXI-Lite registers -> DMA vs AxiRam: a 16-descriptor "
            "LOAD/STORE program under random backpressure matches the RAM; zero-length, "
            "out-of-window, bad-buffer, unaligned, too-long and queue-full descriptors are counted "
            "and issue no AXI transaction; 128-bit throughput: loader "
            f"{fig['loader']['utilization']:.1%}, writer {fig['writer']['utilization']:.1%} of peak")


STEPS = [
    ("Verilog", step_verilog),
    ("packet framing RTL vs spec", step_header_sim),
    ("driver + registers + DMA vs AxiRam", step_csr_dma),
]


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    total = len(STEPS)
    for i, (title, step) in enumerate(STEPS, 1):
        print(f"[{i}/{total}] {title} ...", flush=True)
        t0 = time.monotonic()
        result = step(out)
        print(f"      ok ({time.monotonic() - t0:.1f} s): {result}", flush=True)
    print(f"demo: all {total} steps passed")
    return 0
