"""DMA writer: an AXI-Stream of results / KV blocks -> DDR through AXI4 write bursts.

For each STORE descriptor the *issuer* sends INCR write bursts (<= 256 beats, never across
4 KiB, several in flight); the *data stage* follows the bursts in AW order and moves exactly
``ceil(length / bus_bytes)`` beats from ``i`` to W (WLAST per burst, WSTRB all ones except
the partial last beat of the descriptor; the input's TKEEP/TLAST are not used: the
descriptor's length decides); the *response stage* counts B responses and reports the
descriptor done (``done`` + ``done_tag``) after its last burst's response, with
``resp_error`` if any burst answered SLVERR/DECERR.

Like the loader it trusts the CSR's validation (``mcf.spec.ErrorCause``).
"""
from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.arith import log2_exact
from mcf.hw.axi.full import BURST_INCR, MAX_BURST_BEATS, AXI4Signature
from mcf.hw.axi.lite import Resp
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.dma.common import AXCACHE, all_ones, beats_and_keep, next_burst
from mcf.hw.layouts import DmaDescriptorLayout
from mcf.hw.registry import ADDR_WIDTH, OUTSTANDING, block
from mcf.spec.regmap import DMA_TAG_BITS



class DmaWriter(wiring.Component):
    """Ports: ``desc`` (STORE descriptors in), ``i`` (the data), ``m_axi`` (AXI4 write
    channels), ``done`` + ``done_tag``, ``resp_error``, ``busy``."""

    def __init__(self, data_width: int = 128, addr_width: int = 40, max_outstanding: int = 4,
                 id_width: int = 1):
        self.bus_log2 = log2_exact(data_width // 8, "data_width / 8")
        if max_outstanding < 1:
            raise ValueError(f"max_outstanding={max_outstanding}: must be >= 1")
        self.data_width, self.max_outstanding = data_width, max_outstanding
        super().__init__({
            "desc": In(stream.Signature(DmaDescriptorLayout)),
            "i": In(AXIStreamSignature(data_width)),
            "m_axi": Out(AXI4Signature(addr_width, data_width, id_width, read=False)),
            "done": Out(1),
            "done_tag": Out(DMA_TAG_BITS),
            "resp_error": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        axi, nbytes = self.m_axi, self.data_width // 8
        depth = self.max_outstanding

        # a burst's last beat index (and whether it has none) queued, not its beats: WLAST is
        # an equality with the beat counter, no subtraction before it (issue 14)
        burst_layout = data.StructLayout({"last_beat": range(MAX_BURST_BEATS), "empty": 1, "last": 1,
                                          "keep": nbytes})
        resp_layout = data.StructLayout({"last": 1, "tag": DMA_TAG_BITS})
        m.submodules.w_q = w_q = fifo.SyncFIFOBuffered(width=burst_layout.size, depth=depth)
        m.submodules.b_q = b_q = fifo.SyncFIFOBuffered(width=resp_layout.size, depth=depth)

        # --- issuer: descriptors -> AW bursts --------------------------------------------
        d = self.desc.payload
        d_beats, d_keep = beats_and_keep(m, d.length, self.bus_log2)
        addr = Signal(len(axi.awaddr))
        remaining = Signal(len(d_beats))
        keep = Signal(nbytes)
        tag = Signal(DMA_TAG_BITS)
        issuing = Signal()
        outstanding = Signal(range(depth + 1))
        load, aw_fire = Signal(), Signal()
        n, last_burst, n_ok = next_burst(m, addr, remaining, self.bus_log2, load | aw_fire)

        with m.If(~issuing):
            m.d.comb += self.desc.ready.eq(1)
            with m.If(self.desc.valid):
                m.d.comb += load.eq(1)
                m.d.sync += [addr.eq(d.addr), remaining.eq(d_beats), keep.eq(d_keep), tag.eq(d.tag),
                             issuing.eq(1)]

        b_fire = Signal()
        burst = Signal(burst_layout)
        resp = Signal(resp_layout)
        m.d.comb += [
            axi.awvalid.eq(issuing & n_ok & (outstanding < depth) & w_q.w_rdy & b_q.w_rdy),
            axi.awaddr.eq(addr), axi.awlen.eq(n - 1), axi.awsize.eq(self.bus_log2),
            axi.awburst.eq(BURST_INCR), axi.awcache.eq(AXCACHE), axi.awid.eq(0),
            aw_fire.eq(axi.awvalid & axi.awready),
            b_fire.eq(axi.bvalid & axi.bready),
            burst.last_beat.eq(n - 1), burst.empty.eq(n == 0), burst.last.eq(last_burst), burst.keep.eq(keep),
            resp.last.eq(last_burst), resp.tag.eq(tag),
            w_q.w_data.eq(burst), b_q.w_data.eq(resp),
            w_q.w_en.eq(aw_fire), b_q.w_en.eq(aw_fire),
        ]
        with m.If(aw_fire):
            m.d.sync += [addr.eq(addr + (n << self.bus_log2)), remaining.eq(remaining - n)]
            with m.If(last_burst):
                m.d.sync += issuing.eq(0)
        m.d.sync += outstanding.eq(outstanding + aw_fire - b_fire)

        # --- data stage: i -> W, following the bursts in order -----------------------------------
        cur = Signal(burst_layout)
        m.d.comb += cur.eq(w_q.r_data)
        beat = Signal(range(MAX_BURST_BEATS))
        w_last = (beat == cur.last_beat) & ~cur.empty
        m.d.comb += [
            axi.wvalid.eq(w_q.r_rdy & self.i.tvalid),
            self.i.tready.eq(w_q.r_rdy & axi.wready),
            axi.wdata.eq(self.i.tdata),
            axi.wlast.eq(w_last),
            axi.wstrb.eq(Mux(w_last & cur.last, cur.keep, all_ones(nbytes))),
        ]
        with m.If(axi.wvalid & axi.wready):
            m.d.sync += beat.eq(beat + 1)
            with m.If(w_last):
                m.d.comb += w_q.r_en.eq(1)
                m.d.sync += beat.eq(0)

        # --- response stage: B -> done ---------------------------------------------------------
        bad = Signal()
        head = Signal(resp_layout)
        m.d.comb += [head.eq(b_q.r_data), axi.bready.eq(b_q.r_rdy)]
        m.d.sync += [self.done.eq(0), self.resp_error.eq(0)]
        with m.If(b_fire):
            m.d.comb += b_q.r_en.eq(1)
            err = bad | (axi.bresp != Resp.OKAY)
            m.d.sync += bad.eq(err)
            with m.If(head.last):
                m.d.sync += [bad.eq(0), self.done.eq(1), self.done_tag.eq(head.tag), self.resp_error.eq(err)]

        m.d.comb += self.busy.eq(issuing | (outstanding != 0) | w_q.r_rdy)
        return m


@block("dma_writer", "DMA writer: AXI-Stream -> AXI4 write bursts with WSTRB",
       variants=({"data_width": 64},), data_width=128, addr_width=40, max_outstanding=4,
       ranges={"addr_width": ADDR_WIDTH, "max_outstanding": OUTSTANDING})
def _writer(**params):
    return DmaWriter(**params)
