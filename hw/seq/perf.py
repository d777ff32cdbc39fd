"""The node's performance counters (``spec.isa.PerfCounter``): 64 bits each, cleared when a
program starts, counting while it runs.

Every counter takes an increment per cycle (``inc[c]``, 0 for none: a strobe, or bytes);
increments are registered once before they are added.  ``value`` is the counter at
``index`` (registered: valid the cycle after ``index`` is set)."""
from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.spec.isa import PerfCounter

COUNTER_BITS = 64
INC_BITS = 16


class PerfCounters(wiring.Component):
    def __init__(self):
        super().__init__({
            "inc": In(INC_BITS).array(len(PerfCounter)),
            "enable": In(1),
            "clear": In(1),
            "index": In(8),
            "value": Out(COUNTER_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        counters = []
        for c in PerfCounter:
            inc = Signal(INC_BITS, name=f"inc_{c.name.lower()}")
            cnt = Signal(COUNTER_BITS, name=f"perf_{c.name.lower()}")
            m.d.sync += inc.eq(self.inc[c] & self.enable.replicate(INC_BITS))
            with m.If(self.clear):
                m.d.sync += [cnt.eq(0), inc.eq(0)]
            with m.Else():
                m.d.sync += cnt.eq(cnt + inc)
            counters.append(cnt)
        with m.Switch(self.index):
            for c, cnt in zip(PerfCounter, counters):
                with m.Case(int(c)):
                    m.d.sync += self.value.eq(cnt)
            with m.Default():
                m.d.sync += self.value.eq(0)
        return m
