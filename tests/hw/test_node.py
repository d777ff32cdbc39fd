"""The node top (hw/node.py): construction, instruction programs on two RTL nodes of the RTL
cluster (a switch between them), fault cases, and the PS debug path (a MARS plan's KV movement
pushed as Metas + descriptors).

Cocotb benches with their pytest runners.  The two-node benches run on two slots of the tiny
model's cluster build (``mcf.sim.rtlcluster``: Verilator, ``ClusterTop`` of ``MIN_SLOTS`` nodes,
the build tests/sim/rtlcluster and the one-node model run share): every node has a cocotbext-axi
``AxiRam`` as DDR on each HP port (random pauses on all five channels, ``ClusterHarness``) and
its PS is ``mcf.sw.driver.Driver`` over an AXI-Lite master.  Programs are typed ``spec.isa``
instructions; the expectations come from the programs and the bytes the bench wrote (what lands
where, how many instructions of each queue retire, which semaphores end at zero), never from the
RTL.
"""
import random

import cocotb
import pytest
from cocotb.triggers import ClockCycles

from mcf.hw.compute.exec.unit import ExecUnit
from mcf.hw.node import Node, NodePair
from mcf.sim.cocotb_util import bounded, params
from mcf.sim.node_harness import RtlNode
from mcf.sim.rtlcluster.harness import ClusterHarness
from mcf.sim.runner import run_cocotb
from mcf.spec import Collective, DmaDescriptor, DmaDir, Op, ReduceOp, Stage
from mcf.spec.isa import (INSTR_BYTES, Credit, End, Gemm, PerfCounter, Queue, Recv, Send, SeqFault, Sync,
                          encode_program)
from mcf.spec.node import NodeConfig
from mcf.spec.plan import ReplicaState
from mcf.sw.driver import NodeFault

#: The tiny model's node (small buffers, a 16-entry route table): construction checks and
#: tests/hw/eth/test_eth_node.py.  The two-node benches run on the cluster build's node
#: (``tiny_cluster_config()``: the same node with larger capacities), passed as ``params()["config"]``.
CONFIG = NodeConfig.tiny()
RAM_BYTES = 1 << 16
PROG = 0x0000
#: The PS debug path's bench (and tests/hw/eth/test_eth_node.py): each node's blocks, one slot of
#: SLOT bytes per kv_id from SRC_BASE; received payloads from DST_BASE in arrival order.
SRC_BASE, DST_BASE, SLOT = 0x0000, 0x8000, 512
#: Routes: 1 = node 0 -> node 1, 2 = node 1 -> node 0 (each node: forward on port 0 or deliver;
#: the switch's table comes from them, ``forwarding_table``).
ROUTES = [{1: {"port_mask": 1}, 2: {"local": 1}}, {1: {"local": 1}, 2: {"port_mask": 1}}]


