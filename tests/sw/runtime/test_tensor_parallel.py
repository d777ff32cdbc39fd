"""Weight-sharded (tensor-parallel) prefill and decode (``mcf.sw.mars.lower_tp``, golden
``TensorParallel``): each node holds 1/N of the weights; o_proj and down_proj partials are added
by the NICs' SUM.

The sharded arithmetic is defined once in the golden model (each node's X32 partial rounded by
its own GEMM, summed with 32-bit wrap-around): with one node it *is* the unsharded FixedModel;
with more it stays within a small bound of it and picks the same greedy tokens on the tiny
checkpoint.  The programs on the ISA simulator (N = 1, 2, 4 on the tiny model -- at 4, two nodes
share each of its 2 KV heads -- and N = 4 on a GQA model with 4 KV heads) give the TP golden's
logits and tokens bit for bit, and each node's DDR holds exactly its KV heads' cache.  ``check_tp`` is also the RTL cluster's test
(tests/sim/rtlcluster/test_backend.py)."""
import dataclasses
import json

import numpy as np
import pytest

from mcf.spec import kv
from mcf.spec.isa import Opcode
from mcf.spec.node import NodeConfig
from mcf.spec.packet import ReduceOp
from mcf.sw import cli
from mcf.sw.errors import UserError
from mcf.sw.golden import fixed as fx
from mcf.sw.golden.fixed_model import FixedModel, TensorParallel
from mcf.sw.golden.node import JitterCosts
from mcf.sw.golden.weights import random_weights
from mcf.sw.models import load_model
from mcf.sw.runtime.backend import isa_backend
from mcf.sw.runtime.runtime import Session, tp_group

TINY = load_model("tiny")
TINY_W = random_weights(TINY, 5)
#: 8 heads on 4 KV heads: splits over 4 nodes (1 KV head each); hidden 128: a decode all-reduce is
#: 512 bytes, summed in pieces at 3 of the nodes, so its GEMMs go piece by piece.
GQA4 = dataclasses.replace(TINY, name="gqa4", num_heads=8, num_kv_heads=4, hidden_size=128)
PROMPT = [int(t) for t in np.random.default_rng(2).integers(0, TINY.vocab_size, 16)]


def tp_golden(tp: TensorParallel, prompt, decode):
    caches = tp.new_cache()
    logits = [tp.forward_x32(prompt, caches, logits="last")[0]]
    for _ in range(decode):
        logits.append(tp.forward_x32([int(np.argmax(logits[-1]))], caches, logits="last")[0])
    return logits, caches


def check_tp(cfg, weights, prompt, *, nodes, chunk, decode, group, factory=isa_backend, timeout_s=60.0, node=None,
             attention="auto"):
    """Run a tensor-parallel session on ``factory``'s backend; every step's logits and the tokens
    equal the TP golden's, and node n's DDR holds its KV heads of every prompt token."""
    fm = FixedModel(cfg, weights, group)
    s = Session(cfg, weights, prompt, nodes=nodes, chunk=chunk, decode=decode, group=group, factory=factory,
                fixed=fm, timeout_s=timeout_s, decode_scheme="tensor-parallel", node=node, attention=attention)
    rep = s.run()
    tp = TensorParallel(fm, nodes)
    want, caches = tp_golden(tp, prompt, decode)
    assert [st.kind for st in rep.steps] == ["prefill"] + ["decode"] * decode
    for k, (st, ref) in enumerate(zip(rep.steps, want)):
        assert np.array_equal(st.logits, ref), f"step {k}: logits differ from the TP golden"
    assert rep.tokens == [int(np.argmax(x)) for x in want]
    lw, d, hkv = s.lw, cfg.head_dim, s.lw.shard.num_kv_heads
    starts = np.concatenate([[0], np.cumsum(lw.chunk_tokens)])
    for n in range(nodes):
        mem = s.backend.memories[n]
        for c, t in enumerate(lw.chunk_tokens):
            for li in range(cfg.num_layers):
                raw = mem.fetch(lw.kv_addr(n, c, li) - lw.bases[n], kv.block_layer_bytes(t, d, hkv))
                k4, v4 = kv.unpack_block_layer(raw, t, d, hkv)
                rows = slice(starts[c], starts[c + 1])
                for got, ref in ((k4, caches[n].k[li]), (v4, caches[n].v[li])):
                    assert all(np.array_equal(g, r[rows]) for g, r in zip(got, ref)), (n, c, li)
    return rep, s


