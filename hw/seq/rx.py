"""RX engine: RECV posting, the receive table, and the packets the NIC delivers to this node.

*Posting*: a RECV takes a free receive-table entry {tag, address, length, done semaphore}
(none free: it waits, ``slot_wait``) and, with ``credit``, queues a CREDIT packet for the
sender on its own path to the NIC (``credit``: it never waits behind a SEND's data).

*Delivered packets* (``i``: the NIC's local output, header first), one at a time:

* control ops: CREDIT adds ``seq`` to ``sem[kv_id]`` (``credit_inc``); KV_DRAIN /
  KV_INVALIDATE set directory entry ``kv_id`` to DRAINING / INVALID (``dir_wr``).  A control
  packet with a payload or an id out of range, and a header-only packet of any other op, is
  dropped and counted (RX_BAD_CONTROL).
* data, while a program runs: matched by ``kv_id`` against the posted tags; the payload is
  written by the DMA writer at the entry's address + the bytes already assigned
  (``store`` descriptor, beats on ``o``); when the writer has acknowledged ``length`` bytes
  the entry is freed and ``sem[done_sem]`` incremented (``done_inc``).  More bytes than the
  entry still expects: dropped, RX_OVERFLOW.  No matching entry: the packet waits (a RECV
  may be posted meanwhile) for ``rx_wait`` cycles, then it is dropped, RX_UNEXPECTED.
* data, while no program runs (the PS's debug path): the packet takes the next STORE
  descriptor of ``ps_store`` (its completion leaves on ``ps_done`` + ``ps_done_tag``); one
  longer than the descriptor is dropped (RX_OVERFLOW), one that finds none within
  ``rx_wait`` cycles is dropped (RX_UNEXPECTED).

``clear`` (a program starts) empties the receive table.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axis import AXIStreamSignature
from mcf.hw.layouts import DmaDescriptorLayout, InstrLayouts, MetaLayout
from mcf.hw.nic.common import raw
from mcf.hw.packet.header import HeaderDeserializer
from mcf.hw.seq.sems import SemEventSignature
from mcf.hw.seq.sequencer import IssueLayout
from mcf.hw.seq.tx import meta_word
from mcf.spec import Collective, DmaDir, ErrorCause, Op, ReduceOp, Stage
from mcf.spec.isa import DDR_ALIGN, LAYOUTS, Opcode
from mcf.spec.node import NodeConfig
from mcf.spec.packet import KV_ID_BITS, LENGTH_BITS, NODE_BITS
from mcf.spec.plan import REPLICA_STATE_BITS, ReplicaState
from mcf.spec.regmap import DMA_ADDR_BITS, DMA_TAG_BITS, PC_BITS

#: Directory ids the DIR instruction and the control packets can name.
DIR_BLOCK_BITS = LAYOUTS[Opcode.DIR]["block"].width


class DirWriteSignature(wiring.Signature):
    """A replica-directory write, from the writer's side: ``en``, ``block``, ``state``."""

    def __init__(self):
        super().__init__({"en": Out(1), "block": Out(DIR_BLOCK_BITS), "state": Out(REPLICA_STATE_BITS)})

    def __eq__(self, other):
        return isinstance(other, DirWriteSignature)

    def __hash__(self):
        return hash(type(self))

    def __repr__(self):
        return "DirWriteSignature()"


