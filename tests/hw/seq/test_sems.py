"""The semaphores (hw/seq/sems.py) in the Amaranth simulator against a Python model: random
increments from several sources in the same cycle (summed), decrements, the pipeline latency
(an increment or a decrement is visible three cycles after its strobe, ``taken`` between),
saturation with an ``overflow`` strobe the cycle after, and ``clear``.  Two shapes: two wide
sources (the per-semaphore net adder) and the node's one wide source (round 28: its amount added
once, to its semaphore's own change, ``wsum``)."""
import random

import pytest
from amaranth import Signal
from amaranth.sim import Simulator

from mcf.hw.seq.sems import Semaphores
from mcf.spec.isa import SEM_MAX

N, INC_BITS = 4, [1, 16, 16]
#: The node's shape: 1-bit increments and one wide one (hw/seq/sequencer.py: [1, 1, 1, 1, 16]).
ONE_WIDE = [1, 1, 16]


def run(schedule, cycles, inc_bits=INC_BITS):
    """``schedule[cycle]`` = (incs: list of (source, sem, amount), decs: list of (sem, amount), clear)."""
    dut = Semaphores(N, inc_bits, n_dec=2)
    seen, overflow, taken = [], [], []

    async def bench(ctx):
        for cyc in range(cycles):
            incs, decs, clear = schedule.get(cyc, ([], [], 0))
            for k in range(len(inc_bits)):
                ctx.set(getattr(dut, f"inc{k}").valid, 0)
            for k in range(2):
                ctx.set(getattr(dut, f"dec{k}").valid, 0)
            for src, sem, amount in incs:
                port = getattr(dut, f"inc{src}")
                ctx.set(port.valid, 1)
                ctx.set(port.sem, sem)
                ctx.set(port.amount, amount)
            for k, (sem, amount) in enumerate(decs):
                port = getattr(dut, f"dec{k}")
                ctx.set(port.valid, 1)
                ctx.set(port.sem, sem)
                ctx.set(port.amount, amount)
            ctx.set(dut.clear, clear)
            seen.append([ctx.get(dut.values[i]) for i in range(N)])
            overflow.append(ctx.get(dut.overflow))
            taken.append(ctx.get(dut.taken))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen, overflow, taken


def model(schedule, cycles):
    """Values seen at each cycle (increments and decrements land 3 edges after their strobe),
    the overflow strobe (the cycle after the sum passed SEM_MAX) and the taken mask (the two
    cycles after a decrement's strobe)."""
    vals, pending, taking, out, over, taken = [0] * N, {}, {}, [], [0], []
    for cyc in range(cycles):
        out.append(list(vals))
        incs, decs, clear = schedule.get(cyc, ([], [], 0))
        land = pending.pop(cyc, [0] * N)
        dec = taking.pop(cyc, [0] * N)
        after = taking.get(cyc + 1, [0] * N)
        taken.append(sum(1 << i for i in range(N) if dec[i] or after[i]))
        nxt = [vals[i] + land[i] - dec[i] for i in range(N)]
        over.append(int(any(v > SEM_MAX for v in nxt)) and not clear)
        vals = [0] * N if clear else [min(v, SEM_MAX) for v in nxt]
        if clear:
            pending, taking = {}, {}
        else:
            row = pending.setdefault(cyc + 2, [0] * N)
            for _, s, a in incs:
                row[s] += a
            row = taking.setdefault(cyc + 2, [0] * N)
            for s, a in decs:
                row[s] += a
    return out, over[:cycles], taken


@pytest.mark.parametrize("inc_bits", [INC_BITS, ONE_WIDE])
def test_summed_increments_decrements_and_clear(inc_bits):
    rng = random.Random(5)
    cycles, schedule, model_vals = 200, {}, [0] * N
    for cyc in range(0, 180):
        incs = [(k, rng.randrange(N), 1 if b == 1 else rng.randrange(1, 40))
                for k, b in enumerate(inc_bits) if rng.random() < 0.5]
        schedule[cyc] = (incs, [], 0)
    # decrements that never take more than is there (what the issue logic guarantees): two sems
    for cyc in (60, 61, 120):
        schedule[cyc] = (schedule[cyc][0], [(0, 2), (3, 1)], 0)
    # every source and a decrement on one semaphore in one cycle (the wide amount's sum with
    # the semaphore's own change)
    schedule[100] = ([(k, 3, 1 if b == 1 else 37) for k, b in enumerate(inc_bits)], [(3, 5)], 0)
    schedule[150] = ([], [], 1)
    got, over, taken = run(schedule, cycles, inc_bits)
    want, want_over, want_taken = model(schedule, cycles)
    assert got == want and taken == want_taken
    assert not any(over) and not any(want_over)
    assert got[140] != [0] * N and got[152] == [0] * N


