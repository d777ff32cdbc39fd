"""One 10GBASE-R port of a node: between the NIC's network port (node clock, ``sync``) and a
GT's 64-bit raw user interface (``eth_tx`` / ``eth_rx``, 161.13 MHz; the receive clock is
the GT's recovered clock).

    tx ─► Framer ─► Downsizer ─► AsyncFrameFifo ═╪═► MacTx ─► PcsTx ─► gt_tx
         (sync: node clock, data_width)  (wait)  │   (eth_tx)
    rx ◄─ Deframer ◄─ Upsizer ◄─ AsyncFrameFifo ═╪═◄ MacRx ◄─ PcsRx ◄─ gt_rx
                                        (drop)   │   (eth_rx)

The register block's side arrives on ``ctl`` (``EthControlPort``): MAC table writes, link
status, sequence gaps.  ``errors`` carries one strobe per ``ErrorCause`` (node clock) for the
register block's counters.  The SFP+ status pins are asynchronous and synchronised here;
``sfp_tx_disable`` is driven low (transmitter on).
"""
from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.hdl import DomainRenamer
from amaranth.lib import wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

from mcf.hw.axis import AXIStreamSignature
from mcf.hw.csr.ports import EthControlPort
from mcf.hw.eth.cdc import AsyncFrameFifo, EventSync
from mcf.hw.eth.framer import Deframer, Framer
from mcf.hw.eth.mac import MacRx, MacTx
from mcf.hw.eth.pcs import PcsRx, PcsTx
from mcf.hw.eth.width import Downsizer, Upsizer
from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec import eth
from mcf.spec.regmap import ErrorCause, LinkStatus


