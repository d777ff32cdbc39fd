"""Fixed-point operations against hand-derived values, Python-int scalar re-derivations of
the spec (docs/fixed-point.md) and float bounds."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcf.sw.golden import fixed as fx

I64 = st.integers(-(1 << 40), 1 << 40)


def py_rshr(x: int, s: int) -> int:
    return (x + (1 << (s - 1))) >> s if s > 0 else x << -s


def test_rshr_hand_values():
    assert fx.rshr(5, 1) == 3            # 2.5 -> 3 (half up)
    assert fx.rshr(-5, 1) == -2          # -2.5 -> -2 (half up, not away from zero)
    assert fx.rshr(-6, 2) == -1          # -1.5 -> -1
    assert fx.rshr(7, 0) == 7 and fx.rshr(3, -2) == 12
    assert fx.rshr(np.array([5, 5, 5]), np.array([1, 0, -1])).tolist() == [3, 5, 10]
    assert fx.rshr(12345, 70) == 0


@given(st.lists(I64, min_size=1, max_size=8), st.integers(-10, 50))
@settings(max_examples=60, deadline=None)
def test_rshr_matches_python(xs, s):
    assert fx.rshr(np.array(xs), s).tolist() == [py_rshr(x, s) for x in xs]


def py_rshr64(x: int, s: int) -> int:
    """The exact rshr saturated to int64 (what fx.rshr returns for every shift)."""
    return max(-(1 << 63), min((1 << 63) - 1, py_rshr(x, s) if s <= 62 else 0))


@given(st.lists(I64, min_size=1, max_size=8), st.lists(st.integers(-140, 64), min_size=8, max_size=8))
@settings(max_examples=80, deadline=None)
def test_rshr_left_shifts_saturate_at_int64(xs, ss):
    """A left shift beyond int64 gives INT64_MIN / MAX (never wraps), scalar and array shifts."""
    x = np.array(xs)
    want = [[py_rshr64(v, s) for v in xs] for s in ss]
    assert [fx.rshr(x, s).tolist() for s in ss] == want
    assert fx.rshr(x[None, :], np.array(ss)[:, None]).tolist() == want


def test_rshr_left_shift_bounds_exactly():
    top, bot = (1 << 63) - 1, -(1 << 63)
    assert fx.rshr(np.array([(1 << 40) - 1, 1 << 40, -(1 << 40), -(1 << 40) - 1]), -23).tolist() == \
        [((1 << 40) - 1) << 23, top, bot, bot]                   # -2^63 itself is exact
    assert fx.rshr(np.array([1, -1, 0]), -200).tolist() == [top, bot, 0]
    assert fx.rshr(np.array([1, -1, 0]), np.array([-63, -63, -63])).tolist() == [top, bot, 0]


@given(st.lists(st.integers(0, (1 << 62) - 1), min_size=1, max_size=8))
@settings(max_examples=60, deadline=None)
def test_bitlen(xs):
    assert fx.bitlen(np.array(xs)).tolist() == [x.bit_length() for x in xs]


def test_lut_hand_values():
    assert fx.EXP2_LUT[0] == 32768 and fx.EXP2_LUT[128] == 23170 and len(fx.EXP2_LUT) == 256
    assert fx.RCP_LUT[0] == 32768 and fx.RCP_LUT[-1] == 16384 and fx.RCP_LUT[512 - 512 + 256] == 21845
    assert fx.RSQRT_LUT[0] == 32768 and fx.RSQRT_LUT[-1] == 16384 and len(fx.RSQRT_LUT) == 769
    assert fx.SIGMOID_LUT[512] == 16384 and len(fx.SIGMOID_LUT) == 1024
    assert fx.KV_RCP_LUT[0] == 131072
    assert fx.score_constant(128) == (33428, 18)          # log2(e)/sqrt(128) = 0.1275174 = 33428.4 / 2^18


def test_exp2_hand_values():
    one = 1 << fx.S_FRAC
    assert fx.exp2(np.array([0, -one, -2 * one, -one // 2])).tolist() == [32768, 16384, 8192, 23170]
    assert fx.exp2(-16 * one) == 0 and fx.exp2(-(1 << 40)) == 0


@given(st.integers(0, 20 << fx.S_FRAC))
@settings(max_examples=100, deadline=None)
def test_exp2_accuracy(y):
    assert abs(fx.exp2(-y) / 32768 - 2.0 ** (-y / 4096)) <= 0.0014


@given(st.integers(1, (1 << 50)))
@settings(max_examples=100, deadline=None)
def test_rsqrt_accuracy(v):
    r, k = fx.rsqrt(v)
    assert abs(int(r) * 2.0 ** (-14 - int(k)) * math.sqrt(v) - 1) <= 1e-3


@given(st.lists(st.integers(-(1 << 40), 1 << 40), min_size=1, max_size=16), st.integers(-30, 30))
@settings(max_examples=60, deadline=None)
def test_normalize_keeps_value(p, e):
    m, ex = fx.normalize(np.array([p]), np.array([e]))
    assert m.min() >= -32768 and m.max() <= 32767        # int16 (-32768 occurs: rshr(-131071, 2))
    sh = int(ex[0]) - e
    assert sh >= 0 and (sh == 0 or np.abs(m).max() >= 1 << 13)
    for orig, got in zip(p, m[0]):
        if abs(int(got)) < 32767:                     # not saturated by the round-up
            assert abs(int(got) * 2 ** sh - orig) <= (2 ** sh) // 2


def test_silu_hand_values():
    x = fx.quantize_x32(np.array([0.0, 1.0, -1.0, 20.0, -20.0]))
    # sigmoid(1) -> round(32768 * 0.731059) = 23955, sigmoid(-1) -> round(32768 * 0.268941) = 8813
    assert fx.silu(x).tolist() == [0, py_rshr(65536 * 23955, 15), py_rshr(-65536 * 8813, 15), 20 * 65536, 0]
    assert fx.silu(x).tolist()[1:3] == [47910, -17626]


def test_rope_one_radian():
    # d = 2: one pair, angle = position * 1 rad; cos(1) = 0.5403 -> 8852.3, sin(1) = 0.8415 -> 13786.7
    cos, sin = fx.rope_table(2, 1.0, [0, 1])
    assert cos.tolist() == [[16384], [8852]] and sin.tolist() == [[0], [13787]]
    m, e = fx.rope((np.array([[[1000, 0]], [[1000, 0]]]), np.array([[0], [0]])), cos, sin)
    assert m[0, 0].tolist() == [1000, 0]
    assert m[1, 0].tolist() == [py_rshr(1000 * 8853, 14), py_rshr(1000 * 13787, 14)]


def test_quantize_kv_hand_example():
    mant = np.array([[14000, -7000, 0, 2000]])
    q, a, e = fx.quantize_kv((mant, np.array([-20])))
    t = 14000 * 9362                      # amax * RCP7
    ep = t.bit_length() - 8
    assert a[0] == t >> ep and e[0] == ep - 16 - 20
    rq = round(2 ** 24 / int(a[0]))
    assert q[0].tolist() == [max(-8, min(7, py_rshr(x * rq, 8 + ep))) for x in mant[0]]
    # t = 131068000 (27 bits) -> Ep = 19, A = 249, step = 249 * 2^3 = 1992: -7000/1992 = -3.51
    assert (int(a[0]), ep) == (249, 19) and q[0].tolist() == [7, -4, 0, 1]
    back = fx.dequantize_kv(q, a, e)[0] * 2.0 ** 20
    assert abs(back[0] - 14000) <= 14000 / 14 + 1


def py_linear(mant, exp, q, S, E_w, G, bias):
    """Spec re-derivation: per-group partial sums times the group scale, then the shift."""
    out = []
    for o in range(q.shape[0]):
        acc = 0
        for g in range(q.shape[1] // G):
            part = sum(int(mant[i]) * int(q[o, i]) for i in range(g * G, (g + 1) * G))
            acc += part * int(S[o, g])
        y = max(-(1 << 31), min((1 << 31) - 1, py_rshr(acc, E_w - exp - 16)))
        out.append(max(-(1 << 31), min((1 << 31) - 1, y + int(bias[o]))))
    return out


def test_linear_matches_scalar_spec(rng):
    w = fx.quantize_weight(rng.standard_normal((6, 32)) * 0.05, 8)
    assert w.q.min() >= -8 and w.q.max() <= 7 and w.scale.max() < 65536
    x = fx.x32_to_bfp(fx.quantize_x32(rng.standard_normal((3, 32))))
    bias = fx.quantize_x32(rng.standard_normal(6) * 0.1)
    got = fx.linear(x, w, bias)
    for t in range(3):
        assert got[t].tolist() == py_linear(x[0][t], int(x[1][t]), w.q, w.scale, w.exp, 8, bias)


def test_rmsnorm_matches_float(rng):
    x = rng.standard_normal((4, 64)) * 3
    gamma = 1 + 0.1 * rng.standard_normal(64)
    g, ge = fx.quantize_gain(gamma)
    m, e = fx.rmsnorm(fx.quantize_x32(x), g, ge, 1e-6)
    ref = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * gamma
    assert np.abs(m * 2.0 ** e[:, None] - ref).max() <= 3e-3 * np.abs(ref).max()


def py_attention_row(qm, qe, kq, ka, ke, vq, va, ve):
    """One query row, one head, scalar Python ints, straight from the spec text."""
    s = []
    for j in range(len(ka)):
        raw = sum(int(qm[i]) * int(kq[j][i]) for i in range(len(qm))) * int(ka[j])
        s.append(max(-(1 << 31), min((1 << 31) - 1, py_rshr(raw, -(qe + int(ke[j]) + 12)))))
    m = max(s)

    def exp2(d):
        y = py_rshr(-d, 4)
        n, f = y >> 8, y & 255
        return 0 if n > 15 else py_rshr(round(32768 * 2 ** (-f / 256)), n)
    p = [exp2(x - m) for x in s]
    l = sum(p)
    o = [0] * len(qm)
    for j in range(len(p)):
        w = py_rshr(p[j] * int(va[j]), 15 - 12 - int(ve[j]))
        for c in range(len(qm)):
            o[c] += w * int(vq[j][c])
    b = l.bit_length()
    r = round(2 ** 24 / py_rshr(l, b - 10))
    return [py_rshr(oc * r, b + 12 - 17) for oc in o]


def test_scores_with_extreme_exponents_equal_the_exact_integers(rng):
    """scores = sat32(rshr(dot A, -(e + E + 12))) with Python integers, including left shifts
    far past int64 (E = 127 with a large query exponent: the scores saturate, never wrap)."""
    t, hq, hkv, d, s = 2, 4, 2, 16, 24
    qm = rng.integers(-32768, 32768, (t, hq, d))
    qe = rng.choice([-30, -10, 0, 40, 100], size=(t, hq))
    kq = rng.integers(-8, 8, (s, hkv, d))
    ka = rng.choice([0, 128, 200, 255], size=(s, hkv))
    ke = rng.choice([-128, -60, -12, 0, 20, 127], size=(s, hkv))
    got = fx.scores((qm, qe), kq, ka, ke, hq // hkv)
    want = np.empty((hq, t, s), dtype=object)
    wraps = 0
    for h in range(hq):
        for i in range(t):
            for j in range(s):
                k = h // (hq // hkv)
                raw = int(sum(int(a) * int(b) for a, b in zip(qm[i, h], kq[j, k]))) * int(ka[j, k])
                sh = -(int(qe[i, h]) + int(ke[j, k]) + fx.S_FRAC)
                want[h, i, j] = max(-(1 << 31), min((1 << 31) - 1, py_rshr(raw, sh)))
                wraps += raw != 0 and abs(py_rshr(raw, sh)) >= 1 << 63      # int64 would wrap here
    assert got.tolist() == want.tolist()
    assert wraps > 0 and (got == (1 << 31) - 1).any() and (got == -(1 << 31)).any() and (got == 0).any()


def test_attention_matches_scalar_spec(rng):
    t, d = 5, 8
    q = fx.prescale_query(fx.x32_to_bfp(fx.quantize_x32(rng.standard_normal((t, 2, d)))), d)
    k = fx.quantize_kv(fx.x32_to_bfp(fx.quantize_x32(rng.standard_normal((t, 1, d)))))
    v = fx.quantize_kv(fx.x32_to_bfp(fx.quantize_x32(rng.standard_normal((t, 1, d)))))
    out = fx.attention(q, k, v, np.arange(t), np.arange(t), 2)
    for row in range(t):
        for h in range(2):
            ref = py_attention_row(q[0][row, h], int(q[1][row, h]), k[0][:row + 1, 0], k[1][:row + 1, 0],
                                   k[2][:row + 1, 0], v[0][:row + 1, 0], v[1][:row + 1, 0], v[2][:row + 1, 0])
            assert out[row, h].tolist() == ref


def words(m, l, o):
    return np.array([[m, l, *o]], dtype=np.int32)


def test_merge_hand_example():
    one = 1 << fx.S_FRAC
    a = words(3 * one, 40000, [1000, -1000])
    b = words(2 * one, 30000, [500, 7])          # one octave lower: weights 1/2
    got = fx.merge_states(a, b)
    assert got.tolist() == [[3 * one, 40000 + 15000, 1000 + 250, -1000 + 4]]   # rshr(7*16384, 15) = 4 (3.5 up)
    assert fx.merge_states(b, a).tolist() == got.tolist()


def test_merge_with_empty_and_equal_m():
    a = words(12345, 777, [1, -2, 3])
    empty = words(fx.M_EMPTY, 0, [0, 0, 0])
    assert fx.merge_states(a, empty).tolist() == a.tolist()
    assert fx.merge_states(empty, a).tolist() == a.tolist()
    assert fx.merge_states(empty, empty).tolist() == empty.tolist()
    assert fx.merge_states(a, a).tolist() == [[12345, 1554, 2, -4, 6]]


def test_reduce_max_and_wrapping_sum():
    a = np.array([5, -7, 2 ** 31 - 1], dtype=np.int32)
    b = np.array([-5, 9, 1], dtype=np.int32)
    assert fx.reduce_max([a, b]).tolist() == [5, 9, 2 ** 31 - 1]
    assert fx.reduce_sum([a, b]).tolist() == [0, 2, -(2 ** 31)]      # wraps modulo 2^32


def test_state_words_little_endian_bytes():
    w = words(-2, 3, [1, 256])
    assert w.astype("<i4").tobytes() == bytes([0xFE, 0xFF, 0xFF, 0xFF, 3, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0])


@pytest.mark.parametrize("group", [8, 16, 32])
def test_weight_quantiser_error_is_bounded(rng, group):
    w = rng.standard_normal((16, 64)) * 0.02
    qw = fx.quantize_weight(w, group)
    amax = np.abs(w.reshape(16, -1, group)).max(-1, keepdims=True)
    err = np.abs(qw.dequant() - w).reshape(16, -1, group)
    assert (err <= amax / 14 * 1.01 + 2.0 ** -qw.exp).all()


STATE_WORD = st.integers(-(1 << 20), 1 << 20)


@given(st.integers(-(1 << 24), 1 << 24), st.integers(0, 1 << 20), st.lists(STATE_WORD, min_size=2, max_size=2),
       st.integers(-(1 << 24), 1 << 24), st.integers(0, 1 << 20), st.lists(STATE_WORD, min_size=2, max_size=2))
@settings(max_examples=80, deadline=None)
def test_merge_commutes_and_equal_m_adds(ma, la, oa, mb, lb, ob):
    a, b = words(ma, la, oa), words(mb, lb, ob)
    assert fx.merge_states(a, b).tolist() == fx.merge_states(b, a).tolist()
    same = words(ma, lb, ob)
    assert fx.merge_states(a, same).tolist() == [[ma, la + lb, oa[0] + ob[0], oa[1] + ob[1]]]


@given(st.lists(st.integers(0, 3), min_size=9, max_size=9), st.integers(0, 2 ** 32 - 1))
@settings(max_examples=25, deadline=None)
def test_shared_max_states_fold_to_the_single_node_state(assign, seed):
    """Any partition of the keys into 4 nodes, folded in node order with the shared max,
    reproduces the single-node state bit for bit."""
    rng = np.random.default_rng(seed)
    t, d = 9, 8
    q = fx.prescale_query(fx.x32_to_bfp(fx.quantize_x32(rng.standard_normal((t, 2, d)) * 3)), d)
    k = fx.quantize_kv(fx.x32_to_bfp(fx.quantize_x32(rng.standard_normal((t, 1, d)))))
    v = fx.quantize_kv(fx.x32_to_bfp(fx.quantize_x32(rng.standard_normal((t, 1, d)))))
    s = fx.scores(q, *k, 2)
    valid = np.broadcast_to(fx.causal_mask(np.arange(t), np.arange(t))[None], s.shape)
    whole = fx.partial_state(s, valid, *v, 2)
    owner = np.array(assign)
    parts = []
    for node in range(4):
        mask = valid & (owner == node)[None, None, :]
        parts.append(fx.encode_state(fx.partial_state(s, mask, *v, 2, m_ref=whole.m)))
    assert np.array_equal(fx.fold_states(parts), fx.encode_state(whole))
