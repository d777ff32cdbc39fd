"""Streams of the execute unit: width converters framed by item counts, and the AXI4 read
engine that feeds the movers.

``Unpacker(in_bits, out_bits)`` cuts a stream of ``in_bits`` words (DDR bus beats) into items of
``out_bits`` (weight beats, scale words, KV rows, SPAD beats), little-endian: item 0 is the low
end of the first word.  A frame is ``cmd.count`` items and takes exactly
ceil(count * out_bits / in_bits) words: the unused end of a frame's last word is dropped.

``Packer(in_bits, out_bits)`` is the inverse for writes: ``cmd.count`` items of ``in_bits`` into
``cmd.beats`` words of ``out_bits`` (>= the items' bits), zero-filled after the last item (a KV
segment's padding, a partial last bus beat).

The widths must divide one another (powers of two in the node).

``ReadStreams(streams, data_width, addr_width, depth)``: ``streams`` independent read streams
on one AXI4 read master.  A request (``req<s>``: byte address on the bus width, length in bus
beats) becomes INCR bursts (at most ``max_burst`` beats, never across 4 KiB) with ARID =
``id_base + s``; the R beats land in the stream's FIFO (``depth`` beats) and leave on ``o<s>``
in order.  A burst is issued only when its beats fit in what the FIFO has not promised yet,
so RREADY is always high and no stream can block another (R beats of different IDs may
interleave).  ``resp_error`` strobes for an R beat that is not OKAY.

Each stream's FIFO is a ``PrefetchFIFO`` (hw/fifo.py): the reader's ready (from a mover and,
through it, from a unit in another part) reaches only its output registers, one LUT deep.  From
``BLOCK_RAM_DEPTH`` beats on its memory is read through a synchronous port (``sync_read``, the
same cycles), so it can be block RAM: the Qwen node's 512 x 128 bits, 2 BRAM36 a stream instead
of ~1.2 K LUT RAM and a ~0.5 K LUT read multiplexer (issue 14).
"""
from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from mcf.hw.arith import log2_exact
from mcf.hw.axi.full import BURST_INCR, MAX_BURST_BEATS, AXI4Signature
from mcf.hw.axi.lite import Resp
from mcf.hw.dma.common import AXCACHE, next_burst
from mcf.hw.fifo import PrefetchFIFO
from mcf.hw.registry import block
from mcf.spec.params import Range

#: A FIFO of this many beats or more reads its memory synchronously (block RAM); smaller ones
#: keep the comb read (LUT RAM).
BLOCK_RAM_DEPTH = 256

#: Items in one frame / beats in one request (a GEMM's weight stream of a 65 535-tile matrix).
COUNT_BITS = 32


def frame_layout():
    return data.StructLayout({"count": COUNT_BITS})


def pack_frame_layout():
    return data.StructLayout({"count": COUNT_BITS, "beats": COUNT_BITS})


def request_layout(addr_width: int):
    return data.StructLayout({"addr": addr_width, "beats": COUNT_BITS})


def _ratio(in_bits: int, out_bits: int) -> int:
    big, small = max(in_bits, out_bits), min(in_bits, out_bits)
    if in_bits < 1 or out_bits < 1 or big % small:
        raise ValueError(f"widths {in_bits} and {out_bits}: one must divide the other")
    return big // small


