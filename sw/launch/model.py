"""The ``model`` backend: a node's lowered Meta/DMA program executed against an in-process
model of its DDR, with the KV packets exchanged between ranks.

What a node does with each item of its program (``mcf.sw.mars.metaprog``), as the node's datapath
does it:

* LOAD: the DMA reads DDR.  If the next item is a KV_FETCH Meta of the same length, the bytes
  are that packet's payload (packetizer); otherwise the compute engine reads them (attention
  over history), and the model checks they are the KV of whole blocks of the current layer.
* STORE: bytes go to DDR at the descriptor's address, from the KV writer (the block this node
  computes: ``sources`` says so) or from the network (the packet named in ``sources``).
* KV_FETCH / KV_REPLICA Meta: one packet, delivered to the nodes whose route-table entry for its
  route id delivers locally.  KV_DRAIN / KV_INVALIDATE: the node's replica directory.
* Decode (KV-stationary): the root multicasts the query, every node reads its shard (LOADs) and
  sends its partial softmax state (m, l, o) towards the root, which merges them (the NIC's
  SOFTMAX_MERGE).  The lowering's decode template repeats for every token.

KV contents are a deterministic function of (block, layer) standing in for the engine's output
(the engine and its instruction set arrive with issue 13); decode reads them as int8 K and V
halves of each token's record.  The checks on rank 0 compare each node's final DDR layout with
the plan (every block on its owner, its bytes intact, no replica left), each compute node's
history reads with the full causal history, and the merged decode outputs with attention over
the whole prompt computed in one place.
"""
from __future__ import annotations

import hashlib

import numpy as np

from mcf.spec import Meta, Op, Stage
from mcf.spec.regmap import DmaDescriptor, DmaDir
from mcf.sw.driver.memory import HostMemory
from mcf.sw.errors import UserError
from mcf.spec.plan import ReplicaState as State
from mcf.sw.mars.metaprog import DECODE_ROOT, KV_POOL_BASE


class ExecutionError(UserError):
    """The program did something a node cannot do (a bug in lowering or in a backend)."""


def kv_bytes(block: int, layer: int, ntok: int, layer_tok: int) -> bytes:
    """The KV record of ``block`` in ``layer`` (``ntok`` tokens x ``layer_tok`` bytes)."""
    rng = np.random.default_rng([0x4D4346, block, layer])
    return rng.integers(-8, 8, size=ntok * layer_tok, dtype=np.int8).tobytes()


def query(token: int, layer: int, dim: int) -> np.ndarray:
    return np.random.default_rng([0x51, token, layer]).standard_normal(dim)


def partial_state(q: np.ndarray, kv: bytes, layer_tok: int) -> tuple[float, float, np.ndarray]:
    """Softmax state (m, l, o) of attention of ``q`` over the tokens in ``kv``."""
    half = layer_tok // 2
    if not kv:
        return -np.inf, 0.0, np.zeros(half)
    rec = np.frombuffer(kv, dtype=np.int8).reshape(-1, layer_tok).astype(np.float64)
    s = rec[:, :half] @ q / np.sqrt(half)
    m = float(s.max())
    w = np.exp(s - m)
    return m, float(w.sum()), w @ rec[:, half:]


def merge(states) -> tuple[float, float, np.ndarray]:
    m = max(st[0] for st in states)
    if m == -np.inf:
        return states[0]
    l = sum(st[1] * np.exp(st[0] - m) for st in states if st[1])
    o = sum(st[2] * np.exp(st[0] - m) for st in states if st[1])
    return m, float(l), o


def _pack_state(st) -> bytes:
    m, l, o = st
    return np.concatenate([[m, l], o]).astype("<f8").tobytes()


def _unpack_state(b: bytes):
    v = np.frombuffer(b, dtype="<f8")
    return float(v[0]), float(v[1]), v[2:].copy()


def _digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype="<f8").tobytes())
    return h.hexdigest()


