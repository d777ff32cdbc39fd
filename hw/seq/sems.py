"""The node's counting semaphores (``spec/isa.py``): ``num_sems`` 16-bit counters.

Increments come from several places in the same cycle (instruction completions of the three
queues, RECV arrivals, CREDIT packets) and are summed; decrements come from the queues'
issue (each takes ``wait_cnt`` from the semaphore it waited on; the sequencer never lets two
queues take from one semaphore in one cycle).  A sum above ``SEM_MAX`` strobes ``overflow``
(the sequencer faults SEM_OVERFLOW).

Increments are pipelined (registered events, then a registered per-semaphore sum), so one
becomes visible three cycles after its strobe; decrements are registered twice too (the
events, then per semaphore) and visible three cycles after their strobe (``taken`` says which
semaphores a registered decrement is about to lower: the issue logic treats a value it read in
the cycle of a take or the two after as stale, so it never takes more than is there).
``overflow`` is registered (per semaphore, ORed after the registers): it strobes the cycle
after the value saturated.  Every path is a few LUT levels (docs/timing.md): the
issue's decision never reaches the semaphores' adders in the same cycle.
"""
from __future__ import annotations

from amaranth import Array, Cat, Const, Instance, Module, Mux, ResetSignal, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.lut import add3, carry_chain
from mcf.spec.isa import SEM_BITS, SEM_MAX

SEM_WIDTH = SEM_MAX.bit_length()


class SemEventSignature(wiring.Signature):
    """One semaphore event, from its source's side: ``valid``, ``sem``, ``amount``."""

    def __init__(self, amount_bits: int):
        self.amount_bits = amount_bits
        super().__init__({"valid": Out(1), "sem": Out(SEM_BITS), "amount": Out(amount_bits)})

    def __eq__(self, other):
        return isinstance(other, SemEventSignature) and other.amount_bits == self.amount_bits

    def __hash__(self):
        return hash((type(self), self.amount_bits))

    def __repr__(self):
        return f"SemEventSignature({self.amount_bits})"


