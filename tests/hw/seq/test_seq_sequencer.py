"""Sequencer (hw/seq/sequencer.py) in the Amaranth simulator: fetch from a modelled DDR,
dispatch order, per-queue issue on semaphores, summed increments, END, faults, watchdog,
abort, start, performance events.

The bench models the DDR (an AXI4 read slave with random R gaps), the three engines
(execute unit, TX, RX: each takes an instruction when idle and completes it after a latency)
and the RECV / CREDIT semaphore events.  Expectations come from the programs (typed
``spec.isa`` instructions) and the ISA's rules, never from the RTL.
"""
import random

import pytest
from amaranth.sim import Simulator

from mcf.hw.seq.sequencer import Sequencer
from mcf.spec import ErrorCause
from mcf.spec.isa import (INSTR_BYTES, Credit, End, Load, Opcode, Queue, Recv, SeqFault, Sync,
                          encode_program)
from mcf.spec.node import NodeConfig

CFG = NodeConfig.tiny()


def load(**kw):
    return Load(ddr=0, spad=0, beats=1, row_beats=0, **kw)


def credit(**kw):
    return Credit(dst=1, route_id=1, sem=0, count=1, **kw)


def recv(**kw):
    return Recv(tag=1, ddr=0, length=64, done_sem=0, credit=0, credit_dst=0, credit_route=0, credit_sem=0, **kw)


