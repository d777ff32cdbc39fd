"""MCF packet <-> Ethernet II frame (``mcf.spec.eth``), in the node's clock domain and width.

``Framer``: a packet from the NIC gets the 16-byte link header in front: destination MAC =
table[Meta.dst], source MAC = table[NODE_ID], EtherType 0x88B5, the link sequence number
(+1 per frame).  The MAC pads and appends the FCS.

``Deframer``: a good frame (FCS already checked) loses its link header; a frame of another
EtherType is dropped (``not_mcf``).  The link sequence number is checked: a gap pulses
``seq_gap`` with ``seq_missing`` = the frames skipped, frames lost while the link was down
included (``resync``, CONTROL.clear_counters, makes the next frame's number the new
reference: after a peer restarted its count).  The packet leaves with the length its
Meta gives (16 + Meta.length bytes): the padding is cut off.  A packet whose header check
fails, or that is shorter than its Meta says, leaves as received, and the NIC counts it
(BAD_HEADER / SHORT_PACKET).
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf.hw.axis import AXIStreamSignature
from mcf.hw.packet.header import header_check
from mcf.hw.registry import block
from mcf.spec import eth
from mcf.spec.packet import HEADER_BITS, HEADER_BYTES, META, NODE_BITS


def _check_width(data_width):
    if data_width not in (64, 128):
        raise ValueError(f"data_width={data_width}: the Ethernet port takes 64 or 128 bits")
    return data_width


def mac_bytes(mac):
    """A 48-bit address (first byte on the wire in bits 47:40) as 6 byte values, in order."""
    return [mac[8 * (eth.MAC_BYTES - 1 - j):8 * (eth.MAC_BYTES - j)] for j in range(eth.MAC_BYTES)]


def be16(value):
    return [value[8:16], value[0:8]]


class FramerState(enum.Enum):
    IDLE = 0
    LOOKUP = 1
    HEADER = 2
    BODY = 3


class Framer(wiring.Component):
    def __init__(self, data_width: int = 128):
        self.data_width = _check_width(data_width)
        axis = AXIStreamSignature(data_width)
        super().__init__({"i": In(axis), "o": Out(axis), "node_id": In(NODE_BITS),
                          "mac_w_en": In(1), "mac_index": In(range(eth.MAC_TABLE_ENTRIES)),
                          "mac_data": In(eth.MAC_BITS)})

    def elaborate(self, platform):
        m = Module()
        w = self.data_width
        beats = eth.LINK_HEADER_BYTES * 8 // w
        m.submodules.table = table = Memory(shape=eth.MAC_BITS, depth=eth.MAC_TABLE_ENTRIES, init=[])
        wp = table.write_port()
        dst_rp = table.read_port()
        src_rp = table.read_port()
        dst_lo = META.offsets["dst"]
        m.d.comb += [wp.en.eq(self.mac_w_en), wp.addr.eq(self.mac_index), wp.data.eq(self.mac_data),
                     dst_rp.addr.eq(self.i.tdata[dst_lo:dst_lo + NODE_BITS]), src_rp.addr.eq(self.node_id)]
        seq = Signal(eth.SEQ_BITS)
        header = Signal(eth.LINK_HEADER_BYTES * 8)
        beat = Signal(range(beats + 1))
        with m.FSM(name="framer"):
            with m.State(FramerState.IDLE):
                with m.If(self.i.tvalid):
                    m.next = FramerState.LOOKUP
            with m.State(FramerState.LOOKUP):
                m.d.sync += [header.eq(Cat(*mac_bytes(dst_rp.data), *mac_bytes(src_rp.data),
                                           *be16(Const(eth.ETHERTYPE, 16)), *be16(seq))),
                             beat.eq(0)]
                m.next = FramerState.HEADER
            with m.State(FramerState.HEADER):
                m.d.comb += [self.o.tvalid.eq(1), self.o.tkeep.eq((1 << (w // 8)) - 1),
                             self.o.tdata.eq(header.word_select(beat, w))]
                with m.If(self.o.tready):
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(beat == beats - 1):
                        m.next = FramerState.BODY
            with m.State(FramerState.BODY):
                m.d.comb += [self.o.tvalid.eq(self.i.tvalid), self.o.tdata.eq(self.i.tdata),
                             self.o.tkeep.eq(self.i.tkeep), self.o.tlast.eq(self.i.tlast),
                             self.i.tready.eq(self.o.tready)]
                with m.If(self.i.tvalid & self.o.tready & self.i.tlast):
                    m.d.sync += seq.eq(seq + 1)
                    m.next = FramerState.IDLE
        return m


class DeframerState(enum.Enum):
    HEADER = 0
    BODY = 1
    DROP = 2


class Deframer(wiring.Component):
    def __init__(self, data_width: int = 128):
        self.data_width = _check_width(data_width)
        axis = AXIStreamSignature(data_width)
        super().__init__({"i": In(axis), "o": Out(axis), "resync": In(1),
                          "not_mcf": Out(1), "seq_gap": Out(1), "seq_missing": Out(eth.SEQ_BITS)})

    def elaborate(self, platform):
        m = Module()
        w, nb = self.data_width, self.data_width // 8
        beats = eth.LINK_HEADER_BYTES // nb          # link header beats = Meta beats
        i, o = self.i, self.o
        byte = lambda k: i.tdata[8 * (k % nb):8 * (k % nb) + 8]   # byte k of the header, in its beat
        beat = Signal(range(beats + 1))
        synced = Signal()
        expected = Signal(eth.SEQ_BITS)
        m.d.sync += [self.not_mcf.eq(0), self.seq_gap.eq(0), self.seq_missing.eq(0)]
        with m.If(self.resync):
            m.d.sync += synced.eq(0)

        # body bookkeeping
        passed = Signal(range(eth.MAX_FRAME_BYTES + 2 * nb))   # packet bytes before this beat
        total = Signal(range(HEADER_BYTES + (1 << META["length"].width)))
        known = Signal()
        first_meta = Signal(w)                    # the Meta's first beat (64-bit bus)
        meta_word = Signal(HEADER_BITS)
        if beats == 1:
            m.d.comb += meta_word.eq(i.tdata)
        else:
            m.d.comb += meta_word.eq(Cat(first_meta, i.tdata))
        check = header_check(m, meta_word)
        lo = META.offsets["length"]
        this_total = HEADER_BYTES + meta_word[lo:lo + META["length"].width]
        meta_done = beat == beats - 1             # (in BODY: ``beat`` counts packet beats)
        end_total = Signal(len(total))
        end_known = Signal()
        m.d.comb += [end_total.eq(total), end_known.eq(known)]
        with m.If(~known & meta_done & (check == 0)):
            m.d.comb += [end_total.eq(this_total), end_known.eq(1)]

        with m.FSM(name="deframer"):
            with m.State(DeframerState.HEADER):
                m.d.comb += i.tready.eq(1)
                with m.If(i.tvalid):
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(beat == beats - 1):
                        ethertype = Cat(byte(13), byte(12))
                        seq = Cat(byte(15), byte(14))
                        m.d.sync += beat.eq(0)
                        with m.If(ethertype != eth.ETHERTYPE):
                            m.d.sync += self.not_mcf.eq(1)
                            with m.If(~i.tlast):
                                m.next = DeframerState.DROP
                        with m.Elif(i.tlast):
                            m.d.sync += self.not_mcf.eq(1)      # nothing after the header
                        with m.Else():
                            gap = Signal(eth.SEQ_BITS)
                            m.d.comb += gap.eq(seq - expected)
                            with m.If(synced & (gap != 0) & ~self.resync):
                                m.d.sync += [self.seq_gap.eq(1), self.seq_missing.eq(gap)]
                            m.d.sync += [expected.eq(seq + 1), synced.eq(~self.resync),
                                         passed.eq(0), known.eq(0)]
                            m.next = DeframerState.BODY
                    with m.Elif(i.tlast):                     # a frame shorter than its header
                        m.d.sync += [beat.eq(0), self.not_mcf.eq(1)]
            with m.State(DeframerState.BODY):
                m.d.comb += [o.tvalid.eq(i.tvalid), o.tdata.eq(i.tdata), o.tkeep.eq(i.tkeep),
                             o.tlast.eq(i.tlast), i.tready.eq(o.tready)]
                ends = end_known & (end_total <= passed + nb)
                with m.If(ends):
                    keep_bytes = (end_total - passed)[:len(Const(nb))]
                    m.d.comb += [o.tlast.eq(1),
                                 o.tkeep.eq(i.tkeep & ((Const(1, nb + 1) << keep_bytes) - 1))]
                with m.If(i.tvalid & o.tready):
                    m.d.sync += [passed.eq(passed + nb), total.eq(end_total), known.eq(end_known)]
                    with m.If(beat != beats):
                        m.d.sync += beat.eq(beat + 1)
                    if beats > 1:
                        with m.If(beat == 0):
                            m.d.sync += first_meta.eq(i.tdata)
                    with m.If(i.tlast):
                        m.d.sync += beat.eq(0)
                        m.next = DeframerState.HEADER
                    with m.Elif(ends):
                        m.d.sync += beat.eq(0)
                        m.next = DeframerState.DROP
            with m.State(DeframerState.DROP):
                m.d.comb += i.tready.eq(1)
                with m.If(i.tvalid & i.tlast):
                    m.next = DeframerState.HEADER
        return m


@block("eth_framer", "MCF packet -> Ethernet II frame: link header from the MAC table, link sequence number",
       variants=({"data_width": 64},), data_width=128)
def _framer(data_width):
    return Framer(data_width)


@block("eth_deframer", "Ethernet II frame -> MCF packet: EtherType and sequence check, padding cut by Meta.length",
       variants=({"data_width": 64},), data_width=128)
def _deframer(data_width):
    return Deframer(data_width)
