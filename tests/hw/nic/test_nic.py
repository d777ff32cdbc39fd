"""NIC (hw/nic/nic.py): construction, and the one-NIC cocotb bench with its pytest runner.

The bench sends random traffic on every input with random pauses on every port.  The route
table is written through the ``route`` port; every packet's fate comes from the Python
reference (``mcf.sw.golden.nic.decide``).  Checked: every good packet arrives exactly once
on exactly the outputs its route names, in order per (input, output); every bad packet is
counted once under its cause; reductions equal ``reduce_words``.
"""
import cocotb
import pytest
from cocotb.triggers import ClockCycles, Event, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from mcf import spec
from mcf.hw.nic.nic import Nic
from mcf.sim.cocotb_util import ErrorMonitor, bounded, params, pauses, read_route, start, write_routes
from mcf.sim.nic.traffic import SingleNicTraffic
from mcf.sim.runner import run_cocotb
from mcf.spec import ErrorCause, Op
from mcf.spec.packet import pad_header
from mcf.sw.golden.nic import decide, reduce_words

OP_AT = spec.META.offsets["op"]
#: NIC parameters of the benches (small buffers so that queues fill); the bench reads them
#: back through ``params()``.
SMALL = dict(buffer_depth=64, desc_depth=8, route_entries=256, reduce_slots=4, reduce_beats=32,
             softmax_fan_in=4, state_words=6)


def bus(dut, name):
    return AxiStreamBus.from_prefix(dut, name, bus_separator="__")


@cocotb.test()
async def run_traffic(dut):
    p = params()
    w, P, seed = p["data_width"], p["net_ports"], p.get("seed", 1)
    depth, rbeats, slots = p["buffer_depth"], p["reduce_beats"], p["reduce_slots"]
    sw = p.get("state_words", 0) if p.get("softmax_fan_in", 0) else 0
    t = SingleNicTraffic(w, P, node_id=0, num_nodes=4, seed=seed, state_words=sw)
    t.build(p.get("packets", 200), error_rate=p.get("error_rate", 0.15),
            reductions=p.get("reductions", 10))

    dut.enable.value = 0
    dut.node_id.value = t.node_id
    dut.num_nodes.value = t.num_nodes
    for name in [f"rx__{i}" for i in range(P)] + ["local_in"]:
        getattr(dut, f"{name}__tvalid").value = 0
    await start(dut)
    await write_routes(dut, t.table)
    for rid in (1, 200, 100):   # read back through the register-block port
        got = await read_route(dut, rid)
        want = t.table[rid].word() if rid in t.table else 0
        assert got == want, f"route {rid} reads {got:#x}, wrote {want:#x}"
    dut.enable.value = 1

    in_names = [f"rx__{i}" for i in range(P)] + ["local_in"]
    out_names = [f"tx__{i}" for i in range(P)] + ["local_out"]
    srcs = [AxiStreamSource(bus(dut, n), dut.clk, dut.rst) for n in in_names]
    sinks = [AxiStreamSink(bus(dut, n), dut.clk, dut.rst) for n in out_names]
    for k, s in enumerate(srcs):
        s.set_pause_generator(pauses(seed * 100 + k))
    for k, s in enumerate(sinks):
        s.set_pause_generator(pauses(seed * 100 + 50 + k))
    errors = ErrorMonitor(dut)

    # Expected deliveries per output (multiset of wire bytes + per-input order).
    kw = dict(data_width=w, net_ports=P, num_nodes=t.num_nodes, buffer_depth=depth,
              reduce_beats=rbeats, softmax_fan_in=p.get("softmax_fan_in", 0))
    expected = {o: [] for o in range(P + 1)}     # output -> [(input, wire)]
    want_errors = [0] * len(ErrorCause)
    for i, sent in enumerate(t.inputs):
        for s in sent:
            d = decide(s.wire, t.table, from_local=(i == P), **kw)
            if s.kind in ("good", "reduce"):
                assert not d.dropped, f"generator made a bad {s.kind} packet: {d.cause!r}"
            else:
                assert d.cause == ErrorCause[s.kind], f"{s.kind} packet classified {d.cause!r}"
                want_errors[d.cause] += 1
                continue
            for o in d.outputs:
                if o != "reduce":
                    expected[P if o == "local" else o].append((i, s.wire))
    for index, (op, key, contribs) in enumerate(t.reductions):
        result = key.replace(src=t.node_id, op=Op.REDUCE_RESULT)
        payload = reduce_words(op, [contribs[s] for s in sorted(contribs)], sw)
        wire = pad_header(result.encode(), w) + payload
        d = decide(wire, t.table, from_local=False, from_reduce=True, **kw)
        assert not d.dropped and "local" in d.outputs
        for o in d.outputs:
            expected[P if o == "local" else o].append(("reduce", wire))

    # Drive: an input waits before a reduction that would need more than ``slots`` open
    # reductions (the planner's lockstep decode steps; see docs/nic.md).
    results_seen = [0]
    progress = Event()

    async def drive(k):
        for s in t.inputs[k]:
            if s.reduction is not None:
                while s.reduction - results_seen[0] >= slots:
                    progress.clear()
                    await progress.wait()
            await srcs[k].send(AxiStreamFrame(s.wire))

    received = {o: [] for o in range(P + 1)}

    async def collect(o):
        while True:
            frame = await sinks[o].recv()
            data = bytes(frame.tdata)
            received[o].append(data)
            if o == P and data[:16] and (int.from_bytes(data[:16], "little") >> OP_AT) & 0xF == Op.REDUCE_RESULT:
                results_seen[0] += 1
                progress.set()

    for k in range(P + 1):
        cocotb.start_soon(drive(k))
    for o in range(P + 1):
        cocotb.start_soon(collect(o))

    total = sum(len(v) for v in expected.values())

    async def all_arrived():
        while sum(len(v) for v in received.values()) < total:
            await RisingEdge(dut.clk)

    await bounded(all_arrived(), 2_000 * total + 200_000,
                  f"{total} deliveries (got {sum(len(v) for v in received.values())})")
    await ClockCycles(dut.clk, 500)   # nothing more may come

    for o in range(P + 1):
        got, want = received[o], expected[o]
        assert sorted(got) == sorted(w_ for _, w_ in want), (
            f"output {out_names[o]}: {len(got)} packets, expected {len(want)}; "
            f"missing {len(set(w_ for _, w_ in want) - set(got))}, "
            f"unexpected {len(set(got) - set(w_ for _, w_ in want))}")
        for i in range(P + 1):   # order per (input, output)
            seq_want = [w_ for src, w_ in want if src == i]
            pos = {w_: n for n, w_ in enumerate(got)}
            seq_got = sorted(seq_want, key=lambda x: pos[x])
            assert seq_got == seq_want, f"{out_names[o]}: packets from {in_names[i]} reordered"
    assert errors.counts == want_errors, f"error counts {errors.counts}, expected {want_errors}"
    dut._log.info("delivered %d packets, %d errors", total, sum(want_errors))


