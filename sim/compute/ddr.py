"""The DDR formats the execute unit reads and writes (``spec/isa.py``, ``spec/kv.py``), as bytes
from the golden model's integers, for the benches: SPAD rows in LOAD / STORE layout (plain int32
words, or BFP rows each followed by its exponent beat), a GEMM blob (``BlobLayout``), an
embedding table (``embed_row_bytes`` rows), RoPE rows (``rope_word`` per element), KV4 segments
(``spec.kv.pack_segment``), and the inverse readers.  No expected value is computed here."""
from __future__ import annotations

import numpy as np

from mcf.spec import isa
from mcf.spec.kv import pack_segment


def words_bytes(values) -> bytes:
    """int32 words, little-endian."""
    return np.asarray(values, dtype=np.int64).astype("<i4").tobytes()


def rows_bytes(values, vl: int, exps=None) -> bytes:
    """Rows [R, n] of 32-bit words in LOAD layout: plain (``exps`` None) or BFP rows (each row's
    n / VL beats, then one beat whose word 0 is the row exponent, the others zero)."""
    v = np.asarray(values, dtype=np.int64)
    if exps is None:
        return words_bytes(v.reshape(-1))
    rows, n = v.shape
    out = np.zeros((rows, n // vl + 1, vl), dtype=np.int64)
    out[:, :-1] = v.reshape(rows, n // vl, vl)
    out[:, -1, 0] = np.asarray(exps, dtype=np.int64)
    return words_bytes(out.reshape(-1))


def read_rows(data: bytes, rows: int, n: int, vl: int, bfp: bool = False):
    """Inverse of ``rows_bytes``: (values [rows, n] int64, exps [rows] or None)."""
    w = np.frombuffer(data, dtype="<i4").astype(np.int64)
    if not bfp:
        return w.reshape(rows, n), None
    w = w.reshape(rows, n // vl + 1, vl)
    return w[:, :-1].reshape(rows, n), w[:, -1, 0].copy()


def nibbles(q) -> bytes:
    """INT4 values, element 2i in the low nibble of byte i."""
    q = np.asarray(q, dtype=np.int64).reshape(-1) & 0xF
    if q.size % 2:
        q = np.append(q, 0)
    return (q[0::2] | (q[1::2] << 4)).astype(np.uint8).tobytes()


def gemm_blob(w, bias, rows: int, lanes: int) -> tuple[bytes, isa.BlobLayout]:
    """A ``fixed.QLinear`` (and X32 bias or None) as a GEMM blob for a rows x lanes array."""
    out, n = w.q.shape
    tiles = -(-out // rows)
    lay = isa.BlobLayout(n=n, tiles=tiles, rows=rows, lanes=lanes, group=w.group)
    q = np.zeros((tiles * rows, n), dtype=np.int64)
    q[:out] = w.q
    s = np.zeros((tiles * rows, n // w.group), dtype=np.int64)
    s[:out] = w.scale
    b = np.zeros(tiles * rows, dtype=np.int64)
    if bias is not None:
        b[:out] = bias
    blob = bytearray(lay.total_bytes)
    # weights: tile t, beat j: q[t P + p, j K + k] at nibble p K + k
    wq = q.reshape(tiles, rows, n // lanes, lanes).transpose(0, 2, 1, 3)
    wbytes = nibbles(wq)
    blob[:len(wbytes)] = wbytes
    sbytes = s.reshape(tiles, rows, n // w.group).transpose(0, 2, 1).astype("<u2").tobytes()
    blob[lay.s_offset:lay.s_offset + len(sbytes)] = sbytes
    bbytes = b.astype("<i4").tobytes()
    blob[lay.b_offset:lay.b_offset + len(bbytes)] = bbytes
    return bytes(blob), lay


def embed_table(w) -> bytes:
    """A ``fixed.QLinear`` [vocab, n] as embedding rows (``embed_row_bytes`` each)."""
    vocab, n = w.q.shape
    rb = isa.embed_row_bytes(n, w.group)
    out = bytearray(vocab * rb)
    for t in range(vocab):
        row = nibbles(w.q[t])
        sc = w.scale[t].astype("<u2").tobytes()
        out[t * rb:t * rb + len(row)] = row
        out[t * rb + isa.pad(n // 2):t * rb + isa.pad(n // 2) + len(sc)] = sc
    return bytes(out)


def rope_rows(cos, sin) -> np.ndarray:
    """RoPE tables [T, d/2] (int16 Q.14) -> int32 words [T, d]: word i = rope_word(cos[i mod
    d/2], sin[i mod d/2]) (b word i rotates element i)."""
    cos, sin = np.asarray(cos, dtype=np.int64), np.asarray(sin, dtype=np.int64)
    half = cos.shape[-1]
    idx = np.arange(2 * half) % half
    words = (cos[:, idx] & 0xFFFF) | ((sin[:, idx] & 0xFFFF) << 16)
    return ((words + (1 << 31)) % (1 << 32)) - (1 << 31)


def segment(q, a, e) -> bytes:
    return pack_segment(q, a, e)
