"""Tensor-parallel (weight-sharded) lowering: every node holds 1/N of the weights and computes
every token, on the same instruction set (``mcf.spec.isa``) as the MARS lowering.

Megatron style, the golden model's ``mcf.sw.golden.fixed_model.TensorParallel``: node n holds
query heads [n H/N, (n+1) H/N), their KV heads and *their KV cache* (the KV is sharded by KV
head, never sent), the rows of Q/K/V, gate and up for them and the matching columns of o_proj
and down_proj -- each a node's program is the narrower model ``shard_config`` with the full
hidden size, so its GEMM blobs, KV blocks and SPAD rows are the MARS lowering's for that shape.
o_proj and down_proj give each node an X32 partial of the hidden row; the NICs add them, one
all-reduce per o_proj and per down_proj: a reduce-scatter and an all-gather (piece k summed by
``ReduceOp.SUM`` on the REDUCE route towards node k mod N, which multicasts the sum to the
others).  RMSNorm, the residual stream and the embedding table are replicated (every node embeds
the token and keeps the residual).  The LM head is split by
vocabulary rows (``head_rows``: node n holds rows [n R, (n+1) R), R a multiple of the array's
rows and of 16): every node computes its logits and sends them to node 0's logits region (a
gather; per row the result is the unsharded one, so the logits equal the golden model's head on
the same final-norm row).  At Qwen2.5-1.5B the head is 120 MB of INT4 weights and scales, more
than 2/3 of a layer stack's share on 4 nodes: replicated, it alone would take a third of a token.

Since the weights are sharded, the prefill is tensor-parallel too: chunk after chunk, every node
on every chunk, each chunk's KV written into the node's pool slot of that chunk; a decode step
is the same program with one token whose KV goes into the decode region.

Context-split decode attention: when R = N / H_kv > 1 nodes hold the same KV head (each caches
all of it), a decode step splits its keys over them (``_TPLowerer.split_attention``): node r of
the R attends to a contiguous r-th of the prompt's chunks (the last one also to the decode tokens)
for all the KV head's query heads, gathered from the R nodes; the maxima go through the NICs'
MAX reduction and each node's (M, l, o) state to the R - 1 others, which add them -- the
KV-stationary protocol of docs/fixed-point.md 7.4, bit-exact with the single-node attention.

The all-reduce of T X32 rows (T x hidden x 4 bytes) goes in pieces of at most the NIC's
reduction payload; at most ``reduce_slots`` pieces are open at a NIC at once (a contribution
of piece k is sent only after the sum of the reduce_slots-th earlier piece summed at the same
node came back).  In decode the pieces shrink towards the end and the GEMM goes piece by piece.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mcf.spec import isa
from mcf.spec.isa import AttnLoad, AttnPass, VecOp
from mcf.spec.node import NodeConfig
from mcf.spec.packet import Collective, Op, ReduceOp, Stage
from mcf.spec.topology import Topology
from mcf.sw.models.config import ModelConfig, check_tensor_parallel, shard_config
from .lower import (DECODE_ROOT, DdrMap, LoweringError, RouteTables, Shapes, SpadMap, _Alloc, _Lowerer, _lm_unit,
                    _pad, array_pool_extra, array_rows, array_spad, check_model, choose_attention, const_keys,
                    place_decode, place_model, spad_map)

#: The name of this decode scheme (as ``mcf simulate --decode`` names it).
TENSOR_PARALLEL = "tensor-parallel"


@dataclass
class TPMap(DdrMap):
    """Byte offsets of a tensor-parallel node's DDR (the same on every node): the MARS map's
    fields (no staging, forward or decode-merge regions: ``pool_slots``, ``stage_group`` and
    ``net`` stay empty) and the all-reduce's piece and each node's LM head rows."""
    piece: int = 0                 # bytes per all-reduce piece
    head_rows: list = field(default_factory=list)    # per node: its LM head rows (lo, hi)
    replicas: int = 1              # R: nodes sharing a KV head (> 1: decode splits its keys over them)
    row_groups: list = field(default_factory=list)   # context split: (first row, rows) of a KV group's heads
    qslot: int = 0                 # context split: bytes of one node's query rows in net.qg


@dataclass
class TPLowered:
    """What the runtime needs of a tensor-parallel session (cf. ``lower.Lowered``)."""
    model: ModelConfig
    shard: ModelConfig
    node: NodeConfig
    shapes: Shapes
    map: TPMap
    spad: object
    bases: list
    routes: list
    prefill: list
    chunk_tokens: list
    decode_steps: int
    consts: dict
    topology: Topology
    logits_node: int = DECODE_ROOT
    route_ids_used: int = 0
    reductions_open: int = 0
    rgroups: list = field(default_factory=list)
    attention: str = "unit"             # lower.ATTENTION_PATHS: ATTN_KV, or GEMM_QK / ATTN_SM / GEMM_PV
    attention_reason: str = ""          # why that path (``choose_attention``)
    _decode_cache: dict = field(default_factory=dict)

    plan = None                     # no MARS plan: every node computes every chunk

    @property
    def nodes(self) -> int:
        return len(self.bases)

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_tokens)

    def decode_programs(self, step: int) -> list:
        if not 0 <= step < self.decode_steps:
            raise LoweringError(f"decode step {step}: the DDR map holds {self.decode_steps} decode tokens")
        if step not in self._decode_cache:
            low = _TPLowerer(self)
            self._decode_cache = {step: low.decode(step)}
        return self._decode_cache[step]

    def ids_addr(self, node: int, chunk: int | None) -> int:
        slot = self.num_chunks if chunk is None else chunk
        return self.bases[node] + self.map.off("ids") + slot * self.map.ids_slot

    def kv_addr(self, node: int, slot: int, layer: int) -> int:
        return self.bases[node] + self.map.off("pool") + layer * self.map.pool_layer + slot * self.map.slot_bytes

    def logits_addr(self, node: int) -> int:
        return self.bases[node] + self.map.off("logits")

    def program_addr(self, node: int) -> int:
        return self.bases[node] + self.map.off("program")


def _tp_spad(sh: Shapes, rows_part: int, groups: int, extra: dict, attn: tuple | None = None) -> SpadMap:
    """``spad_map`` with the regions of ``extra`` (name -> beats) between the activations (and
    the array path's rows, ``attn``) and the LM head's logits part (which gets what remains)."""
    sp = spad_map(sh, rows_part, groups, attn)
    b = dict(sp.beats)
    top = b["LOGP"]
    for name, size in extra.items():
        b[name] = top
        top += size
    unit = _lm_unit(sh)
    total_tiles = -(-sh.vocab // sh.P)
    room = (sh.node.spad_beats - top) * sh.vl // sh.P
    part = min(-(-total_tiles // unit) * unit, room // unit * unit)
    if part < unit:
        raise LoweringError(f"the node's SPAD ({sh.node.spad_beats} beats of {sh.vl} words) cannot hold a chunk of "
                            f"{sh.chunk} tokens of model {sh.model.name} and the split decode attention's rows: use "
                            f"a smaller chunk or a node with more spad_beats")
    b["LOGP"] = top
    return SpadMap(b, top + part * sh.P // sh.vl, part)


def head_rows(vocab: int, nodes: int, rows: int) -> list:
    """Each node's LM head rows (lo, hi): R = ceil(vocab / N) rounded up to a multiple of the
    array's ``rows`` and of 16 (whole tiles; its logits start on a 64-byte boundary)."""
    unit = math.lcm(rows, 16)
    R = -(-(-(-vocab // nodes)) // unit) * unit
    out = [(min(vocab, n * R), min(vocab, (n + 1) * R)) for n in range(nodes)]
    if any(lo >= hi for lo, hi in out):
        raise LoweringError(f"tensor-parallel: a vocabulary of {vocab} rows leaves a node without LM head rows "
                            f"({R} rows per node of {nodes})")
    return out


def lower_tp(model: ModelConfig, node: NodeConfig, group: int, consts: dict, bases, seq_len: int, chunk: int,
             decode_steps: int = 0, topology: str = "switch", attention: str = "auto") -> TPLowered:
    """The tensor-parallel programs of a prompt of ``seq_len`` tokens in chunks of ``chunk`` and
    ``decode_steps`` decode tokens on ``len(bases)`` nodes built as ``node`` (``consts``: the
    whole model's ``const_keys``; the shards share them).  ``attention``: as ``lower``'s ("auto":
    the array where the shard's shapes are covered, else the unit; ``choose_attention``; the choice
    and its reason in ``TPLowered.attention``, ``attention_reason``)."""
    N = len(bases)
    if N < 1:
        raise LoweringError("tensor-parallel: no nodes")
    try:
        check_tensor_parallel(model, N, group)
    except Exception as exc:
        raise LoweringError(str(exc)) from None
    missing = [k for k in const_keys(model) if k not in consts]
    if missing:
        raise LoweringError(f"consts: missing {missing[0]}")
    shard = shard_config(model, N)
    check_model(shard, node, group)
    if not 1 <= chunk <= node.max_tokens:
        raise LoweringError(f"chunk of {chunk} tokens: the node computes 1 .. max_tokens={node.max_tokens} at once")
    if seq_len < 1:
        raise LoweringError("tensor-parallel: no prompt tokens")
    if seq_len + decode_steps > node.max_context:
        raise LoweringError(f"{seq_len} + {decode_steps} tokens exceed the node's max_context={node.max_context}")
    if not 0 <= int(consts["eps_n"]) < 1 << 32:
        raise LoweringError(f"model {model.name}: the RMSNorm epsilon constant {consts['eps_n']} does not fit 32 bits")
    tok = [min(chunk, seq_len - s) for s in range(0, seq_len, chunk)]
    sh = Shapes(shard, node, group, chunk)
    attention, reason = choose_attention(attention, sh, tok)
    array = attention == "array"
    keys = seq_len + max(1, decode_steps)
    piece = min(node.reduce_payload, node.max_payload) // isa.DDR_ALIGN * isa.DDR_ALIGN
    if N > 1 and piece < isa.DDR_ALIGN:
        raise LoweringError(f"tensor-parallel: the NIC's reduction payload ({node.reduce_payload} bytes) is below "
                            f"one {isa.DDR_ALIGN}-byte piece")
    C = len(tok)
    m = TPMap()
    a = _Alloc(isa.DDR_ALIGN)
    m.slot_bytes = _pad(sh.block_bytes(chunk))
    m.pool_layer = C * m.slot_bytes
    m.ids_slot = _pad(4 * node.max_tokens)
    m.head_rows = head_rows(sh.vocab, N, sh.P)
    R = m.head_rows[0][1] - m.head_rows[0][0]
    m.head_tiles = -(-R // sh.P)
    m.piece = piece
    a("ids", (C + 1) * m.ids_slot)
    place_model(a, m, sh, R, seq_len + max(1, decode_steps))
    # the array path reads a run's blocks in whole granules of keys: slots past the last one
    a("pool", sh.L * m.pool_layer + (array_pool_extra(sh) * m.slot_bytes if array else 0))
    place_decode(a, m, sh, decode_steps, array)
    rows = chunk * sh.h * 4
    a("net.part", _pad(rows))
    a("net.sum", _pad(rows))
    a("logits", max(N * R, sh.vocab) * 4 + 4 * sh.vl)
    spad = array_spad(sh, keys, array, lambda attn: spad_map(sh, 1, 1, attn))
    # context-split decode attention: the R nodes sharing a KV head each attend to 1/R of the keys
    # for all of the KV head's query heads (gathered from the R nodes)
    reps = N // model.num_kv_heads if N > model.num_kv_heads else 1
    gqa = model.num_heads // model.num_kv_heads
    # a row group's state comes back through ATTN_Q MREF / STATE, which reach every state row: one row group
    # per KV head on the array path (array_rows), rows with products (att_rows) on the unit's
    rows_part = min(gqa, array_rows(sh) if array else node.att_rows)
    rg = [(j0, min(rows_part, gqa - j0)) for j0 in range(0, gqa, rows_part)]
    mb = -(-rows_part // sh.vl)
    max_bytes = model.num_kv_heads * len(rg) * mb * sh.vl * 4
    if reps > 1 and decode_steps and max_bytes <= min(node.reduce_payload, node.max_payload):
        m.replicas, m.row_groups = reps, rg
        groups = max(model.num_kv_heads * len(rg), (reps - 1) * len(rg))
        extra = {"QG": gqa * sh.db, "AG": gqa * sh.db, "SACC": len(rg) * spad_map(sh, rows_part, 1).beats["sb"]}
        spad = array_spad(sh, keys, array, lambda attn: _tp_spad(sh, rows_part, groups, extra, attn))
        sb = spad.beats["sb"]
        m.qslot = _pad(sh.hq * (sh.db + 1) * sh.vl * 4)
        a("net.qg", reps * m.qslot)
        a("net.max", _pad(max_bytes))
        a("net.mres", _pad(max_bytes))
        a("net.state", len(rg) * sb * sh.vl * 4)
        a("net.sin", (reps - 1) * len(rg) * sb * sh.vl * 4)
    m.regions = a.regions
    m.size = a.top
    topo = Topology(topology, N)
    lw = TPLowered(model=model, shard=shard, node=node, shapes=sh, map=m, spad=spad,
                   bases=list(bases), routes=[], prefill=[], chunk_tokens=tok, decode_steps=decode_steps,
                   consts=dict(consts), topology=topo, attention=attention, attention_reason=reason)
    lw.reductions_open = min(node.reduce_slots, max(1, -(-rows // piece)))
    low = _TPLowerer(lw)
    lw.prefill = low.prefill()
    lw.routes = low.routes.tables
    lw.route_ids_used = low.routes.used
    longest = max(len(p) for p in lw.prefill)
    if decode_steps:
        longest = max(longest, max(len(p) for p in lw.decode_programs(0)))
    if lw.route_ids_used > node.route_entries:
        raise LoweringError(f"the programs use {lw.route_ids_used} route ids; the node's route table has "
                            f"route_entries={node.route_entries}")
    m.regions["program"] = (m.size, longest * isa.INSTR_BYTES)
    m.size = _pad(m.size + longest * isa.INSTR_BYTES, 4096)
    return lw


class _TPLowerer(_Lowerer):
    """The MARS lowerer's EX sequences (norm, Q/K/V + KV writer, attention, GEMMs, LM head) on
    the shard's shapes, with the two all-reduces per layer."""

    def __init__(self, lw: TPLowered):
        self.lw, self.sh, self.map, self.sp = lw, lw.shapes, lw.map, lw.spad.beats
        self.plan, self.consts, self.rgroups = None, lw.consts, []
        self.N = lw.nodes
        from .builder import Builder
        self.b = Builder(self.N, lw.node.num_sems)
        self.routes = RouteTables(lw.topology, max(lw.node.route_entries, 2))
        self.bufs = {}
        self.gain_in = {}               # node -> the gains SPAD GAIN holds (EX runs in order)
        tok = lw.chunk_tokens
        self.starts = np.concatenate([[0], np.cumsum(tok)]).astype(np.int64)
        for r in range(self.N if self.N > 1 else 0):     # every node sums pieces of the all-reduces
            self.routes.broadcast(r)
            self.routes.reduce(r)

    # --- the all-reduce ------------------------------------------------------------------------
    def projection(self, n: int, name: str, T: int, src: int, src_stride: int, tile0: int = 0,
                   tiles: int | None = None) -> None:
        """The partial GEMM of o_proj / down_proj (its tiles [tile0, tile0 + tiles)) into SPAD O."""
        sh = self.sh
        self.gemm(n, name, name, T, src, src_stride, self.sp["O"] + tile0 * sh.P // sh.vl, sh.hb, bias=False,
                  tile0=tile0, tiles=tiles)

    def piece_tiles(self) -> int:
        """The fewest tiles an all-reduce piece may hold: its GEMM starts on a 64-byte boundary of
        the o_proj and down_proj blobs' weights and scales, its SPAD rows on a beat and its DDR
        bytes on a 64-byte boundary."""
        sh, u = self.sh, 1
        for name in ("o_proj", "down_proj"):
            lay = sh.blob(*sh.out_dims()[name])
            for per in (lay.w_tile, lay.s_tile):
                u = math.lcm(u, isa.DDR_ALIGN // math.gcd(per, isa.DDR_ALIGN))
        u = math.lcm(u, isa.DDR_ALIGN // math.gcd(4 * sh.P, isa.DDR_ALIGN))
        return math.lcm(u, sh.vl // math.gcd(sh.P, sh.vl))

    def norm(self, n, gain_name, g_exp_key, rows, a):
        """RMSNorm; its gains' LOAD only when SPAD GAIN does not hold them already (the
        all-reduces load the next norm's gains while their sums are on the way)."""
        if self.gain_in.get(n) != gain_name:
            self.load_gain(n, gain_name)
        self.vec(n, VecOp.RMSNORM, self.sh.h, rows, a, self.sh.hb, self.sp["H"], self.sh.hb, b=self.sp["GAIN"],
                 imm0=self.k("eps_n"), imm1=self.k(g_exp_key))

    def load_gain(self, n: int, gain_name: str) -> None:
        self.b.ex(n, isa.Load, ddr=self.base(n) + self.map.gains[gain_name], spad=self.sp["GAIN"], beats=self.sh.hb,
                  row_beats=0)
        self.gain_in[n] = gain_name

    def all_reduce(self, T: int, stage: Stage, seq: int, gemm, gain: str | None = None) -> None:
        """``gemm(n, tile0, tiles)`` emits node n's partial GEMM into SPAD O (T X32 rows of the
        hidden size); then every node's O <- the sum over the nodes.  A reduce-scatter and an
        all-gather: piece k is summed at node k mod N (ReduceOp.SUM towards it), which multicasts
        the sum to the others, so the pieces' traffic spreads over every node's links.  With one
        token the pieces are whole tiles, about 1/N of the row each, and the GEMM goes piece by
        piece: piece k's reduction overlaps the next pieces' GEMMs, and only the last piece's
        network time is exposed."""
        b, sh, sp, N = self.b, self.sh, self.sp, self.N
        total, piece, W = T * sh.h * 4, self.map.piece, self.lw.node.reduce_slots
        unit = self.piece_tiles() * sh.P * 4
        split = N > 1 and T == 1 and total > unit
        if split:
            # pieces shrinking towards the end (..., 5, 3, 2, 1 units; at most the NIC's payload):
            # a piece's round trip overlaps the GEMMs of the pieces after it, and the exposed
            # network time after the last GEMM is one short round trip
            units, cap = total // unit, max(1, piece // unit)
            sizes, size = [], 1
            while sum(sizes) < units:
                sizes.insert(0, min(size, units - sum(sizes)))
                size = min(cap, max(size + 1, -(-size * 3 // 2)))
            offs = [int(x) * unit for x in np.cumsum([0] + sizes[:-1])]
            ends = offs[1:] + [total]
        else:
            offs = list(range(0, total, piece)) if N > 1 else [0]
            ends = [min(o + piece, total) for o in offs]
        split = split and len(offs) > 1
        if not split and T == 1 and N > 1:
            offs = list(range(0, total, piece))
            ends = [min(o + piece, total) for o in offs]
        if not split:
            for n in range(N):
                gemm(n, 0, None)
        if N == 1:
            return
        owner = [k % N for k in range(len(offs))]              # where piece k is summed
        got = {n: [None] * len(offs) for n in range(N)}     # per node: the arrival of each piece's sum
        first = set()                                       # nodes whose sum buffer took a piece already
        st = {}
        pending = []                                        # (piece, arrival at its owner): not multicast yet

        def sum_deps(n):
            if n in first:
                return ()
            first.add(n)
            return self.buf("sum", n).write_deps()

        def multicast(k, arr):
            r, off, ln = owner[k], offs[k], ends[k] - offs[k]
            others = [n for n in range(N) if n != r]
            tagb = b.new_tag()
            for n in others:
                got[n][k] = b.recv(n, r, tagb, self.region(n, "net.sum") + off, ln, sum_deps(n),
                                   credit_route=self.routes.unicast(r))
            self.buf("sum", r).read(b.send(r, others, [arr], ddr=self.region(r, "net.sum") + off, length=ln,
                                           stage=stage, mop=Op.TENSOR, collective=Collective.MULTICAST,
                                           reduce_op=ReduceOp.NONE, dst=r, route_id=self.routes.broadcast(r),
                                           tag=tagb, seq=seq & 0xFFFF))

        for k, off in enumerate(offs):
            ln, r = ends[k] - off, owner[k]
            for n in range(N):
                if split:
                    t0 = off // 4 // sh.P
                    gemm(n, t0, -(-ln // 4 // sh.P))
                pb = self.buf("part", n, k)
                if split or k == 0:
                    st[n] = b.ex(n, isa.Store, pb.write_deps(), ddr=self.region(n, "net.part") + (off if split else 0),
                                 spad=sp["O"] + (off // 4 // sh.vl if split else 0),
                                 beats=-(-ln // 4 // sh.vl) if split else T * sh.hb, row_beats=0)
                pb.wrote(st[n])
            # the sums of a round of N pieces ago go out first (a NIC holds at most W reductions open)
            while pending and pending[0][0] <= k - N:
                multicast(*pending.pop(0))
            prev = k - W * N                                # the W-th earlier piece summed at r
            tag = b.new_tag()
            common = dict(length=ln, stage=stage, mop=Op.TENSOR, collective=Collective.REDUCE,
                          reduce_op=ReduceOp.SUM, dst=r, route_id=self.routes.reduce(r), tag=tag, seq=seq & 0xFFFF)
            for n in range(N):
                if n == r:
                    continue
                deps = [st[n]] + ([got[n][prev]] if prev >= 0 else [])
                self.buf("part", n, k).read(b.send(n, [r], deps, credits=False,
                                                ddr=self.region(n, "net.part") + off, **common))
            # the sum's arrival counts on a semaphore the owner's TX waits on (forward=True): its
            # multicast waits in TX while the execute unit goes on with the next pieces' GEMMs
            arr = b.recv(r, r, tag, self.region(r, "net.sum") + off, ln, sum_deps(r), credit_route=None,
                         forward=True)
            deps = [st[r], b.posted(arr)] + ([got[r][prev]] if prev >= 0 else [])
            self.buf("part", r, k).read(b.send(r, [r], deps, credits=False,
                                            ddr=self.region(r, "net.part") + off, **common))
            got[r][k] = arr
            pending.append((k, arr))
        for k, arr in pending:
            multicast(k, arr)
        for n in range(N):
            if gain is not None:           # the next RMSNorm's gains, while the sum is on the way
                self.load_gain(n, gain)
            nb = self.buf("sum", n)
            nb.wrote(got[n][-1])
            nb.read(b.ex(n, isa.Load, got[n], ddr=self.region(n, "net.sum"), spad=sp["O"], beats=T * sh.hb,
                         row_beats=0))

    # --- one step: T tokens on every node ------------------------------------------------------
    def step(self, T: int, pos0: int, ids_slot: int | None, seg_of, runs_of, stage: Stage, seq: int,
             head_row: int | None) -> None:
        sh, sp, N = self.sh, self.sp, self.N
        for n in range(N):
            self.embed(n, self.lw.ids_addr(n, ids_slot), T, pos0)
        split = T == 1 and self.map.replicas > 1 and stage == Stage.DECODE
        for li in range(sh.L):
            p = f"layers.{li}"
            got_q = {}
            for n in range(N):
                seg = seg_of(n, li)
                seg, dec = seg if isinstance(seg, tuple) else (seg, None)      # a decode token: decode_write
                if split:
                    # the query first, its rows to the KV group's other nodes while K/V go on
                    self.front(n, li, 1, seg, after_q=lambda n=n: self.send_query(n, seq, got_q), dec=dec)
                    continue
                self.front(n, li, T, seg, dec=dec)
                self.attention(n, T, pos0, runs_of(n, li))
                self.vec(n, VecOp.TO_BFP, sh.hq * sh.d, T, sp["A"], sh.qb, sp["A"], sh.qb)
            if split:
                self.split_attention(pos0, runs_of, li, seq, got_q)
            self.all_reduce(T, stage, seq, lambda n, t0, tiles: self.projection(n, f"{p}.o_proj", T, sp["A"], sh.qb,
                                                                                t0, tiles), f"{p}.ln2")
            for n in range(N):
                self.vec(n, VecOp.RESIDUAL, sh.h, T, sp["X"], sh.hb, sp["X"], sh.hb, b=sp["O"], b_stride=sh.hb)
                self.mlp_in(n, li, T)
            self.all_reduce(T, stage, seq, lambda n, t0, tiles: self.projection(n, f"{p}.down_proj", T, sp["G"],
                                                                                sh.ib, t0, tiles),
                            f"layers.{li + 1}.ln1" if li + 1 < sh.L else "norm")
            for n in range(N):
                self.vec(n, VecOp.RESIDUAL, sh.h, T, sp["X"], sh.hb, sp["X"], sh.hb, b=sp["O"], b_stride=sh.hb)
        if head_row is not None:
            self.head_gather(head_row, stage, seq)

    def head_gather(self, row: int, stage: Stage, seq: int) -> None:
        """Every node's LM head rows of X row ``row``; the logits gathered at node 0."""
        b, N, root = self.b, self.N, DECODE_ROOT
        last = {n: self.head(n, row) for n in range(N)}
        for n in range(N):
            if n == root:
                continue
            lo, hi = self.map.head_rows[n]
            tag = b.new_tag()
            b.recv(root, n, tag, self.region(root, "logits") + 4 * lo, 4 * (hi - lo), credit_route=self.routes.unicast(n))
            b.send(n, [root], [last[n]], ddr=self.region(n, "logits"), length=4 * (hi - lo), stage=stage,
                   mop=Op.TENSOR, collective=Collective.UNICAST, reduce_op=ReduceOp.NONE, dst=root,
                   route_id=self.routes.unicast(root), tag=tag, seq=seq & 0xFFFF)

    def array_after(self) -> int:
        """A key position after every query (``_Lowerer.array_apply``'s w = 0 keys)."""
        return int(self.starts[-1]) + max(1, self.lw.decode_steps)

    def _pool_runs(self, n: int, li: int, upto: int) -> list:
        tok = self.lw.chunk_tokens
        return self.runs_for([(c, c) for c in range(upto)], lambda s: self.lw.kv_addr(n, s, li), False,
                             lambda c: tok[c])

    def prefill(self) -> list:
        tok, C = self.lw.chunk_tokens, self.lw.num_chunks
        for c in range(C):
            self.step(tok[c], int(self.starts[c]), c, lambda n, li, c=c: self.lw.kv_addr(n, c, li),
                      lambda n, li, c=c: self._pool_runs(n, li, c + 1), Stage.PREFILL, c,
                      tok[c] - 1 if c == C - 1 else None)
        return self.b.programs()

    def key_split(self, step: int) -> list:
        """Context split: the prompt chunks [lo, hi) each of the R nodes sharing a KV head attends
        to (contiguous, about 1/R of the S + step + 1 keys each); the last one also attends to the
        decode tokens."""
        R, tok = self.map.replicas, self.lw.chunk_tokens
        K = int(self.starts[-1]) + step + 1
        cuts = [0]
        for r in range(1, R):
            target = r * K / R
            c = int(np.searchsorted(self.starts[:-1], target, side="left"))
            cuts.append(max(cuts[-1], min(c, len(tok))))
        cuts.append(len(tok))
        return [(cuts[r], cuts[r + 1]) for r in range(R)]

    def send_query(self, n: int, seq: int, got_q: dict) -> None:
        """Node n's query rows (SPAD Q) into slot n mod R of its own and its KV group's other
        nodes' net.qg; ``got_q[(node, slot)]`` the store or arrival there."""
        sh, sp, b, m = self.sh, self.sp, self.b, self.map
        R, db = m.replicas, sh.db
        me = n % R
        mates = [n // R * R + r for r in range(R) if r != me]
        # the query rows: node n's heads go to slot me of every mate's net.qg
        qb_ = self.buf("qg", n, me)
        st = b.ex(n, isa.Store, qb_.write_deps(), ddr=self.region(n, "net.qg") + me * m.qslot, spad=sp["Q"],
                  beats=sh.hq * db, row_beats=db)
        qb_.wrote(st)
        got_q[(n, me)] = st
        for x in mates:
            tag = b.new_tag()
            xb = self.buf("qg", x, me)
            got_q[(x, me)] = a = b.recv(x, n, tag, self.region(x, "net.qg") + me * m.qslot,
                                        sh.hq * (db + 1) * sh.vl * 4, xb.write_deps(),
                                        credit_route=self.routes.unicast(n))
            xb.wrote(a)
            qb_.read(b.send(n, [x], [st], ddr=self.region(n, "net.qg") + me * m.qslot,
                            length=sh.hq * (db + 1) * sh.vl * 4, stage=Stage.DECODE, mop=Op.QUERY,
                            collective=Collective.UNICAST, reduce_op=ReduceOp.NONE, dst=x,
                            route_id=self.routes.unicast(x), tag=tag, seq=seq & 0xFFFF))

    def split_attention(self, pos: int, runs_of, li: int, seq: int, got_q: dict) -> None:
        """Decode attention with the keys of each KV head split over the R nodes that hold it
        (docs/fixed-point.md 7.4, bit-exact with the single-node attention): the R nodes gather
        their KV head's query rows (unicasts, ``send_query`` from ``front``); each takes the
        maximum over its keys for all of them, the NICs reduce the maxima of every KV group at once
        and at every node (ReduceOp.MAX towards each node; the other groups' rows EMPTY = INT32_MIN
        from a unit with no keys), which gives every node M;
        each node computes its (M, l, o) state over its keys and sends it to the other R - 1 nodes;
        every node adds the R states in node order (VEC RESIDUAL: with equal m, SOFTMAX_MERGE is
        the saturating addition of l and o; FINAL reads only l and o) and finalizes its own heads
        into A (BFP16, as the unsplit path leaves it)."""
        b, sh, sp, N, m = self.b, self.sh, self.sp, self.N, self.map
        R, rg, db, d = m.replicas, m.row_groups, sh.db, sh.d
        hkv = self.lw.model.num_kv_heads
        mb, sbk = sp["mb"], sp["sb"]
        nrg = len(rg)
        group, me = (lambda n: n // R), (lambda n: n % R)
        mates = lambda n: [group(n) * R + r for r in range(R) if r != me(n)]          # noqa: E731
        sidx = lambda n, x: me(x) - (me(x) > me(n))                                   # noqa: E731
        seq &= 0xFFFF
        sbytes = nrg * sbk * sh.vl * 4
        array = self.lw.attention == "array"
        # 2. maxima of every KV group's rows (this node's group over its keys, the others EMPTY),
        # reduced at every node at once (each sends its maxima on the REDUCE route towards each
        # node): one trip, no multicast of the result
        maxlen = hkv * nrg * mb * sh.vl * 4
        st_max = {}
        for n in range(N):
            for r in range(R):
                self.buf("qg", n, r).read(b.ex(n, isa.Load, [got_q[(n, r)]], ddr=self.region(n, "net.qg") + r * m.qslot,
                                               spad=sp["QG"] + r * sh.hq * db, beats=sh.hq * db, row_beats=db))
            rn = runs_of(n, li)
            for k in range(hkv):
                for i, (j0, rows) in enumerate(rg):
                    rr = dict(tokens=1, heads=rows, tok_stride=rows * db, head_stride=db)
                    what = self.query_load(rn if k == group(n) else [], 0, pos)
                    b.ex(n, isa.AttnQ, what=what, spad=sp["QG"] + j0 * db, qpos0=pos, **rr)
                    if k == group(n) and array:
                        self.array_max(n, rn, 0, sp["QG"] + j0 * db, rr, pos)
                    elif k == group(n):
                        for j, r in enumerate(rn):
                            self.attn_kv(n, r, 0, AttnPass.MAX, j == 0)
                    b.ex(n, isa.AttnEmit, mode=isa.EmitMode.MAX, spad=sp["MLOC"] + (k * nrg + i) * mb, **rr)
            mbuf = self.buf("max", n)
            st_max[n] = b.ex(n, isa.Store, mbuf.write_deps(), ddr=self.region(n, "net.max"), spad=sp["MLOC"],
                             beats=hkv * nrg * mb, row_beats=0)
            mbuf.wrote(st_max[n])
        arr_b = {}
        for r in range(N):
            tag_m = b.new_tag()
            rb = self.buf("mres", r)
            arr_b[r] = b.recv(r, r, tag_m, self.region(r, "net.mres"), maxlen, rb.write_deps(), credit_route=None,
                              result_of_reduce=True)
            rb.wrote(arr_b[r])
            for n in [x for x in range(N) if x != r] + [r]:
                deps = [st_max[n]] + ([b.posted(arr_b[r])] if n == r else [])
                self.buf("max", n).read(b.send(n, [r], deps, credits=False, ddr=self.region(n, "net.max"),
                                               length=maxlen, stage=Stage.DECODE, mop=Op.PARTIAL_STATE,
                                               collective=Collective.REDUCE, reduce_op=ReduceOp.MAX, dst=r,
                                               route_id=self.routes.reduce(r), tag=tag_m, seq=seq))
        # 3. each node's state over its keys with m = M, sent to its mates
        got_s = {}
        for n in range(N):
            self.buf("mres", n).read(b.ex(n, isa.Load, [arr_b[n]], ddr=self.region(n, "net.mres"),
                                          spad=sp["MGLOB"], beats=hkv * nrg * mb, row_beats=0))
            rn = runs_of(n, li)
            for i, (j0, rows) in enumerate(rg):
                rr = dict(tokens=1, heads=rows, tok_stride=rows * db, head_stride=db)
                b.ex(n, isa.AttnQ, what=self.query_load(rn, 0, pos), spad=sp["QG"] + j0 * db, qpos0=pos, **rr)
                mref = sp["MGLOB"] + (group(n) * nrg + i) * mb
                if array:
                    # with more than one row group the later groups' MAX passes used the score
                    # rows since: GEMM_QK again
                    self.array_apply(n, rn, 0, sp["QG"] + j0 * db, rr, pos, mref=mref, rescore=nrg > 1)
                else:
                    b.ex(n, isa.AttnQ, what=AttnLoad.MREF, spad=mref, qpos0=0, **rr)
                    for j, r in enumerate(rn):
                        self.attn_kv(n, r, 0, AttnPass.APPLY, j == 0)
                b.ex(n, isa.AttnEmit, mode=isa.EmitMode.STATE, spad=sp["SLOC"] + i * sbk, **rr)
            sbuf = self.buf("state", n)
            st = b.ex(n, isa.Store, sbuf.write_deps(), ddr=self.region(n, "net.state"), spad=sp["SLOC"],
                      beats=nrg * sbk, row_beats=0)
            sbuf.wrote(st)
            for x in mates(n):
                tag = b.new_tag()
                xb = self.buf("sin", x, sidx(x, n))
                got_s[(x, n)] = a = b.recv(x, n, tag, self.region(x, "net.sin") + sidx(x, n) * sbytes, sbytes,
                                          xb.write_deps(), credit_route=self.routes.unicast(n))
                xb.wrote(a)
                sbuf.read(b.send(n, [x], [st], ddr=self.region(n, "net.state"), length=sbytes, stage=Stage.DECODE,
                                 mop=Op.PARTIAL_STATE, collective=Collective.UNICAST, reduce_op=ReduceOp.NONE,
                                 dst=x, route_id=self.routes.unicast(x), tag=tag, seq=seq))
        # 4. the R states added in node order, this node's heads finalized into A
        for n in range(N):
            for x in mates(n):
                self.buf("sin", n, sidx(n, x)).read(
                    b.ex(n, isa.Load, [got_s[(n, x)]], ddr=self.region(n, "net.sin") + sidx(n, x) * sbytes,
                         spad=sp["SGLOB"] + sidx(n, x) * nrg * sbk, beats=nrg * sbk, row_beats=0))
            src = {x: (sp["SLOC"] if x == n else sp["SGLOB"] + sidx(n, x) * nrg * sbk)
                   for x in range(group(n) * R, (group(n) + 1) * R)}
            order = sorted(src)
            for i, (j0, rows) in enumerate(rg):
                acc = sp["SACC"] + i * sbk
                for k, x in enumerate(order[1:]):
                    a0 = src[order[0]] + i * sbk if k == 0 else acc
                    self.vec(n, VecOp.RESIDUAL, sbk * sh.vl, 1, a0, sbk, acc, sbk, b=src[x] + i * sbk, b_stride=sbk)
                rr = dict(tokens=1, heads=rows, tok_stride=rows * db, head_stride=db)
                b.ex(n, isa.AttnQ, what=AttnLoad.ROWS, spad=0, qpos0=pos, **rr)
                b.ex(n, isa.AttnQ, what=AttnLoad.STATE, spad=acc, qpos0=0, **rr)
                b.ex(n, isa.AttnEmit, mode=isa.EmitMode.FINAL, spad=sp["AG"] + j0 * db, **rr)
            self.vec(n, VecOp.TO_BFP, sh.hq * d, 1, sp["AG"] + me(n) * sh.hq * db, sh.qb, sp["A"], sh.qb)

    def decode(self, step: int) -> list:
        S = int(self.starts[-1])
        m = self.map
        split = self.key_split(step) if m.replicas > 1 else None

        def runs(n, li):
            if split is None:
                lo, hi, last = 0, self.lw.num_chunks, True
            else:
                (lo, hi), last = split[n % m.replicas], n % m.replicas == m.replicas - 1
            tok = self.lw.chunk_tokens
            out = self.runs_for([(c, c) for c in range(lo, hi)], lambda s: self.lw.kv_addr(n, s, li), False,
                                lambda c: tok[c])
            if last:
                out.append(self.decode_run(n, li, step, S))
            return out

        self.step(1, S + step, None, lambda n, li: self.decode_write(n, li, step), runs, Stage.DECODE, step, 0)
        return self.b.programs()
