"""The golden model of MCF: the Qwen2 / Qwen2.5 decoder in NumPy, float and fixed point.

Every hardware block is judged against this package.  Nothing here imports torch or mcf.hw.

Stable API (RTL benches and tools import these names; the fixed-point spec is
docs/fixed-point.md):

Models
  ``FloatModel(cfg, weights)``          float32 reference; ``.forward(tokens, cache=None,
                                        logits="all"|"last")`` -> logits, ``.new_cache()``
  ``FixedModel(cfg, weights, group_size=128)``  the hardware's arithmetic bit for bit;
                                        ``.forward_x32`` -> X32 int logits, ``.forward`` floats,
                                        ``.attention_inputs(layer, x, pos)`` -> (q, K4, V4)
  ``load_checkpoint(dir)``              -> (ModelConfig, weights) from a Hugging Face Qwen2
                                        directory (safetensors, single or sharded; no torch)
  ``write_checkpoint(dir, cfg, weights, dtype)``, ``random_weights(cfg, seed)``

Fixed-point operations: module ``mcf.sw.golden.fixed`` (``rshr``, ``sat``, ``normalize``,
``rmsnorm``, ``linear``, ``rope``, ``silu``, ``quantize_kv``, ``scores``, ``partial_state``,
``finalize``, ``attention``, the LUTs ``EXP2_LUT``, ``RCP_LUT``, ``RSQRT_LUT``,
``SIGMOID_LUT``, ``KV_RCP_LUT``).

(m, l, o) partial softmax states and the NIC reductions, on int32 word arrays
``[..., d + 2]`` = ``[m, l, o_0 .. o_{d-1}]`` per (head, query), little-endian on the wire:
  ``encode_state(State) -> words``, ``decode_state(words) -> State``
  ``merge_states(a, b)``   ReduceOp.SOFTMAX_MERGE of two word arrays
  ``fold_states(list)``    the fixed merge order: left fold in increasing source-node id
  ``reduce_max(list)``     ReduceOp.MAX: signed int32 maximum
  ``reduce_sum(list)``     ReduceOp.SUM: int32 addition wrapping modulo 2^32
  ``exp2(x)``              the exp2 LUT unit used by the merge (x <= 0, SCORE units)

The NIC's per-packet decisions and reductions (what the RTL NIC must do, written from the
spec): module ``mcf.sw.golden.nic`` (``decide``, ``reduce_words``, ``RouteEntry``).

Distributed-attention references: module ``mcf.sw.golden.distributed`` (``ring_attention``,
``zigzag_attention``, ``chunked_prefill_attention`` over a ``Placement`` with temporary
replicas, ``plan_prefill_attention`` for a MARS plan (duck-typed: ``compute_nodes``,
``holders``, ``fetch_sources``), ``decode_attention`` (KV-stationary, MAX round then
SOFTMAX_MERGE), ``decode_one_pass``), each bit-exact against ``fixed.attention`` in fixed
point (``FixedAttn``) and within 1e-5 in float (``FloatAttn``).
"""
from .checkpoint import load_checkpoint, write_checkpoint
from .fixed import (State, attention, decode_state, encode_state, exp2, fold_states, merge_states,
                    reduce_max, reduce_sum)
from .fixed_model import FixedKVCache, FixedModel
from .float_model import FloatModel, KVCache
from .weights import random_weights

__all__ = ["FixedKVCache", "FixedModel", "FloatModel", "KVCache", "State", "attention",
           "decode_state", "encode_state", "exp2", "fold_states", "load_checkpoint", "merge_states",
           "random_weights", "reduce_max", "reduce_sum", "write_checkpoint"]