class RxEngine(wiring.Component):
    """See the module text.  Other ports: ``errors`` (strobes per ErrorCause), ``busy`` (a
    packet or a DDR write in flight, or a credit queued), ``posted`` (table entries in use),
    ``bytes`` (payload bytes acknowledged this cycle), ``rx_packet`` (a header arrived),
    ``cur_pc`` (the RECV whose payload is being written), ``running``, ``rx_wait``,
    ``node_id``, ``clear``."""

    def __init__(self, config: NodeConfig = NodeConfig(), outstanding: int = 4):
        self.config, self.slots, self.outstanding = config, config.rx_slots, outstanding
        super().__init__({
            "instr": In(stream.Signature(IssueLayout)),
            "i": In(AXIStreamSignature(config.data_width)),
            "store": Out(stream.Signature(DmaDescriptorLayout)),
            "o": Out(AXIStreamSignature(config.data_width)),
            "store_done": In(1),
            "ps_store": In(stream.Signature(DmaDescriptorLayout)),
            "ps_done": Out(1), "ps_done_tag": Out(DMA_TAG_BITS),
            "credit": Out(stream.Signature(MetaLayout)),
            "done_inc": Out(SemEventSignature(1)),
            "credit_inc": Out(SemEventSignature(16)),
            "dir_wr": Out(DirWriteSignature()),
            "errors": Out(len(ErrorCause)),
            "running": In(1), "rx_wait": In(32), "node_id": In(NODE_BITS), "clear": In(1),
            "busy": Out(1), "posted": Out(8), "slot_wait": Out(1), "bytes": Out(LENGTH_BITS),
            "rx_packet": Out(1), "cur_pc": Out(PC_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, S = self.config, self.slots
        m.submodules.deser = deser = HeaderDeserializer(cfg.data_width)
        wiring.connect(m, wiring.flipped(self.i), deser.i)

        # --- the receive table ------------------------------------------------------------------
        entry = data.StructLayout({"tag": KV_ID_BITS, "base": DMA_ADDR_BITS, "length": LENGTH_BITS,
                                   "issued": LENGTH_BITS, "acked": LENGTH_BITS, "done_sem": 5, "pc": PC_BITS})
        table = [Signal(entry, name=f"entry{i}") for i in range(S)]
        valid = Signal(S)
        m.d.comb += self.posted.eq(sum(valid[i] for i in range(S)))

        # --- posting ----------------------------------------------------------------------------
        m.submodules.credits = credits = fifo.SyncFIFOBuffered(width=MetaLayout.size, depth=4)
        free = ~valid
        free_any = free.any()
        free_idx = Signal(range(max(S, 2)))
        for i in reversed(range(S)):
            with m.If(free[i]):
                m.d.comb += free_idx.eq(i)
        recv = InstrLayouts[Opcode.RECV](self.instr.payload.word)
        wants_credit = recv.credit
        m.d.comb += self.instr.ready.eq(self.running & free_any & (~wants_credit | credits.w_rdy))
        m.d.comb += self.slot_wait.eq(self.instr.valid & self.running & ~free_any)
        post = Signal()
        m.d.comb += post.eq(self.instr.valid & self.instr.ready)
        m.d.comb += [credits.w_data.eq(meta_word(stage=Stage.CONTROL, op=Op.CREDIT, collective=Collective.UNICAST,
                                                 reduce_op=ReduceOp.NONE, src=self.node_id, dst=recv.credit_dst,
                                                 route_id=recv.credit_route, kv_id=recv.credit_sem, seq=1)),
                     credits.w_en.eq(post & wants_credit)]
        m.d.comb += [self.credit.valid.eq(credits.r_rdy), self.credit.payload.eq(credits.r_data),
                     credits.r_en.eq(self.credit.ready)]

        # --- outstanding DMA writes: {slot, length, ps, tag}, in order -----------------------------
        out_layout = data.StructLayout({"slot": range(max(S, 2)), "length": LENGTH_BITS, "ps": 1,
                                        "tag": DMA_TAG_BITS})
        m.submodules.outs = outs = fifo.SyncFIFOBuffered(width=out_layout.size, depth=self.outstanding)
        head = Signal(out_layout)
        m.d.comb += head.eq(outs.r_data)

        # --- packets ------------------------------------------------------------------------------
        hm = Signal(MetaLayout)
        has_payload, bad = Signal(), Signal()
        match = Signal(S)
        timer = Signal(32)
        slot = Signal(range(max(S, 2)))
        sel = Signal(entry)
        for i in range(S):
            with m.If(slot == i):
                m.d.comb += sel.eq(table[i])
        store_d = Signal(DmaDescriptorLayout)
        store_ps, store_tag = Signal(), Signal(DMA_TAG_BITS)
        # One whole signal per cause (a partly driven vector becomes an `always @*` Icarus never runs).
        strobe = {c: Signal(name=f"err_{c.name.lower()}")
                  for c in (ErrorCause.RX_BAD_CONTROL, ErrorCause.RX_OVERFLOW, ErrorCause.RX_UNEXPECTED)}
        m.d.comb += self.errors.eq(sum(sig << int(c) for c, sig in strobe.items()))
        err = strobe
        op = raw(hm.op)
        is_control = (op == Op.CREDIT) | (op == Op.KV_DRAIN) | (op == Op.KV_INVALIDATE)
        cur_pc = Signal(PC_BITS)
        m.d.comb += self.cur_pc.eq(cur_pc)
        assign = Signal()            # a packet's bytes were assigned to slot `slot`

        m.d.comb += [self.store.payload.eq(store_d), outs.w_data.eq(Cat(slot, store_d.length, store_ps, store_tag))]
        ps = self.ps_store.payload
        with m.FSM(name="packet") as fsm:
            with m.State("HEADER"):
                m.d.comb += deser.meta.ready.eq(1)
                with m.If(deser.meta.valid):
                    p = deser.meta.payload
                    m.d.comb += self.rx_packet.eq(1)
                    m.d.sync += [hm.eq(p.meta), has_payload.eq(p.has_payload), bad.eq(p.truncated | p.malformed),
                                 timer.eq(0)]
                    m.next = "LOOKUP"
            with m.State("LOOKUP"):
                m.d.sync += [match.eq(Cat(*(valid[i] & (table[i].tag == hm.kv_id) for i in range(S)))),
                             timer.eq(timer + 1)]
                m.next = "DECIDE"
            with m.State("DECIDE"):
                first = Signal(range(max(S, 2)))
                for i in reversed(range(S)):
                    with m.If(match[i]):
                        m.d.comb += first.eq(i)
                drop = Signal()
                with m.If(bad):
                    m.d.comb += drop.eq(1)
                with m.Elif(is_control):
                    with m.If(has_payload | (hm.length != 0)):
                        m.d.comb += [err[ErrorCause.RX_BAD_CONTROL].eq(1), drop.eq(1)]
                    with m.Elif(op == Op.CREDIT):
                        with m.If(hm.kv_id < cfg.num_sems):
                            m.d.comb += [self.credit_inc.valid.eq(1), self.credit_inc.sem.eq(hm.kv_id),
                                         self.credit_inc.amount.eq(hm.seq)]
                        with m.Else():
                            m.d.comb += err[ErrorCause.RX_BAD_CONTROL].eq(1)
                    with m.Else():
                        with m.If(hm.kv_id < (1 << DIR_BLOCK_BITS)):
                            m.d.comb += [self.dir_wr.en.eq(1), self.dir_wr.block.eq(hm.kv_id),
                                         self.dir_wr.state.eq(Mux(op == Op.KV_DRAIN, int(ReplicaState.DRAINING),
                                                                  int(ReplicaState.INVALID)))]
                        with m.Else():
                            m.d.comb += err[ErrorCause.RX_BAD_CONTROL].eq(1)
                    m.next = "HEADER"
                with m.Elif(~has_payload):
                    m.d.comb += [err[ErrorCause.RX_BAD_CONTROL].eq(1), drop.eq(1)]
                with m.Elif(~outs.w_rdy):
                    m.next = "LOOKUP"              # wait for room to track the write
                with m.Elif(self.running):
                    with m.If(match.any()):
                        m.d.sync += slot.eq(first)
                        m.next = "CHECK"
                    with m.Elif(timer >= self.rx_wait):
                        m.d.comb += [err[ErrorCause.RX_UNEXPECTED].eq(1), drop.eq(1)]
                    with m.Else():
                        m.next = "LOOKUP"
                with m.Else():
                    with m.If(self.ps_store.valid):
                        with m.If(hm.length > ps.length):
                            m.d.comb += [err[ErrorCause.RX_OVERFLOW].eq(1), drop.eq(1)]
                        with m.Else():
                            m.d.comb += self.ps_store.ready.eq(1)
                            m.d.sync += [store_d.addr.eq(ps.addr), store_d.length.eq(hm.length),
                                         raw(store_d.dir).eq(DmaDir.STORE), store_d.buffer.eq(0),
                                         store_d.tag.eq(ps.tag), store_tag.eq(ps.tag), store_ps.eq(1)]
                            m.next = "STORE"
                    with m.Elif(timer >= self.rx_wait):
                        m.d.comb += [err[ErrorCause.RX_UNEXPECTED].eq(1), drop.eq(1)]
                    with m.Else():
                        m.next = "LOOKUP"
                with m.If(drop):
                    with m.If(has_payload):
                        m.next = "DRAIN"
                    with m.Else():
                        m.next = "HEADER"
            with m.State("CHECK"):
                # the matched entry: does the packet fit what it still expects?
                with m.If(sel.issued + hm.length > sel.length):
                    m.d.comb += err[ErrorCause.RX_OVERFLOW].eq(1)
                    m.next = "DRAIN"
                with m.Else():
                    m.d.comb += assign.eq(1)
                    m.d.sync += [store_d.addr.eq(sel.base + sel.issued), store_d.length.eq(hm.length),
                                 raw(store_d.dir).eq(DmaDir.STORE), store_d.buffer.eq(0), store_d.tag.eq(0),
                                 store_tag.eq(0), store_ps.eq(0), cur_pc.eq(sel.pc)]
                    m.next = "STORE"
            with m.State("STORE"):
                m.d.comb += self.store.valid.eq(1)
                with m.If(self.store.ready):
                    m.d.comb += outs.w_en.eq(1)
                    m.next = "FORWARD"
            with m.State("FORWARD"):
                b = deser.o
                m.d.comb += [self.o.tdata.eq(b.tdata), self.o.tkeep.eq(b.tkeep), self.o.tlast.eq(b.tlast),
                             self.o.tvalid.eq(b.tvalid), b.tready.eq(self.o.tready)]
                with m.If(b.tvalid & b.tready & b.tlast):
                    m.next = "HEADER"
            with m.State("DRAIN"):
                m.d.comb += deser.o.tready.eq(1)
                with m.If(deser.o.tvalid & deser.o.tlast):
                    m.next = "HEADER"

        # --- completions of the writer, in order ---------------------------------------------------
        complete = Signal()
        m.d.comb += [outs.r_en.eq(self.store_done)]
        with m.If(self.store_done & head.ps):
            m.d.comb += [self.ps_done.eq(1), self.ps_done_tag.eq(head.tag)]
        with m.If(self.store_done & ~head.ps):
            m.d.comb += [complete.eq(1), self.bytes.eq(head.length)]

        # --- table updates (post, assign, acknowledge) ---------------------------------------------
        done_sem = Signal(5)
        for i in range(S):
            e = table[i]
            with m.If(post & (free_idx == i)):
                m.d.sync += [valid[i].eq(1), e.tag.eq(recv.tag), e.base.eq(recv.ddr * DDR_ALIGN),
                             e.length.eq(recv.length), e.issued.eq(0), e.acked.eq(0), e.done_sem.eq(recv.done_sem),
                             e.pc.eq(self.instr.payload.pc)]
            with m.If(assign & (slot == i)):
                m.d.sync += e.issued.eq(e.issued + hm.length)
            with m.If(complete & (head.slot == i)):
                acked = e.acked + head.length
                m.d.sync += e.acked.eq(acked)
                with m.If(acked == e.length):
                    m.d.sync += valid[i].eq(0)
                    m.d.comb += [self.done_inc.valid.eq(1), done_sem.eq(e.done_sem)]
        m.d.comb += [self.done_inc.sem.eq(done_sem), self.done_inc.amount.eq(1)]
        with m.If(self.clear):
            m.d.sync += valid.eq(0)

        in_packet = Signal()
        m.d.comb += in_packet.eq(~fsm.ongoing("HEADER") | deser.meta.valid)
        m.d.comb += self.busy.eq(in_packet | outs.r_rdy | (outs.level != 0) | (credits.level != 0))
        return m
