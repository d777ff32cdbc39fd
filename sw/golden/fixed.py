"""Fixed-point arithmetic of the MCF hardware, bit for bit (spec: docs/fixed-point.md).

Everything here is integer arithmetic on int64 NumPy arrays; every value that crosses a
hardware boundary fits the width named in the spec.  The format constants and the tables
(LUTs) live in ``mcf.spec.fixed`` (built once with float64 maths); the hardware stores
the same integers in ROM.  Where a wide dot product is evaluated with a float64 matmul
(for speed) every product and partial sum is an integer below 2^53, so the result is exact
whatever the summation order (asserted by ``_exact_matmul``).

Formats (names used throughout):
  X32   int32, value = X * 2^-16 (Q15.16), saturating.  Residual stream, projection outputs,
        biases, attention outputs, logits.
  BFP16 (mant, exp): int16 mantissas sharing one exponent per row; value = mant * 2^exp.
        Inputs of every matmul; produced by ``normalize``.
  W4    INT4 weights q in [-8, 7], one uint16 scale S per group of G inputs per output row,
        one exponent E_w per matrix: W = q * S * 2^-E_w.
  KV4   INT4 K/V: per (token, KV head) block of head_dim values, q in [-8, 7] and a scale
        (A uint8 in [128, 255] or 0, E int8): v = q * A * 2^E.
  SCORE int32, log2-domain attention score, value = s * 2^-S_FRAC.
  P     uint16 softmax weight, value = p * 2^-15 (1.0 = 32768).
  STATE (m, l, o) partial softmax state, int32 words: m SCORE, l = sum p (Q.15),
        o = sum p*v (value * 2^-O_FRAC).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Formats and ROM tables: the one definition is mcf.spec.fixed (the RTL reads it too).
from mcf.spec.fixed import (  # noqa: F401  (re-exported as fixed.NAME)
    X_FRAC, MANT_BITS, W_BITS, SCALE_BITS, GAIN_BITS, RSQRT_IDX_BITS, RSQRT_FRAC, ROPE_FRAC,
    SIGMOID_STEP_BITS, SIGMOID_RANGE, P_FRAC, S_FRAC, EXP_LUT_BITS, O_FRAC, RCP_IDX_BITS,
    RCP_FRAC, KV_A_BITS, W_MAX, RCP7, WORD_BITS, INT32_MIN, INT32_MAX, M_EMPTY, rsqrt_lut, exp2_lut,
    rcp_lut, sigmoid_lut, kv_rcp_lut, RSQRT_LUT, EXP2_LUT, RCP_LUT, SIGMOID_LUT, KV_RCP_LUT,
    round_half_up as _rnd)


# --- integer primitives -------------------------------------------------------------------
def sat(x, bits: int):
    """Clamp to the signed range of ``bits`` bits."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return np.clip(x, lo, hi)


def rshr(x, s):
    """Round-half-up arithmetic right shift: (x + 2^(s-1)) >> s for s > 0; x << -s for s < 0.

    ``s`` may be an array (broadcast against x).  Shifts beyond 62 give 0 (|x| < 2^61 here).
    A left shift whose exact result leaves int64 gives INT64_MIN / INT64_MAX (the exact value
    saturated to 64 bits), so a caller's satN (N <= 63) of it equals satN of the exact integer
    (docs/fixed-point.md 1: intermediates are exact); every other result is the exact one."""
    x = np.asarray(x, dtype=np.int64)
    s = np.asarray(s, dtype=np.int64)
    if s.ndim == 0:
        s = int(s)
        if s > 62:
            return np.zeros_like(x)
        if s > 0:
            return (x + (1 << (s - 1))) >> s
        return _shl_sat64(x, -s)
    # (x + 2^(s-1)) >> s == ((x >> (s-1)) + 1) >> 1 for s >= 1 (no wide intermediate)
    down = ((x >> np.clip(s - 1, 0, 62)) + 1) >> 1
    return np.where(s > 0, down, _shl_sat64(x, np.clip(-s, 0, 63)))


