"""The node's DMA: loader and writer behind one descriptor stream and one AXI4 master, and
``ControlAndDma``, the register block wired to it (what the PS programs through the driver).
"""
from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axi.full import AXI4Signature
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.csr import ControlRegisters, EthControlPort, RouteTablePort
from mcf.hw.dma.loader import DmaLoader
from mcf.hw.dma.writer import DmaWriter
from mcf.hw.layouts import DmaDescriptorLayout, MetaLayout
from mcf.hw.registry import ADDR_WIDTH, block
from mcf.spec import DmaDir, ErrorCause
from mcf.spec.node import NodeConfig
from mcf.spec.packet import NODE_BITS
from mcf.spec.regmap import DMA_TAG_BITS


class DmaEngine(wiring.Component):
    """LOAD descriptors go to the ping-pong loader, STORE descriptors to the writer; both
    share ``m_axi`` (the loader has the read channels, the writer the write channels).

    Completions leave one per cycle on ``desc_done`` + ``desc_done_tag`` (with
    ``errors[AXI_RESP_ERROR]`` when the transfer saw an error response).  The loader's take
    the port first; the writer's wait in a 4-deep queue.  The loader completes at most
    ``buffers`` descriptors back to back (each needs a buffer that must drain before it is
    reused), so that queue cannot overflow.
    """

    def __init__(self, data_width: int = 128, addr_width: int = 40, buffer_bytes: int = 4096,
                 buffers: int = 2, max_outstanding: int = 4):
        self.loader = DmaLoader(data_width, addr_width, buffer_bytes, buffers, max_outstanding)
        self.writer = DmaWriter(data_width, addr_width, max_outstanding)
        self.data_width, self.buffer_bytes, self.buffers = data_width, buffer_bytes, buffers
        super().__init__({
            "desc": In(stream.Signature(DmaDescriptorLayout)),
            "m_axi": Out(AXI4Signature(addr_width, data_width, 1)),
            "o": Out(AXIStreamSignature(data_width)),
            "i": In(AXIStreamSignature(data_width)),
            "desc_done": Out(1),
            "desc_done_tag": Out(DMA_TAG_BITS),
            "errors": Out(len(ErrorCause)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.loader = ld = self.loader
        m.submodules.writer = wr = self.writer

        # Descriptors by direction.
        is_load = self.desc.payload.dir.as_value() == int(DmaDir.LOAD)
        m.d.comb += [
            ld.desc.payload.eq(self.desc.payload), wr.desc.payload.eq(self.desc.payload),
            ld.desc.valid.eq(self.desc.valid & is_load), wr.desc.valid.eq(self.desc.valid & ~is_load),
        ]
        with m.If(is_load):
            m.d.comb += self.desc.ready.eq(ld.desc.ready)
        with m.Else():
            m.d.comb += self.desc.ready.eq(wr.desc.ready)

        # One AXI4 master: members by name from whichever engine has them.
        for name in self.m_axi.signature.members:
            sub = ld.m_axi if hasattr(ld.m_axi, name) else wr.m_axi
            if self.m_axi.signature.members[name].flow == Out:
                m.d.comb += getattr(self.m_axi, name).eq(getattr(sub, name))
            else:
                m.d.comb += getattr(sub, name).eq(getattr(self.m_axi, name))
        wiring.connect(m, wiring.flipped(self.o), ld.o)
        wiring.connect(m, wiring.flipped(self.i), wr.i)

        # Completions: the loader's directly, the writer's through a small queue.
        event = data.StructLayout({"tag": DMA_TAG_BITS, "error": 1})
        m.submodules.wdone = wdone = fifo.SyncFIFOBuffered(width=event.size, depth=4)
        w_event, out = Signal(event), Signal(event)
        m.d.comb += [w_event.tag.eq(wr.done_tag), w_event.error.eq(wr.resp_error),
                     wdone.w_data.eq(w_event), wdone.w_en.eq(wr.done)]
        fire = Signal()
        with m.If(ld.done):
            m.d.comb += [fire.eq(1), out.tag.eq(ld.done_tag), out.error.eq(ld.resp_error)]
        with m.Elif(wdone.r_rdy):
            m.d.comb += [fire.eq(1), out.eq(wdone.r_data), wdone.r_en.eq(1)]
        err_bit = Signal(len(ErrorCause))
        m.d.comb += [
            self.desc_done.eq(fire), self.desc_done_tag.eq(out.tag),
            err_bit.eq((fire & out.error) << ErrorCause.AXI_RESP_ERROR), self.errors.eq(err_bit),
            self.busy.eq(ld.busy | wr.busy | wdone.r_rdy),
        ]
        return m


class ControlAndDma(wiring.Component):
    """``ControlRegisters`` + ``DmaEngine`` of a ``NodeConfig``: the PS writes descriptors over ``s_axil``; the
    engine moves data over ``m_axi``.  The NIC-facing ports of the register block (route
    table, metadata queue, its error strobes and ``rx_packet``) and its 10GBASE-R port
    interface (``eth``) pass through."""

    def __init__(self, config: NodeConfig = NodeConfig()):
        self.config = config
        data_width, addr_width = config.data_width, config.ddr_addr_bits
        self.csr = ControlRegisters(config.meta_queue_depth, config.desc_queue_depth, config.data_bytes,
                                    config.net_ports, dma_bus_bytes=config.data_bytes,
                                    dma_buffers=config.buffers, dma_buffer_bytes=config.buffer_bytes)
        self.dma = DmaEngine(data_width, addr_width, config.buffer_bytes, config.buffers)
        csr_sig = self.csr.signature.members
        super().__init__({
            "s_axil": csr_sig["s_axil"],
            "m_axi": Out(AXI4Signature(addr_width, data_width, 1)),
            "o": Out(AXIStreamSignature(data_width)),
            "i": In(AXIStreamSignature(data_width)),
            "route": Out(RouteTablePort()),
            "eth": Out(EthControlPort()),
            "meta": Out(stream.Signature(MetaLayout)),
            "net_errors": In(len(ErrorCause)),
            "rx_packet": In(1),
            "node_id": Out(NODE_BITS),
            "num_nodes": Out(NODE_BITS + 1),
            "enable": Out(1),
            "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.csr = csr = self.csr
        m.submodules.dma = dma = self.dma
        wiring.connect(m, wiring.flipped(self.s_axil), csr.s_axil)
        wiring.connect(m, wiring.flipped(self.m_axi), dma.m_axi)
        wiring.connect(m, wiring.flipped(self.o), dma.o)
        wiring.connect(m, wiring.flipped(self.i), dma.i)
        wiring.connect(m, wiring.flipped(self.route), csr.route)
        wiring.connect(m, wiring.flipped(self.eth), csr.eth)
        wiring.connect(m, wiring.flipped(self.meta), csr.meta)
        wiring.connect(m, csr.desc, dma.desc)
        m.d.comb += [
            csr.errors.eq(self.net_errors | dma.errors),
            csr.busy.eq(dma.busy), csr.desc_done.eq(dma.desc_done), csr.desc_done_tag.eq(dma.desc_done_tag),
            csr.rx_packet.eq(self.rx_packet),
            self.node_id.eq(csr.node_id), self.num_nodes.eq(csr.num_nodes),
            self.enable.eq(csr.enable), self.irq.eq(csr.irq),
        ]
        return m


@block("dma", "DMA engine: ping-pong loader + writer on one AXI4 master",
       variants=({"data_width": 64, "buffer_bytes": 1024},),
       data_width=128, addr_width=40, buffer_bytes=4096, buffers=2, ranges={"addr_width": ADDR_WIDTH})
def _engine(**params):
    return DmaEngine(**params)


@block("csr_dma", "Register block + DMA engine (what the PS driver programs)",
       **NodeConfig().fields_of("data_width", "ddr_addr_bits", "buffer_bytes", "buffers"))
def _csr_dma(**fields):
    return ControlAndDma(NodeConfig(**fields))
