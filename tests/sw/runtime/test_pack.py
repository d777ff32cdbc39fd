"""Packing (sw/runtime/pack.py): the DDR formats of spec/isa.py checked byte by byte on
hand-placed values (the node simulator reads them with its own code, so these bytes anchor both)."""
import numpy as np

from mcf.spec import isa
from mcf.sw.golden import fixed as fx
from mcf.sw.runtime import pack


def test_gemm_blob_bytes_follow_the_blob_layout():
    P, K, n, G, out = 4, 8, 16, 16, 5
    q = np.zeros((out, n), np.int8)
    q[1, 9], q[4, 0] = -3, 7
    s = np.ones((out, n // G), np.uint16)
    s[1, 0] = 0x1234
    bias = np.zeros(out, np.int64)
    bias[4] = -2
    lay = isa.BlobLayout(n=n, tiles=2, rows=P, lanes=K, group=G)
    b = pack.blob_bytes(fx.QLinear(q, s, 3, G), lay, bias)
    assert len(b) == lay.total_bytes
    # q[1, 9]: tile 0, beat 9 // K = 1 (bytes 16..31), nibble p K + k = 1 x 8 + 1 = 9: high half of byte 20
    assert b[20] == 0xD0 and sum(b[:lay.s_offset]) == 0xD0 + 0x07
    # q[4, 0]: tile 1 starts at n P / 2 = 32 bytes, beat 0, nibble 0
    assert b[32] == 0x07
    # S[1, 0]: tile 0, group 0, row 1 -> uint16 index 1
    assert b[lay.s_offset + 2:lay.s_offset + 4] == bytes([0x34, 0x12])
    # bias[4]: tile 1, row 0 -> int32 index 4
    assert b[lay.b_offset + 16:lay.b_offset + 20] == (-2).to_bytes(4, "little", signed=True)
    assert b[lay.b_offset + 20:] == bytes(len(b) - lay.b_offset - 20)        # rows beyond the matrix: zero


def test_embedding_rows_and_rope_words():
    n, G = 16, 8
    q = np.zeros((3, n), np.int8)
    q[2, 3] = -1
    s = np.zeros((3, n // G), np.uint16)
    s[2, 1] = 0xABCD
    table = pack.embed_table_bytes(fx.QLinear(q, s, 0, G))
    row = isa.embed_row_bytes(n, G)
    assert row == 128 and len(table) == 3 * row
    assert table[2 * row + 1] == 0xF0 and table[2 * row + 64 + 2:2 * row + 64 + 4] == bytes([0xCD, 0xAB])
    words = np.frombuffer(pack.rope_bytes(16, 10000.0, 5), "<u4").reshape(5, 16)
    cos, sin = fx.rope_table(16, 10000.0, [3])
    assert words[3, 2] == isa.rope_word(int(cos[0, 2]), int(sin[0, 2])) == words[3, 10]
    assert words[0, 0] == isa.rope_word(1 << 14, 0)
