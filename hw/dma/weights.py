"""The execute unit's W weight loaders with ONE block-RAM buffer memory (round 30, issue 14).

W *fronts*, each an issuer and a receiver on its own AXI master (one per HP port, as W ``DmaLoader``
were): LOAD descriptors are dealt to fronts 0, 1, .. W - 1 in turn, each front alternating its own
``buffers`` ping-pong buffers (the descriptor's ``buffer`` field is ignored).  A front gathers
``out_beats`` = B R beats into a word register (a clock enable a beat, no logic a bit), then hands the
word (or a descriptor's partial last word) to its pending register; a fixed slot a front (a counter in
the AXI domain) writes one pending word a cycle into the shared memory, ``W x buffers x words`` words of
B beats, at (front, buffer, word).  A front's next word takes >= B beats, so a pending word waits < W
cycles; a word completed while the pending register is still full (short descriptors) holds RREADY.
A job is handed to the drainer when its last word is written.

ONE drainer (domain ``sync``) takes the filled jobs in the dealing turn and streams them on ``o``
(TKEEP / TLAST as ``DmaLoader``'s wide output), the next job taken in the cycle of the last word's read
(no bubble between packets).  ``done`` / ``resp_error`` strobe when a job is taken.

Why: the W loaders' packets were drained in turn anyway (one loader's ``o`` at a time, a W:1 choice of
B beats before the mover), so one read port serves all; at the Qwen node 3 of the 4 loaders' buffers were
LUT RAM (1 216 LUT each) and the 4:1 choice of 1 024 bits another ~1.5 K.

``axi_domain`` = D (not ``"sync"``): the fronts in D, the memory written in D and read in ``sync``, the
crossings ``AsyncQueue`` as ``DmaLoader``'s.  ``primitive``: the write side's 4:1 choice as LUT6
instances (``mcf.hw.lut.mux4``; W = 4 only).
"""
from __future__ import annotations

from amaranth import Array, Cat, DomainRenamer, Module, Mux, Signal
from amaranth.lib import cdc, data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf.hw.arith import log2_exact
from mcf.hw.axi.full import AXI4Signature
from mcf.hw.axi.lite import Resp
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.dma.common import AsyncQueue, all_ones
from mcf.hw.dma.loader import issuer
from mcf.hw.layouts import DmaDescriptorLayout
from mcf.hw.lut import mux4
from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec.regmap import DMA_TAG_BITS


