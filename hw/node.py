"""One MCF node (MCF section 5, Fig. 2; docs/node.md): registers + sequencer + execute unit +
DMA + packetizer + NIC behind one AXI interconnect with the DDR firewall.

    PS ─AXI-Lite─► ControlRegisters ─seq_regs─► SeqRegisters ◄──► Sequencer ─fetch──┐
                     │ route, meta, desc                           │ ex  tx  rx     │
                     │                              ExecUnit ◄─────┘  │   │        │
                     │            ┌──── TxEngine ◄────────────────────┘   │        │
                     │            │  LOAD   Meta       RxEngine ◄─────────┘        │
                     │            ▼   │       │        │ STORE  credits            │
                     │       DmaLoader│  Packetizer ◄──┘   │       │              │
                     │            │   └──────►│            ▼       ▼              │
                     │            └─payload──►┘        DmaWriter  HeaderSerializer │
                     │                        │            ▲       │              │
                     │                        └─► PacketMux ◄──────┘              │
                     └──────────────────────► Nic ──► tx[0..P-1]   (local_out ──► RxEngine)
    DDR ◄═ m_axi (HP ports) ═ AxiInterconnect (firewall) ◄═ fetch, loader, writer, execute unit

While a program runs (SEQ_CONTROL.start) the sequencer's engines drive the DMA loader, the DMA
writer and the packetizer.  While none runs, the PS's metadata and descriptor queues do (the
debug path of earlier nodes): LOAD descriptors stream DDR blocks into the packetizer behind
the next Meta, and delivered data packets take STORE descriptors (see ``mcf.spec.regmap``).

The execute unit is a constructor argument (``exec_unit``: a factory taking the NodeConfig);
its AXI4 master ports join the interconnect as clients (port ``m_axi`` on HP port 0 with the
node's own clients, further ones spread over the other HP ports).  This is the top that
``mcf board build`` wraps for Vivado; HP port 0 is ``m_axi``, HP port p > 0 ``m_axi<p>``.
"""
from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axi.full import AXI4Signature
from mcf.hw.axi.lite import AXI4LiteSignature
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.compute.exec.unit import PERF_BITS, ExecUnit
from mcf.hw.csr import ControlRegisters, EthControlPort
from mcf.hw.dma.loader import DmaLoader
from mcf.hw.dma.writer import DmaWriter
from mcf.hw.layouts import DmaDescriptorLayout
from mcf.hw.nic.common import raw
from mcf.hw.nic.nic import Nic
from mcf.hw.packet.header import HeaderSerializer
from mcf.hw.packet.packetizer import Packetizer
from mcf.hw.registry import block
from mcf.hw.seq.interconnect import AxiInterconnect, Client
from mcf.hw.seq.perf import PerfCounters
from mcf.hw.seq.regs import SeqRegisters
from mcf.hw.seq.rx import RxEngine
from mcf.hw.seq.sequencer import Sequencer
from mcf.hw.seq.tx import PacketMux, TxEngine
from mcf.spec import DmaDir, ErrorCause, Irq
from mcf.spec.isa import PerfCounter, Queue, SeqFault
from mcf.spec.node import RANGES as NODE_RANGES
from mcf.spec.node import NodeConfig
from mcf.spec.params import Choice
from mcf.spec.regmap import ADDR_BITS, DATA_BITS, DMA_TAG_BITS

#: The node's own DDR clients, on HP port 0 (the execute unit's follow).
FETCH, LOADER, WRITER = 0, 1, 2


def axi_members(component) -> list[str]:
    """Names of a component's AXI4 master ports (its DDR clients)."""
    return [name for name, member in component.signature.members.items()
            if member.is_signature and isinstance(member.signature, AXI4Signature) and member.flow == Out]


