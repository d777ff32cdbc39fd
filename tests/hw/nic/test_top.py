"""NicNode and NicCluster (hw/nic/top.py): four nodes (register block + packetizer + NIC) wired
port to port, a cocotb bench with its pytest runners.

Everything goes the way the runtime drives a node: route tables written and error counters
read over AXI-Lite (``mcf.sw.driver`` over cocotbext-axi ``AxiLiteMaster``), headers pushed
into the metadata queue, payloads pushed into the packetizer (random pauses), deliveries
taken from every node's local port (random pauses).  Expectations: ``ClusterPlan.expected``
(the Python reference, hop by hop) and ``reduce_words`` for reductions.
"""
import cocotb
import pytest
from cocotb.triggers import ClockCycles, Event, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from mcf import spec
from mcf.hw.nic.top import NicCluster, NicNode
from mcf.sim.cocotb_util import bounded, params, pauses, start
from mcf.sim.nic.cluster_plan import ClusterPlan
from mcf.sim.runner import run_cocotb
from mcf.spec import REGISTERS, ErrorCause, Op
from mcf.spec.node import NodeConfig
from mcf.spec.regmap import DATA_BITS, META_WORDS
from mcf.sw.driver import CocotbBackend, Driver

#: Every node of the cluster (small buffers so that queues fill; (m, l, o) rows of 6 words); the
#: bench reads the same numbers back through ``params()``.
CONFIG = NodeConfig(data_width=64, meta_queue_depth=8, payload_depth=64, nic_buffer_depth=64,
                    nic_desc_depth=8, route_entries=256, reduce_slots=4, reduce_beats=32, softmax_fan_in=4,
                    head_dim=4)


def bench_params(config: NodeConfig, **extra) -> dict:
    return {**config.as_dict(), "state_words": config.state_words, **extra}
OP_AT = spec.META.offsets["op"]
KV_AT = spec.META.offsets["kv_id"]


async def push_raw_meta(drv: Driver, header: bytes):
    """Push a header word as is (also undefined enum values the Meta class refuses)."""
    word = int.from_bytes(header, "little")
    for i in range(META_WORDS):
        await drv.write32(f"META_W{i}", (word >> (DATA_BITS * i)) & 0xFFFF_FFFF)
    await drv.wait_until("space in the metadata queue",
                         lambda w: not REGISTERS["STATUS"].decode(w)["meta_queue_full"], "STATUS")
    await drv.write_fields("META_PUSH", push=1)