class ModelBackend:
    """Runs a node's program on a model of its DDR (``HostMemory``: the CPU's view and DDR kept
    apart, as on the non-coherent HP port) and exchanges its packets through ``world``."""

    name = "model"

    def run(self, node: int, job, world) -> dict:
        return _NodeRun(node, job, world).run()

    # --- rank 0 ------------------------------------------------------------------------------
    def check(self, job, results: list[dict]) -> dict:
        plan, m = job.plan, job.plan.request.model
        L, C = m.num_layers, plan.num_chunks
        layer_tok = int(m.kv_token_bytes // L)
        problems = []
        expect = {b: _block_digest(b, int(plan.chunk_tokens[b]), L, layer_tok) for b in range(C)}
        held = {}
        for r in results:
            for b, d in r["held"].items():
                held.setdefault(int(b), []).append((r["node"], d))
        for b in range(C):
            copies = held.get(b, [])
            owner = int(plan.owner[b])
            if [n for n, _ in copies] != [owner]:
                problems.append(f"block {b}: held by {[n for n, _ in copies]}, the plan says node {owner} only")
            elif copies[0][1] != expect[b]:
                problems.append(f"block {b}: node {owner}'s DDR does not hold the block's KV")
        for r in results:
            if r["node"] in {int(n) for n in plan.compute_nodes}:
                for t in range(C):
                    for layer in range(L):
                        got = r["history_reads"].get(f"{t}/{layer}", [])
                        if got != list(range(t)):
                            problems.append(f"node {r['node']} step {t} layer {layer}: the engine read "
                                            f"blocks {got}, its history is {list(range(t))}")
        decode = {}
        if job.decode_tokens:
            root = results[DECODE_ROOT]["decode"]
            ref = reference_decode(job)
            err = max(float(np.max(np.abs(np.asarray(a) - b))) for a, b in zip(root["out"], ref))
            if not err <= 1e-9:
                problems.append(f"decode: merged attention differs from the one-place attention by {err:.3g}")
            decode = {"tokens": job.decode_tokens, "max_abs_error": err, "digest": root["digest"]}
        if problems:
            raise ExecutionError(f"{len(problems)} check(s) failed; first: {problems[0]}")
        return {
            "scheme": plan.scheme, "chunks": C, "layout_ok": True, "history_reads_ok": True,
            "final_layout": {str(r["node"]): sorted(int(b) for b in r["held"]) for r in results},
            "prefill_link_bytes": [r["prefill_bytes"] for r in results],
            "link_bytes": [r["sent_bytes"] for r in results],
            "packets": [r["packets"] for r in results],
            "decode": decode,
        }


def _block_digest(b: int, ntok: int, L: int, layer_tok: int) -> str:
    h = hashlib.sha256()
    for layer in range(L):
        h.update(kv_bytes(b, layer, ntok, layer_tok))
    return h.hexdigest()


def reference_decode(job) -> list[np.ndarray]:
    """Decode attention of every token and layer over the whole prompt, in one place."""
    m = job.plan.request.model
    L = m.num_layers
    layer_tok = int(m.kv_token_bytes // L)
    out = []
    for k in range(job.decode_tokens):
        for layer in range(L):
            kv = b"".join(kv_bytes(b, layer, int(n), layer_tok) for b, n in enumerate(job.plan.chunk_tokens))
            _, l, o = partial_state(query(k, layer, layer_tok // 2), kv, layer_tok)
            out.append(o / l)
    return out


class _NodeRun:
    def __init__(self, node: int, job, world):
        self.node, self.job, self.world = node, job, world
        self.prog = job.programs[node]
        m = job.plan.request.model
        self.L = m.num_layers
        self.layer_tok = int(m.kv_token_bytes // self.L)
        self.stride = int(job.plan.chunk_size * self.layer_tok)
        self.ntok = [int(n) for n in job.plan.chunk_tokens]
        self.ddr = HostMemory(max(self.prog.window_bytes, 1), phys_base=KV_POOL_BASE)
        self.where: dict[int, tuple[int, int, int]] = {}      # DDR address -> (block, layer, bytes)
        self.pool: dict[tuple[int, int], int] = {}            # (block, layer) -> pool address
        self.state: dict[int, State] = {}                     # the node's replica directory
        self.sent_bytes = self.packets = 0
        self.history: dict[str, list[int]] = {}

    def fail(self, msg: str):
        raise ExecutionError(f"node {self.node}: {msg}")

    # --- DDR contents --------------------------------------------------------------------------
    def store(self, addr: int, data: bytes, block: int, layer: int) -> None:
        end = addr + len(data)
        for a in [a for a, (_, _, n) in self.where.items() if a < end and addr < a + n]:
            del self.where[a]
        self.ddr.device_write(addr, data)
        self.where[addr] = (block, layer, len(data))
        if addr < self.prog.staging_base:
            self.pool[(block, layer)] = addr

    def blocks_in(self, addr: int, length: int) -> list[tuple[int, int, bytes]]:
        """(block, layer, bytes) of every block a LOAD of [addr, addr+length) reads, checked."""
        out, a = [], addr
        while a < addr + length:
            if a not in self.where:
                self.fail(f"the engine reads {a:#x}, where no block was stored")
            b, layer, n = self.where[a]
            data = self.ddr.device_read(a, n)
            if data != kv_bytes(b, layer, self.ntok[b], self.layer_tok):
                self.fail(f"DDR at {a:#x} does not hold block {b} layer {layer}")
            out.append((b, layer, data))
            a += self.stride
        return out

    def send(self, meta: Meta, payload: bytes, tag: tuple) -> None:
        dsts = self.job.delivers_to(meta.route_id, self.node)
        if not dsts and meta.route_id not in self.prog.routes:
            self.fail(f"route {meta.route_id} is not in this node's table")
        for d in dsts:
            self.world.send(d, tag, payload)
        self.sent_bytes += len(payload)
        self.packets += 1

    # --- prefill ---------------------------------------------------------------------------------
    def run(self) -> dict:
        ops = self.prog.ops
        payload, kvw = None, {}
        for i, (stage, step, op) in enumerate(ops):
            if stage != Stage.PREFILL:
                continue
            if isinstance(op, DmaDescriptor) and op.dir == DmaDir.LOAD:
                nxt = ops[i + 1][2] if i + 1 < len(ops) else None
                if isinstance(nxt, Meta) and nxt.op == Op.KV_FETCH and nxt.length == op.length:
                    payload = self.ddr.device_read(op.addr, op.length)
                else:
                    read = self.blocks_in(op.addr, op.length)
                    layers = {layer for _, layer, _ in read}
                    if len(layers) != 1:
                        self.fail(f"one history LOAD spans layers {sorted(layers)}")
                    key = f"{step}/{layers.pop()}"
                    self.history[key] = sorted(self.history.get(key, []) + [b for b, _, _ in read])
            elif isinstance(op, DmaDescriptor):
                src, sop, kv_id = self.prog.sources[i]
                block, layer = divmod(kv_id, self.L)
                if src == self.node and sop == Op.KV_REPLICA:        # the KV writer's block
                    data = kv_bytes(block, layer, self.ntok[block], self.layer_tok)
                    kvw[kv_id] = data
                else:
                    data = self.world.recv(src, (int(Stage.PREFILL), step, int(sop), kv_id))
                if len(data) != op.length:
                    self.fail(f"STORE of {op.length} bytes got a {len(data)}-byte payload")
                self.store(op.addr, data, block, layer)
                if op.addr < self.prog.staging_base and layer == 0:
                    self.state[block] = State.VALID
            elif op.op == Op.KV_FETCH:
                if payload is None:
                    self.fail(f"KV_FETCH {op.kv_id} without a LOAD before it")
                self.send(op, payload, (int(Stage.PREFILL), step, int(op.op), op.kv_id))
                payload = None
            elif op.op == Op.KV_REPLICA:
                if op.kv_id not in kvw:
                    self.fail(f"KV_REPLICA {op.kv_id} of a block this node did not compute")
                self.send(op, kvw.pop(op.kv_id), (int(Stage.PREFILL), step, int(op.op), op.kv_id))
            elif op.op == Op.KV_DRAIN:
                if self.state.get(op.kv_id) != State.VALID:
                    self.fail(f"drain of block {op.kv_id} in state {self.state.get(op.kv_id)}")
                self.state[op.kv_id] = State.DRAINING
            elif op.op == Op.KV_INVALIDATE:
                if self.state.get(op.kv_id) != State.DRAINING:
                    self.fail(f"invalidate of block {op.kv_id} in state {self.state.get(op.kv_id)}")
                del self.state[op.kv_id]
                for layer in range(self.L):
                    self.pool.pop((op.kv_id, layer), None)
            else:
                self.fail(f"prefill Meta {op.op.name} is not modelled")
        held = {}
        for b, st in sorted(self.state.items()):
            if st != State.VALID:
                self.fail(f"block {b} left in state {st.name} after prefill")
            h = hashlib.sha256()
            for layer in range(self.L):
                n = self.ntok[b] * self.layer_tok
                h.update(self.ddr.device_read(self.pool[(b, layer)], n))
            held[str(b)] = h.hexdigest()
        prefill_bytes = self.sent_bytes
        decode = self.decode() if self.job.decode_tokens else None
        return {"node": self.node, "held": held, "history_reads": self.history,
                "prefill_bytes": prefill_bytes, "sent_bytes": self.sent_bytes, "packets": self.packets,
                "decode": decode}

    # --- decode (KV-stationary) ---------------------------------------------------------------
    def decode(self) -> dict | None:
        if self.job.plan.scheme == "passq":
            raise UserError("--decode with scheme passq is not modelled (the model backend runs "
                            "KV-stationary decode: mars, ring, zigzag, full, pd)")
        tmpl = [(i, op) for i, (stage, _, op) in enumerate(self.prog.ops) if stage == Stage.DECODE]
        dim, n = self.layer_tok // 2, self.job.nodes
        outs = []
        for k in range(self.job.decode_tokens):
            shard = {layer: [] for layer in range(self.L)}
            for i, op in tmpl:
                if isinstance(op, DmaDescriptor):
                    for b, layer, data in self.blocks_in(op.addr, op.length):
                        if self.state.get(b) != State.VALID:
                            self.fail(f"decode reads block {b}, which this node does not own")
                        shard[layer].append(data)
                elif op.op == Op.QUERY:
                    self.send(op, query(k, op.kv_id, dim).tobytes(),
                              (int(Stage.DECODE), k, int(Op.QUERY), op.kv_id))
                elif op.op == Op.PARTIAL_STATE:
                    layer = op.kv_id
                    q = (query(k, layer, dim) if self.node == DECODE_ROOT else np.frombuffer(
                        self.world.recv(DECODE_ROOT, (int(Stage.DECODE), k, int(Op.QUERY), layer)), dtype=np.float64))
                    st = partial_state(q, b"".join(shard[layer]), self.layer_tok)
                    tag = (int(Stage.DECODE), k, int(Op.PARTIAL_STATE), layer)
                    if self.node != DECODE_ROOT:
                        self.send(op, _pack_state(st), tag)
                        continue
                    others = [_unpack_state(self.world.recv(src, tag)) for src in range(n) if src != DECODE_ROOT]
                    m_, l_, o_ = merge([st] + others)
                    outs.append(o_ / l_)
                else:
                    self.fail(f"decode Meta {op.op.name} is not modelled")
            if n == 1:
                for layer in range(self.L):
                    _, l_, o_ = partial_state(query(k, layer, dim), b"".join(shard[layer]), self.layer_tok)
                    outs.append(o_ / l_)
        if self.node != DECODE_ROOT:
            return None
        return {"out": [o.tolist() for o in outs], "digest": _digest(outs)}
