"""The MCF node instruction set: what the sequencer executes (MCF section 5, Fig. 2).

A *program* is an array of 256-bit instructions in the node's DDR (``INSTR_BYTES`` each,
little-endian, at PROG_BASE).  The sequencer fetches them in order and dispatches each to
one of three in-order queues, decoupled as in VTA / Gemmini so that weight streaming,
compute and KV propagation overlap:

* ``EX`` (execute): LOAD, STORE, EMBED, GEMM, VEC, ATTN_*, KVW, DIR, END.  One instruction at a
  time; it completes when its last result is written (DDR writes acknowledged).
* ``TX`` (transmit): SEND, CREDIT.  Packets leave through the packetizer and the NIC.
* ``RX`` (receive): RECV posts a receive buffer; arrivals complete it later.

**Dependencies** are counting semaphores (``NUM_SEMS`` of them, 16-bit, zero at start).  Every
instruction may *wait* (issue only when ``sem[wait_sem] >= wait_cnt``, which then decreases by
``wait_cnt``; ``wait_cnt = 0`` means no wait) and *signal* (``sem[sig_sem] += 1`` when it
completes, if ``sig``).  Semaphores are also incremented by RECV arrivals (``done_sem``) and by
CREDIT packets from other nodes, so one mechanism orders the queues of one node and the
nodes of the cluster.  SYNC only waits and signals.

**Memories.**  DDR addresses in instructions are byte addresses, multiples of ``DDR_ALIGN`` =
64 (fields hold address / 64); every address range must lie inside the DMA window, else the
node faults.  The *scratchpad* (SPAD) is the node's on-chip activation memory: ``beats`` of
``VL`` 32-bit words (VL = the node's vector lanes, NodeConfig) plus one signed 8-bit
exponent per beat.  SPAD addresses count beats.  A *row* of n elements is n / VL consecutive
beats.  X32 rows hold int32 values (exponent 0); BFP16 rows hold int16 mantissas
sign-extended to 32 bits, and every beat of the row carries the row exponent (a BFP16 read
takes the low 16 bits of each word and the exponent of the row's first beat).  An instruction
reads all its operands before it writes, so a destination may be its source.  The formats
and arithmetic are docs/fixed-point.md's (golden model ``mcf.sw.golden.fixed``), bit for bit.

**Network.**  SEND reads ``length`` bytes at ``ddr`` and sends them as packets of at most the
node's maximum payload (the last may be shorter; ``length = 0`` sends one header-only
packet), each with a Meta built from the instruction (``src`` = this node, ``kv_id`` = the
instruction's ``tag``).  A receiver matches a delivered data packet to a posted RECV by its
``kv_id`` (the tag) and appends the payload at the RECV's address; when ``length`` bytes have
arrived the RECV is complete and ``sem[done_sem]`` increments.  A tag names one message
per receiver at a time: the lowering keeps tags of concurrently posted RECVs distinct.  A
packet for which no RECV is posted waits (bounded, the RX_WAIT register) and is then dropped
and counted; a packet longer than the posted buffer is dropped and counted.  So that a
sender never has to rely on the timing of a receiver, RECV can send a CREDIT to the sender
when it is posted (rendezvous): the sender's SEND waits for it.  Delivered control packets act
on the node: CREDIT adds ``seq`` to ``sem[kv_id]``; KV_DRAIN / KV_INVALIDATE set the replica
directory entry ``kv_id`` to DRAINING / INVALID.

**Faults.**  An illegal instruction (unknown opcode, reserved bits set, a field out of range
for this node's build), an address outside the DMA window, a token id outside the embedding
table, a gated ATTN key or a DIR check in an unreadable block, a semaphore overflow, or a
counted network error whose cause is enabled in FAULT_MASK stops the node with STATUS.fault and
the cause; nothing hangs (the runtime's waits are bounded and the WATCHDOG register bounds a stall).
"""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

from .bits import BitLayout, Field, SpecError
from .fixed import POS_BITS, W_MAX
from .kv import KV_ALIGN
from .packet import KV_ID_BITS, NODE_BITS, ROUTE_ID_BITS, SEQ_BITS, Collective, Op, ReduceOp, Stage
from .plan import REPLICA_STATE_BITS, ReplicaState

INSTR_BITS = 256
INSTR_BYTES = INSTR_BITS // 8
INSTR_WORDS = INSTR_BITS // 32
#: Instruction DDR addresses are multiples of this (fields hold address // DDR_ALIGN).
DDR_ALIGN = KV_ALIGN
DDR_ADDR_BITS = 48
DDR_FIELD_BITS = DDR_ADDR_BITS - (DDR_ALIGN.bit_length() - 1)
SEM_BITS = 5
NUM_SEMS = 1 << SEM_BITS
SEM_MAX = (1 << 16) - 1
SPAD_BITS = 20
TAG_BITS = KV_ID_BITS


