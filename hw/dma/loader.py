"""Ping-pong DMA loader: DDR -> two on-chip buffers -> AXI-Stream (MCF section 5).

A LOAD descriptor names a buffer.  The *issuer* claims that buffer (waiting while it still
holds undrained data) and sends INCR read bursts for the whole descriptor, several in
flight; the *receiver* writes the R beats into the buffer in order (one AXI ID: R data
returns in AR order) and, after the last beat, hands the buffer to the *drainer*, which
streams it out on ``o`` (TLAST on the descriptor's last beat, TKEEP marking the valid bytes
of a partial last beat) and then frees it.  So while the consumer drains one buffer, the
next descriptor fills the other.

The loader trusts its descriptors: the CSR has already refused zero lengths, addresses
outside the DMA window or not bus aligned, buffer indices >= ``buffers`` and LOADs longer
than ``buffer_bytes`` (``mcf.spec.ErrorCause``).  An R beat with RRESP != OKAY is stored
anyway and reported once per descriptor on ``resp_error``.

``out_beats`` = B > 1 makes the output B bus beats wide (a wide consumer drains a buffer B
times faster than one AXI port fills it: the execute unit's weight loaders, one per HP port):
each buffer is B banks, beat r of a descriptor goes to bank r mod B at word r / B, and ``o``
carries words of B beats (TKEEP marks the valid bytes of the last, partial word).

``ram_style`` (``"block"``, ``"distributed"``, ...; ``""``: the synthesizer's choice) is the
buffers' memory attribute (the execute unit's weight loaders at the Qwen node: block RAM).

``axi_domain`` = D (not ``"sync"``) runs the AXI side in clock domain D (the execute unit's weight
loaders: HP ports at a faster clock than the engine, ``NodeConfig.weight_clock_hz``): the issuer and
the receiver in D, the buffers written in D and read in ``sync`` (dual-clock block RAM), and three
crossings, each an ``AsyncQueue`` (hw/dma/common.py): descriptors sync -> D, filled buffers D -> sync (the receiver holds
RREADY low while it is full), drained buffers sync -> D (their claim released).  ``done`` and
``resp_error`` then strobe in ``sync`` when the drainer takes the filled buffer (before its first
word is out).  The AXI master's signals belong to D.
"""
from __future__ import annotations

from amaranth import Cat, DomainRenamer, Module, Mux, Signal
from amaranth.lib import cdc, data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf.hw.arith import log2_exact
from mcf.hw.axi.full import BURST_INCR, AXI4Signature
from mcf.hw.axi.lite import Resp
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.dma.common import AXCACHE, AsyncQueue, all_ones, beats_and_keep, next_burst
from mcf.hw.layouts import DmaDescriptorLayout
from mcf.hw.registry import ADDR_WIDTH, OUTSTANDING, block
from mcf.spec.params import Range
from mcf.spec.regmap import DMA_TAG_BITS


def issuer(m: Module, axi, A: str, d, d_valid, d_take, nbuf: int, jobs, job_layout, claimed, claim,
           bus_log2: int, max_outstanding: int):
    """A loader's issuer (in domain ``A``): a descriptor ``d`` (``d_valid`` / ``d_take``) whose buffer
    is not ``claimed`` claims it (``claim``), queues its job on ``jobs`` and goes out as INCR read
    bursts on ``axi``, at most ``max_outstanding`` in flight.  Returns (issuing, outstanding).
    (round 30: shared by DmaLoader and WeightLoaders)"""
    d_beats, d_keep = beats_and_keep(m, d.length, bus_log2)
    d_buf = Signal(range(nbuf))
    m.d.comb += d_buf.eq(d.buffer)
    addr = Signal(len(axi.araddr))
    remaining = Signal(len(d_beats))
    issuing = Signal()
    outstanding = Signal(range(max_outstanding + 1))
    load, ar_fire = Signal(), Signal()
    n, last_burst, n_ok = next_burst(m, addr, remaining, bus_log2, load | ar_fire, domain=A)

    new_job = Signal(job_layout)
    m.d.comb += [new_job.buffer.eq(d_buf), new_job.beats.eq(d_beats), new_job.keep.eq(d_keep),
                 new_job.tag.eq(d.tag), jobs.w_data.eq(new_job)]
    with m.If(~issuing & jobs.w_rdy & ~claimed.bit_select(d_buf, 1)):
        m.d.comb += d_take.eq(1)
        with m.If(d_valid):
            m.d.comb += [jobs.w_en.eq(1), claim.eq(1 << d_buf), load.eq(1)]
            m.d[A] += [addr.eq(d.addr), remaining.eq(d_beats), issuing.eq(1)]

    r_last_fire = Signal()
    m.d.comb += [
        axi.arvalid.eq(issuing & n_ok & (outstanding < max_outstanding)),
        axi.araddr.eq(addr), axi.arlen.eq(n - 1), axi.arsize.eq(bus_log2),
        axi.arburst.eq(BURST_INCR), axi.arcache.eq(AXCACHE), axi.arid.eq(0),
        ar_fire.eq(axi.arvalid & axi.arready),
        r_last_fire.eq(axi.rvalid & axi.rready & axi.rlast),
    ]
    with m.If(ar_fire):
        m.d[A] += [addr.eq(addr + (n << bus_log2)), remaining.eq(remaining - n)]
        with m.If(last_burst):
            m.d[A] += issuing.eq(0)
    # (the count moves to registers kept at outstanding +- 1: the last beat's handshake, which
    # comes back through the interconnect, only selects, no adder behind it; issue 14)
    out_up = Signal.like(outstanding, name="outstanding_p1", init=1)
    out_dn = Signal.like(outstanding, name="outstanding_m1")
    with m.If(ar_fire & ~r_last_fire):
        m.d[A] += [outstanding.eq(out_up), out_up.eq(out_up + 1), out_dn.eq(outstanding)]
    with m.If(r_last_fire & ~ar_fire):
        m.d[A] += [outstanding.eq(out_dn), out_up.eq(outstanding), out_dn.eq(out_dn - 1)]
    return issuing, outstanding


