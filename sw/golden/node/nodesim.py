"""One MCF node at the level of its instruction set (``mcf.spec.isa``): the reference the RTL
sequencer and execute unit are compared with, and the functional half of the model backend.

A ``NodeSim`` holds what the node holds: DDR (a ``SimDdr``, read and written by physical
address through the DMA window), the scratchpad (SPAD: ``spad_beats`` beats of VL int32 words
and one int8 exponent each), the semaphores, the three instruction queues fed in program order
by the dispatcher, the attention unit's state (query rows, m, l, o), the replica directory, the
receive table, the route table, the performance counters and the error counters.  Every
instruction's effect is the golden model's function (``mcf.sw.golden.fixed``) applied as
``spec/isa.py`` defines it.

The node does not keep time: ``ClusterSim`` (``cluster.py``) decides when a queue head issues
and when it completes.  An instruction reads its operands when it issues and writes its results
when it completes (``Exec.commit``), so a program whose result depends on the timing of its
queues shows it under another schedule.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from mcf.spec import isa, kv
from mcf.spec.bits import SpecError
from mcf.spec.isa import (DDR_ALIGN, INSTR_BYTES, SEM_MAX, AttnLoad, AttnPass, EmitMode, Opcode,
                          PerfCounter, Queue, SeqFault, VecOp)
from mcf.spec.node import NodeConfig
from mcf.spec.packet import Collective, Meta, Op, Packet, ReduceOp, Stage
from mcf.spec.plan import ReplicaState
from mcf.spec.regmap import NETWORK_FAULTS, RX_WAIT_RESET, WATCHDOG_RESET, ErrorCause

from .. import fixed as fx
from ..nic import RouteEntry

class Fault(Exception):
    """The node stops: ``cause`` (SeqFault) and a one-line reason."""

    def __init__(self, cause: SeqFault, detail: str):
        super().__init__(f"{cause.name}: {detail}")
        self.cause, self.detail = cause, detail


class SimError(Exception):
    """Something the simulator cannot model (never a property of a correct program)."""


def _i16(words):
    """Low 16 bits of int32 words, two's complement (a BFP16 mantissa read)."""
    w = np.asarray(words, dtype=np.int64)
    return ((w + (1 << 15)) & 0xFFFF) - (1 << 15)