class Opcode(enum.IntEnum):
    """Instruction opcodes.  0 is not an opcode: zeroed memory faults instead of running."""
    END = 1        # EX: the program ends once every queue has drained (no SEND in flight, no RECV outstanding)
    SYNC = 2       # any queue: wait and/or signal only
    LOAD = 3       # EX: DDR -> SPAD
    STORE = 4      # EX: SPAD -> DDR
    EMBED = 5      # EX: token ids -> X32 embedding rows
    GEMM = 6       # EX: BFP16 rows x INT4 matrix -> X32 rows
    VEC = 7        # EX: row-wise vector operation
    ATTN_Q = 8     # EX: attention unit: load query rows / a reference maximum / states
    ATTN_KV = 9    # EX: attention unit: MAX or APPLY pass over a run of KV segments in DDR
    ATTN_EMIT = 10  # EX: attention unit: write final rows, states or maxima to SPAD
    KVW = 11       # EX: BFP16 K/V rows -> KV4 segment in DDR
    DIR = 12       # EX: replica directory update
    SEND = 13      # TX: DDR bytes -> packets
    CREDIT = 14    # TX: header-only CREDIT packet (remote semaphore increment)
    RECV = 15      # RX: post a receive buffer
    # --- attention on the MAC array (docs/attention-array.md) ---
    ATTN_SM = 16   # EX: attention unit: softmax pass (MAX / APPLY) over score rows in SPAD -> w rows
    GEMM_PV = 17   # EX: attention PV on the MAC array: softmax weight rows x a run of V segments -> o rows
    GEMM_QK = 18   # EX: attention scores QK^T on the MAC array: query rows x a run of K segments -> score rows


class Queue(enum.IntEnum):
    EX = 0
    TX = 1
    RX = 2


QUEUE_OF = {Opcode.END: Queue.EX, Opcode.LOAD: Queue.EX, Opcode.STORE: Queue.EX,
            Opcode.EMBED: Queue.EX, Opcode.GEMM: Queue.EX, Opcode.VEC: Queue.EX,
            Opcode.ATTN_Q: Queue.EX, Opcode.ATTN_KV: Queue.EX, Opcode.ATTN_EMIT: Queue.EX,
            Opcode.KVW: Queue.EX, Opcode.DIR: Queue.EX, Opcode.ATTN_SM: Queue.EX, Opcode.GEMM_PV: Queue.EX,
            Opcode.GEMM_QK: Queue.EX,
            Opcode.SEND: Queue.TX, Opcode.CREDIT: Queue.TX, Opcode.RECV: Queue.RX}


class VecOp(enum.IntEnum):
    """VEC operations (golden function in brackets; a, b are the operand rows)."""
    TO_BFP = 0     # X32 a -> BFP16                        [x32_to_bfp]
    RMSNORM = 1    # X32 a, gains b (int16 words) -> BFP16  [rmsnorm]; imm0 = EPS_N, imm1 = gain exponent
    SILU = 2       # X32 a -> X32                           [silu]
    MUL = 3        # BFP16 a, BFP16 b -> BFP16               [bfp_mul]
    ROPE = 4       # BFP16 head a, b = (cos | sin << 16) words -> BFP16 head [rope]; b_pair = 1;
                   # b word i rotates element i (the table repeats the d/2 pairs)
    PRESCALE = 5   # BFP16 a -> BFP16 (x C_M 2^-C_E)         [prescale_query]; imm0 = C_M, imm1 = C_E
    RESIDUAL = 6   # X32 a, X32 b -> sat32(a + b)


class AttnLoad(enum.IntEnum):
    """What ATTN_Q loads into the attention unit, which holds R query rows and per row m, l, o[d]."""
    QUERY = 0      # R = tokens x heads query rows (BFP16, prescaled) and their positions; empties every
                   # row's state (m = M_EMPTY, l = o = 0)
    MREF = 1       # m[r] = SPAD word r (a global maximum after a MAX reduction)
    STATE = 2      # (m, l, o) of every row <- STATE words (a merged state, to finalize)
    O = 3          # o of row (t, j) <- head_dim int32 words at spad + t tok_stride + j head_stride (a GEMM_PV
                   # product); m, l untouched
    ROWS = 4       # R = tokens x heads rows at positions qpos0 + t, every row's state emptied as QUERY does, no
                   # SPAD read and no query data: the unit holds none until the next QUERY (ATTN_KV, which
                   # needs it, is refused: ILLEGAL_INSTRUCTION); the array path's rows (GEMM_QK reads them)


class AttnPass(enum.IntEnum):
    """ATTN_KV passes over a run of KV segments; a key is visible to row r iff its position
    <= the row's position and (not gated or its directory block is readable)."""
    MAX = 0        # m[r] = max(m[r], visible scores); first = 1 resets m to INT32_MIN first
    APPLY = 1      # p = exp2(s - m[r]) on visible keys: l[r] += p, o[r] += w v; first = 1 zeroes l, o
                   # (l and o accumulate exactly over passes; ATTN_EMIT saturates them to int32)


class EmitMode(enum.IntEnum):
    FINAL = 0      # per row: d X32 words, finalize(m, l, o) [fixed.finalize]
    STATE = 1      # per row: d + 2 words [m, sat32(l), sat32(o_0) ..] [fixed.encode_state]
    MAX = 2        # per row: 1 word, m


class SeqFault(enum.IntEnum):
    """Why a node stopped (STATUS / SEQ_STATUS.fault_cause)."""
    NONE = 0
    ILLEGAL_INSTRUCTION = 1   # unknown opcode, reserved bits set, field out of range for this build
    OUT_OF_WINDOW = 2         # an instruction's DDR range leaves the DMA window
    ILLEGAL_TOKEN = 3         # EMBED token id >= vocab
    UNREADABLE_BLOCK = 4      # gated ATTN_KV or DIR check over a block the directory marks INVALID
    SEM_OVERFLOW = 5          # a semaphore passed SEM_MAX
    PROGRAM_OVERRUN = 6       # PROG_COUNT instructions fetched without END
    NETWORK = 7               # a network error counter whose cause is enabled in FAULT_MASK
    WATCHDOG = 8              # nothing retired and nothing moved for WATCHDOG cycles
    AXI_ERROR = 9             # DDR answered SLVERR / DECERR
    ABORTED = 10              # the PS wrote SEQ_CONTROL.abort


