"""Two RTL nodes (hw/eth/eth_node.py: Node + EthPort) joined by two serial-link models, each
direction in its own clock (a receiver runs on its far end's transmit clock), move a MARS
plan's KV blocks byte for byte through MAC + PCS, programmed by the PS driver: MAC tables,
link up, then the same plan as the direct two-node bench (tests/hw/test_node.py).  No error
counter moves and no frame goes missing.

The cocotb coroutines (``run_*``) and the pytest runner share this file and ``PARAMS``.
"""
from __future__ import annotations

import cocotb
import pytest
from amaranth import Module
from amaranth.hdl import DomainRenamer
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Timer
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

from mcf.sim.cocotb_util import bounded, params
from mcf.spec.node import NodeConfig

#: The two nodes of the bench: the tiny model's node, as in tests/hw/test_node.py.
CONFIG = NodeConfig.tiny()
PARAMS = {"max_frame": 600, "ber_window": 512, "seq": 16, "chunk": 4, "budget_tokens": 12,
          "desc_queue_depth": CONFIG.desc_queue_depth}
NODE_NS = 5.0
LINK_NS = (6.206, 6.21)          # the two transmit clocks differ by ~600 ppm


class EthNodePair(wiring.Component):
    """Node 0 transmits in domain ``lnk0`` (node 1 receives in it), node 1 in ``lnk1``."""

    def __init__(self, config: NodeConfig, max_frame: int, ber_window: int):
        from mcf.hw.axi.lite import AXI4LiteSignature
        from mcf.hw.eth.eth_node import EthNode
        from mcf.spec.regmap import ADDR_BITS, DATA_BITS
        self.config = config
        self.nodes = [EthNode(config, max_frame=max_frame, ber_window=ber_window) for _ in range(2)]
        super().__init__({"axil": In(AXI4LiteSignature(ADDR_BITS, DATA_BITS)).array(2),
                          "m_axi": Out(self.nodes[0].m_axi.signature).array(2)})

    def elaborate(self, platform):
        from mcf.sim.eth.link import SerialLink
        m = Module()
        for n in range(2):
            node = DomainRenamer({"eth_tx": f"lnk{n}", "eth_rx": f"lnk{1 - n}"})(self.nodes[n])
            m.submodules[f"node{n}"] = node
            wiring.connect(m, wiring.flipped(self.axil[n]), node.s_axil)
            wiring.connect(m, wiring.flipped(self.m_axi[n]), node.m_axi)
            link = m.submodules[f"link{n}"] = DomainRenamer(f"lnk{n}")(SerialLink())
            m.d.comb += [link.tx.eq(node.gt_tx), link.slip.eq(0), link.flip.eq(0), link.cut.eq(0),
                         node.sfp_mod_abs.eq(0), node.sfp_rx_los.eq(0), node.sfp_tx_fault.eq(0)]
        m.d.comb += [m.submodules.node1.gt_rx.eq(m.submodules.link0.rx),
                     m.submodules.node0.gt_rx.eq(m.submodules.link1.rx)]
        return m


@cocotb.test()
async def run_mars_over_ethernet(dut):
    from mcf.spec import DmaDescriptor, DmaDir, LinkStatus
    from mcf.spec.eth import node_mac
    from mcf.sw.driver import CocotbBackend, Driver
    from mcf.sw.mars.metaprog import lower
    from mcf.sw.mars.planner import PlanRequest, plan
    from mcf.sw.mars.profile import load_profile
    from mcf.sw.models import load_model
    from tests.hw.test_node import DST_BASE, RAM_BYTES, SLOT, SRC_BASE, block_bytes, transfers
    p = params()
    pl = plan(PlanRequest(model=load_model("tiny"), seq_len=p["seq"], nodes=2, profile=load_profile("kr260"),
                          scheme="mars", chunk_size=p["chunk"], budget_bytes=p["budget_tokens"] * 64))
    programs = lower(pl)
    sends, expect = transfers(programs)
    assert sum(len(v) for v in expect.values()) > 0, "the plan moves no KV: a bench that checks nothing"
    for n in range(2):
        assert len(expect[n]) <= p["desc_queue_depth"]

    dut.rst.value = 1
    for n in range(2):
        getattr(dut, f"lnk{n}_rst").value = 1
    await Timer(1, "ns")
    rams, drivers = [], []
    for n in range(2):
        master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, f"axil__{n}", bus_separator="__"), dut.clk, dut.rst)
        rams.append(AxiRam(AxiBus.from_prefix(dut, f"m_axi__{n}", bus_separator="__"), dut.clk, dut.rst,
                           size=RAM_BYTES))
        drivers.append(Driver(CocotbBackend(master, dut.clk), max_polls=5000))
    cocotb.start_soon(Clock(dut.clk, NODE_NS, unit="ns").start())
    for n in range(2):
        cocotb.start_soon(Clock(getattr(dut, f"lnk{n}_clk"), LINK_NS[n], unit="ns").start())
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    for n in range(2):
        getattr(dut, f"lnk{n}_rst").value = 0

    for n in range(2):
        for m in sends[n]:
            if m.length:
                rams[n].write(SRC_BASE + m.kv_id * SLOT, block_bytes(n, m.kv_id, m.length))

    async def run_node(n: int):
        drv, prog = drivers[n], programs[n]
        await drv.check_id()
        await drv.configure(node_id=n, num_nodes=2, window_base=0, window_size=RAM_BYTES)
        for peer in range(2):
            await drv.write_mac(peer, node_mac(peer))
        status = await drv.wait_link_up()
        assert not status[LinkStatus.HI_BER] and status[LinkStatus.BLOCK_LOCK]
        await drv.clear_errors()                  # and take the first frame's number as reference
        for rid, entry in sorted(prog.routes.items()):
            await drv.write_route(rid, entry)
        await drv.enable()
        done = 0
        for k, data in enumerate(expect[n]):
            await drv.push_descriptor(DmaDescriptor(DST_BASE + k * SLOT, len(data), 0, DmaDir.STORE, k))
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
        assert await drivers[n].read_seq_gaps() == 0
    dut._log.info("moved %d KV payloads over 10GBASE-R", sum(map(len, expect.values())))


@pytest.mark.cocotb
def test_mars_over_ethernet(build_dir):
    from mcf.sim.runner import run_cocotb
    p = PARAMS
    run_cocotb(EthNodePair(CONFIG, p["max_frame"], p["ber_window"]), __name__, build_dir,
               testcase="run_mars_over_ethernet", params=p)


def test_construction():
    from mcf.hw.eth.eth_node import EthNode
    node = EthNode(CONFIG, max_frame=1518)
    assert len(node.gt_tx) == 64 and node.port.max_packet == 1518 - 4 - 16
    assert len(node.m_axi.rdata) == CONFIG.data_width
    with pytest.raises(ValueError, match=r"^net_ports=2: an EthNode has one network port"):
        EthNode(CONFIG.replace(net_ports=2))
