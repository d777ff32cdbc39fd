"""``mcf bench eth``: one 10GBASE-R port (framer, CDC FIFOs, MAC, PCS, gearboxes) looped back
through the serial-link model (``mcf.sim.eth.link.PortLoop``), in an Icarus simulation of
the RTL: ``run`` builds it and runs this module's cocotb coroutine ``run_measure``, whose
figures come back as JSON in ``params()["out"]``.  Every packet is also checked byte for
byte at the far node side (a benchmark of a broken link is worthless), and any error strobe
during the run fails it.

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
import random
import tempfile
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Edge, FallingEdge, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from mcf.sim.cocotb_util import bounded, params
from mcf.spec import Collective, LinkStatus, Meta, Op, ReduceOp, Stage, eth
from mcf.spec.node import NodeConfig
from mcf.spec.packet import HEADER_BYTES

NAME = "eth"
HELP = "10GBASE-R port: payload Gb/s at 64/1500/9000-byte frames, MAC-to-MAC latency (RTL sim)"


def add_arguments(p) -> None:
    p.add_argument("--frames", type=int, default=8, help="back-to-back frames per size (default: %(default)s)")
    p.add_argument("--sizes", default="64,1500,9000",
                   help="frame sizes: 64 (minimum frame) or Ethernet payload bytes, comma-separated "
                        "(default: %(default)s)")
    p.add_argument("--data-width", type=int, default=128, help="node-side stream width, 64 or 128 (default: %(default)s)")


def _sizes(text: str) -> dict[str, int]:
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

    if args.frames < 3:
        raise ValueError("--frames must be >= 3 (the rate is measured from the second frame on)")
    if args.data_width not in (64, 128):
        raise ValueError("--data-width must be 64 or 128")
    sizes = _sizes(args.sizes)
    max_frame = max(eth.MIN_FRAME_BYTES, eth.ETH_HEADER_BYTES + max(sizes.values()) + eth.FCS_BYTES)
    delay = 2
    dut = PortLoop(args.data_width, max_frame, delay=delay)
    node_hz = NodeConfig().clock_hz
    with tempfile.TemporaryDirectory(prefix="mcf-bench-eth-") as tmp:
        out = Path(tmp) / "result.json"
        run_cocotb(dut, __name__, Path(tmp) / "build", testcase="run_measure",
                   params={"sizes": sizes, "frames": args.frames, "data_width": args.data_width,
                           "node_hz": node_hz, "link_delay": delay, "out": str(out)})
        return json.loads(out.read_text())


#: Ethernet payload = link sequence number + Meta + MCF data.
OVERHEAD = eth.SEQ_BYTES + HEADER_BYTES


def packet(rng, data_bytes):
    meta = Meta(stage=Stage.PREFILL, op=Op.KV_REPLICA, collective=Collective.UNICAST, reduce_op=ReduceOp.NONE,
                src=0, dst=1, route_id=1, kv_id=rng.randrange(1 << 24), length=data_bytes)
    return meta.encode() + rng.randbytes(data_bytes)


class FrameEnds:
    """GT user-clock cycle of every good frame leaving the receiving MAC."""

    def __init__(self, dut):
        self.cycles = []
        self.first_word_ns = []
        cocotb.start_soon(self._run(dut))

    async def _run(self, dut):
        mac = dut.port.mac_pcs.mac_rx
        cycle, in_frame = 0, False
        while True:
            await RisingEdge(dut.eth_tx_clk)
            cycle += 1
            if int(mac.o__tvalid.value):
                if not in_frame:
                    self.first_word_ns.append(get_sim_time("ns"))
                    in_frame = True
                if int(mac.o__tlast.value):
                    in_frame = False
                    if not int(mac.tuser.value):
                        self.cycles.append(cycle)


async def mac_tx_start(dut):
    """Simulated time of the clock edge that takes the next /S/ from the transmitting MAC."""
    data, ctrl = dut.port.mac_pcs.mac_tx.o__data, dut.port.mac_pcs.mac_tx.o__ctrl
    while True:
        await RisingEdge(dut.eth_tx_clk)
        d, c = int(data.value), int(ctrl.value)
        for lane in (0, 4):
            if (c >> lane) & 1 and (d >> 8 * lane) & 0xFF == eth.Xgmii.START:
                return get_sim_time("ns")


@cocotb.test()
async def run_measure(dut):
    p = params()
    rng = random.Random(p.get("seed", 1))
    for name in ("tx__tvalid", "rx__tready", "ctl__mac_w_en", "ctl__resync", "slip", "flip", "cut",
                 "sfp_mod_abs", "sfp_rx_los", "sfp_tx_fault"):
        getattr(dut, name).value = 0
    dut.ctl__node_id.value = 0
    eth_ps = round(1e12 / eth.GT_USRCLK_HZ)
    cocotb.start_soon(Clock(dut.clk, round(1e12 / p["node_hz"]), unit="ps").start())
    cocotb.start_soon(Clock(dut.eth_tx_clk, eth_ps, unit="ps").start())
    dut.rst.value = dut.eth_tx_rst.value = 1
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "tx", bus_separator="__"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "rx", bus_separator="__"), dut.clk, dut.rst)
    await ClockCycles(dut.clk, 4)
    dut.rst.value = dut.eth_tx_rst.value = 0
    for index in (0, 1):
        await FallingEdge(dut.clk)
        dut.ctl__mac_w_en.value, dut.ctl__mac_index.value = 1, index
        dut.ctl__mac_data.value = eth.node_mac(index)
    await FallingEdge(dut.clk)
    dut.ctl__mac_w_en.value = 0

    async def link_up():
        while not (int(dut.ctl__status.value) >> LinkStatus.LINK_UP) & 1:
            await Edge(dut.ctl__status)
    await bounded(link_up(), 1_000_000, "link up")
    await ClockCycles(dut.clk, 8)
    ends = FrameEnds(dut)
    errors = []

    async def watch_errors():
        while True:
            await Edge(dut.errors)
            await RisingEdge(dut.clk)
            if int(dut.errors.value):
                errors.append(int(dut.errors.value))
    cocotb.start_soon(watch_errors())
    result = {"line_rate_gbps": eth.MAC_RATE_BPS / 1e9, "gt_clock_mhz": eth.GT_USRCLK_HZ / 1e6,
              "node_clock_mhz": p["node_hz"] / 1e6, "data_width": p["data_width"],
              "link_model_words": p["link_delay"], "sizes": {}}

    # --- latency: one minimum frame on an idle link ----------------------------------------------
    pk = packet(rng, eth.MIN_DATA_BYTES - eth.ETH_HEADER_BYTES - OVERHEAD)
    in_beat = cocotb.start_soon(first_handshake(dut, "tx"))
    mac_start = cocotb.start_soon(mac_tx_start(dut))
    out_beat = cocotb.start_soon(first_handshake(dut, "rx"))
    await src.send(AxiStreamFrame(pk))
    got = await bounded(sink.recv(), 1_000_000, "latency frame")
    assert bytes(got.tdata) == pk, "latency frame differs"
    t_in, t_tx, t_out = await in_beat, await mac_start, await out_beat
    t_rx = ends.first_word_ns[-1]
    result["latency_ns"] = {"mac_to_mac": round(t_rx - t_tx, 1), "port_to_port": round(t_out - t_in, 1),
                            "frame_bytes": eth.MIN_FRAME_BYTES}

    # --- throughput: back-to-back frames of each size ----------------------------------------------
    for label, payload in p["sizes"].items():
        data_bytes = payload - OVERHEAD
        frames = [packet(rng, data_bytes) for _ in range(p["frames"])]
        first = len(ends.cycles)
        for f in frames:
            await src.send(AxiStreamFrame(f))
        for k, f in enumerate(frames):
            got = await bounded(sink.recv(), 5_000_000, f"{label}-byte frames: frame {k}")
            assert bytes(got.tdata) == f, f"{label}-byte frames: frame {k} differs"
        cyc = ends.cycles[first:]
        assert len(cyc) == len(frames), "frames missing at the receiving MAC"
        # steady state: from the end of the second frame to the end of the last
        n, span = len(cyc) - 2, cyc[-1] - cyc[1]
        seconds = span / eth.GT_USRCLK_HZ
        frame_bytes = max(eth.MIN_FRAME_BYTES, eth.ETH_HEADER_BYTES + payload + eth.FCS_BYTES)
        result["sizes"][label] = {
            "frame_bytes": frame_bytes, "eth_payload_bytes": payload, "mcf_data_bytes": data_bytes,
            "frames_measured": n, "cycles": span,
            "payload_gbps": round(n * payload * 8 / seconds / 1e9, 4),
            "mcf_data_gbps": round(n * data_bytes * 8 / seconds / 1e9, 4),
            "line_limit_payload_gbps": round(payload / eth.wire_bytes(frame_bytes) * eth.MAC_RATE_BPS / 1e9, 4),
        }
        await ClockCycles(dut.clk, 20)
    assert not errors, f"error strobes during the benchmark: {errors}"
    with open(p["out"], "w") as fh:
        json.dump(result, fh)


async def first_handshake(dut, prefix):
    valid, ready = getattr(dut, f"{prefix}__tvalid"), getattr(dut, f"{prefix}__tready")
    while True:
        await RisingEdge(dut.clk)
        if int(valid.value) and int(ready.value):
            return get_sim_time("ns")