# --- the golden model ----------------------------------------------------------------------------

def test_one_shard_is_the_fixed_model():
    fm = FixedModel(TINY, TINY_W, 64)
    tp = TensorParallel(fm, 1)
    assert np.array_equal(tp.forward_x32(PROMPT), fm.forward_x32(PROMPT))


@pytest.mark.parametrize("cfg,nodes", [(TINY, 2), (TINY, 4), (GQA4, 4)])
def test_sharded_arithmetic_stays_near_the_unsharded_model(cfg, nodes):
    """Sharding changes only the rounding of o_proj / down_proj (one rounding per shard partial,
    a BFP16 exponent per shard's slice): every position's logits stay within 1/128 of the
    logits' range of the unsharded model with the same quantized weights, and the greedy tokens
    agree.  They are not equal (the sum of rounded partials is not the rounded sum)."""
    w = TINY_W if cfg is TINY else random_weights(cfg, 7)
    fm = FixedModel(cfg, w, tp_group(cfg, nodes))
    ref = fm.forward_x32(PROMPT)
    got = TensorParallel(fm, nodes).forward_x32(PROMPT)
    span = int(ref.max() - ref.min())
    diff = int(np.abs(got - ref).max())
    assert 0 < diff <= span / 128, (diff, span)
    assert np.array_equal(got.argmax(axis=1), ref.argmax(axis=1))


def test_the_nics_sum_is_the_partials_added_in_32_bits():
    """The reduction the golden TP uses is ReduceOp.SUM's: two's-complement 32-bit addition."""
    a = np.array([[2**31 - 1, -5, 7]])
    b = np.array([[1, -(2**31), 3]])
    assert fx.reduce_sum([a, b]).tolist() == [[-(2**31), 2**31 - 5, 10]]


# --- the programs on the ISA simulator ------------------------------------------------------------

@pytest.mark.parametrize("cfg,nodes,chunk,jitter", [
    (TINY, 1, 4, False),
    (TINY, 2, 4, False),
    (TINY, 2, 3, True),          # uneven chunks, random instruction and link costs
    (GQA4, 4, 4, False),
    (TINY, 4, 4, False),         # more nodes than KV heads: two nodes compute and cache each KV head,
])                               # and decode splits its keys over them
def test_isa_tensor_parallel_bit_exact(cfg, nodes, chunk, jitter):
    w = TINY_W if cfg is TINY else random_weights(cfg, 7)
    factory = (lambda *a: isa_backend(*a, costs=JitterCosts(seed=3))) if jitter else isa_backend
    rep, s = check_tp(cfg, w, PROMPT, nodes=nodes, chunk=chunk, decode=2, group=tp_group(cfg, nodes),
                      factory=factory)
    assert rep.scheme == "tensor-parallel" and rep.nodes == nodes
    if nodes > 1:          # the partial sums went through the NICs
        assert all(c["NET_TX_BYTES"] > 0 for c in rep.steps[-1].counters)
    if cfg is TINY and nodes == 4:    # decode: each node attends to about half of its KV head's keys
        assert s.lw.map.replicas == 2
        kv = [sum(i.keys * i.blocks for i in p if i.OPCODE == Opcode.ATTN_KV) for p in s.lw.decode_programs(1)]
        # MAX + APPLY over the prompt and the decode tokens' block (spec.kv's decode layout: its keys
        # past the current token lie after it, invisible)
        B = s.lw.node.decode_block_keys
        assert kv[0] + kv[1] == kv[2] + kv[3] == 2 * cfg.num_layers * (len(PROMPT) + B), kv
        assert 0 < min(kv) and max(kv) <= 0.7 * (kv[0] + kv[1]), kv
    if cfg is GQA4:        # decode: o_proj / down_proj in pieces of 1, 2, 1 units of 128 bytes (the GEMM
        prog = s.lw.decode_programs(1)    # piece by piece: two start at a tile > 0), summed at nodes 0, 1, 2
        gemms = [i for i in prog[0] if i.OPCODE == Opcode.GEMM and i.tile0 > 0]
        assert len(gemms) == 2 * cfg.num_layers * 2, gemms
        sums = [(i.dst, i.length) for i in prog[1] if i.OPCODE == Opcode.SEND and i.reduce_op == ReduceOp.SUM]
        assert sums == [(0, 128), (1, 256), (2, 128)] * 2 * cfg.num_layers, sums


