"""The cluster top (sim/rtlcluster/top.py) under Verilator: N of today's nodes (registers + DMA +
packetizer + NIC) on the switch model move a MARS plan's KV through the PS driver.

mars -> programs -> driver -> hardware, as ``tests/hw/test_node.py`` does for two nodes back to
back, now for N nodes meeting at a switch: the MARS planner plans a tiny prefill on N nodes and
lowers it (``mcf.sw.mars.metaprog``); each node's route table and every KV_REPLICA / KV_FETCH /
directory Meta of its program go through ``mcf.sw.driver.Driver`` (cocotb backend, AXI-Lite),
with a LOAD descriptor that streams the block from the sender's DDR (AxiRam) into the
packetizer; the switch's forwarding table comes from the same route tables.  A receiver posts a
STORE per packet it expects (which packets reach it: the route tables say, not the plan's
``dst``, so multicast replicas count once per holder).  Today's node stores delivered payloads
in the order of its STORE descriptors, from one queue shared with its LOADs, so the bench runs
the plan's sends one at a time in a global order; at the end each receiver's STORE slots hold
exactly the blocks sent to it; no error counter moved; the switch dropped nothing; the link
byte counters equal the bytes the plan moved.  A second bench streams blocks around the ring
of nodes.

Open: on the sequencer Node top (seq merged) both benches of this PS debug path time out in the
4-node cluster -- the first transfer's descriptor never completes, no error counted -- while
seq's 2-node back-to-back bench of the same path passes (tests/hw/test_node.py, DMA window at 0
there, at 0x1000_0000 here).  Until that is understood they are not run by make test; the
cluster's evidence is the runtime's program-driven runs (test_backend.py).
"""
import json
import random
import time

import cocotb
import pytest

from mcf.sim.cocotb_util import bounded, params
from mcf.sim.rtlcluster.backend import tiny_cluster_config
from mcf.sim.rtlcluster.harness import ClusterHarness
from mcf.sim.rtlcluster.switch import SwitchTiming
from mcf.sim.rtlcluster.top import ClusterTop
from mcf.sim.runner import run_cocotb
from mcf.spec import Collective, DmaDescriptor, DmaDir, Meta, Op, ReduceOp, Stage
from mcf.spec.node import NodeConfig
from mcf.spec.packet import HEADER_BYTES, pad_header
from mcf.sw.mars.metaprog import lower
from mcf.sw.mars.planner import PlanRequest, plan
from mcf.sw.mars.profile import load_profile
from mcf.sw.models import load_model

SRC_BASE = 0x0000      # each node's blocks, one slot of SLOT bytes per kv_id
DST_BASE = 0x8000      # where received payloads land, in arrival order
SLOT = 512
WINDOW = 1 << 16


def block_bytes(node: int, kv_id: int, length: int) -> bytes:
    """The (deterministic) contents of a block as its sender stores it."""
    return random.Random(node * 1_000_003 + kv_id).randbytes(length)


def receivers(programs, src: int, route_id: int) -> list[int]:
    """The nodes a packet of ``src`` on ``route_id`` is delivered to (their route tables): none if
    it does not leave ``src``, else every other node whose entry delivers it locally."""
    if not programs[src].routes.get(route_id, {}).get("port_mask"):
        return []
    return [p.node for p in programs
            if p.node != src and p.routes.get(route_id, {}).get("local")]


def transfers(programs):
    """Per sender, in program order: the Metas it pushes; per receiver: the payloads it gets."""
    sends = {p.node: [] for p in programs}
    expect = {p.node: [] for p in programs}
    for prog in programs:
        for stage, _, op in prog.ops:
            if stage != Stage.PREFILL or not hasattr(op, "route_id"):
                continue
            sends[prog.node].append(op)
            if op.op in (Op.KV_REPLICA, Op.KV_FETCH) and op.length:
                for r in receivers(programs, prog.node, op.route_id):
                    expect[r].append(block_bytes(prog.node, op.kv_id, op.length))
    return sends, expect


