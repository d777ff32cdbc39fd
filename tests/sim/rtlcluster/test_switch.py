"""The switch model (sim/rtlcluster/switch.py): link pacing in the Amaranth simulator, and a
cocotb bench (Icarus, random pauses on every port) of a 4-port switch under random unicast,
multicast and unroutable traffic with injected drops and corruptions.

The expectation is the switch's contract, computed here from the traffic alone: a packet goes to
the outputs its route id's table entry names minus its own input, every copy exactly once,
in order per (input, output), byte for byte (a corrupted packet differs in exactly one header
bit); a dropped or unroutable packet goes nowhere and is counted; every counter equals the
bytes and packets sent and received.
"""
import random

import cocotb
import pytest
from amaranth.sim import Simulator
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from mcf.sim.cocotb_util import bounded, params, pauses, start
from mcf.sim.rtlcluster.switch import (CORRUPT_BIT, FRAC, LinkPacer, Switch, SwitchTiming,
                                       forwarding_table)
from mcf.sim.runner import run_cocotb
from mcf.spec import META, Collective, Meta, Op, ReduceOp, Stage
from mcf.spec.node import NodeConfig
from mcf.spec.packet import pad_header

SRC_AT = META.offsets["src"]

KV_AT = META.offsets["kv_id"]


def serial_of(data: bytes) -> int:
    return (int.from_bytes(data[:16], "little") >> KV_AT) & 0xFFFFFF


def bus(dut, name):
    return AxiStreamBus.from_prefix(dut, name, bus_separator="__")


def packet(src: int, route_id: int, length: int, serial: int, w: int) -> bytes:
    meta = Meta(Stage.PREFILL, Op.KV_REPLICA, Collective.MULTICAST, ReduceOp.NONE, src=src, dst=0,
                route_id=route_id, kv_id=serial, length=length, seq=serial & 0xFFFF)
    return pad_header(meta.encode(), w) + random.Random(serial).randbytes(length)