class Bench:
    """Runs ``program`` (typed instructions or raw bytes) on a Sequencer; records issues and
    completions per queue, the status, and the performance events."""

    def __init__(self, program, config=CFG, latency=(6, 4, 0), seed=1, max_cycles=3000):
        self.dut = Sequencer(config)
        self.config = config
        self.mem = program if isinstance(program, bytes) else encode_program(program)
        self.count = len(self.mem) // INSTR_BYTES
        self.latency = dict(zip(Queue, latency))
        self.rng = random.Random(seed)
        self.max_cycles = max_cycles
        self.events = {}            # cycle -> list of (port, sem, amount)
        self.ex_faults = {}         # pc -> cause
        self.busy_until = 0         # engines_idle low before this cycle
        self.activity = set()
        self.abort_at = None
        self.net_error_at = {}      # cycle -> ErrorCause
        self.fault_mask = (1 << len(ErrorCause)) - 1
        self.watchdog = 0
        self.idle_from = 0          # datapath_idle low before this cycle
        self.stop_when_done = True
        # results
        self.issued = []            # (cycle, queue, pc)
        self.completed = []         # (cycle, queue, pc)
        self.perf = {"retired": [0, 0, 0], "stall_sem": [0, 0, 0], "stall_fetch": 0}
        self.status = {}
        self.sems = []
        self.cycles = 0

    def run(self):
        sim = Simulator(self.dut)
        sim.add_clock(1e-8)
        sim.add_testbench(self._bench)
        sim.run()
        return self

    async def _bench(self, ctx):
        dut, nb = self.dut, self.config.data_bytes
        ctx.set(dut.prog_base, 0)
        ctx.set(dut.prog_count, self.count)
        ctx.set(dut.fault_mask, self.fault_mask)
        ctx.set(dut.watchdog, self.watchdog)
        ctx.set(dut.ddr_fault, 0)
        reads = []                  # pending R beats: (data, last)
        engines = {q: None for q in Queue}     # (pc, finish cycle)
        started = False
        ctx.set(dut.start, 1)
        for cycle in range(self.max_cycles):
            self.cycles = cycle
            if cycle == 1:
                ctx.set(dut.start, 0)
            ctx.set(dut.datapath_idle, cycle >= self.idle_from)
            # --- fetch: AR always ready, R beats with random gaps
            ctx.set(dut.m_axi.arready, 1)
            if reads and self.rng.random() < 0.8:
                data, last = reads[0]
                ctx.set(dut.m_axi.rvalid, 1)
                ctx.set(dut.m_axi.rdata, data)
                ctx.set(dut.m_axi.rlast, last)
            else:
                ctx.set(dut.m_axi.rvalid, 0)
            # --- engines
            for q, port in ((Queue.EX, dut.ex), (Queue.TX, dut.tx), (Queue.RX, dut.rx)):
                ctx.set(port.ready, engines[q] is None)
            done_now = {}
            for q in (Queue.EX, Queue.TX):
                e = engines[q]
                done_now[q] = e is not None and e[1] == cycle
            ctx.set(dut.ex_done, done_now[Queue.EX] and engines[Queue.EX][0] not in self.ex_faults)
            ctx.set(dut.ex_fault, done_now[Queue.EX] and engines[Queue.EX][0] in self.ex_faults)
            if done_now[Queue.EX] and engines[Queue.EX][0] in self.ex_faults:
                ctx.set(dut.ex_fault_cause, self.ex_faults[engines[Queue.EX][0]])
            ctx.set(dut.tx_done, done_now[Queue.TX])
            # --- semaphore events, idle, activity, errors, abort
            ctx.set(dut.rx_done_inc.valid, 0)
            ctx.set(dut.rx_credit_inc.valid, 0)
            for port, sem, amount in self.events.get(cycle, []):
                p = dut.rx_done_inc if port == "done" else dut.rx_credit_inc
                ctx.set(p.valid, 1)
                ctx.set(p.sem, sem)
                ctx.set(p.amount, amount)
            idle = cycle >= self.busy_until and all(v is None for v in engines.values())
            ctx.set(dut.engines_idle, (1 << len(dut.engines_idle)) - 1 if idle else 0)
            ctx.set(dut.activity, cycle in self.activity)
            ctx.set(dut.abort, cycle == self.abort_at)
            ctx.set(dut.net_errors, (1 << self.net_error_at[cycle]) if cycle in self.net_error_at else 0)
            # --- sample handshakes
            if ctx.get(dut.m_axi.arvalid):
                addr, beats = ctx.get(dut.m_axi.araddr), ctx.get(dut.m_axi.arlen) + 1
                for i in range(beats):
                    a = addr + i * nb
                    reads.append((int.from_bytes(self.mem[a:a + nb].ljust(nb, b"\0"), "little"), i == beats - 1))
            r_taken = ctx.get(dut.m_axi.rvalid) and ctx.get(dut.m_axi.rready)
            for q, port in ((Queue.EX, dut.ex), (Queue.TX, dut.tx), (Queue.RX, dut.rx)):
                if ctx.get(port.valid) and ctx.get(port.ready):
                    if q == Queue.EX:
                        word = ctx.get(port.payload)
                        pc = self._pc_of(word, q)
                    else:
                        pc = ctx.get(port.payload.pc)
                    self.issued.append((cycle, q, pc))
                    if q == Queue.RX:
                        self.completed.append((cycle, q, pc))
                    else:
                        engines[q] = (pc, cycle + max(1, self.latency[q]))
            for q in (Queue.EX, Queue.TX):
                if done_now[q]:
                    self.completed.append((cycle, q, engines[q][0]))
                    engines[q] = None
            for q in Queue:
                self.perf["retired"][q] += ctx.get(dut.retired[q])
                self.perf["stall_sem"][q] += ctx.get(dut.stall_sem[q])
            self.perf["stall_fetch"] += ctx.get(dut.stall_fetch)
            running = ctx.get(dut.running)
            started = started or running
            await ctx.tick()
            if r_taken:
                reads.pop(0)
            if started and not running and not ctx.get(dut.start_pending) and self.stop_when_done:
                break
        self.status = {name: ctx.get(getattr(self.dut, name)) for name in
                       ("running", "done", "fault", "fault_cause", "fault_pc", "pc", "start_pending")}
        self.sems = []
        for i in range(self.config.num_sems):
            ctx.set(dut.sem_index, i)
            self.sems.append(ctx.get(dut.sem_value))

    def _pc_of(self, word, q):
        """The EX port carries no index: find the word in the program (first unissued match)."""
        seen = {pc for _, qq, pc in self.issued if qq == q}
        for pc in range(self.count):
            if pc not in seen and int.from_bytes(self.mem[pc * INSTR_BYTES:(pc + 1) * INSTR_BYTES], "little") == word:
                return pc
        raise AssertionError(f"EX got a word that is not in the program: {word:#x}")

    def order(self, q):
        return [pc for _, qq, pc in self.issued if qq == q]

    def when(self, what, pc):
        rows = self.issued if what == "issued" else self.completed
        return next(c for c, _, p in rows if p == pc)


