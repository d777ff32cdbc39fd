"""The sequencer (``spec/isa.py``, docs/node.md section 2): fetch, decode, in-order dispatch
into the EX / TX / RX queues, per-queue issue on semaphores, END, faults and the watchdog.

    fetch FIFO ─► pre-decode ─► decode ─► EX queue ─► issue ─► ex  (execute unit)
                  (registers)  (registers) ├─► TX queue ─► issue ─► tx  (TX engine: SEND, CREDIT)
                                        └─► RX queue ─► issue ─► rx  (RX engine: RECV)

*Dispatch* takes instructions in program order and puts each into its queue (SYNC into the
one its ``on`` names); an illegal one faults ILLEGAL_INSTRUCTION; after END nothing more is
dispatched; running out of PROG_COUNT without END faults PROGRAM_OVERRUN.

*Issue*: each queue runs one instruction at a time.  Its head issues once the previous one
of the queue has completed and its wait is met (``wait_cnt == 0`` or ``sem[wait_sem] >=
wait_cnt``, which is then taken); two queues never take from one semaphore in one cycle (EX
before TX before RX).  Completion: the execute unit's ``ex_done``, the TX engine's
``tx_done``, a RECV when the RX engine has posted it, a SYNC at once; then ``sig`` adds one
to ``sem[sig_sem]``.  END completes when the TX and RX queues are empty and the engines are
idle (every send has left, every posted RECV has completed, every DDR write is
acknowledged): ``done``.

*Faults* stop the program (``running`` falls; engines finish what they have in flight and
take no more): an illegal instruction, PROGRAM_OVERRUN, an execute-unit fault, a DDR fault
(out of window, error response), a semaphore overflow, an error counted under a cause
enabled in ``fault_mask`` (NETWORK), the watchdog (``watchdog`` cycles with nothing retired
or dispatched and no ``activity``), or ``abort`` (ABORTED).

*Timing* (the 250 MHz budget of docs/timing.md, `mcf synth seq`): the decoder's per-opcode
checks are registered before the word's own is selected (pre-decode); a queue word carries
whether it waits (decoded at dispatch); a queue head's wait is checked a cycle ahead into a
register (``sem_ok``) from the value it names read into a register the cycle before (``cur``),
against every take that value does not show yet; whether two heads name one semaphore is
registered from the heads of the cycle before (valid for every head that can take); a
committed head leaves its queue the cycle after (``pop``); the semaphores register their take
events, decrements and ``overflow``; ``engines_idle`` and ``activity`` enter through a
register (END then also needs the TX / RX queues and slots empty the cycle before), and so does
``datapath_idle`` (a start waiting for it launches a cycle later); a fault's
sources are registered (the execute unit's, the DDR's and the network's already at the
port), and the cycle after, ``running`` falls (as
it did with the fault taken at once) while the first source's cause and instruction are
registered (``fault`` reads one cycle after ``running`` fell); the fetch unit's burst size
takes two register steps.  Costs: an instruction that waits on a semaphore issues two cycles
later than the value allows (three for a head that just arrived, and after a take from the
same semaphore), a word entering an empty pipeline dispatches a cycle later, a fetch burst is
issued two cycles later, a fault of the execute unit, the DDR or the network stops the program
a cycle later, END completes a cycle later, the watchdog sees ``activity`` a cycle late.

*Start*: ``start`` waits (``start_pending``) until the datapath is idle, pulses ``clear``
(this unit's fetch, queues and semaphores and, in the node, the engines are reset) and runs
the program at ``prog_base``.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, enum, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axi.full import BOUNDARY_BYTES, BURST_INCR, MAX_BURST_BEATS, AXI4Signature
from mcf.hw.dma.common import AXCACHE
from mcf.hw.fifo import BlockFIFO
from mcf.hw.layouts import InstrHeaderLayout, register_word
from mcf.hw.lut import pick
from mcf.hw.registry import block
from mcf.hw.seq.decode import CODES, Decoder, legal_of
from mcf.hw.seq.sems import SEM_WIDTH, SemEventSignature, Semaphores
from mcf.spec import ErrorCause
from mcf.spec.isa import INSTR_BITS, INSTR_BYTES, SEM_BITS, Opcode, Queue, SeqFault
from mcf.spec.node import NodeConfig
from mcf.spec.params import Choice
from mcf.spec.regmap import DMA_ADDR_BITS, PC_BITS, REGISTERS


# --- fetch --------------------------------------------------------------------------------------
# Instruction fetch: DMA read bursts from PROG_BASE into a small prefetch FIFO.
#
# On ``start`` the unit reads the program's ``count`` instructions (``INSTR_BYTES`` each) from
# ``base`` with INCR bursts (never across 4 KiB, at most 256 beats), never more than the FIFO
# has room for (space is reserved when a burst is issued, so R data is always taken).  Words
# leave on ``o`` in order with their index (``pc``).  ``stop`` (END dispatched, or the node
# halted) issues no further burst; bursts in flight still land.  ``busy`` while a burst is in
# flight.  A new program needs a reset of this unit (the sequencer resets it at start).

#: An instruction word with its index in the program.
FetchedLayout = data.StructLayout({"word": INSTR_BITS, "pc": PC_BITS})


class Fetch(wiring.Component):
    """Ports: ``m_axi`` (AXI4 read channels), ``start`` + ``base`` + ``count``, ``stop``,
    ``o`` (instruction words), ``busy``, ``pc`` (index of the next instruction to request)."""

    def __init__(self, data_width: int = 128, addr_width: int = 40, depth: int = 8):
        if data_width > INSTR_BITS or INSTR_BITS % data_width:
            raise ValueError(f"fetch: data_width={data_width} must divide {INSTR_BITS}")
        if depth < 2 or depth & (depth - 1):
            raise ValueError(f"fetch: depth={depth} must be a power of two >= 2")
        self.data_width, self.addr_width, self.depth = data_width, addr_width, depth
        self.beats = INSTR_BITS // data_width
        super().__init__({
            "m_axi": Out(AXI4Signature(addr_width, data_width, 1, write=False)),
            "start": In(1),
            "base": In(DMA_ADDR_BITS),
            "count": In(PC_BITS),
            "stop": In(1),
            "o": Out(stream.Signature(FetchedLayout)),
            "busy": Out(1),
            "pc": Out(PC_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        axi, depth, B = self.m_axi, self.depth, self.beats
        bus_log2 = (self.data_width // 8).bit_length() - 1
        instr_log2 = INSTR_BYTES.bit_length() - 1
        # (a ``BlockFIFO``: cycle for cycle ``SyncFIFOBuffered``, the reader's pop -- behind the
        # queues' levels -- not in front of the level's adder (issue 14); round 29: its word comes
        # straight from the memory's read register, where ``buffered_fifo``'s head chose between
        # its second register and the memory, a LUT a bit of the 280-bit word)
        m.submodules.words = words = BlockFIFO(FetchedLayout.size, depth)

        active = Signal()
        addr = Signal(self.addr_width)
        nxt = Signal(PC_BITS)            # instructions requested
        count = Signal(PC_BITS)
        reserved = Signal(range(depth + 1))   # requested, not yet in the FIFO
        pending = Signal()               # AR valid
        m.d.comb += self.pc.eq(nxt)

        # --- burst sizing: min(free space, rest of the program, rest of the 4 KiB page, 256 beats)
        # In two register steps (free / left / page, then the size k and the go-ahead), used
        # the cycle after: they are stale only after a start or an issue (which change addr,
        # nxt, count and reserved), so ``k_ok`` holds the two cycles after either off.
        # Otherwise the free space can only have grown since (a word pushed leaves its
        # reservation, one popped frees a place): never more is reserved than there is.
        free = Signal(range(depth + 1))
        m.d.sync += free.eq(depth - words.level - reserved)
        left = Signal(range(depth + 1))      # the rest of the program, capped at the FIFO's depth
        rest = Signal(PC_BITS)
        m.d.comb += rest.eq(count - nxt)
        m.d.sync += left.eq(Mux(rest > depth, depth, rest))
        page = Signal(range(BOUNDARY_BYTES // INSTR_BYTES + 1))
        m.d.sync += page.eq((BOUNDARY_BYTES - addr[:12]) >> instr_log2)
        cap = min(depth, MAX_BURST_BEATS // B)
        # k = min(free, left, page, cap), and the go-ahead: k != 0 and k >= min(page, left, half)
        # (wait for half the FIFO, or all that remains, so bursts are not one instruction long).
        # Both from compares of the registers side by side, not from the minimums in a row
        # (issue 14: ``left`` -> two minimums -> the go-ahead's compare was 9 levels): k
        # >= min(page, left, half) holds iff each term of k does, and left's and page's always do.
        k = Signal(range(cap + 1))
        half = max(1, depth // 2)
        f_min = (free <= left) & (free <= page) & (free <= cap)
        l_min = (left <= page) & (left <= cap)
        p_min = page <= cap
        m.d.comb += k.eq(Mux(f_min, free, Mux(l_min, left, Mux(p_min, page, cap))))
        go = ((free != 0) & (left != 0) & (page != 0)
              & ((free >= page) | (free >= left) | (free >= half))
              & ((page <= cap) | (left <= cap) | (cap >= half)))

        issue = Signal()
        k_q, go_q, k_ok1, k_ok = Signal.like(k), Signal(), Signal(), Signal()
        m.d.sync += [k_q.eq(k), go_q.eq(go),
                     k_ok1.eq(~self.start & ~issue), k_ok.eq(k_ok1 & ~self.start & ~issue)]
        m.d.comb += issue.eq(active & ~self.start & ~self.stop & ~pending & k_ok & go_q)
        with m.If(self.start):
            m.d.sync += [active.eq(1), addr.eq(self.base), nxt.eq(0), count.eq(self.count)]
        with m.Elif(issue):
            m.d.sync += [pending.eq(1), axi.araddr.eq(addr), axi.arlen.eq(k_q * B - 1),
                         addr.eq(addr + (k_q << instr_log2)), nxt.eq(nxt + k_q)]
        ar_fire = axi.arvalid & axi.arready
        with m.If(ar_fire):
            m.d.sync += pending.eq(0)
        m.d.comb += [axi.arvalid.eq(pending), axi.arsize.eq(bus_log2), axi.arburst.eq(BURST_INCR),
                     axi.arcache.eq(AXCACHE), axi.arid.eq(0)]

        # --- R beats -> words ------------------------------------------------------------------
        beat = Signal(range(B))
        shift = Signal(INSTR_BITS)
        pc = Signal(PC_BITS)
        r_fire = axi.rvalid & axi.rready
        m.d.comb += axi.rready.eq(1)         # room was reserved
        full_word = Signal(INSTR_BITS)
        if B == 1:
            m.d.comb += full_word.eq(axi.rdata)
        else:
            m.d.comb += full_word.eq(Cat(shift[self.data_width:], axi.rdata))
        push = Signal()
        out = Signal(FetchedLayout)
        m.d.comb += [out.word.eq(full_word), out.pc.eq(pc), words.w_data.eq(out), words.w_en.eq(push)]
        with m.If(r_fire):
            m.d.sync += shift.eq(full_word)
            if B > 1:
                m.d.sync += beat.eq(beat + 1)
            with m.If(beat == B - 1):
                m.d.comb += push.eq(1)
                m.d.sync += [beat.eq(0), pc.eq(pc + 1)]
        # reserved: + k at issue, - 1 per word pushed
        issued = Signal(range(cap + 1))
        with m.If(issue):
            m.d.comb += issued.eq(k_q)
        m.d.sync += reserved.eq(reserved + issued - push)

        m.d.comb += [self.o.valid.eq(words.r_rdy), self.o.payload.eq(words.r_data), words.r_en.eq(self.o.ready),
                     self.busy.eq(pending | (reserved != 0))]
        return m


# --- the sequencer -----------------------------------------------------------------------------
#: Width of a fault cause on the node's internal ports (SEQ_STATUS.fault_cause).
FAULT_BITS = REGISTERS["SEQ_STATUS"].field("fault_cause").width
#: ``engines_idle``'s bits: the node's engines in groups, each entering through its own register (issue 14:
#: one AND of every engine's state in front of one register was 9 LUT levels, mapped as a chain)
ENGINE_IDLE_PARTS = 3
#: What the TX and RX engines receive: the instruction word and its index.
IssueLayout = FetchedLayout


class Slot(enum.Enum, shape=2):
    """A queue's instruction in flight."""
    EMPTY = 0
    OFFER = 1     # offered to the engine
    BUSY = 2      # taken by the engine, not completed
    END = 3       # END waiting for the node to drain