class PerfCounter(enum.IntEnum):
    """64-bit performance counters (PERF_INDEX / PERF_LO / PERF_HI), cleared at start."""
    CYCLES = 0            # cycles from start to done (or now)
    RETIRED_EX = 1
    RETIRED_TX = 2
    RETIRED_RX = 3
    BUSY_GEMM = 4         # cycles an instruction of this kind is executing
    BUSY_VEC = 5
    BUSY_ATTN = 6         # ATTN_Q, ATTN_KV, ATTN_EMIT
    BUSY_KVW = 7
    BUSY_EMBED = 8
    BUSY_LDST = 9
    MAC_BEATS = 10        # matrix issue cycles (weight beat x token): MACs = MAC_BEATS x rows x lanes
    STALL_EX_SEM = 11     # cycles the queue head waits on its semaphore
    STALL_TX_SEM = 12
    STALL_RX_SEM = 13
    STALL_EX_DDR = 14     # cycles an EX unit is busy but starved of DDR data
    STALL_TX_NET = 15     # cycles TX is blocked by the packetizer / NIC
    STALL_RX_SLOT = 16    # cycles a RECV waits for a free receive slot
    DDR_RD_BYTES = 17
    DDR_WR_BYTES = 18
    NET_TX_BYTES = 19     # payload bytes handed to the NIC
    NET_RX_BYTES = 20     # payload bytes delivered to posted receives
    STALL_FETCH = 21      # cycles dispatch waits for instruction words
    HP0_RD_BYTES = 22     # bytes read / written on each AXI4 master into the DDR (HP port p)
    HP0_WR_BYTES = 23
    HP1_RD_BYTES = 24
    HP1_WR_BYTES = 25
    HP2_RD_BYTES = 26
    HP2_WR_BYTES = 27
    HP3_RD_BYTES = 28
    HP3_WR_BYTES = 29
    HP4_RD_BYTES = 30     # HP port 4: S_AXI_HPC0_FPD on the KR260
    HP4_WR_BYTES = 31


#: Most AXI4 masters a node has into the DDR: the KR260's PS takes PL masters on four HP ports
#: (S_AXI_HP0..3_FPD) and, through its coherent interconnect, two HPC ports; a node uses HP0..3
#: and HPC0 (its HP port 4; docs/node.md "HP ports").
MAX_HP_PORTS = 5


# --- the layouts ------------------------------------------------------------------------------
HEADER_FIELDS = [
    Field("op", 6, "Opcode.", enum=Opcode),
    Field("wait_sem", SEM_BITS, "Semaphore to wait on."),
    Field("wait_cnt", 6, "0: no wait; else issue when sem[wait_sem] >= wait_cnt and subtract it."),
    Field("sig_sem", SEM_BITS, "Semaphore incremented on completion (if sig)."),
    Field("sig", 1, "1: sem[sig_sem] += 1 when the instruction completes."),
    Field("hres", 9, "Must be zero.", reserved=True),
]


def _ddr(name: str, doc: str) -> Field:
    return Field(name, DDR_FIELD_BITS, doc + " (byte address / 64).")


def _spad(name: str, doc: str) -> Field:
    return Field(name, SPAD_BITS, doc + " (SPAD beat address).")


def _layout(op: Opcode, doc: str, operands: list[Field]) -> BitLayout:
    used = sum(f.width for f in HEADER_FIELDS) + sum(f.width for f in operands)
    rest = [Field("res", INSTR_BITS - used, "Must be zero.", reserved=True)] if used < INSTR_BITS else []
    return BitLayout(op.name, HEADER_FIELDS + operands + rest, total_bits=INSTR_BITS, doc=doc)


LAYOUTS: dict[Opcode, BitLayout] = {}


def _reg(op, doc, operands):
    LAYOUTS[op] = _layout(op, doc, operands)
    return LAYOUTS[op]


_reg(Opcode.END, "End of program: completes when every queue has drained; STATUS.done, IRQ.", [])
_reg(Opcode.SYNC, "Wait and/or signal in the named queue; no other effect.", [
    Field("on", 2, "Queue it runs in.", enum=Queue)])
_LDST = [
    _ddr("ddr", "DDR address"),
    _spad("spad", "First SPAD beat"),
    Field("beats", 20, "SPAD beats moved (> 0)."),
    Field("row_beats", 12, "0: plain words. > 0: BFP rows of row_beats beats, each followed in DDR "
                           "by one beat whose word 0 is the row exponent, the others zero "
                           "(beats % row_beats == 0)."),
]
_reg(Opcode.LOAD, "DDR -> SPAD.  Plain: word k of beat i from ddr + 4 (i VL + k), exponent 0.  "
                  "BFP rows: each row's beats get the exponent word that follows it (its low 8 bits, "
                  "two's complement).",
     _LDST)
_reg(Opcode.STORE, "SPAD -> DDR, the layout of LOAD (BFP rows: the exponent of the row's first beat).",
     _LDST)
