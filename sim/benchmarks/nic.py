"""``mcf bench nic``: NIC throughput (forwarding, multicast), added latency and reduction
rate, measured in cycles in an Icarus simulation of the RTL (no backpressure).

``run`` builds the NIC and runs this module's cocotb coroutine ``run_measure`` on it; the
figures come back as JSON in ``params()["out"]``.  What flows is checked too (a benchmark of
a broken NIC is worthless).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from mcf import spec
from mcf.sim.cocotb_util import bounded, params, start, write_routes
from mcf.spec import Collective, Op, ReduceOp, Stage
from mcf.spec.packet import header_beats, pad_header
from mcf.sw.golden.nic import RouteEntry, reduce_words

NAME = "nic"
HELP = "NIC beats/cycle/port (forward, multicast), latency in cycles, reduction elements/cycle"


def add_arguments(p):
    from mcf.sw.cliutil import integer
    p.add_argument("--data-width", type=int, default=64, help="AXI-Stream data width in bits")
    p.add_argument("--ports", type=int, default=3, help="network ports")
    p.add_argument("--packet-beats", type=integer(1, 1024), default=64, help="payload beats per long packet")
    p.add_argument("--packets", type=integer(1, 4096), default=16, help="packets per input and phase")
    p.add_argument("--reduce-beats", type=integer(1, 1024), default=32, help="payload beats per reduction")


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
        run_cocotb(nic, __name__, Path(tmp) / "build", testcase="run_measure",
                   params={"data_width": args.data_width, "net_ports": args.ports,
                           "packet_beats": args.packet_beats, "packets": args.packets,
                           "reduce_beats": args.reduce_beats, "out": str(out)})
        res = json.loads(out.read_text())
    res.update(data_width=args.data_width, net_ports=args.ports, packet_beats=args.packet_beats)
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in res.items()}


class BeatCounter:
    """Counts handshakes on one AXI-Stream port, with the cycle of the first and last."""

    def __init__(self, dut, name):
        self.valid = getattr(dut, f"{name}__tvalid")
        self.ready = getattr(dut, f"{name}__tready")
        self.last = getattr(dut, f"{name}__tlast")
        self.dut = dut
        self.beats = 0
        self.first = self.end = None
        self.first_packet_end = None
        self.cycle = 0
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            await RisingEdge(self.dut.clk)
            self.cycle += 1
            if self.valid.value == 1 and self.ready.value == 1:
                self.beats += 1
                if self.first is None:
                    self.first = self.cycle
                self.end = self.cycle
                if self.last.value == 1 and self.first_packet_end is None:
                    self.first_packet_end = self.cycle

    def reset(self):
        self.beats, self.first, self.end, self.first_packet_end = 0, None, None, None

    def rate(self):
        return self.beats / (self.end - self.first + 1) if self.beats else 0.0


def meta(route_id, length, coll=Collective.UNICAST, rop=ReduceOp.NONE, src=0, kv=0, op=Op.TENSOR):
    return spec.Meta(stage=Stage.DECODE, op=op, collective=coll, reduce_op=rop, src=src, dst=0,
                     route_id=route_id, kv_id=kv, length=length, seq=0)


@cocotb.test()
async def run_measure(dut):
    p = params()
    w, P = p["data_width"], p["net_ports"]
    nb = w // 8
    hb = header_beats(w)
    length = p["packet_beats"] * nb
    count = p["packets"]
    dut.enable.value = 0
    dut.node_id.value = 0
    dut.num_nodes.value = 4
    await start(dut)
    # Route p + 1: to port (p + 1) % P; route 50: every port + local; route 60: reduction.
    table = {q + 1: RouteEntry(port_mask=1 << ((q + 1) % P)) for q in range(P)}
    table[50] = RouteEntry(port_mask=(1 << P) - 1, local=1)
    table[60] = RouteEntry(local=1, fan_in=P + 1)
    await write_routes(dut, table)
    dut.enable.value = 1
    ins = [f"rx__{q}" for q in range(P)] + ["local_in"]
    outs = [f"tx__{q}" for q in range(P)] + ["local_out"]
    srcs = [AxiStreamSource(AxiStreamBus.from_prefix(dut, n, bus_separator="__"), dut.clk, dut.rst) for n in ins]
    sinks = [AxiStreamSink(AxiStreamBus.from_prefix(dut, n, bus_separator="__"), dut.clk, dut.rst) for n in outs]
    cin = [BeatCounter(dut, n) for n in ins]
    cout = [BeatCounter(dut, n) for n in outs]
    res = {}

    async def drain(expect):
        for o, frames in expect.items():
            for f in frames:
                got = await bounded(sinks[o].recv(), 10_000_000, f"frame on {outs[o]}")
                assert bytes(got.tdata) == f, f"{outs[o]}: frame differs"

    # 1. Latency: one short packet on an idle NIC, first beat in -> first beat out.
    m = meta(1, 4 * nb)
    wire = pad_header(m.encode(), w) + bytes(range(4 * nb))
    await srcs[0].send(AxiStreamFrame(wire))
    await drain({1 % P: [wire]})
    res["latency_cycles"] = cout[1 % P].first - cin[0].first
    # Store-and-forward: the first beat leaves after the last one came in.
    res["latency_after_last_beat_cycles"] = cout[1 % P].first - cin[0].end
    await ClockCycles(dut.clk, 20)

    # 2. Forwarding: every network input streams long packets to a different port.
    for c in cin + cout:
        c.reset()
    expect = {}
    for q in range(P):
        frames = []
        for k in range(count):
            m = meta(q + 1, length, kv=q * 1000 + k)
            frames.append(pad_header(m.encode(), w) + bytes((q + k + i) & 0xFF for i in range(length)))
        expect[(q + 1) % P] = frames
        for f in frames:
            await srcs[q].send(AxiStreamFrame(f))
    await drain(expect)
    res["forward_beats_per_cycle"] = min(cout[o].rate() for o in range(P))
    res["forward_payload_fraction"] = p["packet_beats"] / (p["packet_beats"] + hb)
    await ClockCycles(dut.clk, 20)

    # 3. Multicast: the local input sends to every port and the local output.
    for c in cin + cout:
        c.reset()
    frames = []
    for k in range(count):
        m = meta(50, length, coll=Collective.MULTICAST, kv=5000 + k)
        frames.append(pad_header(m.encode(), w) + bytes((k * 7 + i) & 0xFF for i in range(length)))
    for f in frames:
        await srcs[P].send(AxiStreamFrame(f))
    await drain({o: frames for o in range(P + 1)})
    res["multicast_beats_per_cycle"] = min(cout[o].rate() for o in range(P + 1))
    res["multicast_copies"] = P + 1
    await ClockCycles(dut.clk, 20)

    # 4. Reduction: every input contributes to a series of SUM reductions.
    for c in cin + cout:
        c.reset()
    rlen = p["reduce_beats"] * nb
    nred = p.get("reductions", 8)
    want = []
    for r in range(nred):
        contribs = {}
        for q in range(P + 1):
            src = (q + 1) if q < P else 0
            payload = bytes((r * 31 + q * 7 + i) & 0xFF for i in range(rlen))
            contribs[src] = payload
            m = meta(60, rlen, coll=Collective.REDUCE, rop=ReduceOp.SUM, src=src, kv=9000 + r,
                     op=Op.PARTIAL_STATE)
            await srcs[q].send(AxiStreamFrame(pad_header(m.encode(), w) + payload))
        res_meta = meta(60, rlen, coll=Collective.REDUCE, rop=ReduceOp.SUM, src=0, kv=9000 + r,
                        op=Op.REDUCE_RESULT)
        want.append(pad_header(res_meta.encode(), w)
                    + reduce_words(ReduceOp.SUM, [contribs[s] for s in sorted(contribs)]))
    await drain({P: want})
    first = min(c.first for c in cin)
    cycles = cout[P].end - first + 1
    words = nred * (P + 1) * rlen // 4
    res["reduce_elements_per_cycle"] = words / cycles
    res["reduce_fan_in"] = P + 1
    res["reduce_payload_bytes"] = rlen
    res["beats_per_cycle"] = min(res["forward_beats_per_cycle"], res["multicast_beats_per_cycle"])
    with open(p["out"], "w") as fh:
        json.dump(res, fh)
