"""10G MAC (hw/eth/mac.py) with cocotbext-eth XGMII models and frames built by scapy, the FCS
by zlib: transmit byte-exact (preamble, padding, FCS) with the inter-frame gap kept by the
deficit idle count; receive strips and checks the FCS in both start lanes and drops (and
counts) bad-FCS, runt, oversize and bad-preamble frames.  Clock-enable pauses on both sides.

The cocotb coroutines (``run_*``) and the pytest runner share this file and ``PARAMS``.
"""
from __future__ import annotations

import random
import zlib

import cocotb
import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource
from cocotbext.eth import XgmiiFrame, XgmiiSink, XgmiiSource
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from mcf.sim.cocotb_util import bounded, params, start

PARAMS = {"seed": 21, "frames": 40, "max_frame": 256}
PREAMBLE = bytes([0x55] * 7 + [0xD5])
IDLE, START, TERM = 0x07, 0xFB, 0xFD


def ether(rng, payload_len):
    """An Ethernet II frame (no FCS) as scapy builds it."""
    mac = lambda: ":".join(f"{rng.getrandbits(8):02x}" for _ in range(6))
    return bytes(Ether(dst=mac(), src=mac(), type=0x88B5) / Raw(load=rng.randbytes(payload_len)))


def on_wire(frame):
    """What the MAC must send: padded to 60 bytes, then the FCS (least significant byte first)."""
    body = frame + bytes(max(0, 60 - len(frame)))
    return body + zlib.crc32(body).to_bytes(4, "little")


class MacPair(wiring.Component):
    """MacTx and MacRx side by side, each with its own clock enable."""

    def __init__(self, max_frame):
        from mcf.hw.axis import AXIStreamSignature
        from mcf.hw.eth.common import XgmiiSignature
        self.max_frame = max_frame
        super().__init__({"tx_i": In(AXIStreamSignature(64)), "tx_o": Out(XgmiiSignature()), "tx_en": In(1),
                          "rx_i": In(XgmiiSignature()), "rx_o": Out(AXIStreamSignature(64)), "rx_en": In(1),
                          "rx_bad": Out(1), "bad_fcs": Out(1), "runt": Out(1), "oversize": Out(1)})

    def elaborate(self, platform):
        from mcf.hw.eth.mac import MacRx, MacTx
        m = Module()
        m.submodules.tx = tx = MacTx()
        m.submodules.rx = rx = MacRx(self.max_frame)
        wiring.connect(m, wiring.flipped(self.tx_i), tx.i)
        wiring.connect(m, tx.o, wiring.flipped(self.tx_o))
        wiring.connect(m, wiring.flipped(self.rx_i), rx.i)
        wiring.connect(m, rx.o, wiring.flipped(self.rx_o))
        m.d.comb += [tx.en.eq(self.tx_en), rx.en.eq(self.rx_en), self.rx_bad.eq(rx.tuser),
                     self.bad_fcs.eq(rx.bad_fcs), self.runt.eq(rx.runt), self.oversize.eq(rx.oversize)]
        return m


async def drive_enable(dut, signal, rng):
    """A gearbox-like enable: low one cycle in 33, plus random extra pauses."""
    k = 0
    while True:
        await FallingEdge(dut.clk)
        k = (k + 1) % 33
        signal.value = int(k != 0 and rng.random() < 0.9)


class XgmiiGaps:
    """Watches XGMII on enabled cycles: the gap in bytes from each /T/ to the next /S/ and the
    lane of each /S/."""

    def __init__(self, dut, data, ctrl, en):
        self.gaps, self.lanes = [], []
        cocotb.start_soon(self._run(dut, data, ctrl, en))

    async def _run(self, dut, data, ctrl, en):
        pos, last_t = 0, None
        while True:
            await RisingEdge(dut.clk)
            if not int(en.value):
                continue
            d, c = int(data.value), int(ctrl.value)
            for k in range(8):
                char = (d >> 8 * k) & 0xFF
                if (c >> k) & 1 and char == TERM:
                    last_t = pos + k
                elif (c >> k) & 1 and char == START:
                    self.lanes.append(k)
                    if last_t is not None:
                        self.gaps.append(pos + k - last_t)
            pos += 8


@cocotb.test()
async def run_tx(dut):
    """scapy frames of 14..300 bytes in, XGMII out: preamble + frame + padding + FCS,
    byte-exact; gaps >= 9 bytes, 12 on average (deficit idle count), starts in both lanes."""
    p = params()
    rng = random.Random(p["seed"])
    dut.tx_en.value = 1
    dut.rx_en.value = 0
    for name in ("rx_i__data", "rx_i__ctrl", "rx_o__tready"):
        getattr(dut, name).value = 0
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "tx_i", bus_separator="__"), dut.clk, dut.rst)
    await start(dut)
    cocotb.start_soon(drive_enable(dut, dut.tx_en, rng))
    sink = XgmiiSink(dut.tx_o__data, dut.tx_o__ctrl, dut.clk, dut.rst, enable=dut.tx_en)
    gaps = XgmiiGaps(dut, dut.tx_o__data, dut.tx_o__ctrl, dut.tx_en)
    frames = [ether(rng, n) for n in [0, 1, 45, 46, 47] + [rng.randrange(0, 300) for _ in range(p["frames"])]]
    for f in frames:
        await src.send(AxiStreamFrame(f))
    for k, f in enumerate(frames):
        got = await bounded(sink.recv(), 500_000, f"frame {k}")
        assert got.ctrl is None, f"frame {k}: control characters inside"
        assert bytes(got.data) == PREAMBLE + on_wire(f), f"frame {k} ({len(f)} bytes) differs"
    assert min(gaps.gaps) >= 9, gaps.gaps
    back_to_back = gaps.gaps[1:]            # the source kept the MAC busy: the DIC decides
    n = len(back_to_back)
    assert 12 * n - 3 <= sum(back_to_back) <= 12 * n + 3, back_to_back
    assert set(gaps.lanes) == {0, 4}, gaps.lanes