def test_overflow_saturates_and_strobes():
    schedule = {0: ([(1, 2, 40000), (2, 2, 30000)], [], 0)}
    got, over, _ = run(schedule, 8)
    want, want_over, _ = model(schedule, 8)
    assert got == want and got[-1][2] == SEM_MAX
    assert over == want_over and sum(over) == 1


def test_overflow_one_wide_source():
    """The node's shape: the wide amount, the 1-bit ones and a decrement on one semaphore in
    one cycle pass SEM_MAX (the sum 65 534 + 2 - 1 + 1 is above it); a decrement alone does not."""
    schedule = {0: ([(2, 1, 65534)], [], 0), 3: ([(0, 1, 1), (1, 1, 1), (2, 1, 2)], [(1, 1)], 0),
                10: ([(2, 2, 65535)], [(2, 0)], 0), 14: ([(0, 2, 1), (2, 2, 1)], [(2, 3)], 0)}
    got, over, _ = run(schedule, 20, ONE_WIDE)
    want, want_over, _ = model(schedule, 20)
    assert got == want and got[8][1] == SEM_MAX and got[-1][2] == SEM_MAX - 1
    assert over == want_over and sum(over) == 1


def test_primitive_equals_the_plain_build(tmp_path):
    """Round 30b: the node's shape (four 1-bit sources, one 16-bit, three decrements) with the value
    adders as LUT6_2 + CARRY4 instances against the plain build, in Icarus (hw/lut6.v): random events
    every cycle (the wide one rare, at times 2^16 - 1 with the others on its semaphore; ``clear`` rarer), the values, ``taken`` and ``overflow`` compared
    every cycle; some cycles saturate (fired: ``overflow``).  Both clocked from the 17th cycle on (a
    clock gated on the falling edge): the LUT model is X-pessimistic, the values' registers are
    reset-less, and a register whose next value Icarus has not yet evaluated reads X after the first
    edges -- an X once in a value stays there in the model."""
    from amaranth import Cat, ClockDomain, ClockSignal, Const, DomainRenamer, Mux, ResetSignal

    from tests.hw.test_lut import _Pair, _run

    def build(m, stim, primitive):
        tag = "p" if primitive else "q"
        hold, run = Signal(5, name=f"hold_{tag}"), Signal(name=f"run_{tag}")
        m.d.sync += hold.eq(hold + (hold != 16))
        m.domains += [ClockDomain(f"d{tag}"), ClockDomain(f"n{tag}", clk_edge="neg")]
        m.d.comb += [ClockSignal(f"d{tag}").eq(ClockSignal() & run), ResetSignal(f"d{tag}").eq(ResetSignal()),
                     ClockSignal(f"n{tag}").eq(ClockSignal()), ResetSignal(f"n{tag}").eq(ResetSignal())]
        m.d[f"n{tag}"] += run.eq(hold == 16)
        dut = Semaphores(32, [1, 1, 1, 1, 16], n_dec=3, primitive=primitive)
        m.submodules["prim" if primitive else "plain"] = DomainRenamer(f"d{tag}")(dut)
        at, near = 8, stim[150] & stim[151]
        for k in range(5):
            port = getattr(dut, f"inc{k}")
            amount, sem = stim[at + 5:at + 5 + len(port.amount)], stim[at:at + 5]
            if k == 4:                                # at times 2^16 - 1, the 1-bit ones on its semaphore
                amount = Mux(near, Const(-1, 16), amount)  # (wsum's bit 16 set)
            else:
                sem = Mux(near, stim[32:37], sem)
            m.d.comb += [port.valid.eq(stim[k] & (stim[5] | (k < 4))), port.sem.eq(sem), port.amount.eq(amount)]
            at += 5 + len(port.amount)
        for k in range(3):
            port = getattr(dut, f"dec{k}")
            m.d.comb += [port.valid.eq(stim[at] & stim[at + 1]), port.sem.eq(stim[at + 2:at + 7]),
                         port.amount.eq(stim[at + 7:at + 13])]
            at += 13
        m.d.comb += dut.clear.eq(stim[6] & stim[7] & stim[at] & stim[at + 1] & stim[at + 2])
        return Cat(*dut.values, dut.taken, dut.overflow), dut.overflow
    bad, fires = _run(tmp_path, _Pair(160, build))
    assert bad == 0 and fires > 0
