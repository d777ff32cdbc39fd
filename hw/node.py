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
from mcf.spec.regmap import ADDR_BITS, DATA_BITS, ErrorCause


class Node(wiring.Component):
    """Parameters: ``data_width`` (DDR and stream width), ``net_ports``, ``addr_width`` (DDR
    address bits), ``buffer_bytes`` (each ping-pong buffer; the longest LOAD), the queue
    depths, ``payload_depth`` (packetizer beats) and ``nic`` (extra ``Nic`` parameters).

    ``eth=True`` adds the ports a 10GBASE-R port (``mcf.hw.eth``) needs from the register
    block: ``eth`` (MAC table writes, link status, sequence gaps) and ``eth_errors`` (its
    error events); ``mcf.hw.eth.eth_node.EthNode`` wires them."""

    def __init__(self, data_width: int = 128, net_ports: int = 1, addr_width: int = 40,
                 buffer_bytes: int = 4096, meta_queue_depth: int = 16, desc_queue_depth: int = 16,
                 payload_depth: int = 512, eth: bool = False, **nic):
        self.data_width, self.net_ports, self.has_eth = data_width, net_ports, eth
        self.ctl = ControlAndDma(data_width, addr_width, buffer_bytes, 2, meta_queue_depth,
                                 desc_queue_depth, data_width // 8, net_ports)
        self.packetizer = Packetizer(data_width, payload_depth, meta_queue_depth)
        self.nic = Nic(data_width, net_ports, **nic)
        axis = AXIStreamSignature(data_width)
        super().__init__({
            "s_axil": In(AXI4LiteSignature(ADDR_BITS, DATA_BITS)),
            "m_axi": Out(AXI4Signature(addr_width, data_width, 1)),
            "rx": In(axis).array(net_ports),
            "tx": Out(axis).array(net_ports),
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
    """Two nodes with one network port each, wired to each other (the smallest cluster)."""

    def __init__(self, data_width: int = 64, addr_width: int = 40, **node_params):
        self.node_params = {**node_params, "data_width": data_width, "addr_width": addr_width,
                            "net_ports": 1}
        super().__init__({
            "axil": In(AXI4LiteSignature(ADDR_BITS, DATA_BITS)).array(2),
            "m_axi": Out(AXI4Signature(addr_width, data_width, 1)).array(2),
        })

    def elaborate(self, platform):
        m = Module()
        nodes = [Node(**self.node_params) for _ in range(2)]
        for i, node in enumerate(nodes):
            m.submodules[f"node{i}"] = node
            wiring.connect(m, wiring.flipped(self.axil[i]), node.s_axil)
            wiring.connect(m, wiring.flipped(self.m_axi[i]), node.m_axi)
        wiring.connect(m, nodes[0].tx[0], nodes[1].rx[0])
        wiring.connect(m, nodes[1].tx[0], nodes[0].rx[0])
        return m


@block("node", "one node's PL datapath: registers, DMA, packetizer, NIC (Vivado top)",
       variants=({"data_width": 64, "net_ports": 2},), data_width=128, net_ports=1)
def _node(data_width, net_ports):
    return Node(data_width, net_ports)
