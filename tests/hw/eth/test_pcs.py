"""10GBASE-R PCS (hw/eth/pcs.py): the 64b/66b codec against a table written from IEEE 802.3
figure 49-7, and encode -> scramble -> gearbox -> serial link -> slip -> lock -> descramble ->
decode round trips of cocotbext-eth XGMII frames, with bit slips and bit errors injected:
block lock is regained, and lock losses and high-BER events are counted.

The cocotb coroutines (``run_*``) and the pytest runner share this file and ``PARAMS``.
"""
from __future__ import annotations

import random

import cocotb
import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge
from cocotbext.eth import XgmiiFrame, XgmiiSink, XgmiiSource

from mcf.sim.cocotb_util import bounded, params, start

PARAMS = {"seed": 5, "words": 400, "blocks": 400, "frames": 12, "ber_window": 256, "link_delay": 2}

# --- the reference: figure 49-7 as a table -------------------------------------------------
IDLE, START, TERM, ERROR, SEQ, SIG = 0x07, 0xFB, 0xFD, 0xFE, 0x9C, 0x5C
CODE = {IDLE: 0x00, ERROR: 0x1E, 0x06: 0x06}          # XGMII character -> 7-bit control code
OCODE = {SEQ: 0x0, SIG: 0xF}
SYNC_DATA, SYNC_CTRL = 0b10, 0b01
# Payload fields after the type byte, in transmission order: (kind, lane) with kind
# D data byte, C 7-bit control code, O 4-bit ordered-set code, Z zero bits (lane = count).
# Lanes not listed hold /S/ (start) or /T/ (terminate) as the name says.
FORMATS = {
    0x1E: ("", [("C", k) for k in range(8)]),
    0x2D: ("", [("C", 0), ("C", 1), ("C", 2), ("C", 3), ("O", 4), ("D", 5), ("D", 6), ("D", 7)]),
    0x33: ("S4", [("C", 0), ("C", 1), ("C", 2), ("C", 3), ("Z", 4), ("D", 5), ("D", 6), ("D", 7)]),
    0x66: ("S4", [("D", 1), ("D", 2), ("D", 3), ("O", 0), ("Z", 4), ("D", 5), ("D", 6), ("D", 7)]),
    0x55: ("", [("D", 1), ("D", 2), ("D", 3), ("O", 0), ("O", 4), ("D", 5), ("D", 6), ("D", 7)]),
    0x78: ("S0", [("D", k) for k in range(1, 8)]),
    0x4B: ("", [("D", 1), ("D", 2), ("D", 3), ("O", 0), ("C", 4), ("C", 5), ("C", 6), ("C", 7)]),
    0x87: ("T0", [("Z", 7)] + [("C", k) for k in range(1, 8)]),
    0x99: ("T1", [("D", 0), ("Z", 6)] + [("C", k) for k in range(2, 8)]),
    0xAA: ("T2", [("D", 0), ("D", 1), ("Z", 5)] + [("C", k) for k in range(3, 8)]),
    0xB4: ("T3", [("D", k) for k in range(3)] + [("Z", 4)] + [("C", k) for k in range(4, 8)]),
    0xCC: ("T4", [("D", k) for k in range(4)] + [("Z", 3)] + [("C", k) for k in range(5, 8)]),
    0xD2: ("T5", [("D", k) for k in range(5)] + [("Z", 2)] + [("C", k) for k in range(6, 8)]),
    0xE1: ("T6", [("D", k) for k in range(6)] + [("Z", 1), ("C", 7)]),
    0xFF: ("T7", [("D", k) for k in range(7)]),
}
WIDTH = {"D": 8, "C": 7, "O": 4}
ERROR_WORD = (int.from_bytes(bytes([ERROR] * 8), "little"), 0xFF)


def lanes_of(word, ctrl):
    return [((word >> 8 * k) & 0xFF, (ctrl >> k) & 1) for k in range(8)]


def ref_encode(word, ctrl):
    """XGMII word -> (header, payload) or the error block if no format expresses it."""
    lanes = lanes_of(word, ctrl)
    if ctrl == 0:
        return SYNC_DATA, word
    for btype, (special, fields) in FORMATS.items():
        kinds = {}
        if special:
            kinds[int(special[1])] = special[0]
        for kind, lane in fields:
            if kind != "Z":
                kinds[lane] = kind
        ok = True
        for k, (d, c) in enumerate(lanes):
            kind = kinds[k]
            if kind == "D":
                ok &= c == 0
            elif kind == "C":
                ok &= c == 1 and d in CODE
            elif kind == "O":
                ok &= c == 1 and d in OCODE
            elif kind == "S":
                ok &= c == 1 and d == START
            elif kind == "T":
                ok &= c == 1 and d == TERM
        if not ok or btype in (0x2D, 0x66, 0x55, 0x4B):   # ordered sets: the MAC never sends them
            continue
        payload, pos = btype, 8
        for kind, lane in fields:
            if kind == "Z":
                pos += lane
                continue
            d = lanes[lane][0]
            value = d if kind == "D" else CODE[d] if kind == "C" else OCODE[d]
            payload |= value << pos
            pos += WIDTH[kind]
        assert pos == 64
        return SYNC_CTRL, payload
    return SYNC_CTRL, 0x1E | sum(0x1E << (8 + 7 * k) for k in range(8))