def queue_pcs(program, q):
    return [pc for pc, ins in enumerate(program) if ins.queue == q]


def test_dispatch_order_and_semaphores_across_queues():
    """Each queue issues its instructions in program order, one at a time; a wait issues
    only after the signal it waits for; the ISA's completion rules hold."""
    prog = [
        credit(sig=1, sig_sem=0),                       # 0 TX
        load(wait_sem=0, wait_cnt=1, sig=1, sig_sem=1),   # 1 EX: after 0
        recv(wait_sem=1, wait_cnt=1, sig=1, sig_sem=2),   # 2 RX: after 1
        load(),                                         # 3 EX
        credit(wait_sem=2, wait_cnt=1),                 # 4 TX: after 2
        Sync(on=Queue.RX, sig=1, sig_sem=3),            # 5 RX
        load(wait_sem=3, wait_cnt=1, sig=1, sig_sem=4),   # 6 EX: after 5
        End(wait_sem=4, wait_cnt=1),                    # 7 EX
    ]
    b = Bench(prog).run()
    assert b.status["done"] and not b.status["fault"], b.status
    for q in Queue:
        want = [pc for pc in queue_pcs(prog, q) if not isinstance(prog[pc], (Sync, End))]
        assert b.order(q) == want, (q, b.order(q))
    assert b.when("issued", 1) > b.when("completed", 0)
    assert b.when("issued", 2) > b.when("completed", 1)
    assert b.when("issued", 4) > b.when("completed", 2)
    assert b.when("issued", 3) > b.when("completed", 1)          # EX: one at a time
    assert b.when("issued", 6) > b.when("completed", 3)
    assert b.sems == [0] * CFG.num_sems
    assert b.perf["retired"] == [sum(1 for i in prog if i.queue == q) for q in Queue]


def test_simultaneous_increments_are_summed():
    prog = [Sync(on=Queue.EX, wait_sem=5, wait_cnt=42, sig=1, sig_sem=6), End()]
    b = Bench(prog)
    # (128: above the 6-bit wait count, its low bits 0 -- the "not below 64" bit)
    b.events = {60: [("done", 5, 1), ("credit", 5, 127)]}
    b.run()
    assert b.status["done"], b.status
    assert b.sems[5] == 128 - 42 and b.sems[6] == 1
    # one short: the SYNC never issues, the watchdog stops the node
    b = Bench(prog)
    b.events = {60: [("done", 5, 1), ("credit", 5, 40)]}
    b.watchdog = 200
    b.run()
    assert b.status["fault"] and b.status["fault_cause"] == SeqFault.WATCHDOG
    assert b.sems[5] == 41
    assert b.perf["stall_sem"][Queue.EX] > 150


def test_two_queues_never_take_one_semaphore_twice():
    prog = [Sync(on=Queue.TX, wait_sem=2, wait_cnt=1), Sync(on=Queue.EX, wait_sem=2, wait_cnt=1),
            Sync(on=Queue.RX, wait_sem=2, wait_cnt=1), End()]
    b = Bench(prog)
    b.events = {40: [("credit", 2, 2)]}
    b.watchdog = 300
    b.run()
    assert b.status["fault_cause"] == SeqFault.WATCHDOG          # two of three could issue
    assert b.sems[2] == 0 and b.perf["retired"][Queue.TX] + b.perf["retired"][Queue.RX] + \
        b.perf["retired"][Queue.EX] == 2


def test_semaphore_overflow_faults():
    b = Bench([Sync(on=Queue.EX, wait_sem=7, wait_cnt=1), End()])
    b.events = {50: [("credit", 2, 65535), ("done", 2, 1)]}
    b.run()
    assert b.status["fault"] and b.status["fault_cause"] == SeqFault.SEM_OVERFLOW