_reg(Opcode.EMBED, "Embedding rows: for t < count, id = int32 at ids + 4t; X32 row "
                   "sat32(rshr(q S, w_exp - 16)) of table row id (embed_row_bytes layout) -> "
                   "SPAD dst + t dst_stride.", [
    _ddr("ids", "Token ids (int32, little-endian)"),
    Field("count", 10, "Tokens (> 0, <= the node's max tokens)."),
    _ddr("table", "Embedding table (embed_row_bytes(n, G) bytes per row)"),
    Field("vocab", 20, "Rows in the table; an id >= vocab faults."),
    Field("n", 16, "Row length (hidden size, multiple of VL)."),
    Field("group_log2", 4, "log2 of the weight group size G."),
    Field("w_exp", 8, "Matrix exponent E_w.", signed=True),
    _spad("dst", "First output row"),
    Field("dst_stride", 16, "Beats between output rows."),
])
_reg(Opcode.GEMM, "BFP16 rows x INT4 matrix -> X32 rows (golden linear).  Output word "
                  "(tile - tile0) P + p of token t goes to SPAD word (dst + t dst_stride) VL + "
                  "(tile - tile0) P + p.", [
    _ddr("blob", "Matrix blob (gemm_blob layout: weights, scales, bias regions)"),
    Field("n", 16, "Inputs (multiple of G; G multiple of the MAC lanes K)."),
    Field("total_tiles", 16, "Tiles of P rows in the blob (ceil(out / P))."),
    Field("tile0", 16, "First tile computed."),
    Field("tiles", 16, "Tiles computed (> 0)."),
    Field("tokens", 10, "Activation rows T (> 0, <= max tokens)."),
    Field("group_log2", 4, "log2 of the group size G."),
    Field("w_exp", 8, "Matrix exponent E_w.", signed=True),
    Field("bias", 1, "Add the blob's bias (X32, saturating)."),
    _spad("src", "First activation row (BFP16, n / VL beats)"),
    Field("src_stride", 16, "Beats between activation rows."),
    _spad("dst", "First output row"),
    Field("dst_stride", 16, "Beats between output rows."),
])
# --- GEMM_QK (attention scores on the MAC array, docs/attention-array.md step 1) -----------------------
def block_run_ok(block_keys: int, first_key: int, keys: int, head_dim: int, bus_bytes: int, word_bytes: int,
                 scales: bool = True) -> bool:
    """Whether the execute unit reads ``keys`` keys of a run of KV blocks from key ``first_key`` on
    (GEMM_QK: tile0 P and tiles P, with the K scale words; GEMM_PV: 0 and keys, rows only, block_keys =
    keys when its field is 0).  It streams each block's rows (head_dim / 2 bytes a key) as DMA
    descriptors and (``scales``) its scale words as read requests, back to back, so: the first key's
    row and scale word start on a bus beat (``bus_bytes``, data_width / 8), and when the keys span
    several blocks every block's rows are whole words of the weight stream (``word_bytes`` =
    weight_ports x weight_ratio x bus bytes: 128 at the KR260 node, 8 at the tiny one), the first
    block's piece too, and its scale words whole bus beats.  At Qwen2.5-1.5B (64-byte rows, 16-byte
    beats) that is block_keys a multiple of 8 when a run spans blocks (16-token chunks pass)."""
    if block_keys < 1:
        return False
    row = head_dim // 2
    o = first_key % block_keys
    if (o * row) % bus_bytes or (scales and (2 * o) % bus_bytes):
        return False
    if o + keys > block_keys:
        if (block_keys * row) % word_bytes or (o * row) % word_bytes:
            return False
        if scales and (2 * block_keys) % bus_bytes:
            return False
    return True


_BLOCK_RUN = "key j of the run is token j mod block_keys of block j // block_keys, whose segment is at "\
             "seg + (j // block_keys) seg_stride (bytes / 64)"
_reg(Opcode.GEMM_QK, "Attention scores (golden scores) on the MAC array: the matrix is a run of K "
                     "segments (spec/kv.py), " + _BLOCK_RUN + "; key p of tile i is key i P + p, "
                     "output row p of that tile (one group of head_dim, scale A_p, its own exponent: "
                     "s = sat32(rshr(dot A_p, -(e + E_p + 12))), no bias).  The activation rows are "
                     "(t, h) for t < tokens, h < heads at src + t src_stride + h head_stride (BFP16, "
                     "head_dim / VL beats), row r = t heads + h (tokens x heads <= max tokens); score "
                     "(tile - tile0) P + p of row r -> SPAD word (dst + r dst_stride) VL + (tile - tile0) "
                     "P + p.  Every key of the tiles computed must lie in a written segment region (the "
                     "KV pool rounds its blocks up to whole tiles; keys past the last token a program "
                     "wrote are read as they lie in DDR and must be invisible to every row).  The execute "
                     "unit refuses (ILLEGAL_INSTRUCTION) a run that block_run_ok(block_keys, tile0 P, "
                     "tiles P, head_dim, bus bytes, weight word bytes) rejects: whole bus beats / weight "
                     "words per block when the tiles span blocks.", [
    _ddr("seg", "K segment of the run's first block"),
    Field("seg_stride", 26, "Bytes / 64 between the K segments of consecutive blocks (any when one block)."),
    Field("block_keys", 16, "Tokens per block (the segments' n, > 0)."),
    Field("tile0", 16, "First key tile computed."),
    Field("tiles", 16, "Key tiles computed (> 0)."),
    Field("tokens", 10, "Tokens T (> 0)."),
    Field("heads", 6, "Query heads per token (> 0; tokens x heads <= max tokens)."),
    Field("head_stride", 16, "Beats between the heads of one token."),
    _spad("src", "First query row (BFP16, head_dim / VL beats)"),
    Field("src_stride", 16, "Beats between tokens' query rows."),
    _spad("dst", "First score row"),
    Field("dst_stride", 16, "Beats between score rows."),
])
# --- GEMM_PV (attention PV on the MAC array, docs/attention-array.md step 3) ---------------------------
#: GEMM_PV's weight words are taken as min(w, PV_W_MAX) (fixed.W_MAX: two balanced 16-bit digits).
PV_W_MAX = W_MAX