def ref_decode(header, payload):
    """(header, payload) -> XGMII (word, ctrl); invalid blocks -> /E/ in every lane."""
    if header == SYNC_DATA:
        return payload, 0
    if header != SYNC_CTRL or (payload & 0xFF) not in FORMATS:
        return ERROR_WORD
    special, fields = FORMATS[payload & 0xFF]
    lanes = [None] * 8
    if special:
        lanes[int(special[1])] = (START if special[0] == "S" else TERM, 1)
    pos = 8
    for kind, lane in fields:
        if kind == "Z":
            pos += lane
            continue
        v = (payload >> pos) & ((1 << WIDTH[kind]) - 1)
        pos += WIDTH[kind]
        if kind == "D":
            lanes[lane] = (v, 0)
        elif kind == "C":
            char = {c: x for x, c in CODE.items()}.get(v)
            if char is None:
                return ERROR_WORD
            lanes[lane] = (char, 1)
        else:
            char = {c: x for x, c in OCODE.items()}.get(v)
            if char is None:
                return ERROR_WORD
            lanes[lane] = (char, 1)
    return (sum(d << 8 * k for k, (d, _) in enumerate(lanes)), sum(c << k for k, (_, c) in enumerate(lanes)))


def random_xgmii(rng):
    """XGMII words of every shape the encoder must handle (and some it must refuse)."""
    data = [rng.getrandbits(8) for _ in range(8)]
    kind = rng.randrange(8)
    if kind == 0:
        return sum(d << 8 * k for k, d in enumerate(data)), 0
    if kind == 1:
        chars = [rng.choice([IDLE, IDLE, ERROR]) for _ in range(8)]
        return sum(c << 8 * k for k, c in enumerate(chars)), 0xFF
    if kind == 2:   # start in lane 0
        return (sum(d << 8 * k for k, d in enumerate(data)) & ~0xFF) | START, 0x01
    if kind == 3:   # idles then start in lane 4
        word = sum(d << 8 * k for k, d in enumerate(data))
        word = (word & ~0xFFFFFFFFFF) | (START << 32) | int.from_bytes(bytes([IDLE] * 4), "little")
        return word, 0x1F
    if kind in (4, 5):   # terminate in lane t
        t = rng.randrange(8)
        lanes = [(d, 0) for d in data[:t]] + [(TERM, 1)] + [(IDLE, 1)] * (7 - t)
        return sum(d << 8 * k for k, (d, _) in enumerate(lanes)), sum(c << k for k, (_, c) in enumerate(lanes))
    # anything: random control bits and characters (mostly unencodable)
    chars = [rng.choice([IDLE, START, TERM, ERROR, SEQ, rng.getrandbits(8)]) for _ in range(8)]
    ctrl = rng.getrandbits(8)
    return sum((chars[k] if (ctrl >> k) & 1 else data[k]) << 8 * k for k in range(8)), ctrl


def random_block(rng):
    """Blocks of every type (ordered sets included) and invalid ones, for the decoder."""
    r = rng.random()
    if r < 0.2:
        return SYNC_DATA, rng.getrandbits(64)
    if r < 0.3:
        return rng.choice([0, 3]), rng.getrandbits(64)
    btype = rng.choice(list(FORMATS) + [rng.getrandbits(8)])
    payload = rng.getrandbits(64) & ~0xFF | btype
    if btype in FORMATS and rng.random() < 0.7:   # make the codes valid most of the time
        pos = 8
        for kind, lane in FORMATS[btype][1]:
            if kind == "Z":
                payload &= ~(((1 << lane) - 1) << pos)
                pos += lane
                continue
            w = WIDTH[kind]
            if kind == "C":
                payload = payload & ~(0x7F << pos) | (rng.choice([0x00, 0x1E, 0x06]) << pos)
            elif kind == "O":
                payload = payload & ~(0xF << pos) | (rng.choice([0x0, 0xF]) << pos)
            pos += w
    return SYNC_CTRL, payload


def test_reference_round_trip():
    """The reference codec is consistent with itself on every encodable word."""
    rng = random.Random(1)
    for _ in range(3000):
        word, ctrl = random_xgmii(rng)
        header, payload = ref_encode(word, ctrl)
        back = ref_decode(header, payload)
        if (header, payload) != ref_encode(*ERROR_WORD):
            assert back == (word, ctrl)


