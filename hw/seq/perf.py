"""The node's performance counters (``spec.isa.PerfCounter``): 64 bits each, cleared when a
program starts, counting while it runs.

Every counter takes an increment per cycle (``inc[c]``, 0 for none: a strobe, or bytes) and
counts it if ``enable`` was set in the cycle the increment stands for: ``latency[c]`` cycles
before it arrives (0: the same cycle; the DDR ports' byte counts come from registers,
``AxiInterconnect.BYTES_LATENCY``).  Increments are registered once, gated, before they are
added.  The DDR totals (``SUMS``: DDR_RD_BYTES, DDR_WR_BYTES) are the sums of the HP ports'
registered increments, registered once more (their own ``inc`` inputs are not used): no adder
of the totals sees a port's logic in the same cycle.  ``value`` is the counter at ``index``
(registered: valid the cycle after ``index`` is set).  ``primitive`` (the node's build, round 31): each
counter's low ``LO_BITS`` in flip-flops, the rest in LUT RAM brought up to date one counter a cycle
(``_split``), read the same in every cycle; the choice of the low words as ``mcf.hw.lut.pick`` builds it
(round 32: 4:1 LUT6 instances under the slice's MUXF7 / F8 / F9; round 28b had radix-4 LUT6 layers, where
ABC9 maps a wide choice at ~1.5 LUT a bit per 4:1), the out-of-range zero plain."""
from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf.hw.lut import pick
from mcf.spec.isa import MAX_HP_PORTS, PerfCounter

COUNTER_BITS = 64
INC_BITS = 16
#: (round 31, ``primitive``) a counter's low bits in flip-flops; the high ones in LUT RAM, one counter
#: a cycle brought up to date in turn (every ``len(PerfCounter)`` cycles).  The low bits' carry waits
#: in a flag until then: it must not come twice in that time, (32 + 1) x (2^16 - 1) < 2^22.
LO_BITS = 22

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
        if self.primitive:
            return self._split(m, incs)
        counters = []
        for c in PerfCounter:
            cnt = Signal(COUNTER_BITS, name=f"perf_{c.name.lower()}")
            with m.If(self.clear):
                m.d.sync += cnt.eq(0)
            with m.Else():
                m.d.sync += cnt.eq(cnt + incs[c])
            counters.append(cnt)
        with m.Switch(self.index):
            for c, cnt in zip(PerfCounter, counters):
                with m.Case(int(c)):
                    m.d.sync += self.value.eq(cnt)
            with m.Default():
                m.d.sync += self.value.eq(0)
        return m

    def _split(self, m, incs):
        """The node's build (round 31): every counter ``hi * 2^LO_BITS + lo`` with ``lo`` in flip-flops
        and its carry out in ``pend``, ``hi`` (the other 42 bits) in LUT RAM; a pointer visits one counter a
        cycle and writes ``hi + pend`` back (its carry, if one comes in that cycle, in ``pend`` again).
        A clear restarts the pointer at 0: ``hi`` of a counter the pointer has not reached since (not
        ``swept`` and at or past it) reads as 0 (the RAM is not cleared; a carry needs 2^22 / (2^16 - 1)
        > 32 cycles after a clear, so ``pend`` is 0 there).  ``value`` the same in every cycle as the
        plain build's 64-bit counters: ``(hi + pend) : lo`` at ``index``, the choice of 32 x 23 bits
        (``lo``, ``pend``) by ``pick`` (round 28b: ABC9 mapped the 32-way choice of 64 bits at ~14 LUT a bit,
        ``mux4`` layers 11; round 32: 8 under MUXF cells) and ``hi`` from the RAM's read."""
        n = len(PerfCounter)
        if (n + 1) * ((1 << INC_BITS) - 1) >= 1 << LO_BITS or n & (n - 1):
            raise NotImplementedError(f"perf counters: {n} counters of {INC_BITS}-bit increments, LO_BITS {LO_BITS}")
        hi_bits, abits = COUNTER_BITS - LO_BITS, (n - 1).bit_length()
        ptr, swept = Signal(abits, name="svc_ptr"), Signal(name="swept")
        m.d.sync += [ptr.eq(ptr + 1), swept.eq(swept | (ptr == n - 1))]
        with m.If(self.clear):
            m.d.sync += [ptr.eq(0), swept.eq(0)]
        m.submodules.hi = hi = Memory(shape=hi_bits, depth=n, init=[])
        hw, hr_svc, hr = hi.write_port(), hi.read_port(domain="comb"), hi.read_port(domain="comb")
        words, pend_v = [], Signal(n, name="pend")
        for c in PerfCounter:
            lo = Signal(LO_BITS, name=f"lo_{c.name.lower()}")
            total = Signal(LO_BITS + 1, name=f"lo_sum_{c.name.lower()}")
            m.d.comb += total.eq(lo + incs[c])
            m.d.sync += [lo.eq(total[:LO_BITS]), pend_v[c].eq(total[LO_BITS] | pend_v[c] & (ptr != int(c)))]
            with m.If(self.clear):
                m.d.sync += [lo.eq(0), pend_v[c].eq(0)]
            words.append(Cat(lo, pend_v[c]))
        # the visit: hi[ptr] + its carry (0 before the sweep: pend is 0 there)
        m.d.comb += [hr_svc.addr.eq(ptr), hw.addr.eq(ptr), hw.en.eq(1),
                     hw.data.eq(Mux(swept, hr_svc.data + pend_v.bit_select(ptr, 1), 0))]
        # the read at ``index``: the 23-bit words' choice as the sequencer's ``pick`` builds it (round 32: 4:1
        # LUT6 under MUXF7 / F8 / F9, 8 LUT a bit of the 32, where radix-4 layers and a 2:1 took 11), the range plain
        last = pick(m, words, self.index[:abits], primitive=True, name="pv")
        in_range = self.index[abits:] == 0
        lo_q, pend_q = last[:LO_BITS], last[LO_BITS]
        valid_q = swept | (self.index[:abits] < ptr)
        m.d.comb += hr.addr.eq(self.index[:abits])
        m.d.sync += self.value.eq(Mux(in_range, Cat(lo_q, Mux(valid_q, hr.data + pend_q, 0)), 0))
        return m