class WeightLoaders(wiring.Component):
    """Ports: ``desc`` (LOAD descriptors in, dealt in turn), ``m_axi<k>`` (front k's AXI4 read
    channels), ``o`` (one packet per descriptor, in descriptor order, ``out_beats`` beats a word),
    ``done`` + ``done_tag``, ``resp_error``, ``busy``."""

    def __init__(self, ports: int = 4, data_width: int = 128, addr_width: int = 40, buffer_bytes: int = 4096,
                 buffers: int = 2, out_beats: int = 8, max_outstanding: int = 4, axi_domain: str = "sync",
                 ram_style: str = "", primitive: bool = False):
        log2_exact(ports, "ports")
        if ports < 2:
            raise ValueError(f"ports={ports}: must be >= 2 (one port: DmaLoader)")
        self.bus_log2 = log2_exact(data_width // 8, "data_width / 8")
        self.banks_log2 = log2_exact(out_beats, "out_beats")
        log2_exact(buffer_bytes, "buffer_bytes")
        log2_exact(buffers, "buffers")
        if buffer_bytes < out_beats * data_width // 8:
            raise ValueError(f"buffer_bytes={buffer_bytes} is smaller than one {out_beats}-beat output word")
        if not 2 <= buffers <= 16:
            raise ValueError(f"buffers={buffers}: must be 2..16")
        if max_outstanding < 1:
            raise ValueError(f"max_outstanding={max_outstanding}: must be >= 1")
        self.ports, self.data_width, self.buffer_bytes, self.buffers = ports, data_width, buffer_bytes, buffers
        self.out_beats, self.max_outstanding = out_beats, max_outstanding
        self.axi_domain, self.ram_style, self.primitive = axi_domain, ram_style, primitive and ports == 4
        self.buffer_beats = buffer_bytes >> self.bus_log2
        super().__init__({
            "desc": In(stream.Signature(DmaDescriptorLayout)),
            **{f"m_axi{k}": Out(AXI4Signature(addr_width, data_width, 1, write=False)) for k in range(ports)},
            "o": Out(AXIStreamSignature(data_width * out_beats)),
            "done": Out(1),
            "done_tag": Out(DMA_TAG_BITS),
            "resp_error": Out(1),
            "busy": Out(1),
        })

    def _choice(self, m, sel, items, name):
        """``items[sel]`` (W items): a 4:1 LUT6 a bit where ``primitive``."""
        return mux4(m, sel, items, True, name) if self.primitive else Array(items)[sel]

    def elaborate(self, platform):
        m = Module()
        W, nbuf, nbytes = self.ports, self.buffers, self.data_width // 8
        B, bl = self.out_beats, self.banks_log2
        buf_beats = self.buffer_beats
        word_depth = buf_beats >> bl
        wl = (word_depth - 1).bit_length()         # word-address bits in a buffer (0: one word)
        A = self.axi_domain
        cross = A != "sync"
        job_layout = data.StructLayout({
            "buffer": range(nbuf), "beats": range(buf_beats + 1), "keep": nbytes, "tag": DMA_TAG_BITS})
        fill_layout = data.StructLayout({"job": job_layout, "err": 1})
        addr_bits = wl + (nbuf - 1).bit_length()   # (word, buffer) of a front

        # the shared memory: word (front, buffer, word) of B beats
        attrs = {"ram_style": self.ram_style} if self.ram_style else {}
        m.submodules.buffer = mem = Memory(shape=self.data_width * B, depth=W * nbuf * word_depth, init=[],
                                           attrs=attrs)
        wp = mem.write_port(domain=A)
        rp = mem.read_port(transparent_for=())

        # --- dealing: descriptor i to front i mod W, its buffers in turn (sync) -------------------------
        d_sel = Signal(range(W))
        bufs = [Signal(range(nbuf), name=f"wbuf{k}") for k in range(W)]
        slot = Signal(range(W))                     # (A) the front whose pending word may be written now
        m.d[A] += slot.eq(slot + 1)
        release = Signal(W)                         # (sync) the drained job's front ...
        release_buf = Signal(range(nbuf))           # ... and buffer
        p_valid = Signal(W)
        p_datas, p_addrs, filleds, a_busys, q_busys = [], [], [], [], []
        for k in range(W):
            axi = getattr(self, f"m_axi{k}")
            pay = Signal(DmaDescriptorLayout, name=f"wdesc{k}")
            m.d.comb += [pay.eq(self.desc.payload), pay.buffer.eq(bufs[k])]
            take_ok = Signal(name=f"take_ok{k}")    # front k would take a descriptor now
            jobs = DomainRenamer({"sync": A})(fifo.SyncFIFO(width=job_layout.size, depth=nbuf))
            m.submodules[f"jobs{k}"] = jobs
            if cross:
                depth = max(4, 2 * nbuf)
                filled = AsyncQueue(width=fill_layout.size, depth=depth, w_domain=A, r_domain="sync")
                freed = AsyncQueue(width=max(1, (nbuf - 1).bit_length()), depth=depth, w_domain="sync", r_domain=A)
                descq = AsyncQueue(width=DmaDescriptorLayout.size, depth=4, w_domain="sync", r_domain=A)
                m.submodules[f"filled{k}"], m.submodules[f"freed{k}"], m.submodules[f"descq{k}"] = filled, freed, descq
                m.d.comb += [descq.w_data.eq(pay), descq.w_en.eq(self.desc.valid & (d_sel == k)),
                             take_ok.eq(descq.w_rdy)]
                d_valid, d, d_take = descq.r_rdy, data.View(DmaDescriptorLayout, descq.r_data), descq.r_en
                q_busys.append(descq.w_level.any())
            else:
                filled = fifo.SyncFIFO(width=fill_layout.size, depth=nbuf)
                m.submodules[f"filled{k}"] = filled
                d_valid, d, d_take = Signal(name=f"d_valid{k}"), pay, take_ok
                m.d.comb += d_valid.eq(self.desc.valid & (d_sel == k))
            filleds.append(filled)
            with m.If(d_sel == k):
                m.d.comb += self.desc.ready.eq(take_ok)
                with m.If(self.desc.valid & take_ok):
                    m.d.sync += [d_sel.eq((k + 1) % W), bufs[k].eq(Mux(bufs[k] == nbuf - 1, 0, bufs[k] + 1))]

            claimed = Signal(nbuf, name=f"claimed{k}")      # (A) buffer owned from issue until drained
            claim = Signal(nbuf, name=f"claim{k}")
            release_a = Signal(nbuf, name=f"release_a{k}")
            if cross:
                m.d.comb += [freed.w_en.eq(release[k]), freed.w_data.eq(release_buf), freed.r_en.eq(1)]
                with m.If(freed.r_rdy):
                    m.d.comb += release_a.eq(1 << freed.r_data)
            else:
                with m.If(release[k]):
                    m.d.comb += release_a.eq(1 << release_buf)
            m.d[A] += claimed.eq((claimed & ~release_a) | claim)
            issuing, outstanding = issuer(m, axi, A, d, d_valid, d_take, nbuf, jobs, job_layout, claimed, claim,
                                          self.bus_log2, self.max_outstanding)

            # --- receiver: R beats -> the word register -> the pending register ---------------------
            job = Signal(job_layout, name=f"job{k}")
            m.d.comb += job.eq(jobs.r_data)
            wptr = Signal(range(buf_beats), name=f"wptr{k}")
            wnum = Signal(range(buf_beats + 1), init=1, name=f"wnum{k}")   # wptr + 1 (the last beat: an equality)
            bad = Signal(name=f"bad{k}")
            gather = Signal(self.data_width * B, name=f"gather{k}")         # the word being gathered
            g_full, g_last = Signal(name=f"g_full{k}"), Signal(name=f"g_last{k}")
            g_addr = Signal(addr_bits, name=f"g_addr{k}")
            g_fill = Signal(fill_layout, name=f"g_fill{k}")
            p_data = Signal(self.data_width * B, name=f"p_data{k}")         # the word waiting for its slot
            p_last = Signal(name=f"p_last{k}")
            p_addr = Signal(addr_bits, name=f"p_addr{k}")
            p_fill = Signal(fill_layout, name=f"p_fill{k}")
            p_datas.append(p_data)
            p_addrs.append(p_addr)
            r_fire = Signal(name=f"r_fire{k}")
            jobs_any = Signal(name=f"jobs_any{k}")  # jobs.level != 0 as a register (RREADY; issue 14)
            jobs_w, jobs_r = jobs.w_en & jobs.w_rdy, jobs.r_en & jobs.r_rdy
            m.d[A] += jobs_any.eq(jobs_w | Mux(jobs_r, jobs.level != 1, jobs.level != 0))
            # a complete word waits while the pending one does (conservative: its slot may free it now)
            m.d.comb += [axi.rready.eq(jobs_any & ~(g_full & p_valid[k]) & (filled.w_rdy if cross else 1)),
                         r_fire.eq(axi.rvalid & axi.rready)]
            writes = p_valid[k] & (slot == k)
            with m.If(writes):
                m.d[A] += p_valid[k].eq(0)
            with m.If(g_full & (~p_valid[k] | (slot == k))):
                m.d[A] += [p_valid[k].eq(1), p_data.eq(gather), p_last.eq(g_last), p_addr.eq(g_addr),
                           p_fill.eq(g_fill), g_full.eq(0)]
            for b in range(B):
                with m.If(r_fire & ((wptr[:bl] == b) if B > 1 else 1)):
                    m.d[A] += gather[b * self.data_width:(b + 1) * self.data_width].eq(axi.rdata)
            with m.If(r_fire):
                last = wnum == job.beats
                err = bad | (axi.rresp != Resp.OKAY)
                m.d[A] += [wptr.eq(wptr + 1), wnum.eq(wnum + 1), bad.eq(err)]
                with m.If(((wptr[:bl] == B - 1) if B > 1 else 1) | last):
                    m.d[A] += [g_full.eq(1), g_last.eq(last), g_addr.eq(Cat(wptr[bl:], job.buffer)),
                               g_fill.job.eq(job), g_fill.err.eq(err)]
                with m.If(last):
                    m.d.comb += jobs.r_en.eq(1)
                    m.d[A] += [wptr.eq(0), wnum.eq(1), bad.eq(0)]
            # the job is filled once its last word is in the memory (the queue holds at most the claimed buffers)
            m.d.comb += [filled.w_en.eq(writes & p_last), filled.w_data.eq(p_fill)]
            a_busys.append(issuing | claimed.any() | (outstanding != 0) | g_full | p_valid[k])

        # --- the write arbiter: a fixed slot a front --------------------------------------------------
        m.d.comb += [wp.en.eq(p_valid.bit_select(slot, 1)),
                     wp.data.eq(self._choice(m, slot, p_datas, "wr_data")),
                     wp.addr.eq(Cat(self._choice(m, slot, p_addrs, "wr_addr"), slot))]

        # --- the drainer: filled jobs in the dealing turn -> o ----------------------------------------
        o_sel = Signal(range(W))                    # the next job's front
        cur = Signal(job_layout)
        cur_front = Signal(range(W))
        draining = Signal()
        rptr = Signal(range(max(word_depth, 2)))
        last_word = Signal(range(max(word_depth, 2)))   # the job's last word, kept at the take
        at_last = Signal()                          # rptr == last_word, a register
        out_valid, out_last = Signal(), Signal()
        out_keep = Signal(nbytes * B)
        advance = Signal()
        m.d.comb += advance.eq(~out_valid | self.o.tready)
        m.d.comb += [rp.addr.eq(Cat(rptr[:wl], cur.buffer, cur_front)), rp.en.eq(advance)]
        tail_keep = Signal(nbytes * B)              # the last word's TKEEP: full banks, the last beat's keep, none
        last_bank = Signal(max(bl, 1))
        m.d.comb += last_bank.eq((cur.beats - 1)[:bl] if B > 1 else 0)
        for b in range(B):
            beyond = Mux(last_bank > b, all_ones(nbytes), 0) if b < B - 1 else 0
            m.d.comb += tail_keep[b * nbytes:(b + 1) * nbytes].eq(Mux(last_bank == b, cur.keep, beyond))
        nxt_rdy = Cat(*[f.r_rdy for f in filleds]).bit_select(o_sel, 1)
        nxt = Signal(fill_layout)
        m.d.comb += nxt.eq(self._choice(m, o_sel, [f.r_data for f in filleds], "fill_data"))
        nxt_last = Signal.like(last_word)
        m.d.comb += nxt_last.eq((nxt.job.beats - 1) >> bl)
        m.d.sync += [self.done.eq(0), self.resp_error.eq(0)]
        ends = Signal()                             # the last word is read now
        with m.If(advance):
            with m.If(draining):
                m.d.sync += [out_valid.eq(1), out_last.eq(at_last), out_keep.eq(all_ones(nbytes * B)),
                             rptr.eq(rptr + 1), at_last.eq(rptr + 1 == last_word)]
                with m.If(at_last):
                    m.d.comb += ends.eq(1)
                    m.d.sync += [out_keep.eq(tail_keep), draining.eq(0), rptr.eq(0)]
                    m.d.comb += [release.eq(1 << cur_front), release_buf.eq(cur.buffer)]
            with m.Else():
                m.d.sync += out_valid.eq(0)
        with m.If(nxt_rdy & (~draining | ends)):
            for k, f in enumerate(filleds):
                m.d.comb += f.r_en.eq(o_sel == k)
            m.d.sync += [cur.eq(nxt.job), cur_front.eq(o_sel), o_sel.eq(o_sel + 1), draining.eq(1), rptr.eq(0),
                         last_word.eq(nxt_last), at_last.eq(nxt_last == 0),
                         self.done.eq(1), self.done_tag.eq(nxt.job.tag), self.resp_error.eq(nxt.err)]
        m.d.comb += [self.o.tvalid.eq(out_valid), self.o.tdata.eq(rp.data),
                     self.o.tkeep.eq(out_keep), self.o.tlast.eq(out_last)]

        a_busy = Signal()
        m.d.comb += a_busy.eq(Cat(*a_busys).any())
        busy = Cat(*[f.r_rdy for f in filleds], draining, out_valid).any()
        if cross:
            a_busy_s = Signal()
            m.submodules.busy_sync = cdc.FFSynchronizer(a_busy, a_busy_s, o_domain="sync")
            m.d.comb += self.busy.eq(a_busy_s | Cat(*q_busys).any() | busy)
        else:
            m.d.comb += self.busy.eq(a_busy | busy)
        return m


@block("weight_loaders", "W weight loaders sharing one buffer memory: W AXI4 read masters -> one AXI-Stream",
       variants=({"ports": 2, "data_width": 64, "buffer_bytes": 512, "out_beats": 2},),
       ports=4, data_width=128, addr_width=40, buffer_bytes=4096, buffers=2, max_outstanding=4, out_beats=8,
       ranges={"ports": Range(2, 8, pow2=True), "out_beats": Range(1, 16, pow2=True)})
def _weight_loaders(**params):
    return WeightLoaders(**params)
