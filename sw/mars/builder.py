"""Building the programs of a cluster from dependencies: the lowering says *what* must happen
before *what*; this module chooses the semaphores, wait counts, signals and RECV credits
(``mcf.spec.isa``) so that every program runs in any timing and never deadlocks.

The lowering emits instructions in one *global order*, a sequential execution of the whole
cluster in which every dependency is met by something emitted earlier: a message is emitted as
its RECVs (at every receiver, each sending a credit to the sender) immediately followed by its
SEND (waiting for those credits).  Each node's program is its part of the global order.  Then,
whatever the timing, the earliest instruction (in global order) that has not completed can
always issue: everything before it completed, its queue holds nothing older, and it waits only
for things before it.  Receive slots are held only between a RECV and its SEND, which follow
one another, so they cannot fill up with receives whose senders come later.

Semaphores (per node, at most ``NUM_SEMS`` = 32), each consumed by exactly one queue so that waits
consume signals in program order, and each signalled in a known order:

* ``DONE[x]``: a RECV of data sent by node x completed (consumed by EX).  Messages from x
  arrive in the order x sends them (one path per pair, links keep order), which is the order the
  receiver posts them.
* ``CR[y]``: node y posted a RECV for a message from this node (consumed by TX).
* ``EX2TX``, ``EX2RX``, ``TX2EX``, ``TX2RX``, ``RX2TX``: an instruction of one queue completed, for
  another queue of the same node (signals in the producer queue's program order).
* ``FWD``: a RECV of a block this node only forwards completed (consumed by TX; one sender).

A dependency is a handle: ``Local`` (an instruction of this node), ``Arrival`` (a RECV's data),
and the builder turns a list of them into waits: one on the instruction, the others on SYNC
instructions in front of it.  A wait count above 63 is split over SYNCs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mcf.spec import isa
from mcf.spec.isa import NUM_SEMS, Queue
from mcf.sw.errors import UserError

WAIT_MAX = (1 << isa.LAYOUTS[isa.Opcode.END]["wait_cnt"].width) - 1
_PAIRS = [(Queue.EX, Queue.TX), (Queue.EX, Queue.RX), (Queue.TX, Queue.EX), (Queue.TX, Queue.RX),
          (Queue.RX, Queue.TX)]


def max_nodes(num_sems: int = NUM_SEMS) -> int:
    """The most nodes the semaphore map fits: 2 N + len(pairs) + 1 <= num_sems."""
    return (num_sems - len(_PAIRS) - 1) // 2


class SemMap:
    def __init__(self, nodes: int, num_sems: int = NUM_SEMS):
        if nodes > max_nodes(num_sems):
            raise UserError(f"nodes={nodes}: the node programs use 2 semaphores per node; at most "
                            f"{max_nodes(num_sems)} nodes fit the node's {num_sems} semaphores")
        self.done = list(range(nodes))
        self.credit = list(range(nodes, 2 * nodes))
        self.pair = {p: 2 * nodes + i for i, p in enumerate(_PAIRS)}
        self.fwd = 2 * nodes + len(_PAIRS)
        self.consumer = {**{s: Queue.EX for s in self.done}, **{s: Queue.TX for s in self.credit},
                         **{s: q for (_, q), s in self.pair.items()}, self.fwd: Queue.TX}


@dataclass(frozen=True)
class Local:
    """Completion of instruction ``index`` (in ``queue``) of ``node``'s program."""
    node: int
    queue: Queue
    index: int


@dataclass(frozen=True)
class Arrival:
    """The data of a RECV at ``node`` is complete: ``sem`` reaches ``target``."""
    node: int
    sem: int
    target: int


@dataclass
class _Item:
    cls: type
    fields: dict
    queue: Queue
    wait: tuple | None = None          # (sem, count)
    sig: int | None = None


@dataclass
class _Node:
    items: list = field(default_factory=list)
    signals: dict = field(default_factory=dict)        # sem -> signals allocated so far
    consumed: dict = field(default_factory=dict)       # sem -> signals waited for so far
    last: dict = field(default_factory=dict)           # queue -> index of its last item
    relay: dict = field(default_factory=dict)          # (producer q, consumer q) -> (covered index, target)
    fwd_src: int | None = None


@dataclass
class Message:
    tag: int
    src: int
    dsts: tuple
    sent: bool = False


