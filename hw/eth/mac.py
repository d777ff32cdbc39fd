"""10G Ethernet MAC on a 64-bit XGMII (IEEE 802.3 clauses 4 and 46).

``MacTx``: frames in (AXI-Stream, 64 bits, destination address first, no FCS), XGMII out.
Each frame gets the preamble and SFD (/S/ replacing the first preamble byte), padding to 60
bytes, the FCS (CRC-32) and /T/.  Frames start in lane 0 or lane 4: after each frame the
inter-frame gap is 12 bytes on average, kept with a deficit idle count (46.3.1.4): a gap is
shortened by up to 3 bytes to start the next frame on a 4-byte boundary while the deficit
stays within 3, and lengthened otherwise.  The input must not run dry inside a frame (a
store-and-forward FIFO feeds it); if it does, the MAC sends /E/ so that the receiver drops
the frame.

``MacRx``: XGMII in, frames out (no preamble, FCS checked and stripped) as words that are
never held back (``tready`` is ignored: the receive path cannot be paused).  A frame's last
word carries ``tuser`` = 1 when the frame is bad; exactly one of ``bad_fcs`` (FCS wrong, bad
preamble/SFD, a control character inside the frame), ``oversize`` (longer than
``max_frame``; reception stops there) and ``runt`` (shorter than 64 bytes) pulses for it.

Both run one XGMII word per cycle with ``en`` high (see ``mcf.hw.eth.common``); their
outputs are qualified by ``en`` so consumers outside the enabled chain see each word once.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axis import AXIStreamSignature
from mcf.hw.eth.common import LANES, XgmiiSignature, enabled
from mcf.hw.eth.crc import PRESET, RESIDUE, crc_step_keep
from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec.eth import IFG_BYTES, MAX_FRAME_BYTES, MIN_DATA_BYTES, MIN_FRAME_BYTES, PREAMBLE, Xgmii

IDLE_WORD = Cat(*[Const(int(Xgmii.IDLE), 8)] * LANES)
ERROR_WORD = Cat(*[Const(int(Xgmii.ERROR), 8)] * LANES)
ALL_CTRL = (1 << LANES) - 1
#: The first XGMII word of a frame started in lane 0: /S/, six 0x55, SFD.
START_WORD = int(Xgmii.START) | int.from_bytes(PREAMBLE[1:], "little") << 8


def dic_schedule(t_lane: int, deficit: int, ifg: int = IFG_BYTES, use_dic: bool = True):
    """After a /T/ at byte ``t_lane`` (0..11) of the word that holds it (counted on the line:
    lanes 4..7 of a frame that started in lane 4 are bytes 4..11 of that word and the next),
    where may the next /S/ go?  Returns ``(words, start_lane, deficit)``: the next frame's
    first word is ``words`` words after the /T/ word, starting in ``start_lane`` (0 or 4)."""
    r = t_lane % 4
    if r == 0:
        gap = ifg
    elif use_dic and deficit + r <= 3:
        gap, deficit = ifg - r, deficit + r
    else:
        gap = ifg + 4 - r
        deficit = max(0, deficit - (4 - r)) if use_dic else 0
    start = t_lane + gap
    assert start % 4 == 0
    return start // 8, start % 8, deficit


class TxState(enum.Enum):
    IDLE = 0
    DATA = 1
    TAIL = 2


class MacTx(wiring.Component):
    def __init__(self, dic: bool = True):
        self.dic = dic
        super().__init__({"i": In(AXIStreamSignature(64)), "o": Out(XgmiiSignature()), "en": In(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        i = self.i

        # --- stage 1: frame words, padded to 60 bytes, with the CRC over them ---------------
        s1_valid, s1_last = Signal(), Signal()
        s1_data = Signal(64)
        s1_bytes = Signal(range(LANES + 1))
        crc = Signal(32, init=PRESET)              # CRC over the frame up to and including s1
        count = Signal(range(MIN_DATA_BYTES + 1))  # bytes so far (saturates at 60)
        first = Signal(init=1)                     # the next word starts a frame
        padding = Signal()
        take = Signal()                            # stage 2 consumes s1 this cycle
        load = Signal()
        m.d.comb += load.eq(~s1_valid | take)

        in_bytes = Signal(range(LANES + 1))
        for k in range(LANES):
            with m.If(i.tkeep[k]):
                m.d.comb += in_bytes.eq(k + 1)
        left = MIN_DATA_BYTES - count               # bytes still needed to reach 60
        word = Signal(64)
        nbytes = Signal(range(LANES + 1))
        last = Signal()
        have = Signal()
        with m.If(padding):
            m.d.comb += [have.eq(1), word.eq(0), nbytes.eq(Mux(left > LANES, LANES, left)),
                         last.eq(left <= LANES)]
        with m.Else():
            mask = Cat(*(i.tkeep[k].replicate(8) for k in range(LANES)))
            m.d.comb += [have.eq(i.tvalid), word.eq(i.tdata & mask), nbytes.eq(in_bytes), last.eq(i.tlast)]
            short = i.tlast & (count + in_bytes < MIN_DATA_BYTES)
            with m.If(short):
                m.d.comb += [nbytes.eq(Mux(left > LANES, LANES, left)), last.eq(left <= LANES)]
            m.d.comb += i.tready.eq(load & self.en)
        crc_start, crc_next = Signal(32), Signal(32)
        m.d.comb += [crc_start.eq(Mux(first, PRESET, crc)), crc_next.eq(crc_step_keep(crc_start, word, nbytes))]
        with m.If(load):
            m.d.sync += s1_valid.eq(have)
            with m.If(have):
                m.d.sync += [s1_data.eq(word), s1_bytes.eq(nbytes), s1_last.eq(last),
                             crc.eq(crc_next),
                             first.eq(last),
                             count.eq(Mux(last, 0, Mux(count + nbytes > MIN_DATA_BYTES, MIN_DATA_BYTES,
                                                      count + nbytes))),
                             padding.eq(~last & (padding | (i.tlast & ~padding)))]

        # --- stage 2: XGMII words aligned to lane 0 ("u"), then the lane-4 shift ------------
        u_data, u_ctrl = Signal(64), Signal(LANES)
        tail_data, tail_ctrl = Signal(64), Signal(LANES)
        tail_t = Signal(range(LANES))              # lane of /T/ in the tail word
        swap = Signal()                             # current frame started in lane 4
        next_swap = Signal()
        deficit = Signal(range(4))
        wait = Signal(range(4))                     # idle words before the next /S/ may go
        t_word = Signal()                            # this u word holds /T/
        t_lane = Signal(range(LANES))
        m.d.comb += [u_data.eq(IDLE_WORD), u_ctrl.eq(ALL_CTRL)]
        fcs = Signal(32)
        m.d.comb += fcs.eq(~crc)
        with m.FSM(name="tx"):
            with m.State(TxState.IDLE):
                with m.If(wait != 0):
                    m.d.sync += wait.eq(wait - 1)
                with m.Elif(s1_valid):
                    m.d.comb += [u_data.eq(START_WORD), u_ctrl.eq(1)]
                    m.d.sync += swap.eq(next_swap)
                    m.next = TxState.DATA
                with m.Else():   # the planned start passed: a later one is aligned to lane 0
                    m.d.sync += [next_swap.eq(0), deficit.eq(0)]
            with m.State(TxState.DATA):
                m.d.comb += take.eq(s1_valid)
                with m.If(~s1_valid):
                    m.d.comb += [u_data.eq(ERROR_WORD), u_ctrl.eq(ALL_CTRL)]   # underrun
                with m.Elif(~s1_last):
                    m.d.comb += [u_data.eq(s1_data), u_ctrl.eq(0)]
                with m.Else():
                    # data bytes, FCS, /T/, idles over 16 byte lanes: this word and a tail
                    with m.Switch(s1_bytes):
                        for n in range(1, LANES + 1):
                            with m.Case(n):
                                lanes = [s1_data[8 * k:8 * k + 8] for k in range(n)]
                                lanes += [fcs[8 * k:8 * k + 8] for k in range(4)]
                                ctrl = [0] * (n + 4) + [1] * (2 * LANES - n - 4)
                                lanes += [Const(int(Xgmii.TERMINATE), 8)]
                                lanes += [Const(int(Xgmii.IDLE), 8)] * (2 * LANES - len(lanes))
                                m.d.comb += [u_data.eq(Cat(*lanes[:LANES])),
                                             u_ctrl.eq(Cat(*(Const(c, 1) for c in ctrl[:LANES])))]
                                if n + 4 < LANES:
                                    m.d.comb += [t_word.eq(1), t_lane.eq(n + 4)]
                                    m.next = TxState.IDLE
                                else:
                                    m.d.sync += [tail_data.eq(Cat(*lanes[LANES:])),
                                                 tail_ctrl.eq(Cat(*(Const(c, 1) for c in ctrl[LANES:]))),
                                                 tail_t.eq(n + 4 - LANES)]
                                    m.next = TxState.TAIL
            with m.State(TxState.TAIL):
                m.d.comb += [u_data.eq(tail_data), u_ctrl.eq(tail_ctrl), t_word.eq(1), t_lane.eq(tail_t)]
                m.next = TxState.IDLE

        # after the /T/ word: when and in which lane the next frame may start
        with m.If(t_word):
            with m.Switch(Cat(t_lane, swap, deficit)):
                for k in range(LANES):
                    for sw in (0, 1):
                        for d in range(4):
                            words, lane, d2 = dic_schedule(k + 4 * sw, d, use_dic=self.dic)
                            with m.Case(k | sw << 3 | d << 4):
                                m.d.sync += [wait.eq(words - 1), next_swap.eq(lane // 4), deficit.eq(d2)]

        # lane-4 shift: a frame that starts in lane 4 leaves 4 bytes later
        held_data, held_ctrl = Signal(32), Signal(4)
        shifted = Signal()
        m.d.comb += shifted.eq(Mux((u_ctrl[0]) & (u_data[:8] == int(Xgmii.START)), next_swap, swap))
        m.d.sync += [held_data.eq(u_data[32:]), held_ctrl.eq(u_ctrl[4:])]
        with m.If(shifted):
            m.d.sync += [self.o.data.eq(Cat(held_data, u_data[:32])), self.o.ctrl.eq(Cat(held_ctrl, u_ctrl[:4]))]
        with m.Else():
            m.d.sync += [self.o.data.eq(u_data), self.o.ctrl.eq(u_ctrl)]
        return enabled(m, self.en)


class RxState(enum.Enum):
    IDLE = 0
    DATA = 1
    DROP = 2


class MacRx(wiring.Component):
    def __init__(self, max_frame: int = MAX_FRAME_BYTES):
        if max_frame < MIN_FRAME_BYTES:
            raise ValueError(f"max_frame={max_frame}: must be >= {MIN_FRAME_BYTES}")
        self.max_frame = max_frame
        super().__init__({"i": In(XgmiiSignature()), "en": In(1, init=1),
                          "o": Out(AXIStreamSignature(64)), "tuser": Out(1),
                          "bad_fcs": Out(1), "runt": Out(1), "oversize": Out(1)})

    def elaborate(self, platform):
        m = Module()
        # --- alignment: a frame that started in lane 4 is shifted down by 4 bytes -----------
        prev_d, prev_c = Signal(64), Signal(LANES)
        swap = Signal()
        m.d.sync += [prev_d.eq(self.i.data), prev_c.eq(self.i.ctrl)]
        start_at = lambda k: prev_c[k] & (prev_d[8 * k:8 * k + 8] == int(Xgmii.START))
        swap_now = Signal()
        m.d.comb += swap_now.eq(Mux(start_at(0), 0, Mux(start_at(4), 1, swap)))
        m.d.sync += swap.eq(swap_now)
        a_d, a_c = Signal(64), Signal(LANES)        # registered, aligned word
        with m.If(swap_now):
            m.d.sync += [a_d.eq(Cat(prev_d[32:], self.i.data[:32])), a_c.eq(Cat(prev_c[4:], self.i.ctrl[:4]))]
        with m.Else():
            m.d.sync += [a_d.eq(prev_d), a_c.eq(prev_c)]

        # --- classification of the aligned word ------------------------------------------------
        lane = lambda k: a_d[8 * k:8 * k + 8]
        is_start = a_c[0] & (lane(0) == int(Xgmii.START))
        preamble_ok = (a_c[1:] == 0) & (a_d[8:] == int.from_bytes(PREAMBLE[1:], "little"))
        first_ctrl = Signal(range(LANES + 1))       # lanes of data before the first control char
        m.d.comb += first_ctrl.eq(LANES)
        for k in reversed(range(LANES)):
            with m.If(a_c[k]):
                m.d.comb += first_ctrl.eq(k)
        ends_ok = Signal()                           # the first control character is /T/
        with m.Switch(first_ctrl):
            for k in range(LANES):
                with m.Case(k):
                    m.d.comb += ends_ok.eq(lane(k) == int(Xgmii.TERMINATE))

        # --- frame state -----------------------------------------------------------------------
        crc = Signal(32, init=PRESET)
        count = Signal(range(self.max_frame + LANES + 1))
        hold = Signal(64)
        hold_valid = Signal()
        flush = Signal()            # the next cycle emits the frame's last word (from hold)
        flush_bytes = Signal(range(LANES + 1))
        flush_error = Signal()
        o_data, o_keep, o_last, o_valid, o_bad = Signal(64), Signal(LANES), Signal(), Signal(), Signal()
        ev_fcs, ev_runt, ev_over = Signal(), Signal(), Signal()
        m.d.sync += [o_valid.eq(0), ev_fcs.eq(0), ev_runt.eq(0), ev_over.eq(0)]

        with m.If(flush):
            # the frame's last word: its CRC is now registered
            bad_crc = crc != RESIDUE
            runt = count < MIN_FRAME_BYTES
            m.d.sync += [o_valid.eq(1), o_data.eq(hold), o_last.eq(1), flush.eq(0), hold_valid.eq(0),
                         o_keep.eq(Mux(hold_valid, (Const(1, LANES + 1) << flush_bytes) - 1, 1)),
                         o_bad.eq(flush_error | bad_crc | runt),
                         ev_fcs.eq(flush_error | bad_crc), ev_runt.eq(~flush_error & ~bad_crc & runt)]

        def emit_hold():
            m.d.sync += [o_valid.eq(1), o_data.eq(hold), o_keep.eq(ALL_CTRL), o_last.eq(0), o_bad.eq(0)]

        nb = Signal(range(LANES + 1))               # data bytes in this word (FCS included)
        crc_next = Signal(32)
        m.d.comb += [nb.eq(first_ctrl), crc_next.eq(crc_step_keep(crc, a_d, nb))]

        def begin():
            m.d.sync += [crc.eq(PRESET), count.eq(0), hold_valid.eq(0), flush_error.eq(0)]
            with m.If(preamble_ok):
                m.next = RxState.DATA
            with m.Else():      # a bad preamble/SFD: counted as a bad frame, nothing emitted
                m.d.sync += ev_fcs.eq(1)
                m.next = RxState.DROP

        with m.FSM(name="rx"):
            with m.State(RxState.IDLE):
                with m.If(is_start):
                    begin()
            with m.State(RxState.DATA):
                m.d.sync += [crc.eq(crc_next), count.eq(count + nb)]
                with m.If(count + nb > self.max_frame):
                    # too long: end the frame here (bad), drop the rest until a control char
                    m.d.sync += [o_valid.eq(1), o_data.eq(hold), o_keep.eq(ALL_CTRL), o_last.eq(1),
                                 o_bad.eq(1), ev_over.eq(1), hold_valid.eq(0)]
                    m.next = RxState.DROP
                    with m.If(first_ctrl != LANES):     # it ended in this word anyway
                        m.next = RxState.IDLE
                with m.Elif(first_ctrl == LANES):
                    with m.If(hold_valid):
                        emit_hold()
                    m.d.sync += [hold.eq(a_d), hold_valid.eq(1)]
                with m.Else():
                    # the frame ends in this word with first_ctrl bytes; the FCS is its last 4
                    m.d.sync += [flush.eq(1), flush_error.eq(~ends_ok)]
                    with m.If(first_ctrl > 4):
                        with m.If(hold_valid):
                            emit_hold()
                        m.d.sync += [hold.eq(a_d), hold_valid.eq(1), flush_bytes.eq(first_ctrl - 4)]
                    with m.Elif(first_ctrl == 4):
                        m.d.sync += flush_bytes.eq(LANES)
                    with m.Else():
                        m.d.sync += flush_bytes.eq(first_ctrl + 4)
                    m.next = RxState.IDLE
            with m.State(RxState.DROP):
                with m.If(is_start):          # the next frame may follow at once
                    begin()
                with m.Elif(a_c.any()):
                    m.next = RxState.IDLE

        m.d.comb += [
            self.o.tdata.eq(o_data), self.o.tkeep.eq(o_keep), self.o.tlast.eq(o_last),
            self.o.tvalid.eq(o_valid & self.en), self.tuser.eq(o_bad),
            self.bad_fcs.eq(ev_fcs & self.en), self.runt.eq(ev_runt & self.en),
            self.oversize.eq(ev_over & self.en),
        ]
        return enabled(m, self.en)


@block("eth_mac_tx", "10G Ethernet MAC transmit: preamble, padding, FCS, IFG with deficit idle count")
def _mac_tx():
    return MacTx()


@block("eth_mac_rx", "10G Ethernet MAC receive: FCS check and strip, runt/oversize drop",
       max_frame=MAX_FRAME_BYTES, ranges={"max_frame": Range(MIN_FRAME_BYTES, MAX_FRAME_BYTES)})
def _mac_rx(max_frame):
    return MacRx(max_frame)