def test_construction():
    nic = Nic(64, net_ports=3, **SMALL)
    assert len(nic.rx) == len(nic.tx) == 3 and len(nic.errors) == len(ErrorCause)
    assert len(Nic(128, net_ports=2, **SMALL).local_out.tdata) == 128


@pytest.mark.parametrize("kw", [dict(buffer_depth=100), dict(net_ports=0), dict(net_ports=17),
                                dict(route_entries=5000), dict(reduce_beats=3),
                                dict(buffer_depth=32, reduce_beats=64), dict(softmax_fan_in=3)])
def test_bad_params(kw):
    with pytest.raises(ValueError):
        Nic(64, **kw)


@pytest.mark.cocotb
@pytest.mark.parametrize("width", [64, 128])
def test_nic_traffic_cocotb(width, build_dir):
    """Each width with its own seed (traffic and pause patterns): the slow test's multi-seed
    evidence, at make-test size."""
    params = dict(data_width=width, net_ports=3, packets=250, reductions=12, seed={64: 21, 128: 22}[width], **SMALL)
    nic = Nic(width, net_ports=3, **SMALL)
    run_cocotb(nic, __name__, build_dir, testcase="run_traffic", params=params)


@pytest.mark.slow
@pytest.mark.cocotb
@pytest.mark.parametrize("width", [64, 128])
def test_nic_traffic_large(width, build_dir):
    """Thousands of packets through one NIC (two seeds)."""
    nic = Nic(width, net_ports=3, **SMALL)
    for seed in (21, 22):
        params = dict(data_width=width, net_ports=3, packets=1500, reductions=100, seed=seed, **SMALL)
        run_cocotb(nic, __name__, build_dir / str(seed), testcase="run_traffic", params=params)