def gemm_pv_built(rows: int, lanes: int, vl: int, head_dim: int) -> bool:
    """Whether a node with a rows x lanes MAC array, VL and head_dim builds GEMM_PV (else it is an
    ILLEGAL_INSTRUCTION): rows and lanes >= VL, rows divides head_dim, head_dim divides rows x lanes."""
    return rows >= vl and lanes >= vl and head_dim % rows == 0 and (rows * lanes) % head_dim == 0


_reg(Opcode.GEMM_PV, "Attention PV (golden state_sums' o) on the MAC array: the matrix is V^T of a "
                     "run of V segments (spec/kv.py, their rows regions only; block_keys = 0: one "
                     "segment of `keys` tokens at seg; else " + _BLOCK_RUN + "), rows = "
                     "channels c in tiles of P (tile0 .. tile0 + tiles - 1), inputs = keys.  Row r = "
                     "t heads + h (t < tokens, h < heads, tokens x heads <= max tokens) reads `keys` "
                     "int32 weight words w at SPAD beat src + t src_stride + h head_stride (word j = "
                     "key j, taken as min(w, PV_W_MAX)) and gives o[r][c] = sum_j w_j q_v[j][c] "
                     "exactly (+ the previous wide value at dst when acc).  Output element i = (tile "
                     "- tile0) P + p of row r (n_out = tiles P of them) at SPAD row dst + r "
                     "dst_stride: wide = 0: word i = sat32(o); wide = 1: the 64-bit two's complement "
                     "o, its low word at word i and its high word at word n_out + i (acc reads "
                     "that layout at dst; its rows may not overlap: dst_stride >= 2 n_out / VL when "
                     "rows > 1).  Reads all its operands before it writes.  A run the execute unit "
                     "refuses (ILLEGAL_INSTRUCTION): block_run_ok(block_keys or keys, 0, keys, head_dim, "
                     "bus bytes, weight word bytes, scales=False) false.", [
    _ddr("seg", "V segment (of the run's first block)"),
    Field("keys", 16, "Keys of the run (a multiple of the MAC lanes K and of VL, 2 keys / K <= the "
                      "activation buffer's beats; block_keys = 0: the segment's n)."),
    Field("tile0", 8, "First channel tile."),
    Field("tiles", 8, "Channel tiles (> 0, tile0 + tiles <= head_dim / P)."),
    Field("tokens", 10, "Tokens T (> 0)."),
    Field("heads", 6, "Query heads per token (> 0; tokens x heads <= max tokens)."),
    Field("head_stride", 16, "Beats between the weight rows of one token's heads."),
    _spad("src", "First weight row (keys int32 words)"),
    Field("src_stride", 16, "Beats between tokens' weight rows."),
    _spad("dst", "First output row"),
    Field("dst_stride", 16, "Beats between output rows."),
    Field("acc", 1, "1: add the previous wide value at dst (wide layout) to o."),
    Field("wide", 1, "1: write the wide value (2 n_out words a row); 0: sat32 (n_out words)."),
    Field("block_keys", 16, "Tokens per block of the run; 0: one segment of `keys` tokens."),
    Field("seg_stride", 26, "Bytes / 64 between the V segments of consecutive blocks."),
])