class Semaphores(wiring.Component):
    """``inc[k]`` (``inc_bits[k]``-bit amounts) and ``dec[k]`` (6-bit amounts) events in;
    ``values[i]`` out; ``clear`` zeroes everything; ``overflow`` strobes."""

    def __init__(self, num_sems: int, inc_bits: list[int], n_dec: int, dec_bits: int = 6,
                 primitive: bool = False):
        self.num_sems, self.inc_bits, self.n_dec = num_sems, list(inc_bits), n_dec
        # the value adders as LUT6_2 + CARRY4 instances (round 30b; the node's build, one wide source)
        self.primitive = primitive and sum(b != 1 for b in inc_bits) == 1
        super().__init__({
            **{f"inc{k}": In(SemEventSignature(b)) for k, b in enumerate(inc_bits)},
            **{f"dec{k}": In(SemEventSignature(dec_bits)) for k in range(n_dec)},
            "values": Out(SEM_WIDTH).array(num_sems),
            "taken": Out(num_sems),
            # what ``taken`` is made of: the registered decrement events (``dec_v`` / ``dec_s``, the
            # pending ones) and the per-semaphore decrements about to apply (``dec_nz``)
            "dec_v": Out(n_dec), "dec_s": Out(SEM_BITS).array(n_dec), "dec_nz": Out(num_sems),
            "clear": In(1),
            "overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_sems
        incs = [getattr(self, f"inc{k}") for k in range(len(self.inc_bits))]
        decs = [getattr(self, f"dec{k}") for k in range(self.n_dec)]
        # stage 1: registered events
        reg = []
        for k, ev in enumerate(incs):
            v, s, a = Signal(name=f"inc{k}_v"), Signal(SEM_BITS, name=f"inc{k}_s"), \
                Signal(self.inc_bits[k], name=f"inc{k}_a")
            m.d.sync += [v.eq(ev.valid & ~self.clear), s.eq(ev.sem), a.eq(ev.amount)]
            reg.append((v, s, a))
        # decrements: the events registered as they come (the issue decision is a register
        # away from anything here)
        dec_bits = max(len(d.amount) for d in decs)
        dev = []
        for k, d in enumerate(decs):
            v, s, a = Signal(name=f"dec{k}_v"), Signal(SEM_BITS, name=f"dec{k}_s"), \
                Signal(dec_bits, name=f"dec{k}_a")
            m.d.sync += [v.eq(d.valid & ~self.clear), s.eq(d.sem), a.eq(d.amount)]
            m.d.comb += [self.dec_v[k].eq(v), self.dec_s[k].eq(s)]
            dev.append((v, s, a))
        # stage 2: per semaphore, the sum of its 1-bit increments less its decrement (``small``:
        # at most one source takes from one semaphore in a cycle, the issue logic's rule, so the
        # decrements' amounts are ORed, not summed), and whether it takes (``dec_nz``).
        sum_bits = max(self.inc_bits) + len(self.inc_bits).bit_length()
        net_bits = max(sum_bits, dec_bits) + 2
        narrow = [k for k, b in enumerate(self.inc_bits) if b == 1]
        wide = [k for k, b in enumerate(self.inc_bits) if b != 1]
        small_bits = max(len(narrow).bit_length(), dec_bits) + 2
        dnz = [Signal(name=f"dec{i}_nz") for i in range(n)]

        def small_of(hits):
            """The 1-bit increments' count less the decrement of the semaphore each source's
            ``hits(v, s)`` names."""
            amount, pending, count = 0, 0, 0
            for v, s, a in dev:
                hit = hits(v, s)
                amount = amount | Mux(hit, a, 0)
                pending = pending | hit
            for k in narrow:
                v, s, a = reg[k]
                count = count + (hits(v, s) & a[0])
            return count - amount, amount, pending

        ops = []
        if len(wide) == 1:
            # One wide source (the node's: CREDIT's 16-bit increment): round 28 (tp28), its
            # amount is added once, to its own semaphore's ``small`` (``wsum``, one adder, the
            # sources' semaphores compared with the wide one's), and each semaphore registers
            # ``small`` and whether the wide source hit it (``whit``); stage 3 adds ``wsum`` or
            # ``small``, a choice that maps into the value adder's LUTs.  The same operand as
            # small + (hit ? amount : 0) per semaphore (a per-semaphore 18-bit adder before, 32
            # of them): the same value in every cycle.
            # (round 29: whether each other source names the wide one's semaphore is compared in
            # stage 1, from the ports, into a register (``wsame``): the same bit as the registered
            # sems' compare, and the compare is no longer in front of ``wsum``'s adder -- ABC9
            # mapped ``dec2_s -> wsum`` at 8.25 levels when the top's other logic changed)
            wv, ws, wa = reg[wide[0]]
            wide_ev = incs[wide[0]]
            wsame = {}
            for src in [s_ for k, (_, s_, _) in enumerate(reg) if k != wide[0]] + [s_ for _, s_, _ in dev]:
                wsame[id(src)] = Signal(name=f"wsame_{src.name}")
            for k, ev in enumerate(incs):
                if k != wide[0]:
                    m.d.sync += wsame[id(reg[k][1])].eq(ev.sem == wide_ev.sem)
            for k, d in enumerate(decs):
                m.d.sync += wsame[id(dev[k][1])].eq(d.sem == wide_ev.sem)
            wsmall, wamount, _ = small_of(lambda v, s: v & wsame[id(s)])
            wsum = Signal(signed(net_bits), name="wsum")
            if self.primitive and len(narrow) <= 6:
                # (round 31) wa + count - amount as one three-input adder (``add3``: wa + count + ~amount
                # + 1, one LUT6_2 a bit and one chain), the count of the 1-bit increments a lookup (a
                # LUT a bit, no adder): ABC9 mapped count's adders and the two chains at 8.25 levels
                # from ``wsame`` / ``inc#_v`` when the top's other logic changed (perf's counters)
                hits = [wsame[id(reg[k][1])] & reg[k][0] & reg[k][2][0] for k in narrow]
                pop = Signal(len(narrow).bit_length(), name="wsum_count")
                m.d.comb += pop.eq(Array(Const(bin(x).count("1"), len(pop)) for x in range(1 << len(hits)))[Cat(*hits)])
                amount_w, not_amount = Signal(net_bits, name="wsum_amount"), Signal(net_bits, name="wsum_not_amount")
                m.d.comb += [amount_w.eq(wamount), not_amount.eq(~amount_w)]
                m.d.sync += wsum.eq(add3(m, wa, pop, not_amount, signed(net_bits), "wsum_add", True, cin=1))
            else:
                m.d.sync += wsum.eq(wa + wsmall)
        for i in range(n):
            small, amount, pending = small_of(lambda v, s: v & (s == i))
            m.d.sync += dnz[i].eq((amount != 0) & ~self.clear)
            m.d.comb += [self.dec_nz[i].eq(dnz[i]), self.taken[i].eq(pending | dnz[i])]
            if len(wide) == 1:
                small_q = Signal(signed(small_bits), name=f"small{i}")
                whit = Signal(name=f"whit{i}")
                m.d.sync += [small_q.eq(Mux(self.clear, 0, small)), whit.eq(wv & (ws == i) & ~self.clear)]
                ops.append((whit, wsum, small_q))
            else:
                # the general form (more than one wide source, the tests' shapes): the net change
                # registered per semaphore (issue 14: value + sum - decrement was a
                # three-operand adder per semaphore; the same value in every cycle)
                total = small
                for k in wide:
                    v, s, a = reg[k]
                    total = total + Mux(v & (s == i), a, 0)
                net = Signal(signed(net_bits), name=f"net{i}")
                m.d.sync += net.eq(Mux(self.clear, 0, total))
                ops.append(net)
        # stage 3: apply the net change; each semaphore's saturation registered on its own
        # and ORed after the register (``overflow`` still strobes the cycle after: issue 14, the
        # OR over the semaphores was behind the adders)
        over = Signal(n)
        if self.primitive:
            self._apply_primitive(m, ops, over, max(SEM_WIDTH, sum_bits) + 2)
            m.d.comb += self.overflow.eq(over.any())
            return m
        for i in range(n):
            if isinstance(ops[i], tuple):
                whit, wsum, small_q = ops[i]
                ops[i] = Mux(whit, wsum, small_q)
            # value + net lies in (-2^(w-1), 2^(w-1)) for w = max(SEM_WIDTH, sum_bits) + 2:
            # w bits hold it, a negative one (never: the issue logic takes only what is there)
            # reads as above SEM_MAX as with more bits, and the compare looks at few top bits
            nxt = Signal(max(SEM_WIDTH, sum_bits) + 2, name=f"sem{i}_next")
            m.d.comb += nxt.eq(self.values[i] + ops[i])
            with m.If(self.clear):
                m.d.sync += self.values[i].eq(0)
            with m.Elif(nxt > SEM_MAX):
                m.d.sync += self.values[i].eq(SEM_MAX)
            with m.Else():
                m.d.sync += self.values[i].eq(nxt)
            m.d.sync += over[i].eq((nxt > SEM_MAX) & ~self.clear)
        m.d.comb += self.overflow.eq(over.any())
        return m

    #: The value adder's LUT6_2 a bit (round 30b): I0 the value's bit, I1 ``whit``, I2 ``wsum``'s bit,
    #: I3 ``small``'s bit, I4 ``clear`` or the reset, I5 = 1; O6 the carry chain's propagate (both
    #: operands zeroed by I4), O5 its DI (the value's bit, zeroed by I4).
    ADD_INIT = (sum(1 << (32 + a) for a in range(32)
                    if not (a >> 4) & 1 and ((a & 1) ^ ((a >> 2) & 1 if (a >> 1) & 1 else (a >> 3) & 1)))
                | sum(1 << a for a in range(32) if (a & 1) and not (a >> 4) & 1))

    def _apply_primitive(self, m, ops, over, width):
        """Stage 3 as instances (round 30b: ~2 LUT a value bit inferred -- the operand choice's LUT on the
        chain, then a LUT choosing 0 / SEM_MAX / the sum -- now one): value + (whit ? wsum : small) on a
        CARRY4 chain of SEM_WIDTH bits, one LUT6_2 a bit that also takes the operand choice and ``clear``
        (the sum is 0 when ``clear``); saturation is the flip-flops' synchronous set (FDSE S: SEM_MAX is
        all ones in SEM_WIDTH bits).  The sum's bits above SEM_WIDTH (``width`` bits in all) are the
        operand's plus the chain's carry out, nonzero (above SEM_MAX, or negative) unless the operand's
        are all zeros and no carry, or all ones and a carry: one LUT a semaphore (``wsum``'s two cases
        shared), not a LUT6_2 a bit.  The domain's reset goes the way of ``clear`` (the value registers
        are reset-less: with the reset on the flip-flops' R, Yosys left the set as a LUT a bit, measured
        1 024 LUT for the 512 bits).  The same value in every cycle as the plain build
        (tests/hw/seq/test_sems.py, Icarus)."""
        assert SEM_MAX == (1 << SEM_WIDTH) - 1 and SEM_WIDTH % 4 == 0
        zero = Signal(name="sems_zero")
        m.d.comb += zero.eq(self.clear | ResetSignal("sync"))
        wsum = ops[0][1]                                             # one wide source: one ``wsum``
        wide = Signal(signed(width), name="sems_wsum")
        m.d.comb += wide.eq(wsum)                                    # sign-extended (or cut) to the sum's
        w_zero, w_ones = Signal(name="sems_wsum_hi_zero"), Signal(name="sems_wsum_hi_ones")
        m.d.comb += [w_zero.eq(~wide[SEM_WIDTH:].any()), w_ones.eq(wide[SEM_WIDTH:].all())]
        for i, (whit, wsum_i, small_q) in enumerate(ops):
            assert wsum_i is wsum and len(small_q) <= SEM_WIDTH and small_q.shape().signed
            value = Signal(SEM_WIDTH, name=f"sem{i}_value", reset_less=True)
            m.d.comb += self.values[i].eq(value)
            small = Signal(signed(SEM_WIDTH), name=f"sem{i}_s")
            m.d.comb += small.eq(small_q)                            # sign-extended
            prop, di = Signal(SEM_WIDTH, name=f"sem{i}_p"), Signal(SEM_WIDTH, name=f"sem{i}_di")
            for b in range(SEM_WIDTH):
                m.submodules[f"sem{i}_l{b}"] = Instance(
                    "LUT6_2", p_INIT=Const(self.ADD_INIT, 64), i_I0=value[b], i_I1=whit, i_I2=wide[b],
                    i_I3=small[b], i_I4=zero, i_I5=Const(1, 1), o_O6=prop[b], o_O5=di[b])
            total, carry = carry_chain(m, prop, di, f"sem{i}")
            # the operand's high bits: wsum's, or small's sign repeated
            hi_zero = Mux(whit, w_zero, ~small[-1])
            hi_ones = Mux(whit, w_ones, small[-1])
            sat = Signal(name=f"sem{i}_sat")
            m.d.comb += sat.eq(~((hi_zero & ~carry) | (hi_ones & carry)) & ~zero)
            with m.If(sat):
                m.d.sync += value.eq(SEM_MAX)
            with m.Else():
                m.d.sync += value.eq(total)
            m.d.sync += over[i].eq(sat)