def _i32(words):
    w = np.asarray(words, dtype=np.int64)
    return ((w + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


@dataclass
class Posted:
    """One receive-table entry."""
    tag: int
    addr: int
    length: int
    done_sem: int
    index: int            # instruction index of the RECV
    got: int = 0


@dataclass
class Exec:
    """An issued instruction: its writes (``commit``), the packets it sends, and the work it
    does (for the timing model and the performance counters)."""
    queue: Queue
    index: int
    instr: isa.Instr
    commit: object = None                   # callable applied at completion, or None
    packets: list = field(default_factory=list)
    work: dict = field(default_factory=dict)
    start: int = 0


@dataclass
class AttnUnit:
    rows: int = 0
    qm: np.ndarray = None       # [R, d] mantissas
    qe: np.ndarray = None       # [R] exponents
    pos: np.ndarray = None      # [R]
    m: np.ndarray = None        # [R]
    l: np.ndarray = None        # [R] exact
    o: np.ndarray = None        # [R, d] exact


class NodeSim:
    def __init__(self, cfg: NodeConfig, ddr, node_id: int = 0, num_nodes: int = 1):
        self.cfg, self.ddr = cfg, ddr
        self.vl = cfg.vec_lanes
        self.node_id, self.num_nodes = node_id, num_nodes
        self.window_base, self.window_size = 0, 0
        self.spad = np.zeros((cfg.spad_beats, self.vl), dtype=np.int64)
        self.spad_exp = np.zeros(cfg.spad_beats, dtype=np.int64)
        self.sems = np.zeros(cfg.num_sems, dtype=np.int64)
        self.directory = np.zeros(cfg.dir_entries, dtype=np.int64)
        self.attn = AttnUnit()
        self.sm_defer = None            # an ATTN_SM MAX with defer: (its instruction, R) until the next GEMM_QK
        self.routes: dict[int, RouteEntry] = {}
        self.prog_base, self.prog_count = 0, 0
        self.fault_mask = sum(1 << int(c) for c in NETWORK_FAULTS)
        self.rx_wait = RX_WAIT_RESET
        self.watchdog = WATCHDOG_RESET
        self.errors = {c: 0 for c in ErrorCause}
        self.perf = np.zeros(len(PerfCounter), dtype=np.int64)
        self.dir_log: list = []          # (cluster cycle, block, ReplicaState) of every directory write
        self.state = "idle"
        self.fault_cause, self.fault_detail, self.fault_pc = SeqFault.NONE, "", 0
        self._reset_run()

    # --- run control -------------------------------------------------------------------------
    def _reset_run(self):
        self.pc = 0
        self.end_dispatched = False
        self.queues = {q: deque() for q in Queue}
        self.busy: dict[Queue, Exec | None] = {q: None for q in Queue}
        self.rx_table: list[Posted] = []
        self.rx_in: deque = deque()
        self.rx_head_since = None
        self.sends_in_flight = 0
        self.head_since = {q: None for q in Queue}
        self.start_time = 0

    def start(self, now: int = 0) -> None:
        """SEQ_CONTROL.start: semaphores and counters cleared, fetch from PROG_BASE."""
        if self.state == "running":
            raise SimError(f"node {self.node_id}: started while running")
        self._reset_run()
        self.sm_defer = None            # a MAX deferred by the last program (no GEMM_QK after it) is dropped
        self.sems[:] = 0
        self.perf[:] = 0
        self.state = "running"
        self.fault_cause, self.fault_detail = SeqFault.NONE, ""
        self.start_time = now

    def abort(self) -> None:
        if self.state == "running":
            self.fail(Fault(SeqFault.ABORTED, "the PS wrote SEQ_CONTROL.abort"))

    def fail(self, fault: Fault, pc: int | None = None) -> None:
        """Stop with ``fault``; ``pc``: the instruction that faulted (else the next to dispatch)."""
        self.state = "fault"
        self.fault_cause, self.fault_detail = fault.cause, fault.detail
        self.fault_pc = self.pc if pc is None else pc

    @property
    def running(self) -> bool:
        return self.state == "running"

    # --- memories -------------------------------------------------------------------------
    def _ddr_check(self, addr: int, n: int, what: str) -> None:
        lo, hi = self.window_base, self.window_base + self.window_size
        if n < 0 or addr < lo or addr + n > hi:
            raise Fault(SeqFault.OUT_OF_WINDOW, f"{what}: DDR {addr:#x}+{n:#x} outside the DMA window "
                                                f"{lo:#x}+{self.window_size:#x}")
        if not self.ddr.contains(addr, n):
            raise Fault(SeqFault.AXI_ERROR, f"{what}: DDR {addr:#x}+{n:#x} is not memory (DECERR)")

    def ddr_read(self, addr: int, n: int, what: str) -> bytes:
        self._ddr_check(addr, n, what)
        return self.ddr.device_read(addr, n)

    def ddr_write_later(self, addr: int, data: bytes, what: str):
        self._ddr_check(addr, len(data), what)
        return lambda: self.ddr.device_write(addr, data)

    def _beats(self, first: int, count: int, what: str) -> None:
        if first < 0 or count < 0 or first + count > self.cfg.spad_beats:
            raise Fault(SeqFault.ILLEGAL_INSTRUCTION, f"{what}: SPAD beats {first}+{count} beyond "
                                                      f"{self.cfg.spad_beats}")

    def _row_index(self, base: int, stride: int, rows: int, nbeats: int, what: str) -> np.ndarray:
        idx = base + stride * np.arange(rows)[:, None] + np.arange(nbeats)[None, :]
        self._beats(int(idx.min()), int(idx.max() - idx.min() + 1), what)
        return idx

    def read_rows(self, base, stride, rows, n, what):
        """(words [rows, n], exponent of each row's first beat [rows])."""
        idx = self._row_index(base, stride, rows, n // self.vl, what)
        return self.spad[idx].reshape(rows, n), self.spad_exp[idx[:, 0]].copy()

    def write_rows_later(self, base, stride, values, exps, what):
        rows, n = values.shape
        idx = self._row_index(base, stride, rows, n // self.vl, what)
        vals = _i32(values).reshape(rows, n // self.vl, self.vl)
        e = np.broadcast_to(np.asarray(exps, dtype=np.int64)[:, None], idx.shape)
        if e.size and (e.min() < -128 or e.max() > 127):
            raise SimError(f"{what}: a BFP exponent {int(e.min())}..{int(e.max())} leaves the SPAD's int8 range")

        def commit():
            self.spad[idx] = vals
            self.spad_exp[idx] = e
        return commit

    def read_words(self, word: int, n: int, what: str) -> np.ndarray:
        self._beats(word // self.vl, -(-(word % self.vl + n) // self.vl), what)
        return self.spad.reshape(-1)[word:word + n].copy()

    def write_words_later(self, word: int, values, what: str):
        values = _i32(np.asarray(values).reshape(-1))
        n = values.size
        first, count = word // self.vl, -(-(word % self.vl + n) // self.vl)
        self._beats(first, count, what)

        def commit():
            self.spad.reshape(-1)[word:word + n] = values
            self.spad_exp[first:first + count] = 0
        return commit

    # --- dispatch ---------------------------------------------------------------------------
    def depth(self, q: Queue) -> int:
        return self.cfg.seq_queue_depth

    def fetch_next(self) -> isa.Instr:
        if self.pc >= self.prog_count:
            raise Fault(SeqFault.PROGRAM_OVERRUN, f"{self.prog_count} instructions fetched without END")
        addr = self.prog_base + INSTR_BYTES * self.pc
        word = int.from_bytes(self.ddr_read(addr, INSTR_BYTES, f"fetch #{self.pc}"), "little")
        try:
            return isa.decode(word)
        except (SpecError, ValueError) as exc:
            raise Fault(SeqFault.ILLEGAL_INSTRUCTION, f"#{self.pc}: {exc}") from None

    def dispatch(self, now: int = 0) -> bool:
        """Move instructions from DDR into their queues while there is room; True if any moved."""
        moved = False
        while self.running and not self.end_dispatched:
            try:
                ins = self.fetch_next()
            except Fault as f:
                self.fail(f)
                return moved
            q = ins.queue
            if len(self.queues[q]) >= self.depth(q):
                return moved                          # stalls until the queue drains (re-fetched then)
            if not self.queues[q] and self.busy[q] is None:
                self.head_since[q] = now
            self.queues[q].append((self.pc, ins))
            self.pc += 1
            moved = True
            if ins.OPCODE == Opcode.END:
                self.end_dispatched = True
        return moved

    # --- issue ------------------------------------------------------------------------------
    def head(self, q: Queue):
        return self.queues[q][0] if self.queues[q] and self.busy[q] is None else None

    def blocked_on(self, q: Queue) -> str | None:
        """Why the head of queue q cannot issue now (None: it can, or the queue is empty/busy)."""
        h = self.head(q)
        if h is None:
            return None
        index, ins = h
        if ins.wait_cnt and self.sems[ins.wait_sem] < ins.wait_cnt:
            return (f"#{index} {ins.OPCODE.name} waits for sem {ins.wait_sem} >= {ins.wait_cnt} "
                    f"(it is {int(self.sems[ins.wait_sem])})")
        if ins.OPCODE == Opcode.RECV and len(self.rx_table) >= self.cfg.rx_slots:
            return f"#{index} RECV waits for a free receive slot ({len(self.rx_table)} posted)"
        if ins.OPCODE == Opcode.END:
            busy = [q2.name for q2 in (Queue.TX, Queue.RX) if self.queues[q2] or self.busy[q2] is not None]
            if busy or self.sends_in_flight or self.rx_table:
                what = busy + ([f"{self.sends_in_flight} packets to send"] if self.sends_in_flight else []) + \
                    ([f"{len(self.rx_table)} receives (tags {[p.tag for p in self.rx_table][:4]})"]
                     if self.rx_table else [])
                return f"#{index} END waits for {', '.join(what)}"
        return None

    def can_issue(self, q: Queue) -> bool:
        return self.running and self.head(q) is not None and self.blocked_on(q) is None

    def issue(self, q: Queue, now: int = 0) -> Exec | None:
        """Issue the head of q (the caller checked ``can_issue``): consume its wait, read its
        operands.  A fault stops the node and returns None."""
        index, ins = self.queues[q][0]
        if ins.wait_cnt:
            self.sems[ins.wait_sem] -= ins.wait_cnt
        since = self.head_since[q]
        if since is not None and now > since:
            stall = {Queue.EX: PerfCounter.STALL_EX_SEM, Queue.TX: PerfCounter.STALL_TX_SEM,
                     Queue.RX: PerfCounter.STALL_RX_SLOT if ins.OPCODE == Opcode.RECV and not ins.wait_cnt
                     else PerfCounter.STALL_RX_SEM}[q]
            self.perf[stall] += now - since
        ex = Exec(q, index, ins, start=now)
        try:
            sems = [ins.wait_sem if ins.wait_cnt else 0, ins.sig_sem if ins.sig else 0]
            sems += [getattr(ins, f) for f in ("done_sem",) if hasattr(ins, f)]
            if max(sems) >= len(self.sems):
                raise Fault(SeqFault.ILLEGAL_INSTRUCTION, f"semaphore {max(sems)} (the node has {len(self.sems)})")
            getattr(self, "_x_" + ins.OPCODE.name.lower())(ins, ex)
        except Fault as f:
            self.fail(Fault(f.cause, f"#{index} {ins.OPCODE.name}: {f.detail}"), index)
            return None
        self.busy[q] = ex
        return ex

    def complete(self, ex: Exec, now: int = 0) -> None:
        """The instruction's writes land, its signal is raised, it retires."""
        if not self.running:
            return
        if ex.commit is not None:
            ex.commit()
        q = ex.queue
        self.queues[q].popleft()
        self.busy[q] = None
        self.head_since[q] = now if self.queues[q] else None
        w = ex.work
        self.perf[PerfCounter.DDR_RD_BYTES] += w.get("ddr_rd", 0)
        self.perf[PerfCounter.DDR_WR_BYTES] += w.get("ddr_wr", 0)
        self.perf[PerfCounter.MAC_BEATS] += w.get("mac_beats", 0)
        busy = BUSY_COUNTER.get(ex.instr.OPCODE)
        if busy is not None:
            self.perf[busy] += max(1, now - ex.start)
        self.perf[{Queue.EX: PerfCounter.RETIRED_EX, Queue.TX: PerfCounter.RETIRED_TX,
                   Queue.RX: PerfCounter.RETIRED_RX}[q]] += 1
        if ex.instr.OPCODE == Opcode.DIR and not ex.instr.check:
            ins = ex.instr
            self.dir_log += [(now, ins.block + i * ins.stride, ins.state) for i in range(ins.count)]
        if ex.instr.sig:
            self.signal(ex.instr.sig_sem, 1)
        if ex.instr.OPCODE == Opcode.END and self.running:
            self.state = "done"
            self.perf[PerfCounter.CYCLES] = now - self.start_time

    def signal(self, sem: int, count: int) -> None:
        self.sems[sem] += count
        if self.sems[sem] > SEM_MAX:
            self.fail(Fault(SeqFault.SEM_OVERFLOW, f"sem {sem} passed {SEM_MAX}"))

    # --- EX instructions ------------------------------------------------------------------
    def _check(self, ok: bool, what: str) -> None:
        if not ok:
            raise Fault(SeqFault.ILLEGAL_INSTRUCTION, what)

    def _x_end(self, ins, ex):
        pass

    def _x_sync(self, ins, ex):
        pass

    def _x_load(self, ins, ex):
        vl = self.vl
        self._check(ins.beats > 0 and (ins.row_beats == 0 or ins.beats % ins.row_beats == 0),
                    f"beats={ins.beats}, row_beats={ins.row_beats}")
        if ins.row_beats == 0:
            raw = self.ddr_read(ins.ddr, 4 * vl * ins.beats, "LOAD")
            vals = np.frombuffer(raw, dtype="<i4").astype(np.int64).reshape(ins.beats, vl)
            exps = np.zeros(ins.beats, dtype=np.int64)
        else:
            rows, rb = ins.beats // ins.row_beats, ins.row_beats
            raw = self.ddr_read(ins.ddr, 4 * vl * (rb + 1) * rows, "LOAD")
            w = np.frombuffer(raw, dtype="<i4").astype(np.int64).reshape(rows, rb + 1, vl)
            vals = w[:, :rb].reshape(ins.beats, vl)
            exps = np.repeat(((w[:, rb, 0] + 128) & 0xFF) - 128, rb)
        ex.commit = self.write_rows_later(ins.spad, 1, vals, exps, "LOAD")
        ex.work = {"ddr_rd": len(raw)}

    def _x_store(self, ins, ex):
        vl = self.vl
        self._check(ins.beats > 0 and (ins.row_beats == 0 or ins.beats % ins.row_beats == 0),
                    f"beats={ins.beats}, row_beats={ins.row_beats}")
        self._beats(ins.spad, ins.beats, "STORE")
        vals = self.spad[ins.spad:ins.spad + ins.beats]
        if ins.row_beats == 0:
            data = vals.astype("<i4").tobytes()
        else:
            rows, rb = ins.beats // ins.row_beats, ins.row_beats
            w = np.zeros((rows, rb + 1, vl), dtype=np.int64)
            w[:, :rb] = vals.reshape(rows, rb, vl)
            w[:, rb, 0] = self.spad_exp[ins.spad:ins.spad + ins.beats:rb]
            data = w.astype("<i4").tobytes()
        ex.commit = self.ddr_write_later(ins.ddr, data, "STORE")
        ex.work = {"ddr_wr": len(data)}

    def _x_embed(self, ins, ex):
        cfg, vl = self.cfg, self.vl
        g = 1 << ins.group_log2
        self._check(0 < ins.count <= cfg.max_tokens, f"count={ins.count} (max tokens {cfg.max_tokens})")
        self._check(ins.n > 0 and ins.n % vl == 0 and ins.n % g == 0, f"n={ins.n}, G={g}, VL={vl}")
        ids = np.frombuffer(self.ddr_read(ins.ids, 4 * ins.count, "EMBED ids"), dtype="<u4").astype(np.int64)
        bad = ids[ids >= ins.vocab]
        if bad.size:
            raise Fault(SeqFault.ILLEGAL_TOKEN, f"token id {int(bad[0])} >= vocab {ins.vocab}")
        row_bytes = isa.embed_row_bytes(ins.n, g)
        rows = []
        for tok in ids:
            raw = np.frombuffer(self.ddr_read(ins.table + int(tok) * row_bytes, row_bytes, "EMBED table"), np.uint8)
            nib = raw[:ins.n // 2]
            q = np.empty(ins.n, dtype=np.int8)
            lo, hi = (nib & 0xF).astype(np.int8), (nib >> 4).astype(np.int8)
            q[0::2], q[1::2] = np.where(lo > 7, lo - 16, lo), np.where(hi > 7, hi - 16, hi)
            s_off = isa.pad(ins.n // 2)
            scale = np.frombuffer(raw[s_off:s_off + 2 * (ins.n // g)].tobytes(), dtype="<u2")
            rows.append(fx.embed(fx.QLinear(q[None], scale[None], ins.w_exp, g), [0])[0])
        ex.commit = self.write_rows_later(ins.dst, ins.dst_stride, np.stack(rows),
                                          np.zeros(len(rows), np.int64), "EMBED")
        ex.work = {"ddr_rd": 4 * ins.count + row_bytes * ins.count, "tokens": ins.count, "n": ins.n}

    def blob_matrix(self, blob: int, n: int, total_tiles: int, tile0: int, tiles: int, group: int,
                    w_exp: int, bias: bool, what: str = "GEMM"):
        """(QLinear of rows tile0 P .. (tile0 + tiles) P, bias X32 or None, bytes read)."""
        cfg = self.cfg
        P, K = cfg.mac_rows, cfg.mac_lanes
        try:
            lay = isa.BlobLayout(n=n, tiles=total_tiles, rows=P, lanes=K, group=group)
        except SpecError as exc:
            raise Fault(SeqFault.ILLEGAL_INSTRUCTION, str(exc)) from None
        self._check(tiles > 0 and tile0 + tiles <= total_tiles, f"tiles {tile0}+{tiles} of {total_tiles}")
        for per in (lay.w_tile, lay.s_tile) + ((lay.b_tile,) if bias else ()):
            self._check(tile0 * per % DDR_ALIGN == 0, f"tile0={tile0}: region offset {tile0 * per} "
                                                      f"is not a multiple of {DDR_ALIGN}")
        wraw = np.frombuffer(self.ddr_read(blob + tile0 * lay.w_tile, tiles * lay.w_tile, what), np.uint8)
        nib = np.empty(wraw.size * 2, dtype=np.int8)
        lo, hi = (wraw & 0xF).astype(np.int8), (wraw >> 4).astype(np.int8)
        nib[0::2], nib[1::2] = np.where(lo > 7, lo - 16, lo), np.where(hi > 7, hi - 16, hi)
        # tile t, beat j, row p, lane k -> q[t P + p, j K + k]
        q = nib.reshape(tiles, n // K, P, K).transpose(0, 2, 1, 3).reshape(tiles * P, n)
        sraw = self.ddr_read(blob + lay.s_offset + tile0 * lay.s_tile, tiles * lay.s_tile, what)
        s = np.frombuffer(sraw, dtype="<u2").reshape(tiles, n // group, P).transpose(0, 2, 1).reshape(tiles * P, -1)
        nbytes = len(wraw) + len(sraw)
        b = None
        if bias:
            braw = self.ddr_read(blob + lay.b_offset + tile0 * lay.b_tile, tiles * lay.b_tile, what)
            b = np.frombuffer(braw, dtype="<i4").astype(np.int64)
            nbytes += len(braw)
        return fx.QLinear(q, s.astype(np.uint16), w_exp, group), b, nbytes

    def _x_gemm(self, ins, ex):
        cfg, vl = self.cfg, self.vl
        g = 1 << ins.group_log2
        self._check(g <= cfg.max_group, f"group_log2={ins.group_log2}: G={g} exceeds the matrix unit's "
                                        f"max_group={cfg.max_group}")
        self._check(0 < ins.tokens <= cfg.max_tokens, f"tokens={ins.tokens} (max tokens {cfg.max_tokens})")
        self._check(ins.n % vl == 0, f"n={ins.n} is not a multiple of VL={vl}")
        w, bias, nbytes = self.blob_matrix(ins.blob, ins.n, ins.total_tiles, ins.tile0, ins.tiles, g,
                                           ins.w_exp, ins.bias)
        mant, exps = self.read_rows(ins.src, ins.src_stride, ins.tokens, ins.n, "GEMM src")
        y = fx.linear((_i16(mant), exps), w, bias)
        width = ins.tiles * cfg.mac_rows
        commits = [self.write_words_later((ins.dst + t * ins.dst_stride) * vl, y[t], "GEMM dst")
                   for t in range(ins.tokens)]
        ex.commit = lambda: [c() for c in commits]
        ex.work = {"ddr_rd": nbytes, "tokens": ins.tokens, "n": ins.n, "out": width,
                   "mac_beats": ins.tiles * (ins.n // cfg.mac_lanes) * ins.tokens}

    def read_run(self, seg: int, block_keys: int, seg_stride: int, k0: int, nk: int, what: str,
                 scales: bool = True, rows: bool = True):
        """Keys k0 .. k0 + nk - 1 of a run of KV segments (spec/isa.py GEMM_QK: key j is token
        j mod block_keys of the segment at seg + (j // block_keys) seg_stride x 64 bytes): -> (q int8
        [nk, d], A [nk], E [nk], bytes read), reading only what the RTL reads: the keys' scale words
        (``scales``) and rows (``rows``; else q is zero, and without scales A = E = 0)."""
        d = self.cfg.head_dim
        sraw, rraw = bytearray(), bytearray()
        j = k0
        while j < k0 + nk:
            b, t0 = divmod(j, block_keys)
            t1 = min(block_keys, t0 + k0 + nk - j)
            a = seg + b * seg_stride * DDR_ALIGN
            if scales:
                sraw += self.ddr_read(a + 2 * t0, 2 * (t1 - t0), f"{what} scales")
            if rows:
                rraw += self.ddr_read(a + kv.scale_bytes(block_keys) + t0 * kv.row_bytes(d),
                                      (t1 - t0) * kv.row_bytes(d), f"{what} rows")
            j += t1 - t0
        # the keys as a segment of their own (zero padding): one decoder, spec.kv
        sub = bytearray(kv.segment_bytes(nk, d))
        sub[:len(sraw)] = sraw
        sub[kv.scale_bytes(nk):kv.scale_bytes(nk) + len(rraw)] = rraw
        q, a, e = kv.unpack_segment(bytes(sub), nk, d, strict=False)
        return q, a, e, len(sraw) + len(rraw)

    def _x_gemm_qk(self, ins, ex):
        """GEMM_QK: golden ``scores`` of the (token, head) query rows against keys tile0 P ..
        (tile0 + tiles) P - 1 of a run of K segments (spec/isa.py: key j is token j mod block_keys
        of the block at seg + (j // block_keys) seg_stride).  Reads what the RTL reads: those keys'
        scale words and rows.  The RTL builds it only when head_dim <= max_group (a key is one
        weight group): else GEMM_QK is illegal."""
        cfg, vl, d = self.cfg, self.vl, self.cfg.head_dim
        P = cfg.mac_rows
        self._check(d <= cfg.max_group, f"head_dim {d} exceeds the matrix unit's max_group={cfg.max_group} "
                                        f"(no scores path built)")
        R = ins.tokens * ins.heads
        self._check(ins.tokens > 0 and ins.heads > 0 and R <= cfg.max_tokens,
                    f"tokens x heads = {ins.tokens} x {ins.heads} rows (max tokens {cfg.max_tokens})")
        self._check(d % vl == 0 and d % cfg.mac_lanes == 0 and d // cfg.mac_lanes <= P,
                    f"head_dim {d} is not 1 .. {P} beats of {cfg.mac_lanes} MAC lanes (VL {vl})")
        self._check(ins.tiles > 0, f"tiles={ins.tiles}")
        self._check(ins.block_keys > 0, f"block_keys={ins.block_keys}")
        k0, nk = ins.tile0 * P, ins.tiles * P
        self._check(isa.block_run_ok(ins.block_keys, k0, nk, d, cfg.data_bytes, cfg.weight_word_bytes),
                    f"a run of {ins.block_keys}-key blocks from key {k0} ({nk} keys) the loaders cannot stream "
                    f"(spec.isa.block_run_ok)")
        kq, ka, ke, nbytes = self.read_run(ins.seg, ins.block_keys, ins.seg_stride, k0, nk, "GEMM_QK")
        mant = np.empty((R, d), np.int64)
        exps = np.empty(R, np.int64)
        for t in range(ins.tokens):
            m, e = self.read_rows(ins.src + t * ins.src_stride, ins.head_stride, ins.heads, d, "GEMM_QK src")
            mant[t * ins.heads:(t + 1) * ins.heads], exps[t * ins.heads:(t + 1) * ins.heads] = _i16(m), e
        s = fx.scores((mant[:, None, :], exps[:, None]), kq[:, None], ka[:, None], ke[:, None], 1)[0]  # [R, nk]
        commits = [self.write_words_later((ins.dst + r * ins.dst_stride) * vl, s[r], "GEMM_QK dst")
                   for r in range(R)]
        if self.sm_defer is not None:
            # the ATTN_SM MAX deferred to this GEMM_QK: row r's key j is its score word j (r < the MAX's R)
            mins, mr = self.sm_defer
            self.sm_defer = None
            u, S = self.attn, min(mins.keys, nk)
            rows = min(mr, R)
            valid = fx.causal_mask(u.pos[:rows], mins.kpos0 + np.arange(S))
            m0 = np.full(mr, fx.INT32_MIN, np.int64) if mins.first else np.array(u.m, np.int64)
            new_m = np.array(u.m, np.int64)          # rows the GEMM_QK does not write keep their m
            new_m[:rows] = np.maximum(m0[:rows], np.where(valid, s[:rows, :S], fx.INT32_MIN).max(axis=-1))

            def set_m():
                u.m = new_m
            commits.append(set_m)
        ex.commit = lambda: [c() for c in commits]
        # the timing model's GEMM: R rows x head_dim inputs x nk outputs on the array
        ex.work = {"ddr_rd": nbytes, "tokens": R, "n": d, "out": nk,
                   "mac_beats": ins.tiles * (d // cfg.mac_lanes) * R}

    def _x_gemm_pv(self, ins, ex):
        """GEMM_PV: o[r] = sum_j min(w_j, W_MAX) q_v[j] (golden ``state_sums``' o, exact) of the
        (token, head) weight rows over the V segment at seg, or the run of V segments (block_keys,
        seg_stride: GEMM_QK's key order), their rows regions only (what the RTL reads),
        channels tile0 P .. (tile0 + tiles) P - 1; + the previous wide rows at dst when acc (modulo
        2^64, as the RTL's 64-bit sum); sat32 or wide rows out (spec/isa.py)."""
        cfg, vl, d = self.cfg, self.vl, self.cfg.head_dim
        P, K = cfg.mac_rows, cfg.mac_lanes
        R = ins.tokens * ins.heads
        max_n = max(cfg.hidden_size, cfg.intermediate_size, cfg.num_heads * d)
        self._check(isa.gemm_pv_built(P, K, vl, d),
                    f"GEMM_PV: not built on a {P} x {K} array with VL {vl} and head_dim {d}")
        self._check(ins.tokens > 0 and ins.heads > 0 and R <= cfg.max_tokens,
                    f"tokens x heads = {ins.tokens} x {ins.heads} rows (max tokens {cfg.max_tokens})")
        self._check(ins.tiles > 0 and ins.tile0 + ins.tiles <= d // P,
                    f"channel tiles {ins.tile0}+{ins.tiles} of {d // P}")
        self._check(ins.keys > 0 and ins.keys % K == 0 and 2 * ins.keys <= max_n,
                    f"keys={ins.keys} (a multiple of {K}, at most {max_n // 2})")
        self._check(not ins.acc or R == 1 or ins.dst_stride >= 2 * ins.tiles * P // vl,
                    f"acc: dst_stride={ins.dst_stride} overlaps the wide rows ({2 * ins.tiles * P // vl} beats)")
        # block_keys = 0: one segment of `keys` tokens; else a run of blocks (GEMM_QK's key order)
        bk, stride = (ins.block_keys, ins.seg_stride) if ins.block_keys else (ins.keys, 0)
        self._check(isa.block_run_ok(bk, 0, ins.keys, d, cfg.data_bytes, cfg.weight_word_bytes, scales=False),
                    f"a run of {bk}-key blocks ({ins.keys} keys) the loaders cannot stream (spec.isa.block_run_ok)")
        vq, _, _, nbytes = self.read_run(ins.seg, bk, stride, 0, ins.keys, "GEMM_PV", scales=False)
        vq = vq.astype(np.int64)
        w = np.empty((R, ins.keys), np.int64)
        for t in range(ins.tokens):
            w[t * ins.heads:(t + 1) * ins.heads] = self.read_rows(ins.src + t * ins.src_stride, ins.head_stride,
                                                                  ins.heads, ins.keys, "GEMM_PV src")[0]
        cols = slice(ins.tile0 * P, (ins.tile0 + ins.tiles) * P)
        n_out = ins.tiles * P
        o = np.minimum(_i32(w), fx.W_MAX) @ vq[:, cols]                 # exact: |o| < 2^34 keys
        if ins.acc:
            prev = self.read_rows(ins.dst, ins.dst_stride, R, 2 * n_out, "GEMM_PV dst")[0]
            o = (_i32(prev[:, :n_out]) & 0xFFFFFFFF) + (_i32(prev[:, n_out:]) << 32) + o   # mod 2^64
        out = np.concatenate([_i32(o), _i32(o >> 32)], axis=1) if ins.wide else fx.sat(o, 32)
        commit = self.write_rows_later(ins.dst, ins.dst_stride, out, np.zeros(R, np.int64), "GEMM_PV dst")
        ex.commit = commit
        ex.work = {"ddr_rd": nbytes, "tokens": R, "keys": ins.keys, "out": n_out, "wide": ins.wide, "acc": ins.acc,
                   "mac_beats": ins.tiles * 2 * (ins.keys // K) * R}

    def _x_vec(self, ins, ex):
        vl, n = self.vl, ins.n
        op = ins.vop
        self._check(ins.rows > 0 and ins.b_rep > 0 and n > 0 and n % vl == 0, f"rows={ins.rows}, n={n}")
        if op == VecOp.ROPE:
            self._check(n % (2 * vl) == 0, f"ROPE n={n}: half of it must be a multiple of VL={vl}")
        a, ae = self.read_rows(ins.a, ins.a_stride, ins.rows, n, "VEC a")
        needs_b = op in (VecOp.RMSNORM, VecOp.MUL, VecOp.ROPE, VecOp.RESIDUAL)
        if needs_b:
            nb = (ins.rows - 1) // ins.b_rep + 1
            b, be = self.read_rows(ins.b, ins.b_stride, nb, n, "VEC b")
            sel = np.arange(ins.rows) // ins.b_rep
            b, be = b[sel], be[sel]
        if op == VecOp.TO_BFP:
            out, oe = fx.x32_to_bfp(a)
        elif op == VecOp.RMSNORM:
            out, oe = fx.rmsnorm_eps_n(a, _i16(b), ins.imm1, ins.imm0)
        elif op == VecOp.SILU:
            out, oe = fx.silu(a), np.zeros(ins.rows, np.int64)
        elif op == VecOp.MUL:
            out, oe = fx.bfp_mul((_i16(a), ae), (_i16(b), be))
        elif op == VecOp.ROPE:
            cos, sin = _i16(b), _i16(b >> 16)
            out, oe = fx.rope((_i16(a)[:, None, :], ae[:, None]), cos, sin)
            out, oe = out[:, 0], oe[:, 0]
        elif op == VecOp.PRESCALE:
            out, oe = fx.prescale((_i16(a), ae), ins.imm0, ins.imm1)
        else:                                                   # RESIDUAL
            out, oe = fx.sat(a + b, 32), np.zeros(ins.rows, np.int64)
        ex.commit = self.write_rows_later(ins.dst, ins.dst_stride, np.asarray(out), oe, "VEC dst")
        ex.work = {"rows": ins.rows, "n": n, "vop": op}

    def _x_attn_q(self, ins, ex):
        cfg, vl, d = self.cfg, self.vl, self.cfg.head_dim
        R = ins.tokens * ins.heads
        # sm_rows rows of state (MREF / STATE too: the rows without products hold m, l and o)
        most = cfg.sm_rows
        self._check(0 < R <= most, f"tokens x heads = {R} rows ({ins.what.name}: the unit has {most})")
        u = self.attn
        if ins.what == AttnLoad.QUERY:
            qm = np.empty((R, d), np.int64)
            qe = np.empty(R, np.int64)
            for t in range(ins.tokens):
                m, e = self.read_rows(ins.spad + t * ins.tok_stride, ins.head_stride, ins.heads, d, "ATTN_Q")
                qm[t * ins.heads:(t + 1) * ins.heads], qe[t * ins.heads:(t + 1) * ins.heads] = _i16(m), e
            pos = np.repeat(ins.qpos0 + np.arange(ins.tokens), ins.heads)

            def commit():
                u.rows, u.qm, u.qe, u.pos = R, qm, qe, pos
                u.m = np.full(R, fx.M_EMPTY, np.int64)
                u.l, u.o = np.zeros(R, np.int64), np.zeros((R, d), np.int64)
        elif ins.what == AttnLoad.ROWS:
            # QUERY's rows, positions and emptied states without query data (none until the next QUERY)
            pos = np.repeat(ins.qpos0 + np.arange(ins.tokens), ins.heads)

            def commit():
                u.rows, u.qm, u.qe, u.pos = R, None, None, pos
                u.m = np.full(R, fx.M_EMPTY, np.int64)
                u.l, u.o = np.zeros(R, np.int64), np.zeros((R, d), np.int64)
        else:
            self._check(u.rows == R, f"{ins.what.name} of {R} rows into a unit holding {u.rows}")
            if ins.what == AttnLoad.MREF:
                words = self.read_words(ins.spad * vl, R, "ATTN_Q MREF")

                def commit():
                    u.m = words.copy()
            elif ins.what == AttnLoad.O:
                # o of row (t, j) at spad + t tok_stride + j head_stride (head_dim words)
                words = np.concatenate([self.read_rows(ins.spad + t * ins.tok_stride, ins.head_stride, ins.heads,
                                                       d, "ATTN_Q O")[0] for t in range(ins.tokens)])

                def commit():
                    u.o = words.copy()
            else:
                words = self.read_words(ins.spad * vl, R * (d + 2), "ATTN_Q STATE").reshape(R, d + 2)

                def commit():
                    u.m, u.l, u.o = words[:, 0].copy(), words[:, 1].copy(), words[:, 2:].copy()
        ex.commit = commit
        ex.work = {"rows": R}

    def _x_attn_kv(self, ins, ex):
        cfg, d = self.cfg, self.cfg.head_dim
        u = self.attn
        self._check(u.rows > 0, "no query rows loaded")
        self._check(u.qm is not None, "ATTN_KV over rows without query data (ATTN_Q ROWS)")
        self._check(u.rows <= cfg.att_rows, f"ATTN_KV over {u.rows} query rows (the unit's products: {cfg.att_rows})")
        self._check(ins.blocks > 0 and ins.keys > 0, f"blocks={ins.blocks}, keys={ins.keys}")
        seg = kv.segment_bytes(ins.keys, d)
        ks, vs, kpos = [], [], []
        for i in range(ins.blocks):
            if ins.gated:
                blk = ins.block0 + i * ins.block_stride
                self._check(blk < cfg.dir_entries, f"directory id {blk} (the directory has {cfg.dir_entries})")
                self._gate(blk)
            a = ins.seg + i * ins.seg_stride * DDR_ALIGN
            ks.append(kv.unpack_segment(self.ddr_read(a, seg, "ATTN_KV K"), ins.keys, d, strict=False))
            if ins.phase == AttnPass.APPLY:
                vs.append(kv.unpack_segment(self.ddr_read(a + ins.v_off * DDR_ALIGN, seg, "ATTN_KV V"),
                                            ins.keys, d, strict=False))
            kpos.append(ins.kpos0 + i * ins.pos_stride + np.arange(ins.keys))
        kq, ka, ke = (np.concatenate([k[j] for k in ks])[:, None] for j in range(3))
        kpos = np.concatenate(kpos)
        s = fx.scores((u.qm[:, None, :], u.qe[:, None]), kq, ka, ke, 1)[0]     # [R, S]
        valid = fx.causal_mask(u.pos, kpos)
        if ins.phase == AttnPass.MAX:
            m0 = np.full(u.rows, fx.INT32_MIN, np.int64) if ins.first else u.m
            new_m = np.maximum(m0, np.where(valid, s, fx.INT32_MIN).max(axis=-1))

            def commit():
                u.m = new_m
        else:
            vq, va, ve = (np.concatenate([v[j] for v in vs])[:, None] for j in range(3))
            dl, do = fx.state_sums(s[:, None], valid[:, None], vq, va, ve, u.rows, u.m[:, None])
            l0, o0 = (0, 0) if ins.first else (u.l, u.o)
            new_l, new_o = l0 + dl[:, 0], o0 + do[:, 0]

            def commit():
                u.l, u.o = new_l, new_o
        ex.commit = commit
        ex.work = {"ddr_rd": seg * ins.blocks * (2 if ins.phase == AttnPass.APPLY else 1),
                   "keys": ins.keys * ins.blocks, "rows": u.rows}

    def _x_attn_sm(self, ins, ex):
        """ATTN_SM: the softmax pass over score rows in SPAD (golden ``attn_weights``: m, l, w),
        reading what the RTL reads (score rows; APPLY: the V scale words) and writing w rows."""
        vl = self.vl
        u = self.attn
        R, S = ins.tokens * ins.heads, ins.keys
        self._check(0 < R <= self.cfg.sm_rows, f"tokens x heads = {R} rows (the unit has {self.cfg.sm_rows})")
        self._check(u.rows == R, f"a pass over {R} rows in a unit holding {u.rows}")
        self._check(S > 0 and S % vl == 0, f"keys={S} (a positive multiple of VL={vl})")
        s = np.stack([self.read_words((ins.scores + r * ins.s_stride) * vl, S, "ATTN_SM scores")
                      for r in range(R)])                                          # [R, S]
        if ins.phase == AttnPass.MAX and ins.defer:
            # the pass over the score words of the next GEMM_QK (``_x_gemm_qk``; these are unused)
            self.sm_defer = (ins, R)
            ex.work = {"keys": S, "rows": R, "sm": 1, "defer": 1}
            return
        valid = fx.causal_mask(u.pos, ins.kpos0 + np.arange(S))
        if ins.phase == AttnPass.MAX:
            m0 = np.full(R, fx.INT32_MIN, np.int64) if ins.first else u.m
            new_m = np.maximum(m0, np.where(valid, s, fx.INT32_MIN).max(axis=-1))

            def commit():
                u.m = new_m
            ex.work = {"keys": S, "rows": R, "sm": 1}
        else:
            if ins.block_keys:          # a run of V segments: key j's word in block j // block_keys
                _, va, ve, nraw = self.read_run(ins.seg, ins.block_keys, ins.seg_stride, 0, S, "ATTN_SM V",
                                                rows=False)
            else:
                raw = self.ddr_read(ins.seg, 2 * S, "ATTN_SM V scales")
                va, ve = kv.unpack_scales(raw, S)
                nraw = len(raw)
            p, w = fx.attn_weights(s[:, None], valid[:, None], va[:, None], ve[:, None], R, u.m[:, None])
            new_l = (0 if ins.first else u.l) + p[:, 0].sum(axis=-1)
            commits = [self.write_words_later((ins.w + r * ins.w_stride) * vl, w[r, 0], "ATTN_SM w")
                       for r in range(R)]

            def commit():
                u.l = new_l
                for c in commits:
                    c()
            ex.work = {"keys": S, "rows": R, "sm": 1, "ddr_rd": nraw}
        ex.commit = commit

    def _x_attn_emit(self, ins, ex):
        d, vl = self.cfg.head_dim, self.vl
        u = self.attn
        R = ins.tokens * ins.heads
        self._check(u.rows > 0 and R == u.rows, f"emit of {R} rows from a unit holding {u.rows}")
        st = fx.State(u.m[:, None], fx.sat(u.l, 32)[:, None], fx.sat(u.o, 32)[:, None])
        if ins.mode == EmitMode.FINAL:
            out = fx.finalize(st)[0]                                    # [R, d]
            commits = [self.write_rows_later(ins.spad + t * ins.tok_stride, ins.head_stride,
                                             out[t * ins.heads:(t + 1) * ins.heads],
                                             np.zeros(ins.heads, np.int64), "ATTN_EMIT")
                       for t in range(ins.tokens)]
            ex.commit = lambda: [c() for c in commits]
        elif ins.mode == EmitMode.STATE:
            ex.commit = self.write_words_later(ins.spad * vl, fx.encode_state(st)[:, 0], "ATTN_EMIT")
        else:
            ex.commit = self.write_words_later(ins.spad * vl, u.m, "ATTN_EMIT")
        ex.work = {"rows": R}

    def _x_kvw(self, ins, ex):
        cfg, d = self.cfg, self.cfg.head_dim
        self._check(0 < ins.rows <= cfg.max_tokens, f"rows={ins.rows} (max tokens {cfg.max_tokens})")
        m, e = self.read_rows(ins.src, ins.row_stride, ins.rows, d, "KVW")
        q, a, ke = fx.quantize_kv((_i16(m), e))
        data = kv.pack_segment(q, a, ke)
        ex.commit = self.ddr_write_later(ins.seg, data, "KVW")
        ex.work = {"ddr_wr": len(data), "rows": ins.rows}

    def _gate(self, blk: int) -> None:
        """The readability rule of a gated ATTN_KV and of DIR check: UNREADABLE_BLOCK unless the
        entry is ``ReplicaState.readable`` (VALID or DRAINING)."""
        if not ReplicaState(int(self.directory[blk])).readable:
            raise Fault(SeqFault.UNREADABLE_BLOCK, f"block {blk} is INVALID in the directory")

    def _x_dir(self, ins, ex):
        self._check(ins.count > 0, "DIR count = 0")
        ids = ins.block + ins.stride * np.arange(ins.count)
        self._check(int(ids.max()) < self.cfg.dir_entries,
                    f"directory ids {ins.block}..{int(ids.max())} (the directory has {self.cfg.dir_entries})")
        ex.work = {"count": ins.count}
        if ins.check:
            for blk in ids:
                self._gate(int(blk))
            return

        def commit():
            self.directory[ids] = int(ins.state)
        ex.commit = commit

    # --- TX / RX ---------------------------------------------------------------------------
    def _x_send(self, ins, ex):
        data = self.ddr_read(ins.ddr, ins.length, "SEND") if ins.length else b""
        step = self.cfg.max_payload
        parts = [data[i:i + step] for i in range(0, len(data), step)] or [b""]
        try:
            for part in parts:
                meta = Meta(stage=ins.stage, op=ins.mop, collective=ins.collective, reduce_op=ins.reduce_op,
                            src=self.node_id, dst=ins.dst, route_id=ins.route_id, kv_id=ins.tag,
                            length=len(part), seq=ins.seq)
                ex.packets.append(Packet(meta, part))
        except (SpecError, ValueError) as exc:
            raise Fault(SeqFault.ILLEGAL_INSTRUCTION, str(exc)) from None
        ex.work = {"ddr_rd": len(data), "bytes": len(data), "packets": len(parts)}
        self.perf[PerfCounter.NET_TX_BYTES] += len(data)

    def credit_packet(self, dst: int, route_id: int, sem: int, count: int) -> Packet:
        return Packet(Meta(stage=Stage.CONTROL, op=Op.CREDIT, collective=Collective.UNICAST,
                           reduce_op=ReduceOp.NONE, src=self.node_id, dst=dst, route_id=route_id,
                           kv_id=sem, length=0, seq=count))

    def _x_credit(self, ins, ex):
        self._check(ins.count > 0, "count=0")
        ex.packets.append(self.credit_packet(ins.dst, ins.route_id, ins.sem, ins.count))
        ex.work = {"packets": 1}

    def _x_recv(self, ins, ex):
        self._check(ins.length > 0, "length=0")
        self._ddr_check(ins.ddr, ins.length, "RECV")
        self.rx_table.append(Posted(ins.tag, ins.ddr, ins.length, ins.done_sem, ex.index))
        if ins.credit:
            ex.packets.append(self.credit_packet(ins.credit_dst, ins.credit_route, ins.credit_sem, 1))
        ex.work = {"packets": len(ex.packets)}

    # --- arrivals ----------------------------------------------------------------------------
    def count_error(self, cause: ErrorCause, detail: str) -> None:
        """A dropped packet (the NIC's causes; no RECV posted in time, a payload beyond the
        posted buffer, a control packet naming no semaphore or block): counted; a running node
        faults NETWORK when FAULT_MASK enables the cause."""
        self.errors[cause] = min(self.errors[cause] + 1, (1 << 32) - 1)
        if self.running and self.fault_mask >> int(cause) & 1:
            self.fail(Fault(SeqFault.NETWORK, f"{cause.name}: {detail}"))

    def deliver(self, pkt: Packet) -> None:
        """A packet the NIC delivers locally joins the receive input (processed in order)."""
        self.rx_in.append(pkt)

    def process_rx(self, now: int = 0) -> bool:
        """Handle delivered packets in order; a data packet without a posted RECV blocks the input
        until one is posted or RX_WAIT cycles pass.  True if any packet was consumed."""
        moved = False
        while self.rx_in:
            pkt = self.rx_in[0]
            m = pkt.meta
            if m.op == Op.CREDIT:
                if m.kv_id >= len(self.sems) or m.length:
                    self.count_error(ErrorCause.RX_BAD_CONTROL, f"CREDIT for sem {m.kv_id} from node {m.src}")
                else:
                    self.signal(m.kv_id, m.seq)
            elif m.op in (Op.KV_DRAIN, Op.KV_INVALIDATE):
                if m.kv_id >= self.cfg.dir_entries or m.length:
                    self.count_error(ErrorCause.RX_BAD_CONTROL, f"{m.op.name} of block {m.kv_id} from node {m.src}")
                else:
                    st = ReplicaState.DRAINING if m.op == Op.KV_DRAIN else ReplicaState.INVALID
                    self.directory[m.kv_id] = int(st)
                    self.dir_log.append((now, m.kv_id, st))
            elif m.length == 0:
                self.count_error(ErrorCause.RX_BAD_CONTROL, f"header-only {m.op.name} packet from node {m.src}")
            else:
                post = next((p for p in self.rx_table if p.tag == m.kv_id), None)
                if post is None:
                    if self.rx_head_since is None:
                        self.rx_head_since = now
                    if now - self.rx_head_since < self.rx_wait:
                        return moved
                    self.count_error(ErrorCause.RX_UNEXPECTED, f"packet tag {m.kv_id} ({m.op.name}) from node "
                                                      f"{m.src}: no RECV posted within {self.rx_wait} cycles")
                elif post.got + m.length > post.length:
                    self.count_error(ErrorCause.RX_OVERFLOW, f"packet tag {m.kv_id} from node {m.src}: {m.length} bytes "
                                                    f"after {post.got} of {post.length}")
                else:
                    self.ddr.device_write(post.addr + post.got, pkt.payload)
                    post.got += m.length
                    self.perf[PerfCounter.NET_RX_BYTES] += m.length
                    if post.got == post.length:
                        self.rx_table.remove(post)
                        self.signal(post.done_sem, 1)
            self.rx_in.popleft()
            self.rx_head_since = None
            moved = True
        return moved

    def rx_deadline(self) -> int | None:
        """When the blocked head of the receive input will be dropped (None: nothing blocked)."""
        return None if self.rx_head_since is None else self.rx_head_since + self.rx_wait

    # --- reporting -------------------------------------------------------------------------
    def waits(self) -> list[str]:
        """What every blocked queue head of a running node waits for (one phrase each)."""
        out = []
        for q in Queue:
            why = self.blocked_on(q)
            if why:
                out.append(f"{q.name} {why}")
        if self.rx_in and self.rx_head_since is not None:
            m = self.rx_in[0].meta
            out.append(f"RX input: packet tag {m.kv_id} from node {m.src} waits for a RECV")
        if not self.end_dispatched and all(self.head(q) is None and self.busy[q] is None for q in Queue):
            out.append(f"dispatch at #{self.pc}")
        return out

    def status_line(self) -> str:
        if self.state == "fault":
            return f"node {self.node_id}: fault {self.fault_cause.name}: {self.fault_detail}"
        return f"node {self.node_id}: {self.state}" + (f", {'; '.join(self.waits())}" if self.running else "")


#: The busy counter each execute-unit opcode counts into (the RTL's too).
BUSY_COUNTER = {Opcode.GEMM: PerfCounter.BUSY_GEMM, Opcode.GEMM_PV: PerfCounter.BUSY_GEMM,
                Opcode.GEMM_QK: PerfCounter.BUSY_GEMM, Opcode.VEC: PerfCounter.BUSY_VEC,
                Opcode.ATTN_Q: PerfCounter.BUSY_ATTN, Opcode.ATTN_KV: PerfCounter.BUSY_ATTN,
                Opcode.ATTN_EMIT: PerfCounter.BUSY_ATTN, Opcode.ATTN_SM: PerfCounter.BUSY_ATTN, Opcode.KVW: PerfCounter.BUSY_KVW,
                Opcode.EMBED: PerfCounter.BUSY_EMBED, Opcode.LOAD: PerfCounter.BUSY_LDST,
                Opcode.STORE: PerfCounter.BUSY_LDST}