def loaded_bytes(cfg: NodeConfig, length: int) -> int:
    """DDR bytes a SEND of ``length`` reads: whole bus beats of each packet."""
    mp, nb = cfg.max_payload, cfg.data_bytes
    sizes = [min(mp, length - k) for k in range(0, length, mp)]
    return sum(-(-s // nb) * nb for s in sizes)


def payload(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def retired(program) -> dict:
    """Instructions per queue a completed program retires (every one, END included)."""
    out = {q: 0 for q in Queue}
    for ins in program:
        out[ins.queue] += 1
    return out


async def setup(dut, seed=1):
    """Two nodes of the cluster top (the other slots idle): DDR window ``[0, RAM_BYTES)``, random
    pauses on every DDR channel, the switch's table from ``ROUTES``; the harness and the nodes."""
    h = ClusterHarness(dut, 2, NodeConfig(**params()["config"]), phys_base=0, window_bytes=RAM_BYTES,
                       pause_probability=0.2, seed=seed)
    await h.start()
    await h.configure_switch(ROUTES)
    nodes = [RtlNode(p.index, p.rams[0], p.driver) for p in h.nodes]
    for n in nodes:
        await n.configure(2, RAM_BYTES, ROUTES[n.index])
    return h, nodes


def check_switch(h: ClusterHarness, corrupted: int = 0) -> None:
    """Nothing the bench did not inject happened outside the nodes: no packet dropped or
    unrouted by the switch, ``corrupted`` corrupted, no DDR access outside a window."""
    c = h.switch_counters()
    assert (c["dropped"], c["unrouted"], c["corrupted"]) == (0, 0, corrupted), c
    assert not h.violations(), h.violations()


async def run_all(nodes, programs, timeout_s=120.0):
    """Load every node's program, start them all, wait for all (bounded)."""
    for n, prog in zip(nodes, programs):
        await n.load(prog, PROG)
    for n in nodes:
        await n.driver.start()
    return [await n.driver.wait_done(timeout_s) for n in nodes]


async def expect_fault(node, cause: SeqFault, pc: int | None = None, timeout_s: float = 120.0) -> str:
    try:
        await node.driver.wait_done(timeout_s)
    except NodeFault as exc:
        assert exc.cause is cause, f"node {node.index}: fault {exc.cause!r}, expected {cause!r}: {exc}"
        if pc is not None:
            assert exc.pc == pc, f"node {node.index}: fault at {exc.pc}, expected {pc}: {exc}"
        assert "\n" not in str(exc)
        return str(exc)
    raise AssertionError(f"node {node.index} completed; expected fault {cause.name}")


def send(**kw):
    base = dict(stage=Stage.PREFILL, mop=Op.KV_FETCH, collective=Collective.UNICAST, reduce_op=ReduceOp.NONE,
                dst=1, route_id=1, seq=0)
    return Send(**{**base, **kw})


@cocotb.test()
async def run_send_recv(dut):
    """RECV with rendezvous credits, multi-packet SENDs, CREDIT instructions, a KV_DRAIN control
    packet, semaphores across the queues and the nodes; DDR, directory, counters checked."""
    h, nodes = await setup(dut, params().get("seed", 1))
    cfg = h.config
    mp = cfg.max_payload
    L1, L2 = 3 * mp + 100, 64
    SRC1, SRC2, DST1, DST2 = 0x2000, 0x3000, 0x8000, 0x9000
    nodes[0].ram.write(SRC1, payload(1, L1))
    nodes[0].ram.write(SRC2, payload(2, L2))
    receiver = [
        Recv(tag=7, ddr=DST1, length=L1, done_sem=1, credit=1, credit_dst=0, credit_route=2, credit_sem=0),
        Recv(tag=8, ddr=DST2, length=L2, done_sem=2, credit=0, credit_dst=0, credit_route=0, credit_sem=0,
             sig=1, sig_sem=3),
        Credit(dst=0, route_id=2, sem=1, count=1, wait_sem=3, wait_cnt=1),
        Sync(on=Queue.EX, wait_sem=1, wait_cnt=1),
        Sync(on=Queue.EX, wait_sem=2, wait_cnt=1),
        Sync(on=Queue.EX, wait_sem=4, wait_cnt=2),
        End(),
    ]
    sender = [
        send(ddr=SRC1, length=L1, tag=7, wait_sem=0, wait_cnt=1),
        send(ddr=SRC2, length=L2, tag=8, wait_sem=1, wait_cnt=1, mop=Op.KV_REPLICA),
        send(ddr=0, length=0, tag=5, mop=Op.KV_DRAIN, stage=Stage.CONTROL),
        Credit(dst=1, route_id=1, sem=4, count=2),
        End(),
    ]
    await run_all(nodes, [sender, receiver])
    assert nodes[1].ram.read(DST1, L1) == payload(1, L1)
    assert nodes[1].ram.read(DST2, L2) == payload(2, L2)
    assert (await nodes[1].driver.read_directory([5, 6])) == {5: ReplicaState.DRAINING, 6: ReplicaState.INVALID}
    for n, prog in zip(nodes, [sender, receiver]):
        drv = n.driver
        assert await drv.read_sems() == [0] * cfg.num_sems, f"node {n.index}: semaphores left over"
        errors = {c: v for c, v in (await drv.read_errors()).items() if v}
        assert not errors, f"node {n.index}: {errors}"
        perf = await drv.read_perf()
        want = retired(prog)
        assert (perf[PerfCounter.RETIRED_EX], perf[PerfCounter.RETIRED_TX], perf[PerfCounter.RETIRED_RX]) == \
            (want[Queue.EX], want[Queue.TX], want[Queue.RX]), f"node {n.index}: {perf}"
        assert perf[PerfCounter.CYCLES] > 0
        assert perf[PerfCounter.DDR_RD_BYTES] == perf[PerfCounter.HP0_RD_BYTES] >= len(prog) * INSTR_BYTES
    p0, p1 = await nodes[0].driver.read_perf(), await nodes[1].driver.read_perf()
    assert p0[PerfCounter.NET_TX_BYTES] == L1 + L2 and p1[PerfCounter.NET_RX_BYTES] == L1 + L2
    assert p1[PerfCounter.DDR_WR_BYTES] == L1 + L2
    assert p0[PerfCounter.DDR_RD_BYTES] == (len(sender) * INSTR_BYTES + loaded_bytes(cfg, L1)
                                            + loaded_bytes(cfg, L2))
    st = await nodes[1].driver.seq_status()
    assert st["done"] and not st["fault"] and st["idle"]
    check_switch(h)


@cocotb.test()
async def run_faults(dut):
    """Each fault stops the node with its cause and instruction, counted where it is an error,
    reported in one line by the driver; the node then runs a good program again."""
    h, nodes = await setup(dut, params().get("seed", 2))
    n0, n1 = nodes
    # 1. An illegal instruction: a reserved bit set in the second word.
    words = encode_program([Sync(on=Queue.TX), End()])
    bad = bytearray(words)
    bad[INSTR_BYTES + INSTR_BYTES - 1] |= 0x80
    n0.ram.write(PROG, bytes(bad))
    await n0.driver.load_program(PROG, 2)
    await n0.driver.start()
    await expect_fault(n0, SeqFault.ILLEGAL_INSTRUCTION, pc=1)
    # 2. An EX instruction this build cannot run (tokens beyond its maximum).
    gemm = Gemm(blob=0x1000, n=64, total_tiles=1, tile0=0, tiles=1, tokens=h.config.max_tokens + 1, group_log2=5,
                w_exp=0, bias=0, src=0, src_stride=8, dst=64, dst_stride=8)
    await n0.load([Sync(on=Queue.RX), gemm, End()], PROG)
    await n0.driver.start()
    await expect_fault(n0, SeqFault.ILLEGAL_INSTRUCTION, pc=1)
    # 3. A program without END.
    await n0.load([Sync(on=Queue.EX), Sync(on=Queue.TX)], PROG)
    await n0.driver.start()
    await expect_fault(n0, SeqFault.PROGRAM_OVERRUN, pc=2)
    # 4. A SEND outside the DMA window: never issued, nothing reaches node 1.
    await n0.driver.set_window(0, 0x8000)
    await n0.load([Sync(on=Queue.EX), send(ddr=0x9000, length=600, tag=3), End()], PROG)
    await n0.driver.start()
    await expect_fault(n0, SeqFault.OUT_OF_WINDOW, pc=1)
    await n0.driver.set_window(0, RAM_BYTES)
    # 5. The watchdog: a wait nothing will satisfy.
    await n0.driver.set_watchdog(300)
    await n0.load([Sync(on=Queue.EX, wait_sem=3, wait_cnt=1), End()], PROG)
    await n0.driver.start()
    msg = await expect_fault(n0, SeqFault.WATCHDOG, pc=2)       # (the next one to dispatch)
    assert "waiting: EX on sem 3 (= 0)" in msg, msg
    # 6. Abort.
    await n0.driver.set_watchdog(0)
    await n0.load([Sync(on=Queue.TX, wait_sem=2, wait_cnt=1), End()], PROG)
    await n0.driver.start()
    await ClockCycles(dut.clk, 50)
    assert (await n0.driver.seq_status())["running"]
    await n0.driver.abort()
    await expect_fault(n0, SeqFault.ABORTED)
    # 7. An unexpected packet at node 1: dropped after RX_WAIT, counted, node 1 stops (NETWORK).
    await n1.driver.set_rx_wait(200)
    await n1.load([Sync(on=Queue.EX, wait_sem=9, wait_cnt=1), End()], PROG)
    await n1.driver.start()
    n0.ram.write(0x2000, payload(3, 100))
    await n0.load([send(ddr=0x2000, length=100, tag=99), End()], PROG)
    await n0.driver.start()
    await n0.driver.wait_done(60)
    msg = await expect_fault(n1, SeqFault.NETWORK)
    assert "errors: RX_UNEXPECTED=1" in msg, msg
    await n1.driver.clear_errors()
    # 8. A semaphore overflow at node 1: two CREDIT packets of 65535.
    await n1.load([Sync(on=Queue.EX, wait_sem=9, wait_cnt=1), End()], PROG)
    await n1.driver.start()
    over = send(ddr=0, length=0, tag=6, mop=Op.CREDIT, stage=Stage.CONTROL, seq=0xFFFF)
    await n0.load([over, over, End()], PROG)
    await n0.driver.start()
    await n0.driver.wait_done(60)
    await expect_fault(n1, SeqFault.SEM_OVERFLOW)
    # 8b. A CREDIT for a semaphore node 1 does not have: dropped, counted (RX_BAD_CONTROL), node 1 stops.
    await n1.driver.clear_errors()
    await n1.load([Sync(on=Queue.EX, wait_sem=9, wait_cnt=1), End()], PROG)
    await n1.driver.start()
    await n0.load([send(ddr=0, length=0, tag=h.config.num_sems, mop=Op.CREDIT, stage=Stage.CONTROL, seq=1),
                   End()], PROG)
    await n0.driver.start()
    await n0.driver.wait_done(60)
    msg = await expect_fault(n1, SeqFault.NETWORK)
    assert "RX_BAD_CONTROL=1" in msg, msg
    await n1.driver.clear_errors()
    # 9. A corrupted header on the link (the switch flips a bit of the next packet node 0 sends):
    # dropped and counted by node 1's NIC, node 1 stops.
    await n1.load([Sync(on=Queue.EX, wait_sem=9, wait_cnt=1), End()], PROG)
    await n1.driver.start()
    await n0.load([send(ddr=0x2000, length=100, tag=1), End()], PROG)
    h.inject(corrupt_at={0: h.switch_counters()["packets_in"][0] + 1})
    await n0.driver.start()
    await n0.driver.wait_done(60)
    msg = await expect_fault(n1, SeqFault.NETWORK)
    h.inject(corrupt_at={0: 0})
    assert "BAD_HEADER=1" in msg, msg
    # After all that, both nodes run a transfer again.
    for n in nodes:
        await n.driver.clear_errors()
    n0.ram.write(0x2000, payload(4, 300))
    await run_all(nodes, [
        [send(ddr=0x2000, length=300, tag=4, wait_sem=0, wait_cnt=1), End()],
        [Recv(tag=4, ddr=0xA000, length=300, done_sem=1, credit=1, credit_dst=0, credit_route=2, credit_sem=0),
         Sync(on=Queue.EX, wait_sem=1, wait_cnt=1), End()]])
    assert n1.ram.read(0xA000, 300) == payload(4, 300)
    for n in nodes:
        assert not {c: v for c, v in (await n.driver.read_errors()).items() if v}
    check_switch(h, corrupted=1)


# --- the PS debug path: a MARS plan's KV movement as Metas and descriptors ----------------------
def transfers(programs):
    """Per sender, in program order: the Metas it pushes; per receiver: the payloads it gets."""
    from mcf.spec import Stage as St
    sends = {p.node: [] for p in programs}
    expect = {p.node: [] for p in programs}
    for prog in programs:
        for stage, _, op in prog.ops:
            if stage != St.PREFILL or not hasattr(op, "route_id"):
                continue
            sends[prog.node].append(op)
            if op.op in (Op.KV_REPLICA, Op.KV_FETCH) and op.length:
                expect[op.dst].append(block_bytes(prog.node, op.kv_id, op.length))
    return sends, expect


def block_bytes(node: int, kv_id: int, length: int) -> bytes:
    return random.Random(node * 1_000_003 + kv_id).randbytes(length)


@cocotb.test()
async def run_mars_kv_moves(dut):
    """The PS's queues (no program running): LOAD descriptors + Metas send every block the
    MARS plan moves; the receivers' STORE descriptors land them; no error counter moves."""
    from mcf.sw.mars.metaprog import lower
    from mcf.sw.mars.planner import PlanRequest, plan
    from mcf.sw.mars.profile import load_profile
    from mcf.sw.models import load_model
    p = params()
    pl = plan(PlanRequest(model=load_model("tiny"), seq_len=p["seq"], nodes=2, profile=load_profile("kr260"),
                          scheme="mars", chunk_size=p["chunk"], budget_bytes=p["budget_tokens"] * 64))
    programs = lower(pl)
    sends, expect = transfers(programs)
    assert sum(len(v) for v in expect.values()) > 0, "the plan moves no KV: a bench that checks nothing"
    SRC, DST = SRC_BASE, DST_BASE
    h, nodes = await setup(dut, 3)
    await h.configure_switch([{p.node: p for p in programs}[n].routes for n in range(2)])   # the plan's routes
    for n in range(2):
        assert len(expect[n]) <= h.config.desc_queue_depth, "receiver STOREs must fit the queue up front"
        for meta in sends[n]:
            if meta.length:
                nodes[n].ram.write(SRC + meta.kv_id * SLOT, block_bytes(n, meta.kv_id, meta.length))

    async def run_node(n: int):
        drv, done = nodes[n].driver, 0
        for rid, entry in sorted({p.node: p for p in programs}[n].routes.items()):   # the plan's routes
            await drv.write_route(rid, entry)
        for k, data in enumerate(expect[n]):
            await drv.push_descriptor(DmaDescriptor(DST + k * SLOT, len(data), 0, DmaDir.STORE, k))
        for i, meta in enumerate(sends[n]):
            if meta.length:
                await drv.push_descriptor(DmaDescriptor(SRC + meta.kv_id * SLOT, meta.length, i & 1,
                                                        DmaDir.LOAD, 1024 + i))
                done += 1
            await drv.push_meta(meta)
        return done + len(expect[n])

    tasks = [cocotb.start_soon(run_node(n)) for n in range(2)]
    totals = [await bounded(t, 20_000_000, f"node {n}'s pushes") for n, t in enumerate(tasks)]
    for n in range(2):
        await nodes[n].driver.wait_desc_done(totals[n])
        for k, data in enumerate(expect[n]):
            assert nodes[n].ram.read(DST + k * SLOT, len(data)) == data, f"node {n}, payload {k}"
        errors = {c: v for c, v in (await nodes[n].driver.read_errors()).items() if v}
        assert not errors, f"node {n}: error counters moved: {errors}"
    check_switch(h)


def test_construction():
    node = Node(CONFIG.replace(net_ports=2, hp_ports=2))
    assert len(node.tx) == len(node.rx) == 2 and len(node.m_axi.rdata) == 64 and len(node.m_axi1.rdata) == 64
    assert isinstance(node.exec, ExecUnit) and node.exec_ports == ["m_axi"]
    assert node.ic.clients[-1].port == 1          # the execute unit's master on the second HP port
    assert len(NodePair(CONFIG).m_axi) == 2
    # two weight loaders (NodeConfig.weight_ports): their masters join the interconnect, spread over the HP ports
    node = Node(CONFIG.replace(hp_ports=2, weight_ports=2))
    assert node.exec_ports == ["m_axi", "m_axi_w0", "m_axi_w1"]
    assert [(c.name, c.port, c.write) for c in node.ic.clients[3:]] == [
        ("ex_m_axi", 1, True), ("ex_m_axi_w0", 0, False), ("ex_m_axi_w1", 1, False)]
    # with their own clock (NodeConfig.weight_clock_hz): the weight loaders alone on HP 0, 1 through the
    # interconnect of the axi domain, every other client on HP 2 (the first port of ``ic``)
    node = Node(CONFIG.replace(hp_ports=3, weight_ports=2, weight_clock_hz=300_000_000))
    assert [(c.name, c.port) for c in node.wic.clients] == [("ex_m_axi_w0", 0), ("ex_m_axi_w1", 1)]
    assert [(c.name, c.port) for c in node.ic.clients] == [("fetch", 0), ("loader", 0), ("writer", 0),
                                                           ("ex_m_axi", 0)]
    assert node.ic.hp_ports == 1 and node.first_sync_port == 2 and len(node.m_axi2.rdata) == 64


#: Bound of a run on the cluster build: it may pay the session's Verilator build of the cluster (one
#: per session, shared with tests/sim/rtlcluster; ~6 min on an idle 2-core machine, ~12 min loaded).
BUILD_S = 2400


@pytest.mark.cocotb
@pytest.mark.timeout(BUILD_S)
def test_two_nodes_run_programs(build_dir, verilator_cache):
    """The three benches above on two slots of the tiny model's cluster build (the Verilator build
    tests/sim/rtlcluster and the one-node model run share: no build of its own)."""
    from mcf.sim.rtlcluster import backend as rtl
    from mcf.sim.rtlcluster.top import ClusterTop
    top = ClusterTop(rtl.MIN_SLOTS, rtl.tiny_cluster_config(), node_class=rtl.node_factory())
    run_cocotb(top, __name__, build_dir, sim="verilator", cache_dir=verilator_cache,
               testcase=["run_send_recv", "run_faults", "run_mars_kv_moves"],
               params={"seq": 16, "chunk": 4, "budget_tokens": 12, "config": top.config.as_dict()})


# --- one node runs the tiny model: the runtime's programs on the RTL node ------------------------


def tiny_run(prompt_len: int = 4):
    """The tiny model, its random weights and a prompt of ``prompt_len`` token ids."""
    import numpy as np

    from mcf.sw.golden.weights import random_weights
    from mcf.sw.models import load_model
    cfg = load_model("tiny")
    return cfg, random_weights(cfg, 5), [int(t) for t in np.random.default_rng(3).integers(0, cfg.vocab_size,
                                                                                        prompt_len)]


@pytest.mark.cocotb
@pytest.mark.timeout(BUILD_S)
def test_one_node_runs_the_tiny_model(verilator_cache):
    """Prefill of 4 prompt tokens and one greedy decode step of the tiny model (2 layers, GQA),
    lowered by ``mcf.sw.mars.lower`` and driven by the PS runtime through the driver on one RTL
    ``Node`` (Verilator: one slot of the cluster build that tests/sim/rtlcluster shares, DMA window
    at a non-zero physical base, random pauses on the DDR channels): every step's logits equal the
    golden fixed-point model's bit for bit, the KV blocks in the node's DDR equal the golden cache,
    the directory holds the owned block (``check``), and the ISA simulator gives the same tokens
    and logits."""
    import functools

    import numpy as np

    from mcf.sim.rtlcluster import backend as rtl
    from mcf.sw.runtime.backend import isa_backend
    from mcf.sw.runtime.runtime import Session
    from tests.sw.runtime.test_runtime import check
    cfg, weights, prompt = tiny_run()
    factory = functools.partial(rtl.rtl_backend, cache_dir=verilator_cache, progress=lambda msg: None,
                                pause_probability=0.1, seed=7)
    rep, s = check(cfg, weights, prompt, nodes=1, scheme="mars", chunk=len(prompt), decode=1, group=16,
                   factory=factory, timeout_s=900.0)
    assert s.backend.slots == rtl.MIN_SLOTS and s.backend.hw_config == rtl.tiny_cluster_config(), \
        "the one-node run did not use the cluster build the other RTL runs share"
    assert rep.directory_after_prefill == [list(range(s.plan.num_chunks))]
    ref = Session(cfg, weights, prompt, nodes=1, scheme="mars", chunk=len(prompt), decode=1, group=16,
                  factory=isa_backend).run()           # the ISA simulator runs the same session
    assert ref.tokens == rep.tokens
    assert all(np.array_equal(a.logits, b.logits) for a, b in zip(ref.steps, rep.steps))
    counters = rep.steps[0].counters[0]
    assert counters["RETIRED_EX"] > 0 and counters["MAC_BEATS"] > 0 and counters["BUSY_GEMM"] > 0
    print(f"tiny model on one RTL node: tokens {rep.tokens}, TTFT {rep.ttft_cycles} cycles, "
          f"decode {rep.decode_cycles_per_token} cycles/token")