_reg(Opcode.VEC, "For r < rows: op(a row r, b row) -> dst row r, rows of n elements.  The b row of "
                 "row r is b + (r // b_rep) b_stride (b_stride 0: one b row for all).", [
    Field("vop", 4, "Operation.", enum=VecOp),
    Field("n", 16, "Elements per row (multiple of VL; ROPE: head_dim, half of it a multiple of VL)."),
    Field("rows", 16, "Rows (> 0)."),
    _spad("a", "First a row"),
    Field("a_stride", 16, "Beats between a rows."),
    _spad("b", "First b row"),
    Field("b_stride", 16, "Beats between b rows."),
    Field("b_rep", 8, "Rows sharing one b row (> 0)."),
    Field("b_pair", 1, "b words are (int16 lo, int16 hi) pairs: ROPE's cos | sin << 16."),
    _spad("dst", "First output row"),
    Field("dst_stride", 16, "Beats between output rows."),
    Field("imm0", 32, "RMSNORM: EPS_N (eps_constant). PRESCALE: C_M."),
    Field("imm1", 16, "RMSNORM: gain exponent E_g. PRESCALE: C_E.", signed=True),
])
_ROWS = [
    Field("tokens", 10, "Tokens T_q; the rows are (t, j), R = tokens x heads <= the unit's state rows (sm_rows)."),
    Field("heads", 8, "Query heads per token (the GQA group)."),
    Field("tok_stride", 16, "Beats between tokens (QUERY, O, FINAL)."),
    Field("head_stride", 16, "Beats between heads of one token (QUERY, O, FINAL)."),
]
_reg(Opcode.ATTN_Q, "Load the attention unit (AttnLoad).  QUERY: row (t, j) = the BFP16 row at "
                    "spad + t tok_stride + j head_stride (head_dim / VL beats), position qpos0 + t.  "
                    "MREF: R words from spad.  STATE: R x (head_dim + 2) words from spad.  O: o of row (t, j) "
                    "= head_dim int32 words at spad + t tok_stride + j head_stride (m, l untouched).  ROWS: as QUERY "
                    "without reading SPAD or loading query data (ATTN_KV refused until the next QUERY).", [
    Field("what", 3, "What to load.", enum=AttnLoad),
    _spad("spad", "Source (row (0, 0) or first word)"),
    *_ROWS,
    Field("qpos0", POS_BITS, "QUERY, ROWS: position of the first token."),
])
_reg(Opcode.ATTN_KV, "A pass over a run of `blocks` KV blocks: block i's K segment at seg + i "
                     "seg_stride 64, its V segment v_off 64 further, `keys` tokens each, key j of "
                     "block i at position kpos0 + i pos_stride + j, directory id block0 + i "
                     "block_stride.  The last QUERY's rows must be at most att_rows (the rows with "
                     "products) and no ROWS after it, else ILLEGAL_INSTRUCTION.", [
    Field("phase", 1, "Which pass.", enum=AttnPass),
    _ddr("seg", "K segment of the run's first block"),
    Field("v_off", 26, "V segment = K segment + v_off * 64."),
    Field("seg_stride", 26, "Bytes / 64 between the K segments of consecutive blocks."),
    Field("blocks", 16, "Blocks in the run (> 0)."),
    Field("keys", 16, "Tokens per block (the segments' n, > 0)."),
    Field("kpos0", POS_BITS, "Position of the run's first key."),
    Field("pos_stride", POS_BITS, "Positions between consecutive blocks' first keys."),
    Field("block0", 16, "Directory id of the first block."),
    Field("block_stride", 8, "Directory ids between consecutive blocks."),
    Field("gated", 1, "Keys must lie in readable directory blocks (else the node faults)."),
    Field("first", 1, "MAX: reset m first; APPLY: reset l and o first."),
])
_reg(Opcode.ATTN_SM, "Softmax pass over score rows in SPAD (the attention unit without its products): "
                     "row r = t heads + h (R = tokens x heads, the rows of the last ATTN_Q QUERY, whose "
                     "positions it uses) has key j's int32 score at word j of the row at scores + r "
                     "s_stride (a GEMM_QK score row); key j is at position kpos0 + j and visible to row r "
                     "iff that is <= the row's position.  MAX: m[r] = max(m[r], visible s) (first: m = "
                     "INT32_MIN before).  APPLY: p = exp2(s - m[r]) on visible keys, l[r] += p (first: l = "
                     "0 before; o untouched), w = min(rshr(p A_j, 3 - E_j), W_MAX) (0 if not visible) -> "
                     "word j of the row at w + r w_stride (golden attn_weights), with key j's V scale "
                     "word A | E << 8 the 16-bit word at seg + 2 j (block_keys = 0) or, over a run of "
                     "V segments, the word of token j mod block_keys in the scale region of the "
                     "segment at seg + (j // block_keys) seg_stride (bytes / 64).  MAX with defer: no "
                     "SPAD read; the pass takes row r's key j as word j of row r (r < R) the next GEMM_QK "
                     "of the program writes (its rows in the same order, j < keys and < its tiles x P; none: "
                     "dropped when the next program starts), the same m as a "
                     "MAX after that GEMM_QK over its score rows; the fields are checked as without "
                     "defer (scores, s_stride unused).", [
    Field("phase", 1, "Which pass.", enum=AttnPass),
    Field("first", 1, "MAX: reset m first; APPLY: reset l first."),
    _spad("scores", "First score row"),
    Field("s_stride", 16, "Beats between score rows."),
    Field("keys", 16, "Keys S (> 0, a multiple of VL): key j is word j of each row."),
    Field("kpos0", POS_BITS, "Position of key 0."),
    _ddr("seg", "APPLY: key 0's V scale word (block_keys = 0: a V segment's scale region, spec/kv.py, "
                "+ 2 k0; else the V segment of the block that starts with key 0)"),
    _spad("w", "APPLY: first w row (S int32 words each)"),
    Field("w_stride", 16, "APPLY: beats between w rows."),
    Field("tokens", 10, "Tokens; R = tokens x heads rows (<= the unit's state rows, sm_rows)."),
    Field("heads", 8, "Query heads per token."),
    Field("block_keys", 16, "APPLY: tokens per V block of the run; 0: one segment (seg + 2 j)."),
    Field("seg_stride", 26, "APPLY: bytes / 64 between the V segments of consecutive blocks."),
    Field("defer", 1, "MAX: over the score words the next GEMM_QK writes (no SPAD read)."),
])
_reg(Opcode.ATTN_EMIT, "Write the unit's rows to SPAD (EmitMode).  FINAL: row (t, j) -> spad + t "
                       "tok_stride + j head_stride (head_dim X32 words).  STATE / MAX: R x (head_dim "
                       "+ 2) / R words from spad, word after word, rows in (t, j) order.", [
    Field("mode", 3, "What to write (3 bits: ATTN_Q's fields after it at the same offsets).", enum=EmitMode),
    _spad("spad", "Destination"),
    *_ROWS,
])
_reg(Opcode.KVW, "BFP16 rows (one token of one KV head each, head_dim elements) -> one KV4 "
                 "segment of `rows` tokens at seg (spec/kv.py, zero padding included).", [
    _spad("src", "First row"),
    Field("rows", 10, "Tokens n (> 0, <= max tokens)."),
    Field("row_stride", 16, "Beats between rows."),
    _ddr("seg", "Segment address"),
])
_reg(Opcode.DIR, "check = 0: directory[block + i stride] = state for i < count.  check = 1: no write; the "
                 "node faults (UNREADABLE_BLOCK) if any of those entries is unreadable (INVALID: "
                 "``ReplicaState.readable``, the rule of a gated ATTN_KV), for a pass that reads the blocks "
                 "without the directory (GEMM_QK, GEMM_PV, ATTN_SM).  Either way an id past the "
                 "directory (or count = 0) is an ILLEGAL_INSTRUCTION.", [
    Field("block", 16, "First block id."),
    Field("count", 16, "Entries (> 0)."),
    Field("stride", 8, "Ids between entries."),
    Field("state", REPLICA_STATE_BITS, "New state (check = 0; ignored when check = 1).", enum=ReplicaState),
    Field("check", 1, "1: check the entries are readable instead of writing them."),
])
_reg(Opcode.SEND, "Send length bytes at ddr as packets (see the module text); completes when the "
                  "last byte has entered the packetizer.", [
    _ddr("ddr", "First byte"),
    Field("length", 24, "Bytes (0: one header-only packet)."),
    Field("stage", 2, "Meta.stage.", enum=Stage),
    Field("mop", 4, "Meta.op.", enum=Op),
    Field("collective", 3, "Meta.collective.", enum=Collective),
    Field("reduce_op", 3, "Meta.reduce_op.", enum=ReduceOp),
    Field("dst", NODE_BITS, "Meta.dst."),
    Field("route_id", ROUTE_ID_BITS, "Meta.route_id."),
    Field("tag", TAG_BITS, "Meta.kv_id: the receivers' RECV tag (or the block id of a directory op)."),
    Field("seq", SEQ_BITS, "Meta.seq."),
])
_reg(Opcode.CREDIT, "Send a CREDIT control packet: sem[sem] += count at node dst.", [
    Field("dst", NODE_BITS, "Node whose semaphore is incremented."),
    Field("route_id", ROUTE_ID_BITS, "Route towards dst."),
    Field("sem", SEM_BITS, "Its semaphore."),
    Field("count", 8, "Increment (> 0)."),
])
_reg(Opcode.RECV, "Post a receive buffer for the message tagged `tag`; completes (for sig) when "
                  "posted; sem[done_sem] += 1 when length bytes have arrived.  credit = 1 also "
                  "sends CREDIT(credit_dst, credit_route, credit_sem, 1) once posted.", [
    Field("tag", TAG_BITS, "Meta.kv_id of the expected packets."),
    _ddr("ddr", "Where the payload goes"),
    Field("length", 24, "Bytes expected (> 0)."),
    Field("done_sem", SEM_BITS, "Semaphore incremented on completion."),
    Field("credit", 1, "Send a CREDIT once posted."),
    Field("credit_dst", NODE_BITS, "Node the credit goes to."),
    Field("credit_route", ROUTE_ID_BITS, "Route towards it."),
    Field("credit_sem", SEM_BITS, "Its semaphore."),
])


