"""``mcf bench nic``: NIC throughput (forwarding, multicast), added latency and reduction
rate, measured in cycles in an Icarus simulation of the RTL (no backpressure)."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

NAME = "nic"
HELP = "NIC beats/cycle/port (forward, multicast), latency in cycles, reduction elements/cycle"


def add_arguments(p):
    p.add_argument("--data-width", type=int, default=64, help="AXI-Stream data width in bits")
    p.add_argument("--ports", type=int, default=3, help="network ports")
    p.add_argument("--packet-beats", type=int, default=64, help="payload beats per long packet")
    p.add_argument("--packets", type=int, default=16, help="packets per input and phase")
    p.add_argument("--reduce-beats", type=int, default=32, help="payload beats per reduction")


def run(args) -> dict:
    from mcf.hw.nic.nic import Nic
    from mcf.sim.runner import run_cocotb

    depth = 1
    while depth < 2 * args.packet_beats:
        depth *= 2
    rbeats = 1
    while rbeats < args.reduce_beats:
        rbeats *= 2
    nic = Nic(args.data_width, args.ports, buffer_depth=depth, desc_depth=8, route_entries=256,
              reduce_slots=4, reduce_beats=rbeats)
    with tempfile.TemporaryDirectory(prefix="mcf-bench-nic-") as tmp:
        out = Path(tmp) / "result.json"
        run_cocotb(nic, "mcf.sim.nic.bench_nic", Path(tmp) / "build", testcase="bench",
                   params={"data_width": args.data_width, "net_ports": args.ports,
                           "packet_beats": args.packet_beats, "packets": args.packets,
                           "reduce_beats": args.reduce_beats, "out": str(out)})
        res = json.loads(out.read_text())
    res.update(data_width=args.data_width, net_ports=args.ports, packet_beats=args.packet_beats)
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in res.items()}
