"""A cocotb driver for the execute unit (``mcf.hw.compute.exec.unit.ExecUnit``): cocotbext-axi
``AxiRam`` as DDR on ``m_axi`` with random pauses on every channel (and ``AxiRamRead``s on the same
memory for the weight ports ``m_axi_w<k>`` of a unit with several), or, with ``timing``, the DDR
model (``mcf.sim.ddr_model``: latency, outstanding limit, bandwidth caps) on all of them; instruction words fed
through ``instr`` one at a time (as the sequencer's EX queue does), and the ``done`` /
``fault`` strobes, the performance strobes and the cycles per instruction recorded.  A unit whose
weight loaders have their own clock (``axi_clk`` / ``axi_rst``, ``NodeConfig.weight_clock_hz``)
gets that clock at ``axi_period_ps`` (the engine's ``clk`` runs at 10 ns) and its weight ports are
served on it."""
from __future__ import annotations

from dataclasses import dataclass, field

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge
from cocotbext.axi import AxiBus, AxiRam, AxiRamRead, AxiReadBus

from mcf.sim.cocotb_util import StreamSource, bounded, pauses, reset_first, start
from mcf.sim.ddr_model import DdrModel
from mcf.spec import isa


@dataclass
class Outcome:
    """What one instruction did: ``fault`` None (done) or the SeqFault; cycles from the
    instruction's acceptance to the strobe; perf strobe counts over those cycles."""
    fault: isa.SeqFault | None
    cycles: int
    perf: dict = field(default_factory=dict)


class ExecDriver:
    PERF = ("busy_gemm", "busy_vec", "busy_attn", "busy_kvw", "busy_embed", "busy_ldst", "mac_beats", "stall_ex_ddr")

    PERIOD_PS = 10_000            # the engine's clock (cocotb_util.start)

    def __init__(self, dut, ram_bytes: int = 1 << 20, seed: int = 1, pause: float = 0.3, timing=None,
                 axi_period_ps: int | None = None):
        self.dut = dut
        self.weight_ports = [f"m_axi_w{k}" for k in range(8) if hasattr(dut, f"m_axi_w{k}__arvalid")]
        self.timing = timing
        self.axi_period_ps = None
        w_clk, w_rst = dut.clk, dut.rst
        if hasattr(dut, "axi_clk"):
            if not axi_period_ps:
                raise ValueError("ExecDriver: this unit's weight loaders have their own clock: give axi_period_ps")
            self.axi_period_ps = int(axi_period_ps) // 2 * 2        # cocotb: an even period
            w_clk, w_rst = dut.axi_clk, dut.axi_rst
        if timing is not None:
            self.ram = DdrModel.from_prefixes(dut, ["m_axi"] + self.weight_ports, dut.clk, dut.rst, timing,
                                              size=ram_bytes, clocks=[dut.clk] + [w_clk] * len(self.weight_ports),
                                              period_ps=self.PERIOD_PS)
            return self._common()
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst, size=ram_bytes)
        reads = [AxiRamRead(AxiReadBus.from_prefix(dut, name, bus_separator="__"), w_clk, w_rst,
                            mem=self.ram.mem) for name in self.weight_ports]
        if pause:
            channels = (self.ram.write_if.aw_channel, self.ram.write_if.w_channel, self.ram.write_if.b_channel,
                        self.ram.read_if.ar_channel, self.ram.read_if.r_channel)
            channels += tuple(ch for r in reads for ch in (r.ar_channel, r.r_channel))
            for i, ch in enumerate(channels):
                ch.set_pause_generator(pauses(seed * 10 + i, pause))
        self._common()

    def _common(self):
        dut = self.dut
        self.src = StreamSource(dut, "instr", dut.clk)
        dut.dir_wr__en.value = 0
        dut.dir_rd__en.value = 0
        dut.clear.value = 0
        self.events: list[tuple[str, int]] = []
        self.counts = {name: 0 for name in self.PERF}
        self.cycle = 0
        self.mac_first = self.mac_last = None       # cycles of the first and the last MAC strobe

    async def start(self):
        d = self.dut
        if self.axi_period_ps:
            d.axi_rst.value = 1
        await reset_first(d)
        if self.axi_period_ps:
            cocotb.start_soon(Clock(d.axi_clk, self.axi_period_ps, unit="ps").start())
        cocotb.start_soon(self._monitor())
        await start(d, period_ns=self.PERIOD_PS // 1000)
        if self.axi_period_ps:
            for _ in range(2):
                await RisingEdge(d.axi_clk)
            d.axi_rst.value = 0
            for _ in range(4):
                await RisingEdge(d.clk)

    async def _monitor(self):
        d = self.dut
        while True:
            await RisingEdge(d.clk)
            await ReadOnly()
            self.cycle += 1
            if d.done.value:
                self.events.append(("done", 0))
            if d.fault.value:
                self.events.append(("fault", int(d.fault_cause.value)))
            for name in self.PERF:
                if getattr(d, f"perf__{name}").value:
                    self.counts[name] += 1
            if d.perf__mac_beats.value:
                if self.mac_first is None:
                    self.mac_first = self.cycle
                self.mac_last = self.cycle

    async def run(self, ins: isa.Instr, max_cycles: int = 200_000) -> Outcome:
        """Feed one instruction, wait (bounded) for its done or fault strobe."""
        before = dict(self.counts)
        self.events.clear()
        await self.src.send([ins.encode()])
        c0 = self.cycle

        async def wait():
            while not self.events:
                await RisingEdge(self.dut.clk)
            return self.events.pop(0)

        kind, cause = await bounded(wait(), 10 * max_cycles, f"{type(ins).__name__} to complete")
        perf = {k: self.counts[k] - before[k] for k in self.counts}
        return Outcome(None if kind == "done" else isa.SeqFault(cause), self.cycle - c0, perf)

    async def must(self, ins: isa.Instr, max_cycles: int = 200_000) -> Outcome:
        out = await self.run(ins, max_cycles)
        assert out.fault is None, f"{ins}: fault {out.fault.name}"
        return out

    async def program_start(self):
        """A program starts: the sequencer's ``clear`` (the unit idle) for a cycle."""
        d = self.dut
        d.clear.value = 1
        await RisingEdge(d.clk)
        d.clear.value = 0

    async def dir_write(self, block: int, state: int):
        d = self.dut
        d.dir_wr__block.value, d.dir_wr__state.value, d.dir_wr__en.value = block, state, 1
        await RisingEdge(d.clk)
        d.dir_wr__en.value = 0

    async def dir_read(self, block: int) -> int:
        d = self.dut
        d.dir_rd__block.value, d.dir_rd__en.value = block, 1
        await RisingEdge(d.clk)
        d.dir_rd__en.value = 0
        await ReadOnly()
        value = int(d.dir_rd__state.value)
        await RisingEdge(d.clk)
        return value