# --- typed instructions -------------------------------------------------------------------------
_DDR_FIELDS = {"ddr", "ids", "table", "blob", "seg"}


@dataclass(frozen=True)
class Instr:
    """Base of the typed instructions.  DDR fields are byte addresses here (multiples of
    DDR_ALIGN); the encoding stores them / DDR_ALIGN.  Header: wait_sem, wait_cnt, sig_sem, sig."""
    OPCODE: ClassVar[Opcode]

    def _values(self) -> dict[str, int]:
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in _DDR_FIELDS:
                if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v % DDR_ALIGN:
                    raise SpecError(f"{self.OPCODE.name}.{f.name}={v!r}: a DDR address must be a "
                                    f"non-negative multiple of {DDR_ALIGN}")
                v //= DDR_ALIGN
            out[f.name] = int(v) if isinstance(v, enum.IntEnum) else v
        return out

    def encode(self) -> int:
        return LAYOUTS[self.OPCODE].pack({"op": int(self.OPCODE), **self._values()})

    def to_bytes(self) -> bytes:
        return self.encode().to_bytes(INSTR_BYTES, "little")

    @property
    def queue(self) -> Queue:
        return Queue(self.on) if self.OPCODE == Opcode.SYNC else QUEUE_OF[self.OPCODE]

    def replace(self, **changes) -> "Instr":
        d = asdict(self)
        d.update(changes)
        return type(self)(**d)


def _header_defaults():
    return dict(wait_sem=0, wait_cnt=0, sig_sem=0, sig=0)


def _make(op: Opcode, name: str, doc: str, optional: dict | None = None):
    """The typed instruction of ``op``; ``optional``: operands with a default (fields added
    later, so that programs written before keep their meaning)."""
    layout = LAYOUTS[op]
    names = [f.name for f in layout.fields if f.name not in ("op", "hres", "res")]
    enums = {f.name: f.enum for f in layout.fields if f.enum is not None and f.name != "op"}
    defaults = {**_header_defaults(), **(optional or {})}
    ns = {"OPCODE": op, "__doc__": doc, "__module__": __name__}
    # header fields default to "no wait, no signal"; operands are required keywords
    for n in names:
        if n in defaults:
            ns[n] = defaults[n]
    # dataclass needs the defaulted (header) fields last
    ordered = [n for n in names if n not in defaults] + [n for n in names if n in defaults]
    ns["__annotations__"] = {n: int for n in ordered}

    def post_init(self):
        values = self._values()
        for f in layout.fields:
            if f.name in values:
                f.check(values[f.name], f"{op.name}")
        for n, e in enums.items():
            object.__setattr__(self, n, e(getattr(self, n)))
    ns["__post_init__"] = post_init
    cls = dataclass(frozen=True, kw_only=True)(type(name, (Instr,), ns))
    return cls


