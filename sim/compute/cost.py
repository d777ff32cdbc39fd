"""Cycle costs of the compute units, read off the RTL (and checked against simulation by
tests/sim/compute/test_cost.py), and the cost of one decoder layer built from them, for the
engine of a ``mcf.spec.node.NodeConfig`` (MAC array ``mac_rows`` x ``mac_lanes``, tokens per
weight pass, vector / KV-writer lanes, attention rows).

Every unit here runs one job at a time and the layer schedule below runs the units one after
another (no overlap between units): an upper bound, as the real engine would overlap the
vector work of one row with the GEMM of the next.
"""
from __future__ import annotations

import math
from mcf.hw.compute.attention import key_cycles, max_write_latency, out_words, unit_lanes
from mcf.hw.compute.exec.movers import sm_apply_beats  # noqa: F401 (ATTN_SM APPLY's group, one definition)
from mcf.hw.compute.matrix import MatrixUnit
from mcf.spec.node import NodeConfig

MATRIX_LATENCY = 7     # issue -> products -> partial -> scale -> accumulate -> requant -> o


def matrix_cycles(node: NodeConfig, tokens: int, n: int, out: int, mac_utilization: float = 1.0) -> float:
    """One linear layer: every weight beat is held for min(T, max_tokens) cycles;
    ``mac_utilization`` is the measured steady-state issue rate (``mcf bench compute``)."""
    passes = math.ceil(tokens / node.max_tokens)
    issue = 0
    for p in range(passes):
        t = min(node.max_tokens, tokens - p * node.max_tokens)
        issue += math.ceil(out / node.mac_rows) * math.ceil(n / node.mac_lanes) * t
    return issue / mac_utilization + passes * MATRIX_LATENCY


#: The vector unit's pipeline (hw/compute/vector.py): cycles a row takes beyond its passes' n / lanes
#: issue cycles (simulated, tests/sim/compute/test_cost.py) -- SILU, RESIDUAL 7 (the X32 emit);
#: the ops with a product pass 21 (product pass 11, normalized emit 10); RMSNORM 41 (those 21, the
#: row max settling after the load 6, the sum of squares 7, rsqrt 8 cycles instead of 1).
VECTOR_EXTRA = {"SILU": 7, "RESIDUAL": 7, "RMSNORM": 41}


def vector_cycles(op: str, n: int, lanes: int = 1) -> int:
    """cmd + load [+ sum of squares + rsqrt] [+ product pass] + emit, n / lanes beats each, and
    each pass's pipeline latency (``VECTOR_EXTRA``; 11 + 10 for the ops with a product pass)."""
    b = math.ceil(n / lanes)
    extra = VECTOR_EXTRA.get(op, 11 + 10)
    if op in ("SILU", "RESIDUAL"):
        return 1 + 2 * b + extra
    if op == "RMSNORM":
        return 2 + 4 * b + extra
    return 1 + 3 * b + extra


def kv_writer_cycles(d: int, lanes: int) -> int:
    """Cycles between blocks (one head's row of d values on ``lanes`` lanes) the KV writer takes in
    a steady stream: its beats plus the collector/emitter hand-over (hw/compute/kv_writer.py); a
    block's own latency after its last beat (12 cycles) overlaps the next block."""
    beats = math.ceil(d / lanes)
    return beats + 4