# --- DUT wrappers ---------------------------------------------------------------------------
class Codec(wiring.Component):
    """Encoder and decoder side by side (not chained): each against the reference."""

    def __init__(self):
        from mcf.hw.eth.common import BlockSignature, XgmiiSignature
        super().__init__({"enc_i": In(XgmiiSignature()), "enc_o": Out(BlockSignature()),
                          "dec_i": In(BlockSignature()), "dec_o": Out(XgmiiSignature()), "en": In(1)})

    def elaborate(self, platform):
        from mcf.hw.eth.pcs import Decoder, Encoder
        m = Module()
        m.submodules.enc = enc = Encoder()
        m.submodules.dec = dec = Decoder()
        wiring.connect(m, wiring.flipped(self.enc_i), enc.i)
        wiring.connect(m, enc.o, wiring.flipped(self.enc_o))
        wiring.connect(m, wiring.flipped(self.dec_i), dec.i)
        wiring.connect(m, dec.o, wiring.flipped(self.dec_o))
        m.d.comb += [enc.en.eq(self.en), dec.en.eq(self.en)]
        return m


class PcsLoop(wiring.Component):
    """PcsTx -> SerialLink -> PcsRx in one clock domain."""

    def __init__(self, ber_window, link_delay):
        from mcf.hw.eth.common import XgmiiSignature
        self.ber_window, self.link_delay = ber_window, link_delay
        super().__init__({"xgmii_tx": In(XgmiiSignature()), "tx_en": Out(1),
                          "xgmii_rx": Out(XgmiiSignature()), "rx_en": Out(1),
                          "lock": Out(1), "hi_ber": Out(1), "lock_lost": Out(1), "hi_ber_rising": Out(1),
                          "slip": In(1), "flip": In(64), "cut": In(1), "line": Out(64)})

    def elaborate(self, platform):
        from mcf.hw.eth.pcs import PcsRx, PcsTx
        from mcf.sim.eth.link import SerialLink
        m = Module()
        m.submodules.tx = tx = PcsTx()
        m.submodules.link = link = SerialLink(self.link_delay)
        m.submodules.rx = rx = PcsRx(ber_window=self.ber_window)
        wiring.connect(m, wiring.flipped(self.xgmii_tx), tx.xgmii)
        wiring.connect(m, rx.xgmii, wiring.flipped(self.xgmii_rx))
        m.d.comb += [link.tx.eq(tx.gt_data), rx.gt_data.eq(link.rx), self.line.eq(tx.gt_data),
                     link.slip.eq(self.slip), link.flip.eq(self.flip), link.cut.eq(self.cut),
                     self.tx_en.eq(tx.en), self.rx_en.eq(rx.en), self.lock.eq(rx.lock),
                     self.hi_ber.eq(rx.hi_ber), self.lock_lost.eq(rx.lock_lost),
                     self.hi_ber_rising.eq(rx.hi_ber_rising)]
        return m


# --- cocotb ----------------------------------------------------------------------------------
@cocotb.test()
async def run_codec(dut):
    """Encoder and decoder, word by word, against the figure 49-7 table (random pauses)."""
    p = params()
    rng = random.Random(p["seed"])
    await start(dut)
    words = [random_xgmii(rng) for _ in range(p["words"])]
    blocks = [random_block(rng) for _ in range(p["words"])]
    await FallingEdge(dut.clk)
    pending, i = False, 0
    while i < len(words) or pending:
        if pending:
            w, c = words[i - 1]
            got = (int(dut.enc_o__header.value), int(dut.enc_o__data.value))
            assert got == ref_encode(w, c), f"encode {w:#018x}/{c:#04x}: {got} != {ref_encode(w, c)}"
            h, pl = blocks[i - 1]
            got = (int(dut.dec_o__data.value), int(dut.dec_o__ctrl.value))
            assert got == ref_decode(h, pl), f"decode {h}/{pl:#018x}: {got} != {ref_decode(h, pl)}"
        en = rng.random() < 0.8 and i < len(words)
        dut.en.value = int(en)
        if en:
            dut.enc_i__data.value, dut.enc_i__ctrl.value = words[i]
            dut.dec_i__header.value, dut.dec_i__data.value = blocks[i]
            i += 1
        pending = en
        await FallingEdge(dut.clk)


class EventCounter:
    def __init__(self, dut, signal):
        self.count = 0
        cocotb.start_soon(self._run(dut.clk, signal))

    async def _run(self, clk, signal):
        while True:
            await RisingEdge(clk)
            self.count += int(signal.value)


