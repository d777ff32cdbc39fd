"""The communication half of a node: register block + packetizer + NIC.

    PS ─AXI-Lite─► ControlRegisters ─meta─► Packetizer ◄─payload─ (compute engine)
                     │route  ▲errors          │
                     ▼       │                ▼ local_in
                    Nic ◄────┘ rx/tx (network ports) ─► local_out (to the node)

This is what the multi-node benches wire port to port: the route table is written and the
per-cause counters read over AXI-Lite, metadata goes through the CSR metadata queue.  The
DMA descriptor queue is not used here (held).
"""
from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axi.lite import AXI4LiteSignature
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.csr.registers import ControlRegisters
from mcf.hw.nic.nic import Nic
from mcf.hw.packet.packetizer import Packetizer
from mcf.hw.registry import block
from mcf.spec.node import NodeConfig
from mcf.spec.regmap import ADDR_BITS, DATA_BITS
from mcf.spec.topology import Topology


class NicNode(wiring.Component):
    """The communication half of a node of ``config`` (its data width, network ports, metadata
    queue and packetizer depths, NIC sizes)."""

    def __init__(self, config: NodeConfig = NodeConfig()):
        self.config = config
        self.data_width = config.data_width
        self.net_ports = config.net_ports
        axis = AXIStreamSignature(config.data_width)
        super().__init__({
            "s_axil": In(AXI4LiteSignature(ADDR_BITS, DATA_BITS)),
            "payload": In(axis),
            "rx": In(axis).array(config.net_ports),
            "tx": Out(axis).array(config.net_ports),
            "local_out": Out(axis),
            "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        w = cfg.data_width
        m.submodules.csr = csr = ControlRegisters(
            meta_queue_depth=cfg.meta_queue_depth, desc_queue_depth=cfg.desc_queue_depth,
            data_bytes=cfg.data_bytes, net_ports=cfg.net_ports)
        m.submodules.packetizer = pk = Packetizer(w, cfg.payload_depth, cfg.meta_queue_depth)
        m.submodules.nic = nic = Nic(w, cfg.net_ports, **cfg.nic_params())

        wiring.connect(m, wiring.flipped(self.s_axil), csr.s_axil)
        wiring.connect(m, csr.meta, pk.meta)
        wiring.connect(m, wiring.flipped(self.payload), pk.payload)
        wiring.connect(m, pk.o, nic.local_in)
        wiring.connect(m, csr.route, nic.route)
        for p in range(self.net_ports):
            wiring.connect(m, wiring.flipped(self.rx[p]), nic.rx[p])
            wiring.connect(m, nic.tx[p], wiring.flipped(self.tx[p]))
        wiring.connect(m, nic.local_out, wiring.flipped(self.local_out))
        delivered = self.local_out.tvalid & self.local_out.tready & self.local_out.tlast
        m.d.comb += [
            csr.errors.eq(nic.errors),
            nic.node_id.eq(csr.node_id), nic.num_nodes.eq(csr.num_nodes), nic.enable.eq(csr.enable),
            csr.busy.eq((pk.meta_level != 0) | (pk.payload_level != 0)),
            csr.rx_packet.eq(delivered),
            csr.desc.ready.eq(0), csr.desc_done.eq(0), csr.desc_done_tag.eq(0),
            self.irq.eq(csr.irq),
        ]
        return m


#: Topologies a cluster of NICs can be wired in without a switch model.
WIRED_TOPOLOGIES = ("full_mesh", "ring")


class NicCluster(wiring.Component):
    """``nodes`` NicNodes of ``config`` wired port to port by
    ``mcf.spec.topology.Topology(topology, nodes)`` (``full_mesh`` or ``ring``: every port leads
    to a peer; each node gets the ports its topology needs)."""

    def __init__(self, nodes: int = 4, config: NodeConfig = NodeConfig(), topology: str = "full_mesh"):
        if nodes < 3:
            raise ValueError(f"nodes={nodes}: must be >= 3")
        if topology not in WIRED_TOPOLOGIES:
            raise ValueError(f"topology={topology!r}: one of {', '.join(WIRED_TOPOLOGIES)}")
        self.topo = Topology(topology, nodes)
        self.nodes = nodes
        self.topology = topology
        self.config = config
        axis = AXIStreamSignature(config.data_width)
        super().__init__({
            "axil": In(AXI4LiteSignature(ADDR_BITS, DATA_BITS)).array(nodes),
            "payload": In(axis).array(nodes),
            "local_out": Out(axis).array(nodes),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.nodes
        peers = [self.topo.peers(a) for a in range(n)]
        nodes = []
        for a in range(n):
            node = NicNode(self.config.replace(net_ports=len(peers[a])))
            m.submodules[f"node{a}"] = node
            nodes.append(node)
            wiring.connect(m, wiring.flipped(self.axil[a]), node.s_axil)
            wiring.connect(m, wiring.flipped(self.payload[a]), node.payload)
            wiring.connect(m, node.local_out, wiring.flipped(self.local_out[a]))
        for a in range(n):
            for p, b in enumerate(peers[a]):
                wiring.connect(m, nodes[a].tx[p], nodes[b].rx[peers[b].index(a)])
        return m


@block("nic_node", "register block + packetizer + NIC (the communication half of a node)",
       variants=({"data_width": 128},), data_width=64, net_ports=3)
def _nic_node(**fields):
    return NicNode(NodeConfig(**fields))