def attention_cycles(keys: int, rows: int, d: int, final: bool = True, lanes: int = 0) -> int:
    """MAX pass, APPLY pass and emit of the attention unit at ``lanes`` (``NodeConfig.att_lanes``; 0:
    its default folding; ``c`` = d / lanes cycles per key pair's scores and per key's P.V; exact
    for c >= 4), keys always valid,
    each from its command: MAX 18 + c ceil(S / 2), + 2 for an even S (the pair's second key, the
    post's second cycle) or + 1 for an odd S > 1; APPLY 30 + c (S + 1), + 1 for S > 1; emit
    rows d + 16 (FINAL: the reciprocals computed ahead) or rows (d + 2) + 9 (STATE)."""
    c = d // unit_lanes(d, lanes)
    mx = 18 + c * -(-keys // 2) + (2 if keys % 2 == 0 else int(keys > 1))
    ap = 30 + c * (keys + 1) + int(keys > 1)
    return mx + ap + (rows * d + 16 if final else rows * (d + 2) + 9)


def attn_kv_cycles(keys: int, d: int, lanes: int, apply: bool) -> int:
    """One ATTN_KV pass (the ISA cost model): the execute unit streams a key a cycle at best, + 2
    (MAX) or + 4 (APPLY); the attention unit takes its keys at its steady rate (``key_cycles`` at
    ``unit_lanes(d, lanes)``: MAX c / 2, APPLY c cycles a key, c = d / lanes) -- the slower of them."""
    mx, ap = key_cycles(d, unit_lanes(d, lanes))
    return math.ceil(keys * (ap if apply else mx)) + (4 if apply else 2)


#: ATTN_Q O's and ATTN_EMIT's cycles beyond their words (the execute unit in simulation,
#: tests/hw/compute/exec/test_softmax.py ``run_o_emit``): O the decode, the SPAD read latency and the
#: unit's write-back pipeline; FINAL the first row's reciprocal and the emit pipeline; STATE / MAX
#: the emit pipeline.  (The decode: the execute unit's ``SETUP_CYCLES`` = 2 of them since its decode
#: was registered, docs/timing.md.)
ATTN_O_START, ATTN_EMIT_START = 13, {"FINAL": 21, "STATE": 14, "MAX": 14}


def attn_o_cycles(rows: int, d: int, vl: int) -> int:
    """ATTN_Q O (``AttnMover``): rows x d / W cycles, W = ``out_words(d, vl)`` words a cycle into the
    unit's o (one SPAD beat a cycle when W = VL) + ``ATTN_O_START``."""
    return rows * d // out_words(d, vl) + ATTN_O_START


def attn_query_cycles(rows: int, d: int, vl: int) -> int:
    """ATTN_Q QUERY (``AttnMover``): rows x d / W cycles, W = ``out_words(d, vl)`` mantissas a cycle
    into the unit's query memory (one SPAD beat a cycle when W = VL, as at Qwen)."""
    return rows * max(1, d // out_words(d, vl))


#: ATTN_Q ROWS beyond its tokens (the execute unit in simulation, tests/hw/compute/exec/test_softmax.py).
ATTN_ROWS_START = 6


def attn_rows_cycles(tokens: int) -> int:
    """ATTN_Q ROWS (``AttnMover``): no SPAD read, a token's rows' positions a cycle + ``ATTN_ROWS_START``."""
    return tokens + ATTN_ROWS_START


def attn_emit_cycles(mode, rows: int, d: int, vl: int) -> int:
    """ATTN_EMIT: FINAL rows x d / W cycles (W words a transfer, ``out_words``), STATE rows x (d + 2)
    and MAX rows (a word a cycle), + ``ATTN_EMIT_START``."""
    from mcf.spec.isa import EmitMode
    mode = EmitMode(mode)
    words = {EmitMode.FINAL: rows * d // out_words(d, vl), EmitMode.STATE: rows * (d + 2), EmitMode.MAX: rows}
    return words[mode] + ATTN_EMIT_START[mode.name]


#: ATTN_SM's start beyond its groups (the execute unit in simulation, tests/hw/compute/exec/test_softmax.py):
#: the decode (2 cycles of it the execute unit's ``SETUP_CYCLES``) and, for MAX, the SPAD read latency (+ the
#: unit's row-maxima pipeline, ``max_write_latency(banks VL)``: 14 in all at 8 words a read, 16 at Qwen's 32); for APPLY, the
#: first group's R beats, the unit's post pipeline (17 cycles), the first V scale word from DDR and the last
#: group's R w beats written back.
SOFTMAX_START = {"MAX": 9, "APPLY": 34, "DEFER": 5}


def softmax_pass_cycles(keys: int, rows: int, vl: int, apply: bool, banks: int = 1, apply_beats: int = 1,
                        w_wide: bool = True, defer: bool = False) -> int:
    """One ATTN_SM (``hw/compute/exec/movers.py`` ``AttnMover``): MAX reads each row's scores
    ``banks`` (the SPAD's, ``spad_banks``: mac_lanes / VL) beats at once, one read a cycle, straight
    into the attention unit's row maxima (``mx``: banks x VL scores of a row a cycle), so R cycles per
    banks x VL keys: R / (banks VL) a key (0.19 at R = 6, VL = 8, 4 banks).  APPLY: per group of
    k <= G = ``apply_beats`` x VL keys (``sm_apply_beats``; the last group what is left)
    max(R, k, ceil((R + k + 2) / 2), writes) cycles -- R reads of the group's beats of a row (one a
    cycle, the SPAD's wide read) into one of two transpose buffers, k keys into the unit's post (one
    a cycle), a buffer refilled only once its keys have left (2 cycles of SPAD read latency); the w
    rows go back the same way on the write port: writes = R (one wide write a row when ``w_wide``:
    the instruction's w and w_stride multiples of apply_beats) or R x the group's beats.
    Plus ``SOFTMAX_START`` (MAX: + ``max_write_latency(banks VL)``).  MAX with ``defer`` reads
    nothing: ``SOFTMAX_START["DEFER"]`` (the decode); the row maxima are taken as the next GEMM_QK
    writes its score words, within its cycles."""
    if defer and not apply:
        return SOFTMAX_START["DEFER"]
    groups = -(-keys // vl)
    if apply:
        ab = apply_beats

        def group(beats: int) -> int:
            k = beats * vl
            return max(rows, k, -(-(rows + k + 2) // 2), rows * (1 if w_wide else beats))
        full, part = divmod(groups, ab)
        return full * group(ab) + (group(part) if part else 0) + SOFTMAX_START["APPLY"]
    return -(-groups // banks) * rows + SOFTMAX_START["MAX"] + max_write_latency(banks * vl)


#: DIR's cycles beyond one a directory entry (the execute unit in simulation,
#: tests/hw/compute/exec/test_movers.py ``run_attention``): the dispatch and the decode (2 cycles of it
#: the execute unit's ``SETUP_CYCLES``); check also the last lookup's answer (the directory's read latency).
DIR_START = {"write": 5, "check": 6}


def dir_cycles(count: int, check: bool) -> int:
    """One DIR (``hw/compute/exec/movers.py`` ``DirMover``): a directory entry a cycle (written, or
    looked up for check) + ``DIR_START`` (a write waits besides while the receive engine writes)."""
    return count + DIR_START["check" if check else "write"]


def layer_cycles(cfg, tokens: int, context: int, node: NodeConfig = NodeConfig(),
                 mac_utilization: float = 1.0) -> dict:
    """Cycles of one decoder layer of model ``cfg`` on the engine of ``node``, for ``tokens`` new
    tokens attending over ``context`` keys (prefill chunk: tokens = chunk, context = past +
    chunk; decode: tokens = 1)."""
    h, d, hq, hkv, inter = (cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads,
                            cfg.intermediate_size)
    T = tokens
    group = hq // hkv
    def mc(n, out):
        return matrix_cycles(node, T, n, out, mac_utilization)

    gemm = mc(h, hq * d) + 2 * mc(h, hkv * d) + mc(hq * d, h) + 2 * mc(h, inter) + mc(inter, h)
    L = node.vec_lanes

    def vc(op, n):
        return vector_cycles(op, n, L)

    vec = T * (2 * vc("RMSNORM", h) + 2 * vc("RESIDUAL", h)
               + (hq + 2 * hkv) * vc("TO_BFP", d) + (hq + hkv) * vc("ROPE", d)
               + hq * vc("PRESCALE", d) + vc("TO_BFP", hq * d)
               + vc("SILU", inter) + 2 * vc("TO_BFP", inter) + vc("MUL", inter))
    kv = T * 2 * hkv * kv_writer_cycles(d, node.kv_lanes)
    tok_per_job = max(1, node.att_rows // group)
    jobs = hkv * math.ceil(T / tok_per_job)
    att = jobs * attention_cycles(context, min(node.att_rows, group * T), d, lanes=node.att_lanes)
    total = gemm + vec + kv + att
    return {"gemm": round(gemm), "vector": vec, "kv_writer": kv, "attention": att,
            "total": round(total)}


FORMULA = ("cycles/layer ~= T * P_layer / (mac_rows * mac_lanes * util)  [GEMM, P_layer = weights per layer]"
           " + T * (10 h + 7 inter + (4 Hq + 3 Hkv) * 3 d + 3 Hq d) / vec_lanes  [vector]"
           " + 2 T Hkv (2 d / kv_lanes + 1)  [KV writer]"
           " + Hkv * ceil(T / (att_rows / group)) * (c (3 S / 2 + 1) + att_rows d + 64)  [attention, c = d / lanes]")


def matrix_for(node: NodeConfig, max_inputs: int = 256, max_tiles: int = 64) -> MatrixUnit:
    return MatrixUnit(node.mac_rows, node.mac_lanes, node.max_tokens, max_inputs, max_tiles)