_I64_MIN, _I64_MAX = np.int64(np.iinfo(np.int64).min), np.int64(np.iinfo(np.int64).max)


def _shl_sat64(x, left):
    """x << left (0 <= left), saturated to int64: the shift left the range exactly when shifting
    back does not give x (the int64 shift wraps modulo 2^64; the arithmetic shift back is exact)."""
    left = np.minimum(left, 63)
    y = x << left
    out = (y >> left) != x
    if out.any():
        y = np.where(out, np.where(x < 0, _I64_MIN, _I64_MAX), y)
    return y


def bitlen(x):
    """Number of bits of a non-negative integer (0 -> 0), vectorised: 1 + floor(log2 x)."""
    x = np.asarray(x, dtype=np.int64).copy()
    n = np.zeros(x.shape, dtype=np.int64)
    for step in (32, 16, 8, 4, 2, 1):
        big = (x >> step) > 0
        n += np.where(big, step, 0)
        x = np.where(big, x >> step, x)
    return n + (x > 0)


def _exact_matmul(a: np.ndarray, b: np.ndarray, bound: float) -> np.ndarray:
    """Integer matmul via float64 BLAS; ``bound`` >= max |partial sum| must be < 2^53."""
    assert bound < 2.0 ** 53, "float64 matmul would not be exact"
    return (a.astype(np.float64, copy=False) @ b.astype(np.float64, copy=False)).astype(np.int64)




def score_constant(head_dim: int) -> tuple[int, int]:
    """log2(e)/sqrt(d) = C_M * 2^-C_E with C_M in [2^15, 2^16): the query prescale."""
    c = math.log2(math.e) / math.sqrt(head_dim)
    ce = 15 - math.floor(math.log2(c))
    cm = int(_rnd(c * 2.0 ** ce))
    if cm >= 1 << 16:
        cm, ce = cm >> 1, ce - 1
    return cm, ce