async def _setup(h: ClusterHarness, route_tables):
    """Start the cluster; configure every node (id, size, window, routes) and the switch."""
    await h.start()
    await h.configure_switch(route_tables)

    async def node(k):
        drv, mem = h.nodes[k].driver, h.nodes[k].memory
        await drv.check_id()
        await drv.configure(node_id=k, num_nodes=h.n, memory=mem)
        for rid, entry in sorted(route_tables[k].items()):
            await drv.write_route(rid, entry)
        await drv.enable()
    for t in [cocotb.start_soon(node(k)) for k in range(h.n)]:
        await t


async def _no_errors(h: ClusterHarness):
    for k in range(h.n):
        errors = {c.name: v for c, v in (await h.nodes[k].driver.read_errors()).items() if v}
        assert not errors, f"node {k}: error counters moved: {errors}"
    counters = h.switch_counters()
    assert counters["dropped"] == counters["unrouted"] == counters["corrupted"] == 0, counters
    assert not h.violations()


def _report(p, figures):
    if p.get("report"):
        with open(p["report"], "w") as f:
            json.dump(figures, f)


@cocotb.test()
async def run_kv_moves(dut):
    """The MARS plan's sends, one at a time in a global order (today's node stores delivered
    payloads in the order of its STORE descriptors, and one descriptor queue serves LOADs and
    STOREs: receivers post a STORE for exactly the packet that comes next)."""
    p = params()
    n = p["nodes"]
    config = NodeConfig(**p["config"])
    pl = plan(PlanRequest(model=load_model("tiny"), seq_len=p["seq"], nodes=n, profile=load_profile("kr260"),
                          scheme="mars", chunk_size=p["chunk"], budget_bytes=p["budget_tokens"] * 64))
    programs = lower(pl)
    assert pl.topology.kind == "switch"
    sends, expect = transfers(programs)
    assert sum(map(len, expect.values())) > 0, "the plan moves no KV: a bench that checks nothing"
    multicast = [m for k in range(n) for m in sends[k] if m.length and len(receivers(programs, k, m.route_id)) > 1]
    h = ClusterHarness(dut, n, config, phys_base=p.get("phys_base", 0x1000_0000), window_bytes=WINDOW,
                       pause_probability=p.get("pauses", 0.0), seed=p.get("seed", 1))
    watchdog = h.watchdog(p.get("wall_clock_s", 600), "the KV moves")
    await _setup(h, [prog.routes for prog in programs])
    for k in range(n):
        for m in sends[k]:
            if m.length:
                h.nodes[k].memory.put(SRC_BASE + m.kv_id * SLOT, block_bytes(k, m.kv_id, m.length))

    done = [0] * n                       # descriptors each node has completed
    slots = [[] for _ in range(n)]       # per node: the block each of its STORE slots receives
    order = [(k, i) for i in range(max(map(len, sends.values()))) for k in range(n) if i < len(sends[k])]
    for k, i in order:
        m, node = sends[k][i], h.nodes[k]
        to = receivers(programs, k, m.route_id) if m.length else []
        dut._log.info("cycle %d: node %d sends %s kv %d (%d bytes) on route %d to %s", h.cycle(), k, m.op.name,
                      m.kv_id, m.length, m.route_id, to)
        for r in to:
            await h.nodes[r].driver.push_descriptor(DmaDescriptor(
                h.nodes[r].memory.phys(DST_BASE + len(slots[r]) * SLOT), m.length, 0, DmaDir.STORE, len(slots[r])))
            slots[r].append(block_bytes(k, m.kv_id, m.length))
        if m.length:
            await node.driver.push_descriptor(DmaDescriptor(node.memory.phys(SRC_BASE + m.kv_id * SLOT),
                                                            m.length, i & 1, DmaDir.LOAD, 1024 + i))
        await node.driver.push_meta(m)
        for j in to + ([k] if m.length else []):
            done[j] += 1
            await bounded(h.nodes[j].driver.wait_desc_done(done[j]), 5_000_000, f"node {j}'s transfer")
    for k in range(n):
        assert sorted(slots[k]) == sorted(expect[k])
        for s, want in enumerate(slots[k]):
            assert h.nodes[k].memory.fetch(DST_BASE + s * SLOT, len(want)) == want, \
                f"node {k}, receive slot {s}: DDR differs from the block sent to it"
    await _no_errors(h)
    hdr = len(pad_header(bytes(HEADER_BYTES), config.data_width))
    links = h.link_bytes()
    for k in range(n):
        out = sum(hdr + m.length for m in sends[k] if receivers(programs, k, m.route_id))
        into = sum(hdr + m.length for src in range(n) for m in sends[src]
                   if k in receivers(programs, src, m.route_id))
        assert (links[f"{k}->switch"], links[f"switch->{k}"]) == (out, into), \
            f"node {k}'s links carried {links[f'{k}->switch']} / {links[f'switch->{k}']} bytes, the plan {out} / {into}"
    watchdog.cancel()
    _report(p, {"payloads": sum(map(len, expect.values())), "multicasts": len(multicast), "link_bytes": links})