@cocotb.test()
async def run_traffic(dut):
    p = params()
    n, w, seed, count = p["ports"], p["data_width"], p["seed"], p["packets"]
    rng = random.Random(seed)
    table = {int(k): v for k, v in p["table"].items()}
    drop_at, corrupt_at = p["drop_at"], p["corrupt_at"]
    for k in range(n):
        getattr(dut, f"i__{k}__tvalid").value = 0
        getattr(dut, f"drop_at__{k}").value = drop_at[k]
        getattr(dut, f"corrupt_at__{k}").value = corrupt_at[k]
    dut.table__en.value = 0
    await start(dut)
    for rid, mask in table.items():
        dut.table__addr.value, dut.table__data.value, dut.table__en.value = rid, mask, 1
        await RisingEdge(dut.clk)
    dut.table__en.value = 0

    srcs = [AxiStreamSource(bus(dut, f"i__{k}"), dut.clk, dut.rst) for k in range(n)]
    sinks = [AxiStreamSink(bus(dut, f"o__{k}"), dut.clk, dut.rst) for k in range(n)]
    for k in range(n):
        srcs[k].set_pause_generator(pauses(seed * 10 + k))
        sinks[k].set_pause_generator(pauses(seed * 10 + 5 + k, 0.4))

    # Traffic and what must arrive where.
    routes = sorted(table) + [p["unrouted_id"]]
    sent = [[] for _ in range(n)]
    expected = {(a, b): [] for a in range(n) for b in range(n)}
    want = {"dropped": 0, "corrupted": 0, "unrouted": 0}
    serial = 0
    for a in range(n):
        for number in range(1, count + 1):
            serial += 1
            rid = rng.choice(routes)
            data = packet(a, rid, rng.choice([0, 1, 7, 8, 40, 64, 200]), serial, w)
            sent[a].append(data)
            targets = table.get(rid, 0) & ~(1 << a)
            if number == drop_at[a]:
                want["dropped"] += 1
                continue
            if not targets:
                want["unrouted"] += 1
                continue
            if number == corrupt_at[a]:
                want["corrupted"] += 1
                data = bytearray(data)
                data[CORRUPT_BIT // 8] ^= 1 << (CORRUPT_BIT % 8)
                data = bytes(data)
            for b in range(n):
                if targets >> b & 1:
                    expected[(a, b)].append(data)

    async def drive(a):
        for data in sent[a]:
            await srcs[a].send(AxiStreamFrame(data))
        await srcs[a].wait()

    received = [[] for _ in range(n)]
    total = sum(len(v) for v in expected.values())

    async def collect():
        while sum(map(len, received)) < total:
            for b in range(n):
                while not sinks[b].empty():
                    received[b].append(bytes(sinks[b].recv_nowait().tdata))
            await RisingEdge(dut.clk)

    drivers = [cocotb.start_soon(drive(a)) for a in range(n)]
    await bounded(cocotb.start_soon(collect()), 4_000_000, "every expected packet")
    for d in drivers:
        await bounded(d, 100_000, "the senders")
    await ClockCycles(dut.clk, 200)
    for b in range(n):
        assert sinks[b].empty(), f"output {b}: packets beyond the expected ones"

    # Per (input, output): the packets in order (the source is in the header).
    for b in range(n):
        by_src = {a: [] for a in range(n)}
        for data in received[b]:
            by_src[(int.from_bytes(data[:16], "little") >> SRC_AT) & 0xFF].append(data)
        for a in range(n):
            if by_src[a] != expected[(a, b)]:
                got, exp = [serial_of(d) for d in by_src[a]], [serial_of(d) for d in expected[(a, b)]]
                raise AssertionError(f"input {a} -> output {b}: packets (kv_id) {got}, want {exp}"
                                     if got != exp else f"input {a} -> output {b}: packet bytes differ")
    for name, value in want.items():
        assert int(getattr(dut, name).value) == value, f"{name} counter {int(getattr(dut, name).value)}, want {value}"
    for k in range(n):
        assert int(getattr(dut, f"in_packets__{k}").value) == len(sent[k])
        assert int(getattr(dut, f"in_bytes__{k}").value) == sum(map(len, sent[k]))
        assert int(getattr(dut, f"out_packets__{k}").value) == len(received[k])
        assert int(getattr(dut, f"out_bytes__{k}").value) == sum(map(len, received[k]))
    dut._log.info("delivered %d packet copies", total)


@cocotb.test()
async def run_latency_and_rate(dut):
    """One long train of packets from input 0 to output 1: the first beat leaves exactly
    ``latency`` cycles after it entered (plus the pipeline's fixed cycles), and the payload
    rate equals the paced link's (within one packet)."""
    p = params()
    w, n = p["data_width"], p["ports"]
    for k in range(n):
        getattr(dut, f"i__{k}__tvalid").value = 0
        getattr(dut, f"drop_at__{k}").value = 0
        getattr(dut, f"corrupt_at__{k}").value = 0
    await start(dut)
    dut.table__addr.value, dut.table__data.value, dut.table__en.value = 3, 0b10, 1
    await RisingEdge(dut.clk)
    dut.table__en.value = 0
    src = AxiStreamSource(bus(dut, "i__0"), dut.clk, dut.rst)
    sink = AxiStreamSink(bus(dut, "o__1"), dut.clk, dut.rst)
    length, count = p["length"], p["count"]
    frames = [packet(0, 3, length, s, w) for s in range(count)]
    cycle = [0]

    async def clock():
        while True:
            await RisingEdge(dut.clk)
            cycle[0] += 1

    cocotb.start_soon(clock())
    in_first = out_first = None
    for f in frames:
        await src.send(AxiStreamFrame(f))
    while in_first is None or out_first is None:
        await RisingEdge(dut.clk)
        if in_first is None and int(dut.i__0__tvalid.value) and int(dut.i__0__tready.value):
            in_first = cycle[0]
        if out_first is None and int(dut.o__1__tvalid.value) and int(dut.o__1__tready.value):
            out_first = cycle[0]
    got = []
    while len(got) < count:
        got.append(bytes((await bounded(sink.recv(), 10_000_000, "the train")).tdata))
    out_last = cycle[0]
    assert got == frames
    delay = out_first - in_first
    assert p["latency"] <= delay <= p["latency"] + 6, f"first beat took {delay} cycles, latency {p['latency']}"
    # Frame bytes over the train vs. cycles: the link's rate.
    frame = len(frames[0]) + p["frame_overhead"] + max(0, p["min_frame_payload"] - len(frames[0]))
    expect_cycles = ((count - 1) * frame + len(frames[-1])) / p["bytes_per_cycle"]
    took = out_last - out_first
    assert abs(took - expect_cycles) <= 8, \
        f"{count} packets took {took} cycles, the link needs {expect_cycles:.0f}"


TIMING = SwitchTiming()
CONFIG = NodeConfig.tiny()


def test_for_config_follows_the_timing():
    sw = Switch.for_config(4, CONFIG, TIMING)
    assert sw.latency == TIMING.latency_cycles(CONFIG.clock_hz) == round(1e-6 * CONFIG.clock_hz)
    assert sw.rate_q == round(10e9 / 8 / CONFIG.clock_hz * (1 << FRAC))
    assert sw.fifo_depth >= 64 and sw.fifo_depth & (sw.fifo_depth - 1) == 0
    with pytest.raises(ValueError, match="route id"):
        Switch(2, 32)
    with pytest.raises(ValueError, match="table_entries"):
        Switch(2, 64, table_entries=12)


def test_forwarding_table_from_route_tables():
    from mcf.sw.mars.lower import RouteTables
    from mcf.spec.topology import Topology
    rt = RouteTables(Topology("switch", 4), entries=64)
    group = rt.multicast(1, [0, 3])
    bcast = rt.broadcast(2)
    red = rt.reduce(0)
    table = forwarding_table(rt.tables, 64)
    assert table[rt.unicast(3)] == 0b1000
    assert table[group] == 0b1001
    assert table[bcast] == 0b1011
    assert table[red] == 0b0001


@pytest.mark.parametrize("bytes_per_cycle", [2.5, 5.0])
def test_link_pacer_rate(bytes_per_cycle):
    """A saturated paced link moves frame bytes (MCF bytes + overhead + padding) at its rate."""
    w, overhead, min_payload = 64, 38, 46
    rate_q = round(bytes_per_cycle * (1 << FRAC))
    dut = LinkPacer(w, rate_q, overhead, min_payload)
    sizes = [16, 24, 100, 8, 64]             # MCF packet bytes (header + payload)
    beats_of = [-(-s // 8) for s in sizes]
    log = []

    async def bench(ctx):
        ctx.set(dut.o.tready, 1)
        cycles = 0
        for size, beats in zip(sizes * 20, beats_of * 20):
            for k in range(beats):
                last = k == beats - 1
                nbytes = size - 8 * k if last else 8
                ctx.set(dut.i.tvalid, 1)
                ctx.set(dut.i.tlast, last)
                ctx.set(dut.i.tkeep, (1 << nbytes) - 1)
                while True:
                    _, _, taken = await ctx.tick().sample(dut.i.tready)
                    cycles += 1
                    if taken:
                        break
        log.append(cycles)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    frame_bytes = sum(s + overhead + max(0, min_payload - s) for s in sizes) * 20
    assert abs(log[0] - frame_bytes / bytes_per_cycle) <= 2 * (8 + overhead + min_payload) / bytes_per_cycle


def bench_params(seed: int) -> dict:
    n = 4
    rng = random.Random(seed)
    table = {2 + d: 1 << d for d in range(n)}                 # unicast
    table.update({7: 0b1011, 8: 0b0110, 9: 0b1111, 10: 0})     # multicast groups, an empty one
    return {"ports": n, "data_width": 64, "seed": seed, "packets": 60, "table": table,
            "unrouted_id": 12, "drop_at": [rng.randint(1, 60) for _ in range(n)],
            "corrupt_at": [0, rng.randint(1, 60), 0, rng.randint(1, 60)]}


@pytest.mark.cocotb
def test_switch_traffic_cocotb(build_dir):
    p = bench_params(seed=3)
    run_cocotb(Switch(4, 64, table_entries=16, fifo_depth=16, latency=5, rate_q=0), __name__, build_dir,
               testcase="run_traffic", params=p)


@pytest.mark.cocotb
def test_switch_latency_and_rate_cocotb(build_dir):
    t = SwitchTiming(latency_ns=200)
    clock = CONFIG.clock_hz
    sw = Switch(2, 64, table_entries=16, fifo_depth=t.fifo_depth(clock, 64), latency=t.latency_cycles(clock),
                rate_q=t.rate_q(clock))
    run_cocotb(sw, __name__, build_dir, testcase="run_latency_and_rate",
               params={"ports": 2, "data_width": 64, "latency": sw.latency, "length": 200, "count": 12,
                       "frame_overhead": t.frame_overhead, "min_frame_payload": t.min_frame_payload,
                       "bytes_per_cycle": sw.rate_q / (1 << FRAC)})
