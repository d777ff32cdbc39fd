"""The node top (hw/node.py): construction, and a MARS plan's KV movement on two RTL nodes
through the PS driver (a cocotb bench with its pytest runner).

mars -> programs -> driver -> hardware: the MARS planner plans a tiny prefill on 2 nodes and
lowers it (``mcf.sw.mars.metaprog``); each node's route table and every KV_REPLICA / KV_FETCH
/ directory Meta of its program are written through ``mcf.sw.driver.Driver`` (cocotb
backend, AXI-Lite), with a LOAD descriptor that streams the block from the sender's DDR
(AxiRam) into the packetizer.  The receiver posts one STORE per packet it expects.  At the
end every receiver's DDR holds, slot by slot, the bytes of the blocks the plan sent it, and
no error counter moved.
"""
import random

import cocotb
import pytest
from cocotb.triggers import Timer
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

from mcf.hw.node import Node, NodePair
from mcf.sim.cocotb_util import bounded, params, start
from mcf.sim.runner import run_cocotb
from mcf.spec import DmaDescriptor, DmaDir, ErrorCause, Op, Stage
from mcf.spec.node import NodeConfig
from mcf.sw.driver import CocotbBackend, Driver
from mcf.sw.mars.metaprog import lower
from mcf.sw.mars.planner import PlanRequest, plan
from mcf.sw.mars.profile import load_profile
from mcf.sw.models import load_model

RAM_BYTES = 1 << 16
SRC_BASE = 0x0000      # each node's blocks, one slot of SLOT bytes per kv_id
DST_BASE = 0x8000      # where received payloads land, in arrival order
SLOT = 512


def block_bytes(node: int, kv_id: int, length: int) -> bytes:
    """The (deterministic) contents of a block as its sender stores it."""
    return random.Random(node * 1_000_003 + kv_id).randbytes(length)


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
                expect[op.dst].append(block_bytes(prog.node, op.kv_id, op.length))
    return sends, expect


@cocotb.test()
async def run_mars_kv_moves(dut):
    p = params()
    cfg = load_model("tiny")
    pl = plan(PlanRequest(model=cfg, seq_len=p["seq"], nodes=2, profile=load_profile("kr260"),
                          scheme="mars", chunk_size=p["chunk"], budget_bytes=p["budget_tokens"] * 64))
    programs = lower(pl)
    sends, expect = transfers(programs)
    assert sum(len(v) for v in expect.values()) > 0, "the plan moves no KV: a bench that checks nothing"
    for n in range(2):
        assert len(expect[n]) <= p["desc_queue_depth"], "receiver STOREs must fit the queue up front"

    for n in range(2):
        getattr(dut, f"m_axi__{n}__awvalid")  # the ports exist
    dut.rst.value = 1
    await Timer(1, "ns")
    rams, drivers = [], []
    for n in range(2):
        master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, f"axil__{n}", bus_separator="__"), dut.clk, dut.rst)
        rams.append(AxiRam(AxiBus.from_prefix(dut, f"m_axi__{n}", bus_separator="__"), dut.clk, dut.rst,
                           size=RAM_BYTES))
        drivers.append(Driver(CocotbBackend(master, dut.clk), max_polls=5000))
    await start(dut)

    # Every block a node sends sits in its DDR at SRC_BASE + kv_id * SLOT.
    for n in range(2):
        for m in sends[n]:
            if m.length:
                rams[n].write(SRC_BASE + m.kv_id * SLOT, block_bytes(n, m.kv_id, m.length))

    async def run_node(n: int):
        drv, prog = drivers[n], programs[n]
        await drv.check_id()
        await drv.configure(node_id=n, num_nodes=2, window_base=0, window_size=RAM_BYTES)
        for rid, entry in sorted(prog.routes.items()):
            await drv.write_route(rid, entry)
        await drv.enable()
        done = 0
        # Receive side first: one STORE per expected payload, in arrival order.
        for k, data in enumerate(expect[n]):
            await drv.push_descriptor(DmaDescriptor(DST_BASE + k * SLOT, len(data), 0, DmaDir.STORE, k))
        # Send side: program order; a payload-carrying Meta gets its block from a LOAD.
        for i, m in enumerate(sends[n]):
            if m.length:
                await drv.push_descriptor(DmaDescriptor(SRC_BASE + m.kv_id * SLOT, m.length, i & 1,
                                                        DmaDir.LOAD, 1024 + i))
                done += 1
            await drv.push_meta(m)
        return done + len(expect[n])

    tasks = [cocotb.start_soon(run_node(n)) for n in range(2)]
    totals = [await bounded(t, 20_000_000, f"node {n}'s program") for n, t in enumerate(tasks)]
    for n in range(2):
        await drivers[n].wait_desc_done(totals[n])
    for n in range(2):
        for k, data in enumerate(expect[n]):
            got = rams[n].read(DST_BASE + k * SLOT, len(data))
            assert got == data, f"node {n}, received payload {k}: DDR differs from the sent block"
        errors = {c: v for c, v in (await drivers[n].read_errors()).items() if v}
        assert not errors, f"node {n}: error counters moved: {errors}"
    dut._log.info("moved %d KV payloads (%s)", sum(map(len, expect.values())),
                  ", ".join(f"node {n}: {len(expect[n])} in" for n in range(2)))


#: The two nodes of the bench: the tiny model's node (small buffers, a 16-entry route table).
CONFIG = NodeConfig.tiny()


def test_construction():
    node = Node(CONFIG.replace(net_ports=2))
    assert len(node.tx) == len(node.rx) == 2 and len(node.m_axi.rdata) == 64
    with pytest.raises(ValueError, match=r"^hp_ports=2: this node has one AXI4 master into the DDR$"):
        Node(CONFIG.replace(hp_ports=2))


@pytest.mark.cocotb
def test_mars_kv_moves_between_two_nodes(build_dir):
    run_cocotb(NodePair(CONFIG), __name__, build_dir, testcase="run_mars_kv_moves",
               params={**CONFIG.as_dict(), "seq": 16, "chunk": 4, "budget_tokens": 12})
