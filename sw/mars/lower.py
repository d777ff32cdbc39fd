"""Lowering: a MARS plan becomes one program per node in the node's instruction set
(``mcf.spec.isa``), plus the node's DDR map and route table: what the nodes execute
(docs/node.md).

* **Prefill** (chunk-owner model): chunk c is computed by ``plan.compute_node(c)`` through every
  layer: EMBED, then per layer RMSNORM, the Q/K/V GEMMs, RoPE, the query prescale, the KV
  writer into the node's KV pool (the owner copy), a multicast of the block layer to its replica
  holders, two-pass attention over every block it holds (``ATTN_KV`` over runs of pool slots,
  gated by the replica directory) and every block it lacks (``plan.owner_fetches``: received into
  staging; on ring schemes forwarded node by node), the o-projection, residual and MLP; the node
  of the last chunk then runs the final norm and the LM head of the last token and stores the
  logits.  Every node's directory follows the plan's events with DIR instructions (owner copies
  VALID when written, replicas VALID after their step, DRAINING and INVALID as the plan drains
  them, after the node's last send of them), so at the end it holds exactly its owned blocks.
* **Decode** (``decode_programs``, KV-stationary, one program per node per token): the root
  (node 0) runs the dense layers and writes the new token's KV into its decode region
  (blocks of ``NodeConfig.decode_block_keys`` tokens, ``spec.kv``'s decode layout); per layer it
  multicasts the query rows, every node computes the maxima of its keys (``ATTN_EMIT`` MAX), the
  NICs reduce them (ReduceOp.MAX) towards the root, which
  multicasts the result M; every node computes its (m, l, o) state with m = M and the NICs merge
  the states (SOFTMAX_MERGE, folded in node order) towards the root, which finalizes them.  With
  one node all of this is the local two-pass attention.

The semaphores, waits, signals and RECV credits come from ``mcf.sw.mars.builder`` (the programs
run in any timing and never deadlock: see there).  Values that come from the quantized
checkpoint (matrix and gain exponents, the RMSNorm epsilon constant, the score constant) are
given as ``consts`` (``const_keys`` lists them), so this module never touches weights.

Route ids are global (``mcf.spec.routes.RouteIds``): the same id names the same logical route on
every NIC; ``RouteTables`` fills each node's table from the topology.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mcf.spec import isa, kv
from mcf.spec.bits import SpecError
from mcf.spec.isa import AttnLoad, AttnPass, Queue, VecOp
from mcf.spec.node import NodeConfig
from mcf.spec.packet import ROUTE_TABLE_ENTRIES, Collective, Op, ReduceOp, Stage
from mcf.spec.plan import EventKind, EventPhase, ReplicaState, Scheme
from mcf.spec.routes import ROUTE_LOCAL, RouteIds
from mcf.spec.topology import Topology
from mcf.sw.errors import UserError
from mcf.sw.models.config import ModelConfig
from .builder import Arrival, Builder, Local
from .planner import Plan

DECODE_ROOT = 0
#: Schemes the node programs implement (pass-Q decode has no lowering).
LOWERED_SCHEMES = (Scheme.MARS, Scheme.RING, Scheme.ZIGZAG, Scheme.FULL, Scheme.PD)
#: Where attention runs: "unit" = ATTN_KV passes on the attention unit; "array" = scores by GEMM_QK
#: on the MAC array, softmax by ATTN_SM, PV by GEMM_PV (docs/attention-array.md step 4).
ATTENTION_PATHS = ("unit", "array")
#: What ``attention`` of ``lower`` / ``Session`` / ``mcf run --attention`` takes: a path, or "auto" (the
#: default): "array" where ``ARRAY_COVERS`` holds for the node and the program (the KR260 node, whose
#: attention unit is folded narrow for the keys ATTN_KV still takes), "unit" otherwise (the tiny node
#: builds no GEMM_PV) -- ``choose_attention`` says which and why, in one line.
ATTENTION_CHOICES = ("auto",) + ATTENTION_PATHS
MATRICES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoweringError(UserError):
    """A plan, model or node configuration the node programs cannot express (one line)."""


class RouteTables:
    """Every node's route table for the route ids of ``mcf.spec.routes.RouteIds``, filled from
    the topology (``mcf.spec.topology``): local delivery, unicast to every node, and, when
    first asked for, broadcasts, reduction trees, the all-reduce and multicast groups."""

    def __init__(self, topology: Topology, entries: int = ROUTE_TABLE_ENTRIES):
        self.topo = topology
        N = topology.n
        self.ids = RouteIds(N, entries)
        self.tables: list[dict[int, dict]] = [dict() for _ in range(N)]
        for x in range(N):
            self.tables[x][ROUTE_LOCAL] = _entry(0, True)
        for d in range(N):
            rid = self.ids.unicast(d)
            for x in range(N):
                self.tables[x][rid] = _entry(0, True) if x == d else _entry(1 << topology.next_hop(x, d)[0], False)

    def unicast(self, d: int) -> int:
        return self.ids.unicast(d)

    def broadcast(self, src: int) -> int:
        rid = self.ids.broadcast(src)
        if rid not in self.tables[src]:
            self._fill(rid, src, [n for n in range(self.topo.n) if n != src])
        return rid

    def reduce(self, root: int) -> int:
        """The reduction tree towards ``root``: each node's parent is its next hop."""
        rid = self.ids.reduce(root)
        if rid not in self.tables[root]:
            parent, fan_in = self.topo.reduce_tree(root)
            for x in range(self.topo.n):
                mask = 0 if x == root else (
                    1 if self.topo.kind == "switch" else 1 << self.topo.next_hop(x, root)[0])
                self.tables[x][rid] = _entry(mask, x == root, int(fan_in[x]))
        return rid

    def all_reduce(self) -> int:
        """Every node contributes to and receives the result on every port (full mesh only)."""
        if self.topo.kind != "full_mesh":
            raise UserError(f"an all-reduce route needs a full mesh, not a {self.topo.kind}")
        rid = self.ids.all_reduce
        for x in range(self.topo.n):
            self.tables[x][rid] = _entry((1 << (self.topo.n - 1)) - 1, True, self.topo.n)
        return rid

    def multicast(self, src: int, dsts) -> int:
        fresh = len(self.ids.groups)
        try:
            rid = self.ids.multicast(src, dsts)
        except SpecError as exc:
            raise UserError(str(exc)) from None
        if len(self.ids.groups) > fresh:
            self._fill(rid, src, dsts)
        return rid

    def _fill(self, rid, src, dsts):
        masks = self.topo.multicast_masks(src, dsts)
        for x in range(self.topo.n):
            if x in masks:
                self.tables[x][rid] = _entry(masks[x][0], masks[x][1])

    @property
    def used(self) -> int:
        """Route table entries the cluster needs (the highest id + 1)."""
        return max(max(t) for t in self.tables) + 1


def _entry(port_mask: int, local: bool, fan_in: int = 0) -> dict:
    return {"port_mask": port_mask, "local": int(local), "fan_in": fan_in, "valid": 1}


# --------------------------------------------------------------------------------------------
# What the node can run
# --------------------------------------------------------------------------------------------
def const_keys(model: ModelConfig) -> list[str]:
    """The checkpoint-derived scalars the programs need (``consts`` of ``lower``)."""
    keys = ["embed.w_exp", "head.w_exp", "norm.g_exp", "eps_n", "score.cm", "score.ce"]
    for li in range(model.num_layers):
        keys += [f"layers.{li}.{m}.w_exp" for m in MATRICES]
        keys += [f"layers.{li}.ln1.g_exp", f"layers.{li}.ln2.g_exp"]
    return keys


SUPPORTED = ("head_dim = the node's head_dim and a multiple of 16 and of 2 x vec_lanes (ROPE lanes, "
             "64-byte RoPE rows); the INT4 group size G a power of two, a multiple of mac_lanes, dividing "
             "hidden_size, num_heads x head_dim and intermediate_size; hidden_size, num_heads x head_dim, "
             "num_kv_heads x head_dim and intermediate_size multiples of mac_rows and vec_lanes (whole "
             "tiles and beats); the GQA group (num_heads / num_kv_heads) at most att_rows on the attention unit's path "
             "(the array's: ARRAY_COVERS); vocab_size < 2^20; "
             "chunk <= max_tokens; prompt + decode tokens <= max_context; a chunk's activations within "
             "spad_beats")


def check_model(model: ModelConfig, node: NodeConfig, group: int) -> None:
    """Refuse (``LoweringError``, one line naming the rule) a model the node cannot run."""
    h, d, hq, hkv, inter = (model.hidden_size, model.head_dim, model.num_heads, model.num_kv_heads,
                            model.intermediate_size)
    vl, P, K = node.vec_lanes, node.mac_rows, node.mac_lanes
    name = f"model {model.name}"
    if d != node.head_dim:
        raise LoweringError(f"{name}: head_dim={d}, the node's attention unit is built for {node.head_dim}")
    if d % 16 or d % (2 * vl):
        raise LoweringError(f"{name}: head_dim={d} must be a multiple of 16 and of 2 x vec_lanes={2 * vl}")
    if group < 1 or group & (group - 1) or group % K or group > node.max_group:
        raise LoweringError(f"{name}: group size {group} must be a power of two, a multiple of "
                            f"mac_lanes={K} and at most max_group={node.max_group}")
    for what, n in (("hidden_size", h), ("num_heads x head_dim", hq * d), ("intermediate_size", inter)):
        if n % group:
            raise LoweringError(f"{name}: group size {group} does not divide {what}={n}")
    for what, n in (("hidden_size", h), ("num_heads x head_dim", hq * d),
                    ("num_kv_heads x head_dim", hkv * d), ("intermediate_size", inter)):
        if n % P or n % vl:
            raise LoweringError(f"{name}: {what}={n} must be a multiple of mac_rows={P} and vec_lanes={vl}")
        if n >= 1 << 16:
            raise LoweringError(f"{name}: {what}={n} does not fit the instructions' 16-bit widths")
    if model.vocab_size >= 1 << 20:
        raise LoweringError(f"{name}: vocab_size={model.vocab_size} does not fit EMBED's 20-bit vocab")


ARRAY_COVERS = ("attention = array covers: head_dim <= max_group (GEMM_QK built) and GEMM_PV built "
                "(mac_rows, mac_lanes >= vec_lanes, mac_rows | head_dim | mac_rows x mac_lanes); the GQA group at "
                "most min(sm_rows, max_tokens) rows; a chunk within GEMM_PV's keys; chunks of any size (a run of "
                "KV blocks is one GEMM_QK / GEMM_PV; the decode tokens' keys are a run of decode blocks, spec.kv; a "
                "short block read as vec_lanes-rounded keys, the keys past it invisible); a block of fewer than a "
                "multiple of vec_lanes keys that later queries of several positions see (and decode blocks of one "
                "key, on a node whose decode_block_keys is 1) through ATTN_KV when a job's rows are at most att_rows")