class Unpacker(wiring.Component):
    """``i`` words -> ``o`` items, ``cmd.count`` items per frame (see the module text).  ``count_bits``: the
    width of the count its user drives (its source's; the payload's upper bits then 0): the items left, which
    only count down from it, in that many flip-flops (round 29: a 32-bit down counter a stream, ~2 LUT a bit)."""

    def __init__(self, in_bits: int, out_bits: int, count_bits: int = COUNT_BITS):
        self.in_bits, self.out_bits, self.count_bits = in_bits, out_bits, count_bits
        self.ratio = _ratio(in_bits, out_bits)
        super().__init__({
            "cmd": In(stream.Signature(frame_layout())),
            "i": In(stream.Signature(in_bits)),
            "o": Out(stream.Signature(out_bits)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.ratio
        left = Signal(self.count_bits)      # items still to emit in this frame
        run = Signal()
        m.d.comb += [self.busy.eq(run), self.cmd.ready.eq(~run)]
        last_item = Signal()                # left == 1, as a register
        with m.If(self.cmd.valid & ~run):
            m.d.sync += [left.eq(self.cmd.payload.count), run.eq(self.cmd.payload.count != 0),
                         last_item.eq(self.cmd.payload.count == 1)]
        o_fire = Signal()
        m.d.comb += o_fire.eq(self.o.valid & self.o.ready)
        with m.If(o_fire):
            m.d.sync += [left.eq(left - 1), last_item.eq(left == 2)]
            with m.If(last_item):
                m.d.sync += run.eq(0)
        if self.in_bits == self.out_bits:
            m.d.comb += [self.o.valid.eq(run & self.i.valid), self.o.payload.eq(self.i.payload),
                         self.i.ready.eq(run & self.o.ready)]
        elif self.out_bits < self.in_bits:
            # one word -> n items; the word is taken after its last item or the frame's last
            # (k == n - 1 as a register, ``k_end``: its compare (a carry) was in front of ``i.ready``, and through the
            # movers' readies of the read stream's FIFO: round 22, 9.0 levels)
            k, k_end = Signal(range(n)), Signal()
            parts = Array(self.i.payload[j * self.out_bits:(j + 1) * self.out_bits] for j in range(n))
            m.d.comb += [self.o.valid.eq(run & self.i.valid), self.o.payload.eq(parts[k]),
                         self.i.ready.eq(o_fire & (k_end | last_item))]
            with m.If(o_fire):
                m.d.sync += [k.eq(Mux(k_end | last_item, 0, k + 1)), k_end.eq(~(k_end | last_item) & (k == n - 2))]
        else:
            # n words -> one item: the first n - 1 are held, the n-th completes the item
            # (j == n - 1 as a register, ``j_end``: round 22, the compare (a carry) sat in front of ``o.valid``
            # and, through GEMM's bias queue, of the matrix unit's ``bias.valid``: 9.06 levels joined)
            j, j_end = Signal(range(n)), Signal()
            held = [Signal(self.in_bits, name=f"held{x}") for x in range(n - 1)]
            m.d.comb += [self.o.valid.eq(run & self.i.valid & j_end),
                         self.o.payload.eq(Cat(*held, self.i.payload)),
                         self.i.ready.eq(run & (~j_end | self.o.ready))]
            with m.If(self.i.valid & self.i.ready):
                m.d.sync += [j.eq(Mux(j_end, 0, j + 1)), j_end.eq(~j_end & (j == n - 2))]
                for x in range(n - 1):
                    with m.If(j == x):
                        m.d.sync += held[x].eq(self.i.payload)
        return m


class Packer(wiring.Component):
    """``i`` items -> ``o`` words: ``cmd.count`` items, then zeros up to ``cmd.beats`` words.  ``count_bits`` /
    ``beats_bits``: the widths of the count / beats its user drives (as ``Unpacker``'s ``count_bits``: round 29)."""

    def __init__(self, in_bits: int, out_bits: int, count_bits: int = COUNT_BITS, beats_bits: int = COUNT_BITS):
        self.in_bits, self.out_bits = in_bits, out_bits
        self.count_bits, self.beats_bits = count_bits, beats_bits
        self.ratio = _ratio(in_bits, out_bits)
        super().__init__({
            "cmd": In(stream.Signature(pack_frame_layout())),
            "i": In(stream.Signature(in_bits)),
            "o": Out(stream.Signature(out_bits)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.ratio
        items = Signal(self.count_bits)     # items still to take
        beats = Signal(self.beats_bits)     # words still to emit
        run = Signal()
        m.d.comb += [self.busy.eq(run), self.cmd.ready.eq(~run)]
        have = Signal()                     # an item remains in the frame: items != 0, as a register
        one = Signal()                      # items == 1, as a register
        with m.If(self.cmd.valid & ~run):
            m.d.sync += [items.eq(self.cmd.payload.count), beats.eq(self.cmd.payload.beats),
                         run.eq(self.cmd.payload.beats != 0),
                         have.eq(self.cmd.payload.count != 0), one.eq(self.cmd.payload.count == 1)]
        o_fire = Signal()
        m.d.comb += o_fire.eq(self.o.valid & self.o.ready)
        with m.If(o_fire):
            m.d.sync += beats.eq(beats - 1)
            with m.If(beats == 1):
                m.d.sync += run.eq(0)
        i_fire = Signal()
        m.d.comb += i_fire.eq(self.i.valid & self.i.ready)
        with m.If(i_fire):
            m.d.sync += [items.eq(items - 1), have.eq(items != 1), one.eq(items == 2)]
        if self.in_bits >= self.out_bits:
            # one item -> n words (padding words are zero)
            k = Signal(range(n))
            parts = Array(self.i.payload[j * self.out_bits:(j + 1) * self.out_bits] for j in range(n))
            m.d.comb += [self.o.valid.eq(run & (~have | self.i.valid)),
                         self.o.payload.eq(Mux(have, parts[k], 0)),
                         self.i.ready.eq(run & have & self.o.ready & (k == n - 1))]
            with m.If(o_fire & have):
                m.d.sync += k.eq(Mux(k == n - 1, 0, k + 1))
        else:
            # n items -> one word; the frame's last item (or none left) closes a partial word
            j = Signal(range(n))
            held = [Signal(self.in_bits, name=f"held{x}") for x in range(n - 1)]
            closes = Signal()
            m.d.comb += closes.eq((j == n - 1) | one)
            word = Signal(self.out_bits)
            parts = []
            for x in range(n):
                if x < n - 1:
                    parts.append(Mux(j == x, self.i.payload, Mux(j > x, held[x], 0)))
                else:
                    parts.append(Mux(j == x, self.i.payload, 0))
            m.d.comb += word.eq(Cat(*parts))
            with m.If(have):
                m.d.comb += [self.o.valid.eq(run & self.i.valid & closes), self.o.payload.eq(word),
                             self.i.ready.eq(run & (~closes | self.o.ready))]
            with m.Else():
                m.d.comb += [self.o.valid.eq(run), self.o.payload.eq(0)]
            with m.If(i_fire):
                m.d.sync += j.eq(Mux(closes, 0, j + 1))
                for x in range(n - 1):
                    with m.If(j == x):
                        m.d.sync += held[x].eq(self.i.payload)
        return m


class ReadStreams(wiring.Component):
    """Ports: ``req<s>`` (requests in), ``o<s>`` (bus beats out), ``m_axi`` (AXI4 read
    channels), ``resp_error`` (strobe), ``busy``."""

    def __init__(self, streams: int = 2, data_width: int = 128, addr_width: int = 48, depth: int = 64,
                 max_burst: int = 16, id_base: int = 0, id_width: int | None = None):
        self.bus_log2 = log2_exact(data_width // 8, "data_width / 8")
        log2_exact(depth, "depth")
        if streams < 1:
            raise ValueError(f"streams={streams}: must be >= 1")
        if not 1 <= max_burst <= min(depth, MAX_BURST_BEATS):
            raise ValueError(f"max_burst={max_burst}: must be 1..min(depth, {MAX_BURST_BEATS})")
        self.streams, self.data_width, self.depth, self.max_burst = streams, data_width, depth, max_burst
        self.id_base = id_base
        self.id_width = id_width if id_width is not None else max(ceil_log2(id_base + streams), 1)
        members = {}
        for s in range(streams):
            members[f"req{s}"] = In(stream.Signature(request_layout(addr_width)))
            members[f"o{s}"] = Out(stream.Signature(data_width))
        members.update({
            "m_axi": Out(AXI4Signature(addr_width, data_width, self.id_width, write=False)),
            "resp_error": Out(1),
            "busy": Out(1),
        })
        super().__init__(members)

    def req(self, s):
        return getattr(self, f"req{s}")

    def o(self, s):
        return getattr(self, f"o{s}")

    def elaborate(self, platform):
        m = Module()
        axi, S, D = self.m_axi, self.streams, self.depth
        lg = self.bus_log2

        # --- the AR register: one burst waiting for ARREADY ------------------------------------
        ar_valid = Signal()
        ar_addr = Signal(len(axi.araddr))
        ar_len = Signal(8)
        ar_id = Signal(self.id_width)
        m.d.comb += [axi.arvalid.eq(ar_valid), axi.araddr.eq(ar_addr), axi.arlen.eq(ar_len),
                     axi.arid.eq(ar_id), axi.arsize.eq(lg), axi.arburst.eq(BURST_INCR), axi.arcache.eq(AXCACHE)]
        with m.If(axi.arvalid & axi.arready):
            m.d.sync += ar_valid.eq(0)

        rr = Signal(range(S))          # round robin: the stream that goes first next time
        st = []
        for s in range(S):
            req, out = self.req(s), self.o(s)
            q = PrefetchFIFO(self.data_width, D, sync_read=D >= BLOCK_RAM_DEPTH)
            m.submodules[f"fifo{s}"] = q
            addr = Signal(len(axi.araddr), name=f"addr{s}")
            left = Signal(COUNT_BITS, name=f"left{s}")
            promised = Signal(range(D + 1), name=f"promised{s}")     # FIFO memory beats + beats in flight
            # the ready is left == 0 as a register (``idle``: a mover's valid may depend on its ready, and
            # the load on both; round 20: left's zero detect -> the movers -> ``ok2`` 10 levels): cleared by
            # a request, set by a burst that is the request's last (next_burst's ``last``, current whenever
            # a burst issues), else left == 0 of this cycle (so a request of 0 beats, which no mover makes,
            # leaves the stream not ready for one cycle, not none: the payload's zero detect stays out)
            idle = Signal(init=1, name=f"idle{s}")
            m.d.comb += req.ready.eq(idle)
            load, issue = Signal(name=f"load{s}"), Signal(name=f"issue{s}")
            m.d.comb += load.eq(req.valid & req.ready)
            m.d.sync += idle.eq(left == 0)
            with m.If(load):
                m.d.sync += [addr.eq(req.payload.addr), left.eq(req.payload.beats), idle.eq(0)]
            # the burst size, then whether it fits, in two register steps (for the 250 MHz
            # budget): stale for two cycles after a request or an issue of this stream, which
            # change addr, left and promised; otherwise promised only falls (beats taken), so a
            # registered "fits" stays true
            nb, nb_last, ok1 = next_burst(m, addr, left, lg, load | issue, self.max_burst)
            fits, ok2 = Signal(name=f"fits{s}"), Signal(name=f"ok2_{s}")
            m.d.sync += [fits.eq((left != 0) & (promised + nb <= D)), ok2.eq(ok1 & ~load & ~issue)]
            want = Signal(name=f"want{s}")
            m.d.comb += want.eq(fits & ok2)
            # R beats of this stream into its FIFO's memory (the room was promised at issue); a beat
            # stops counting when it leaves the memory for the output registers (not when the
            # reader takes it: the reader's ready stays out of the counter)
            m.d.comb += [q.w_en.eq(axi.rvalid & (axi.rid == self.id_base + s)), q.w_data.eq(axi.rdata)]
            wiring.connect(m, q.o, wiring.flipped(out))
            st.append({"addr": addr, "left": left, "promised": promised, "nb": nb, "want": want,
                       "taken": q.moved, "issue": issue, "held": q.holds, "idle": idle, "last": nb_last})

        # --- arbitration: round robin among the streams that can issue a burst -------------------
        grant = Signal(range(S))
        for off in reversed(range(S)):          # the first wanting stream from rr on wins
            for base in range(S):
                s = (base + off) % S
                with m.If((rr == base) & st[s]["want"]):
                    m.d.comb += grant.eq(s)
        picked = Signal()
        m.d.comb += picked.eq(~ar_valid & Cat(*[x["want"] for x in st]).any())
        with m.If(picked):
            m.d.sync += [ar_valid.eq(1), rr.eq(Mux(grant == S - 1, 0, grant + 1))]
        for s, x in enumerate(st):
            issue = x["issue"]
            m.d.comb += issue.eq(picked & (grant == s))
            with m.If(issue):
                m.d.sync += [ar_addr.eq(x["addr"]), ar_len.eq(x["nb"] - 1), ar_id.eq(self.id_base + s),
                             x["addr"].eq(x["addr"] + (x["nb"] << lg)), x["left"].eq(x["left"] - x["nb"]),
                             x["idle"].eq(x["last"])]
            m.d.sync += x["promised"].eq(x["promised"] + Mux(issue, x["nb"], 0) - x["taken"])

        m.d.comb += axi.rready.eq(1)
        m.d.sync += self.resp_error.eq(axi.rvalid & (axi.rresp != Resp.OKAY))
        m.d.comb += self.busy.eq(ar_valid | Cat(*[~x['idle'] | (x['promised'] != 0) | x['held']
                                                             for x in st]).any())
        return m


@block("exec_read_streams", "execute unit: read streams on one AXI4 read master (credit-based bursts)",
       variants=({"data_width": 64},), streams=2, data_width=128, addr_width=48, depth=64, max_burst=16,
       ranges={"streams": Range(1, 16), "addr_width": Range(12, 64), "depth": Range(2, 1 << 12, pow2=True),
               "max_burst": Range(1, 256)})
def _read_streams(**params):
    return ReadStreams(**params)
