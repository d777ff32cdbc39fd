"""The node's performance counters (``spec.isa.PerfCounter``): 64 bits each, cleared when a
program starts, counting while it runs.

Every counter takes an increment per cycle (``inc[c]``, 0 for none: a strobe, or bytes) and
counts it if ``enable`` was set in the cycle the increment stands for: ``latency[c]`` cycles
before it arrives (0: the same cycle; the DDR ports' byte counts come from registers,
``AxiInterconnect.BYTES_LATENCY``).  Increments are registered once, gated, before they are
added.  The DDR totals (``SUMS``: DDR_RD_BYTES, DDR_WR_BYTES) are the sums of the HP ports'
registered increments, registered once more (their own ``inc`` inputs are not used): no adder
of the totals sees a port's logic in the same cycle.  ``value`` is the counter at ``index``
(registered: valid the cycle after ``index`` is set).  ``primitive`` (the node's build, round 28b): that
choice as radix-4 layers of LUT6 instances (``mcf.hw.lut.mux4``: one LUT6 a bit of a 4:1 choice, where
ABC9 maps a wide choice at ~1.5 LUT a bit per 4:1), the last two words and the out-of-range zero plain."""
from __future__ import annotations

from amaranth import Array, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.lut import mux4
from mcf.spec.isa import MAX_HP_PORTS, PerfCounter

COUNTER_BITS = 64
INC_BITS = 16

#: The counters that are the sums of others (the DDR totals of the HP ports' bytes).
SUMS = {
    PerfCounter.DDR_RD_BYTES: tuple(PerfCounter[f"HP{p}_RD_BYTES"] for p in range(MAX_HP_PORTS)),
    PerfCounter.DDR_WR_BYTES: tuple(PerfCounter[f"HP{p}_WR_BYTES"] for p in range(MAX_HP_PORTS)),
}


class PerfCounters(wiring.Component):
    def __init__(self, latency: dict | None = None, primitive: bool = False):
        self.primitive = primitive
        self.latency = {PerfCounter(c): int(v) for c, v in (latency or {}).items()}
        if any(v < 0 for v in self.latency.values()):
            raise ValueError(f"perf counters: latencies must be >= 0: {self.latency}")
        super().__init__({
            "inc": In(INC_BITS).array(len(PerfCounter)),
            "enable": In(1),
            "clear": In(1),
            "index": In(8),
            "value": Out(COUNTER_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        # the enable of k cycles ago
        en = [self.enable]
        for k in range(max(self.latency.values(), default=0)):
            e = Signal(name=f"enable_{k + 1}")
            m.d.sync += e.eq(en[-1])
            en.append(e)
        # stage 1: every increment, gated by the enable of its cycle, registered
        incs = {}
        for c in PerfCounter:
            if c in SUMS:
                continue
            inc = Signal(INC_BITS, name=f"inc_{c.name.lower()}")
            m.d.sync += inc.eq(self.inc[c] & en[self.latency.get(c, 0)].replicate(INC_BITS))
            with m.If(self.clear):
                m.d.sync += inc.eq(0)
            incs[c] = inc
        # stage 2 of the totals: the sums of the registered increments, registered
        for c, parts in SUMS.items():
            inc = Signal(INC_BITS, name=f"inc_{c.name.lower()}")
            m.d.sync += inc.eq(sum(incs[p] for p in parts))
            with m.If(self.clear):
                m.d.sync += inc.eq(0)
            incs[c] = inc
        counters = []
        for c in PerfCounter:
            cnt = Signal(COUNTER_BITS, name=f"perf_{c.name.lower()}")
            with m.If(self.clear):
                m.d.sync += cnt.eq(0)
            with m.Else():
                m.d.sync += cnt.eq(cnt + incs[c])
            counters.append(cnt)
        if not self.primitive:
            with m.Switch(self.index):
                for c, cnt in zip(PerfCounter, counters):
                    with m.Case(int(c)):
                        m.d.sync += self.value.eq(cnt)
                with m.Default():
                    m.d.sync += self.value.eq(0)
            return m
        # (round 28b, vt28b) the 32-way choice of 64 bits in ABC9's own mapping took ~14 LUT a bit: as
        # 4:1 LUT6 layers by the index's low bits (32 -> 8 -> 2 words: 10 LUT6 a bit, two levels), then
        # the last 2:1 and the zero for an index past the counters in one LUT a bit
        level, used = counters, 0
        while len(level) >= 4 and len(level) % 4 == 0:
            level = [mux4(m, self.index[used:used + 2], level[k:k + 4], primitive=True, name=f"pv{used}_{k // 4}")
                     for k in range(0, len(level), 4)]
            used += 2
        if len(level) != len(counters) >> used or len(level) > 1 << (len(self.index) - used):
            raise NotImplementedError(f"perf counters: {len(counters)} not 4^k x 2^j")
        sel = self.index[used:]
        last = Array(level)[sel] if len(level) > 1 else level[0]
        m.d.sync += self.value.eq(Mux(sel < len(level), last, 0))
        return m