async def loop_setup(dut):
    for name in ("slip", "flip", "cut"):
        getattr(dut, name).value = 0
    await start(dut)
    src = XgmiiSource(dut.xgmii_tx__data, dut.xgmii_tx__ctrl, dut.clk, dut.rst, enable=dut.tx_en)
    sink = XgmiiSink(dut.xgmii_rx__data, dut.xgmii_rx__ctrl, dut.clk, dut.rst, enable=dut.rx_en)
    lost = EventCounter(dut, dut.lock_lost)
    rising = EventCounter(dut, dut.hi_ber_rising)
    await bounded(RisingEdge(dut.lock), 200_000, "block lock")
    return src, sink, lost, rising


async def exchange(src, sink, rng, count, what):
    frames = [XgmiiFrame.from_payload(rng.randbytes(rng.randrange(46, 300))) for _ in range(count)]
    for f in frames:
        await src.send(f)
    received = []
    for k, f in enumerate(frames):
        got = await bounded(sink.recv(), 200_000, f"{what}: frame {k}")
        assert got.data == f.data, f"{what}: frame {k} differs"
        assert got.ctrl is None, f"{what}: frame {k} has control characters"
        received.append(got)
    return received


@cocotb.test()
async def run_round_trip(dut):
    """Frames cross encode -> scramble -> gearbox -> link -> lock -> decode unchanged, in both
    start lanes (the source uses lane 4 when its deficit idle count allows)."""
    p = params()
    rng = random.Random(p["seed"] + 1)
    src, sink, lost, rising = await loop_setup(dut)
    got = await exchange(src, sink, rng, p["frames"], "clean link")
    assert {f.start_lane for f in got} == {0, 4}, [f.start_lane for f in got]
    assert lost.count == 0 and rising.count == 0 and dut.lock.value == 1


async def sequence_start(dut):
    """Wait for the first word of a 33-word gearbox sequence (after the one cycle without a
    block request): block j then starts at bit 66 j of the line."""
    while True:
        await RisingEdge(dut.clk)
        if int(dut.tx_en.value) == 0:
            break
    await FallingEdge(dut.clk)


@cocotb.test()
async def run_faults(dut):
    """Sync-header errors spread thinly (8 per 64 blocks: the lock holds) raise hi_ber once, and
    a clean window clears it.  Bit slips: block lock is lost (counted once per slip) and
    regained, and frames flow again.  An unplugged fibre loses lock; plugged back, it locks
    again."""
    p = params()
    rng = random.Random(p["seed"] + 2)
    src, sink, lost, rising = await loop_setup(dut)
    # hi-BER: one flipped sync-header bit every 8th block, 40 times (the link has not slipped:
    # block j of a gearbox sequence starts at bit 66 j of its first word)
    await sequence_start(dut)
    await ClockCycles(dut.clk, p["link_delay"], rising=False)
    block, word, flips = 0, 0, 0
    while flips < 40:
        bit = 66 * block - 64 * word
        if 0 <= bit < 64:
            dut.flip.value = 1 << bit
            flips += 1
            block += 8
        else:
            dut.flip.value = 0
        await FallingEdge(dut.clk)
        word += 1
        if word == 33:
            word, block = 0, block - 32
    dut.flip.value = 0
    assert rising.count == 1 and dut.hi_ber.value == 1, (rising.count, dut.hi_ber.value)
    assert lost.count == 0 and dut.lock.value == 1, "thin header errors must not drop the lock"
    await bounded(FallingEdge(dut.hi_ber), 100_000, "hi_ber to clear after a clean window")
    sink.clear()
    await exchange(src, sink, rng, 2, "after hi-BER")
    for n in range(1, 4):
        await FallingEdge(dut.clk)
        dut.slip.value = 1
        await FallingEdge(dut.clk)
        dut.slip.value = 0
        await bounded(FallingEdge(dut.lock), 100_000, f"lock loss after slip {n}")
        await bounded(RisingEdge(dut.lock), 400_000, f"relock after slip {n}")
        assert lost.count == n
        sink.clear()
        await exchange(src, sink, rng, 2, f"after slip {n}")
    # unplugged fibre: lock lost; plugged back: relock and traffic
    dut.cut.value = 1
    await bounded(FallingEdge(dut.lock), 100_000, "lock loss on a cut fibre")
    dut.cut.value = 0
    await bounded(RisingEdge(dut.lock), 400_000, "relock after the fibre is back")
    sink.clear()
    await exchange(src, sink, rng, 2, "after reconnecting")
    assert lost.count == 4


# --- pytest ----------------------------------------------------------------------------------
@pytest.mark.cocotb
def test_codec(build_dir):
    from mcf.sim.runner import run_cocotb
    run_cocotb(Codec(), __name__, build_dir, testcase="run_codec", params=PARAMS)


@pytest.mark.cocotb
def test_pcs_link(build_dir):
    from mcf.sim.runner import run_cocotb
    run_cocotb(PcsLoop(PARAMS["ber_window"], PARAMS["link_delay"]), __name__, build_dir,
               testcase=["run_round_trip", "run_faults"], params=PARAMS)