def rope_table(head_dim: int, theta: float, positions) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin tables [T, d/2], int16 Q.14: round(2^14 cos(p * theta^(-2j/d))) in float64."""
    inv = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]
    one = 1 << ROPE_FRAC
    return _rnd(np.cos(ang) * one), _rnd(np.sin(ang) * one)


# --- BFP16 and the elementwise units --------------------------------------------------------
def normalize(p, e):
    """Wide integers ``p`` [..., n] with row exponent ``e`` [...] -> BFP16 (mant, exp).

    sh = max(0, bitlen(max_row |p|) - 15); mant = sat16(rshr(p, sh)); exp = e + sh.
    No left shift: a small row is already exact."""
    p = np.asarray(p, dtype=np.int64)
    amax = np.abs(p).max(axis=-1)
    sh = np.maximum(bitlen(amax) - (MANT_BITS - 1), 0)
    mant = sat(rshr(p, sh[..., None]), MANT_BITS)
    return mant, np.asarray(e, dtype=np.int64) + sh


def x32_to_bfp(x):
    x = np.asarray(x, dtype=np.int64)
    return normalize(x, np.full(x.shape[:-1], -X_FRAC, dtype=np.int64))


def rsqrt(v):
    """1/sqrt(v) for integers v > 0: (r, k) with 1/sqrt(v) ~= r * 2^-14 * 2^-k.

    c = bitlen(v) rounded up to even, idx = rshr(v, c - 10) in [256, 1024], r = LUT[idx - 256],
    k = c / 2.  v = 0 gives r = 0."""
    v = np.asarray(v, dtype=np.int64)
    b = bitlen(v)
    c = b + (b & 1)
    idx = rshr(v, c - RSQRT_IDX_BITS)
    lo = 1 << (RSQRT_IDX_BITS - 2)
    r = np.where(v > 0, RSQRT_LUT[np.clip(idx - lo, 0, len(RSQRT_LUT) - 1)], 0)
    return r, c // 2


def rmsnorm(x, gain: np.ndarray, gain_exp: int, eps: float):
    """X32 rows [..., n] -> BFP16 of x / sqrt(mean(x^2) + eps) * gamma.

    ``gain`` = int16 round(gamma * sqrt(n) * 2^gain_exp) (sqrt(n) folded in offline)."""
    x = np.asarray(x, dtype=np.int64)
    return rmsnorm_eps_n(x, gain, gain_exp, eps_constant(x.shape[-1], eps))


def rmsnorm_eps_n(x, gain: np.ndarray, gain_exp: int, eps_n: int):
    """``rmsnorm`` with eps given as the integer EPS_N = ``eps_constant(n, eps)`` (what the
    node's VEC RMSNORM takes as an immediate)."""
    x = np.asarray(x, dtype=np.int64)
    amax = np.abs(x).max(axis=-1)
    s = np.maximum(bitlen(amax) - (MANT_BITS - 1), 0)
    m = sat(rshr(x, s[..., None]), MANT_BITS)
    ss = (m * m).sum(axis=-1)
    v = ss + rshr(int(eps_n), 2 * s)
    r, k = rsqrt(v)
    prod = rshr(m * r[..., None], RSQRT_FRAC) * gain
    return normalize(prod, -gain_exp - k)


def eps_constant(n: int, eps: float) -> int:
    """EPS_N = round(n * eps * 2^32): eps in the units of the squared mantissa sum."""
    return int(_rnd(n * eps * 2.0 ** 32))


def silu(x):
    """X32 -> X32: x * sigmoid(x), sigmoid from a 1024-entry LUT (step 1/64 over [-8, 8))."""
    x = np.asarray(x, dtype=np.int64)
    idx = rshr(x, X_FRAC - SIGMOID_STEP_BITS)
    n = SIGMOID_RANGE << SIGMOID_STEP_BITS
    sig = np.where(idx >= n, 1 << P_FRAC,
                   np.where(idx < -n, 0, SIGMOID_LUT[np.clip(idx + n, 0, 2 * n - 1)]))
    return sat(rshr(x * sig, P_FRAC), 32)


def bfp_mul(a, b):
    """Elementwise product of two BFP16 rows -> BFP16."""
    (am, ae), (bm, be) = a, b
    return normalize(am * bm, ae + be)


def rope(x, cos, sin):
    """BFP16 [T, H, d] (exp [T, H]) rotated with Q.14 tables [T, d/2] (rotate-half) -> BFP16.

    Tables of d columns give every element its own (cos, sin) (element i and i + d/2 of the
    d/2-column form share column i): the node's per-lane ROPE words."""
    m, e = x
    half = m.shape[-1] // 2
    x1, x2 = m[..., :half], m[..., half:]
    c, s = np.asarray(cos)[:, None, :], np.asarray(sin)[:, None, :]
    (c1, c2), (s1, s2) = ((c, c), (s, s)) if c.shape[-1] == half else \
        ((c[..., :half], c[..., half:]), (s[..., :half], s[..., half:]))
    y1 = rshr(x1 * c1 - x2 * s1, ROPE_FRAC)
    y2 = rshr(x2 * c2 + x1 * s2, ROPE_FRAC)
    return normalize(np.concatenate([y1, y2], axis=-1), e)


def prescale(q, cm: int, ce: int):
    """BFP16 times C_M 2^-C_E -> BFP16 (the node's VEC PRESCALE)."""
    m, e = q
    return normalize(np.asarray(m, dtype=np.int64) * int(cm), np.asarray(e, dtype=np.int64) - int(ce))


def prescale_query(q, head_dim: int):
    """Multiply a BFP16 query by log2(e)/sqrt(d) so scores come out in log2 units."""
    return prescale(q, *score_constant(head_dim))


# --- INT4 weights ----------------------------------------------------------------------------
CACHE_ELEMENTS = 1 << 25      # float64 copies of matrices up to 256 MB are cached


@dataclass
class QLinear:
    """W = q * S * 2^-E_w; q int8 [out, in] in [-8, 7], S uint16 [out, in / G]."""
    q: np.ndarray
    scale: np.ndarray
    exp: int
    group: int

    @property
    def shape(self):
        return self.q.shape

    def dequant(self) -> np.ndarray:
        s = np.repeat(self.scale.astype(np.float64), self.group, axis=1)
        return self.q * s * 2.0 ** -self.exp

    def dense_int(self, rows=slice(None)) -> np.ndarray:
        """q * S per element (|.| < 2^19), the integer matrix the accumulator sees."""
        return self.q[rows].astype(np.int64) * np.repeat(self.scale[rows].astype(np.int64), self.group, axis=1)

    def dense_t(self, rows=slice(None)) -> np.ndarray:
        """(q * S)^T as float64 (exact): the operand of the fast exact matmul.  Matrices up to
        CACHE_ELEMENTS are converted once and kept (a speed cache, not part of the spec)."""
        if self.q.size <= CACHE_ELEMENTS:
            if getattr(self, "_dense_t", None) is None:
                self._dense_t = np.ascontiguousarray(self._dense_f64(slice(None)).T)
            return self._dense_t[:, rows]
        return self._dense_f64(rows).T

    def _dense_f64(self, rows) -> np.ndarray:
        return self.q[rows].astype(np.float64) * np.repeat(self.scale[rows].astype(np.float64), self.group, axis=1)

    def rows(self, lo: int, hi: int) -> "QLinear":
        """Output rows [lo, hi): a row shard (tensor-parallel Q/K/V, gate, up).  The matrix
        exponent E_w stays the whole matrix's, so every row computes exactly as unsharded."""
        return QLinear(self.q[lo:hi], self.scale[lo:hi], self.exp, self.group)

    def cols(self, lo: int, hi: int) -> "QLinear":
        """Inputs [lo, hi) (whole groups): a column shard (tensor-parallel o_proj, down_proj)."""
        if lo % self.group or hi % self.group:
            raise ValueError(f"columns [{lo}, {hi}) are not whole groups of {self.group}")
        return QLinear(self.q[:, lo:hi], self.scale[:, lo // self.group:hi // self.group], self.exp, self.group)


def quantize_weight(w: np.ndarray, group: int) -> QLinear:
    """Offline INT4 quantiser (float maths is fine here: it runs on the host, once).

    Per output row and group of ``group`` inputs: scale s = amax / 7; one exponent per matrix
    E_w = floor(log2((2^16 - 1) / max s)); S = round(s * 2^E_w); q = clip(round(w / (S 2^-E_w)))."""
    out, n = w.shape
    if n % group:
        raise ValueError(f"group size {group} does not divide the input width {n}")
    block = max(1, (1 << 22) // n)            # rows per pass: bounds the float64 temporaries
    s = np.concatenate([np.abs(np.asarray(w[r:r + block], np.float64)).reshape(-1, n // group, group).max(-1)
                        for r in range(0, out, block)]) / 7.0
    smax = s.max()
    e = int(math.floor(math.log2(((1 << SCALE_BITS) - 1) / smax))) if smax > 0 else 0
    S = np.clip(_rnd(s * 2.0 ** e), 0, (1 << SCALE_BITS) - 1)
    q = np.empty((out, n), dtype=np.int8)
    for r in range(0, out, block):
        wg = np.asarray(w[r:r + block], np.float64).reshape(-1, n // group, group)
        step = (S[r:r + block] * 2.0 ** -e)[..., None]
        qb = np.where(step > 0, _rnd(wg / np.where(step > 0, step, 1.0)), 0)
        q[r:r + block] = np.clip(qb, -(1 << (W_BITS - 1)), (1 << (W_BITS - 1)) - 1).reshape(-1, n)
    return QLinear(q, S.astype(np.uint16), e, group)


def quantize_gain(gamma: np.ndarray) -> tuple[np.ndarray, int]:
    """RMSNorm gain with sqrt(n) folded in: int16 round(gamma sqrt(n) 2^E), one E per vector."""
    g = np.asarray(gamma, dtype=np.float64) * math.sqrt(len(gamma))
    gmax = np.abs(g).max()
    e = int(math.floor(math.log2(((1 << (GAIN_BITS - 1)) - 1) / gmax))) if gmax > 0 else 0
    return sat(_rnd(g * 2.0 ** e), GAIN_BITS), e


def quantize_x32(x: np.ndarray) -> np.ndarray:
    """Float -> X32 (biases; test inputs)."""
    return sat(_rnd(np.asarray(x, dtype=np.float64) * (1 << X_FRAC)), 32)


def linear(x, w: QLinear, bias=None, row_block: int = 8192):
    """BFP16 rows [T, n] (exp [T]) times INT4 W^T -> X32 [T, out] (+ X32 bias, saturating).

    acc = sum_g S[o,g] * sum_{i in g} mant[i] q[o,i] (exact integer); X = sat32(rshr(acc,
    E_w - exp - 16))."""
    m, e = x
    t, n = m.shape
    bound = float(n) * (1 << (MANT_BITS - 1)) * (1 << (W_BITS - 1)) * ((1 << SCALE_BITS) - 1)
    out = np.empty((t, w.shape[0]), dtype=np.int64)
    mf = m.astype(np.float64)
    for r0 in range(0, w.shape[0], row_block):      # blocks of output rows bound the memory
        rows = slice(r0, r0 + row_block)
        out[:, rows] = _exact_matmul(mf, w.dense_t(rows), bound)
    y = sat(rshr(out, (w.exp - e - X_FRAC)[:, None]), 32)
    if bias is not None:
        y = sat(y + bias, 32)
    return y


def embed(w: QLinear, tokens) -> np.ndarray:
    """Rows of an INT4 embedding table as X32: sat32(rshr(q * S, E_w - 16))."""
    return sat(rshr(w.dense_int(np.asarray(tokens)), w.exp - X_FRAC), 32)


# --- INT4 KV cache --------------------------------------------------------------------------
def quantize_kv(x):
    """BFP16 [..., d] (exp [...]) -> KV4 (q int8 [..., d], A [...], E [...]).

    amax = max |mant|; t = amax * RCP7 (~ amax/7 * 2^16); Ep = bitlen(t) - 8; A = t >> Ep;
    q = clip(rshr(mant * KV_RCP_LUT[A - 128], 8 + Ep), -8, 7); E = Ep - 16 + exp.
    An all-zero block has A = 0, E = 0."""
    m, e = x
    amax = np.abs(m).max(axis=-1)
    t = amax * RCP7
    ep = bitlen(t) - KV_A_BITS
    a = np.where(amax > 0, t >> np.maximum(ep, 0), 0)
    rq = KV_RCP_LUT[np.clip(a - 128, 0, 127)]
    q = sat(rshr(m * rq[..., None], (8 + ep)[..., None]), W_BITS)
    q = np.where(amax[..., None] > 0, q, 0)
    big_e = np.where(amax > 0, ep - 16 + e, 0)
    return q.astype(np.int8), a.astype(np.int64), big_e.astype(np.int64)


def dequantize_kv(q, a, e) -> np.ndarray:
    return q * (a * np.exp2(e.astype(np.float64)))[..., None]


# --- attention: scores, partial (m, l, o) states, normalisation ------------------------------
def exp2(d):
    """2^(d * 2^-S_FRAC) for d <= 0, as P (Q.15): y = rshr(-d, S_FRAC - 8); n = y >> 8;
    f = y & 255; p = rshr(EXP2_LUT[f], n), 0 when n > 15."""
    y = rshr(-np.asarray(d, dtype=np.int64), S_FRAC - EXP_LUT_BITS)
    n = y >> EXP_LUT_BITS
    f = y & ((1 << EXP_LUT_BITS) - 1)
    return np.where(n > P_FRAC, 0, rshr(EXP2_LUT[f], np.minimum(n, P_FRAC)))


def scores(q, kq, ka, ke, group: int):
    """SCORE [Hq, T, S]: q BFP16 (prescaled) [T, Hq, d] / [T, Hq]; K4 [S, Hkv, d] / [S, Hkv].

    raw = (sum_i mant_i kq_i) * A; s = sat32(rshr(raw, -(exp_q + E_k + S_FRAC)))."""
    qm, qe = q
    t, hq, d = qm.shape
    hkv = kq.shape[1]
    qg = qm.reshape(t, hkv, group, d).transpose(1, 2, 0, 3).reshape(hkv, group * t, d)
    bound = float(d) * (1 << (MANT_BITS - 1)) * (1 << (W_BITS - 1))
    dot = _exact_matmul(qg, kq.transpose(1, 2, 0), bound)          # batched over KV heads
    dot = dot.reshape(hkv, group, t, -1).reshape(hq, t, -1)     # head h = kvh * group + g
    kv_of = np.arange(hq) // group
    raw = dot * ka.T[kv_of][:, None, :]
    sh = -(qe.T[:, :, None] + ke.T[kv_of][:, None, :] + S_FRAC)
    return sat(rshr(raw, sh), 32)


@dataclass
class State:
    """Partial softmax states: m, l [Hq, T]; o [Hq, T, d] (int64 holding int32 values)."""
    m: np.ndarray
    l: np.ndarray
    o: np.ndarray


def partial_state(s, valid, vq, va, ve, group: int, m_ref=None) -> State:
    """(m, l, o) of queries over a set of keys.

    m = max valid score (M_EMPTY if none) unless ``m_ref`` (a shared, larger-or-equal max) is
    given; p = exp2(s - m) on valid keys; l = sat32(sum p); w = min(rshr(p * A_v, 15 - O_FRAC
    - E_v), W_MAX); o = sat32(sum_j w_j vq_j)."""
    m_loc = np.where(valid.any(axis=-1), np.where(valid, s, INT32_MIN).max(axis=-1), M_EMPTY)
    m = m_loc if m_ref is None else np.asarray(m_ref, dtype=np.int64)
    l, o = state_sums(s, valid, vq, va, ve, group, m)
    return State(m, sat(l, 32), sat(o, 32))


def attn_weights(s, valid, va, ve, group: int, m):
    """The softmax weights of scores ``s`` [Hq, T, S] with row maximum ``m`` [Hq, T]:
    p = exp2(s - m) on valid keys (0 elsewhere) and the PV weights
    w = min(rshr(p A_v, 15 - O_FRAC - E_v), W_MAX), both [Hq, T, S] int64 (p >= 0, A_v >= 0, so
    w >= 0; W_MAX keeps w in two balanced 16-bit digits, docs/fixed-point.md section 5.8)."""
    hq = s.shape[0]
    p = np.where(valid, exp2(s - np.asarray(m, dtype=np.int64)[..., None]), 0)
    kv_of = np.arange(hq) // group
    w = np.minimum(rshr(p * va.T[kv_of][:, None, :], P_FRAC - O_FRAC - ve.T[kv_of][:, None, :]), W_MAX)
    return p, w


def state_sums(s, valid, vq, va, ve, group: int, m):
    """The unsaturated sums of a state with row maximum ``m`` [Hq, T]: l = sum p, o = sum_j w_j
    vq_j (``partial_state`` saturates them to int32; the node's attention unit accumulates them
    over several KV runs and saturates when it emits)."""
    hq = s.shape[0]
    hkv = vq.shape[1]
    p, w = attn_weights(s, valid, va, ve, group, m)
    l = p.sum(axis=-1)
    bound = float(s.shape[-1]) * (1 << 31) * (1 << (W_BITS - 1))
    t = s.shape[1]
    wg = w.reshape(hkv, group * t, -1)
    o = _exact_matmul(wg, vq.transpose(1, 0, 2), bound)              # batched over KV heads
    return l, o.reshape(hq, t, -1)


def finalize(st: State) -> np.ndarray:
    """o / l as X32 [T, Hq, d]: b = bitlen(l); idx = rshr(l, b - 10) in [512, 1024];
    r = RCP_LUT[idx - 512]; out = sat32(rshr(o * r, b + O_FRAC - 17)); l = 0 gives 0."""
    l = st.l
    b = bitlen(l)
    idx = rshr(l, b - RCP_IDX_BITS)
    lo = 1 << (RCP_IDX_BITS - 1)
    r = np.where(l > 0, RCP_LUT[np.clip(idx - lo, 0, len(RCP_LUT) - 1)], 0)
    out = sat(rshr(st.o * r[..., None], (b + O_FRAC + RCP_FRAC - P_FRAC - RCP_IDX_BITS - X_FRAC)[..., None]), 32)
    return out.transpose(1, 0, 2)


def causal_mask(q_pos, k_pos) -> np.ndarray:
    """valid[t, j] = k_pos[j] <= q_pos[t]."""
    return np.asarray(k_pos)[None, :] <= np.asarray(q_pos)[:, None]


def attention(q, k, v, q_pos, k_pos, group: int, block: int = 256) -> np.ndarray:
    """Single-node causal attention, the canonical definition: one state per query row over
    all its visible keys (m = the row maximum), then ``finalize``.  X32 [T, Hq, d].

    Rows are independent, so they are computed in blocks of ``block`` queries, each against
    only the keys some row of the block can see (same bits, half the work under the mask)."""
    q_pos, k_pos = np.asarray(q_pos), np.asarray(k_pos)
    outs = []
    for t0 in range(0, len(q_pos), block):
        rows = slice(t0, t0 + block)
        keys = np.flatnonzero(k_pos <= q_pos[rows].max())
        qb = (q[0][rows], q[1][rows])
        kb, vb = tuple(a[keys] for a in k), tuple(a[keys] for a in v)
        s = scores(qb, *kb, group)
        valid = np.broadcast_to(causal_mask(q_pos[rows], k_pos[keys])[None], s.shape)
        outs.append(finalize(partial_state(s, valid, *vb, group)))
    return np.concatenate(outs)


# --- the (m, l, o) wire format and the NIC reductions ----------------------------------------
def encode_state(st: State) -> np.ndarray:
    """Words [..., d + 2] int32: [m, l, o_0 .. o_{d-1}] per (head, query); little-endian on the
    wire (``words.astype('<i4').tobytes()``)."""
    return np.concatenate([st.m[..., None], st.l[..., None], st.o], axis=-1).astype(np.int32)


def decode_state(words) -> State:
    w = np.asarray(words, dtype=np.int64)
    return State(w[..., 0], w[..., 1], w[..., 2:])


def merge_states(a, b) -> np.ndarray:
    """SOFTMAX_MERGE of two word arrays [..., d + 2] -> words.

    m = max(m_a, m_b); f_x = exp2(m_x - m) (exactly 32768 for the larger one, 0 for an empty
    state); l = sat32(rshr(l_a f_a, 15) + rshr(l_b f_b, 15)); o likewise per element.  With
    m_a == m_b this is exact saturating addition."""
    sa, sb = decode_state(a), decode_state(b)
    m = np.maximum(sa.m, sb.m)
    fa = exp2(sa.m - m)
    fb = exp2(sb.m - m)
    l = sat(rshr(sa.l * fa, P_FRAC) + rshr(sb.l * fb, P_FRAC), 32)
    o = sat(rshr(sa.o * fa[..., None], P_FRAC) + rshr(sb.o * fb[..., None], P_FRAC), 32)
    return encode_state(State(m, l, o))


def fold_states(states_by_node) -> np.ndarray:
    """The fixed merge order: ((s_0 + s_1) + s_2) + ... in increasing source-node id."""
    it = iter(states_by_node)
    acc = np.asarray(next(it), dtype=np.int32)
    for s in it:
        acc = merge_states(acc, s)
    return acc


def reduce_max(words_by_node) -> np.ndarray:
    """ReduceOp.MAX on int32 words: signed maximum (order-free)."""
    return np.maximum.reduce([np.asarray(w, dtype=np.int32) for w in words_by_node])


def reduce_sum(words_by_node) -> np.ndarray:
    """ReduceOp.SUM on int32 words: two's-complement addition modulo 2^32 (wraps; order-free)."""
    acc = np.zeros_like(np.asarray(words_by_node[0], dtype=np.int64))
    for w in words_by_node:
        acc = acc + np.asarray(w, dtype=np.int64)
    return ((acc + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
