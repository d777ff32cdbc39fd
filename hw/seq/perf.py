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

from amaranth import Cat, Const, Module, Mux, Signal
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
        """The node's build (round 31): every counter ``hi * 2^LO_BITS + lo`` (``swept_counters``: ``lo``
        and its carry ``pend`` in flip-flops, ``hi`` (the other 42 bits) in LUT RAM visited one counter a
        cycle).  ``value`` the same in every cycle as the plain build's 64-bit counters: ``(hi + pend) :
        lo`` at ``index``, the choice of 32 x 23 bits (``lo``, ``pend``) by ``pick`` (round 28b: ABC9 mapped
        the 32-way choice of 64 bits at ~14 LUT a bit, ``mux4`` layers 11; round 32: 8 under MUXF cells) and
        ``hi`` from the RAM's read."""
        n = len(PerfCounter)
        if n & (n - 1):
            raise NotImplementedError(f"perf counters: {n} counters, not a power of 2")
        abits = (n - 1).bit_length()
        sc = swept_counters(m, [incs[c] for c in PerfCounter], self.clear, lo_bits=LO_BITS,
                            total_bits=COUNTER_BITS, inc_bits=INC_BITS, names=[c.name.lower() for c in PerfCounter])
        words = [Cat(lo, sc.pend[k]) for k, lo in enumerate(sc.lo)]
        # the read at ``index``: the 23-bit words' choice as ``pick`` builds it (round 32: 4:1 LUT6 under
        # MUXF7 / F8 / F9, 8 LUT a bit of the 32, where radix-4 layers and a 2:1 took 11), the range plain
        last = pick(m, words, self.index[:abits], primitive=True, name="pv")
        in_range = self.index[abits:] == 0
        lo_q, pend_q = last[:LO_BITS], last[LO_BITS]
        m.d.sync += self.value.eq(Mux(in_range, Cat(lo_q, sc.read_hi(self.index[:abits], pend_q)), 0))
        return m


class SweptCounters:
    """What ``swept_counters`` built: ``lo`` (a counter's low bits, flip-flops), ``pend`` (their carries
    waiting for the visit, a bit a counter) and ``read_hi(index, pend_bit=None)`` (``hi + pend`` of the
    counter at ``index``, combinational; 0 for one not visited since a clear)."""

    def __init__(self, lo, pend, read_hi):
        self.lo, self.pend, self.read_hi = lo, pend, read_hi


def swept_counters(m, incs, clear, *, lo_bits, total_bits, inc_bits, saturate=False, names=None, prefix=""):
    """Counters of ``total_bits`` as ``hi * 2^lo_bits + lo`` (round 31 PERF, round 31b the CSR's error
    counters; one builder since round 32): ``lo`` and its carry out (``pend``) in flip-flops, ``hi`` in LUT
    RAM (2^abits words, one write port, two reads).  A pointer visits one counter a cycle and writes ``hi +
    pend`` back (a carry coming in that cycle waits in ``pend`` again); a carry cannot come twice before the
    visit: (2^abits + 1) x (2^inc_bits - 1) < 2^lo_bits.  ``clear`` zeroes ``lo`` / ``pend`` and restarts the
    pointer; the RAM is not cleared: ``hi`` of a counter the pointer has not reached since (not ``swept`` and
    at or past it) reads as 0 (its ``pend`` is 0 there, a carry taking more cycles than the sweep).

    ``saturate`` (+1 events, ``inc_bits`` 1): a counter stops at 2^total_bits - 1, exact: each visit keeps
    whether the written ``hi`` is all ones (``top``, from the RAM's read beside the adder, not behind it),
    and an event is dropped when ``top`` and ``lo`` is all ones; ``pend`` is 0 then, as ``lo`` cannot come
    from 0 (the carry) to all ones, 2^lo_bits - 1 events, before the visit (2^abits + 1 < 2^lo_bits - 1)."""
    n = len(incs)
    abits = (n - 1).bit_length()
    depth = 1 << abits
    if saturate and inc_bits != 1:
        raise NotImplementedError(f"swept counters: saturating needs +1 events, not {inc_bits}-bit increments")
    if (depth + 1) * ((1 << inc_bits) - 1) >= (1 << lo_bits) - saturate:
        raise NotImplementedError(f"swept counters: {n} counters of {inc_bits}-bit increments, {lo_bits} low bits")
    names = names or [str(k) for k in range(n)]
    hi_bits = total_bits - lo_bits
    ptr, swept = Signal(abits, name=f"{prefix}svc_ptr"), Signal(name=f"{prefix}swept")
    m.d.sync += [ptr.eq(ptr + 1), swept.eq(swept | (ptr == depth - 1))]
    with m.If(clear):
        m.d.sync += [ptr.eq(0), swept.eq(0)]
    m.submodules[f"{prefix}hi"] = hi = Memory(shape=hi_bits, depth=depth, init=[])
    hw, hr_svc, hr = hi.write_port(), hi.read_port(domain="comb"), hi.read_port(domain="comb")
    pend = Signal(n, name=f"{prefix}pend")
    p_svc = pend.bit_select(ptr, 1)
    if saturate:
        top, top_w = Signal(n, name=f"{prefix}top"), Signal(name=f"{prefix}top_w")
    los = []
    for k, (inc, name) in enumerate(zip(incs, names)):
        lo = Signal(lo_bits, name=f"{prefix}lo_{name}")
        total = Signal(lo_bits + 1, name=f"{prefix}lo_sum_{name}")
        if saturate:
            full = Signal(name=f"{prefix}full_{name}")               # the counter at 2^total_bits - 1
            m.d.comb += [full.eq(lo.all() & top[k]), total.eq(lo + (inc & ~full))]
            with m.If(ptr == k):
                m.d.sync += top[k].eq(top_w)
        else:
            m.d.comb += total.eq(lo + inc)
        m.d.sync += [lo.eq(total[:lo_bits]), pend[k].eq(total[lo_bits] | pend[k] & (ptr != k))]
        with m.If(clear):
            m.d.sync += [lo.eq(0), pend[k].eq(0)] + ([top[k].eq(0)] if saturate else [])
        los.append(lo)
    # the visit: hi[ptr] + its carry (0 before the sweep: pend is 0 there)
    m.d.comb += [hr_svc.addr.eq(ptr), hw.addr.eq(ptr), hw.en.eq(1), hw.data.eq(Mux(swept, hr_svc.data + p_svc, 0))]
    if saturate:
        # whether the written word is all ones, from the read (two compares beside the adder, not behind it)
        eq = [Signal(name=f"{prefix}hi_max{k}") for k in range(2)]      # hi == max - k
        m.d.comb += [e.eq(hr_svc.data == (1 << hi_bits) - 1 - k) for k, e in enumerate(eq)]
        m.d.comb += top_w.eq(swept & Mux(p_svc, eq[1], eq[0]))

    def read_hi(index, pend_bit=None, guard=None, shift=0):
        """``(hi + pend) << shift`` of the counter at ``index`` (``pend_bit`` if the caller chose it
        already), 0 for one not visited since a clear or without ``guard``; combinational (the callers
        register it)."""
        m.d.comb += hr.addr.eq(index)
        p = pend.bit_select(index, 1) if pend_bit is None else pend_bit
        valid = swept | (index < ptr)
        word = hr.data + p
        return Mux(valid if guard is None else guard & valid, Cat(Const(0, shift), word) if shift else word, 0)
    return SweptCounters(los, pend, read_hi)
