"""Streams of the execute unit (hw/compute/exec/streams.py): the item-counted width converters
in the Amaranth simulator under random valid / ready, and the read-stream engine against
cocotbext-axi ``AxiRamRead`` with random pauses on AR and R (several streams at once, R beats of
different IDs interleaved by the RAM's ordering, bursts checked by a monitor)."""
import random

import cocotb
import pytest
from cocotbext.axi import AxiRamRead, AxiReadBus

from mcf.hw.compute.exec.streams import Packer, ReadStreams, Unpacker
from mcf.sim.amaranth_util import simulate
from mcf.sim.cocotb_util import AxiBurstMonitor, StreamSink, StreamSource, bounded, params, pauses, reset_first, start
from mcf.sim.runner import run_cocotb


def words_to_items(words, in_bits, out_bits, count):
    """The reference: the frame's words as one little-endian integer, cut into items."""
    total = sum(w << (i * in_bits) for i, w in enumerate(words))
    return [(total >> (k * out_bits)) & ((1 << out_bits) - 1) for k in range(count)]


def run_converter(dut, frames, seed):
    """frames: list of (cmd dict, input words); returns the output words of every frame."""
    rng = random.Random(seed)
    out = []

    async def bench(ctx):
        inputs = [w for _, ws in frames for w in ws]
        want = sum(f[0].get("beats", f[0]["count"]) for f in frames) if isinstance(dut, Packer) else \
            sum(f[0]["count"] for f in frames)
        k = 0
        cmds = [c for c, _ in frames]
        for _ in range(100 * (len(inputs) + want) + 100):
            if cmds and not ctx.get(dut.busy):
                ctx.set(dut.cmd.payload, cmds[0])
                ctx.set(dut.cmd.valid, 1)
            else:
                ctx.set(dut.cmd.valid, 0)
            give = k < len(inputs) and rng.random() < 0.7
            ctx.set(dut.i.valid, give)
            if k < len(inputs):
                ctx.set(dut.i.payload, inputs[k])
            ctx.set(dut.o.ready, rng.random() < 0.7)
            await ctx.delay(1e-9)
            cmd_taken = bool(ctx.get(dut.cmd.valid) and ctx.get(dut.cmd.ready))
            i_taken = bool(ctx.get(dut.i.valid) and ctx.get(dut.i.ready))
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                out.append(ctx.get(dut.o.payload))
            await ctx.tick()
            if cmd_taken:
                cmds.pop(0)
            k += i_taken
            if len(out) == want and not cmds:
                break
        assert k == len(inputs), f"{k} of {len(inputs)} input words taken"

    simulate(dut, bench)
    return out


@pytest.mark.parametrize("in_bits,out_bits", [(64, 16), (64, 64), (64, 256), (128, 32)])
def test_unpacker_frames(in_bits, out_bits):
    rng = random.Random(in_bits + out_bits)
    frames, want = [], []
    for count in (1, 3, 5, 8):
        nwords = -(-count * out_bits // in_bits)
        words = [rng.getrandbits(in_bits) for _ in range(nwords)]
        frames.append(({"count": count}, words))
        want += words_to_items(words, in_bits, out_bits, count)
    assert run_converter(Unpacker(in_bits, out_bits), frames, 1) == want


@pytest.mark.parametrize("in_bits,out_bits", [(16, 64), (64, 64), (256, 64), (32, 128)])
def test_packer_frames_zero_fill(in_bits, out_bits):
    rng = random.Random(in_bits * out_bits)
    frames, want = [], []
    for count, extra in ((1, 0), (3, 1), (5, 2), (8, 0), (0, 2)):
        items = [rng.getrandbits(in_bits) for _ in range(count)]
        beats = -(-count * in_bits // out_bits) + extra
        frames.append(({"count": count, "beats": beats}, items))
        total = sum(v << (i * in_bits) for i, v in enumerate(items))
        want += [(total >> (b * out_bits)) & ((1 << out_bits) - 1) for b in range(beats)]
    assert run_converter(Packer(in_bits, out_bits), frames, 2) == want


def test_construction():
    with pytest.raises(ValueError, match="^widths 48 and 64: one must divide the other$"):
        Unpacker(48, 64)
    with pytest.raises(ValueError, match="^max_burst=32: must be 1..min"):
        ReadStreams(depth=16, max_burst=32)
    assert ReadStreams(streams=2, id_base=1).id_width == 2


RAM = 1 << 16


@cocotb.test()
async def run_streams(dut):
    """Random requests on every stream at once; each stream's beats equal the RAM's bytes."""
    p = params()
    rng = random.Random(p.get("seed", 3))
    nbytes, S = p["data_width"] // 8, p["streams"]
    await reset_first(dut)
    ram = AxiRamRead(AxiReadBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst, size=RAM)
    ram.ar_channel.set_pause_generator(pauses(5, 0.3))
    ram.r_channel.set_pause_generator(pauses(6, 0.3))
    ram.write(0, rng.randbytes(RAM))
    mon = AxiBurstMonitor(dut, "ar", nbytes)
    cocotb.start_soon(mon.run())
    await start(dut)

    async def one_stream(s):
        src = StreamSource(dut, f"req{s}", dut.clk, pauses(10 + s, 0.5))
        sink = StreamSink(dut, f"o{s}", dut.clk, pauses(20 + s, 0.4))
        reqs = []
        for _ in range(6):
            beats = rng.choice([1, 3, 17, 64, rng.randrange(1, 300)])
            addr = rng.randrange((RAM - 4096 - beats * nbytes) // nbytes) * nbytes
            reqs.append((addr, beats))
        sender = cocotb.start_soon(src.send([a | (b << 48) for a, b in reqs]))
        for addr, beats in reqs:
            got = await sink.recv(beats)
            want = ram.read(addr, beats * nbytes)
            assert b"".join(w.to_bytes(nbytes, "little") for w in got) == want, f"stream {s} request {addr:#x}"
        await sender

    tasks = [cocotb.start_soon(one_stream(s)) for s in range(S)]
    for t in tasks:
        await bounded(t, 2_000_000, "the streams")
    assert not mon.errors, mon.errors
    assert max(b for _, b in mon.bursts) <= p["max_burst"]


@pytest.mark.cocotb
def test_read_streams_cocotb(build_dir):
    p = dict(streams=3, data_width=64, addr_width=48, depth=256, max_burst=16, id_base=1)
    run_cocotb(ReadStreams(**p), __name__, build_dir, testcase="run_streams", params=p)