@cocotb.test()
async def run_rx(dut):
    """XGMII frames from cocotbext-eth (FCS by zlib) in both start lanes: good ones come out
    without preamble and FCS, byte-exact, tuser 0; bad FCS, runts, oversize frames and a bad
    SFD come out marked bad (or not at all) and each pulses its own counter once."""
    p = params()
    rng = random.Random(p["seed"] + 1)
    dut.tx_en.value = 0
    dut.rx_en.value = 1
    for name in ("tx_i__tvalid", "tx_i__tdata", "tx_i__tkeep", "tx_i__tlast", "rx_o__tready"):
        getattr(dut, name).value = 0
    await start(dut)
    cocotb.start_soon(drive_enable(dut, dut.rx_en, rng))
    src = XgmiiSource(dut.rx_i__data, dut.rx_i__ctrl, dut.clk, dut.rst, enable=dut.rx_en)
    out, counts = [], {"bad_fcs": 0, "runt": 0, "oversize": 0}

    async def monitor():
        frame = bytearray()
        while True:
            await RisingEdge(dut.clk)
            for name in counts:
                counts[name] += int(getattr(dut, name).value)
            if int(dut.rx_o__tvalid.value):
                keep = int(dut.rx_o__tkeep.value)
                assert keep & (keep + 1) == 0 and keep, f"tkeep {keep:#x} not contiguous"
                frame += int(dut.rx_o__tdata.value).to_bytes(8, "little")[:keep.bit_length()]
                if int(dut.rx_o__tlast.value):
                    out.append((bytes(frame), int(dut.rx_bad.value)))
                    frame = bytearray()
    cocotb.start_soon(monitor())

    want, expect = [], {"bad_fcs": 0, "runt": 0, "oversize": 0}
    for k in range(p["frames"]):
        kind = rng.choice(["good"] * 5 + ["fcs", "runt", "over", "sfd"])
        f = on_wire(ether(rng, rng.randrange(46, p["max_frame"] - 18 + 1)))
        if kind == "fcs":
            f = bytearray(f)
            f[rng.randrange(len(f))] ^= 1 << rng.randrange(8)
            f = bytes(f)
            expect["bad_fcs"] += 1
        elif kind == "runt":
            f = ether(rng, 0)[:rng.randrange(6, 14)]
            f = f + zlib.crc32(f).to_bytes(4, "little")     # a good FCS, but short
            expect["runt"] += 1
        elif kind == "over":
            body = ether(rng, p["max_frame"] - 18 + rng.randrange(1, 100))
            f = body + zlib.crc32(body).to_bytes(4, "little")
            expect["oversize"] += 1
        if kind == "sfd":
            await src.send(XgmiiFrame(PREAMBLE[:-1] + b"\x55" + f))   # no SFD
            expect["bad_fcs"] += 1
        else:
            await src.send(XgmiiFrame.from_raw_payload(f))
        want.append((kind, f))
    await src.wait()
    await ClockCycles(dut.clk, 40)
    good = [f[:-4] for kind, f in want if kind == "good"]
    assert [f for f, bad in out if not bad] == good
    assert sum(bad for _, bad in out) == sum(kind in ("fcs", "runt", "over") for kind, _ in want)
    assert counts == expect, (counts, expect)


@pytest.mark.cocotb
def test_mac(build_dir):
    from mcf.sim.runner import run_cocotb
    run_cocotb(MacPair(PARAMS["max_frame"]), __name__, build_dir, testcase=["run_tx", "run_rx"],
               params=PARAMS)


def test_dic_schedule_keeps_twelve_on_average():
    """The deficit idle count: every gap 9..15 bytes, the running total within 3 of 12 each."""
    from mcf.hw.eth.mac import dic_schedule
    rng = random.Random(4)
    for swap0 in (0, 1):
        deficit, t_total, gap_total, n = 0, 0, 0, 0
        start = 4 * swap0
        for _ in range(500):
            length = 8 + rng.randrange(64, 200)          # preamble + frame bytes
            t = start + length                           # /T/ position on the line
            words, lane, deficit = dic_schedule(t % 8, deficit)
            gap = (t // 8 + words) * 8 + lane - t
            assert 9 <= gap <= 15 and lane in (0, 4)
            gap_total += gap
            n += 1
            assert 12 * n - 3 <= gap_total <= 12 * n + 3
            start = lane
