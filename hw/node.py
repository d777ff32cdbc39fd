"""One MCF node's PL datapath (MCF section 5, Fig. 2), minus the compute engine:

    PS ─AXI-Lite─► ControlAndDma ─meta──────────► Packetizer ──► Nic ──► tx[0..P-1]
                     │  ▲ route, errors            ▲ payload     │  ◄── rx[0..P-1]
    DDR ◄─AXI4─► DMA loader ─── buffer contents ───┘             │ local_out
                 DMA writer ◄── payload ◄── HeaderDeserializer ◄─┘

A LOAD descriptor streams a block from DDR through a ping-pong buffer into the packetizer,
where the next Meta of the metadata queue becomes its header (KV replication and fetches
of stored blocks); packets delivered to this node lose their header and the payload goes
to DDR at the next STORE descriptor's address.  The compute engine (hw/compute) joins at
the packetizer's payload input and the loader's output in a later integration step.
This is the top that ``mcf board build`` wraps for Vivado.
"""
from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axi.full import AXI4Signature
from mcf.hw.axi.lite import AXI4LiteSignature
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.csr import EthControlPort
from mcf.hw.dma.engine import ControlAndDma
from mcf.hw.nic.nic import Nic
from mcf.hw.packet.header import HeaderDeserializer
from mcf.hw.packet.packetizer import Packetizer
from mcf.hw.registry import block
from mcf.spec.node import NodeConfig
from mcf.spec.regmap import ADDR_BITS, DATA_BITS, ErrorCause


class Node(wiring.Component):
    """One node, built from a ``mcf.spec.node.NodeConfig`` (data width, network ports, DDR
    address bits, ping-pong buffers, queue depths, packetizer depth, the NIC's sizes).

    ``eth=True`` adds the ports a 10GBASE-R port (``mcf.hw.eth``) needs from the register
    block: ``eth`` (MAC table writes, link status, sequence gaps) and ``eth_errors`` (its
    error events); ``mcf.hw.eth.eth_node.EthNode`` wires them."""

    def __init__(self, config: NodeConfig = NodeConfig(), *, eth: bool = False):
        if config.hp_ports != 1:
            raise ValueError(f"hp_ports={config.hp_ports}: this node has one AXI4 master into the DDR")
        self.config, self.has_eth = config, eth
        self.data_width, self.net_ports = config.data_width, config.net_ports
        self.ctl = ControlAndDma(config)
        self.packetizer = Packetizer(config.data_width, config.payload_depth, config.meta_queue_depth)
        self.nic = Nic(config.data_width, config.net_ports, **config.nic_params())
        axis = AXIStreamSignature(config.data_width)
        super().__init__({
            "s_axil": In(AXI4LiteSignature(ADDR_BITS, DATA_BITS)),
            "m_axi": Out(AXI4Signature(config.ddr_addr_bits, config.data_width, 1)),
            "rx": In(axis).array(config.net_ports),
            "tx": Out(axis).array(config.net_ports),
            "irq": Out(1),
            **({"eth": Out(EthControlPort()), "eth_errors": In(len(ErrorCause))} if eth else {}),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.ctl = ctl = self.ctl
        m.submodules.packetizer = pk = self.packetizer
        m.submodules.nic = nic = self.nic
        m.submodules.rx_header = rxh = HeaderDeserializer(self.data_width)

        wiring.connect(m, wiring.flipped(self.s_axil), ctl.s_axil)
        wiring.connect(m, wiring.flipped(self.m_axi), ctl.m_axi)
        wiring.connect(m, ctl.meta, pk.meta)
        wiring.connect(m, ctl.o, pk.payload)
        wiring.connect(m, pk.o, nic.local_in)
        wiring.connect(m, ctl.route, nic.route)
        if self.has_eth:
            wiring.connect(m, wiring.flipped(self.eth), ctl.eth)
        for p in range(self.net_ports):
            wiring.connect(m, wiring.flipped(self.rx[p]), nic.rx[p])
            wiring.connect(m, nic.tx[p], wiring.flipped(self.tx[p]))
        # Delivered packets: the header is counted (rx_packet) and dropped, the payload is
        # written to DDR by the next STORE descriptor.
        wiring.connect(m, nic.local_out, rxh.i)
        wiring.connect(m, rxh.o, ctl.i)
        m.d.comb += [
            rxh.meta.ready.eq(1),
            ctl.rx_packet.eq(rxh.meta.valid),
            ctl.net_errors.eq(nic.errors | (self.eth_errors if self.has_eth else 0)),
            nic.node_id.eq(ctl.node_id), nic.num_nodes.eq(ctl.num_nodes), nic.enable.eq(ctl.enable),
            self.irq.eq(ctl.irq),
        ]
        return m


class NodePair(wiring.Component):
    """Two nodes of ``config`` with one network port each, wired to each other (the smallest
    cluster)."""

    def __init__(self, config: NodeConfig = NodeConfig.tiny()):
        self.config = config.replace(net_ports=1)
        super().__init__({
            "axil": In(AXI4LiteSignature(ADDR_BITS, DATA_BITS)).array(2),
            "m_axi": Out(AXI4Signature(config.ddr_addr_bits, config.data_width, 1)).array(2),
        })

    def elaborate(self, platform):
        m = Module()
        nodes = [Node(self.config) for _ in range(2)]
        for i, node in enumerate(nodes):
            m.submodules[f"node{i}"] = node
            wiring.connect(m, wiring.flipped(self.axil[i]), node.s_axil)
            wiring.connect(m, wiring.flipped(self.m_axi[i]), node.m_axi)
        wiring.connect(m, nodes[0].tx[0], nodes[1].rx[0])
        wiring.connect(m, nodes[1].tx[0], nodes[0].rx[0])
        return m


@block("node", "one node's PL datapath: registers, DMA, packetizer, NIC (Vivado top)",
       variants=({"data_width": 64, "net_ports": 2},), **NodeConfig().fields_of("data_width", "net_ports"))
def _node(**fields):
    return Node(NodeConfig(**fields))