class Builder:
    def __init__(self, nodes: int, num_sems: int = NUM_SEMS, first_tag: int = 1):
        self.n = nodes
        self.sems = SemMap(nodes, num_sems)
        self.nodes = [_Node() for _ in range(nodes)]
        self._tag = first_tag
        self.credits = {}                  # (sender, receiver) -> credits the receiver sent so far
        self.messages: dict[int, Message] = {}

    # --- instructions --------------------------------------------------------------------------
    def _append(self, node: int, item: _Item) -> Local:
        nd = self.nodes[node]
        nd.items.append(item)
        index = len(nd.items) - 1
        nd.last[item.queue] = index
        return Local(node, item.queue, index)

    def _signal_from(self, h: Local, consumer: Queue) -> tuple[int, int]:
        """(sem, target): ``consumer`` waits until sem reaches target to know h completed."""
        nd = self.nodes[h.node]
        sem = self.sems.pair[(h.queue, consumer)]
        covered = nd.relay.get((h.queue, consumer))
        if covered is not None and covered[0] >= h.index:
            return sem, covered[1]
        item = nd.items[h.index]
        if nd.last.get(h.queue) == h.index and item.sig is None:
            index = h.index
            item.sig = sem
        else:                                      # a SYNC after it in its queue signals instead
            index = self._append(h.node, _Item(isa.Sync, {"on": h.queue}, h.queue, sig=sem)).index
        nd.signals[sem] = nd.signals.get(sem, 0) + 1
        nd.relay[(h.queue, consumer)] = (index, nd.signals[sem])
        return sem, nd.signals[sem]

    def _requirements(self, node: int, queue: Queue, deps) -> list[tuple[int, int]]:
        need: dict[int, int] = {}
        for d in deps:
            if d is None:
                continue
            if d.node != node:
                raise ValueError(f"a dependency of node {node} on node {d.node}: only messages cross nodes")
            if isinstance(d, Local):
                if d.queue == queue:
                    continue                       # a queue completes in order
                sem, target = self._signal_from(d, queue)
            else:
                sem, target = d.sem, d.target
                owner = self.sems.consumer[sem]
                if owner != queue:
                    # the semaphore is counted in another queue: a SYNC there relays it
                    sync = self.emit(node, owner, isa.Sync, [d], on=owner)
                    sem, target = self._signal_from(sync, queue)
            need[sem] = max(need.get(sem, 0), target)
        out = []
        nd = self.nodes[node]
        for sem, target in sorted(need.items()):
            cnt = target - nd.consumed.get(sem, 0)
            if cnt > 0:
                out.append((sem, cnt))
                nd.consumed[sem] = target
        return out

    def emit(self, node: int, queue: Queue, cls, deps=(), **fields) -> Local:
        """Append an instruction (``cls`` with ``fields``, no header) to ``node``'s program after
        ``deps`` (handles); returns its handle."""
        waits = []
        for sem, cnt in self._requirements(node, queue, deps):
            while cnt > WAIT_MAX:
                waits.append((sem, WAIT_MAX))
                cnt -= WAIT_MAX
            waits.append((sem, cnt))
        for w in waits[:-1]:
            self._append(node, _Item(isa.Sync, {"on": queue}, queue, wait=w))
        return self._append(node, _Item(cls, fields, queue, wait=waits[-1] if waits else None))

    def ex(self, node: int, cls, deps=(), **fields) -> Local:
        return self.emit(node, Queue.EX, cls, deps, **fields)

    # --- messages ------------------------------------------------------------------------------
    def new_tag(self) -> int:
        tag = self._tag
        self._tag += 1
        if tag >= 1 << isa.TAG_BITS:
            raise UserError("the programs need more message tags than Meta.kv_id holds")
        return tag

    def recv(self, node: int, src: int, tag: int, addr: int, length: int, deps=(), *, credit_route: int | None,
             forward: bool = False, result_of_reduce: bool = False) -> Arrival:
        """Post a receive at ``node`` for message ``tag`` from ``src`` (credit to src over
        ``credit_route`` unless None: reduction results need none); returns its arrival."""
        sems, nd = self.sems, self.nodes[node]
        if forward:
            if nd.fwd_src not in (None, src):
                raise ValueError(f"node {node} forwards blocks from nodes {nd.fwd_src} and {src}")
            nd.fwd_src = src
            done = sems.fwd
        else:
            done = sems.done[node if result_of_reduce else src]
        credit = credit_route is not None
        if credit:
            self.credits[(src, node)] = self.credits.get((src, node), 0) + 1
        h = self.emit(node, Queue.RX, isa.Recv, deps, tag=tag, ddr=addr, length=length, done_sem=done,
                      credit=int(credit), credit_dst=src if credit else 0,
                      credit_route=credit_route if credit else 0, credit_sem=sems.credit[node] if credit else 0)
        nd.signals[done] = nd.signals.get(done, 0) + 1
        return Arrival(node, done, nd.signals[done])

    def posted(self, recv_arrival: Arrival) -> Local:
        """The RECV instruction itself (its completion = posted)."""
        nd = self.nodes[recv_arrival.node]
        return Local(recv_arrival.node, Queue.RX, nd.last[Queue.RX])

    def send(self, node: int, dsts, deps=(), *, credits: bool = True, **fields) -> Local:
        """SEND from ``node`` to ``dsts`` after ``deps`` and (``credits``) the receivers' credits."""
        deps = list(deps)
        if credits:
            for d in dsts:
                got = self.credits.get((node, d), 0)
                if not got:
                    raise ValueError(f"node {node} sends to node {d}, which posted no receive")
                deps.append(Arrival(node, self.sems.credit[d], got))
        return self.emit(node, Queue.TX, isa.Send, deps, **fields)

    # --- the programs --------------------------------------------------------------------------
    def program(self, node: int) -> list[isa.Instr]:
        out = []
        for it in self.nodes[node].items:
            hdr = {}
            if it.wait is not None:
                hdr.update(wait_sem=it.wait[0], wait_cnt=it.wait[1])
            if it.sig is not None:
                hdr.update(sig_sem=it.sig, sig=1)
            out.append(it.cls(**it.fields, **hdr))
        out.append(isa.End())
        return out

    def programs(self) -> list[list[isa.Instr]]:
        return [self.program(n) for n in range(self.n)]