@cocotb.test()
async def run_ring_stream(dut):
    """Every node streams ``blocks`` blocks of ``block_bytes`` to the next node (to itself when
    alone, through the NIC's local port), LOAD and STORE alternating in its queue: the cluster
    busy; wall-clock time per simulated cycle is measured over the stream."""
    p = params()
    n, blocks, size = p["nodes"], p["blocks"], p["block_bytes"]
    config = NodeConfig(**p["config"])
    from mcf.sw.mars.lower import RouteTables
    from mcf.spec.topology import Topology
    routes = RouteTables(Topology("switch", n), entries=config.route_entries)
    h = ClusterHarness(dut, n, config, window_bytes=WINDOW)
    watchdog = h.watchdog(p.get("wall_clock_s", 600), "the ring stream")
    await _setup(h, routes.tables)
    for k in range(n):
        for b in range(blocks):
            h.nodes[k].memory.put(SRC_BASE + b * SLOT, block_bytes(k, b, size))

    async def node(k):
        drv, mem, to = h.nodes[k].driver, h.nodes[k].memory, (k + 1) % n
        for b in range(blocks):
            await drv.push_descriptor(DmaDescriptor(mem.phys(SRC_BASE + b * SLOT), size, b & 1, DmaDir.LOAD, b))
            await drv.push_meta(Meta(Stage.PREFILL, Op.KV_FETCH, Collective.UNICAST, ReduceOp.NONE, src=k, dst=to,
                                     route_id=routes.unicast(to), kv_id=b, length=size))
            await drv.push_descriptor(DmaDescriptor(mem.phys(DST_BASE + b * SLOT), size, 0, DmaDir.STORE, b))
        await drv.wait_desc_done(2 * blocks)

    first, wall = h.cycle(), time.monotonic()
    for t in [cocotb.start_soon(node(k)) for k in range(n)]:
        await bounded(t, 50_000_000, "the ring stream")
    cycles, wall = h.cycle() - first, time.monotonic() - wall
    for k in range(n):
        src = (k - 1) % n
        for b in range(blocks):
            assert h.nodes[k].memory.fetch(DST_BASE + b * SLOT, size) == block_bytes(src, b, size), \
                f"node {k}: block {b} from node {src} differs"
    await _no_errors(h)
    watchdog.cancel()
    _report(p, {"nodes": n, "cycles": cycles, "wall_s": wall, "us_per_cycle": 1e6 * wall / cycles,
                "bytes": n * blocks * size, "link_bytes": h.link_bytes()})


#: The bench's nodes: the tiny model's, as the rtl backend builds them (one build for both).
CONFIG = tiny_cluster_config()


def kv_params(nodes: int, **extra) -> dict:
    return {"nodes": nodes, "config": CONFIG.as_dict(), "seq": 16, "chunk": 4, "budget_tokens": 12, **extra}


def test_construction():
    top = ClusterTop(3, CONFIG)
    assert len(top.s_axil) == len(top.m_axi) == len(top.irq) == 3
    assert top.node.config.net_ports == 1 and top.switch.ports == 3
    with pytest.raises(ValueError, match="1..16"):
        ClusterTop(0, CONFIG)
