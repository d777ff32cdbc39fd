"""NIC egress: one output port reading packets out of the ingress buffers.

The egress picks (round robin) an input whose head packet still has to go out here, sends
its header (rebuilt from the stored descriptor) and then its payload straight from that
input's buffer through its own read port, and pulses ``done`` for that input.  Outputs never
wait for each other, so a multicast copy blocked on one port does not hold the others.

Timing (docs/timing.md): the arbitration is registered — the grant computed from this cycle's
requests starts a packet next cycle — and ``done`` is a register, one cycle after the last beat
is issued, so neither the round robin nor the downstream ``tready`` reaches the ingress's
descriptor FIFO in the same cycle.  A request stays true until this egress serves it (only
its own ``done`` clears it), so a grant one cycle old is still good; the input being started
and the one whose ``done`` is in flight are masked from the requests.  ``hold`` stops a start
(the reduction egress: one contribution in flight).
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axis import AXIStreamSignature
from mcf.hw.nic.common import BufferReadSignature, desc_layout
from mcf.spec.packet import HEADER_BITS, header_beats


def round_robin(m: Module, req, last, n: int):
    """(grant, any): the first requester at or after ``last + 1`` (circularly).

    One fixed-priority encoder per value of ``last``, selected by ``last``: a function of
    ``n + log2(n)`` bits, two LUT levels for the NIC's five inputs (a rotate, an encoder and an
    add would be three times as deep)."""
    grant = Signal(range(n), name="grant")
    found = Signal(name="found")
    m.d.comb += found.eq(req.any())
    if n == 1:
        return grant, found
    with m.Switch(last):
        for l in range(n):
            with m.Case(l):
                for i in reversed([(l + 1 + k) % n for k in range(n)]):   # the first one wins
                    with m.If(req[i]):
                        m.d.comb += grant.eq(i)
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
            "start": Out(1),                      # a packet starts this cycle
            "hold": In(1),                        # do not start one this cycle
        })

    def elaborate(self, platform):
        m = Module()
        w, hb, n = self.data_width, self.hb, self.n_in
        abits = (self.depth - 1).bit_length()

        busy = Signal()
        sel = Signal(range(n))
        last_sel = Signal(range(n), init=n - 1)
        idx = Signal(range(hb + self.depth + 1))
        pre_last = Signal(range(hb + self.depth + 1))     # hb + nbeats - 2: the beat before the last
        ptr = Signal(abits)
        hdr = Signal(hb * w)

        # Output stage (one beat): the memory's read register for payload beats, a copy of
        # the header word for header beats.  ``advance`` moves it; it also clocks the read.
        sv = Signal()
        s_hdr = Signal()
        s_last = Signal()
        s_word = Signal(w)
        advance = Signal()
        m.d.comb += advance.eq(~sv | self.o.tready)

        issue_last = Signal()
        # ``at_last`` (idx == hb + nbeats - 1) and ``is_hdr`` (idx < hb) are kept as registers,
        # updated with ``idx``: no compare between the counter and the start of a packet.
        at_last = Signal()
        is_hdr = Signal()
        with m.If(busy & advance):
            m.d.sync += [sv.eq(1), s_hdr.eq(is_hdr), s_last.eq(at_last),
                         idx.eq(idx + 1), at_last.eq(idx == pre_last),
                         is_hdr.eq(idx < hb - 1 if hb > 1 else 0)]   # (no constant compare at hb = 1)
            # the output word is the OR of s_word and the inputs' read registers: each edge that
            # moves a beat reads the selected input's word and zeroes the other inputs' registers
            # (and all of them for a header beat, s_word 0 for a payload beat).  Round 28: the
            # inputs' words were chosen by the beat's input (a 6:1 choice per bit, ~1.6 LUT); the OR is
            # one LUT6 per bit at five inputs.  The same tdata / tkeep in every cycle (the
            # registers hold between beats as before).
            with m.If(~is_hdr):
                m.d.sync += ptr.eq(ptr + 1)
            for i in range(n):
                m.d.comb += [self.rd[i].addr.eq(ptr), self.rd[i].en.eq(1),
                             self.rd[i].zero.eq(is_hdr | (sel != i))]
            with m.If(at_last):
                m.d.comb += issue_last.eq(1)
                m.d.sync += busy.eq(0)
                for i in range(n):
                    with m.If(sel == i):
                        m.d.comb += self.done[i].eq(1)
        with m.Elif(advance):
            m.d.sync += sv.eq(0)
        # s_word: zeroed by a reset ahead of its enable (the flip-flop's own reset; a zero under
        # the enable was a LUT per bit)
        with m.If(busy & advance & ~is_hdr):
            m.d.sync += s_word.eq(0)
        with m.Elif(busy & advance):
            if hb > 1:
                m.d.sync += s_word.eq(hdr.word_select(idx[:(hb - 1).bit_length()], w))
            else:
                m.d.sync += s_word.eq(hdr)

        # Arbitration, registered: ``grant_q`` is the pick among last cycle's requests.  Masked
        # from the requests: the input in service (its request falls the cycle after its
        # ``done``, when this egress is no longer busy with it).  The one grant a cycle old that may
        # be stale is the input started last cycle (its request was not masked yet): refused
        # at the start (only a header-only packet ends the cycle after it started).
        grant_q = Signal(range(n))
        found_q = Signal()
        started = Signal()
        start = Signal()
        m.d.comb += [start.eq((~busy | issue_last) & found_q & ~self.hold & ~(started & (grant_q == sel))),
                     self.start.eq(start)]
        m.d.sync += started.eq(start)
        req = Signal(n)
        m.d.comb += req.eq(self.pending & ~Mux(busy, 1 << sel, 0))
        grant, found = round_robin(m, req, last_sel, n)
        m.d.sync += [grant_q.eq(grant), found_q.eq(found)]
        with m.If(start):
            m.d.sync += [busy.eq(1), sel.eq(grant_q), last_sel.eq(grant_q), idx.eq(0),
                         is_hdr.eq(hb > 0)]
            for i in range(n):
                with m.If(grant_q == i):
                    h = self.heads[i]
                    m.d.sync += [ptr.eq(h.start), pre_last.eq(hb - 2 + h.nbeats),
                                 at_last.eq(hb - 1 + h.nbeats == 0),
                                 hdr.eq(Cat(h.meta.as_value(), Const(0, hb * w - HEADER_BITS)))]

        m.d.comb += [
            self.o.tvalid.eq(sv),
            self.o.tlast.eq(s_last),
            self.o.tdata.eq(s_word | _or(self.rd[i].data.data for i in range(n))),
            self.o.tkeep.eq(s_hdr.replicate(w // 8) | _or(self.rd[i].data.keep for i in range(n))),
        ]
        return m


def _or(values):
    """The OR of several values."""
    out = 0
    for v in values:
        out = out | v
    return out
