"""``mcf bench eth``: one 10GBASE-R port (framer, CDC FIFOs, MAC, PCS, gearboxes) looped back
through the serial-link model, in an Icarus simulation of the RTL.

* ``sizes.<N>.payload_gbps``: sustained Ethernet payload rate for back-to-back frames with
  an N-byte payload ("64" is the 64-byte minimum frame, 46 bytes of payload), measured in GT
  user-clock cycles at the receiving MAC and converted at the GT's nominal 161.13 MHz;
  ``mcf_data_gbps`` counts only MCF data (the payload less the link sequence number and the
  Meta); ``line_limit_payload_gbps`` is the model limit (preamble, header, FCS and a 12-byte
  average gap per frame at 10 Gb/s).
* ``latency_ns.mac_to_mac``: from the clock edge that takes a minimum frame's /S/ from the
  transmitting MAC to its first word out of the receiving MAC, on an idle link; the GT's
  serializer/deserializer and the fibre are not modelled (the link model is
  ``link_model_words`` GT words).  ``port_to_port`` adds both frame FIFOs (store and
  forward), the framing and the width conversion, node side to node side.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

NAME = "eth"
HELP = "10GBASE-R port: payload Gb/s at 64/1500/9000-byte frames, MAC-to-MAC latency (RTL sim)"


def add_arguments(p) -> None:
    p.add_argument("--frames", type=int, default=8, help="back-to-back frames per size (default: %(default)s)")
    p.add_argument("--sizes", default="64,1500,9000",
                   help="frame sizes: 64 (minimum frame) or Ethernet payload bytes, comma-separated "
                        "(default: %(default)s)")
    p.add_argument("--data-width", type=int, default=128, help="node-side stream width, 64 or 128 (default: %(default)s)")


def _sizes(text: str) -> dict[str, int]:
    from mcf.spec import eth
    out = {}
    for item in text.split(","):
        item = item.strip()
        try:
            n = int(item)
        except ValueError:
            raise ValueError(f"--sizes: {item!r} is not a number") from None
        payload = eth.MIN_DATA_BYTES - eth.ETH_HEADER_BYTES if n == 64 else n
        if not 46 <= payload <= eth.MAX_PAYLOAD_BYTES or payload < 18:
            raise ValueError(f"--sizes: {n} is neither 64 nor a payload of 46..{eth.MAX_PAYLOAD_BYTES} bytes")
        out[item] = payload
    return out


def run(args) -> dict:
    from mcf.sim.eth.link import PortLoop
    from mcf.sim.runner import run_cocotb
    from mcf.spec import eth
    from mcf.sw.mars.profile import load_profile

    if args.frames < 3:
        raise ValueError("--frames must be >= 3 (the rate is measured from the second frame on)")
    if args.data_width not in (64, 128):
        raise ValueError("--data-width must be 64 or 128")
    sizes = _sizes(args.sizes)
    max_frame = max(eth.MIN_FRAME_BYTES, eth.ETH_HEADER_BYTES + max(sizes.values()) + eth.FCS_BYTES)
    delay = 2
    dut = PortLoop(args.data_width, max_frame, delay=delay)
    node_hz = load_profile("kr260").pl_clock_hz
    with tempfile.TemporaryDirectory(prefix="mcf-bench-eth-") as tmp:
        out = Path(tmp) / "result.json"
        run_cocotb(dut, "mcf.sim.eth.bench_eth", Path(tmp) / "build", testcase="bench",
                   params={"sizes": sizes, "frames": args.frames, "data_width": args.data_width,
                           "node_hz": node_hz, "link_delay": delay, "out": str(out)})
        return json.loads(out.read_text())