#: The tiny node with an 8 x 8 array: it builds GEMM_PV (the tiny node's 4 x 8 array does not).
ARRAY_NODE = NodeConfig.tiny(mac_rows=8)


#: 8 heads on 2 KV heads over 4 nodes with att_rows = 2: a KV group's 4 query rows in one row group on
#: the array path (ATTN_Q MREF / STATE reach every state row; before round 24 2 groups of att_rows).
GQA4X2 = dataclasses.replace(TINY, name="gqa4x2", num_heads=8, num_kv_heads=2, hidden_size=128)


@pytest.mark.parametrize("cfg,nodes,chunk,n_tok,att_rows,decode", [
    (TINY, 1, 8, 24, 8, 2),
    (TINY, 4, 8, 24, 8, 3),   # two nodes per KV head: the split decode attention's passes on the array; decode
                              # token 1's rows (3 beats a token on a node's one KV head) stored from token 0
    (TINY, 4, 4, 20, 8, 2),   # the keys split after 3 chunks of 4 (not a multiple of VL = 8): on the array,
                              # ATTN_SM at positions up to the decode token's
    (GQA4X2, 4, 8, 24, 2, 2),  # 4 rows a KV head past att_rows = 2: still one row group
    (TINY, 4, 8, 29, 1, 2),   # a short last chunk of 5 keys, read as a block of 8; att_rows = 1: no ATTN_KV fits
])
def test_isa_tensor_parallel_array_attention_bit_exact(cfg, nodes, chunk, n_tok, att_rows, decode):
    """attention = "array" in the tensor-parallel lowering ("auto" on a node that builds GEMM_PV):
    prefill and decode attention as GEMM_QK / ATTN_SM / GEMM_PV over each node's runs of KV blocks
    (the split decode's MAX and APPLY passes too, APPLY against the reduced maxima), the decode
    tokens' keys a run of decode blocks on the array too: the TP golden's logits and tokens bit for bit."""
    prompt = (PROMPT + PROMPT)[:n_tok]
    w = TINY_W if cfg is TINY else random_weights(cfg, 7)
    rep, s = check_tp(cfg, w, prompt, nodes=nodes, chunk=chunk, decode=decode, group=tp_group(cfg, nodes),
                      node=ARRAY_NODE.replace(att_rows=att_rows))
    assert rep.attention == "array" and s.lw.attention_reason.startswith("auto -> array")
    assert s.lw.map.replicas == (2 if nodes == 4 else 1)
    assert len(s.lw.map.row_groups) == (1 if nodes == 4 else 0)
    dec = s.lw.decode_programs(1)
    for n, prog in enumerate(dec):
        ops = {i.OPCODE for i in prog}
        assert {Opcode.GEMM_QK, Opcode.ATTN_SM, Opcode.GEMM_PV} <= ops, (n, ops)
    # no ATTN_KV: at chunk 4 the split's first part (12 keys, not a multiple of VL = 8, that later keys
    # follow) is on the array too, its 4 keys past 12 at positions after the decode token's
    assert ARRAY_NODE.vec_lanes == 8
    assert not any(i.OPCODE == Opcode.ATTN_KV for p in [s.lw.prefill, dec] for prog in p for i in prog)


def test_each_node_holds_a_shard_of_the_weights():
    """The runtime writes node n's shard: its DDR map's weight regions are 1/N of the whole
    model's matrices (Q/K/V, o, gate, up, down) and of the LM head's rows on 2 nodes."""
    s1 = Session(TINY, TINY_W, PROMPT[:4], nodes=1, decode=0, group=32, factory=isa_backend,
                 decode_scheme="tensor-parallel")
    s2 = Session(TINY, TINY_W, PROMPT[:4], nodes=2, decode=0, group=32, factory=isa_backend,
                 decode_scheme="tensor-parallel")
    mat = lambda s: sum(lay.tiles * lay.w_tile for k, (_, lay) in s.lw.map.blobs.items() if k.startswith("layers"))  # noqa: E731
    assert mat(s2) * 2 == mat(s1)
    assert s2.lw.map.blobs["head"][1].tiles * 2 == s1.lw.map.blobs["head"][1].tiles      # LM head by vocab rows
    assert s2.lw.map.head_rows == [(0, 128), (128, 256)]
    img = s2.weight_images()
    assert img[0] != img[1]


