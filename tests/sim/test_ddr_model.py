"""The DDR model (sim/ddr_model.py) proves its latency, outstanding limit and bandwidth caps:
cocotbext-axi ``AxiMaster``s read through a wire-through DUT (two 128-bit AXI4 ports) from the
model, and the bench's own monitor on the model's side of the wires counts (independently of
the model's statistics) the cycles from an AR handshake to its first R beat, the unfinished
bursts, and R beats per cycle per port.  The data read equals what was written."""
import random
from dataclasses import replace

import cocotb
import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotb.triggers import ReadOnly, RisingEdge
from cocotbext.axi import AxiBus, AxiMaster

from mcf.hw.axi.full import AXI4Signature
from mcf.sim.cocotb_util import bounded, params, reset_first, start
from mcf.sim.ddr_model import DdrModel, DdrTiming
from mcf.sim.runner import run_cocotb
from mcf.spec.node import NodeConfig

PORTS, DW, BUS = 2, 128, 16


class Wires(wiring.Component):
    """``s<p>`` (from the bench's masters) wired to ``m<p>`` (the DDR model)."""

    def __init__(self, ports=PORTS, data_width=DW):
        sig = AXI4Signature(32, data_width, 4)
        self.n = ports
        super().__init__({**{f"s{p}": In(sig) for p in range(ports)}, **{f"m{p}": Out(sig) for p in range(ports)},
                          "tick": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.tick.eq(~self.tick)          # the bench's clock and reset
        for p in range(self.n):
            wiring.connect(m, wiring.flipped(getattr(self, f"s{p}")), wiring.flipped(getattr(self, f"m{p}")))
        return m


class Monitor:
    """The model's side of port ``p``: AR handshakes, R beats, first-beat latency, bursts in
    flight, the cycles of every beat."""

    def __init__(self, dut, p):
        self.dut, self.p = dut, p
        self.pending = []          # AR handshake cycles of unfinished bursts
        self.latency, self.beat_cycles = [], []
        self.max_inflight = 0
        self.first = True
        cocotb.start_soon(self.run())

    async def run(self):
        d, p, cycle = self.dut, self.p, 0
        sig = lambda name: getattr(d, f"m{p}__{name}")
        while True:
            await RisingEdge(d.clk)
            await ReadOnly()
            cycle += 1
            if sig("arvalid").value and sig("arready").value:
                self.pending.append(cycle)
            self.max_inflight = max(self.max_inflight, len(self.pending))
            if sig("rvalid").value and sig("rready").value:
                self.beat_cycles.append(cycle)
                if self.first:
                    self.latency.append(cycle - self.pending[0])
                self.first = bool(sig("rlast").value)
                if self.first:
                    self.pending.pop(0)

    def rate(self):
        """Beats per cycle over the middle half of the run (steady state)."""
        c = self.beat_cycles
        a, b = len(c) // 4, 3 * len(c) // 4
        return (b - a) / (c[b] - c[a])


async def setup(dut, **changes):
    timing = DdrTiming.from_node(NodeConfig(), **{"refresh_interval": 0, "refresh_cycles": 0, **changes})
    await reset_first(dut)
    ddr = DdrModel.from_prefixes(dut, [f"m{p}" for p in range(PORTS)], dut.clk, dut.rst, timing, size=1 << 20)
    masters = [AxiMaster(AxiBus.from_prefix(dut, f"s{p}", bus_separator="__"), dut.clk, dut.rst)
               for p in range(PORTS)]
    mons = [Monitor(dut, p) for p in range(PORTS)]
    await start(dut)
    return timing, ddr, masters, mons


async def stream(master, base, bursts, burst_bytes=4096):
    """``bursts`` reads of ``burst_bytes`` all in flight at once; their data."""
    ops = [master.init_read(base + i * burst_bytes, burst_bytes) for i in range(bursts)]
    out = []
    for op in ops:
        await op.wait()
        out.append(op.data.data)
    return out


@cocotb.test()
async def run_latency_and_data(dut):
    """One-beat reads one at a time: each first beat comes ``latency`` cycles after its AR."""
    timing, ddr, masters, mons = await setup(dut)
    rng = random.Random(1)
    blob = bytes(rng.randrange(256) for _ in range(8192))
    ddr.write(0x4000, blob)
    for i in range(6):
        got = await bounded(masters[0].read(0x4000 + 16 * i, 16), 10_000, "a read")
        assert got.data == blob[16 * i:16 * i + 16]
    assert mons[0].latency == [timing.latency] * 6, mons[0].latency
    assert timing.latency == round(NodeConfig().clock_hz * 200e-9)      # the profile's 200 ns at 250 MHz
    got = await bounded(stream(masters[1], 0x4000, 2), 100_000, "two 4 KiB reads")
    assert b"".join(got) == blob


@cocotb.test()
async def run_outstanding(dut):
    """32 bursts asked at once: the port holds exactly ``outstanding`` unfinished."""
    timing, ddr, masters, mons = await setup(dut, outstanding=5, latency=40)
    await bounded(stream(masters[0], 0, 32, burst_bytes=256), 1_000_000, "32 reads")
    assert mons[0].max_inflight == 5 and ddr.max_outstanding(0) == 5


@cocotb.test()
async def run_port_cap(dut):
    """Uncapped (a port's cap = its width), latency hidden by the outstanding bursts: one beat
    per cycle on port 0; port 1 capped at half its width: half a beat per cycle."""
    p = params()
    timing, ddr, masters, mons = await setup(dut)
    await bounded(stream(masters[0], 0, 8), 10_000_000, "8 x 4 KiB")
    ddr.timing = replace(timing, port_bytes_per_cycle=p["port_cap"])
    await bounded(stream(masters[1], 0, 8), 10_000_000, "8 x 4 KiB")
    assert mons[0].rate() == pytest.approx(1.0, abs=0.01), mons[0].rate()
    assert mons[1].rate() == pytest.approx(p["port_cap"] / BUS, abs=0.01), mons[1].rate()


@cocotb.test()
async def run_total_cap(dut):
    """Two ports sharing a DDR of 1.5 beats per cycle: 0.75 each, 1.5 together."""
    timing, ddr, masters, mons = await setup(dut, total_bytes_per_cycle=1.5 * BUS)
    a = cocotb.start_soon(stream(masters[0], 0, 8))
    b = cocotb.start_soon(stream(masters[1], 0x20000, 8))
    await bounded(a, 10_000_000, "port 0")
    await bounded(b, 10_000_000, "port 1")
    rates = [m.rate() for m in mons]
    assert rates == [pytest.approx(0.75, abs=0.02)] * 2, rates


@cocotb.test()
async def run_refresh(dut):
    """The DDR of 1.5 beats per cycle refreshing 100 of every 400 cycles: 0.75 x 0.75 each (plus
    what the bucket held when a refresh began: at most its cap, ~3.5 beats per 400 cycles)."""
    timing, ddr, masters, mons = await setup(dut, total_bytes_per_cycle=1.5 * BUS, refresh_interval=400,
                                             refresh_cycles=100)
    a = cocotb.start_soon(stream(masters[0], 0, 8))
    b = cocotb.start_soon(stream(masters[1], 0x20000, 8))
    await bounded(a, 10_000_000, "port 0")
    await bounded(b, 10_000_000, "port 1")
    rates = [m.rate() for m in mons]
    assert rates == [pytest.approx(0.75 * 0.75 + 3.5 / 400 / 2, abs=0.015)] * 2, rates
    # every 400 cycles a pause of both ports: the refresh less the few beats the bucket still held
    beats = sorted(c for m in mons for c in m.beat_cycles)
    pauses = [b - a for a, b in zip(beats, beats[1:]) if b - a > 90]
    assert len(pauses) >= (beats[-1] - beats[0]) // 400 - 1 and max(pauses) <= 101, pauses


def test_timing_from_profile():
    """Parameters come from the profile (latency, outstanding, DDR peak) and the NodeConfig
    (clock, HP port width): the KR260's 19.2 GB/s at 250 MHz is 76.8 B/cycle, a 128-bit HP port
    16 B/cycle (4 GB/s)."""
    t = DdrTiming.from_node(NodeConfig())
    assert t.total_bytes_per_cycle == pytest.approx(76.8) and t.port_bytes_per_cycle == 16
    assert t.outstanding == 16 and t.latency == 50
    # DDR4 refresh (data sheet): tREFI 7.8 us, tRFC 350 ns -> 1 950 and 87.5 cycles, 4.5 % of the time
    assert (t.refresh_interval, t.refresh_cycles) == (pytest.approx(1950), pytest.approx(87.5))
    assert t.sustained_bytes_per_cycle == pytest.approx(76.8 * (1 - 350 / 7800))
    # four ports at 250 MHz: 64 B a cycle; at 300 MHz (ratio 1.2) 76.8, more than the DDR sustains
    assert t.bandwidth(4, 16) == 64 and t.bandwidth(4, 16, 1.2) == pytest.approx(76.8 * (1 - 350 / 7800))
    with pytest.raises(ValueError, match="must be >= 1"):
        DdrTiming(latency=0, outstanding=1, port_bytes_per_cycle=1, total_bytes_per_cycle=1)


@pytest.mark.cocotb
def test_ddr_model_cocotb(build_dir):
    run_cocotb(Wires(), __name__, build_dir,
               testcase=["run_latency_and_data", "run_outstanding", "run_port_cap", "run_total_cap", "run_refresh"],
               params={"port_cap": 8})
