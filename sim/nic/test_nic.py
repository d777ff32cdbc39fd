"""cocotb bench: one NIC, random traffic on every input, random pauses on every port.

The route table is written through the ``route`` port; every packet's fate comes from the
Python model (``mcf.sim.nic.model.decide``).  Checked: every good packet arrives exactly
once on exactly the outputs its route names, in order per (input, output); every bad
packet is counted once under its cause; reductions equal ``reduce_words``.
"""
from __future__ import annotations

import cocotb
from cocotb.triggers import ClockCycles, Event, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from mcf.sim.cocotb_util import bounded, params, pauses, start
from mcf.sim.nic.model import decide, reduce_words
from mcf.sim.nic.traffic import SingleNicTraffic, pad_header
from mcf import spec
from mcf.spec import ErrorCause, Op

OP_AT = spec.META.offsets["op"]


def bus(dut, name):
    return AxiStreamBus.from_prefix(dut, name, bus_separator="__")


async def write_routes(dut, table):
    dut.route__r_en.value = 0
    for rid, entry in sorted(table.items()):
        dut.route__addr.value = rid
        dut.route__w_data.value = entry.word()
        dut.route__w_en.value = 1
        await RisingEdge(dut.clk)
    dut.route__w_en.value = 0


async def read_route(dut, rid):
    dut.route__addr.value = rid
    dut.route__r_en.value = 1
    await RisingEdge(dut.clk)
    dut.route__r_en.value = 0
    await RisingEdge(dut.clk)
    return dut.route__r_data.value.to_unsigned()


class ErrorMonitor:
    def __init__(self, dut):
        self.counts = [0] * len(ErrorCause)
        self.dut = dut
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            await RisingEdge(self.dut.clk)
            v = self.dut.errors.value.to_unsigned()
            for c in range(len(self.counts)):
                if v >> c & 1:
                    self.counts[c] += 1


@cocotb.test()
async def traffic(dut):
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
