"""One decoder layer of a ``FixedModel`` as an EX program for the execute unit (hand-lowered,
``spec/isa.py``): the DDR image (embedding table, the layer's GEMM blobs, RMSNorm gains, the
RoPE table, a KV pool of one block per chunk) and, per chunk of tokens, the instructions

    EMBED -> RMSNORM -> q, k, v GEMMs -> TO_BFP / ROPE / PRESCALE -> KVW (the chunk's block)
    -> per KV head and pair of query tokens: ATTN_Q, ATTN_KV MAX and APPLY over every block so
       far (gated by the directory), ATTN_EMIT FINAL -> o GEMM -> residual -> RMSNORM -> gate,
       up GEMMs -> SILU, MUL -> down GEMM -> residual -> STORE

whose result must equal ``FixedModel._layer`` bit for bit (and the pool's block, the golden
KV cache).  It replaces the host-driven run of the units (the KV cache in Python lists): the
KV cache lives in DDR in ``spec/kv.py``'s format.  The sw-node lowering emits the same kind of
program for whole models; this one is the bench's and the benchmark's."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mcf.sim.compute import ddr
from mcf.spec import isa
from mcf.spec.isa import AttnLoad, AttnPass, EmitMode, VecOp
from mcf.spec.kv import block_layer_bytes, segment_bytes
from mcf.spec.node import NodeConfig
from mcf.spec.plan import ReplicaState
from mcf.sw.golden import fixed as fx

SLOT = 0x1000          # DDR bytes per KV pool slot (one chunk's block layer)


def _align(x: int, a: int = 0x1000) -> int:
    return -(-x // a) * a


@dataclass
class LayerProgram:
    """Where everything of one layer lives, and the programs of its chunks."""
    model: object                      # FixedModel
    node: NodeConfig
    layer: int = 0
    image: dict = field(default_factory=dict)      # DDR address -> bytes
    addr: dict = field(default_factory=dict)       # name -> DDR address
    spad: dict = field(default_factory=dict)       # name -> SPAD beat
    blocks: list = field(default_factory=list)     # keys of the pool's blocks so far

    def __post_init__(self):
        m, c, nd = self.model, self.model.cfg, self.node
        vl = nd.vec_lanes
        L = m.layers[self.layer]
        base = 0x1000
        self.addr["ids"] = base
        base += 0x1000
        table = ddr.embed_table(m.embed)
        self.addr["embed"] = base
        self.image[base] = table
        base = _align(base + len(table))
        self.lay = {}
        for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
            blob, lay = ddr.gemm_blob(L[name], L.get(name + ".bias"), nd.mac_rows, nd.mac_lanes)
            self.addr[name], self.lay[name] = base, lay
            self.image[base] = blob
            base = _align(base + len(blob))
        for name in ("ln1", "ln2"):
            self.addr[name] = base
            self.image[base] = ddr.words_bytes(L[name][0])
            base = _align(base + len(self.image[base]))
        positions = nd.max_context
        cos, sin = fx.rope_table(c.head_dim, c.rope_theta, np.arange(positions))
        self.addr["rope"] = base
        self.image[base] = ddr.words_bytes(ddr.rope_rows(cos, sin))
        base = _align(base + len(self.image[base]))
        self.addr["out"] = base
        base += _align(nd.max_tokens * c.hidden_size * 4)
        self.addr["kv"] = base
        self.ddr_bytes = base + 64 * SLOT
        # SPAD rows (beats), T = max tokens
        T, h, inter = nd.max_tokens, c.hidden_size, c.intermediate_size
        qw, kw = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        sizes = [("x", T * h), ("h", T * h), ("q", T * qw), ("k", T * kw), ("v", T * kw), ("att", T * qw),
                 ("y", T * h), ("gate", T * inter), ("up", T * inter), ("ln1", h), ("ln2", h),
                 ("rope", T * c.head_dim)]
        at = 0
        for name, words in sizes:
            self.spad[name] = at
            at += words // vl
        if at > nd.spad_beats:
            raise ValueError(f"layer program: {at} SPAD beats needed, the node has {nd.spad_beats}")

    def segment(self, block: int, v: bool, head: int) -> int:
        n = self.blocks[block]
        return self.addr["kv"] + block * SLOT + (int(v) * self.model.cfg.num_kv_heads + head) * segment_bytes(
            n, self.model.cfg.head_dim)

    def chunk(self, p0: int, count: int) -> list:
        """The instructions of a chunk of ``count`` tokens at positions p0 ..: its ids are at
        ``addr["ids"]``; its KV goes to a new pool block; attention reads every block so far."""
        m, c, nd = self.model, self.model.cfg, self.node
        if block_layer_bytes(count, c.head_dim, c.num_kv_heads) > SLOT:
            raise ValueError("layer program: a chunk's KV does not fit a pool slot")
        vl, d, Hq, Hkv, g = nd.vec_lanes, c.head_dim, c.num_heads, c.num_kv_heads, c.num_heads // c.num_kv_heads
        T, h, inter = count, c.hidden_size, c.intermediate_size
        hb, db, ib = h // vl, d // vl, inter // vl
        s, a, L = self.spad, self.addr, m.layers[self.layer]
        G = m.group_size
        glog = G.bit_length() - 1
        block = len(self.blocks)
        self.blocks.append(count)
        prog = []

        def vec(vop, n, rows, a_, a_stride, dst, dst_stride, b=0, b_stride=0, b_rep=1, b_pair=0, imm0=0, imm1=0):
            prog.append(isa.Vec(vop=vop, n=n, rows=rows, a=a_, a_stride=a_stride, b=b, b_stride=b_stride, b_rep=b_rep,
                                b_pair=b_pair, dst=dst, dst_stride=dst_stride, imm0=imm0 & 0xFFFFFFFF,
                                imm1=imm1))

        def gemm(name, src, src_stride, dst, dst_stride, n):
            lay, w = self.lay[name], L[name]
            prog.append(isa.Gemm(blob=a[name], n=n, total_tiles=lay.tiles, tile0=0, tiles=lay.tiles, tokens=T,
                                 group_log2=glog, w_exp=w.exp, bias=int(name + ".bias" in L), src=src,
                                 src_stride=src_stride, dst=dst, dst_stride=dst_stride))

        eps = fx.eps_constant(h, c.rms_norm_eps)
        prog.append(isa.Embed(ids=a["ids"], count=T, table=a["embed"], vocab=c.vocab_size, n=h, group_log2=glog,
                              w_exp=m.embed.exp, dst=s["x"], dst_stride=hb))
        for name in ("ln1", "ln2"):
            prog.append(isa.Load(ddr=a[name], spad=s[name], beats=hb, row_beats=0))
        prog.append(isa.Load(ddr=a["rope"] + p0 * d * 4, spad=s["rope"], beats=T * db, row_beats=0))
        vec(VecOp.RMSNORM, h, T, s["x"], hb, s["h"], hb, b=s["ln1"], imm0=eps, imm1=L["ln1"][1])
        gemm("q_proj", s["h"], hb, s["q"], Hq * db, h)
        gemm("k_proj", s["h"], hb, s["k"], Hkv * db, h)
        gemm("v_proj", s["h"], hb, s["v"], Hkv * db, h)
        cm, ce = fx.score_constant(d)
        vec(VecOp.TO_BFP, d, T * Hq, s["q"], db, s["q"], db)
        vec(VecOp.ROPE, d, T * Hq, s["q"], db, s["q"], db, b=s["rope"], b_stride=db, b_rep=Hq, b_pair=1)
        vec(VecOp.PRESCALE, d, T * Hq, s["q"], db, s["q"], db, imm0=cm, imm1=ce)
        vec(VecOp.TO_BFP, d, T * Hkv, s["k"], db, s["k"], db)
        vec(VecOp.ROPE, d, T * Hkv, s["k"], db, s["k"], db, b=s["rope"], b_stride=db, b_rep=Hkv, b_pair=1)
        vec(VecOp.TO_BFP, d, T * Hkv, s["v"], db, s["v"], db)
        for head in range(Hkv):
            for which, src in ((False, s["k"]), (True, s["v"])):
                prog.append(isa.Kvw(src=src + head * db, rows=T, row_stride=Hkv * db, seg=self.segment(block, which, head)))
        prog.append(isa.Dir(block=block, count=1, stride=0, state=ReplicaState.VALID))
        # attention: runs of equal-size blocks
        runs = []
        for b_, n in enumerate(self.blocks):
            if runs and runs[-1][1] == n and runs[-1][0] + runs[-1][2] == b_:
                runs[-1][2] += 1
            else:
                runs.append([b_, n, 1])
        tp = max(1, nd.att_rows // g)
        for head in range(Hkv):
            for t0 in range(0, T, tp):
                tk = min(tp, T - t0)
                prog.append(isa.AttnQ(what=AttnLoad.QUERY, spad=s["q"] + (t0 * Hq + head * g) * db, tokens=tk, heads=g,
                                      tok_stride=Hq * db, head_stride=db, qpos0=p0 + t0))
                for phase in (AttnPass.MAX, AttnPass.APPLY):
                    for i, (b0, n, nblk) in enumerate(runs):
                        kseg = self.segment(b0, False, head)
                        prog.append(isa.AttnKV(phase=phase, seg=kseg, v_off=(self.segment(b0, True, head) - kseg) // 64,
                                               seg_stride=SLOT // 64, blocks=nblk, keys=n, kpos0=sum(self.blocks[:b0]),
                                               pos_stride=n, block0=b0, block_stride=1, gated=1, first=int(i == 0)))
                prog.append(isa.AttnEmit(mode=EmitMode.FINAL, spad=s["att"] + (t0 * Hq + head * g) * db, tokens=tk,
                                         heads=g, tok_stride=Hq * db, head_stride=db))
        vec(VecOp.TO_BFP, Hq * d, T, s["att"], Hq * db, s["att"], Hq * db)
        gemm("o_proj", s["att"], Hq * db, s["y"], hb, Hq * d)
        vec(VecOp.RESIDUAL, h, T, s["x"], hb, s["x"], hb, b=s["y"], b_stride=hb)
        vec(VecOp.RMSNORM, h, T, s["x"], hb, s["h"], hb, b=s["ln2"], imm0=eps, imm1=L["ln2"][1])
        gemm("gate_proj", s["h"], hb, s["gate"], ib, h)
        gemm("up_proj", s["h"], hb, s["up"], ib, h)
        vec(VecOp.SILU, inter, T, s["gate"], ib, s["gate"], ib)
        vec(VecOp.TO_BFP, inter, T, s["gate"], ib, s["gate"], ib)
        vec(VecOp.TO_BFP, inter, T, s["up"], ib, s["up"], ib)
        vec(VecOp.MUL, inter, T, s["gate"], ib, s["gate"], ib, b=s["up"], b_stride=ib)
        gemm("down_proj", s["gate"], ib, s["y"], hb, inter)
        vec(VecOp.RESIDUAL, h, T, s["x"], hb, s["x"], hb, b=s["y"], b_stride=hb)
        prog.append(isa.Store(ddr=a["out"], spad=s["x"], beats=T * hb, row_beats=0))
        return prog

    def block_bytes(self, block: int) -> int:
        c = self.model.cfg
        return block_layer_bytes(self.blocks[block], c.head_dim, c.num_kv_heads)
