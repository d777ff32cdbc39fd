"""One decoder layer computed by the RTL units, each unit's output feeding the next, in the
Amaranth simulator: the sequence of ``FixedModel._layer`` (golden) with every arithmetic
step done by hardware (matrix unit, vector unit, KV writer, attention unit).  The host only
moves words between the units, reshapes, and supplies what the spec says the host supplies
(quantized weights, RoPE cos/sin tables, constants)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mcf.hw.compute.attention import AttentionUnit
from mcf.hw.compute.kv_writer import KVWriter
from mcf.hw.compute.matrix import MatrixUnit
from mcf.hw.compute.vector import VecOp, VectorUnit
from mcf.sim.compute.drive import run_attention, run_kv_writer, run_matrix, run_vector
from mcf.sim.compute.jobs import VectorJob, pack, pack_attention, pack_linear, unpack
from mcf.spec.node import MODEL_SHAPES, NodeConfig
from mcf.sw.golden import fixed as fx

BLOCK_TOKENS = 4     # keys per KV block id (replica-directory granularity in this run)


@dataclass
class Units:
    """The units of ``node``'s engine, elaborated for model ``cfg``'s shapes.  The attention
    unit takes a whole chunk's rows at once (GQA group x ``max_tokens``)."""
    cfg: object
    node: NodeConfig = NodeConfig.tiny(max_keys=16)

    def __post_init__(self):
        c, node = self.cfg, NodeConfig.for_model(self.cfg, **{
            k: v for k, v in self.node.as_dict().items() if k not in MODEL_SHAPES})
        self.node = node
        self.rows, self.lanes, self.max_tokens = node.mac_rows, node.mac_lanes, node.max_tokens
        self.kv_lanes = node.kv_lanes
        n_max = max(c.hidden_size, c.intermediate_size, c.num_heads * c.head_dim)
        out_max = max(c.intermediate_size, c.hidden_size, c.num_heads * c.head_dim)
        self.group = node.group
        self.matrix = MatrixUnit(node.mac_rows, node.mac_lanes, node.max_tokens, n_max, -(-out_max // node.mac_rows))
        self.vector = VectorUnit(max_n=n_max, lanes=node.vec_lanes)
        self.kv = KVWriter(c.head_dim, node.kv_lanes)
        self.attention = AttentionUnit(c.head_dim, self.group * node.max_tokens, node.max_keys)
        self.cycles = {}


@dataclass
class RtlCache:
    """Per kv head, keys in order: (q [S, d], A [S], E [S]) for K and V, as the KV writer made them."""
    k: list = field(default_factory=list)
    v: list = field(default_factory=list)


def linear(u: Units, x, w, bias=None):
    m, e = x
    t = m.shape[0]
    job = pack_linear(m, e, w, bias, np.zeros((t, w.shape[0]), dtype=np.int64), u.rows, u.lanes, u.max_tokens)
    beats = run_matrix(u.matrix, [job])[0]
    y = np.zeros((t, w.shape[0]), dtype=np.int64)
    k = 0
    for tile in range(w.shape[0] // u.rows):
        for tok in range(t):
            y[tok, tile * u.rows:(tile + 1) * u.rows] = unpack(beats[k], 32, u.rows)
            k += 1
    return y


def vector(u: Units, jobs):
    """Jobs -> list of (values [n], exp) rows."""
    outs = run_vector(u.vector, jobs)
    return [(np.array([o[0] for o in out], dtype=np.int64), int(out[-1][1])) for out in outs]


def _cmd(op, n, **kw):
    return dict(op=int(op), n=n, gain_exp=0, eps=0, cm=0, ce=0, **kw)


def rmsnorm(u, x, gain_exp_pair, eps):
    gain, gexp = gain_exp_pair
    n = x.shape[1]
    jobs = [VectorJob(_cmd(VecOp.RMSNORM, n, **{}) | dict(gain_exp=gexp, eps=fx.eps_constant(n, eps)),
                      [(int(v), 0) for v in row], [(int(g), 0, 0) for g in gain], []) for row in x]
    rows = vector(u, jobs)
    return np.stack([r[0] for r in rows]), np.array([r[1] for r in rows])


def to_bfp(u, x):
    """X32 rows [R, n] -> BFP16 (mant [R, n], exp [R])."""
    n = x.shape[1]
    rows = vector(u, [VectorJob(_cmd(VecOp.TO_BFP, n), [(int(v), 0) for v in row], [(0, 0, 0)] * n, [])
                      for row in x])
    return np.stack([r[0] for r in rows]), np.array([r[1] for r in rows])


def rope(u, m, e, cos, sin):
    """BFP16 heads (m [R, d], e [R]) with per-row tables cos/sin [R, d/2]."""
    d = m.shape[1]
    half = d // 2
    jobs = [VectorJob(_cmd(VecOp.ROPE, d), [(int(v), int(e[r])) for v in m[r]],
                      [(int(cos[r, i % half]), int(sin[r, i % half]), 0) for i in range(d)], [])
            for r in range(m.shape[0])]
    rows = vector(u, jobs)
    return np.stack([r[0] for r in rows]), np.array([r[1] for r in rows])


def prescale(u, m, e):
    d = m.shape[1]
    cm, ce = fx.score_constant(d)
    jobs = [VectorJob(_cmd(VecOp.PRESCALE, d) | dict(cm=cm, ce=ce), [(int(v), int(e[r])) for v in m[r]],
                      [(0, 0, 0)] * d, []) for r in range(m.shape[0])]
    rows = vector(u, jobs)
    return np.stack([r[0] for r in rows]), np.array([r[1] for r in rows])


def elementwise(u, op, a, b=None, ea=None, eb=None):
    n = a.shape[1]
    jobs = []
    for r in range(a.shape[0]):
        av = [(int(v), int(ea[r]) if ea is not None else 0) for v in a[r]]
        bv = [(int(v), 0, int(eb[r]) if eb is not None else 0) for v in b[r]] if b is not None else [(0, 0, 0)] * n
        jobs.append(VectorJob(_cmd(op, n), av, bv, []))
    rows = vector(u, jobs)
    return np.stack([r[0] for r in rows]), np.array([r[1] for r in rows])


def kv_write(u, m, e):
    """BFP16 rows -> KV4 (q [R, d], A [R], E [R]) through the KV writer."""
    R, d = m.shape
    L = u.kv_lanes
    nb = d // L
    beats = []
    for r in range(R):
        for b in range(nb):
            beats.append(pack(m[r, b * L:(b + 1) * L], 16) | ((int(e[r]) & 0xFF) << (16 * L))
                         | (int(b == nb - 1) << (16 * L + 8)))
    out = run_kv_writer(u.kv, beats, R)
    q = np.zeros((R, d), dtype=np.int64)
    a = np.zeros(R, dtype=np.int64)
    big_e = np.zeros(R, dtype=np.int64)
    for r in range(R):
        for b in range(nb):
            w = out[r * nb + b]
            q[r, b * L:(b + 1) * L] = unpack(w, 4, L)
        a[r] = (w >> (4 * L)) & 0xFF
        big_e[r] = unpack(w >> (4 * L + 8), 8, 1)[0]
    return q, a, big_e


def layer(u: Units, L: dict, x: np.ndarray, pos: np.ndarray, cache: RtlCache) -> np.ndarray:
    """``FixedModel._layer`` on the RTL units; appends this chunk's K/V to ``cache``."""
    cfg = u.cfg
    T, d, hq, hkv, g = x.shape[0], cfg.head_dim, cfg.num_heads, cfg.num_kv_heads, u.group
    h = rmsnorm(u, x, L["ln1"], cfg.rms_norm_eps)
    q = linear(u, h, L["q_proj"], L["q_proj.bias"]).reshape(T * hq, d)
    k = linear(u, h, L["k_proj"], L["k_proj.bias"]).reshape(T * hkv, d)
    v = linear(u, h, L["v_proj"], L["v_proj.bias"]).reshape(T * hkv, d)
    cos, sin = fx.rope_table(d, cfg.rope_theta, pos)            # host table, [T, d/2]
    qm, qe = rope(u, *to_bfp(u, q), np.repeat(cos, hq, 0), np.repeat(sin, hq, 0))
    qm, qe = prescale(u, qm, qe)
    km, ke = rope(u, *to_bfp(u, k), np.repeat(cos, hkv, 0), np.repeat(sin, hkv, 0))
    k4 = kv_write(u, km, ke)
    v4 = kv_write(u, *to_bfp(u, v))
    for head in range(hkv):                                      # rows are (token, kv head)
        sel = np.arange(T) * hkv + head
        new_k = tuple(a[sel] for a in k4)
        new_v = tuple(a[sel] for a in v4)
        if len(cache.k) <= head:
            cache.k.append(new_k)
            cache.v.append(new_v)
        else:
            cache.k[head] = tuple(np.concatenate([a, b]) for a, b in zip(cache.k[head], new_k))
            cache.v[head] = tuple(np.concatenate([a, b]) for a, b in zip(cache.v[head], new_v))

    att = np.zeros((T, hq, d), dtype=np.int64)
    R = u.attention.rows
    qm3, qe2 = qm.reshape(T, hq, d), qe.reshape(T, hq)
    jobs = []
    for head in range(hkv):
        kq, ka, kE = cache.k[head]
        vq, va, vE = cache.v[head]
        S = len(ka)
        rm = np.zeros((R, d), dtype=np.int64)
        re_ = np.zeros(R, dtype=np.int64)
        rp = np.zeros(R, dtype=np.int64)
        for t in range(T):
            for j in range(g):
                r = t * g + j
                rm[r], re_[r], rp[r] = qm3[t, head * g + j], qe2[t, head * g + j], pos[t]
        kpos = np.arange(S)
        blocks = kpos // BLOCK_TOKENS
        states = {int(b): 1 for b in np.unique(blocks)}          # all local: VALID
        jobs.append(pack_attention(rm, re_, rp, kq, ka, kE, kpos, blocks, vq, va, vE, states, final=True))
    for head, words in enumerate(run_attention(u.attention, jobs)):
        vals = [unpack(w, 32, 1)[0] for w in words]
        for t in range(T):
            for j in range(g):
                r = t * g + j
                att[t, head * g + j] = vals[r * d:(r + 1) * d]

    y = linear(u, to_bfp(u, att.reshape(T, hq * d)), L["o_proj"])
    x = elementwise(u, VecOp.RESIDUAL, x, y)[0]
    h2 = rmsnorm(u, x, L["ln2"], cfg.rms_norm_eps)
    gate = elementwise(u, VecOp.SILU, linear(u, h2, L["gate_proj"]))[0]
    up = linear(u, h2, L["up_proj"])
    gm, ge = to_bfp(u, gate)
    um, ue = to_bfp(u, up)
    act = elementwise(u, VecOp.MUL, gm, um, ge, ue)
    y2 = linear(u, act, L["down_proj"])
    return elementwise(u, VecOp.RESIDUAL, x, y2)[0]
