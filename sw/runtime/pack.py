"""Packing a checkpoint into a node's DDR: the golden model's quantization (``FixedModel``)
written in the formats the node's instructions read (``mcf.spec.isa``): one GEMM blob per
matrix (``BlobLayout``: INT4 weights, uint16 group scales, X32 biases), the embedding table in
``embed_row_bytes`` rows, RMSNorm gains as int32 words, the RoPE table as ``rope_word``s
(head_dim words per position, the d/2 (cos, sin) pairs twice), at the offsets of the lowering's
DDR map (``mcf.sw.mars.lower.DdrMap``).  Also the scalars the programs carry (``consts``).
"""
from __future__ import annotations

import numpy as np

from mcf.spec import isa
from mcf.sw.golden import fixed as fx
from mcf.sw.golden.fixed_model import FixedModel
from mcf.sw.mars.lower import MATRICES, DdrMap


def nibbles(q) -> bytes:
    """INT4 values, element 2i in the low nibble of byte i."""
    q = np.asarray(q, dtype=np.int64).reshape(-1)
    if q.size % 2:
        q = np.concatenate([q, [0]])
    return ((q[0::2] & 0xF) | ((q[1::2] & 0xF) << 4)).astype(np.uint8).tobytes()


def blob_bytes(w: fx.QLinear, lay: isa.BlobLayout, bias=None) -> bytes:
    """A matrix as a GEMM blob (``BlobLayout``): rows beyond the matrix are zero."""
    out, n = w.q.shape
    P, K, G, tiles = lay.rows, lay.lanes, lay.group, lay.tiles
    if n != lay.n or G != w.group or out > tiles * P:
        raise ValueError(f"matrix {out}x{n} (G={w.group}) does not fit blob {lay}")
    q = np.zeros((tiles * P, n), dtype=np.int64)
    q[:out] = w.q
    s = np.zeros((tiles * P, n // G), dtype=np.int64)
    s[:out] = w.scale
    data = bytearray(lay.total_bytes)
    wb = nibbles(q.reshape(tiles, P, n // K, K).transpose(0, 2, 1, 3))
    data[:len(wb)] = wb
    sb = s.reshape(tiles, P, n // G).transpose(0, 2, 1).astype("<u2").tobytes()
    data[lay.s_offset:lay.s_offset + len(sb)] = sb
    if bias is not None:
        b = np.zeros(tiles * P, dtype=np.int64)
        b[:out] = bias
        bb = b.astype("<i4").tobytes()
        data[lay.b_offset:lay.b_offset + len(bb)] = bb
    return bytes(data)


def embed_table_bytes(w: fx.QLinear) -> bytes:
    """The embedding table in ``embed_row_bytes`` rows (nibbles, then uint16 group scales)."""
    vocab, n = w.q.shape
    row = isa.embed_row_bytes(n, w.group)
    out = bytearray(vocab * row)
    s_off = isa.pad(n // 2)
    nib = np.frombuffer(nibbles(w.q), np.uint8).reshape(vocab, n // 2)
    table = np.frombuffer(out, np.uint8).reshape(vocab, row).copy()
    table[:, :n // 2] = nib
    table[:, s_off:s_off + 2 * (n // w.group)] = np.frombuffer(
        w.scale.astype("<u2").tobytes(), np.uint8).reshape(vocab, -1)
    return table.tobytes()


def gain_bytes(gain) -> bytes:
    return np.asarray(gain, dtype=np.int64).astype("<i4").tobytes()


def rope_bytes(head_dim: int, theta: float, positions: int) -> bytes:
    """``positions`` rows of head_dim ``rope_word``s: word i rotates element i."""
    cos, sin = fx.rope_table(head_dim, theta, np.arange(positions))
    words = (cos & 0xFFFF) | ((sin & 0xFFFF) << 16)
    return np.concatenate([words, words], axis=1).astype("<u4").tobytes()


def consts_of(fm: FixedModel) -> dict:
    """The scalars of ``mcf.sw.mars.lower.const_keys``."""
    cfg = fm.cfg
    cm, ce = fx.score_constant(cfg.head_dim)
    out = {"embed.w_exp": fm.embed.exp, "head.w_exp": fm.head.exp, "norm.g_exp": fm.norm[1],
           "eps_n": fx.eps_constant(cfg.hidden_size, cfg.rms_norm_eps), "score.cm": cm, "score.ce": ce}
    for li, L in enumerate(fm.layers):
        for m in MATRICES:
            out[f"layers.{li}.{m}.w_exp"] = L[m].exp
        out[f"layers.{li}.ln1.g_exp"] = L["ln1"][1]
        out[f"layers.{li}.ln2.g_exp"] = L["ln2"][1]
    return {k: int(v) for k, v in out.items()}


def weight_image(fm: FixedModel, m: DdrMap, positions: int) -> list[tuple[int, bytes]]:
    """(offset, bytes) of every weight region of the map: the same on every node."""
    cfg = fm.cfg
    out = []
    for li, L in enumerate(fm.layers):
        for name in MATRICES:
            off, lay = m.blobs[f"layers.{li}.{name}"]
            out.append((off, blob_bytes(L[name], lay, L.get(name + ".bias"))))
        for g in ("ln1", "ln2"):
            out.append((m.gains[f"layers.{li}.{g}"], gain_bytes(L[g][0])))
    out.append((m.gains["norm"], gain_bytes(fm.norm[0])))
    out.append((m.off("embed"), embed_table_bytes(fm.embed)))
    off, lay = m.blobs["head"]
    out.append((off, blob_bytes(fm.head, lay)))
    out.append((m.off("rope"), rope_bytes(cfg.head_dim, cfg.rope_theta, positions)))
    for off, data in out:
        if off % isa.DDR_ALIGN:
            raise AssertionError(f"region at {off:#x} is not {isa.DDR_ALIGN}-byte aligned")
    return out
