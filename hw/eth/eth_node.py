"""A node whose network port is a 10GBASE-R port: ``Node`` (registers, DMA, packetizer, NIC)
with an ``EthPort`` between its network port 0 and the GT-facing interface.  This is the
top that ``mcf board build --network sfp`` wraps around the GTH transceiver.

    PS ─AXI-Lite─► Node ─tx[0]─► EthPort ─gt_tx─► GTH ─► SFP+
    DDR ◄─AXI4───►  │  ◄─rx[0]──    │   ◄─gt_rx──     ◄─
                    └──── eth (MAC table, link status, sequence gaps, errors) ────┘

Clock domains: ``sync`` (the node clock), ``eth_tx`` (the GT's TXUSRCLK2) and ``eth_rx``
(its RXUSRCLK2, the recovered clock), each with its reset.
"""
from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axi.lite import AXI4LiteSignature
from mcf.hw.eth.port import EthPort
from mcf.hw.node import NODE_PARTS, PRESETS, Node
from mcf.hw.registry import block
from mcf.spec.params import Choice, Range
from mcf.spec import eth
from mcf.spec.node import NodeConfig
from mcf.spec.regmap import ADDR_BITS, DATA_BITS


class EthNode(wiring.Component):
    """The node of ``config`` (which has one network port: the KR260's one SFP+ cage) with
    ``Node(config, eth=True)``'s port 0 on an ``EthPort``; ``max_frame``, ``bit_reverse`` and
    ``ber_window`` are the port's (see ``EthPort``)."""

    #: Clock domains besides ``sync`` (each becomes ``<name>_clk`` / ``<name>_rst`` ports).
    DOMAINS = ("eth_tx", "eth_rx")

    def __init__(self, config: NodeConfig = NodeConfig(), *, max_frame: int = eth.MAX_FRAME_BYTES,
                 bit_reverse: bool = False, ber_window: int = eth.BER_WINDOW_BLOCKS):
        if config.net_ports != 1:
            raise ValueError(f"net_ports={config.net_ports}: an EthNode has one network port (the SFP+ cage)")
        self.config = config
        self.node = Node(config, eth=True)
        #: The node's AXI4 masters into the DDR (HP port p: ``m_axi``, ``m_axi1``, ...), forwarded.
        self.hp_names = ["m_axi" if p == 0 else f"m_axi{p}" for p in range(config.hp_ports)]
        self.port = EthPort(config.data_width, max_frame, bit_reverse, ber_window)
        super().__init__({
            "s_axil": In(AXI4LiteSignature(ADDR_BITS, DATA_BITS)),
            **{name: Out(self.node.hp(p).signature) for p, name in enumerate(self.hp_names)},
            "irq": Out(1),
            "gt_tx": Out(eth.GT_DATA_BITS), "gt_rx": In(eth.GT_DATA_BITS),
            "sfp_mod_abs": In(1), "sfp_rx_los": In(1), "sfp_tx_fault": In(1), "sfp_tx_disable": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.node = node = self.node
        m.submodules.eth = port = self.port
        wiring.connect(m, wiring.flipped(self.s_axil), node.s_axil)
        for p, name in enumerate(self.hp_names):
            wiring.connect(m, wiring.flipped(getattr(self, name)), node.hp(p))
        wiring.connect(m, node.tx[0], port.tx)
        wiring.connect(m, port.rx, node.rx[0])
        wiring.connect(m, node.eth, port.ctl)
        m.d.comb += [
            node.eth_errors.eq(port.errors), self.irq.eq(node.irq),
            self.gt_tx.eq(port.gt_tx), port.gt_rx.eq(self.gt_rx),
            port.sfp_mod_abs.eq(self.sfp_mod_abs), port.sfp_rx_los.eq(self.sfp_rx_los),
            port.sfp_tx_fault.eq(self.sfp_tx_fault), self.sfp_tx_disable.eq(port.sfp_tx_disable),
        ]
        return m


@block("eth_node", "one node with a 10GBASE-R port on its network port (the --network sfp top)",
       variants=({"model": "tiny", "data_width": 64},), lint_default=False,
       parts=tuple(f"node.{p}" for p in NODE_PARTS) + ("node", "eth"),
       model="qwen2.5-1.5b", **NodeConfig().fields_of("data_width"), max_frame=eth.MAX_FRAME_BYTES,
       ranges={"model": Choice(tuple(PRESETS)), "max_frame": Range(eth.MIN_FRAME_BYTES, eth.MAX_FRAME_BYTES)})
def _eth_node(model, data_width, max_frame):
    # Linted as the tiny variant only: the Qwen-sized node inside is the node block's own lint.
    return EthNode(PRESETS[model](data_width=data_width), max_frame=max_frame)
