"""cocotb benches: DMA loader and writer against cocotbext-axi ``AxiRamRead`` / ``AxiRamWrite``.

Data is checked against the RAM contents (loader: every packet equals the bytes at its
descriptor's address; writer: the whole RAM equals a Python model of the writes, so bytes
a partial WSTRB must keep are checked too).  A bus monitor checks every burst (INCR, <= 256
beats, no 4 KiB crossing, full-width beats) and counts reads in flight.  ``backpressure``
pauses all channels at random; without it the benches measure bytes per cycle.
"""
from __future__ import annotations

import json
import random

import cocotb
from cocotb.triggers import FallingEdge, RisingEdge, Timer
from cocotbext.axi import (AxiRamRead, AxiRamWrite, AxiReadBus, AxiStreamBus, AxiStreamFrame,
                           AxiStreamSink, AxiStreamSource, AxiWriteBus)

from mcf.sim.cocotb_util import bounded, params, pauses, start
from mcf.spec import DmaDir
from mcf.sw.driver import Descriptor

RAM_BYTES = 1 << 18
#: Addresses at which the faulty RAMs answer SLVERR.
POISON = range(RAM_BYTES - 4096, RAM_BYTES)


class FaultyRamRead(AxiRamRead):
    async def _read(self, address, length):
        if address in POISON:
            raise OSError("poisoned")
        return await super()._read(address, length)


class FaultyRamWrite(AxiRamWrite):
    async def _write(self, address, data):
        if address in POISON:
            raise OSError("poisoned")
        return await super()._write(address, data)


async def reset_first(dut):
    dut.rst.value = 1
    await Timer(1, "ns")


async def drive_descriptors(dut, descs, rng, gap_p):
    dut.desc__valid.value = 0
    for d in descs:
        while rng.random() < gap_p:
            await FallingEdge(dut.clk)
        await FallingEdge(dut.clk)
        dut.desc__payload.value = d.pack()
        dut.desc__valid.value = 1
        while True:
            await Timer(1, "ns")           # ready may depend on the payload
            if dut.desc__ready.value:
                break
            await FallingEdge(dut.clk)
        await RisingEdge(dut.clk)
        dut.desc__valid.value = 0


class BusMonitor:
    """Checks each address-channel handshake and tracks bursts in flight."""

    def __init__(self, dut, prefix: str, bus_bytes: int):
        self.dut, self.p, self.bus_bytes = dut, prefix, bus_bytes
        self.bursts, self.in_flight, self.max_in_flight = [], 0, 0
        self.first_cycle = self.last_cycle = None
        self.errors = []
        self.cycle = 0

    def sig(self, name):
        return getattr(self.dut, f"m_axi__{name}").value

    async def run(self):
        p = self.p
        while True:
            await FallingEdge(self.dut.clk)
            self.cycle += 1
            if self.sig(f"{p}valid") and self.sig(f"{p}ready"):
                addr, beats = self.sig(f"{p}addr").to_unsigned(), self.sig(f"{p}len").to_unsigned() + 1
                size, burst = self.sig(f"{p}size").to_unsigned(), self.sig(f"{p}burst").to_unsigned()
                if burst != 1 or (1 << size) != self.bus_bytes or addr % self.bus_bytes:
                    self.errors.append(f"burst {addr:#x}: burst={burst} size={size}")
                if addr // 4096 != (addr + beats * self.bus_bytes - 1) // 4096:
                    self.errors.append(f"burst {addr:#x}+{beats} beats crosses 4 KiB")
                self.bursts.append((addr, beats))
                self.in_flight += 1
                if self.first_cycle is None:
                    self.first_cycle = self.cycle
            end = (self.sig("rvalid") and self.sig("rready") and self.sig("rlast")) if p == "ar" \
                else (self.sig("bvalid") and self.sig("bready"))
            if end:
                self.in_flight -= 1
                self.last_cycle = self.cycle
            self.max_in_flight = max(self.max_in_flight, self.in_flight)


def collect_done(dut, out: list):
    async def run():
        while True:
            await FallingEdge(dut.clk)
            if dut.done.value:
                out.append((dut.done_tag.value.to_unsigned(), int(dut.resp_error.value)))
    return cocotb.start_soon(run())


