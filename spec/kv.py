"""How INT4 KV lives in a node's DDR: the one definition of the KV block format.

The node's KV writer stores it, the attention unit's K/V feeders read it, the MARS lowering
sizes the KV pool with it, the PS runtime and the prefix KV tier (which stores exactly these
bytes) encode and decode it.

A *segment* is the KV4 data (docs/fixed-point.md section 5.6) of ``n`` consecutive tokens of
one layer, one KV head, K or V:

    [ A[0] E[0] A[1] E[1] ... A[n-1] E[n-1] ]  padded with zeros to a multiple of KV_ALIGN bytes
    [ row 0: d/2 bytes ] ... [ row n-1 ]           padded with zeros to a multiple of KV_ALIGN bytes

A is the uint8 block scale mantissa (0 for an all-zero row), E the int8 exponent (two's
complement byte); a row holds q[0..d-1] as 4-bit two's-complement nibbles, element 2i in the
low nibble of byte i.  The scales come first so that a reader knows every row's scale before
the row arrives.  KV_ALIGN is 64 bytes, so a segment starts on a bus boundary for every AXI
data width up to 512 bits.

A *block layer* is the KV of ``n`` tokens in one layer: the 2 * H_kv segments in the order
K head 0, K head 1, ..., K head H_kv-1, V head 0, ..., V head H_kv-1.  A *chunk value* (what
the prefix KV tier stores for one chunk) is the chunk's block layers for layers 0 .. L-1,
concatenated.

The *decode region* holds the decode tokens' KV in blocks of B = ``NodeConfig.decode_block_keys``
tokens (8 on the KR260 node): decode token j is key j mod B of decode block j // B (a block layer
of B tokens, ``decode_key``), so the MAC array's GEMM_QK / GEMM_PV read the decode keys as one run
of blocks.  A decode step rewrites its block's keys 0 .. j mod B as one segment of j mod B + 1
tokens (B <= KV_ALIGN / 2: its scale region is the B-token one's, so it is the B-token segment's
first keys); the keys after the current token are never visible to its query.
"""
from __future__ import annotations

import numpy as np

from .bits import SpecError

#: Every segment region starts and ends on this many bytes (512-bit bus beats).
KV_ALIGN = 64


