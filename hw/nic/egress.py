"""NIC egress: one output port reading packets out of the ingress buffers.

The egress picks (round robin) an input whose head packet still has to go out here, sends
its header (rebuilt from the stored descriptor) and then its payload straight from that
input's buffer through its own read port, and pulses ``done`` for that input.  Outputs never
wait for each other, so a multicast copy blocked on one port does not hold the others.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axis import AXIStreamSignature
from mcf.hw.nic.common import BufferReadSignature, desc_layout
from mcf.spec.packet import HEADER_BITS, header_beats


def round_robin(m: Module, req, last, n: int):
    """(grant, any): the first requester at or after ``last + 1`` (circularly)."""
    grant = Signal(range(n), name="grant")
    found = Signal(name="found")
    if n == 1:
        m.d.comb += [grant.eq(0), found.eq(req[0])]
        return grant, found
    start = Signal(range(n))
    m.d.comb += start.eq(Mux(last == n - 1, 0, last + 1))
    rot = Signal(n)
    m.d.comb += rot.eq((Cat(req, req) >> start)[:n])
    off = Signal(range(n))
    for i in reversed(range(n)):   # lowest set bit of the rotated vector wins
        with m.If(rot[i]):
            m.d.comb += off.eq(i)
    total = Signal(range(2 * n))
    m.d.comb += [total.eq(start + off), found.eq(rot.any()),
                 grant.eq(Mux(total >= n, total - n, total))]
    return grant, found


class EgressPort(wiring.Component):
    def __init__(self, data_width: int, n_in: int, n_out: int, depth: int):
        self.data_width = data_width
        self.n_in = n_in
        self.depth = depth
        self.hb = header_beats(data_width)
        layout = desc_layout(n_out, depth)
        super().__init__({
            "pending": In(n_in),                  # input i's head packet goes out here
            "heads": In(layout).array(n_in),
            "done": Out(n_in),                    # input i's head packet has been read out
            "rd": Out(BufferReadSignature(data_width, depth)).array(n_in),
            "o": Out(AXIStreamSignature(data_width)),
            "start": Out(1),                      # a packet was picked this cycle
        })

    def elaborate(self, platform):
        m = Module()
        w, hb, n = self.data_width, self.hb, self.n_in
        abits = (self.depth - 1).bit_length()

        busy = Signal()
        sel = Signal(range(n))
        last_sel = Signal(range(n), init=n - 1)
        idx = Signal(range(hb + self.depth + 1))
        total = Signal(range(hb + self.depth + 1))
        ptr = Signal(abits)
        hdr = Signal(hb * w)

        # Output stage (one beat): the memory's read register for payload beats, a copy of
        # the header word for header beats.  ``advance`` moves it; it also clocks the read.
        sv = Signal()
        s_hdr = Signal()
        s_last = Signal()
        s_sel = Signal(range(n))
        s_word = Signal(w)
        advance = Signal()
        m.d.comb += advance.eq(~sv | self.o.tready)

        issue_last = Signal()
        with m.If(busy & advance):
            is_hdr = idx < hb
            m.d.sync += [sv.eq(1), s_hdr.eq(is_hdr), s_sel.eq(sel), s_last.eq(idx == total - 1),
                         idx.eq(idx + 1)]
            if hb > 1:
                m.d.sync += s_word.eq(hdr.word_select(idx[:(hb - 1).bit_length()], w))
            else:
                m.d.sync += s_word.eq(hdr)
            with m.If(~is_hdr):
                m.d.sync += ptr.eq(ptr + 1)
            for i in range(n):
                with m.If(sel == i):
                    m.d.comb += [self.rd[i].addr.eq(ptr), self.rd[i].en.eq(~is_hdr)]
            with m.If(idx == total - 1):
                m.d.comb += issue_last.eq(1)
                m.d.sync += busy.eq(0)
                for i in range(n):
                    with m.If(sel == i):
                        m.d.comb += self.done[i].eq(1)
        with m.Elif(advance):
            m.d.sync += sv.eq(0)

        # Pick the next packet while idle, or while issuing the last beat of this one (the
        # current input's bit is still set for one more cycle, so it is masked).
        req = Signal(n)
        m.d.comb += req.eq(self.pending & ~Mux(busy, 1 << sel, 0))
        grant, found = round_robin(m, req, last_sel, n)
        with m.If((~busy | issue_last) & found):
            m.d.comb += self.start.eq(1)
            m.d.sync += [busy.eq(1), sel.eq(grant), last_sel.eq(grant), idx.eq(0)]
            for i in range(n):
                with m.If(grant == i):
                    h = self.heads[i]
                    m.d.sync += [ptr.eq(h.start), total.eq(hb + h.nbeats),
                                 hdr.eq(Cat(h.meta.as_value(), Const(0, hb * w - HEADER_BITS)))]

        rdata = self.rd[0].data
        for i in range(1, n):
            rdata = _mux_view(s_sel == i, self.rd[i].data, rdata)
        m.d.comb += [
            self.o.tvalid.eq(sv),
            self.o.tlast.eq(s_last),
            self.o.tdata.eq(Mux(s_hdr, s_word, rdata.data)),
            self.o.tkeep.eq(Mux(s_hdr, (1 << w // 8) - 1, rdata.keep)),
        ]
        return m


def _mux_view(sel, a, b):
    """Mux of two layout views (as raw bits, re-viewed)."""
    from amaranth.lib import data
    return data.View(a.shape(), Mux(sel, a.as_value(), b.as_value()))
