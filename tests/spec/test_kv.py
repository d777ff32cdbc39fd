"""The KV block format (spec/kv.py): sizes, alignment, a hand-built segment, round trips."""
import numpy as np
import pytest

from mcf.spec import kv
from mcf.spec.bits import SpecError


def test_sizes_and_alignment():
    assert kv.segment_bytes(4, 16) == 64 + 64            # 8 scale bytes, 32 nibble bytes, each padded
    assert kv.segment_bytes(256, 128) == 512 + 256 * 64   # Qwen2.5-1.5B, one 256-token block: no padding
    assert kv.block_layer_bytes(256, 128, 2) == 4 * (512 + 16384)
    for n in (1, 3, 16, 33):
        for d in (16, 32, 64, 128):
            assert kv.segment_bytes(n, d) % kv.KV_ALIGN == 0
            assert kv.scale_bytes(n) % kv.KV_ALIGN == 0
    assert kv.segment_offset(4, 16, 2, v=True, head=1) == 3 * kv.segment_bytes(4, 16)


def test_hand_built_segment():
    # two tokens, head_dim 4: row 0 = [1, -1, 7, -8], row 1 = [0, 2, -3, 4]
    q = np.array([[1, -1, 7, -8], [0, 2, -3, 4]])
    data = kv.pack_segment(q, [200, 0], [-3, 5])
    assert data[:4] == bytes([200, 0xFD, 0, 5]) and not any(data[4:64])
    assert data[64:68] == bytes([0xF1, 0x87, 0x20, 0x4D]) and not any(data[68:128])
    assert len(data) == 128


def test_round_trip_block_layer():
    rng = np.random.default_rng(1)
    n, h, d = 5, 2, 16
    k = (rng.integers(-8, 8, (n, h, d)), rng.integers(128, 256, (n, h)), rng.integers(-128, 128, (n, h)))
    v = (rng.integers(-8, 8, (n, h, d)), rng.integers(0, 256, (n, h)), rng.integers(-128, 128, (n, h)))
    data = kv.pack_block_layer(k, v)
    assert len(data) == kv.block_layer_bytes(n, d, h)
    k2, v2 = kv.unpack_block_layer(data, n, d, h)
    for a, b in zip(k + v, k2 + v2):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("bad", [
    lambda: kv.pack_segment(np.full((2, 4), 8), [1, 1], [0, 0]),
    lambda: kv.pack_segment(np.zeros((2, 4)), [256, 1], [0, 0]),
    lambda: kv.pack_segment(np.zeros((2, 4)), [1], [0, 0]),
    lambda: kv.segment_bytes(0, 16),
    lambda: kv.segment_bytes(4, 15),
    lambda: kv.unpack_segment(bytes(127), 2, 4),
    lambda: kv.unpack_segment(bytes(64) + bytes([0] * 4 + [1] + [0] * 59), 2, 4),
])
def test_refused(bad):
    with pytest.raises(SpecError):
        bad()


def test_chunk_value_is_block_layers_concatenated():
    rng = np.random.default_rng(2)
    n, h, d, layers = 3, 2, 16, 3
    kl = [(rng.integers(-8, 8, (n, h, d)), rng.integers(0, 256, (n, h)), rng.integers(-128, 128, (n, h)))
          for _ in range(layers)]
    vl = [(rng.integers(-8, 8, (n, h, d)), rng.integers(0, 256, (n, h)), rng.integers(-128, 128, (n, h)))
          for _ in range(layers)]
    data = kv.pack_chunk_value(kl, vl)
    assert len(data) == kv.chunk_value_bytes(n, d, h, layers)
    assert data == b"".join(kv.pack_block_layer(k, v) for k, v in zip(kl, vl))
    back = kv.unpack_chunk_value(data, n, d, h, layers)
    for (k, v), (k2, v2) in zip(zip(kl, vl), back):
        for a, b in zip(k + v, k2 + v2):
            assert np.array_equal(a, b)
    with pytest.raises(SpecError, match="bytes"):
        kv.unpack_chunk_value(data[:-64], n, d, h, layers)
    with pytest.raises(SpecError):
        kv.pack_chunk_value(kl, vl[:2])