def _pad(n: int) -> int:
    return -(-n // KV_ALIGN) * KV_ALIGN


def _check(n: int, head_dim: int) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise SpecError(f"KV segment: n={n!r} tokens must be a positive integer")
    if isinstance(head_dim, bool) or not isinstance(head_dim, (int, np.integer)) or head_dim < 2 or head_dim % 2:
        raise SpecError(f"KV segment: head_dim={head_dim!r} must be an even positive integer")


def scale_bytes(n: int) -> int:
    """Bytes of a segment's scale region (A, E per token, padded)."""
    return _pad(2 * n)


def row_bytes(head_dim: int) -> int:
    """Bytes of one token's nibbles in a segment (unpadded)."""
    return head_dim // 2


def segment_bytes(n: int, head_dim: int) -> int:
    """Bytes of one segment: n tokens of one (layer, KV head, K or V)."""
    _check(n, head_dim)
    return scale_bytes(n) + _pad(n * row_bytes(head_dim))


def block_layer_bytes(n: int, head_dim: int, kv_heads: int) -> int:
    """Bytes of n tokens' K and V in one layer (2 * kv_heads segments)."""
    return 2 * kv_heads * segment_bytes(n, head_dim)


def chunk_value_bytes(n: int, head_dim: int, kv_heads: int, layers: int) -> int:
    return layers * block_layer_bytes(n, head_dim, kv_heads)


def segment_offset(n: int, head_dim: int, kv_heads: int, v: bool, head: int) -> int:
    """Byte offset of the (K or V, head) segment inside a block layer."""
    if not 0 <= head < kv_heads:
        raise SpecError(f"KV segment: head {head} not in [0, {kv_heads})")
    return (int(v) * kv_heads + head) * segment_bytes(n, head_dim)


def decode_key(j: int, block_keys: int) -> tuple[int, int]:
    """Decode token j's place in the decode region: (block, key) = (j // B, j mod B)."""
    if j < 0 or block_keys < 1:
        raise SpecError(f"decode token {j} in blocks of {block_keys} keys")
    return j // block_keys, j % block_keys


def pack_segment(q, a, e) -> bytes:
    """KV4 of n tokens (q int [n, d] in [-8, 7], A [n] in 0..255, E [n] in -128..127) -> bytes."""
    q = np.asarray(q, dtype=np.int64)
    a = np.asarray(a, dtype=np.int64).reshape(-1)
    e = np.asarray(e, dtype=np.int64).reshape(-1)
    if q.ndim != 2:
        raise SpecError(f"KV segment: q must be [tokens, head_dim], got shape {q.shape}")
    n, d = q.shape
    _check(n, d)
    if a.shape != (n,) or e.shape != (n,):
        raise SpecError(f"KV segment: A and E must have {n} entries, got {a.shape} and {e.shape}")
    if q.min() < -8 or q.max() > 7:
        raise SpecError("KV segment: q values must be in [-8, 7]")
    if a.min() < 0 or a.max() > 255 or e.min() < -128 or e.max() > 127:
        raise SpecError("KV segment: A must be in [0, 255] and E in [-128, 127]")
    scales = np.zeros(scale_bytes(n), dtype=np.uint8)
    scales[0:2 * n:2] = a
    scales[1:2 * n:2] = e & 0xFF
    nib = (q & 0xF).astype(np.uint8)
    rows = (nib[:, 0::2] | (nib[:, 1::2] << 4)).reshape(-1)
    body = np.zeros(_pad(n * row_bytes(d)), dtype=np.uint8)
    body[:rows.size] = rows
    return scales.tobytes() + body.tobytes()


def unpack_scales(data, n: int):
    """The first ``n`` scale words (A | E << 8, 16 bits little-endian) of ``data`` (a segment's
    scale region, or a part of it from some key) -> (A int64 [n], E int64 [n])."""
    raw = np.frombuffer(bytes(data), dtype=np.uint8)
    if raw.size < 2 * n:
        raise SpecError(f"KV scales: {raw.size} bytes hold fewer than {n} scale words")
    return raw[0:2 * n:2].astype(np.int64), raw[1:2 * n:2].astype(np.int8).astype(np.int64)


def unpack_segment(data: bytes, n: int, head_dim: int, strict: bool = True):
    """Bytes of one segment -> (q int8 [n, d], A int64 [n], E int64 [n]).  Checks the length
    and (``strict``) that the padding is zero (SpecError otherwise); a reader in hardware
    ignores the padding (``strict=False``)."""
    _check(n, head_dim)
    raw = np.frombuffer(bytes(data), dtype=np.uint8)
    if raw.size != segment_bytes(n, head_dim):
        raise SpecError(f"KV segment: {raw.size} bytes, {n} tokens of head_dim {head_dim} "
                        f"take {segment_bytes(n, head_dim)}")
    sb = scale_bytes(n)
    nbytes = n * row_bytes(head_dim)
    if strict and (raw[2 * n:sb].any() or raw[sb + nbytes:].any()):
        raise SpecError("KV segment: non-zero padding")
    a, e = unpack_scales(raw[:2 * n], n)
    rows = raw[sb:sb + nbytes].reshape(n, head_dim // 2)
    lo = (rows & 0xF).astype(np.int8)
    hi = (rows >> 4).astype(np.int8)
    q = np.empty((n, head_dim), dtype=np.int8)
    q[:, 0::2] = np.where(lo > 7, lo - 16, lo)
    q[:, 1::2] = np.where(hi > 7, hi - 16, hi)
    return q, a, e


def pack_block_layer(k, v) -> bytes:
    """One layer's KV of n tokens: k, v = (q [n, H_kv, d], A [n, H_kv], E [n, H_kv]) (the
    golden model's KV4 triples) -> the block layer bytes."""
    out = []
    for q, a, e in (k, v):
        q, a, e = np.asarray(q), np.asarray(a), np.asarray(e)
        if q.ndim != 3:
            raise SpecError(f"KV block layer: q must be [tokens, kv_heads, head_dim], got {q.shape}")
        out += [pack_segment(q[:, h], a[:, h], e[:, h]) for h in range(q.shape[1])]
    return b"".join(out)


def unpack_block_layer(data: bytes, n: int, head_dim: int, kv_heads: int):
    """Inverse of ``pack_block_layer``: -> (k, v) KV4 triples [n, H_kv, ...]."""
    seg = segment_bytes(n, head_dim)
    if len(data) != 2 * kv_heads * seg:
        raise SpecError(f"KV block layer: {len(data)} bytes, expected {2 * kv_heads * seg}")
    out = []
    for which in range(2):
        parts = [unpack_segment(data[(which * kv_heads + h) * seg:(which * kv_heads + h + 1) * seg], n, head_dim)
                 for h in range(kv_heads)]
        out.append(tuple(np.stack([p[i] for p in parts], axis=1) for i in range(3)))
    return out[0], out[1]


def pack_chunk_value(k_layers, v_layers) -> bytes:
    """A chunk value: the chunk's block layers for layers 0 .. L-1, concatenated.  ``k_layers[l]``,
    ``v_layers[l]`` are layer l's KV4 triples of the chunk's n tokens (as ``pack_block_layer``)."""
    if len(k_layers) != len(v_layers) or not len(k_layers):
        raise SpecError(f"KV chunk value: {len(k_layers)} K layers and {len(v_layers)} V layers "
                        f"(need the same positive count)")
    return b"".join(pack_block_layer(k, v) for k, v in zip(k_layers, v_layers))


def unpack_chunk_value(data: bytes, n: int, head_dim: int, kv_heads: int, layers: int):
    """Inverse of ``pack_chunk_value``: -> [(k, v)] per layer, KV4 triples [n, H_kv, ...].
    Checks the length (SpecError naming both sizes) and every segment's padding."""
    if isinstance(layers, bool) or not isinstance(layers, (int, np.integer)) or layers < 1:
        raise SpecError(f"KV chunk value: layers={layers!r} must be a positive integer")
    size = block_layer_bytes(n, head_dim, kv_heads)
    if len(data) != layers * size:
        raise SpecError(f"KV chunk value: {len(data)} bytes, {layers} layers of {n} tokens take "
                        f"{layers * size}")
    view = memoryview(data)
    return [unpack_block_layer(bytes(view[i * size:(i + 1) * size]), n, head_dim, kv_heads)
            for i in range(layers)]
