"""10GBASE-R PCS (IEEE 802.3 clause 49): 64b/66b encoder and decoder, block lock, BER monitor,
and the two halves that chain them with the scrambler and the gearbox.

Transmit:  XGMII ──► Encoder ──► Scrambler ──► TxGearbox ──► GT (64 bits at 161 MHz)
Receive:   GT ──► RxGearbox ──► Descrambler ──► Decoder ──► XGMII
                      ▲  └─────► BlockLock (slip) / BerMonitor (hi_ber)
                      └──── slip

Block formats are figure 49-7 (``mcf.spec.eth.BlockType``); control characters map to the
7-bit codes of table 49-1 (idle, error; LPI passes through).  Anything the encoder cannot
express becomes an error block (/E/ in all lanes), and the decoder turns an invalid block
(bad sync header, unknown block type, bad control code) into /E/ in all lanes, so a frame
it hits fails its FCS.  While the receiver has no block lock or reports a high BER, the
decoder sends the local-fault ordered set (49.2.14 LBLOCK_R).
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.eth.common import LANES, BlockSignature, XgmiiSignature, enabled
from mcf.hw.eth.gearbox import RxGearbox, TxGearbox
from mcf.hw.eth.scrambler import Descrambler, Scrambler
from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec.eth import (BER_BAD_HEADERS, BER_WINDOW_BLOCKS, LOCK_BAD_HEADERS, LOCK_GOOD_HEADERS,
                          O_CODE_SEQUENCE, SYNC_CTRL, SYNC_DATA, TERMINATE_TYPES, BlockType, ControlCode,
                          Xgmii)

#: XGMII control character <-> 7-bit control code (the characters a C lane may carry).
CODES = {Xgmii.IDLE: ControlCode.IDLE, Xgmii.ERROR: ControlCode.ERROR, 0x06: ControlCode.LPI}
#: Ordered-set code (4 bits) <-> XGMII character in an O lane.
O_CODES = {O_CODE_SEQUENCE: Xgmii.SEQUENCE, 0xF: Xgmii.SIGNAL}
#: Local fault: sequence ordered set with data 0x00 0x00 0x01, in both halves (clause 46).
LOCAL_FAULT = (Xgmii.SEQUENCE, 0x00, 0x00, 0x01) * 2


def _lanes(word, width=8, n=LANES):
    return [word[width * k:width * (k + 1)] for k in range(n)]


class Encoder(wiring.Component):
    """XGMII -> 64b/66b block, one register stage (advances while ``en``)."""

    def __init__(self):
        super().__init__({"i": In(XgmiiSignature()), "o": Out(BlockSignature()), "en": In(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        d, c = _lanes(self.i.data), self.i.ctrl
        code = [Signal(7, name=f"code{k}") for k in range(LANES)]
        code_ok = Signal(LANES)
        for k in range(LANES):
            with m.Switch(d[k]):
                for char, cc in CODES.items():
                    with m.Case(int(char)):
                        m.d.comb += [code[k].eq(int(cc)), code_ok[k].eq(c[k])]
        is_char = lambda k, ch: c[k] & (d[k] == int(ch))
        data = Signal(64)
        header = Signal(2)
        m.d.comb += [header.eq(SYNC_CTRL),
                     data.eq(Cat(Const(int(BlockType.C7), 8), *([Const(int(ControlCode.ERROR), 7)] * 8)))]
        with m.If(c == 0):
            m.d.comb += [header.eq(SYNC_DATA), data.eq(self.i.data)]
        with m.Elif(code_ok.all()):
            m.d.comb += data.eq(Cat(Const(int(BlockType.C7), 8), *code))
        with m.Elif(is_char(0, Xgmii.START) & (c[1:] == 0)):
            m.d.comb += data.eq(Cat(Const(int(BlockType.S0), 8), self.i.data[8:]))
        with m.Elif(code_ok[:4].all() & is_char(4, Xgmii.START) & (c[5:] == 0)):
            m.d.comb += data.eq(Cat(Const(int(BlockType.C3_S4), 8), *code[:4], Const(0, 4), self.i.data[40:]))
        for k in range(LANES):
            # T_k: k data lanes, /T/ in lane k, control codes after it
            ok = is_char(k, Xgmii.TERMINATE) & (c[:k] == 0 if k else Const(1))
            if k < LANES - 1:
                ok = ok & code_ok[k + 1:].all()
            with m.Elif(ok):
                m.d.comb += data.eq(Cat(Const(int(TERMINATE_TYPES[k]), 8), self.i.data[:8 * k],
                                        Const(0, 7 - k), *code[k + 1:]))
        m.d.sync += [self.o.data.eq(data), self.o.header.eq(header)]
        return enabled(m, self.en)


class Decoder(wiring.Component):
    """64b/66b block -> XGMII, one register stage (advances while ``en``).  ``fault`` (no
    block lock or a high BER) replaces every block with the local-fault ordered set;
    ``invalid`` strobes with each block that decoded to /E/."""

    def __init__(self):
        super().__init__({"i": In(BlockSignature()), "o": Out(XgmiiSignature()), "en": In(1, init=1),
                          "fault": In(1), "invalid": Out(1)})

    def elaborate(self, platform):
        m = Module()
        p = self.i.data
        pb = _lanes(p)                       # payload bytes; pb[0] = block type
        out_d = [Signal(8, name=f"d{k}") for k in range(LANES)]
        out_c = Signal(LANES)
        bad = Signal()

        def ccode(bits, k):
            """Lane k from a 7-bit control code; an unknown code makes the block invalid."""
            known = Const(0)
            for char, cc in CODES.items():
                known = known | (bits == int(cc))
                with m.If(bits == int(cc)):
                    m.d.comb += out_d[k].eq(int(char))
            m.d.comb += out_c[k].eq(1)
            with m.If(~known):
                m.d.comb += bad.eq(1)

        def ocode(bits, k):
            known = Const(0)
            for oc, char in O_CODES.items():
                known = known | (bits == oc)
                with m.If(bits == oc):
                    m.d.comb += out_d[k].eq(int(char))
            m.d.comb += out_c[k].eq(1)
            with m.If(~known):
                m.d.comb += bad.eq(1)

        def data_lane(k, src):
            m.d.comb += [out_d[k].eq(src), out_c[k].eq(0)]

        def start_lane(k):
            m.d.comb += [out_d[k].eq(int(Xgmii.START)), out_c[k].eq(1)]

        codes = [p[8 + 7 * k:15 + 7 * k] for k in range(LANES)]      # C0..C7 of a 0x1E block
        with m.If(self.i.header == SYNC_DATA):
            for k in range(LANES):
                data_lane(k, pb[k])
        with m.Elif(self.i.header == SYNC_CTRL):
            with m.Switch(pb[0]):
                with m.Case(int(BlockType.C7)):
                    for k in range(LANES):
                        ccode(codes[k], k)
                with m.Case(int(BlockType.S0)):
                    start_lane(0)
                    for k in range(1, LANES):
                        data_lane(k, pb[k])
                with m.Case(int(BlockType.C3_S4)):
                    for k in range(4):
                        ccode(codes[k], k)
                    start_lane(4)
                    for k in range(5, LANES):
                        data_lane(k, pb[k])
                with m.Case(int(BlockType.C3_O4)):
                    for k in range(4):
                        ccode(codes[k], k)
                    ocode(p[36:40], 4)
                    for k in range(5, LANES):
                        data_lane(k, pb[k])
                with m.Case(int(BlockType.O0_S4)):
                    ocode(p[32:36], 0)
                    for k in range(1, 4):
                        data_lane(k, pb[k])
                    start_lane(4)
                    for k in range(5, LANES):
                        data_lane(k, pb[k])
                with m.Case(int(BlockType.O0_O4)):
                    ocode(p[32:36], 0)
                    ocode(p[36:40], 4)
                    for k in (1, 2, 3, 5, 6, 7):
                        data_lane(k, pb[k])
                with m.Case(int(BlockType.O0_C4)):
                    ocode(p[32:36], 0)
                    for k in range(1, 4):
                        data_lane(k, pb[k])
                    for k in range(4, LANES):
                        ccode(p[36 + 7 * (k - 4):43 + 7 * (k - 4)], k)
                for t, btype in enumerate(TERMINATE_TYPES):
                    with m.Case(int(btype)):
                        for k in range(t):
                            data_lane(k, pb[k + 1])
                        m.d.comb += [out_d[t].eq(int(Xgmii.TERMINATE)), out_c[t].eq(1)]
                        base = 8 + 8 * t + (7 - t)
                        for j, k in enumerate(range(t + 1, LANES)):
                            ccode(p[base + 7 * j:base + 7 * j + 7], k)
                with m.Default():
                    m.d.comb += bad.eq(1)
        with m.Else():
            m.d.comb += bad.eq(1)

        error_word = Cat(*[Const(int(Xgmii.ERROR), 8)] * LANES)
        fault_word = Cat(*[Const(int(v), 8) for v in LOCAL_FAULT])
        fault_ctrl = Cat(*[Const(int(i % 4 == 0), 1) for i in range(LANES)])
        with m.If(self.fault):
            m.d.sync += [self.o.data.eq(fault_word), self.o.ctrl.eq(fault_ctrl), self.invalid.eq(0)]
        with m.Elif(bad):
            m.d.sync += [self.o.data.eq(error_word), self.o.ctrl.eq((1 << LANES) - 1), self.invalid.eq(1)]
        with m.Else():
            m.d.sync += [self.o.data.eq(Cat(*out_d)), self.o.ctrl.eq(out_c), self.invalid.eq(0)]
        return enabled(m, self.en)


class BlockLock(wiring.Component):
    """Block lock by sync-header search (IEEE 802.3 figure 49-14): count 64 headers; with
    none invalid, lock; unlocked, any invalid header slips the gearbox by one bit; locked,
    16 invalid headers among 64 drop the lock and slip.  After a slip the next
    ``holdoff`` blocks are ignored (they were aligned before the slip took effect).

    ``header`` is taken on cycles with ``valid``; ``slip`` is a one-cycle pulse;
    ``lost`` pulses when ``lock`` falls."""

    def __init__(self, holdoff: int = 2):
        self.holdoff = holdoff
        super().__init__({"header": In(2), "valid": In(1), "lock": Out(1), "slip": Out(1),
                          "lost": Out(1)})

    def elaborate(self, platform):
        m = Module()
        sh_cnt = Signal(range(LOCK_GOOD_HEADERS + 1))
        bad_cnt = Signal(range(LOCK_BAD_HEADERS + 1))
        wait = Signal(range(self.holdoff + 1))
        good = (self.header == SYNC_DATA) | (self.header == SYNC_CTRL)
        m.d.sync += [self.slip.eq(0), self.lost.eq(0)]
        with m.If(self.valid):
            with m.If(wait != 0):
                m.d.sync += wait.eq(wait - 1)
            with m.Else():
                cnt_next = sh_cnt + 1
                bad_next = bad_cnt + ~good
                m.d.sync += [sh_cnt.eq(cnt_next), bad_cnt.eq(bad_next)]
                with m.If(~good & (~self.lock | (bad_next == LOCK_BAD_HEADERS))):
                    # SLIP
                    m.d.sync += [self.lock.eq(0), self.slip.eq(1), sh_cnt.eq(0), bad_cnt.eq(0),
                                 wait.eq(self.holdoff), self.lost.eq(self.lock)]
                with m.Elif(cnt_next == LOCK_GOOD_HEADERS):
                    m.d.sync += [sh_cnt.eq(0), bad_cnt.eq(0)]
                    with m.If(bad_next == 0):
                        m.d.sync += self.lock.eq(1)
        return m


class BerMonitor(wiring.Component):
    """High-BER detection (IEEE 802.3 figure 49-15): while locked, count invalid sync headers
    in windows of ``window`` blocks (125 us at 156.25 M blocks/s); 16 in one window raise
    ``hi_ber``, a whole window with fewer clears it.  ``rising`` pulses when ``hi_ber`` rises."""

    def __init__(self, window: int = BER_WINDOW_BLOCKS):
        if window < BER_BAD_HEADERS:
            raise ValueError(f"window={window}: must be >= {BER_BAD_HEADERS} blocks")
        self.window = window
        super().__init__({"header": In(2), "valid": In(1), "lock": In(1), "hi_ber": Out(1),
                          "rising": Out(1)})

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self.window))
        count = Signal(range(BER_BAD_HEADERS + 1))
        bad = (self.header != SYNC_DATA) & (self.header != SYNC_CTRL)
        m.d.sync += self.rising.eq(0)
        with m.If(~self.lock):
            m.d.sync += [timer.eq(0), count.eq(0), self.hi_ber.eq(0)]
        with m.Elif(self.valid):
            done = timer == self.window - 1
            m.d.sync += timer.eq(Mux(done, 0, timer + 1))
            with m.If(done):
                m.d.sync += count.eq(0)
                with m.If(count + bad < BER_BAD_HEADERS):
                    m.d.sync += self.hi_ber.eq(0)
            with m.Elif(bad & (count != BER_BAD_HEADERS)):
                m.d.sync += count.eq(count + 1)
                with m.If(count + 1 == BER_BAD_HEADERS):
                    m.d.sync += [self.hi_ber.eq(1), self.rising.eq(~self.hi_ber)]
        return m


class PcsTx(wiring.Component):
    """XGMII in, GT data out: encoder, scrambler, gearbox.  ``en`` (out) is the gearbox's
    request: the XGMII source (the MAC) advances with it."""

    def __init__(self, bit_reverse: bool = False):
        self.bit_reverse = bit_reverse
        super().__init__({"xgmii": In(XgmiiSignature()), "en": Out(1), "gt_data": Out(64)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.encoder = enc = Encoder()
        m.submodules.scrambler = scr = Scrambler()
        m.submodules.gearbox = gbx = TxGearbox(self.bit_reverse)
        wiring.connect(m, wiring.flipped(self.xgmii), enc.i)
        wiring.connect(m, enc.o, scr.i)
        wiring.connect(m, scr.o, gbx.i)
        m.d.comb += [enc.en.eq(gbx.req), scr.en.eq(gbx.req), self.en.eq(gbx.req),
                     self.gt_data.eq(gbx.gt_data)]
        return m


class PcsRx(wiring.Component):
    """GT data in, XGMII out (valid on cycles with ``en``): gearbox, block lock, BER monitor,
    descrambler, decoder.  ``lock``, ``hi_ber`` are the receiver's status; ``lock_lost`` and
    ``hi_ber_rising`` pulse once per event."""

    def __init__(self, bit_reverse: bool = False, ber_window: int = BER_WINDOW_BLOCKS):
        self.bit_reverse, self.ber_window = bit_reverse, ber_window
        super().__init__({"gt_data": In(64), "xgmii": Out(XgmiiSignature()), "en": Out(1),
                          "lock": Out(1), "hi_ber": Out(1), "lock_lost": Out(1), "hi_ber_rising": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.gearbox = gbx = RxGearbox(self.bit_reverse)
        m.submodules.lock = lock = BlockLock()
        m.submodules.ber = ber = BerMonitor(self.ber_window)
        m.submodules.descrambler = dsc = Descrambler()
        m.submodules.decoder = dec = Decoder()
        m.d.comb += [gbx.gt_data.eq(self.gt_data), gbx.slip.eq(lock.slip),
                     lock.header.eq(gbx.o.header), lock.valid.eq(gbx.valid),
                     ber.header.eq(gbx.o.header), ber.valid.eq(gbx.valid), ber.lock.eq(lock.lock)]
        wiring.connect(m, gbx.o, dsc.i)
        wiring.connect(m, dsc.o, dec.i)
        # the descrambler and decoder advance with the gearbox's block valid; the status that
        # decides the local fault is sampled in step with the block it applies to
        m.d.comb += [dsc.en.eq(gbx.valid), dec.en.eq(gbx.valid),
                     dec.fault.eq(~lock.lock | ber.hi_ber)]
        # the decoder's output register holds one word per enabled cycle
        m.d.comb += self.en.eq(gbx.valid)
        wiring.connect(m, dec.o, wiring.flipped(self.xgmii))
        m.d.comb += [self.lock.eq(lock.lock), self.hi_ber.eq(ber.hi_ber),
                     self.lock_lost.eq(lock.lost), self.hi_ber_rising.eq(ber.rising)]
        return m


@block("eth_pcs_tx", "10GBASE-R PCS transmit: 64b/66b encoder, scrambler, 66:64 gearbox")
def _pcs_tx():
    return PcsTx()


@block("eth_pcs_rx", "10GBASE-R PCS receive: 64:66 gearbox, block lock, BER monitor, descrambler, decoder",
       ber_window=BER_WINDOW_BLOCKS, ranges={"ber_window": Range(2, 1 << 20)})
def _pcs_rx(ber_window):
    return PcsRx(ber_window=ber_window)
