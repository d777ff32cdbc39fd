"""MCF packet <-> Ethernet II frame (hw/eth/framer.py), at 64 and 128 bits, against frames
built by scapy: the framer puts dst = table[Meta.dst], src = table[NODE_ID], EtherType
0x88B5 and the link sequence number in front; the deframer strips them, cuts the padding by
Meta.length, drops (and counts) foreign EtherTypes, counts sequence gaps (frames missing)
and passes malformed packets on unchanged for the NIC to count.

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
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from mcf.sim.cocotb_util import bounded, params, pauses, start
from mcf.spec import Collective, Meta, Op, ReduceOp, Stage

PARAMS = {"seed": 51, "packets": 40}


def mac_text(mac):
    return ":".join(f"{b:02x}" for b in mac.to_bytes(6, "big"))


def random_packet(rng, dst, length=None):
    length = rng.choice([0, 1, 20, 30, 31, 32, 100, rng.randrange(0, 400)]) if length is None else length
    meta = Meta(stage=Stage.DECODE, op=Op.TENSOR, collective=Collective.UNICAST, reduce_op=ReduceOp.NONE,
                src=rng.randrange(256), dst=dst, route_id=rng.randrange(4096), kv_id=rng.randrange(1 << 24),
                length=length, seq=rng.randrange(1 << 16))
    return meta.encode() + rng.randbytes(length)


def frame_of(packet, dst, src, seq, ethertype=0x88B5, pad=True):
    """scapy: the Ethernet II frame (no FCS) carrying ``packet`` after the 2-byte link seq."""
    f = bytes(Ether(dst=mac_text(dst), src=mac_text(src), type=ethertype)
              / Raw(load=seq.to_bytes(2, "big") + packet))
    return f + bytes(max(0, 60 - len(f))) if pad else f


class FramerTop(wiring.Component):
    def __init__(self, width):
        from mcf.hw.axis import AXIStreamSignature
        self.width = width
        axis = AXIStreamSignature(width)
        super().__init__({"f_i": In(axis), "f_o": Out(axis), "node_id": In(8), "mac_w_en": In(1),
                          "mac_index": In(8), "mac_data": In(48),
                          "d_i": In(axis), "d_o": Out(axis), "resync": In(1),
                          "not_mcf": Out(1), "seq_gap": Out(1), "seq_missing": Out(16)})

    def elaborate(self, platform):
        from mcf.hw.eth.framer import Deframer, Framer
        m = Module()
        m.submodules.framer = fr = Framer(self.width)
        m.submodules.deframer = de = Deframer(self.width)
        wiring.connect(m, wiring.flipped(self.f_i), fr.i)
        wiring.connect(m, fr.o, wiring.flipped(self.f_o))
        wiring.connect(m, wiring.flipped(self.d_i), de.i)
        wiring.connect(m, de.o, wiring.flipped(self.d_o))
        m.d.comb += [fr.node_id.eq(self.node_id), fr.mac_w_en.eq(self.mac_w_en), fr.mac_index.eq(self.mac_index),
                     fr.mac_data.eq(self.mac_data), de.resync.eq(self.resync), self.not_mcf.eq(de.not_mcf),
                     self.seq_gap.eq(de.seq_gap), self.seq_missing.eq(de.seq_missing)]
        return m


def streams(dut, i, o, seed):
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, i, bus_separator="__"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, o, bus_separator="__"), dut.clk, dut.rst)
    src.set_pause_generator(pauses(seed, 0.2))
    sink.set_pause_generator(pauses(seed + 1, 0.2))
    return src, sink


def idle_inputs(dut):
    for name in ("f_i__tvalid", "d_i__tvalid", "f_o__tready", "d_o__tready", "mac_w_en", "resync"):
        getattr(dut, name).value = 0


@cocotb.test()
async def run_framer(dut):
    p = params()
    rng = random.Random(p["seed"])
    idle_inputs(dut)
    dut.node_id.value = me = 5
    src, sink = streams(dut, "f_i", "f_o", p["seed"])
    await start(dut)
    table = {n: rng.getrandbits(48) for n in rng.sample(range(256), 12)}
    table[me] = 0x02_4D_43_46_00_05
    for index, mac in table.items():
        await FallingEdge(dut.clk)
        dut.mac_w_en.value, dut.mac_index.value, dut.mac_data.value = 1, index, mac
    await FallingEdge(dut.clk)
    dut.mac_w_en.value = 0
    dsts = [n for n in table]
    packets = [random_packet(rng, rng.choice(dsts)) for _ in range(p["packets"])]
    for pk in packets:
        await src.send(AxiStreamFrame(pk))
    for k, pk in enumerate(packets):
        got = await bounded(sink.recv(), 1_000_000, f"frame {k}")
        dst = Meta.decode(pk).dst
        assert bytes(got.tdata) == frame_of(pk, table[dst], table[me], k, pad=False), f"frame {k}"


@cocotb.test()
async def run_deframer(dut):
    p = params()
    rng = random.Random(p["seed"] + 1)
    idle_inputs(dut)
    dut.node_id.value = 0
    src, sink = streams(dut, "d_i", "d_o", p["seed"] + 2)
    counts = {"not_mcf": 0, "seq_gap": 0, "seq_missing": 0}

    async def watch():
        while True:
            await RisingEdge(dut.clk)
            counts["not_mcf"] += int(dut.not_mcf.value)
            counts["seq_gap"] += int(dut.seq_gap.value)
            counts["seq_missing"] += int(dut.seq_missing.value)
    cocotb.start_soon(watch())
    await start(dut)
    want, expect = [], {"not_mcf": 0, "seq_gap": 0, "seq_missing": 0}
    seq = rng.randrange(1 << 16)
    first = True
    for k in range(p["packets"]):
        kind = rng.choice(["good"] * 6 + ["gap", "foreign", "malformed", "short"])
        pk = random_packet(rng, rng.randrange(256))
        if kind == "gap":
            skip = rng.choice([1, 2, 100, 65535])
            seq = (seq + skip) & 0xFFFF
            if not first:
                expect["seq_gap"] += 1
                expect["seq_missing"] += skip
        if kind == "foreign":
            await src.send(AxiStreamFrame(frame_of(pk, 1, 2, seq, ethertype=rng.choice([0x0800, 0x86DD, 0x88B6]))))
            expect["not_mcf"] += 1
            continue                                       # its seq is not consumed
        if kind == "malformed":
            pk = bytearray(pk)
            pk[15] ^= 0x40                                 # check byte wrong: passed as received
            pk = bytes(pk)
        if kind == "short":
            pk = pk[:16 + len(pk[16:]) // 2] if len(pk) > 17 else pk   # shorter than Meta says
        f = frame_of(pk, rng.getrandbits(48), rng.getrandbits(48), seq)
        await src.send(AxiStreamFrame(f))
        # what leaves: 16 + Meta.length bytes when the header is good, else the whole frame
        body = f[16:]
        if kind == "malformed":
            want.append(body)
        else:
            want.append(body[:16 + Meta.decode(pk).length])
        seq = (seq + 1) & 0xFFFF
        first = False
    for k, w in enumerate(want):
        got = await bounded(sink.recv(), 1_000_000, f"packet {k}")
        assert bytes(got.tdata) == w, f"packet {k}: {len(got.tdata)} bytes, expected {len(w)}"
    await ClockCycles(dut.clk, 10)
    assert counts == expect, (counts, expect)
    # link down: the next number is the new reference, no gap counted
    dut.resync.value = 1
    await ClockCycles(dut.clk, 2)
    dut.resync.value = 0
    pk = random_packet(rng, 1)
    await src.send(AxiStreamFrame(frame_of(pk, 1, 2, (seq + 1000) & 0xFFFF)))
    got = await bounded(sink.recv(), 1_000_000, "packet after resync")
    assert bytes(got.tdata) == pk
    await ClockCycles(dut.clk, 10)
    assert counts == expect


@pytest.mark.cocotb
@pytest.mark.parametrize("width", [64, 128])
def test_framer(width, build_dir):
    from mcf.sim.runner import run_cocotb
    run_cocotb(FramerTop(width), __name__, build_dir, testcase=["run_framer", "run_deframer"], params=PARAMS)


def test_width_checked():
    from mcf.hw.eth.framer import Framer
    with pytest.raises(ValueError, match="64 or 128"):
        Framer(256)