@cocotb.test()
async def run_cluster(dut):
    p = params()
    n, w, seed, slots = p["nodes"], p["data_width"], p.get("seed", 1), p["reduce_slots"]
    plan = ClusterPlan(n, w, seed=seed, buffer_depth=p["nic_buffer_depth"], reduce_beats=p["reduce_beats"],
                       softmax_fan_in=p["softmax_fan_in"], state_words=p["state_words"],
                       topology=p["topology"])
    plan.build(p.get("packets_per_node", 40), error_rate=p.get("error_rate", 0.1),
               reductions=p.get("reductions", 4))
    want_delivered, want_errors = plan.expected()

    dut.rst.value = 1
    await start(dut)
    drivers, srcs, sinks = [], [], []
    for a in range(n):
        master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, f"axil__{a}", bus_separator="__"), dut.clk, dut.rst)
        drivers.append(Driver(CocotbBackend(master, dut.clk), max_polls=10_000))
        srcs.append(AxiStreamSource(AxiStreamBus.from_prefix(dut, f"payload__{a}", bus_separator="__"),
                                    dut.clk, dut.rst))
        srcs[-1].set_pause_generator(pauses(seed * 10 + a))
        sinks.append(AxiStreamSink(AxiStreamBus.from_prefix(dut, f"local_out__{a}", bus_separator="__"),
                                   dut.clk, dut.rst))
        sinks[-1].set_pause_generator(pauses(seed * 10 + 5 + a))

    async def setup(a):
        drv = drivers[a]
        await drv.check_id()
        await drv.write_fields("NODE_ID", node_id=a)
        await drv.write_fields("NUM_NODES", num_nodes=n)
        for rid, entry in sorted(plan.tables[a].items()):
            await drv.write_route(rid, {"port_mask": entry.port_mask, "local": entry.local,
                                        "fan_in": entry.fan_in, "valid": entry.valid})
        back = await drv.read_route(next(iter(plan.tables[a])))
        assert back["valid"] == 1
        await drv.enable(True)

    tasks = [cocotb.start_soon(setup(a)) for a in range(n)]
    for t in tasks:
        await bounded(t, 5_000_000, "node set-up over AXI-Lite")

    # Reductions done (every reducer delivered its result): lets programs keep at most
    # ``slots`` reductions open, as lockstep decode steps do.
    kv_to_red = {key.kv_id: i for i, (_, key, _, _) in enumerate(plan.reductions)}
    results = {}
    done = [0]
    progress = Event()

    def completed():
        c = 0
        while c < len(plan.reductions) and results.get(c, 0) == len(plan.reductions[c][3]):
            c += 1
        return c

    async def run_program(a):
        drv = drivers[a]
        for item in plan.programs[a]:
            if item.reduction is not None:
                while item.reduction - done[0] >= slots:
                    progress.clear()
                    await progress.wait()
            if item.meta is not None:
                await drv.push_meta(item.meta)
            else:
                await push_raw_meta(drv, item.header)
            if item.payload:
                await srcs[a].send(AxiStreamFrame(item.payload))

    received = [[] for _ in range(n)]

    async def collect(a):
        while True:
            frame = await sinks[a].recv()
            data = bytes(frame.tdata)
            received[a].append(data)
            word = int.from_bytes(data[:16], "little")
            if (word >> OP_AT) & 0xF == Op.REDUCE_RESULT:
                r = kv_to_red[(word >> KV_AT) & 0xFFFFFF]
                results[r] = results.get(r, 0) + 1
                done[0] = completed()
                progress.set()

    for a in range(n):
        cocotb.start_soon(collect(a))
    programs = [cocotb.start_soon(run_program(a)) for a in range(n)]
    total = sum(len(x) for x in want_delivered)

    async def finished():
        for t in programs:
            await t
        while sum(len(x) for x in received) < total:
            await RisingEdge(dut.clk)

    await bounded(finished(), 20_000 * total + 2_000_000,
                  f"{total} deliveries (got {sum(len(x) for x in received)})")
    await ClockCycles(dut.clk, 500)

    for a in range(n):
        got, want = sorted(received[a]), sorted(want_delivered[a])
        assert got == want, (f"node {a}: {len(got)} packets, expected {len(want)}; "
                             f"missing {len(set(want) - set(got))}, unexpected {len(set(got) - set(want))}")
        counters = await drivers[a].read_errors()
        got_err = [counters[c] for c in ErrorCause]
        assert got_err == want_errors[a], f"node {a}: error counters {got_err}, expected {want_errors[a]}"
    dut._log.info("cluster: %d deliveries, %d errors, %d reductions", total,
                  sum(map(sum, want_errors)), len(plan.reductions))


def test_construction():
    node = NicNode(CONFIG.replace(net_ports=3))
    assert len(node.rx) == len(node.tx) == 3 and len(node.payload.tdata) == 64
    cluster = NicCluster(4, CONFIG, topology="ring")
    assert len(cluster.axil) == len(cluster.payload) == len(cluster.local_out) == 4
    with pytest.raises(ValueError, match=r"^topology='grid': one of full_mesh, ring$"):
        NicCluster(4, CONFIG, topology="grid")
    with pytest.raises(ValueError, match=r"^nodes=2: must be >= 3$"):
        NicCluster(2, CONFIG)


@pytest.mark.cocotb
@pytest.mark.parametrize("topology", ["full_mesh", "ring"])
def test_cluster_cocotb(topology, build_dir):
    """Four nodes: full mesh (one hop, ALL_REDUCE by every member) and ring (two hops,
    reduction trees that reduce on the way)."""
    run_cocotb(NicCluster(4, CONFIG, topology), __name__, build_dir, testcase="run_cluster",
               params=bench_params(CONFIG, nodes=4, packets_per_node=40, reductions=6, topology=topology,
                                   seed={"full_mesh": 1, "ring": 5}[topology]))


@pytest.mark.slow
@pytest.mark.cocotb
@pytest.mark.parametrize("width,topology", [(64, "ring"), (128, "full_mesh")])
def test_cluster_large(width, topology, build_dir):
    """A thousand packets of a 4-node plan through four NICs."""
    config = CONFIG.replace(data_width=width)
    run_cocotb(NicCluster(4, config, topology), __name__, build_dir, testcase="run_cluster",
               params=bench_params(config, nodes=4, packets_per_node=250, reductions=30, seed=5,
                                   topology=topology))