class DmaLoader(wiring.Component):
    """Ports: ``desc`` (LOAD descriptors in), ``m_axi`` (AXI4 read channels), ``o`` (buffer
    contents out, one packet per descriptor), ``done`` + ``done_tag`` (a descriptor's data is
    in its buffer), ``resp_error`` (its read answered SLVERR/DECERR), ``busy``."""

    def __init__(self, data_width: int = 128, addr_width: int = 40, buffer_bytes: int = 4096,
                 buffers: int = 2, max_outstanding: int = 4, id_width: int = 1, out_beats: int = 1,
                 axi_domain: str = "sync", ram_style: str = ""):
        self.bus_log2 = log2_exact(data_width // 8, "data_width / 8")
        log2_exact(buffer_bytes, "buffer_bytes")
        if buffer_bytes < data_width // 8:
            raise ValueError(f"buffer_bytes={buffer_bytes} is smaller than one {data_width}-bit beat")
        if not 2 <= buffers <= 16:
            raise ValueError(f"buffers={buffers}: must be 2..16")
        if max_outstanding < 1:
            raise ValueError(f"max_outstanding={max_outstanding}: must be >= 1")
        self.banks_log2 = log2_exact(out_beats, "out_beats")
        if buffer_bytes < out_beats * data_width // 8:
            raise ValueError(f"buffer_bytes={buffer_bytes} is smaller than one {out_beats}-beat output word")
        self.data_width, self.buffer_bytes, self.buffers = data_width, buffer_bytes, buffers
        self.out_beats = out_beats
        self.axi_domain = axi_domain
        self.ram_style = ram_style
        self.buffer_beats = buffer_bytes >> self.bus_log2
        self.max_outstanding = max_outstanding
        super().__init__({
            "desc": In(stream.Signature(DmaDescriptorLayout)),
            "m_axi": Out(AXI4Signature(addr_width, data_width, id_width, write=False)),
            "o": Out(AXIStreamSignature(data_width * out_beats)),
            "done": Out(1),
            "done_tag": Out(DMA_TAG_BITS),
            "resp_error": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        axi, nbuf, nbytes = self.m_axi, self.buffers, self.data_width // 8
        buf_beats = self.buffer_beats

        A = self.axi_domain
        cross = A != "sync"
        job_layout = data.StructLayout({
            "buffer": range(nbuf), "beats": range(buf_beats + 1), "keep": nbytes, "tag": DMA_TAG_BITS})
        # Issuer -> receiver (descriptors whose bursts are out) and receiver -> drainer
        # (filled buffers, in fill order).  At most ``nbuf`` buffers are claimed at once.
        m.submodules.jobs = jobs = DomainRenamer({"sync": A})(fifo.SyncFIFO(width=job_layout.size, depth=nbuf))
        if cross:
            # filled: a job and its error bit, A -> sync; freed: drained buffers, sync -> A
            depth = max(4, 2 * nbuf)
            m.submodules.filled = filled = AsyncQueue(width=job_layout.size + 1, depth=depth,
                                                          w_domain=A, r_domain="sync")
            m.submodules.freed = freed = AsyncQueue(width=max(1, (nbuf - 1).bit_length()), depth=depth,
                                                        w_domain="sync", r_domain=A)
            m.submodules.descq = descq = AsyncQueue(width=DmaDescriptorLayout.size, depth=4,
                                                        w_domain="sync", r_domain=A)
            m.d.comb += [descq.w_data.eq(self.desc.payload), descq.w_en.eq(self.desc.valid),
                         self.desc.ready.eq(descq.w_rdy)]
            d_valid, d = descq.r_rdy, data.View(DmaDescriptorLayout, descq.r_data)
            d_take = descq.r_en
        else:
            m.submodules.filled = filled = fifo.SyncFIFO(width=job_layout.size, depth=nbuf)
            d_valid, d, d_take = self.desc.valid, self.desc.payload, self.desc.ready

        claimed = Signal(nbuf)     # buffer owned from issue until drained (in A)
        claim = Signal(nbuf)
        release = Signal(nbuf)     # in sync: the drainer let it go
        release_a = Signal(nbuf)   # in A
        if cross:
            m.d.comb += [freed.w_en.eq(release.any()), freed.w_data.eq(self._index(release, nbuf)),
                         freed.r_en.eq(1)]
            with m.If(freed.r_rdy):
                m.d.comb += release_a.eq(1 << freed.r_data)
        else:
            m.d.comb += release_a.eq(release)
        m.d[A] += claimed.eq((claimed & ~release_a) | claim)

        # --- issuer: descriptors -> AR bursts --------------------------------------------
        issuing, outstanding = issuer(m, axi, A, d, d_valid, d_take, nbuf, jobs, job_layout, claimed, claim,
                                      self.bus_log2, self.max_outstanding)

        # --- receiver: R beats -> the job's buffer ---------------------------------------------
        job = Signal(job_layout)
        m.d.comb += job.eq(jobs.r_data)
        wptr = Signal(range(buf_beats))
        wnum = Signal(range(buf_beats + 1), init=1)    # wptr + 1: the last beat is an equality, no subtract
        bad = Signal()             # an error response in this job so far
        B, bl = self.out_beats, self.banks_log2
        word_depth = buf_beats >> bl
        # mems[b]: bank b of every buffer (beat r of a descriptor into buffer i at word
        # i x word_depth + r >> bl of bank r mod B): one memory a bank, not one a buffer and bank,
        # so a read takes the buffer as address bits, not as a multiplexer after the memories
        # (and one read register, not one a buffer)
        # (round 29: ``ram_style`` "block" puts them in block RAM where Yosys's cost would take LUT RAM
        # for shallow banks -- 64 x 128 at the node, two BRAM36 a bank; the read is registered either way)
        attrs = {"ram_style": self.ram_style} if self.ram_style else {}
        mems = [Memory(shape=self.data_width, depth=nbuf * word_depth, init=[], attrs=attrs) for _ in range(B)]
        for b, mem in enumerate(mems):
            m.submodules["buffer" if B == 1 else f"buffer_{b}"] = mem
        wports = [mem.write_port(domain=A) for mem in mems]
        rports = [mem.read_port(transparent_for=()) for mem in mems]
        r_fire = Signal()
        # (``jobs.r_rdy`` -- its level != 0 -- as a register kept from the level's next state: RREADY
        # goes through the interconnect and back into the last beat's handshake; issue 14)
        jobs_any = Signal(name="jobs_any")
        jobs_w, jobs_r = jobs.w_en & jobs.w_rdy, jobs.r_en & jobs.r_rdy
        m.d[A] += jobs_any.eq(jobs_w | Mux(jobs_r, jobs.level != 1, jobs.level != 0))
        m.d.comb += [axi.rready.eq(jobs_any & (filled.w_rdy if cross else 1)), r_fire.eq(axi.rvalid & axi.rready)]
        for b, wp in enumerate(wports):
            bank_hit = (wptr[:bl] == b) if B > 1 else 1
            m.d.comb += [wp.addr.eq(Cat(wptr[bl:], job.buffer) if word_depth > 1 else job.buffer), wp.data.eq(axi.rdata),
                         wp.en.eq(r_fire & bank_hit)]
        m.d.sync += [self.done.eq(0), self.resp_error.eq(0)]
        with m.If(r_fire):
            last = wnum == job.beats
            err = bad | (axi.rresp != Resp.OKAY)
            m.d[A] += [wptr.eq(wptr + 1), wnum.eq(wnum + 1), bad.eq(err)]
            with m.If(last):
                # The filled FIFO cannot be full: it holds at most the claimed buffers (crossing
                # clocks, RREADY waits for its room).
                m.d.comb += [jobs.r_en.eq(1), filled.w_en.eq(1)]
                m.d[A] += [wptr.eq(0), wnum.eq(1), bad.eq(0)]
                if not cross:
                    m.d.sync += [self.done.eq(1), self.done_tag.eq(job.tag), self.resp_error.eq(err)]
        m.d.comb += filled.w_data.eq(Cat(jobs.r_data, bad | (axi.rresp != Resp.OKAY)) if cross else jobs.r_data)

        # --- drainer: a filled buffer -> o (synchronous read, one output register) ------------
        # words of B beats: ceil(beats / B); the last word's banks beyond the last beat are not kept
        cur = Signal(job_layout)
        draining = Signal()
        rptr = Signal(range(max(word_depth, 2)))
        last_word = Signal(range(max(word_depth, 2)))
        m.d.comb += last_word.eq((cur.beats - 1) >> bl)
        out_valid, out_last = Signal(), Signal()
        out_keep = Signal(nbytes * B)
        advance = Signal()
        m.d.comb += advance.eq(~out_valid | self.o.tready)
        for rp in rports:
            m.d.comb += [rp.addr.eq(Cat(rptr, cur.buffer) if word_depth > 1 else cur.buffer), rp.en.eq(advance)]
        tail_keep = Signal(nbytes * B)     # the last word's TKEEP: full banks, the last beat's keep, none
        last_bank = Signal(max(bl, 1))
        m.d.comb += last_bank.eq((cur.beats - 1)[:bl] if B > 1 else 0)
        for b in range(B):
            beyond = Mux(last_bank > b, all_ones(nbytes), 0) if b < B - 1 else 0   # (no constant compare)
            m.d.comb += tail_keep[b * nbytes:(b + 1) * nbytes].eq(Mux(last_bank == b, cur.keep, beyond))
        with m.If(advance):
            with m.If(draining):
                is_last = rptr == last_word
                m.d.sync += [out_valid.eq(1), out_last.eq(is_last),
                             out_keep.eq(all_ones(nbytes * B)), rptr.eq(rptr + 1)]
                with m.If(is_last):
                    # The read port has its address; the buffer may refill from next cycle.
                    m.d.sync += [out_keep.eq(tail_keep), draining.eq(0), rptr.eq(0)]
                    m.d.comb += release.eq(1 << cur.buffer)
            with m.Else():
                m.d.sync += out_valid.eq(0)
        with m.If(~draining & filled.r_rdy):
            m.d.comb += filled.r_en.eq(1)
            m.d.sync += [cur.eq(filled.r_data[:job_layout.size]), draining.eq(1), rptr.eq(0)]
            if cross:
                taken = data.View(job_layout, filled.r_data[:job_layout.size])
                m.d.sync += [self.done.eq(1), self.done_tag.eq(taken.tag),
                             self.resp_error.eq(filled.r_data[job_layout.size])]

        rdata = Cat(*[p.data for p in rports])
        m.d.comb += [self.o.tvalid.eq(out_valid), self.o.tdata.eq(rdata),
                     self.o.tkeep.eq(out_keep), self.o.tlast.eq(out_last)]
        a_busy = Signal()
        m.d.comb += a_busy.eq(issuing | claimed.any() | (outstanding != 0))
        if cross:
            a_busy_s = Signal()
            m.submodules.busy_sync = cdc.FFSynchronizer(a_busy, a_busy_s, o_domain="sync")
            m.d.comb += self.busy.eq(a_busy_s | descq.w_level.any() | filled.r_rdy | draining | out_valid)
        else:
            m.d.comb += self.busy.eq(a_busy | out_valid)
        return m

    @staticmethod
    def _index(onehot, n: int):
        """The index of the set bit of a one-hot ``onehot`` of ``n`` bits."""
        out = 0
        for i in range(1, n):
            out = out | Mux(onehot[i], i, 0)
        return out


@block("dma_loader", "Ping-pong DMA loader: AXI4 read bursts -> two buffers -> AXI-Stream",
       variants=({"data_width": 64, "buffer_bytes": 1024}, {"data_width": 64, "buffer_bytes": 512, "out_beats": 2}),
       data_width=128, addr_width=40, buffer_bytes=4096, buffers=2, max_outstanding=4, out_beats=1,
       ranges={"addr_width": ADDR_WIDTH, "max_outstanding": OUTSTANDING, "out_beats": Range(1, 4, pow2=True)})
def _loader(**params):
    return DmaLoader(**params)