class Node(wiring.Component):
    """One node, built from a ``mcf.spec.node.NodeConfig``.

    ``eth=True`` adds the ports a 10GBASE-R port (``mcf.hw.eth``) needs from the register
    block: ``eth`` (MAC table writes, link status, sequence gaps) and ``eth_errors`` (its
    error events); ``mcf.hw.eth.eth_node.EthNode`` wires them.  ``exec_unit``: a factory of
    the execute unit from the NodeConfig (default ``ExecUnit``)."""

    def __init__(self, config: NodeConfig = NodeConfig(), exec_unit=None, *, eth: bool = False):
        self.config, self.has_eth = config, eth
        self.data_width, self.net_ports = config.data_width, config.net_ports
        self.csr = ControlRegisters(config.meta_queue_depth, config.desc_queue_depth, config.data_bytes,
                                    config.net_ports, dma_bus_bytes=config.data_bytes,
                                    dma_buffers=config.buffers, dma_buffer_bytes=config.buffer_bytes, seq=True)
        self.exec = (exec_unit or ExecUnit)(config)
        self.seq = Sequencer(config)
        self.loader = DmaLoader(config.data_width, config.ddr_addr_bits, config.buffer_bytes, config.buffers)
        self.writer = DmaWriter(config.data_width, config.ddr_addr_bits)
        self.packetizer = Packetizer(config.data_width, config.payload_depth, config.meta_queue_depth)
        self.nic = Nic(config.data_width, config.net_ports, **config.nic_params())
        self.exec_ports = axi_members(self.exec)
        clients = [Client("fetch", write=False), Client("loader", write=False), Client("writer", read=False)]
        for k, name in enumerate(self.exec_ports):
            sig = getattr(self.exec.signature.members[name], "signature")
            clients.append(Client(f"ex_{name}", read=sig.read, write=sig.write, id_width=sig.id_width,
                                  port=(k + 1) % config.hp_ports, addr_width=sig.addr_width))
        self.ic = AxiInterconnect(clients, config.hp_ports, config.ddr_addr_bits, config.data_width)
        axis = AXIStreamSignature(config.data_width)
        members = {
            "s_axil": In(AXI4LiteSignature(ADDR_BITS, DATA_BITS)),
            "rx": In(axis).array(config.net_ports),
            "tx": Out(axis).array(config.net_ports),
            "irq": Out(1),
            **({"eth": Out(EthControlPort()), "eth_errors": In(len(ErrorCause))} if eth else {}),
        }
        hp_sig = AXI4Signature(config.ddr_addr_bits, config.data_width, max(self.ic.port_id_width))
        for p in range(config.hp_ports):
            members["m_axi" if p == 0 else f"m_axi{p}"] = Out(hp_sig)
        super().__init__(members)

    def hp(self, p: int):
        return self.m_axi if p == 0 else getattr(self, f"m_axi{p}")

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.csr = csr = self.csr
        m.submodules.seqregs = sr = SeqRegisters(cfg)
        m.submodules.seq = seq = self.seq
        m.submodules.exec = ex = self.exec
        m.submodules.loader = ld = self.loader
        m.submodules.writer = wr = self.writer
        m.submodules.tx_engine = txe = TxEngine(cfg)
        m.submodules.rx_engine = rxe = RxEngine(cfg)
        m.submodules.packetizer = pk = self.packetizer
        m.submodules.credit_header = cser = HeaderSerializer(cfg.data_width)
        m.submodules.local_mux = lmux = PacketMux(cfg.data_width)
        m.submodules.nic = nic = self.nic
        m.submodules.ic = ic = self.ic
        m.submodules.perf = perf = PerfCounters()

        # --- registers ------------------------------------------------------------------------------
        wiring.connect(m, wiring.flipped(self.s_axil), csr.s_axil)
        wiring.connect(m, csr.seq_regs, sr.bus)
        wiring.connect(m, csr.route, nic.route)
        if self.has_eth:
            wiring.connect(m, wiring.flipped(self.eth), csr.eth)
        m.d.comb += [
            nic.node_id.eq(csr.node_id), nic.num_nodes.eq(csr.num_nodes), nic.enable.eq(csr.enable),
            self.irq.eq(csr.irq),
            ic.window_base.eq(csr.window_base), ic.window_size.eq(csr.window_size),
        ]

        # --- sequencer <-> engines ------------------------------------------------------------------
        running = seq.running
        wiring.connect(m, seq.ex, ex.instr)
        m.d.comb += [seq.ex_done.eq(ex.done), seq.ex_fault.eq(ex.fault), seq.ex_fault_cause.eq(ex.fault_cause)]
        wiring.connect(m, seq.tx, txe.instr)
        m.d.comb += seq.tx_done.eq(txe.done)
        wiring.connect(m, seq.rx, rxe.instr)
        wiring.connect(m, rxe.done_inc, seq.rx_done_inc)
        wiring.connect(m, rxe.credit_inc, seq.rx_credit_inc)
        m.d.comb += [ex.dir_wr.en.eq(rxe.dir_wr.en), ex.dir_wr.block.eq(rxe.dir_wr.block),
                     ex.dir_wr.state.eq(rxe.dir_wr.state),
                     ex.dir_rd.en.eq(sr.dir_rd.en), ex.dir_rd.block.eq(sr.dir_rd.block),
                     sr.dir_rd.state.eq(ex.dir_rd.state)]
        m.d.comb += [
            txe.node_id.eq(csr.node_id), txe.running.eq(running),
            rxe.node_id.eq(csr.node_id), rxe.running.eq(running), rxe.rx_wait.eq(sr.rx_wait),
            rxe.clear.eq(seq.clear),
            seq.rx_slot_wait.eq(rxe.slot_wait), seq.rx_posted.eq(rxe.posted),
            seq.start.eq(sr.start), seq.abort.eq(sr.abort), seq.prog_base.eq(sr.prog_base),
            seq.prog_count.eq(sr.prog_count), seq.fault_mask.eq(sr.fault_mask), seq.watchdog.eq(sr.watchdog),
            seq.sem_index.eq(sr.sem_index),
            sr.running.eq(running), sr.done.eq(seq.done), sr.fault.eq(seq.fault),
            sr.start_pending.eq(seq.start_pending), sr.fault_cause.eq(seq.fault_cause), sr.pc.eq(seq.pc),
            sr.fault_pc.eq(seq.fault_pc), sr.wait.eq(seq.wait), sr.levels.eq(seq.levels),
            sr.sem_value.eq(seq.sem_value), sr.perf_value.eq(perf.value),
            perf.index.eq(sr.perf_index), perf.clear.eq(seq.clear), perf.enable.eq(running),
        ]

        # --- the PS's queues (debug path) and the engines onto the DMA engines and the packetizer --
        tx_owns = Signal()
        m.d.comb += tx_owns.eq(running | txe.busy)
        m.submodules.ps_stores = ps_stores = fifo.SyncFIFOBuffered(width=DmaDescriptorLayout.size,
                                                                   depth=cfg.desc_queue_depth)
        ps_is_load = raw(csr.desc.payload.dir) == int(DmaDir.LOAD)
        m.d.comb += [
            ps_stores.w_data.eq(csr.desc.payload.as_value()),
            ps_stores.w_en.eq(csr.desc.valid & ~ps_is_load),
            rxe.ps_store.valid.eq(ps_stores.r_rdy), rxe.ps_store.payload.eq(ps_stores.r_data),
            ps_stores.r_en.eq(rxe.ps_store.ready),
        ]
        with m.If(tx_owns):
            wiring.connect(m, txe.load, ld.desc)
            wiring.connect(m, txe.meta, pk.meta)
            m.d.comb += csr.desc.ready.eq(csr.desc.valid & ~ps_is_load & ps_stores.w_rdy)
        with m.Else():
            m.d.comb += [ld.desc.valid.eq(csr.desc.valid & ps_is_load), ld.desc.payload.eq(csr.desc.payload),
                         csr.desc.ready.eq(Mux(ps_is_load, ld.desc.ready, ps_stores.w_rdy)),
                         pk.meta.valid.eq(csr.meta.valid), pk.meta.payload.eq(csr.meta.payload),
                         csr.meta.ready.eq(pk.meta.ready)]
        m.d.comb += txe.load_done.eq(ld.done & tx_owns)
        wiring.connect(m, ld.o, txe.payload_in)
        wiring.connect(m, txe.payload_out, pk.payload)
        wiring.connect(m, rxe.store, wr.desc)
        wiring.connect(m, rxe.o, wr.i)
        m.d.comb += rxe.store_done.eq(wr.done)
        # DESC_DONE: the PS's LOADs (loader) and STOREs (through the RX engine), one per cycle.
        done_ev = data.StructLayout({"tag": DMA_TAG_BITS})
        m.submodules.ps_done = ps_done = fifo.SyncFIFOBuffered(width=done_ev.size, depth=4)
        m.d.comb += [ps_done.w_data.eq(rxe.ps_done_tag), ps_done.w_en.eq(rxe.ps_done)]
        with m.If(ld.done & ~tx_owns):
            m.d.comb += [csr.desc_done.eq(1), csr.desc_done_tag.eq(ld.done_tag)]
        with m.Elif(ps_done.r_rdy):
            m.d.comb += [csr.desc_done.eq(1), csr.desc_done_tag.eq(ps_done.r_data), ps_done.r_en.eq(1)]

        # --- to and from the NIC --------------------------------------------------------------------
        wiring.connect(m, rxe.credit, cser.meta)
        m.d.comb += cser.payload.tvalid.eq(0)
        wiring.connect(m, cser.o, lmux.a)
        wiring.connect(m, pk.o, lmux.b)
        wiring.connect(m, lmux.o, nic.local_in)
        wiring.connect(m, nic.local_out, rxe.i)
        for p in range(self.net_ports):
            wiring.connect(m, wiring.flipped(self.rx[p]), nic.rx[p])
            wiring.connect(m, nic.tx[p], wiring.flipped(self.tx[p]))

        # --- DDR: clients -> interconnect -> HP ports -------------------------------------------------
        wiring.connect(m, seq.m_axi, ic.c_fetch)
        wiring.connect(m, ld.m_axi, ic.c_loader)
        wiring.connect(m, wr.m_axi, ic.c_writer)
        for name in self.exec_ports:
            wiring.connect(m, getattr(ex, name), getattr(ic, f"c_ex_{name}"))
        for p in range(cfg.hp_ports):
            wiring.connect(m, ic.m_axi[p], wiring.flipped(self.hp(p)))
        ddr_pc = Signal.like(seq.fault_pc)
        ic_client = Mux(ic.oow, ic.oow_client, ic.resp_err_client)
        with m.Switch(ic_client):
            with m.Case(FETCH):
                m.d.comb += ddr_pc.eq(seq.fetch_pc)
            with m.Case(LOADER):
                m.d.comb += ddr_pc.eq(seq.tx_pc)
            with m.Case(WRITER):
                m.d.comb += ddr_pc.eq(rxe.cur_pc)
            with m.Default():
                m.d.comb += ddr_pc.eq(seq.ex_pc)
        m.d.comb += [
            seq.ddr_fault.eq(ic.oow | ic.resp_err),
            seq.ddr_fault_cause.eq(Mux(ic.oow, SeqFault.OUT_OF_WINDOW, SeqFault.AXI_ERROR)),
            seq.ddr_fault_pc.eq(ddr_pc),
        ]

        # --- errors, idle, activity, interrupts -----------------------------------------------------
        errors = Signal(len(ErrorCause))
        m.d.comb += errors.eq(nic.errors | rxe.errors | (ic.resp_err << ErrorCause.AXI_RESP_ERROR)
                              | (self.eth_errors if self.has_eth else 0))
        m.d.comb += [csr.errors.eq(errors), seq.net_errors.eq(errors)]
        pk_empty = (pk.meta_level == 0) & (pk.payload_level == 0)
        engines_idle = ~txe.busy & ~rxe.busy & (rxe.posted == 0) & pk_empty & ~cser.o.tvalid
        datapath_idle = (engines_idle & ~ld.busy & ~wr.busy & ic.idle & ~csr.meta.valid & ~csr.desc.valid
                         & ~ps_stores.r_rdy & ~ps_done.r_rdy & ~seq.fetch_busy)
        m.d.comb += [
            seq.engines_idle.eq(engines_idle), seq.datapath_idle.eq(datapath_idle), sr.idle.eq(datapath_idle),
            seq.activity.eq(ic.activity | (nic.local_in.tvalid & nic.local_in.tready)
                            | (nic.local_out.tvalid & nic.local_out.tready)),
            csr.busy.eq(ld.busy | wr.busy | txe.busy | rxe.busy),
            csr.rx_packet.eq(rxe.rx_packet),
            csr.irq_events.eq((seq.irq_done << Irq.SEQ_DONE) | (seq.irq_fault << Irq.SEQ_FAULT)),
        ]

        # --- performance counters ---------------------------------------------------------------------
        inc = {c: 0 for c in PerfCounter}
        inc[PerfCounter.CYCLES] = 1
        for q, c in ((Queue.EX, PerfCounter.RETIRED_EX), (Queue.TX, PerfCounter.RETIRED_TX),
                     (Queue.RX, PerfCounter.RETIRED_RX)):
            inc[c] = seq.retired[q]
        for q, c in ((Queue.EX, PerfCounter.STALL_EX_SEM), (Queue.TX, PerfCounter.STALL_TX_SEM),
                     (Queue.RX, PerfCounter.STALL_RX_SEM)):
            inc[c] = seq.stall_sem[q]
        inc[PerfCounter.STALL_FETCH] = seq.stall_fetch
        inc[PerfCounter.STALL_TX_NET] = txe.stall
        inc[PerfCounter.STALL_RX_SLOT] = rxe.slot_wait
        inc[PerfCounter.NET_TX_BYTES] = txe.bytes
        inc[PerfCounter.NET_RX_BYTES] = rxe.bytes
        rd = [ic.rd_bytes[p] for p in range(cfg.hp_ports)]
        wrb = [ic.wr_bytes[p] for p in range(cfg.hp_ports)]
        inc[PerfCounter.DDR_RD_BYTES] = sum(rd[1:], rd[0])
        inc[PerfCounter.DDR_WR_BYTES] = sum(wrb[1:], wrb[0])
        for p in range(cfg.hp_ports):
            inc[PerfCounter[f"HP{p}_RD_BYTES"]] = rd[p]
            inc[PerfCounter[f"HP{p}_WR_BYTES"]] = wrb[p]
        for name in PERF_BITS:         # the execute unit's strobes (its DDR bytes are counted above)
            inc[PerfCounter[name.upper()]] = getattr(ex.perf, name)
        for c in PerfCounter:
            m.d.comb += perf.inc[c].eq(inc[c])
        return m