#: The array path's score rows hold every key of an attention when that takes at most 1 / this
#: of the SPAD; else as many keys as that share holds (and the APPLY pass runs GEMM_QK again).
SCORE_SPAD_SHARE = 4


def array_key_unit(sh: "Shapes") -> int:
    """The array path's granule of keys: GEMM_QK's tiles of P keys, GEMM_PV's key beats of K,
    ATTN_SM's beats of VL.  A run of KV blocks is computed in whole granules (the keys past its
    last one are read from the KV pool's next blocks and are invisible or weighted 0)."""
    return math.lcm(sh.P, sh.K, sh.vl)


def array_rows(sh: "Shapes") -> int:
    """Query rows of one array attention: the attention unit's state rows (``NodeConfig.sm_rows``:
    ATTN_Q QUERY / O, ATTN_SM, ATTN_EMIT) and GEMM_QK's / GEMM_PV's tokens x heads (<= max tokens).
    A job is array_rows // GQA group tokens (2 on the KR260 node at Qwen2.5-1.5B: K and V stream
    once per 2 tokens)."""
    return min(sh.node.sm_rows, sh.node.max_tokens)


def array_pv_keys(sh: "Shapes") -> int:
    """GEMM_PV's most keys in one instruction (2 keys / K beats of the activation buffer, max_n
    words), in whole ``array_key_unit`` granules."""
    node = sh.node
    max_n = max(node.hidden_size, node.intermediate_size, node.num_heads * sh.d)
    u = array_key_unit(sh)
    return min(max_n // 2, (1 << 16) - 1) // u * u


def array_pool_extra(sh: "Shapes") -> int:
    """Blocks past the last of a run that the array path reads (its last granule's keys): the KV
    pool and the staging region are allocated that many slots longer."""
    return -(-(array_key_unit(sh) - 1) // sh.chunk)


def check_array_attention(sh: "Shapes", chunks: list) -> None:
    """Refuse (``LoweringError``, one line naming the limit) what attention = "array" cannot run
    (``ARRAY_COVERS``)."""
    node, d, u = sh.node, sh.d, array_key_unit(sh)
    if d > node.max_group:
        raise LoweringError(f"attention=array: head_dim {d} exceeds max_group={node.max_group} (the node builds "
                            f"no GEMM_QK)")
    if not isa.gemm_pv_built(sh.P, sh.K, sh.vl, d):
        raise LoweringError(f"attention=array: a {sh.P} x {sh.K} array with vec_lanes={sh.vl} and head_dim {d} "
                            f"builds no GEMM_PV (rows, lanes >= vec_lanes, rows | head_dim | rows x lanes)")
    if sh.gqa > array_rows(sh):
        raise LoweringError(f"attention=array: GQA group {sh.gqa} exceeds min(sm_rows, max_tokens)="
                            f"{array_rows(sh)} rows")
    if -(-max(chunks) // u) * u > array_pv_keys(sh):
        raise LoweringError(f"attention=array: a chunk of {max(chunks)} keys exceeds GEMM_PV's keys limit "
                            f"({array_pv_keys(sh)})")


def choose_attention(attention: str, sh: "Shapes", chunks: list) -> tuple[str, str]:
    """``attention`` (``ATTENTION_CHOICES``) -> (the path, a one-line reason).  "array" asked for
    and not covered: ``LoweringError`` (``check_array_attention``); "auto": the array where it is
    covered, else the unit, with what the array path lacks."""
    if attention not in ATTENTION_CHOICES:
        raise LoweringError(f"attention={attention!r}: one of {', '.join(ATTENTION_CHOICES)}")
    if attention != "auto":
        if attention == "array":
            check_array_attention(sh, chunks)
        else:
            check_unit_attention(sh)
        return attention, f"attention={attention} asked for"
    try:
        check_array_attention(sh, chunks)
    except LoweringError as exc:
        check_unit_attention(sh)
        return "unit", f"auto -> unit: {str(exc).removeprefix('attention=array: ')}"
    return "array", ("auto -> array: the node builds GEMM_QK and GEMM_PV and the program's GQA group and "
                     "chunks fit them (ARRAY_COVERS)")


def check_unit_attention(sh: "Shapes") -> None:
    """Refuse what the attention unit's path (ATTN_KV over a job of att_rows // group tokens) cannot
    run: a GQA group of more than att_rows rows (the rows with products).  The array path's rule is
    ``check_array_attention``'s (the group within min(sm_rows, max_tokens))."""
    if sh.gqa > sh.node.att_rows:
        raise LoweringError(f"model {sh.model.name}: GQA group {sh.gqa} exceeds the attention unit's "
                            f"att_rows={sh.node.att_rows}")


# --------------------------------------------------------------------------------------------
# Memories
# --------------------------------------------------------------------------------------------
def _pad(n: int, a: int = isa.DDR_ALIGN) -> int:
    return -(-int(n) // a) * a


class _Alloc:
    def __init__(self, align: int):
        self.top, self.align, self.regions = 0, align, {}

    def __call__(self, name: str, size: int) -> int:
        off = self.top
        self.regions[name] = (off, int(size))
        self.top = _pad(off + max(int(size), 1), self.align)
        return off


@dataclass
class Shapes:
    model: ModelConfig
    node: NodeConfig
    group: int            # INT4 group size G
    chunk: int            # tokens per chunk (B)

    def __post_init__(self):
        m, n = self.model, self.node
        self.h, self.d, self.hq, self.hkv = m.hidden_size, m.head_dim, m.num_heads, m.num_kv_heads
        self.inter, self.vocab, self.L = m.intermediate_size, m.vocab_size, m.num_layers
        self.vl, self.P, self.K = n.vec_lanes, n.mac_rows, n.mac_lanes
        self.gqa = self.hq // self.hkv
        self.hb, self.qb, self.kb = self.h // self.vl, self.hq * self.d // self.vl, self.hkv * self.d // self.vl
        self.ib, self.db = self.inter // self.vl, self.d // self.vl
        self.glog = self.group.bit_length() - 1

    def out_dims(self) -> dict:
        return {"q_proj": (self.hq * self.d, self.h), "k_proj": (self.hkv * self.d, self.h),
                "v_proj": (self.hkv * self.d, self.h), "o_proj": (self.h, self.hq * self.d),
                "gate_proj": (self.inter, self.h), "up_proj": (self.inter, self.h),
                "down_proj": (self.h, self.inter)}

    def blob(self, out: int, n: int) -> isa.BlobLayout:
        return isa.BlobLayout(n=n, tiles=-(-out // self.P), rows=self.P, lanes=self.K, group=self.group)

    def block_bytes(self, tokens: int) -> int:
        return kv.block_layer_bytes(tokens, self.d, self.hkv)

    def seg(self, tokens: int, v: bool, head: int) -> int:
        return kv.segment_offset(tokens, self.d, self.hkv, v, head)


@dataclass
class DdrMap:
    """Byte offsets (from the node's DDR base) of everything a node's programs touch; the same on
    every node of a cluster.  ``regions`` names each (offset, size)."""
    regions: dict = field(default_factory=dict)
    blobs: dict = field(default_factory=dict)        # name -> (offset, BlobLayout)
    gains: dict = field(default_factory=dict)        # name -> offset (int32 words)
    size: int = 0
    slot_bytes: int = 0
    pool_layer: int = 0
    pool_slots: int = 0
    dec_block: int = 0              # bytes of one decode block layer (dec_keys tokens, spec.kv decode layout)
    dec_layer: int = 0
    dec_tokens: int = 0
    dec_keys: int = 1               # NodeConfig.decode_block_keys
    dec_row: int = 0                # bytes of one decode token's K (or V) BFP16 rows in decode_rows
    stage_group: int = 0
    ids_slot: int = 0
    net: dict = field(default_factory=dict)
    head_tiles: int = 0

    def off(self, name: str) -> int:
        return self.regions[name][0]


def place_decode(a: _Alloc, m: DdrMap, sh: Shapes, decode_steps: int, array: bool) -> None:
    """The decode region (``spec.kv``'s decode layout: decode token j is key j mod B of block
    j // B, B = ``NodeConfig.decode_block_keys``; per layer ceil(decode tokens / B) block layers,
    the array path's whole granules past the last layer's) and ``decode_rows``: per layer the
    BFP16 K and V rows (LOAD / STORE BFP rows) of a block's tokens so far, from which each step
    rewrites its block's keys 0 .. j mod B with one KVW (``_Lowerer.front``)."""
    B = sh.node.decode_block_keys
    m.dec_keys = B
    m.dec_block = sh.block_bytes(B)
    m.dec_tokens = max(1, decode_steps)
    m.dec_layer = -(-m.dec_tokens // B) * m.dec_block
    extra = -(-(array_key_unit(sh) - 1) // B) * m.dec_block if array else 0
    a("decode_kv", sh.L * m.dec_layer + extra)
    m.dec_row = sh.hkv * (sh.db + 1) * sh.vl * 4
    a("decode_rows", sh.L * 2 * B * m.dec_row if B > 1 else 0)


def place_model(a: _Alloc, m: DdrMap, sh: Shapes, head_rows: int, positions: int) -> None:
    """The weights and tables every lowering places alike: each layer's GEMM blobs and RMSNorm
    gains, the final norm's gains, the embedding table, the LM head's blob (``head_rows`` output
    rows: the vocabulary, or a node's share of it) and the RoPE table of ``positions`` rows."""
    for li in range(sh.L):
        for name, (out, n) in sh.out_dims().items():
            lay = sh.blob(out, n)
            m.blobs[f"layers.{li}.{name}"] = (a(f"layers.{li}.{name}", lay.total_bytes), lay)
        for g in ("ln1", "ln2"):
            m.gains[f"layers.{li}.{g}"] = a(f"layers.{li}.{g}", 4 * sh.h)
    m.gains["norm"] = a("norm", 4 * sh.h)
    a("embed", sh.vocab * isa.embed_row_bytes(sh.h, sh.group))
    lay = sh.blob(head_rows, sh.h)
    m.blobs["head"] = (a("head", lay.total_bytes), lay)
    a("rope", positions * sh.d * 4)


@dataclass
class SpadMap:
    beats: dict
    total: int
    head_part: int          # LM head tiles per GEMM


def array_spad(sh: Shapes, keys: int, array: bool, make) -> SpadMap:
    """``make(attn)`` (a ``spad_map`` of the program's rows) with the array path's score rows when
    ``array``: they hold every one of the ``keys`` keys of an attention when they fit (their share
    of the SPAD; one GEMM_QK a run of blocks), else as many granules as the share holds (at least a
    chunk's: the APPLY pass computes the scores again)."""
    attn = None
    if array:
        R, u = array_rows(sh), array_key_unit(sh)
        total = -(-keys // u) * u + u
        share = sh.node.spad_beats // SCORE_SPAD_SHARE * sh.vl // R // u * u
        least = -(-sh.chunk // u) * u
        attn = (R, max(min(total, share), least))
        try:
            return make(attn)
        except LoweringError:
            attn = (R, least)
    return make(attn)


def _lm_unit(sh: Shapes) -> int:
    """Smallest tile count whose blob regions, SPAD beats and logits offsets stay aligned."""
    lay = sh.blob(sh.vocab, sh.h)
    u = 1
    for per in (lay.w_tile, lay.s_tile, 4 * sh.P):
        u = math.lcm(u, isa.DDR_ALIGN // math.gcd(per, isa.DDR_ALIGN))
    return math.lcm(u, sh.vl // math.gcd(sh.P, sh.vl))


def spad_map(sh: Shapes, rows_part: int, groups: int, attn: tuple | None = None) -> SpadMap:
    """``attn`` (attention = "array"): (rows, score keys) -- the score rows (SC, ``rows`` x score
    keys words), the w rows (W, as many) and the wide o rows (OW, ``rows`` x 2 head_dim) of
    ``_Lowerer.array_apply``."""
    T, n = sh.chunk, sh.node
    kT = max(T, n.decode_block_keys)       # K / V rows: a decode step's block of keys (``front``)
    b = {}
    top = 0
    mb = -(-rows_part // sh.vl)
    sb = _pad(-(-rows_part * (sh.d + 2) // sh.vl), max(1, isa.DDR_ALIGN // (4 * sh.vl)))
    for name, size in (("X", T * sh.hb), ("H", T * sh.hb), ("O", T * sh.hb), ("Q", T * sh.qb),
                       ("A", T * sh.qb), ("K", kT * sh.kb), ("V", kT * sh.kb), ("G", T * sh.ib),
                       ("U", T * sh.ib), ("GAIN", sh.hb), ("ROPE", T * sh.db),
                       ("MLOC", groups * mb), ("MGLOB", groups * mb), ("SLOC", groups * sb),
                       ("SGLOB", groups * sb)):
        b[name] = top
        top += size
    b["mb"], b["sb"] = mb, sb
    if attn is not None:
        R, sk = attn
        banks = max(n.mac_lanes // n.vec_lanes, 1)     # the SPAD's: rows at bank-aligned beats go wide
        for name, size in (("SC", R * sk // sh.vl), ("W", R * sk // sh.vl), ("OW", R * 2 * sh.d // sh.vl)):
            top = _pad(top, banks)
            b[name] = top
            top += size
        b["sk"] = sk
    unit = _lm_unit(sh)
    total_tiles = -(-sh.vocab // sh.P)
    room = (n.spad_beats - top) * sh.vl // sh.P
    part = min(-(-total_tiles // unit) * unit, room // unit * unit)
    if part < unit:
        need = top + unit * sh.P // sh.vl
        raise LoweringError(f"the node's SPAD ({n.spad_beats} beats of {sh.vl} words) cannot hold a chunk of "
                            f"{T} tokens of model {sh.model.name} (needs {need} beats): use a smaller chunk "
                            f"or a node with more spad_beats")
    b["LOGP"] = top
    return SpadMap(b, top + part * sh.P // sh.vl, part)


# --------------------------------------------------------------------------------------------
# The programs
# --------------------------------------------------------------------------------------------
@dataclass
class Lowered:
    """What the runtime needs: per node its DDR base, the (shared) DDR map, its route table and
    its prefill program; ``decode_programs(k)`` gives decode step k's programs."""
    plan: Plan
    node: NodeConfig
    shapes: Shapes
    map: DdrMap
    spad: SpadMap
    bases: list
    routes: list                        # per node: route id -> RouteEntry fields
    prefill: list                       # per node: [isa.Instr]
    logits_node: int
    owned: list                         # per node after prefill: [(block, slot)]
    decode_steps: int
    consts: dict
    topology: Topology
    rgroups: list = field(default_factory=list)      # decode row groups (kv head, first row, rows)
    route_ids_used: int = 0
    prefix: int = 0                     # chunks loaded before the run (not computed; see ``lower``)
    slots: dict = field(default_factory=dict)        # (node, block) -> pool slot of its copy
    attention: str = "unit"             # ATTENTION_PATHS: ATTN_KV, or GEMM_QK / ATTN_SM / GEMM_PV
    attention_reason: str = ""          # why that path (``choose_attention``)
    _decode_cache: dict = field(default_factory=dict)

    @property
    def nodes(self) -> int:
        return len(self.bases)

    def kv_addr(self, node: int, slot: int, layer: int) -> int:
        return self.bases[node] + self.map.off("pool") + layer * self.map.pool_layer + slot * self.map.slot_bytes

    def decode_programs(self, step: int) -> list:
        if not 0 <= step < self.decode_steps:
            raise LoweringError(f"decode step {step}: the DDR map holds {self.decode_steps} decode tokens")
        if step not in self._decode_cache:
            self._decode_cache = {step: _Lowerer(self).decode(step)}
        return self._decode_cache[step]

    def loaded_kv(self, block: int, value: bytes) -> tuple[int, list]:
        """Where a loaded chunk value (``spec/kv.py``: block layers 0 .. L-1) goes: -> (node,
        [(address, bytes)] per layer): block ``block``'s pool slot on its owner, the address the
        prefill's KV writer would have written it to."""
        if not 0 <= block < self.prefix:
            raise LoweringError(f"block {block} is not in the loaded prefix (chunks 0 .. {self.prefix - 1})")
        o = self.plan.compute_node(block)
        n = self.shapes.block_bytes(int(self.plan.chunk_tokens[block]))
        if len(value) != self.shapes.L * n:
            raise LoweringError(f"chunk value of block {block}: {len(value)} bytes, {self.shapes.L} layers x {n} "
                                f"expected")
        s = self.slots[(o, block)]
        return o, [(self.kv_addr(o, s, li), bytes(value[li * n:(li + 1) * n])) for li in range(self.shapes.L)]

    def ids_addr(self, node: int, chunk: int | None) -> int:
        """Where chunk ``chunk``'s token ids (int32) go; None: the decode token's."""
        slot = self.plan.num_chunks if chunk is None else chunk
        return self.bases[node] + self.map.off("ids") + slot * self.map.ids_slot

    def logits_addr(self, node: int) -> int:
        return self.bases[node] + self.map.off("logits")

    def program_addr(self, node: int) -> int:
        return self.bases[node] + self.map.off("program")


class _Buf:
    """Hazards on one memory region: readers wait for the writer, a writer for the readers."""

    def __init__(self):
        self.w = None
        self.r: list = []

    def write_deps(self) -> list:
        return [self.w] + self.r

    def wrote(self, h) -> None:
        self.w, self.r = h, []

    def read(self, h) -> None:
        self.r.append(h)


def lower(plan: Plan, node: NodeConfig, group: int, consts: dict, bases, decode_steps: int = 0,
          prefix: int = 0, attention: str = "auto") -> Lowered:
    """The programs, DDR map and route tables of ``plan`` on nodes built as ``node``, for a model
    quantized with INT4 group size ``group`` (``consts``: ``const_keys``), each node's DDR at
    ``bases[n]``, with room for ``decode_steps`` decode tokens.

    ``prefix``: chunks 0 .. prefix-1 are loaded before the run (the prefix KV tier): the PS puts
    each one's KV into its owner's pool slot (``Lowered.loaded_kv``) and the programs compute
    nothing for them -- the owner only sets its directory entry VALID, as the prefill would after
    computing it -- and prefill starts at chunk ``prefix``.  Loaded chunks live on their owners
    only, so the plan must create them without replicas (``r_step[1 .. prefix] == 1``, e.g. the
    converged schedule alpha = 0).

    ``attention``: ``ATTENTION_CHOICES`` ("auto": the array where it is covered, else the unit;
    ``choose_attention``; the choice and its reason in ``Lowered.attention``, ``attention_reason``)."""
    model = plan.request.model
    if plan.scheme not in LOWERED_SCHEMES:
        raise LoweringError(f"scheme {plan.scheme}: no node programs (lowered: "
                            f"{', '.join(str(s) for s in LOWERED_SCHEMES)})")
    if len(bases) != plan.nodes:
        raise LoweringError(f"{len(bases)} DDR bases for {plan.nodes} nodes")
    missing = [k for k in const_keys(model) if k not in consts]
    if missing:
        raise LoweringError(f"consts: missing {missing[0]}")
    check_model(model, node, group)
    chunk = int(plan.chunk_tokens.max())
    if chunk > node.max_tokens:
        raise LoweringError(f"chunk of {chunk} tokens: the node computes at most max_tokens="
                            f"{node.max_tokens} tokens at once (use a smaller chunk)")
    if plan.request.seq_len + decode_steps > node.max_context:
        raise LoweringError(f"{plan.request.seq_len} + {decode_steps} tokens exceed the node's "
                            f"max_context={node.max_context}")
    if plan.num_chunks > node.dir_entries:
        raise LoweringError(f"{plan.num_chunks} chunks exceed the directory's {node.dir_entries} entries")
    if not 0 <= int(consts["eps_n"]) < 1 << 32:
        raise LoweringError(f"model {model.name}: the RMSNorm epsilon constant {consts['eps_n']} does not fit 32 bits")
    if isinstance(prefix, bool) or not isinstance(prefix, (int, np.integer)) or not 0 <= prefix < plan.num_chunks:
        raise LoweringError(f"prefix={prefix!r}: loaded chunks must be in [0, {plan.num_chunks}) (prefill computes "
                            f"at least the last chunk)")
    if prefix and (np.asarray(plan.r_step[1:prefix + 1]) != 1).any():
        raise LoweringError(f"plan: a loaded prefix of {prefix} chunks lives on its owners only; the plan "
                            f"replicates blocks 0 .. {prefix - 1} (replica factors {list(plan.r_step[1:prefix + 1])})")
    if prefix and (np.asarray(plan.owner[:prefix]) != np.asarray(plan.holder_owner[:prefix])).any():
        raise LoweringError("plan: a loaded prefix must be held by its final owners (scheme pd moves it)")
    sh = Shapes(model, node, group, chunk)
    attention, reason = choose_attention(attention, sh, [int(x) for x in plan.chunk_tokens])
    low = _Lowerer.prepare(plan, sh, consts, list(bases), decode_steps, attention)
    low.lw.prefix = int(prefix)
    low.lw.attention_reason = reason
    return low.prefill()


class _Lowerer:
    """One pass of emission (prefill, or one decode step) over a ``Builder``."""

    def __init__(self, lw: Lowered):
        self.lw, self.sh, self.map, self.sp = lw, lw.shapes, lw.map, lw.spad.beats
        self.plan, self.consts, self.rgroups = lw.plan, lw.consts, lw.rgroups
        self.N = lw.nodes
        self.b = Builder(self.N, lw.node.num_sems)
        self.routes = RouteTables(lw.topology, lw.node.route_entries)
        self.bufs: dict = {}

    # --- preparation: slots, DDR map ------------------------------------------------------------
    @classmethod
    def prepare(cls, plan: Plan, sh: Shapes, consts, bases, decode_steps, attention="unit") -> "_Lowerer":
        N, C = plan.nodes, plan.num_chunks
        slot_of, frees, live = {}, {}, [dict() for _ in range(N)]
        free = [[] for _ in range(N)]
        high = [0] * N
        for t in range(C):
            for e in plan.events:
                if e.step == t and e.kind in (EventKind.OWNER, EventKind.REPLICATE, EventKind.HANDOFF):
                    for n in e.nodes:
                        if (n, e.block) in slot_of:
                            raise LoweringError(f"plan: node {n} receives block {e.block} twice")
                        s = min(free[n]) if free[n] else high[n]
                        if free[n]:
                            free[n].remove(s)
                        else:
                            high[n] += 1
                        slot_of[(n, e.block)] = s
                        live[n][e.block] = s
            for e in plan.events:
                if e.step == t and e.kind == EventKind.INVALIDATE:
                    for n in e.nodes:
                        s = live[n].pop(e.block, None)
                        if s is None:
                            raise LoweringError(f"plan: step {t}: node {n} frees block {e.block}, which it holds not")
                        free[n].append(s)
        owned = [sorted(live[n].items()) for n in range(N)]
        slots = dict(slot_of)
        # staging: blocks one step brings straight into its compute node
        stage_max, forwards = 0, False
        fetches = {}
        for t in range(C):
            hops = list(plan.owner_fetches(t))
            fetches[t] = hops
            o = plan.compute_node(t)
            stage_max = max(stage_max, sum(1 for _, _, dsts, _ in hops if dsts[0] == o))
            forwards |= any(dsts[0] != o for _, _, dsts, _ in hops)
        # NIC limits of the decode reductions
        node = sh.node
        row_bytes = (sh.d + 2) * 4
        # a row group's state comes back through ATTN_Q MREF / STATE, which reach every state row: the array
        # path's rows (array_rows), the unit path's att_rows (its ATTN_KV's)
        rows_part = min(sh.gqa, array_rows(sh) if attention == "array" else node.att_rows,
                        node.reduce_payload // row_bytes, node.max_payload // row_bytes)
        if N > 1 and rows_part < 1:
            raise LoweringError(f"a softmax state row ({row_bytes} bytes) exceeds the NIC's reduction payload "
                                f"({node.reduce_payload} bytes)")
        rows_part = max(rows_part, 1)
        rgroups = [(kvh, j0, min(rows_part, sh.gqa - j0)) for kvh in range(sh.hkv)
                   for j0 in range(0, sh.gqa, rows_part)]
        if N > 1:
            fan = int(plan.topology.reduce_tree(DECODE_ROOT)[1].max())
            if node.softmax_fan_in < fan:
                raise LoweringError(f"decode merges {fan} softmax states at a NIC; the node's softmax_fan_in is "
                                    f"{node.softmax_fan_in}")
            if node.reduce_slots < len(rgroups):
                raise LoweringError(f"decode keeps {len(rgroups)} reductions open at once; the node's NIC has "
                                    f"reduce_slots={node.reduce_slots}")
        sp = array_spad(sh, plan.request.seq_len + max(1, decode_steps), attention == "array",
                        lambda attn: spad_map(sh, rows_part, len(rgroups), attn))
        m = DdrMap()
        a = _Alloc(isa.DDR_ALIGN)
        m.slot_bytes = _pad(sh.block_bytes(sh.chunk))
        m.pool_slots = max(1, max(high))
        m.pool_layer = m.pool_slots * m.slot_bytes
        m.stage_group = max(1, stage_max) * m.slot_bytes
        m.ids_slot = _pad(4 * sh.node.max_tokens)
        m.head_tiles = -(-sh.vocab // sh.P)
        a("ids", (C + 1) * m.ids_slot)
        place_model(a, m, sh, sh.vocab, plan.request.seq_len + max(1, decode_steps))
        # the array path reads a run's blocks in whole granules of keys: slots past the last one
        extra = array_pool_extra(sh) * m.slot_bytes if attention == "array" else 0
        a("pool", sh.L * m.pool_layer + extra)
        place_decode(a, m, sh, decode_steps, attention == "array")
        a("staging", 2 * m.stage_group + (extra if stage_max else 0))
        a("forward", 2 * m.slot_bytes if forwards else 0)
        mb, sbk = sp.beats["mb"], sp.beats["sb"]
        m.net = {"q": _pad(sh.hq * (sh.db + 1) * sh.vl * 4), "max": len(rgroups) * mb * sh.vl * 4,
                 "state": len(rgroups) * sbk * sh.vl * 4}
        a("net.q", m.net["q"])
        a("net.max", _pad(m.net["max"]))
        a("net.mres", _pad(m.net["max"]))
        a("net.state", _pad(m.net["state"]))
        a("net.sres", _pad(m.net["state"]))
        a("logits", m.head_tiles * sh.P * 4 + 4 * sh.vl)
        m.regions = a.regions
        m.size = a.top
        topo = plan.topology
        lw = Lowered(plan=plan, node=sh.node, shapes=sh, map=m, spad=sp, bases=bases, routes=[],
                     prefill=[], logits_node=plan.compute_node(C - 1), owned=owned,
                     decode_steps=decode_steps, consts=dict(consts), topology=topo)
        lw.rgroups = rgroups
        lw.slots = slots
        lw.attention = attention
        self = cls(lw)
        self.slot_of, self.fetches = slot_of, fetches
        return self

    # --- addresses -------------------------------------------------------------------------------
    def base(self, n: int) -> int:
        return self.lw.bases[n]

    def region(self, n: int, name: str) -> int:
        return self.base(n) + self.map.off(name)

    def pool(self, n: int, slot: int, layer: int) -> int:
        return self.lw.kv_addr(n, slot, layer)

    def buf(self, *key) -> _Buf:
        b = self.bufs.get(key)
        if b is None:
            b = self.bufs[key] = _Buf()
        return b

    def k(self, name: str) -> int:
        return int(self.consts[name])

    # --- EX sequences ------------------------------------------------------------------------------
    def embed(self, n: int, ids: int, T: int, pos0: int) -> None:
        sh, sp = self.sh, self.sp
        self.b.ex(n, isa.Embed, ids=ids, count=T, table=self.region(n, "embed"), vocab=sh.vocab, n=sh.h,
                  group_log2=sh.glog, w_exp=self.k("embed.w_exp"), dst=sp["X"], dst_stride=sh.hb)
        self.b.ex(n, isa.Load, ddr=self.region(n, "rope") + pos0 * sh.d * 4, spad=sp["ROPE"], beats=T * sh.db,
                  row_beats=0)

    def vec(self, n, vop, nel, rows, a, a_stride, dst, dst_stride, b=0, b_stride=0, b_rep=1, b_pair=0,
            imm0=0, imm1=0, deps=()):
        return self.b.ex(n, isa.Vec, deps, vop=vop, n=nel, rows=rows, a=a, a_stride=a_stride, b=b,
                         b_stride=b_stride, b_rep=b_rep, b_pair=b_pair, dst=dst, dst_stride=dst_stride,
                         imm0=imm0, imm1=imm1)

    def gemm(self, n, name, blob_name, T, src, src_stride, dst, dst_stride, bias, tile0=0, tiles=None, w_exp=None):
        off, lay = self.map.blobs[blob_name]
        return self.b.ex(n, isa.Gemm, blob=self.base(n) + off, n=lay.n, total_tiles=lay.tiles, tile0=tile0,
                         tiles=lay.tiles if tiles is None else tiles, tokens=T, group_log2=self.sh.glog,
                         w_exp=self.k(f"{name}.w_exp") if w_exp is None else w_exp, bias=int(bias), src=src,
                         src_stride=src_stride, dst=dst, dst_stride=dst_stride)

    def norm(self, n, gain_name, g_exp_key, rows, a):
        sh, sp = self.sh, self.sp
        self.b.ex(n, isa.Load, ddr=self.base(n) + self.map.gains[gain_name], spad=sp["GAIN"], beats=sh.hb,
                  row_beats=0)
        self.vec(n, VecOp.RMSNORM, sh.h, rows, a, sh.hb, sp["H"], sh.hb, b=sp["GAIN"],
                 imm0=self.k("eps_n"), imm1=self.k(g_exp_key))

    def front(self, n: int, li: int, T: int, seg_base: int, deps=(), after_q=None, dec=None) -> Local:
        """RMSNorm, Q/K/V, RoPE, prescale, and the KV writer of the T tokens into the block layer at
        ``seg_base``; returns the last KVW.  With ``after_q`` the query comes first: Q's GEMM, RoPE
        and prescale, then ``after_q()`` (the tensor-parallel split sends the query rows from
        there), then K and V, whose GEMMs hide the query's trip.  ``dec`` (a decode token,
        ``decode_write``): its K / V rows go to SPAD row j (its key in the decode block at
        ``seg_base``), rows 0 .. j - 1 come back from ``decode_rows`` (and row j goes there while
        later tokens of the block follow), and one KVW per segment writes keys 0 .. j."""
        sh, sp = self.sh, self.sp
        d, db = sh.d, sh.db
        p = f"layers.{li}"
        j = dec[0] if dec else 0
        kv_at = {buf: sp[buf] + j * sh.kb for buf in ("K", "V")}
        self.norm(n, f"{p}.ln1", f"{p}.ln1.g_exp", T, sp["X"])

        def gemms(names):
            for name, dst, width in names:
                self.gemm(n, f"{p}.{name}", f"{p}.{name}", T, sp["H"], sh.hb, dst, width, bias=True)

        kv_proj = (("k_proj", kv_at["K"], sh.kb), ("v_proj", kv_at["V"], sh.kb))
        gemms((("q_proj", sp["Q"], sh.qb),) + (() if after_q else kv_proj))
        self.vec(n, VecOp.TO_BFP, d, T * sh.hq, sp["Q"], db, sp["Q"], db)
        self.vec(n, VecOp.ROPE, d, T * sh.hq, sp["Q"], db, sp["Q"], db, b=sp["ROPE"], b_stride=db,
                 b_rep=sh.hq, b_pair=1)
        self.vec(n, VecOp.PRESCALE, d, T * sh.hq, sp["Q"], db, sp["Q"], db, imm0=self.k("score.cm"),
                 imm1=self.k("score.ce"))
        if after_q:
            after_q()
            gemms(kv_proj)
        self.vec(n, VecOp.TO_BFP, d, T * sh.hkv, kv_at["K"], db, kv_at["K"], db)
        self.vec(n, VecOp.ROPE, d, T * sh.hkv, kv_at["K"], db, kv_at["K"], db, b=sp["ROPE"], b_stride=db,
                 b_rep=sh.hkv, b_pair=1)
        self.vec(n, VecOp.TO_BFP, d, T * sh.hkv, kv_at["V"], db, kv_at["V"], db)
        rows, seg_tokens = T, T
        if dec:
            j, win, keep = dec
            B, row = self.map.dec_keys, self.map.dec_row
            for w, buf in enumerate(("K", "V")):
                at = win + w * B * row
                if j:
                    self.b.ex(n, isa.Load, ddr=at, spad=sp[buf], beats=j * sh.kb, row_beats=db)
                if keep:
                    # from the token at or before j whose rows start on a DDR_ALIGN boundary (a token's
                    # rows are whole 32-byte beats: j or j - 1, which the LOAD just brought back)
                    j0 = j if j * row % isa.DDR_ALIGN == 0 else j - 1
                    self.b.ex(n, isa.Store, ddr=at + j0 * row, spad=sp[buf] + j0 * sh.kb, beats=(j + 1 - j0) * sh.kb,
                              row_beats=db)
            rows, seg_tokens = j + 1, B
        last = None
        for v, buf in ((False, "K"), (True, "V")):
            for kvh in range(sh.hkv):
                last = self.b.ex(n, isa.Kvw, deps, src=sp[buf] + kvh * db, rows=rows, row_stride=sh.kb,
                                 seg=seg_base + sh.seg(seg_tokens, v, kvh))
                deps = ()
        return last

    def decode_write(self, n: int, li: int, step: int) -> tuple[int, tuple]:
        """Where decode token ``step`` of layer ``li`` goes (``spec.kv`` decode layout): -> (its
        block layer's address, ``front``'s ``dec``: its key j in the block, the layer's
        ``decode_rows``, whether later tokens of the block follow)."""
        m = self.map
        blk, j = kv.decode_key(step, m.dec_keys)
        base = self.region(n, "decode_kv") + li * m.dec_layer + blk * m.dec_block
        win = self.region(n, "decode_rows") + li * 2 * m.dec_keys * m.dec_row
        return base, (j, win, m.dec_keys > 1 and j < m.dec_keys - 1 and step + 1 < self.lw.decode_steps)

    def decode_run(self, n: int, li: int, step: int, kpos0: int) -> dict:
        """The decode tokens 0 .. step of layer ``li`` as one run of decode blocks (keys past the
        current token, in its block and in the granules after it, lie past every query: invisible)."""
        m = self.map
        return {"addr": self.region(n, "decode_kv") + li * m.dec_layer, "stride": m.dec_block, "n": m.dec_keys,
                "blocks": step // m.dec_keys + 1, "first_b": 0, "kpos0": kpos0, "bstride": 0,
                "pstride": m.dec_keys, "gated": False, "decode": True}

    def back(self, n: int, li: int, T: int) -> None:
        sh, sp = self.sh, self.sp
        p = f"layers.{li}"
        self.vec(n, VecOp.TO_BFP, sh.hq * sh.d, T, sp["A"], sh.qb, sp["A"], sh.qb)
        self.gemm(n, f"{p}.o_proj", f"{p}.o_proj", T, sp["A"], sh.qb, sp["O"], sh.hb, bias=False)
        self.vec(n, VecOp.RESIDUAL, sh.h, T, sp["X"], sh.hb, sp["X"], sh.hb, b=sp["O"], b_stride=sh.hb)
        self.mlp_in(n, li, T)
        self.gemm(n, f"{p}.down_proj", f"{p}.down_proj", T, sp["G"], sh.ib, sp["O"], sh.hb, bias=False)
        self.vec(n, VecOp.RESIDUAL, sh.h, T, sp["X"], sh.hb, sp["X"], sh.hb, b=sp["O"], b_stride=sh.hb)

    def mlp_in(self, n: int, li: int, T: int) -> None:
        """The MLP up to down_proj's input: X -> RMSNorm (ln2) -> H; G = silu(gate H) * (up H), BFP."""
        sh, sp = self.sh, self.sp
        p = f"layers.{li}"
        self.norm(n, f"{p}.ln2", f"{p}.ln2.g_exp", T, sp["X"])
        self.gemm(n, f"{p}.gate_proj", f"{p}.gate_proj", T, sp["H"], sh.hb, sp["G"], sh.ib, bias=False)
        self.gemm(n, f"{p}.up_proj", f"{p}.up_proj", T, sp["H"], sh.hb, sp["U"], sh.ib, bias=False)
        self.vec(n, VecOp.SILU, sh.inter, T, sp["G"], sh.ib, sp["G"], sh.ib)
        self.vec(n, VecOp.TO_BFP, sh.inter, T, sp["G"], sh.ib, sp["G"], sh.ib)
        self.vec(n, VecOp.TO_BFP, sh.inter, T, sp["U"], sh.ib, sp["U"], sh.ib)
        self.vec(n, VecOp.MUL, sh.inter, T, sp["G"], sh.ib, sp["G"], sh.ib, b=sp["U"], b_stride=sh.ib)

    def head(self, n: int, row: int) -> Local:
        """Final norm of X row ``row``, the LM head in parts, logits stored to DDR."""
        sh, sp = self.sh, self.sp
        self.norm(n, "norm", "norm.g_exp", 1, sp["X"] + row * sh.hb)
        part, total = self.lw.spad.head_part, self.map.head_tiles
        last = None
        for t0 in range(0, total, part):
            tiles = min(part, total - t0)
            self.gemm(n, "head", "head", 1, sp["H"], sh.hb, sp["LOGP"], 0, bias=False, tile0=t0, tiles=tiles)
            last = self.b.ex(n, isa.Store, ddr=self.region(n, "logits") + t0 * sh.P * 4, spad=sp["LOGP"],
                             beats=-(-tiles * sh.P // sh.vl), row_beats=0)
        return last

    def runs_for(self, blocks, addr_of, gated: bool, n_of) -> list[dict]:
        """Runs of blocks laid out at evenly spaced addresses: blocks = [(block, index)] sorted by
        index; ``addr_of(index)`` the block layer's address; one ATTN_KV each."""
        runs = []
        for b, i in blocks:
            nt = n_of(b)
            pos = int(self.starts[b])
            r = runs[-1] if runs else None
            if (r is not None and r["n"] == nt and i == r["last_i"] + 1 and
                    (r["blocks"] == 1 or (b - r["last_b"] == r["bstride"] and pos - r["last_pos"] == r["pstride"]))
                    and 0 < b - r["last_b"] < 256):
                if r["blocks"] == 1:
                    r["bstride"], r["pstride"] = b - r["last_b"], pos - r["last_pos"]
                r["blocks"] += 1
                r["last_i"], r["last_b"], r["last_pos"] = i, b, pos
                continue
            runs.append({"addr": addr_of(i), "stride": self.map.slot_bytes, "n": nt, "blocks": 1, "first_b": b,
                         "kpos0": pos, "bstride": 0, "pstride": 0, "last_i": i, "last_b": b, "last_pos": pos,
                         "gated": gated})
        return runs

    def attention(self, n: int, T: int, pos0: int, runs, deps=()) -> Local:
        """Two-pass attention of T query rows (Q) over ``runs`` -> A."""
        sh, sp, d = self.sh, self.sp, self.sh.d
        array = getattr(self.lw, "attention", "unit") == "array"
        tpp = max(1, (array_rows(sh) if array else self.lw.node.att_rows) // sh.gqa)
        last = None
        for kvh in range(sh.hkv):
            for t0 in range(0, T, tpp):
                tp = min(tpp, T - t0)
                rows = dict(tokens=tp, heads=sh.gqa, tok_stride=sh.qb, head_stride=sh.db)
                off = t0 * sh.qb + kvh * sh.gqa * sh.db
                # the array path: GEMM_QK reads the query rows from SPAD, so the unit takes only the rows
                # and positions (ROWS, a cycle a token) unless ATTN_KV passes over a tail (QUERY)
                what = self.query_load(runs, kvh, pos0 + t0 + tp - 1, pos0 + t0)
                self.b.ex(n, isa.AttnQ, deps, what=what, spad=sp["Q"] + off, qpos0=pos0 + t0, **rows)
                deps = ()
                if array:
                    self.array_max(n, runs, kvh, sp["Q"] + off, rows, pos0 + t0 + tp - 1, pos0 + t0)
                    self.array_apply(n, runs, kvh, sp["Q"] + off, rows, pos0 + t0 + tp - 1, qmin=pos0 + t0)
                else:
                    for phase in (AttnPass.MAX, AttnPass.APPLY):
                        for i, r in enumerate(runs):
                            self.attn_kv(n, r, kvh, phase, i == 0)
                last = self.b.ex(n, isa.AttnEmit, mode=isa.EmitMode.FINAL, spad=sp["A"] + off, **rows)
        return last

    def query_load(self, runs, kvh, qmax, qmin=None) -> AttnLoad:
        """What ATTN_Q loads before an attention over ``runs``: on the array path, when no ATTN_KV
        tail follows, only the rows and positions (ROWS: GEMM_QK reads the query from SPAD), else
        the query (QUERY)."""
        if getattr(self.lw, "attention", "unit") == "array" and not self.array_segments(runs, kvh, qmax, qmin)[1]:
            return AttnLoad.ROWS
        return AttnLoad.QUERY

    # --- attention on the MAC array (attention = "array", docs/attention-array.md step 4) ---------
    def array_segments(self, runs, kvh, qmax, qmin=None):
        """-> (pieces on the array, ``tail`` runs for ATTN_KV, whether the score rows hold every
        piece's scores).  A piece is a run of blocks of contiguous positions (one GEMM_QK, ATTN_SM
        MAX / APPLY and GEMM_PV each): {k, v (the first block's K / V segment), stride (bytes / 64
        between blocks; 0 for one block: its keys past the block re-read it), bk, n (keys), kpos,
        koff (its score words), pad_visible (the keys past n have positions some row <= ``qmax``
        sees)}.  A piece holds the keys of at most ``array_pv_keys`` and, when the score rows do not
        hold every piece, of ``sk``.  The decode tokens' run of decode blocks (``decode_run``) is a
        piece like any other.  Through ATTN_KV: runs marked ``tail``, a piece of n not a multiple of
        VL whose padding would be visible to rows of several positions (``qmin``: the rows' first position,
        None: every row at qmax) and a piece the execute unit cannot stream (``array_streams``: one-key decode
        blocks where ``NodeConfig.decode_block_keys`` is 1)."""
        sh, vl, u = self.sh, self.sh.vl, array_key_unit(self.sh)
        one_pos = qmin is None or qmin == qmax
        rnd = lambda x: -(-x // u) * u                                     # noqa: E731

        def build(cap):
            pieces, tail = [], []
            for r in runs:
                if r.get("tail"):
                    tail.append(r)
                    continue
                seg = kv.segment_bytes(r["n"], sh.d)
                contiguous = r["blocks"] == 1 or (r["pstride"] == r["n"] and (r["n"] == sh.chunk or r.get("decode")))
                per = max(1, cap // r["n"]) if contiguous else 1
                for i in range(0, r["blocks"], per):
                    m = min(per, r["blocks"] - i)
                    addr, nk, kpos = r["addr"] + i * r["stride"], m * r["n"], r["kpos0"] + i * r["pstride"]
                    pad_visible = kpos + nk <= qmax
                    bk = r["n"]
                    if m == 1 and nk % vl and not self.array_streams(bk, nk):
                        # one block of fewer than a multiple of VL keys (a short last prompt chunk): read as a
                        # block of VL-rounded keys (``padded_block``; the keys past n are never visible)
                        bk = self.padded_block(r, nk)
                    if pad_visible and nk % vl and one_pos:
                        # every row at position qmax (a decode token): ATTN_SM sees the keys at qmax - nk + 1
                        # .. qmax (all visible, as at kpos .. kpos + nk - 1 <= qmax), the padding after qmax
                        kpos, pad_visible = qmax - nk + 1, False
                    if (pad_visible and nk % vl) or not bk or not self.array_streams(bk, nk):
                        tail.append({**r, "addr": addr, "blocks": m, "kpos0": kpos,
                                     "first_b": r["first_b"] + i * r["bstride"]})
                        continue
                    pieces.append({"k": addr + kvh * seg, "v": addr + (sh.hkv + kvh) * seg,
                                   "stride": r["stride"] // isa.DDR_ALIGN if m > 1 else 0, "bk": bk, "n": nk,
                                   "kpos": kpos, "pad_visible": pad_visible})
            return pieces, tail

        pieces, tail = build(array_pv_keys(sh))
        stored = sum(rnd(x["n"]) for x in pieces) <= self.sp["sk"]
        if not stored:
            pieces, tail = build(min(self.sp["sk"], array_pv_keys(sh)))
        koff = 0
        for x in pieces:
            x["koff"] = koff if stored else 0
            koff += rnd(x["n"])
        return pieces, tail, stored

    def padded_block(self, r, nk) -> int:
        """A block of ``r["n"]`` keys read as one of B = n rounded up to VL (0: none): a segment of n
        keys is the B-key one's first keys when their scale regions are one size (``spec.kv``), and a
        block layer read as B keys stays in its slot (the keys past n: the next segment's bytes, or the
        slot's; invisible to every query, their w 0)."""
        sh = self.sh
        n, B = r["n"], -(-r["n"] // sh.vl) * sh.vl
        if B > sh.chunk or kv.scale_bytes(B) != kv.scale_bytes(n):
            return 0
        if (2 * sh.hkv - 1) * kv.segment_bytes(n, sh.d) + kv.segment_bytes(B, sh.d) > r["stride"]:
            return 0
        return B

    def array_streams(self, bk: int, nk: int) -> bool:
        """Whether the execute unit streams a piece of ``nk`` keys in blocks of ``bk`` (GEMM_QK's
        whole tiles with their scale words, GEMM_PV's whole K-key beats): ``spec.isa.block_run_ok``;
        a piece it cannot goes through ATTN_KV (the RTL and the golden node refuse it)."""
        sh, node = self.sh, self.sh.node
        bus, word = node.data_bytes, node.weight_word_bytes
        return (isa.block_run_ok(bk, 0, -(-nk // sh.P) * sh.P, sh.d, bus, word)
                and isa.block_run_ok(bk, 0, -(-nk // math.lcm(sh.K, sh.vl)) * math.lcm(sh.K, sh.vl), sh.d, bus,
                                     word, scales=False))

    def array_gate(self, n, runs, kvh):
        """The directory check of ATTN_KV gated, which GEMM_QK, ATTN_SM and GEMM_PV lack: one DIR
        check per run of gated blocks (faults UNREADABLE_BLOCK on an INVALID one), before the pass
        reads them.  ``kvh``: the KV head whose pass follows (the check is the same for every head)."""
        for r in runs:
            if r["gated"] and not r.get("tail"):
                self.b.ex(n, isa.Dir, block=r["first_b"], count=r["blocks"], stride=r["bstride"],
                          state=ReplicaState.INVALID, check=1)

    def array_scores(self, n, x, q, rows):
        """GEMM_QK: the rows' scores against piece x's keys (whole tiles) -> SC words koff .. ."""
        sh, sp = self.sh, self.sp
        return self.b.ex(n, isa.GemmQk, seg=x["k"], seg_stride=x["stride"], block_keys=x["bk"], tile0=0,
                         tiles=-(-x["n"] // sh.P), tokens=rows["tokens"], heads=rows["heads"],
                         head_stride=rows["head_stride"], src=q, src_stride=rows["tok_stride"],
                         dst=sp["SC"] + x["koff"] // sh.vl, dst_stride=sp["sk"] // sh.vl)

    def _sm(self, x, keys):
        """ATTN_SM keys of piece x: n, or rounded up to ``keys`` when the keys past n are invisible."""
        return x["n"] if x["pad_visible"] else -(-x["n"] // keys) * keys

    def array_max(self, n, runs, kvh, q, rows, qmax, qmin=None):
        """m of the rows loaded by ATTN_Q QUERY / ROWS (q: their SPAD row (0, 0); positions up to qmax)
        over ``runs``: per piece ATTN_SM MAX with defer, then the GEMM_QK whose score words it takes;
        ATTN_KV MAX over the tail."""
        sh, sp = self.sh, self.sp
        pieces, tail, stored = self.array_segments(runs, kvh, qmax, qmin)
        if tail and rows["tokens"] * rows["heads"] > sh.node.att_rows:
            r = tail[0]
            raise LoweringError(f"attention=array: a run of {r['blocks']} block(s) of {r['n']} keys that the array "
                                f"cannot read goes through ATTN_KV, whose rows are at most att_rows="
                                f"{sh.node.att_rows} (a job holds {rows['tokens'] * rows['heads']}); use a chunk "
                                f"that is a multiple of vec_lanes={sh.vl}")
        self.array_gate(n, runs, kvh)
        for i, x in enumerate(pieces):
            # the MAX deferred to the GEMM_QK after it: the row maxima taken as the scores are written
            self.b.ex(n, isa.AttnSm, phase=AttnPass.MAX, first=int(i == 0), scores=sp["SC"] + x["koff"] // sh.vl,
                      s_stride=sp["sk"] // sh.vl, keys=self._sm(x, sh.vl), kpos0=x["kpos"], seg=0, w=0, w_stride=0,
                      tokens=rows["tokens"], heads=rows["heads"], defer=1)
            self.array_scores(n, x, q, rows)
        for k, r in enumerate(tail):
            self.attn_kv(n, r, kvh, AttnPass.MAX, not pieces and k == 0)

    def array_apply(self, n, runs, kvh, q, rows, qmax, mref=None, rescore=False, qmin=None):
        """l and o of the rows over ``runs`` with m as it stands (``mref``: first load m from that
        SPAD word; ``rescore``: the score rows no longer hold the MAX pass's scores): per piece
        ATTN_SM APPLY (w rows in W; the keys up to GEMM_PV's multiple of K get w = 0: the same pass
        when they are invisible, else one over them at positions after every query) and GEMM_PV
        over the run (o wide in OW, accumulated, the last one sat32), o into the unit (ATTN_Q O
        reading GEMM_PV's rows at their stride), then ATTN_KV APPLY over the tail."""
        sh, sp, d, vl = self.sh, self.sp, self.sh.d, self.sh.vl
        pieces, tail, stored = self.array_segments(runs, kvh, qmax, qmin)
        if rescore and stored:
            for x in pieces:
                self.array_scores(n, x, q, rows)
        if mref is not None:
            self.array_gate(n, runs, kvh)
            self.b.ex(n, isa.AttnQ, what=AttnLoad.MREF, spad=mref, qpos0=0, **rows)
        wst = sp["sk"] // vl
        last = len(pieces) - 1
        ow_stride = (d if last == 0 else 2 * d) // vl
        kpv = math.lcm(sh.K, vl)
        after = self.array_after()
        for i, x in enumerate(pieces):
            if not stored:
                self.array_scores(n, x, q, rows)
            keys = -(-x["n"] // kpv) * kpv
            sm = dict(s_stride=sp["sk"] // vl, w_stride=wst, tokens=rows["tokens"], heads=rows["heads"],
                      block_keys=x["bk"], seg_stride=x["stride"])
            self.b.ex(n, isa.AttnSm, phase=AttnPass.APPLY, first=int(i == 0), scores=sp["SC"] + x["koff"] // vl,
                      keys=self._sm(x, kpv), kpos0=x["kpos"], seg=x["v"], w=sp["W"], **sm)
            if x["pad_visible"] and keys > x["n"]:
                # w = 0 for the keys past the piece up to GEMM_PV's multiple of K: invisible positions
                # (after every query); key n is token 0 of the block after the piece's last
                self.b.ex(n, isa.AttnSm, phase=AttnPass.APPLY, first=0, scores=sp["SC"] + (x["koff"] + x["n"]) // vl,
                          keys=keys - x["n"], kpos0=after,
                          seg=x["v"] + x["n"] // x["bk"] * x["stride"] * isa.DDR_ALIGN, w=sp["W"] + x["n"] // vl, **sm)
            self.b.ex(n, isa.GemmPv, seg=x["v"], keys=keys, tile0=0, tiles=d // sh.P, tokens=rows["tokens"],
                      heads=rows["heads"], head_stride=wst, src=sp["W"], src_stride=rows["heads"] * wst, dst=sp["OW"],
                      dst_stride=ow_stride, acc=int(i > 0), wide=int(i < last), block_keys=x["bk"],
                      seg_stride=x["stride"])
        if pieces:
            # o of row (t, h) = GEMM_PV's row t heads + h (its sat32 words at the row's start)
            self.b.ex(n, isa.AttnQ, what=AttnLoad.O, spad=sp["OW"], qpos0=0, tokens=rows["tokens"],
                      heads=rows["heads"], tok_stride=rows["heads"] * ow_stride, head_stride=ow_stride)
        for k, r in enumerate(tail):
            self.attn_kv(n, r, kvh, AttnPass.APPLY, not pieces and k == 0)

    def array_after(self) -> int:
        """A key position after every query of the program (the w = 0 keys of ``array_apply``)."""
        return self.plan.request.seq_len + max(1, self.lw.decode_steps)

    def attn_kv(self, n, r, kvh, phase, first):
        sh = self.sh
        seg = kv.segment_bytes(r["n"], sh.d)
        return self.b.ex(n, isa.AttnKV, phase=phase, seg=r["addr"] + kvh * seg, v_off=sh.hkv * seg // isa.DDR_ALIGN,
                         seg_stride=r["stride"] // isa.DDR_ALIGN, blocks=r["blocks"], keys=r["n"],
                         kpos0=r["kpos0"], pos_stride=r["pstride"], block0=r["first_b"] if r["gated"] else 0,
                         block_stride=r["bstride"] if r["gated"] else 0, gated=int(r["gated"]), first=int(first))

    # --- prefill ---------------------------------------------------------------------------------
    def prefill(self) -> Lowered:
        plan, sh, b = self.plan, self.sh, self.b
        C, L = plan.num_chunks, sh.L
        tok = [int(x) for x in plan.chunk_tokens]
        self.starts = np.concatenate([[0], np.cumsum(tok)]).astype(np.int64)
        n_of = lambda blk: tok[blk]                                           # noqa: E731
        state: dict[tuple[int, int], ReplicaState] = {}
        by_step: dict = {}
        for e in plan.events:
            by_step.setdefault((e.step, e.phase), []).append(e)
        if self.N > 1:                   # the decode routes are in the tables from the start
            self.routes.broadcast(DECODE_ROOT)
            self.routes.reduce(DECODE_ROOT)
        kvw: dict = {}                   # (block, layer) -> the owner's last KVW
        arrived: dict = {}               # (node, block, layer) -> Arrival of a received copy
        tx_uses: dict = {}               # (node, block) -> SENDs from its pool copy
        stage_turn = [0] * self.N
        fwd_turn = [0] * self.N

        def dir_(n, blk, st, deps=()):
            return b.ex(n, isa.Dir, deps, block=blk, count=1, stride=0, state=st)

        for c in range(C):
            o = plan.compute_node(c)
            T, pos0 = tok[c], int(self.starts[c])
            for e in by_step.get((c, EventPhase.START), []):
                for n in e.nodes:
                    self._lifecycle(state, c, e.kind, e.block, n)
                    dir_(n, e.block, ReplicaState.DRAINING)
            state[(c, o)] = ReplicaState.VALID
            valid = dir_(o, c, ReplicaState.VALID)
            if (o, c) not in self.slot_of:
                raise LoweringError(f"plan: step {c}: node {o} computes chunk {c} but the events give it no copy")
            so = self.slot_of[(o, c)]
            if c < self.lw.prefix:
                # loaded: its KV is in the pool slot before start; readers wait for the entry
                for li in range(L):
                    self.buf("pool", o, so, li).wrote(valid)
                for e in by_step.get((c, EventPhase.END), []):
                    self._end_event(c, e, state, tx_uses, arrived, kvw, tok)
                continue
            self.embed(o, self.lw.ids_addr(o, c), T, pos0)
            hops = self.fetches[c]
            direct = [blk for blk, _, dsts, _ in hops if dsts[0] == o]
            for li in range(L):
                # the chunk's own block layer
                pb = self.buf("pool", o, so, li)
                kvw[(c, li)] = self.front(o, li, T, self.pool(o, so, li), deps=pb.write_deps())
                pb.wrote(kvw[(c, li)])
                nbytes = sh.block_bytes(T)
                reps = [int(x) for x in plan.holders(c, c)][1:]
                if reps:
                    tag = b.new_tag()
                    for n in reps:
                        s = self.slot_of[(n, c)]
                        rb = self.buf("pool", n, s, li)
                        arrived[(n, c, li)] = b.recv(n, o, tag, self.pool(n, s, li), nbytes, rb.write_deps(),
                                                     credit_route=self.routes.unicast(o))
                        rb.wrote(arrived[(n, c, li)])
                    snd = b.send(o, reps, [kvw[(c, li)]], ddr=self.pool(o, so, li), length=nbytes,
                                 stage=Stage.PREFILL, mop=Op.KV_REPLICA,
                                 collective=Collective.MULTICAST if len(reps) > 1 else Collective.UNICAST,
                                 reduce_op=ReduceOp.NONE, dst=min(reps), route_id=self.routes.multicast(o, reps),
                                 tag=tag, seq=c & 0xFFFF)
                    pb.read(snd)
                    tx_uses.setdefault((o, c), []).append(snd)
                # history the compute node lacks
                turn = stage_turn[o] % 2
                if direct:
                    stage_turn[o] += 1
                sbuf = self.buf("stage", o, turn)
                staged, stage_deps, fwd_at = [], [], {}
                for blk, src, dsts, _ in hops:
                    y = dsts[0]
                    nb = sh.block_bytes(tok[blk])
                    tag = b.new_tag()
                    if y == o:
                        addr = self.region(o, "staging") + turn * self.map.stage_group + len(staged) * self.map.slot_bytes
                        arr = b.recv(o, src, tag, addr, nb, sbuf.write_deps() if not staged else (),
                                     credit_route=self.routes.unicast(src))
                        staged.append((blk, len(staged)))
                        stage_deps.append(arr)
                    else:
                        f = fwd_turn[y] % 2
                        fwd_turn[y] += 1
                        fb = self.buf("fwd", y, f)
                        addr = self.region(y, "forward") + f * self.map.slot_bytes
                        arr = b.recv(y, src, tag, addr, nb, fb.write_deps(), credit_route=self.routes.unicast(src),
                                     forward=True)
                        fb.wrote(arr)
                    # where the sender reads it
                    from_pool = (blk, src) not in fwd_at
                    if not from_pool:
                        f_src = fwd_at.pop((blk, src))
                        src_addr = self.region(src, "forward") + f_src * self.map.slot_bytes
                        sb = self.buf("fwd", src, f_src)
                    else:
                        if state.get((blk, src)) is None:
                            raise LoweringError(f"plan: step {c}: node {src} sends block {blk}, of which it holds "
                                                f"no copy")
                        s = self.slot_of[(src, blk)]
                        src_addr = self.pool(src, s, li)
                        sb = self.buf("pool", src, s, li)
                    snd = b.send(src, [y], [sb.w], ddr=src_addr, length=nb, stage=Stage.PREFILL, mop=Op.KV_FETCH,
                                 collective=Collective.UNICAST, reduce_op=ReduceOp.NONE, dst=y,
                                 route_id=self.routes.unicast(y), tag=tag, seq=c & 0xFFFF)
                    sb.read(snd)
                    if from_pool:
                        tx_uses.setdefault((src, blk), []).append(snd)
                    if y != o:
                        fwd_at[(blk, y)] = f
                # attention of the chunk over what o holds and what it received
                held = sorted((self.slot_of[(o, blk)], blk) for blk in range(c + 1)
                              if state.get((blk, o)) is not None)
                got = {blk for blk, _ in staged} | {blk for _, blk in held}
                missing = [blk for blk in range(c) if blk not in got]
                if missing:
                    raise LoweringError(f"plan: step {c}: node {o} computes chunk {c} without a copy of block "
                                        f"{missing[0]} (not held, not fetched)")
                deps = list(stage_deps) + [arrived[(o, blk, li)] for _, blk in held if (o, blk, li) in arrived]
                runs = self.runs_for([(blk, s) for s, blk in held],
                                     lambda s, li=li: self.pool(o, s, li), True, n_of)
                runs += self.runs_for(staged, lambda i, t=turn: (self.region(o, "staging") + t * self.map.stage_group
                                                                 + i * self.map.slot_bytes), False, n_of)
                last = self.attention(o, T, pos0, runs, deps)
                if staged:
                    sbuf.r = [last]
                for s, blk in held:
                    self.buf("pool", o, s, li).read(last)
                self.back(o, li, T)
            if c == C - 1:
                self.head(o, T - 1)
            for e in by_step.get((c, EventPhase.END), []):
                self._end_event(c, e, state, tx_uses, arrived, kvw, tok)
        # the decode-ready layout: every node holds exactly its owned blocks
        for (blk, n), st in state.items():
            if int(plan.owner[blk]) != n:
                raise LoweringError(f"plan: after prefill node {n} still holds a replica of block {blk}")
        self.lw.prefill = b.programs()
        self.lw.routes = self.routes.tables
        self.lw.route_ids_used = self.routes.used
        self._check_routes()
        longest = max(len(p) for p in self.lw.prefill)
        if self.lw.decode_steps:
            longest = max(longest, max(len(p) for p in self.lw.decode_programs(0)))
        self.map.regions["program"] = (self.map.size, longest * isa.INSTR_BYTES)
        self.map.size = _pad(self.map.size + longest * isa.INSTR_BYTES, 4096)
        return self.lw

    def _lifecycle(self, state, step, kind, blk, n):
        cur = state.get((blk, n))
        if kind == EventKind.DRAIN and cur != ReplicaState.VALID:
            raise LoweringError(f"plan: step {step}: drain of block {blk} on node {n} "
                                f"({'INVALID' if cur is None else cur.name})")
        if kind == EventKind.DRAIN and int(self.plan.owner[blk]) == n and self.plan.scheme != Scheme.PD:
            raise LoweringError(f"plan: step {step}: the owner copy of block {blk} may not drain")
        if kind == EventKind.INVALIDATE and cur != ReplicaState.DRAINING:
            raise LoweringError(f"plan: step {step}: invalidate of block {blk} on node {n} "
                                f"({'INVALID' if cur is None else cur.name})")
        if kind == EventKind.DRAIN:
            state[(blk, n)] = ReplicaState.DRAINING
        elif kind == EventKind.INVALIDATE:
            del state[(blk, n)]

    def _end_event(self, c, e, state, tx_uses, arrived, kvw, tok):
        b, sh = self.b, self.sh
        for n in e.nodes:
            if e.kind == EventKind.OWNER:
                if state.get((e.block, n)) != ReplicaState.VALID:
                    raise LoweringError(f"plan: step {c}: owner copy of block {e.block} on node {n}, which did "
                                        f"not compute it")
            elif e.kind == EventKind.REPLICATE:
                state[(e.block, n)] = ReplicaState.VALID
                b.ex(n, isa.Dir, block=e.block, count=1, stride=0, state=ReplicaState.VALID)
            elif e.kind == EventKind.HANDOFF:
                src = int(self.plan.holder_owner[e.block])
                nb = sh.block_bytes(tok[e.block])
                s_src, s_dst = self.slot_of[(src, e.block)], self.slot_of[(n, e.block)]
                for li in range(sh.L):
                    tag = b.new_tag()
                    db_ = self.buf("pool", n, s_dst, li)
                    arr = b.recv(n, src, tag, self.pool(n, s_dst, li), nb, db_.write_deps(),
                                 credit_route=self.routes.unicast(src))
                    db_.wrote(arr)
                    sb = self.buf("pool", src, s_src, li)
                    snd = b.send(src, [n], [sb.w], ddr=self.pool(src, s_src, li), length=nb, stage=Stage.PREFILL,
                                 mop=Op.KV_FETCH, collective=Collective.UNICAST, reduce_op=ReduceOp.NONE, dst=n,
                                 route_id=self.routes.unicast(n), tag=tag, seq=c & 0xFFFF)
                    sb.read(snd)
                    tx_uses.setdefault((src, e.block), []).append(snd)
                    arrived[(n, e.block, li)] = arr
                b.ex(n, isa.Dir, [arrived[(n, e.block, li)] for li in range(sh.L)], block=e.block, count=1,
                     stride=0, state=ReplicaState.VALID)
                state[(e.block, n)] = ReplicaState.VALID
            elif e.kind in (EventKind.DRAIN, EventKind.INVALIDATE):
                self._lifecycle(state, c, e.kind, e.block, n)
                new = ReplicaState.DRAINING if e.kind == EventKind.DRAIN else ReplicaState.INVALID
                d = b.ex(n, isa.Dir, tx_uses.get((n, e.block), []) if new == ReplicaState.INVALID else (),
                         block=e.block, count=1, stride=0, state=new)
                if new == ReplicaState.INVALID:
                    s = self.slot_of[(n, e.block)]
                    for li in range(sh.L):
                        self.buf("pool", n, s, li).read(d)

    def _check_routes(self):
        need = self.routes.used
        if need > self.lw.node.route_entries:
            raise LoweringError(f"the programs use {need} route ids; the node's route table has "
                                f"route_entries={self.lw.node.route_entries}")

    # --- decode ----------------------------------------------------------------------------------
    def decode(self, step: int) -> list:
        """Decode step ``step`` (the token at position seq_len + step) on every node."""
        lw, sh, sp, b = self.lw, self.sh, self.sp, self.b
        plan = self.plan
        tok = [int(x) for x in plan.chunk_tokens]
        self.starts = np.concatenate([[0], np.cumsum(tok)]).astype(np.int64)
        S = int(self.starts[-1])
        pos = S + step
        root, N = DECODE_ROOT, self.N
        n_of = lambda blk: tok[blk]                                        # noqa: E731

        def runs(n, li):
            r = self.runs_for([(blk, s) for blk, s in sorted(lw.owned[n], key=lambda x: x[1])],
                              lambda s: self.pool(n, s, li), True, n_of)
            if n == root:
                r.append(self.decode_run(n, li, step, S))
            return r

        self.embed(root, lw.ids_addr(root, None), 1, pos)
        mb, sbk = sp["mb"], sp["sb"]
        qbytes = sh.hq * (sh.db + 1) * sh.vl * 4
        others = [n for n in range(N) if n != root]
        for li in range(sh.L):
            seg, dec = self.decode_write(root, li, step)
            self.front(root, li, 1, seg, dec=dec)
            if N == 1:
                self.attention(root, 1, pos, runs(root, li))
                self.back(root, li, 1)
                continue
            route_b, route_r = self.routes.broadcast(root), self.routes.reduce(root)
            seq = step & 0xFFFF
            qb_ = self.buf("q", root)
            st = b.ex(root, isa.Store, qb_.write_deps(), ddr=self.region(root, "net.q"), spad=sp["Q"],
                      beats=sh.hq * sh.db, row_beats=sh.db)
            qb_.wrote(st)
            tag = b.new_tag()
            arr_q = {}
            for n in others:
                nb_ = self.buf("q", n)
                arr_q[n] = b.recv(n, root, tag, self.region(n, "net.q"), qbytes, nb_.write_deps(),
                                  credit_route=self.routes.unicast(root))
                nb_.wrote(arr_q[n])
            qb_.read(b.send(root, others, [st], ddr=self.region(root, "net.q"), length=qbytes, stage=Stage.DECODE,
                            mop=Op.QUERY, collective=Collective.MULTICAST, reduce_op=ReduceOp.NONE, dst=root,
                            route_id=route_b, tag=tag, seq=seq))
            # maxima: every node, the root's contribution last
            tag_m = b.new_tag()
            maxlen = self.map.net["max"]
            st_max = {}
            for n in others + [root]:
                if n != root:
                    self.buf("q", n).read(b.ex(n, isa.Load, [arr_q[n]], ddr=self.region(n, "net.q"), spad=sp["Q"],
                                               beats=sh.hq * sh.db, row_beats=sh.db))
                rn = runs(n, li)
                for i, (kvh, j0, rows) in enumerate(self.rgroups):
                    rr = dict(tokens=1, heads=rows, tok_stride=sh.qb, head_stride=sh.db)
                    q = sp["Q"] + (kvh * sh.gqa + j0) * sh.db
                    b.ex(n, isa.AttnQ, what=self.query_load(rn, kvh, pos), spad=q, qpos0=pos, **rr)
                    if self.lw.attention == "array":
                        self.array_max(n, rn, kvh, q, rr, pos)
                    for k, r in enumerate(rn if self.lw.attention != "array" else ()):
                        self.attn_kv(n, r, kvh, AttnPass.MAX, k == 0)
                    b.ex(n, isa.AttnEmit, mode=isa.EmitMode.MAX, spad=sp["MLOC"] + i * mb, **rr)
                mbuf = self.buf("max", n)
                st_max[n] = b.ex(n, isa.Store, mbuf.write_deps(), ddr=self.region(n, "net.max"), spad=sp["MLOC"],
                                 beats=len(self.rgroups) * mb, row_beats=0)
                mbuf.wrote(st_max[n])
                if n != root:
                    mbuf.read(b.send(n, [root], [st_max[n]], credits=False, ddr=self.region(n, "net.max"),
                                     length=maxlen, stage=Stage.DECODE, mop=Op.PARTIAL_STATE,
                                     collective=Collective.REDUCE, reduce_op=ReduceOp.MAX, dst=root,
                                     route_id=route_r, tag=tag_m, seq=seq))
            rb = self.buf("mres", root)
            arr_m = b.recv(root, root, tag_m, self.region(root, "net.mres"), maxlen, rb.write_deps(),
                           credit_route=None, result_of_reduce=True)
            rb.wrote(arr_m)
            self.buf("max", root).read(b.send(root, [root], [st_max[root], b.posted(arr_m)], credits=False,
                                              ddr=self.region(root, "net.max"), length=maxlen, stage=Stage.DECODE,
                                              mop=Op.PARTIAL_STATE, collective=Collective.REDUCE,
                                              reduce_op=ReduceOp.MAX, dst=root, route_id=route_r, tag=tag_m,
                                              seq=seq))
            tag = b.new_tag()
            arr_b = {root: arr_m}
            for n in others:
                nb_ = self.buf("mres", n)
                arr_b[n] = b.recv(n, root, tag, self.region(n, "net.mres"), maxlen, nb_.write_deps(),
                                  credit_route=self.routes.unicast(root))
                nb_.wrote(arr_b[n])
            rb.read(b.send(root, others, [arr_m], ddr=self.region(root, "net.mres"), length=maxlen,
                           stage=Stage.DECODE, mop=Op.TENSOR, collective=Collective.MULTICAST,
                           reduce_op=ReduceOp.NONE, dst=root, route_id=route_b, tag=tag, seq=seq))
            # states with m = M, merged towards the root
            tags_s = [b.new_tag() for _ in self.rgroups]
            st_s = {}
            for n in others + [root]:
                self.buf("mres", n).read(b.ex(n, isa.Load, [arr_b[n]], ddr=self.region(n, "net.mres"),
                                              spad=sp["MGLOB"], beats=len(self.rgroups) * mb, row_beats=0))
                rn = runs(n, li)
                for i, (kvh, j0, rows) in enumerate(self.rgroups):
                    rr = dict(tokens=1, heads=rows, tok_stride=sh.qb, head_stride=sh.db)
                    q = sp["Q"] + (kvh * sh.gqa + j0) * sh.db
                    b.ex(n, isa.AttnQ, what=self.query_load(rn, kvh, pos), spad=q, qpos0=pos, **rr)
                    if self.lw.attention == "array":
                        # the other row groups' MAX passes used the score rows since: GEMM_QK again
                        self.array_apply(n, rn, kvh, q, rr, pos, mref=sp["MGLOB"] + i * mb, rescore=True)
                    else:
                        b.ex(n, isa.AttnQ, what=AttnLoad.MREF, spad=sp["MGLOB"] + i * mb, qpos0=0, **rr)
                    for k, r in enumerate(rn if self.lw.attention != "array" else ()):
                        self.attn_kv(n, r, kvh, AttnPass.APPLY, k == 0)
                    b.ex(n, isa.AttnEmit, mode=isa.EmitMode.STATE, spad=sp["SLOC"] + i * sbk, **rr)
                sbuf = self.buf("state", n)
                st_s[n] = b.ex(n, isa.Store, sbuf.write_deps(), ddr=self.region(n, "net.state"), spad=sp["SLOC"],
                               beats=len(self.rgroups) * sbk, row_beats=0)
                sbuf.wrote(st_s[n])
                if n != root:
                    for i, (kvh, j0, rows) in enumerate(self.rgroups):
                        sbuf.read(b.send(n, [root], [st_s[n]], credits=False,
                                         ddr=self.region(n, "net.state") + i * sbk * sh.vl * 4,
                                         length=rows * (sh.d + 2) * 4, stage=Stage.DECODE, mop=Op.PARTIAL_STATE,
                                         collective=Collective.REDUCE, reduce_op=ReduceOp.SOFTMAX_MERGE, dst=root,
                                         route_id=route_r, tag=tags_s[i], seq=seq))
            srb = self.buf("sres", root)
            arr_s = []
            for i, (kvh, j0, rows) in enumerate(self.rgroups):
                a = b.recv(root, root, tags_s[i], self.region(root, "net.sres") + i * sbk * sh.vl * 4,
                           rows * (sh.d + 2) * 4, srb.write_deps() if i == 0 else (), credit_route=None,
                           result_of_reduce=True)
                arr_s.append(a)
                self.buf("state", root).read(b.send(root, [root], [st_s[root], b.posted(a)], credits=False,
                                                    ddr=self.region(root, "net.state") + i * sbk * sh.vl * 4,
                                                    length=rows * (sh.d + 2) * 4, stage=Stage.DECODE,
                                                    mop=Op.PARTIAL_STATE, collective=Collective.REDUCE,
                                                    reduce_op=ReduceOp.SOFTMAX_MERGE, dst=root, route_id=route_r,
                                                    tag=tags_s[i], seq=seq))
            ld = b.ex(root, isa.Load, arr_s, ddr=self.region(root, "net.sres"), spad=sp["SGLOB"],
                      beats=len(self.rgroups) * sbk, row_beats=0)
            srb.wrote(arr_s[-1])
            srb.read(ld)
            for i, (kvh, j0, rows) in enumerate(self.rgroups):
                rr = dict(tokens=1, heads=rows, tok_stride=sh.qb, head_stride=sh.db)
                off = (kvh * sh.gqa + j0) * sh.db
                b.ex(root, isa.AttnQ, what=AttnLoad.ROWS, spad=0, qpos0=pos, **rr)
                b.ex(root, isa.AttnQ, what=AttnLoad.STATE, spad=sp["SGLOB"] + i * sbk, qpos0=0, **rr)
                b.ex(root, isa.AttnEmit, mode=isa.EmitMode.FINAL, spad=sp["A"] + off, **rr)
            self.back(root, li, 1)
        self.head(root, 0)
        self._check_routes()
        return b.programs()