End = _make(Opcode.END, "End", "END")
Sync = _make(Opcode.SYNC, "Sync", "SYNC (on: the Queue it runs in)")
Load = _make(Opcode.LOAD, "Load", "LOAD")
Store = _make(Opcode.STORE, "Store", "STORE")
Embed = _make(Opcode.EMBED, "Embed", "EMBED")
Gemm = _make(Opcode.GEMM, "Gemm", "GEMM")
Vec = _make(Opcode.VEC, "Vec", "VEC")
AttnQ = _make(Opcode.ATTN_Q, "AttnQ", "ATTN_Q")
AttnKV = _make(Opcode.ATTN_KV, "AttnKV", "ATTN_KV")
AttnEmit = _make(Opcode.ATTN_EMIT, "AttnEmit", "ATTN_EMIT")
AttnSm = _make(Opcode.ATTN_SM, "AttnSm", "ATTN_SM", optional={"block_keys": 0, "seg_stride": 0, "defer": 0})
Kvw = _make(Opcode.KVW, "Kvw", "KVW")
Dir = _make(Opcode.DIR, "Dir", "DIR", optional={"check": 0})
Send = _make(Opcode.SEND, "Send", "SEND")
Credit = _make(Opcode.CREDIT, "Credit", "CREDIT")
Recv = _make(Opcode.RECV, "Recv", "RECV")
GemmPv = _make(Opcode.GEMM_PV, "GemmPv", "GEMM_PV", optional={"block_keys": 0, "seg_stride": 0})
GemmQk = _make(Opcode.GEMM_QK, "GemmQk", "GEMM_QK")

CLASSES: dict[Opcode, type] = {c.OPCODE: c for c in
                               (End, Sync, Load, Store, Embed, Gemm, Vec, AttnQ, AttnKV, AttnEmit, Kvw, Dir, Send,
                                Credit, Recv, AttnSm, GemmPv, GemmQk)}


def decode(word: int) -> Instr:
    """A 256-bit instruction word -> its typed instruction (SpecError if malformed)."""
    if not 0 <= word < (1 << INSTR_BITS):
        raise SpecError("instruction word does not fit in 256 bits")
    raw_op = word & 0x3F
    try:
        op = Opcode(raw_op)
    except ValueError:
        raise SpecError(f"illegal instruction: opcode {raw_op}") from None
    values = LAYOUTS[op].unpack(word)
    cls = CLASSES[op]
    kw = {}
    for f in fields(cls):
        v = values[f.name]
        kw[f.name] = v * DDR_ALIGN if f.name in _DDR_FIELDS else v
    return cls(**kw)


def from_bytes(data: bytes) -> Instr:
    if len(data) != INSTR_BYTES:
        raise SpecError(f"an instruction has {INSTR_BYTES} bytes, got {len(data)}")
    return decode(int.from_bytes(data, "little"))


def encode_program(program) -> bytes:
    """Typed instructions -> the bytes the runtime writes at PROG_BASE."""
    out = []
    for i, ins in enumerate(program):
        if not isinstance(ins, Instr):
            raise SpecError(f"program item {i} is a {type(ins).__name__}, not an instruction")
        out.append(ins.to_bytes())
    return b"".join(out)


def decode_program(data: bytes) -> list[Instr]:
    if len(data) % INSTR_BYTES:
        raise SpecError(f"program of {len(data)} bytes is not a whole number of instructions")
    return [from_bytes(data[i:i + INSTR_BYTES]) for i in range(0, len(data), INSTR_BYTES)]


# --- DDR formats the instructions read ----------------------------------------------------------
def pad(n: int) -> int:
    """n rounded up to DDR_ALIGN."""
    return -(-n // DDR_ALIGN) * DDR_ALIGN


def embed_row_bytes(n: int, group: int) -> int:
    """One embedding-table row: n nibbles (element 2i in the low nibble of byte i), padded;
    then n / G uint16 scales (little-endian), padded."""
    return pad(n // 2) + pad(2 * (n // group))


@dataclass(frozen=True)
class BlobLayout:
    """Where a GEMM blob's regions lie, for a matrix of ``tiles`` x P rows and n inputs on an
    array of P rows x K lanes with group size G.

    weights: tile t, beat j < n / K: P K nibbles, bits [(p K + k) 4 +: 4] = q[t P + p, j K + k]
             (rows >= out are zero), tile after tile: n P / 2 bytes per tile;
    scales:  tile t, group g < n / G: P uint16 S[t P + p, g], little-endian: 2 P n / G bytes per tile;
    bias:    tile t: P int32 (X32): 4 P bytes per tile.
    Each region starts on DDR_ALIGN; a GEMM over tiles [tile0, ...) reads each region from
    tile0 x (its bytes per tile), which must then be a multiple of DDR_ALIGN."""
    n: int
    tiles: int
    rows: int     # P
    lanes: int    # K
    group: int    # G

    def __post_init__(self):
        for name in ("n", "tiles", "rows", "lanes", "group"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SpecError(f"blob: {name}={v!r} must be a positive integer")
        if self.n % self.group or self.group % self.lanes:
            raise SpecError(f"blob: n={self.n}, G={self.group}, K={self.lanes}: need G | n and K | G")
        if self.rows * self.lanes % 2:
            raise SpecError("blob: rows x lanes must be even (whole bytes per beat)")

    @property
    def w_tile(self) -> int:
        return self.n * self.rows // 2

    @property
    def s_tile(self) -> int:
        return 2 * self.rows * (self.n // self.group)

    @property
    def b_tile(self) -> int:
        return 4 * self.rows

    @property
    def s_offset(self) -> int:
        return pad(self.tiles * self.w_tile)

    @property
    def b_offset(self) -> int:
        return self.s_offset + pad(self.tiles * self.s_tile)

    @property
    def total_bytes(self) -> int:
        return self.b_offset + pad(self.tiles * self.b_tile)


def rope_word(cos: int, sin: int) -> int:
    """One ROPE b word: cos in bits 15:0, sin in bits 31:16 (both int16 Q.14)."""
    return (cos & 0xFFFF) | ((sin & 0xFFFF) << 16)