@pytest.mark.parametrize("case", ["zero", "opcode", "reserved", "enum", "sem", "ddr"])
def test_illegal_instructions(case):
    cfg = NodeConfig.tiny(num_sems=8)
    good = encode_program([Sync(on=Queue.EX), load()])
    word = int.from_bytes(encode_program([load()]), "little")
    if case == "zero":
        word = 0
    elif case == "opcode":
        word = (word & ~0x3F) | 63
    elif case == "reserved":
        word |= 1 << 255
    elif case == "enum":
        word = int.from_bytes(encode_program([Sync(on=Queue.EX)]), "little") | (3 << 32)   # on = 3
    elif case == "sem":
        word = int.from_bytes(encode_program([load(wait_sem=9, wait_cnt=1)]), "little")
    elif case == "ddr":
        word |= 1 << (32 + 41)          # LOAD.ddr bit 41: beyond a 40-bit address space
    prog = good + word.to_bytes(INSTR_BYTES, "little") + encode_program([End()])
    b = Bench(prog, config=cfg).run()
    assert b.status["fault"] and b.status["fault_cause"] == SeqFault.ILLEGAL_INSTRUCTION, (case, b.status)
    assert b.status["fault_pc"] == 2
    assert b.order(Queue.EX) == [1]


def test_program_overrun():
    b = Bench([load(), Sync(on=Queue.TX)]).run()
    assert b.status["fault_cause"] == SeqFault.PROGRAM_OVERRUN and b.status["fault_pc"] == 2


def test_end_waits_for_the_engines_to_drain():
    b = Bench([credit(), recv(), End()])
    b.busy_until = 400
    b.run()
    assert b.status["done"] and b.cycles >= 400


def test_execute_unit_fault_keeps_its_cause_and_instruction():
    b = Bench([load(), load(), load(), End()])
    b.ex_faults = {1: SeqFault.UNREADABLE_BLOCK}
    b.run()
    assert b.status["fault_cause"] == SeqFault.UNREADABLE_BLOCK and b.status["fault_pc"] == 1
    assert b.order(Queue.EX) == [0, 1]


def test_network_errors_fault_only_when_enabled():
    prog = [Sync(on=Queue.EX, wait_sem=1, wait_cnt=1), End()]
    b = Bench(prog)
    b.fault_mask = 1 << ErrorCause.BAD_HEADER
    b.net_error_at = {80: ErrorCause.SHORT_PACKET, 90: ErrorCause.BAD_HEADER}
    b.run()
    assert b.status["fault_cause"] == SeqFault.NETWORK and 90 <= b.cycles <= 95


def test_watchdog_counts_quiet_cycles_only():
    prog = [Sync(on=Queue.EX, wait_sem=1, wait_cnt=1), End()]
    b = Bench(prog)
    b.watchdog = 100
    b.activity = set(range(0, 1000, 50))
    b.events = {1000: [("done", 1, 1)]}
    b.run()
    assert b.status["done"], b.status
    b = Bench(prog)
    b.watchdog = 100
    b.run()
    assert b.status["fault_cause"] == SeqFault.WATCHDOG and b.cycles < 200


def test_abort_and_start_waits_for_idle():
    prog = [Sync(on=Queue.EX, wait_sem=1, wait_cnt=1), End()]
    b = Bench(prog)
    b.abort_at = 300
    b.idle_from = 120
    b.run()
    assert b.status["fault_cause"] == SeqFault.ABORTED
    first = min(c for c, _, _ in b.completed) if b.completed else None
    assert first is None
    assert b.perf["stall_sem"][Queue.EX] < 300 - 120


def test_performance_events():
    prog = [credit(), load(), load(), recv(), Sync(on=Queue.TX), End()]
    b = Bench(prog).run()
    assert b.status["done"]
    assert b.perf["retired"] == [3, 2, 1]
    assert b.perf["stall_fetch"] > 0          # the first words take a few cycles to arrive