def fifo_depth(max_frame: int) -> int:
    """Words a store-and-forward FIFO needs for two of the longest frames (power of two)."""
    words = -(-max_frame // 8)
    depth = 2
    while depth < 2 * words:
        depth *= 2
    return depth


class MacPcs(wiring.Component):
    """MAC + PCS of both directions: frames (64-bit AXI-Stream, no FCS) <-> GT words.  The
    transmit half runs in ``eth_tx``, the receive half in ``eth_rx``; ``rx`` words are valid
    once each (``rx_bad`` on a bad frame's last word).  Events: ``bad_fcs``, ``runt``,
    ``oversize``, ``lock_lost``, ``hi_ber_rising`` (``eth_rx``)."""

    def __init__(self, max_frame: int = eth.MAX_FRAME_BYTES, bit_reverse: bool = False,
                 ber_window: int = eth.BER_WINDOW_BLOCKS):
        self.max_frame, self.bit_reverse, self.ber_window = max_frame, bit_reverse, ber_window
        super().__init__({
            "tx": In(AXIStreamSignature(64)), "rx": Out(AXIStreamSignature(64)), "rx_bad": Out(1),
            "gt_tx": Out(eth.GT_DATA_BITS), "gt_rx": In(eth.GT_DATA_BITS),
            "lock": Out(1), "hi_ber": Out(1),
            "bad_fcs": Out(1), "runt": Out(1), "oversize": Out(1), "lock_lost": Out(1), "hi_ber_rising": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        tx_d, rx_d = DomainRenamer("eth_tx"), DomainRenamer("eth_rx")
        m.submodules.mac_tx = mac_tx = tx_d(MacTx())
        m.submodules.pcs_tx = pcs_tx = tx_d(PcsTx(self.bit_reverse))
        m.submodules.pcs_rx = pcs_rx = rx_d(PcsRx(self.bit_reverse, self.ber_window))
        m.submodules.mac_rx = mac_rx = rx_d(MacRx(self.max_frame))
        wiring.connect(m, wiring.flipped(self.tx), mac_tx.i)
        wiring.connect(m, mac_tx.o, pcs_tx.xgmii)
        wiring.connect(m, pcs_rx.xgmii, mac_rx.i)
        wiring.connect(m, mac_rx.o, wiring.flipped(self.rx))
        m.d.comb += [
            mac_tx.en.eq(pcs_tx.en), self.gt_tx.eq(pcs_tx.gt_data),
            pcs_rx.gt_data.eq(self.gt_rx), mac_rx.en.eq(pcs_rx.en), self.rx_bad.eq(mac_rx.tuser),
            self.lock.eq(pcs_rx.lock), self.hi_ber.eq(pcs_rx.hi_ber),
            self.bad_fcs.eq(mac_rx.bad_fcs), self.runt.eq(mac_rx.runt), self.oversize.eq(mac_rx.oversize),
            self.lock_lost.eq(pcs_rx.lock_lost), self.hi_ber_rising.eq(pcs_rx.hi_ber_rising),
        ]
        return m


class EthPort(wiring.Component):
    """Parameters: ``data_width`` (the node's stream width, 64 or 128), ``max_frame`` (bytes,
    FCS included: longer frames are dropped at RX; at TX a packet longer than ``max_packet``
    bytes is dropped and counted as ETH_TX_OVERSIZE), ``bit_reverse``
    (GT bit order), ``ber_window`` (BER monitor window in blocks; 125 us by default)."""

    def __init__(self, data_width: int = 128, max_frame: int = eth.MAX_FRAME_BYTES,
                 bit_reverse: bool = False, ber_window: int = eth.BER_WINDOW_BLOCKS):
        if not eth.MIN_FRAME_BYTES <= max_frame <= eth.MAX_FRAME_BYTES:
            raise ValueError(f"max_frame={max_frame}: {eth.MIN_FRAME_BYTES}..{eth.MAX_FRAME_BYTES} bytes")
        self.data_width, self.max_frame = data_width, max_frame
        self.bit_reverse, self.ber_window = bit_reverse, ber_window
        self.depth = fifo_depth(max_frame)
        #: The longest MCF packet (Meta + payload) one frame carries.
        self.max_packet = max_frame - eth.FCS_BYTES - eth.LINK_HEADER_BYTES
        axis = AXIStreamSignature(data_width)
        super().__init__({
            "tx": In(axis), "rx": Out(axis),
            "ctl": In(EthControlPort()), "errors": Out(len(ErrorCause)),
            "gt_tx": Out(eth.GT_DATA_BITS), "gt_rx": In(eth.GT_DATA_BITS),
            "sfp_mod_abs": In(1), "sfp_rx_los": In(1), "sfp_tx_fault": In(1), "sfp_tx_disable": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        w = self.data_width
        max_bytes = self.max_frame - eth.FCS_BYTES     # a frame as the FIFOs hold it

        # --- transmit -------------------------------------------------------------------------
        m.submodules.framer = framer = Framer(w)
        m.submodules.tx_fifo = tx_fifo = AsyncFrameFifo(self.depth, max_bytes, "wait", "sync", "eth_tx")
        m.submodules.mac_pcs = mp = MacPcs(self.max_frame, self.bit_reverse, self.ber_window)
        wiring.connect(m, wiring.flipped(self.tx), framer.i)
        if w == 64:
            wiring.connect(m, framer.o, tx_fifo.w)
        else:
            m.submodules.down = down = Downsizer(w, 64)
            wiring.connect(m, framer.o, down.i)
            wiring.connect(m, down.o, tx_fifo.w)
        wiring.connect(m, tx_fifo.r, mp.tx)
        m.d.comb += [
            framer.node_id.eq(self.ctl.node_id), framer.mac_w_en.eq(self.ctl.mac_w_en),
            framer.mac_index.eq(self.ctl.mac_index), framer.mac_data.eq(self.ctl.mac_data),
            self.gt_tx.eq(mp.gt_tx), self.sfp_tx_disable.eq(0),
        ]

        # --- receive --------------------------------------------------------------------------
        m.submodules.rx_fifo = rx_fifo = AsyncFrameFifo(self.depth, max_bytes, "drop", "eth_rx", "sync")
        m.submodules.deframer = deframer = Deframer(w)
        m.d.comb += mp.gt_rx.eq(self.gt_rx)
        m.d.comb += [rx_fifo.w.tdata.eq(mp.rx.tdata), rx_fifo.w.tkeep.eq(mp.rx.tkeep),
                     rx_fifo.w.tlast.eq(mp.rx.tlast), rx_fifo.w.tvalid.eq(mp.rx.tvalid),
                     rx_fifo.w_bad.eq(mp.rx_bad)]
        if w == 64:
            wiring.connect(m, rx_fifo.r, deframer.i)
        else:
            m.submodules.up = up = Upsizer(64, w)
            wiring.connect(m, rx_fifo.r, up.i)
            wiring.connect(m, up.o, deframer.i)
        wiring.connect(m, deframer.o, wiring.flipped(self.rx))

        # --- status and events into the node clock ------------------------------------------------
        rx_events = [ErrorCause.ETH_BAD_FCS, ErrorCause.ETH_RUNT, ErrorCause.ETH_OVERSIZE,
                     ErrorCause.ETH_RX_OVERFLOW, ErrorCause.ETH_BLOCK_LOCK_LOSS, ErrorCause.ETH_HI_BER]
        m.submodules.rx_events = ev = EventSync(len(rx_events), "eth_rx", "sync")
        m.d.comb += ev.i.eq(Cat(mp.bad_fcs, mp.runt, mp.oversize, rx_fifo.overflow, mp.lock_lost,
                                mp.hi_ber_rising))
        errors = {c: Signal(name=f"ev_{c.name.lower()}") for c in ErrorCause}
        for k, c in enumerate(rx_events):
            m.d.comb += errors[c].eq(ev.o[k])
        m.d.comb += [errors[ErrorCause.ETH_TX_OVERSIZE].eq(tx_fifo.too_long),
                     errors[ErrorCause.ETH_NOT_MCF].eq(deframer.not_mcf),
                     errors[ErrorCause.ETH_SEQ_GAP].eq(deframer.seq_gap),
                     self.errors.eq(Cat(*errors.values()))]
        lock, hi_ber, mod_abs, los, fault = (Signal(name=n) for n in ("lock", "hi_ber", "mod_abs", "rx_los", "tx_fault"))
        for src, dst in ((mp.lock, lock), (mp.hi_ber, hi_ber), (self.sfp_mod_abs, mod_abs),
                         (self.sfp_rx_los, los), (self.sfp_tx_fault, fault)):
            m.submodules[f"sync_{dst.name}"] = FFSynchronizer(src, dst)
        link_up = lock & ~hi_ber & ~los & ~mod_abs
        status = {LinkStatus.MODULE_ABSENT: mod_abs, LinkStatus.RX_LOS: los, LinkStatus.TX_FAULT: fault,
                  LinkStatus.BLOCK_LOCK: lock, LinkStatus.HI_BER: hi_ber, LinkStatus.LINK_UP: link_up}
        m.d.comb += [self.ctl.status.eq(Cat(*(status[s] for s in LinkStatus))),
                     self.ctl.seq_missing.eq(deframer.seq_missing),
                     deframer.resync.eq(self.ctl.resync)]
        return m


@block("eth_port", "10GBASE-R port: framer, CDC FIFOs, MAC, PCS, gearboxes (node side 128 bits)",
       data_width=128, max_frame=eth.MAX_FRAME_BYTES,
       ranges={"max_frame": Range(eth.MIN_FRAME_BYTES, eth.MAX_FRAME_BYTES)})
def _port(data_width, max_frame):
    return EthPort(data_width, max_frame)


@block("eth_mac_pcs", "10G MAC + 10GBASE-R PCS, both directions (frames <-> GT words)",
       max_frame=eth.MAX_FRAME_BYTES, ranges={"max_frame": Range(eth.MIN_FRAME_BYTES, eth.MAX_FRAME_BYTES)})
def _mac_pcs(max_frame):
    return MacPcs(max_frame)