def report(p, figures: dict):
    if p.get("report"):
        with open(p["report"], "w") as f:
            json.dump(figures, f)


@cocotb.test()
async def load(dut):
    """Descriptors -> AR bursts -> buffers -> one packet per descriptor equal to the RAM bytes."""
    p = params()
    seed, bp = p.get("seed", 1), p.get("backpressure", True)
    rng = random.Random(seed)
    nbytes, bufsz, nbuf = p["data_width"] // 8, p["buffer_bytes"], p["buffers"]
    await reset_first(dut)
    ram = AxiRamRead(AxiReadBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst,
                     size=RAM_BYTES)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "o", bus_separator="__"), dut.clk, dut.rst)
    if bp:
        ram.ar_channel.set_pause_generator(pauses(seed + 1, 0.3))
        ram.r_channel.set_pause_generator(pauses(seed + 2, 0.3))
        sink.set_pause_generator(pauses(seed + 3, 0.3))
    ram.write(0, rng.randbytes(RAM_BYTES))
    mon = BusMonitor(dut, "ar", nbytes)
    cocotb.start_soon(mon.run())
    done = []
    collect_done(dut, done)
    dut.desc__valid.value = 0
    await start(dut)

    descs = []
    for i in range(p.get("descriptors", 24)):
        if p.get("long"):
            length, addr = bufsz, rng.randrange(RAM_BYTES // bufsz) * bufsz
        else:
            length = rng.choice([nbytes, bufsz, rng.randrange(1, bufsz + 1), rng.randrange(1, 3 * nbytes)])
            addr = rng.randrange((RAM_BYTES - bufsz) // nbytes) * nbytes
        buffer = i % nbuf if p.get("long") or rng.random() < 0.7 else rng.randrange(nbuf)
        descs.append(Descriptor(addr, length, buffer, DmaDir.LOAD, i))
    cocotb.start_soon(drive_descriptors(dut, descs, rng, 0.0 if p.get("long") else 0.3))
    for i, d in enumerate(descs):
        frame = await bounded(sink.recv(), 50 * d.length + 200_000, f"packet of descriptor {i}")
        expected = ram.read(d.addr, d.length)
        assert bytes(frame.tdata) == expected, (
            f"descriptor {i} ({d}): {len(frame.tdata)} bytes, first difference at "
            f"{next((k for k, (a, b) in enumerate(zip(frame.tdata, expected)) if a != b), None)}")
    await ClockCyclesFalling(dut, 4)
    assert sink.empty()
    assert not mon.errors, mon.errors[:5]
    assert [t for t, _ in done] == [d.tag for d in descs], done
    assert not any(e for _, e in done)
    expect_beats = sum(-(-d.length // nbytes) for d in descs)
    assert sum(b for _, b in mon.bursts) == expect_beats
    assert not dut.busy.value
    total = sum(d.length for d in descs)
    cycles = mon.last_cycle - mon.first_cycle + 1
    report(p, {"bytes": total, "cycles": cycles, "bytes_per_cycle": total / cycles,
               "peak_bytes_per_cycle": nbytes, "utilization": total / cycles / nbytes,
               "max_reads_in_flight": mon.max_in_flight, "bursts": len(mon.bursts)})
    if not bp:
        assert mon.max_in_flight >= 2, f"only {mon.max_in_flight} read burst(s) in flight"


async def ClockCyclesFalling(dut, n):
    for _ in range(n):
        await FallingEdge(dut.clk)


@cocotb.test()
async def load_resp_error(dut):
    """A read beyond the RAM answers SLVERR: the descriptor completes with resp_error."""
    p = params()
    nbytes = p["data_width"] // 8
    await reset_first(dut)
    FaultyRamRead(AxiReadBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst, size=RAM_BYTES)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "o", bus_separator="__"), dut.clk, dut.rst)
    done = []
    collect_done(dut, done)
    await start(dut)
    descs = [Descriptor(POISON.start - 2 * nbytes, 4 * nbytes, 0, DmaDir.LOAD, 5),
             Descriptor(0, nbytes, 1, DmaDir.LOAD, 6)]
    cocotb.start_soon(drive_descriptors(dut, descs, random.Random(0), 0))
    for d in descs:
        frame = await bounded(sink.recv(), 100_000, "packet")
        assert len(frame.tdata) == d.length
    await ClockCyclesFalling(dut, 4)
    assert done == [(5, 1), (6, 0)], done


@cocotb.test()
async def store(dut):
    """Descriptors + stream -> AW/W bursts; the RAM equals a model of the writes."""
    p = params()
    seed, bp = p.get("seed", 2), p.get("backpressure", True)
    rng = random.Random(seed)
    nbytes = p["data_width"] // 8
    await reset_first(dut)
    ram = AxiRamWrite(AxiWriteBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst,
                      size=RAM_BYTES)
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "i", bus_separator="__"), dut.clk, dut.rst)
    if bp:
        ram.aw_channel.set_pause_generator(pauses(seed + 1, 0.3))
        ram.w_channel.set_pause_generator(pauses(seed + 2, 0.3))
        ram.b_channel.set_pause_generator(pauses(seed + 3, 0.3))
        src.set_pause_generator(pauses(seed + 4, 0.3))
    model = bytearray([0xEE]) * RAM_BYTES
    ram.write(0, bytes(model))
    mon = BusMonitor(dut, "aw", nbytes)
    cocotb.start_soon(mon.run())
    done = []
    collect_done(dut, done)
    dut.desc__valid.value = 0
    await start(dut)

    descs, payloads = [], []
    max_len = p.get("max_length", 3000)
    for i in range(p.get("descriptors", 24)):
        if p.get("long"):
            length = max_len
            addr = rng.randrange((RAM_BYTES - length) // 4096) * 4096
        else:
            length = rng.choice([1, nbytes, nbytes + 1, rng.randrange(1, max_len + 1), 4096 + 3 * nbytes])
            addr = rng.randrange((RAM_BYTES - length) // nbytes) * nbytes
        beats = -(-length // nbytes)
        data = rng.randbytes(beats * nbytes)      # the tail past ``length`` must not be written
        descs.append(Descriptor(addr, length, 0, DmaDir.STORE, i))
        payloads.append(data)
        model[addr:addr + length] = data[:length]
    cocotb.start_soon(drive_descriptors(dut, descs, rng, 0.0 if p.get("long") else 0.3))
    for data in payloads:
        await src.send(AxiStreamFrame(data))
    for i in range(len(descs)):
        while len(done) <= i:
            await bounded(FallingEdge(dut.clk), 500_000, f"completion of descriptor {i}")
    assert [t for t, _ in done] == [d.tag for d in descs], done
    assert not any(e for _, e in done)
    assert not mon.errors, mon.errors[:5]
    got = ram.read(0, RAM_BYTES)
    if got != bytes(model):
        k = next(k for k in range(RAM_BYTES) if got[k] != model[k])
        raise AssertionError(f"RAM differs from the model at {k:#x}: {got[k]:#x} != {model[k]:#x}")
    await ClockCyclesFalling(dut, 4)
    assert not dut.busy.value
    total = sum(d.length for d in descs)
    cycles = mon.last_cycle - mon.first_cycle + 1
    report(p, {"bytes": total, "cycles": cycles, "bytes_per_cycle": total / cycles,
               "peak_bytes_per_cycle": nbytes, "utilization": total / cycles / nbytes,
               "max_writes_in_flight": mon.max_in_flight, "bursts": len(mon.bursts)})


@cocotb.test()
async def store_resp_error(dut):
    """A write the RAM refuses (SLVERR) completes its descriptor with resp_error."""
    p = params()
    nbytes = p["data_width"] // 8
    await reset_first(dut)
    FaultyRamWrite(AxiWriteBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst, size=RAM_BYTES)
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "i", bus_separator="__"), dut.clk, dut.rst)
    done = []
    collect_done(dut, done)
    await start(dut)
    descs = [Descriptor(POISON.start - 4096, 4096 + nbytes, 0, DmaDir.STORE, 9),
             Descriptor(0, 3 * nbytes, 0, DmaDir.STORE, 10)]
    cocotb.start_soon(drive_descriptors(dut, descs, random.Random(0), 0))
    for d in descs:
        await src.send(AxiStreamFrame(bytes(-(-d.length // nbytes) * nbytes)))
    while len(done) < 2:
        await bounded(FallingEdge(dut.clk), 100_000, "completions")
    assert done == [(9, 1), (10, 0)], done