class NodePair(wiring.Component):
    """Two nodes of ``config`` with one network port each, wired to each other (the smallest
    cluster)."""

    def __init__(self, config: NodeConfig = NodeConfig.tiny(), exec_unit=None):
        self.config = config.replace(net_ports=1)
        self.nodes = [Node(self.config, exec_unit) for _ in range(2)]
        hp = self.nodes[0].m_axi.signature
        super().__init__({
            "axil": In(AXI4LiteSignature(ADDR_BITS, DATA_BITS)).array(2),
            "m_axi": Out(hp).array(2),
            "irq": Out(1).array(2),
        })

    def elaborate(self, platform):
        m = Module()
        for i, node in enumerate(self.nodes):
            m.submodules[f"node{i}"] = node
            wiring.connect(m, wiring.flipped(self.axil[i]), node.s_axil)
            wiring.connect(m, wiring.flipped(self.m_axi[i]), node.m_axi)
            m.d.comb += self.irq[i].eq(node.irq)
        wiring.connect(m, self.nodes[0].tx[0], self.nodes[1].rx[0])
        wiring.connect(m, self.nodes[1].tx[0], self.nodes[0].rx[0])
        return m


#: The node configurations the registry builds by model name.
PRESETS = {"tiny": NodeConfig.tiny, "qwen2.5-1.5b": NodeConfig.qwen2_5_1_5b}


@block("node", "one node: registers, sequencer, execute unit, DMA, packetizer, NIC, DDR firewall (Vivado top)",
       variants=({"model": "tiny"}, {"model": "tiny", "net_ports": 2, "hp_ports": 2}),
       model="qwen2.5-1.5b", net_ports=1, hp_ports=1,
       ranges={"model": Choice(tuple(PRESETS)), "net_ports": NODE_RANGES["net_ports"],
               "hp_ports": NODE_RANGES["hp_ports"]})
def _node(model, net_ports, hp_ports):
    if model not in PRESETS:
        raise ValueError(f"model={model!r}: one of {', '.join(PRESETS)}")
    return Node(PRESETS[model](net_ports=net_ports, hp_ports=hp_ports))