class Sequencer(wiring.Component):
    def __init__(self, config: NodeConfig = NodeConfig(), primitive: bool = False):
        self.config = config
        # (round 29) the picks of a semaphore's value by an index (the queue heads' ``cur``,
        # SEM_DATA's value) as LUT6 4:1 layers (``pick``); the node's build only
        self.primitive = primitive
        self.fetch = Fetch(config.data_width, config.ddr_addr_bits, config.fetch_depth)
        super().__init__({
            "m_axi": Out(self.fetch.m_axi.signature),
            # engines
            "ex": Out(stream.Signature(INSTR_BITS)),
            "ex_done": In(1), "ex_fault": In(1), "ex_fault_cause": In(FAULT_BITS),
            "tx": Out(stream.Signature(IssueLayout)),
            "tx_done": In(1),
            "rx": Out(stream.Signature(IssueLayout)),
            "rx_done_inc": In(SemEventSignature(1)),
            "rx_credit_inc": In(SemEventSignature(16)),
            # TX / RX engines and the execute unit have nothing in flight: every bit (the engines in
            # ENGINE_IDLE_PARTS groups, each registered here and ANDed after the register)
            "engines_idle": In(ENGINE_IDLE_PARTS),
            "datapath_idle": In(1),      # no DMA transfer, packet or DDR burst besides: with both a start may go
            "ddr_fault": In(1), "ddr_fault_cause": In(FAULT_BITS), "ddr_fault_pc": In(PC_BITS),
            "net_errors": In(len(ErrorCause)),
            "activity": In(1),
            "rx_slot_wait": In(1),
            "rx_posted": In(8),
            # control
            "start": In(1), "abort": In(1),
            "prog_base": In(DMA_ADDR_BITS), "prog_count": In(PC_BITS),
            "fault_mask": In(32), "watchdog": In(32),
            # status
            "running": Out(1), "done": Out(1), "fault": Out(1), "start_pending": Out(1),
            "fault_cause": Out(FAULT_BITS), "pc": Out(PC_BITS), "fault_pc": Out(PC_BITS),
            "wait": Out(32), "levels": Out(32),
            "clear": Out(1),
            "irq_done": Out(1), "irq_fault": Out(1),
            "sem_index": In(SEM_BITS), "sem_value": Out(SEM_WIDTH),
            "fetch_pc": Out(PC_BITS), "fetch_busy": Out(1),
            "ex_pc": Out(PC_BITS), "tx_pc": Out(PC_BITS),   # the EX / TX instruction in flight
            # performance events (one cycle each)
            "retired": Out(3),           # per Queue
            "stall_sem": Out(3),         # per Queue: the head waits on its semaphore
            "stall_fetch": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        clear = Signal()
        m.submodules.fetch = fetch = ResetInserter(clear)(self.fetch)
        m.submodules.decoder = dec = Decoder(cfg.num_sems, cfg.ddr_addr_bits)
        m.submodules.sems = sems = Semaphores(cfg.num_sems, [1, 1, 1, 1, 16], n_dec=3,
                                              primitive=self.primitive)   # (round 30b: adders as LUT6_2)
        queues = []
        for q in Queue:
            f = ResetInserter(clear)(fifo.SyncFIFOBuffered(width=IssueLayout.size + 1, depth=cfg.seq_queue_depth))
            m.submodules[f"q_{q.name.lower()}"] = f
            queues.append(f)
        wiring.connect(m, wiring.flipped(self.m_axi), fetch.m_axi)
        m.d.comb += [sems.clear.eq(clear), self.clear.eq(clear)]

        run_q, done, fault, pending = Signal(), Signal(), Signal(), Signal()
        # Faults are taken in two register steps (below): the cycle after a fault's condition
        # the program no longer runs (as with the fault taken at once: ``raise_fault`` is a
        # register); the fault's cause and instruction are registered in that cycle.
        raise_fault = Signal()
        running = Signal()
        m.d.comb += running.eq(run_q & ~raise_fault)
        cause, fault_pc = Signal(FAULT_BITS), Signal(PC_BITS)
        ended = Signal()
        dispatched = Signal(PC_BITS)
        count = Signal(PC_BITS)
        m.d.comb += [self.running.eq(running), self.done.eq(done), self.fault.eq(fault),
                     self.start_pending.eq(pending), self.fault_cause.eq(cause), self.fault_pc.eq(fault_pc),
                     self.pc.eq(dispatched), self.fetch_pc.eq(fetch.pc), self.fetch_busy.eq(fetch.busy)]

        # --- start / abort ------------------------------------------------------------------------
        launch = Signal()
        with m.If(self.start & ~running):
            m.d.sync += pending.eq(1)
        with m.If(self.abort & ~running):
            m.d.sync += pending.eq(0)
        # ``datapath_idle`` comes from the whole node (DMA, interconnect, the PS's queues) and
        # ``engines_idle`` from the engines: a start needs both; each enters through a register and
        # they are ANDed after (issue 14: one AND of the whole datapath was in front of one
        # register; a start that waits for the datapath launches a cycle after it went idle)
        datapath_idle_q, engines_idle_b = Signal(), Signal(ENGINE_IDLE_PARTS)
        m.d.sync += [datapath_idle_q.eq(self.datapath_idle), engines_idle_b.eq(self.engines_idle)]
        with m.FSM(name="boot"):
            with m.State("IDLE"):
                with m.If(pending & ~running & datapath_idle_q & engines_idle_b.all() & ~self.abort):
                    m.next = "CLEAR"
            with m.State("CLEAR"):
                m.d.comb += clear.eq(1)
                m.next = "LAUNCH"
            with m.State("LAUNCH"):
                m.d.comb += [launch.eq(1), fetch.start.eq(1)]
                m.d.sync += [run_q.eq(1), done.eq(0), fault.eq(0), cause.eq(SeqFault.NONE), fault_pc.eq(0),
                             pending.eq(0), ended.eq(0), dispatched.eq(0), count.eq(self.prog_count)]
                m.next = "IDLE"
        m.d.comb += [fetch.base.eq(self.prog_base), fetch.count.eq(self.prog_count),
                     fetch.stop.eq(ended | ~running)]

        # --- faults (the first wins) --------------------------------------------------------------
        new_cause = Signal(FAULT_BITS)
        new_pc = Signal(PC_BITS)

        sources = []          # (condition, cause, pc), highest priority first

        # --- pre-decode and decode stages -----------------------------------------------------------
        # pre-decode (pw): the word with the decoder's per-opcode checks registered; decode (dq):
        # its queue, END and legality (the checks of its own opcode).  Two register steps for
        # the 250 MHz budget; words move only while the program runs and has not ended.
        pw = Signal(IssueLayout)
        pw_valid, pw_take = Signal(), Signal()
        pw_checks = Signal(len(dec.checks))        # (the checks registered one by one: issue 14,
        # their AND per opcode was 9 levels in front of the register)
        dq = Signal(IssueLayout)
        dq_valid, dq_queue, dq_illegal, dq_end, dq_waits = Signal(), Signal(2), Signal(), Signal(), Signal()
        dq_take = Signal()
        m.d.comb += [pw_take.eq(pw_valid & running & ~ended & (~dq_valid | dq_take)),
                     dec.word.eq(fetch.o.payload.word),
                     fetch.o.ready.eq(running & ~ended & (~pw_valid | pw_take))]
        with m.If(fetch.o.valid & fetch.o.ready):
            m.d.sync += [pw_valid.eq(1), pw.eq(fetch.o.payload), pw_checks.eq(dec.checks)]
        with m.Elif(pw_take):
            m.d.sync += pw_valid.eq(0)
        m.submodules.decoder_q = dec_q = Decoder(cfg.num_sems, cfg.ddr_addr_bits)   # queue and END only
        m.d.comb += dec_q.word.eq(pw.word)
        pw_legal = Signal(len(CODES))
        m.d.comb += pw_legal.eq(dec.legal_codes_of(pw_checks))
        pw_legal_op = legal_of(m, dec_q.header.op, pw_legal)
        with m.If(pw_take):
            m.d.sync += [dq_valid.eq(1), dq.eq(pw), dq_queue.eq(dec_q.queue),
                         dq_illegal.eq(~pw_legal_op), dq_end.eq(dec_q.end),
                         dq_waits.eq(dec_q.header.wait_cnt != 0)]
        with m.Elif(dq_take):
            m.d.sync += dq_valid.eq(0)
        with m.If(clear):
            m.d.sync += [pw_valid.eq(0), dq_valid.eq(0)]

        # --- dispatch ---------------------------------------------------------------------------
        for q, f in zip(Queue, queues):
            m.d.comb += f.w_data.eq(Cat(dq, dq_waits))      # the word, and whether it waits
        space = Signal()
        m.d.comb += space.eq(Cat(*(f.w_rdy & (dq_queue == int(q)) for q, f in zip(Queue, queues))).any())
        with m.If(running & dq_valid & ~dq_illegal & space):
            m.d.comb += dq_take.eq(1)
            for q, f in zip(Queue, queues):
                m.d.comb += f.w_en.eq(dq_queue == int(q))
            m.d.sync += dispatched.eq(dq.pc + 1)
            with m.If(dq_end):
                m.d.sync += ended.eq(1)
        sources.append((running & dq_valid & dq_illegal, SeqFault.ILLEGAL_INSTRUCTION, dq.pc))
        starved = Signal()
        m.d.comb += starved.eq(running & ~ended & ~dq_valid & ~pw_valid & ~fetch.o.valid)
        sources.append((starved & (dispatched == count) & ~fetch.busy, SeqFault.PROGRAM_OVERRUN, count))
        m.d.comb += self.stall_fetch.eq(starved & (dispatched != count))

        # --- issue ---------------------------------------------------------------------------------
        slot = [Signal(Slot, name=f"slot_{q.name.lower()}") for q in Queue]
        slot_pc = [Signal(PC_BITS, name=f"slot_pc_{q.name.lower()}") for q in Queue]
        slot_word = [Signal(INSTR_BITS, name=f"slot_word_{q.name.lower()}") for q in Queue]
        slot_sig = [Signal(name=f"slot_sig_{q.name.lower()}") for q in Queue]
        slot_sem = [Signal(SEM_BITS, name=f"slot_sem_{q.name.lower()}") for q in Queue]
        complete = [Signal(name=f"complete_{q.name.lower()}") for q in Queue]
        commit = [Signal(name=f"commit_{q.name.lower()}") for q in Queue]
        taking = []            # the higher-priority queues
        sem_value = Signal(SEM_WIDTH)
        waiting = []
        hdrs = []
        for qi, (q, f) in enumerate(zip(Queue, queues)):
            hdr = Signal(InstrHeaderLayout, name=f"hdr_{q.name.lower()}")
            m.d.comb += hdr.eq(f.r_data[:InstrHeaderLayout.size])
            hdrs.append(hdr)
        # A head's wait is checked one cycle ahead, into a register (sem_ok): the semaphore it
        # names, read this cycle, holds enough, the head stays (its queue cannot commit now)
        # and no take from that semaphore is in flight (one another queue may commit now, or
        # one registered in the semaphores: values do not show either yet).  Increments only
        # raise a value, so the check stays true.  A head without a wait needs no check.  The
        # terms are what a queue *could* commit (``can``, before the same-cycle priority
        # between queues): never less than what it commits, and one register away.
        #
        # Two heads naming one semaphore (``same``, per pair of queues) is compared a cycle ahead
        # into a register, from the heads of the cycle before: a head that takes now has
        # ``sem_ok``, so it did not commit in the cycle before and is the head of that cycle
        # (``stable``); the check itself needs a ``stable`` head (below).
        sem_ok = [Signal(name=f"sem_ok_{q.name.lower()}") for q in Queue]
        can = [Signal(name=f"can_{q.name.lower()}") for q in Queue]
        waits = [Signal(name=f"waits_{q.name.lower()}") for q in Queue]
        takes = [Signal(name=f"takes_{q.name.lower()}") for q in Queue]
        stable = [Signal(name=f"stable_{q.name.lower()}") for q in Queue]
        pop = [Signal(name=f"pop_{q.name.lower()}") for q in Queue]
        same = {}
        for qi in range(len(queues)):
            for qj in range(qi + 1, len(queues)):
                same[qi, qj] = same[qj, qi] = s = Signal(name=f"same_sem_{qi}{qj}")
                m.d.sync += s.eq(hdrs[qi].wait_sem == hdrs[qj].wait_sem)
        for qi, (q, f) in enumerate(zip(Queue, queues)):
            hdr = hdrs[qi]
            m.d.comb += [waits[qi].eq(f.r_data[-1]),
                         can[qi].eq(f.r_rdy & (slot[qi] == Slot.EMPTY) & running & (~waits[qi] | sem_ok[qi])),
                         takes[qi].eq(can[qi] & waits[qi])]
            m.d.sync += [stable[qi].eq(f.r_rdy & ~pop[qi] & ~clear), pop[qi].eq(commit[qi] & ~clear)]
        # The value the head names is read into a register (``cur``) and compared the cycle
        # after, when the head is still the same (``stable``): it then misses the takes of the
        # three cycles before the check (``taken`` now and a cycle ago) and of the check's own.
        # (issue 14: ``taken`` now as its parts -- the registered events compared with the head's
        # semaphore directly, no pick of them, and the pick of ``dec_nz``; ``taken`` a cycle ago
        # picked a cycle ago into a register, ``taken_h``: the same head then, as the check needs
        # ``stable``.  The pick of ``taken`` | its register was 9 levels, mapped as a chain)
        # (issue 14: ``cur`` only meets ``wait_cnt``, 6 bits: a value's bits above those are
        # seen as one "not below 64" bit per semaphore, ``hi``, so each queue picks 7 bits of
        # 32 semaphores, not 16; the compare's answer is the same)
        cnt_bits = len(hdrs[0].wait_cnt)
        hi = [Signal(name=f"sem_hi{i}") for i in range(len(sems.values))]
        m.d.comb += [h.eq(v[cnt_bits:].any()) for h, v in zip(hi, sems.values)]
        lows = [Cat(v[:cnt_bits], h) for v, h in zip(sems.values, hi)]
        for qi, (q, f) in enumerate(zip(Queue, queues)):
            hdr = hdrs[qi]
            cur = Signal(cnt_bits + 1, name=f"cur_{q.name.lower()}")
            taken_h = Signal(name=f"taken_h_{q.name.lower()}")
            m.d.sync += [cur.eq(pick(m, lows, hdr.wait_sem, self.primitive, f"cur_{q.name.lower()}_pick")),
                         taken_h.eq(self._pick(sems.taken, hdr.wait_sem))]
            in_flight = self._pick(sems.dec_nz, hdr.wait_sem) | taken_h
            for k in range(len(sems.dec_v)):
                in_flight = in_flight | (sems.dec_v[k] & (sems.dec_s[k] == hdr.wait_sem))
            for qj in range(len(queues)):
                if qj != qi:
                    in_flight = in_flight | (takes[qj] & same[qi, qj])
            m.d.sync += sem_ok[qi].eq(f.r_rdy & stable[qi] & ~pop[qi] & ~can[qi] & (cur >= hdr.wait_cnt)
                                      & ~in_flight)
        for qi, (q, f) in enumerate(zip(Queue, queues)):
            head = Signal(IssueLayout, name=f"head_{q.name.lower()}")
            hdr = hdrs[qi]
            m.d.comb += head.eq(f.r_data[:IssueLayout.size])
            wait_ok = ~waits[qi] | sem_ok[qi]
            # never two queues take from one semaphore in a cycle: a queue yields to any of
            # higher priority that could take from the semaphore it names (``takes``, not the
            # commit: the rule then stays one logic level deep, and it only ever holds back a
            # queue whose semaphore another one names; ``same`` is valid for both, above)
            blocked = Const(0)
            for qj in taking:
                blocked = blocked | (takes[qj] & same[qi, qj])
            m.d.comb += commit[qi].eq(can[qi] & ~(waits[qi] & blocked))
            # (what the head waits on stays visible after the node stopped: SEQ_WAIT explains a fault)
            waiting.append((f.r_rdy & (slot[qi] == Slot.EMPTY) & ~wait_ok, hdr.wait_sem))
            taking.append(qi)
            dec_port = getattr(sems, f"dec{qi}")
            m.d.comb += [dec_port.valid.eq(commit[qi] & waits[qi]), dec_port.sem.eq(hdr.wait_sem),
                         dec_port.amount.eq(hdr.wait_cnt), f.r_en.eq(pop[qi])]
            is_sync = hdr.op == int(Opcode.SYNC)
            is_end = hdr.op == int(Opcode.END)
            with m.If(commit[qi]):
                m.d.sync += [slot_pc[qi].eq(head.pc), slot_word[qi].eq(head.word), slot_sig[qi].eq(hdr.sig),
                             slot_sem[qi].eq(hdr.sig_sem)]
                with m.If(is_sync):
                    m.d.sync += slot[qi].eq(Slot.BUSY)       # completes next cycle
                with m.Elif(is_end):                         # (END is only ever in the EX queue)
                    m.d.sync += slot[qi].eq(Slot.END)
                with m.Else():
                    m.d.sync += slot[qi].eq(Slot.OFFER)
            m.d.comb += self.stall_sem[qi].eq(f.r_rdy & (slot[qi] == Slot.EMPTY) & running & ~wait_ok)
            inc = getattr(sems, f"inc{qi}")
            m.d.comb += [inc.valid.eq(complete[qi] & slot_sig[qi]), inc.sem.eq(slot_sem[qi]), inc.amount.eq(1),
                         self.retired[qi].eq(complete[qi])]
            with m.If(complete[qi]):
                m.d.sync += slot[qi].eq(Slot.EMPTY)
            with m.If(clear):
                m.d.sync += slot[qi].eq(Slot.EMPTY)
        m.d.comb += [self.sem_value.eq(pick(m, sems.values, self.sem_index, self.primitive, "sem_value_pick")),
                     self.ex_pc.eq(slot_pc[int(Queue.EX)]), self.tx_pc.eq(slot_pc[int(Queue.TX)])]

        # SYNC: the slot is BUSY with a SYNC word -> complete at once.
        def slot_is(qi, op):
            return slot_word[qi][:6] == int(op)

        ex, tx, rx = int(Queue.EX), int(Queue.TX), int(Queue.RX)
        # EX
        m.d.comb += [self.ex.valid.eq(slot[ex] == Slot.OFFER), self.ex.payload.eq(slot_word[ex])]
        with m.If(self.ex.valid & self.ex.ready):
            m.d.sync += slot[ex].eq(Slot.BUSY)
        ex_sync = (slot[ex] == Slot.BUSY) & slot_is(ex, Opcode.SYNC)
        # ``engines_idle`` comes from the whole node: it enters through a register.  It then
        # tells of the cycle before, so the TX / RX queues and slots must have been empty in that
        # cycle too (no instruction was handed to an engine that the register does not show yet).
        drained, quiet, quiet_q, engines_idle_q = Signal(), Signal(), Signal(), Signal(ENGINE_IDLE_PARTS)
        m.d.comb += quiet.eq(~queues[tx].r_rdy & (slot[tx] == Slot.EMPTY) & ~queues[rx].r_rdy
                             & (slot[rx] == Slot.EMPTY))
        m.d.sync += [quiet_q.eq(quiet), engines_idle_q.eq(self.engines_idle)]
        m.d.comb += drained.eq(quiet & quiet_q & engines_idle_q.all())
        # The faults of the node's other units (the execute unit, the DDR interconnect, the
        # network's error counters) come from far away: they enter through a register with
        # what they carry (``arm``: the program ran that cycle and END did not complete), and
        # are then sources like the others, a cycle later.  An END does not complete while an
        # execute-unit or DDR fault is in that register (a fault of the program's own work seen
        # before its END completes wins, as without the register); a network error there is
        # like one that arrived a cycle later (after the END: not the program's fault).
        end_done = Signal()
        arm = Signal(name="ext_fault_arm")
        ext = {name: Signal.like(getattr(self, name), name=f"{name}_q")
               for name in ("ex_fault", "ex_fault_cause", "ddr_fault", "ddr_fault_cause", "ddr_fault_pc",
                            "net_errors")}
        ex_fault_pc = Signal(PC_BITS, name="ex_fault_pc_q")
        m.d.sync += [arm.eq(running & ~end_done), ex_fault_pc.eq(slot_pc[ex])]
        m.d.sync += [sig.eq(getattr(self, name)) for name, sig in ext.items()]
        net_fault = (ext["net_errors"] & self.fault_mask[:len(ErrorCause)]).any()
        ext_pending = arm & (ext["ex_fault"] | ext["ddr_fault"])
        m.d.comb += end_done.eq(running & (slot[ex] == Slot.END) & drained & ~ext_pending)
        m.d.comb += complete[ex].eq(ex_sync | ((slot[ex] == Slot.BUSY) & self.ex_done) | end_done)
        sources.append((running & arm & ext["ex_fault"], ext["ex_fault_cause"], ex_fault_pc))
        # TX
        m.d.comb += [self.tx.valid.eq(slot[tx] == Slot.OFFER), self.tx.payload.word.eq(slot_word[tx]),
                     self.tx.payload.pc.eq(slot_pc[tx])]
        with m.If(self.tx.valid & self.tx.ready):
            m.d.sync += slot[tx].eq(Slot.BUSY)
        tx_sync = (slot[tx] == Slot.BUSY) & slot_is(tx, Opcode.SYNC)
        m.d.comb += complete[tx].eq(tx_sync | ((slot[tx] == Slot.BUSY) & self.tx_done))
        # RX: posted = completed
        m.d.comb += [self.rx.valid.eq(slot[rx] == Slot.OFFER), self.rx.payload.word.eq(slot_word[rx]),
                     self.rx.payload.pc.eq(slot_pc[rx])]
        rx_sync = (slot[rx] == Slot.BUSY) & slot_is(rx, Opcode.SYNC)
        m.d.comb += complete[rx].eq(rx_sync | (self.rx.valid & self.rx.ready))
        # RECV arrivals and CREDIT packets
        wiring.connect(m, wiring.flipped(self.rx_done_inc), sems.inc3)
        wiring.connect(m, wiring.flipped(self.rx_credit_inc), sems.inc4)

        with m.If(end_done):
            m.d.sync += [run_q.eq(0), done.eq(1)]
        m.d.comb += self.irq_done.eq(end_done)

        # --- other faults -------------------------------------------------------------------------
        sources.append((running & arm & ext["ddr_fault"], ext["ddr_fault_cause"], ext["ddr_fault_pc"]))
        sources.append((running & sems.overflow, SeqFault.SEM_OVERFLOW, dispatched))
        sources.append((running & arm & net_fault, SeqFault.NETWORK, dispatched))
        idle_cycles = Signal(32)
        activity_q = Signal()              # (from the whole node: a register, the watchdog a cycle late)
        m.d.sync += activity_q.eq(self.activity)
        progress = Cat(*complete).any() | dq_take | activity_q
        with m.If(~running | progress):
            m.d.sync += idle_cycles.eq(0)
        with m.Else():
            m.d.sync += idle_cycles.eq(idle_cycles + 1)
        sources.append((running & (self.watchdog != 0) & (idle_cycles >= self.watchdog),
                                SeqFault.WATCHDOG, dispatched))
        sources.append((running & self.abort, SeqFault.ABORTED, dispatched))
        # step 1: every source's condition (unless END completes now), cause and instruction
        # registered; step 2: the first of them (in the order above) -> fault, cause, fault_pc
        conds = []
        for k, (cond, c, pc) in enumerate(sources):
            cq = Signal(name=f"fault_src{k}")
            cause_q = Signal(FAULT_BITS, name=f"fault_src{k}_cause")
            pc_q = Signal(PC_BITS, name=f"fault_src{k}_pc")
            m.d.sync += [cq.eq(cond & ~end_done), cause_q.eq(c), pc_q.eq(pc)]
            conds.append((cq, cause_q, pc_q))
        m.d.sync += raise_fault.eq(Cat(*(cond for cond, _, _ in sources)).any() & ~end_done)
        for cq, c, pc in reversed(conds):
            with m.If(cq):
                m.d.comb += [new_cause.eq(c), new_pc.eq(pc)]
        with m.If(raise_fault):         # (sources are gated by running: never two cycles in a row)
            m.d.sync += [run_q.eq(0), fault.eq(1), cause.eq(new_cause), fault_pc.eq(new_pc)]
        m.d.comb += self.irq_fault.eq(raise_fault)

        # --- SEQ_WAIT and SEQ_LEVELS words ----------------------------------------------------------
        wreg = REGISTERS["SEQ_WAIT"]
        parts = {}
        for (w, s), q in zip(waiting, Queue):
            parts[f"{q.name.lower()}_sem_wait"] = w
            parts[f"{q.name.lower()}_sem"] = Mux(w, s, 0)    # (an empty queue's head is undefined)
        parts.update(rx_slot=self.rx_slot_wait, ex_busy=(slot[ex] == Slot.OFFER) | (slot[ex] == Slot.BUSY),
                     tx_busy=(slot[tx] == Slot.OFFER) | (slot[tx] == Slot.BUSY), end=slot[ex] == Slot.END,
                     fetch=starved)
        # SEQ_WAIT a cycle late (registered: the RX engine's slot wait is behind its table's
        # valid bits, and the word goes into the register read; issue 14)
        m.d.sync += self.wait.eq(register_word(wreg, **parts))
        m.d.comb += [self.levels.eq(register_word(REGISTERS["SEQ_LEVELS"], ex=queues[ex].level, tx=queues[tx].level,
                                                  rx=queues[rx].level, posted=self.rx_posted))]
        return m

    @staticmethod
    def _pick(values, index):
        """values[index]: a balanced tree of 2:1 multiplexers on the index bits, 0 beyond the
        array (a compare against the length and a select on a 6-bit index mapped 7 LUT levels
        deep)."""
        return pick(None, values, index)


@block("seq", "sequencer: fetch, decode, EX / TX / RX queues and issue, semaphores, faults, watchdog",
       preset="qwen2.5-1.5b", ranges={"preset": Choice(("tiny", "qwen2.5-1.5b"))},
       # for `mcf synth seq`; linted inside the node (as a top, its port ``abort`` is a C++ word
       # to Verilator's lint)
       lint_default=False)
def _seq(preset):
    presets = {"tiny": NodeConfig.tiny, "qwen2.5-1.5b": NodeConfig.qwen2_5_1_5b}
    if preset not in presets:
        raise ValueError(f"seq: preset {preset!r}; known: {', '.join(presets)}")
    return Sequencer(presets[preset]())
