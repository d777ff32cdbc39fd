"""Random jobs for the compute-unit benches: inputs packed the way the RTL ports take them,
expected outputs from the golden fixed-point model (``mcf.sw.golden.fixed``), never from
a model of the RTL."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mcf.spec import isa
from mcf.spec.fixed import POS_BITS, W_BITS
from mcf.sw.golden import fixed as fx


def pack(values, bits: int) -> int:
    """Little-endian packing of signed/unsigned ints into one integer (element 0 lowest)."""
    out, mask = 0, (1 << bits) - 1
    for i, v in enumerate(np.asarray(values).reshape(-1)):
        out |= (int(v) & mask) << (i * bits)
    return out


def unpack(word: int, bits: int, count: int, signed: bool = True) -> list[int]:
    out = []
    for i in range(count):
        v = (word >> (i * bits)) & ((1 << bits) - 1)
        if signed and v >> (bits - 1):
            v -= 1 << bits
        out.append(v)
    return out


@dataclass
class LinearJob:
    """One ``fixed.linear`` call as matrix-unit traffic."""
    cmd: dict
    act: list = field(default_factory=list)      # (addr, data)
    exp: list = field(default_factory=list)      # (addr, data)
    w: list = field(default_factory=list)        # weight beats (ints)
    scale: list = field(default_factory=list)
    bias: list = field(default_factory=list)
    expected: list = field(default_factory=list)  # output beats (ints), one per (tile, token)
    macs: int = 0
    prev: list = field(default_factory=list)      # pv with acc: the previous wide value, a beat per (tile, token)


def random_bfp_rows(rng: np.random.Generator, t: int, n: int):
    """BFP16 rows over a wide range of magnitudes (exercises left and right requant shifts)."""
    mag = 2.0 ** rng.integers(-6, 12, size=(t, 1))
    x = fx.quantize_x32(rng.standard_normal((t, n)) * mag)
    return fx.x32_to_bfp(x)


def linear_job(rng, rows, lanes, max_tokens, t, n, out, group, bias=True, w_scale=None) -> LinearJob:
    m, e = random_bfp_rows(rng, t, n)
    w = rng.standard_normal((out, n)) * (w_scale if w_scale is not None else 2.0 ** rng.integers(-8, 3))
    qw = fx.quantize_weight(w, group)
    b = fx.quantize_x32(rng.standard_normal(out) * 4) if bias else None
    y = fx.linear((m, e), qw, b)
    return pack_linear(m, e, qw, b, y, rows, lanes, max_tokens)


def pack_activations(job: LinearJob, m, e, lanes: int, max_tokens: int) -> None:
    """BFP16 rows (m [t, n], e [t]) into the matrix unit's activation buffer (address = beat *
    max_tokens + token) and its row exponents."""
    t, n = m.shape
    for beat in range(n // lanes):
        for tok in range(t):
            job.act.append((beat * max_tokens + tok, pack(m[tok, beat * lanes:(beat + 1) * lanes], 16)))
    job.exp = [(tok, int(e[tok]) & 0xFF) for tok in range(t)]


def pack_linear(m, e, qw, b, y, rows, lanes, max_tokens) -> LinearJob:
    t, n = m.shape
    out = qw.shape[0]
    group = qw.group
    assert out % rows == 0 and group % lanes == 0 and n % group == 0 and t <= max_tokens
    job = LinearJob(cmd=dict(tokens=t, group_beats=group // lanes, groups=n // group,
                             tiles=out // rows, w_exp=qw.exp, bias=int(b is not None)))
    pack_activations(job, m, e, lanes, max_tokens)
    for tile in range(out // rows):
        r = slice(tile * rows, (tile + 1) * rows)
        for gi in range(n // group):
            for jb in range(group // lanes):
                c0 = gi * group + jb * lanes
                job.w.append(pack(qw.q[r, c0:c0 + lanes], 4))
            job.scale.append(pack(qw.scale[r, gi], 16))
        if b is not None:
            job.bias.append(pack(b[r], 32))
        for tok in range(t):
            job.expected.append(pack(y[tok, r], 32))
    job.macs = t * n * out
    return job


def pv_digits(w):
    """GEMM_PV's activation digits of weight words w (docs/attention-array.md, step 3): the word
    taken as min(w, W_MAX), then hi = (w + 2^15) >> 16 and lo = w - hi 2^16, both int16
    (exact for every int32 word up to W_MAX: w = hi 2^16 + lo)."""
    w = np.minimum(np.asarray(w, dtype=np.int64), fx.W_MAX)
    hi = (w + (1 << 15)) >> 16
    return hi, w - (hi << 16)


def pv_run_keys(node, keys: int, block_keys: int) -> int:
    """Keys of one GEMM_PV over a run of KV blocks of ``block_keys`` keys on ``node`` (a NodeConfig): all
    ``keys`` when its activation buffer takes them (2 keys <= the widest row), else the most that it takes
    and that are whole blocks and MAC lane groups (a later run starts on a block; 0: none)."""
    from math import lcm
    max_n = max(node.hidden_size, node.intermediate_size, node.num_heads * node.head_dim)
    if 2 * keys <= max_n:
        return keys
    step = lcm(block_keys, node.mac_lanes)
    return max_n // 2 // step * step


def pv_weights(rng, r: int, keys: int, d: int, extreme: bool = False, scales: bool = False, v_max: int = -8):
    """Random softmax weights of ``r`` rows over ``keys`` V rows, from the golden model: scores,
    a visibility mask, V = quantize_kv(rows), w = ``fx.attn_weights`` and o = ``fx.state_sums``'
    exact o.  ``extreme``: keys at p = 2^15 with A = 255 and a large E (w = W_MAX), invisible
    keys (w = 0) and V = ``v_max`` (-8: o below int32; 7: above).  Returns (w [r, keys], vq [keys, d], o [r, d]) as int64; with ``scales``
    (w, (vq, va, ve), o): the V rows' KV4 triple (what a V segment holds)."""
    s = rng.integers(-(1 << 20), 1 << 20, size=(1, r, keys))
    valid = rng.random((1, r, keys)) < 0.8
    vq, va, ve = fx.quantize_kv(random_kv_rows(rng, keys, d))
    if extreme:
        vq[: keys // 2] = v_max
        va[::3], ve[::3] = 255, 60              # w = W_MAX where p = 2^15
        s[:, :, ::3] = 1 << 20                  # the row maximum (p = 2^15) on those keys
        valid[:, 0, 1::3] = False               # w = 0
        valid[:, -1, ::3] = False               # a row without W_MAX keys (its o stays inside int32)
    m = np.where(valid, s, fx.INT32_MIN).max(axis=-1)
    va, ve = va[:, None], ve[:, None]
    _, w = fx.attn_weights(s, valid, va, ve, 1, m)
    _, o = fx.state_sums(s, valid, vq[:, None, :], va, ve, 1, m)
    return (w[0], (vq, va[:, 0], ve[:, 0]), o[0]) if scales else (w[0], vq, o[0])


def pv_job(w, vq, o, rows: int, lanes: int, max_tokens: int, prev=None, wide: bool = False) -> LinearJob:
    """Matrix-unit traffic of pv mode: o[t] (+ prev[t], exact) = sum_j w[t, j] vq[j] for ``r`` rows
    of weights w [r, S] over V rows vq [S, d].  Activation beat 2 b + x of token t = digit x (0:
    hi, 1: lo) of keys b K .. b K + K - 1; weight beats key beat by key beat, channel tile by
    tile (rows = channels, element p K + k = vq[b K + k, c P + p]); output per (tile, token):
    sat32, or the wide value as two beats (low words, high words)."""
    r, S = w.shape
    d = vq.shape[1]
    P, K = rows, lanes
    C = d // P
    y = o if prev is None else o + prev
    job = LinearJob(cmd=dict(tokens=r, group_beats=1, groups=S // K, tiles=C, w_exp=0, bias=0, kv=0, pv=1,
                             acc=int(prev is not None), wide=int(wide)))
    hi, lo = pv_digits(w)
    for b in range(S // K):
        for x, dig in enumerate((hi, lo)):
            for tok in range(r):
                job.act.append(((2 * b + x) * max_tokens + tok, pack(dig[tok, b * K:(b + 1) * K], 16)))
        for c in range(C):
            job.w.append(pack(vq[b * K:(b + 1) * K, c * P:(c + 1) * P].T, 4))
    for c in range(C):
        for tok in range(r):
            cols = slice(c * P, (c + 1) * P)
            if prev is not None:
                job.prev.append(pack(prev[tok, cols], 64))
            if wide:
                job.expected += [pack(y[tok, cols], 32), pack(y[tok, cols] >> 32, 32)]
            else:
                job.expected.append(pack(fx.sat(y[tok, cols], 32), 32))
    job.macs = r * S * d
    return job


def random_kv_rows(rng, count: int, d: int):
    """BFP16 rows like RoPE'd K / V rows, plus corner cases: zero rows, -32768, tiny rows."""
    m, e = random_bfp_rows(rng, count, d)
    m = m.copy()
    if count > 2:
        m[0] = 0                          # all-zero block: A = E = 0
        m[1, :] = rng.integers(-3, 4, d)  # tiny mantissas
        m[2, 0] = -32768
    return m, e


def kv_blocks(rng, count: int, d: int, lanes: int):
    """(input beats, expected output beats) for the KV writer, as packed ints
    (layouts ``kv_in_layout`` / ``kv_out_layout``: fields LSB first)."""
    return kv_beats(*random_kv_rows(rng, count, d), lanes)


def kv_beats(m, e, lanes: int):
    """(input beats, expected output beats) of the KV writer for BFP16 rows (m [count, d], e [count])."""
    count, d = m.shape
    q, a, big_e = fx.quantize_kv((m, e))
    nb = d // lanes
    beats_in, beats_out = [], []
    for r in range(count):
        for b in range(nb):
            last = int(b == nb - 1)
            sl = slice(b * lanes, (b + 1) * lanes)
            beats_in.append(pack(m[r, sl], 16) | ((int(e[r]) & 0xFF) << (16 * lanes)) | (last << (16 * lanes + 8)))
            beats_out.append(pack(q[r, sl], 4) | (int(a[r]) << (4 * lanes))
                             | ((int(big_e[r]) & 0xFF) << (4 * lanes + 8)) | (last << (4 * lanes + 16)))
    return beats_in, beats_out


@dataclass
class AttentionJob:
    """Attention-unit traffic for ``rows`` query rows over keys split in ``runs`` (each run one
    pass, ``last`` on its final key): MAX over every run (the first with ``first``), then APPLY
    over every run, then one emit of every row in ``mode`` (``spec.isa.EmitMode``)."""
    rows: int
    q: list            # (row, packed q_layout)
    k: list            # packed k_layout beats, without ``last`` (``k_run`` adds it)
    v: list            # packed v_layout beats
    runs: list         # (start, stop) key ranges, one pass each
    mode: int          # EmitMode of the final emit
    expected: list     # its 32-bit output words (unsigned ints)
    max_words: list = field(default_factory=list)   # decode protocol: the MAX emit (local maxima)
    mref: list = field(default_factory=list)        # decode protocol: (row, global M) loaded before APPLY


def k_run(job: AttentionJob, run: tuple, head_dim: int) -> list:
    """The K beats of one run, ``last`` set on its final key."""
    a, b = run
    beats = list(job.k[a:b])
    beats[-1] |= 1 << (W_BITS * head_dim + 8 + 8 + POS_BITS)
    return beats


def attention_job(rng, d, group, tokens, keys, final=True, protocol=False, runs=1,
                  w_bound=False, v_scales=None) -> AttentionJob:
    """``group`` query heads of one KV head x ``tokens`` rows against ``keys`` INT4 keys split
    into ``runs`` runs; row r = (token r // group, head r % group).  Expected words from
    ``fixed.scores``, ``fixed.partial_state`` and ``fixed.finalize`` / ``fixed.encode_state``
    over all the keys at once (one state, whatever the runs).  ``w_bound``: crafted V bytes
    (key 0 at V exponent 60, every other V element 0) so that each row's w_0 is the W_MAX bound
    and o = (W_MAX, -W_MAX, 0, ...), which 32-bit saturation would not give.  ``v_scales``:
    [(A_v, E_v)] of each of the ``keys`` <= d keys, V key j one-hot (+-1 at element j), every
    key the same K row and visible to every row (equal scores: p = 2^15 each), so that o[j] =
    +-w_j shows each key's w = min(rshr(p A_v, 3 - E_v), W_MAX) on its own."""
    R = group * tokens
    qm, qe = random_bfp_rows(rng, R, d)
    q = fx.prescale_query((qm.reshape(tokens, group, d), qe.reshape(tokens, group)), d)
    kq, ka, ke = fx.quantize_kv(random_kv_rows(rng, keys, d))
    vq, va, ve = fx.quantize_kv(random_kv_rows(rng, keys, d))
    if w_bound:
        vq[:] = 0
        vq[0, :2] = (1, -1)
        va[0], ve[0] = 255, 60
    if v_scales is not None:
        assert len(v_scales) == keys <= d
        vq[:] = 0
        vq[np.arange(keys), np.arange(keys)] = np.where(np.arange(keys) % 2, -1, 1)
        va[:], ve[:] = np.array(v_scales).T
        kq[:], ka[:], ke[:] = kq[-1], ka[-1], ke[-1]
    kq, ka, ke, vq, va, ve = kq[:, None], ka[:, None], ke[:, None], vq[:, None], va[:, None], ve[:, None]
    q_pos = rng.integers(0, keys + 2, size=tokens) if v_scales is None else keys - 1 + np.arange(tokens)
    k_pos = np.arange(keys)
    valid = np.broadcast_to(fx.causal_mask(q_pos, k_pos)[None], (group, tokens, keys))
    s = fx.scores(q, kq, ka, ke, group)
    m_ref = None
    local = fx.partial_state(s, valid, vq, va, ve, group).m             # [Hq, T]
    if protocol:
        # Decode protocol: our local max goes to ReduceOp.MAX with another node's; the state
        # is then built with the global M (docs/fixed-point.md section 7.4).
        other = np.where(rng.random(local.shape) < 0.3, fx.M_EMPTY,
                         local + rng.integers(-4000, 4000, size=local.shape))
        other = np.where(local == fx.M_EMPTY, rng.integers(-20000, 0, size=local.shape), other)
        m_ref = np.maximum(local, np.clip(other, fx.INT32_MIN, fx.INT32_MAX))
    st = fx.partial_state(s, valid, vq, va, ve, group, m_ref=m_ref)
    if final:
        out = fx.finalize(st)                         # [T, Hq, d]
        rows_words = [out[r // group, r % group] for r in range(R)]
    else:
        words = fx.encode_state(st)                   # [Hq, T, d + 2]
        rows_words = [words[r % group, r // group] for r in range(R)]
    cuts = sorted(rng.choice(np.arange(1, keys), size=min(runs, keys) - 1, replace=False)) if runs > 1 else []
    bounds = [0, *[int(c) for c in cuts], keys]
    qmr, qer = q[0].reshape(R, d), q[1].reshape(R)
    job = pack_attention(qmr, qer, np.repeat(q_pos, group), kq[:, 0], ka[:, 0], ke[:, 0], k_pos,
                         vq[:, 0], va[:, 0], ve[:, 0])
    job.runs = list(zip(bounds[:-1], bounds[1:]))
    job.mode = int(isa.EmitMode.FINAL if final else isa.EmitMode.STATE)
    job.expected = [int(w) & 0xFFFFFFFF for row in rows_words for w in row]
    job.max_words = [int(local[r % group, r // group]) & 0xFFFFFFFF for r in range(R)]
    if protocol:
        job.mref = [(r, int(m_ref[r % group, r // group])) for r in range(R)]
    return job


@dataclass
class VectorJob:
    cmd: dict
    a: list          # (x, exp)
    b: list          # (x, y, exp)
    expected: list   # (x, exp, last); exp 0 for X32 results


def vector_job(rng, op: str, n: int) -> VectorJob:
    """One row (RoPE: one head of n = d) of a vector-unit op, expected from the golden op."""
    from mcf.hw.compute.vector import VecOp
    cmd = dict(op=int(VecOp[op]), n=n, gain_exp=0, eps=0, cm=0, ce=0)
    x = fx.quantize_x32(rng.standard_normal(n) * 2.0 ** rng.integers(-8, 10))
    zeros = [(0, 0, 0)] * n

    def bfp_out(mant, e):
        return [(int(v), int(e), int(i == n - 1)) for i, v in enumerate(mant)]

    if op == "TO_BFP":
        mant, e = fx.x32_to_bfp(x[None])
        return VectorJob(cmd, [(int(v), 0) for v in x], zeros, bfp_out(mant[0], e[0]))
    if op == "RMSNORM":
        gamma = rng.standard_normal(n) * 0.5 + 1.0
        gain, gexp = fx.quantize_gain(gamma)
        eps = 1e-6
        cmd.update(gain_exp=gexp, eps=fx.eps_constant(n, eps))
        mant, e = fx.rmsnorm(x[None], gain, gexp, eps)
        return VectorJob(cmd, [(int(v), 0) for v in x], [(int(g), 0, 0) for g in gain], bfp_out(mant[0], e[0]))
    if op == "SILU":
        y = fx.silu(x)
        return VectorJob(cmd, [(int(v), 0) for v in x], zeros, [(int(v), 0, int(i == n - 1)) for i, v in enumerate(y)])
    if op == "RESIDUAL":
        r = fx.quantize_x32(rng.standard_normal(n) * 2.0 ** rng.integers(-8, 16))
        y = fx.sat(x + r, 32)
        return VectorJob(cmd, [(int(v), 0) for v in x], [(int(v), 0, 0) for v in r],
                         [(int(v), 0, int(i == n - 1)) for i, v in enumerate(y)])
    am, ae = fx.x32_to_bfp(x[None])
    if op == "MUL":
        bm, be = fx.x32_to_bfp(fx.quantize_x32(rng.standard_normal(n) * 2.0 ** rng.integers(-8, 10))[None])
        mant, e = fx.bfp_mul((am, ae), (bm, be))
        return VectorJob(cmd, [(int(v), int(ae[0])) for v in am[0]], [(int(v), 0, int(be[0])) for v in bm[0]],
                         bfp_out(mant[0], e[0]))
    if op == "ROPE":
        pos = int(rng.integers(0, 4096))
        cos, sin = fx.rope_table(n, 1e6, [pos])
        mant, e = fx.rope((am[None], ae[None]), cos, sin)        # [T=1, H=1, d]
        half = n // 2
        b = [(int(cos[0, i % half]), int(sin[0, i % half]), 0) for i in range(n)]
        return VectorJob(cmd, [(int(v), int(ae[0])) for v in am[0]], b, bfp_out(mant[0, 0], e[0, 0]))
    if op == "PRESCALE":
        cm, ce = fx.score_constant(n)
        cmd.update(cm=cm, ce=ce)
        mant, e = fx.prescale_query((am, ae), n)
        return VectorJob(cmd, [(int(v), int(ae[0])) for v in am[0]], zeros, bfp_out(mant[0], e[0]))
    raise ValueError(op)


def pack_attention(qm, qe, qpos, kq, ka, ke, kpos, vq, va, ve) -> AttentionJob:
    """Attention-unit traffic for rows (qm [R, d], qe [R], qpos [R]) over keys [S] (one run)."""
    R, d = qm.shape
    qw = [(r, pack(qm[r], 16) | ((int(qe[r]) & 0xFF) << (16 * d)) | (int(qpos[r]) << (16 * d + 8)))
          for r in range(R)]
    kb = [pack(kq[j], 4) | (int(ka[j]) << (4 * d)) | ((int(ke[j]) & 0xFF) << (4 * d + 8))
          | (int(kpos[j]) << (4 * d + 16)) for j in range(len(kq))]
    vb = [pack(vq[j], 4) | (int(va[j]) << (4 * d)) | ((int(ve[j]) & 0xFF) << (4 * d + 8))
          for j in range(len(vq))]
    return AttentionJob(R, qw, kb, vb, [(0, len(kb))], int(isa.EmitMode.FINAL), [])


def vector_beats(job: VectorJob, lanes: int):
    """A job's per-element operands as beats of ``lanes`` elements (payload dicts)."""
    n = len(job.a)
    assert n % lanes == 0
    a, b = [], []
    for t in range(0, n, lanes):
        a.append({"x": pack([x for x, _ in job.a[t:t + lanes]], 32), "exp": job.a[t][1]})
        b.append({"x": pack([x for x, _, _ in job.b[t:t + lanes]], 32),
                  "y": pack([y for _, y, _ in job.b[t:t + lanes]], 16), "exp": job.b[t][2]})
    return a, b


def vector_elements(beats, lanes: int):
    """Output beats (x, exp, last) -> per-element (x, exp, last), last on the final element."""
    out = []
    for x, e, last in beats:
        vals = unpack(x, 32, lanes)
        for k, v in enumerate(vals):
            out.append((v, e, int(bool(last) and k == lanes - 1)))
    return out


@dataclass
class SoftmaxJob:
    """Attention-unit traffic of a softmax pass over streamed scores (``cmd.src``): ``rows``
    query rows (positions only matter) over keys split in ``runs``; expected values from the
    golden ``partial_state`` (m), ``attn_weights`` (w), ``state_sums`` (l) and ``finalize``."""
    rows: int
    q: list            # (row, packed q_layout)
    s: list            # packed s_layout beats, one per key, without ``last``
    runs: list         # (start, stop) key ranges, one pass each
    max_words: list    # the MAX emit after the MAX passes (local maxima)
    mref: list         # decode protocol: (row, global M) loaded before APPLY
    w: list            # per key: the R words of w (unsigned ints)
    state_words: list  # STATE emit after APPLY, o untouched (0): [m, sat32(l), 0 ...] per row
    o_words: list      # per row: head_dim int32 words sat32(o) (what GEMM_PV writes) to load
    final_words: list  # FINAL emit after the o load (unsigned ints)


def softmax_job(rng, d, group, tokens, keys, runs=1, protocol=False) -> SoftmaxJob:
    """``group`` heads x ``tokens`` rows (row r = (token r // group, head r % group)) over
    ``keys`` keys: golden scores of random Q / K (with some saturated ones), V scales of random
    V rows; key j at position 2 + j; token 0's rows see no key, the others some or all."""
    from mcf.spec.fixed import EXP_BITS, KV_A_BITS
    R = group * tokens
    qm, qe = random_bfp_rows(rng, R, d)
    q = fx.prescale_query((qm.reshape(tokens, group, d), qe.reshape(tokens, group)), d)
    kq, ka, ke = fx.quantize_kv(random_kv_rows(rng, keys, d))
    vq, va, ve = fx.quantize_kv(random_kv_rows(rng, keys, d))
    kq, ka, ke, vq, va, ve = kq[:, None], ka[:, None], ke[:, None], vq[:, None], va[:, None], ve[:, None]
    q_pos = rng.integers(0, keys + 4, size=tokens)
    q_pos[0] = 1                                          # a row that sees no key
    k_pos = 2 + np.arange(keys)
    valid = np.broadcast_to(fx.causal_mask(q_pos, k_pos)[None], (group, tokens, keys))
    s = fx.scores(q, kq, ka, ke, group).copy()
    hot = rng.random(s.shape) < 0.05                     # saturated scores, both ends
    s[hot] = rng.choice([fx.INT32_MIN, fx.INT32_MAX, fx.INT32_MAX - 5], size=int(hot.sum()))
    local = fx.partial_state(s, valid, vq, va, ve, group).m                    # [Hq, T]
    m_ref = None
    if protocol:
        other = np.where(rng.random(local.shape) < 0.3, fx.M_EMPTY,
                         local + rng.integers(-4000, 4000, size=local.shape))
        other = np.where(local == fx.M_EMPTY, rng.integers(-20000, 0, size=local.shape), other)
        m_ref = np.maximum(local, np.clip(other, fx.INT32_MIN, fx.INT32_MAX))
    m = local if m_ref is None else m_ref
    _, w = fx.attn_weights(s, valid, va, ve, group, m)                          # [Hq, T, S]
    l, _ = fx.state_sums(s, valid, vq, va, ve, group, m)
    st = fx.partial_state(s, valid, vq, va, ve, group, m_ref=m_ref)
    final = fx.finalize(st)                                                     # [T, Hq, d]

    def row(a, r):
        return a[r % group, r // group]
    qmr, qer = q[0].reshape(R, d), q[1].reshape(R)
    qpos = np.repeat(q_pos, group)
    qw = [(r, pack(qmr[r], 16) | ((int(qer[r]) & 0xFF) << (16 * d)) | (int(qpos[r]) << (16 * d + 8)))
          for r in range(R)]
    sb = [pack([row(s, r)[j] for r in range(R)], 32) | (int(k_pos[j]) << (32 * R))
          | (int(va[j, 0]) << (32 * R + POS_BITS)) | ((int(ve[j, 0]) & 0xFF) << (32 * R + POS_BITS + KV_A_BITS))
          for j in range(keys)]
    assert EXP_BITS == 8
    cuts = sorted(rng.choice(np.arange(1, keys), size=min(runs, keys) - 1, replace=False)) if runs > 1 else []
    bounds = [0, *[int(c) for c in cuts], keys]
    u32 = 0xFFFFFFFF
    return SoftmaxJob(
        rows=R, q=qw, s=sb, runs=list(zip(bounds[:-1], bounds[1:])),
        max_words=[int(row(local, r)) & u32 for r in range(R)],
        mref=[(r, int(row(m_ref, r))) for r in range(R)] if protocol else [],
        w=[[int(row(w, r)[j]) & u32 for r in range(R)] for j in range(keys)],
        state_words=[x for r in range(R) for x in
                     [int(row(m, r)) & u32, int(fx.sat(row(l, r), 32)) & u32] + [0] * d],
        o_words=[[int(x) for x in row(st.o, r)] for r in range(R)],
        final_words=[int(x) & u32 for r in range(R) for x in final[r // group, r % group]])


def s_run(job: SoftmaxJob, run: tuple, rows: int) -> list:
    """The score beats of one run, ``last`` set on its final key."""
    from mcf.spec.fixed import EXP_BITS, KV_A_BITS
    a, b = run
    beats = list(job.s[a:b])
    beats[-1] |= 1 << (32 * rows + POS_BITS + KV_A_BITS + EXP_BITS)
    return beats