def test_refusals_are_one_line():
    with pytest.raises(UserError, match="does not split over 3 node"):
        Session(TINY, TINY_W, PROMPT, nodes=3, factory=isa_backend, decode_scheme="tensor-parallel")
    with pytest.raises(UserError, match="whole number of groups of 64"):
        Session(TINY, TINY_W, PROMPT, nodes=2, group=64, factory=isa_backend, decode_scheme="tensor-parallel")
    with pytest.raises(UserError, match="--scheme ring needs whole weights"):
        Session(TINY, TINY_W, PROMPT, nodes=2, scheme="ring", factory=isa_backend, decode_scheme="tensor-parallel")
    with pytest.raises(UserError, match="one of kv-stationary, tensor-parallel"):
        Session(TINY, TINY_W, PROMPT, nodes=2, factory=isa_backend, decode_scheme="tp")


def test_mcf_run_decode_scheme(checkpoint, capsys):
    """`mcf run --decode-scheme tensor-parallel` on the model backend: the TP golden's tokens,
    modelled cycles; a wrong name is one line."""
    from mcf.sw.golden.checkpoint import load_checkpoint
    cfg, w = load_checkpoint(str(checkpoint))
    prompt = [5, 9, 200, 3, 17, 33, 1, 8, 90, 2]
    want, _ = tp_golden(TensorParallel(FixedModel(cfg, w, tp_group(cfg, 2)), 2), prompt, 1)
    capsys.readouterr()
    assert cli.main(["run", "--backend", "model", "--nodes", "2", "--checkpoint", str(checkpoint), "--tokens",
                     ",".join(map(str, prompt)), "--decode", "1", "--decode-scheme", "tensor-parallel", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scheme"] == "tensor-parallel" and out["tokens"] == [int(np.argmax(x)) for x in want]
    assert out["ttft_cycles"] > 0 and out["decode_cycles_per_token"] > 0 and out["link_bytes_total"] > 0
    assert cli.main(["run", "--nodes", "2", "--checkpoint", str(checkpoint), "--tokens", "1,2",
                     "--decode-scheme", "tp"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mcf: error: --decode-scheme 'tp'") and len(err.splitlines()) == 1


def test_bench_tp_decode_extrapolates_what_a_direct_run_gives(capsys):
    """`mcf bench tp-decode` (the Qwen-scale figure) fits decode cycles over layers, vocabulary and
    context from 4 probe runs of the TP programs on the cluster model; on the tiny model a direct
    run at (2 layers, V2, C2) gives the extrapolated cycles (within 2 %)."""
    capsys.readouterr()
    assert cli.main(["bench", "tp-decode", "--model", "tiny", "--nodes", "2", "--probe", "64,128,4,12",
                     "--context", "8", "--check", "--json"]) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out.strip().splitlines()[-1])
    # progress on stderr (a Qwen run takes minutes), one line before and one after each N's probes
    assert [ln.split(":")[0] for ln in cap.err.splitlines()] == ["[bench tp-decode] N=2"] * 2, cap.err
    chk = out["check_N2"]
    assert chk["direct_cycles"] > 0 and abs(chk["error"]) <= 0.02, chk
    fit = out["fit_N2"]
    assert fit["layer_at_C1"] > 0 and fit["head_per_vocab_row"] > 0 and fit["layer_per_context_token"] > 0
    assert out["tokens_per_s_N2"] == round(out["clock_hz"] / out["decode_cycles_per_token_N2"], 2)
    # the tiny node's 4 x 8 array builds no GEMM_PV: "auto" ran the attention unit, and says why
    assert out["attention_N2"] == "unit" and "builds no GEMM_PV" in out["attention_reason_N2"]
