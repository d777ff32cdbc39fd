"""The strongest evidence: the nodes' programs (MARS lowering) run on the ISA simulator through
the PS runtime and the driver give the golden fixed-point model's logits and greedy tokens bit for
bit, for N = 1..4 nodes, MARS, Ring, Zigzag (and full replication, PD), on the tiny model and on
Qwen2 checkpoints written by ``transformers`` itself; after prefill every node's directory and
DDR hold exactly its owned blocks' KV, equal to the golden cache, no replica left; a plan or a
program that breaks the replica lifecycle fails."""
import numpy as np
import pytest

from mcf.spec import kv
from mcf.spec.isa import Opcode, SeqFault
from mcf.spec.plan import ReplicaState
from mcf.sw.driver import NodeFault
from mcf.sw.golden.fixed_model import FixedModel, default_group
from mcf.sw.golden.node import JitterCosts
from mcf.sw.golden.weights import random_weights
from mcf.sw.models import load_model
from mcf.sw.runtime.backend import isa_backend
from mcf.sw.runtime.runtime import Session

TINY = load_model("tiny")
TINY_W = random_weights(TINY, 5)


def golden(cfg, fm, prompt, decode):
    cache = fm.new_cache()
    logits = [fm.forward_x32(prompt, cache, logits="last")[0]]
    for _ in range(decode):
        logits.append(fm.forward_x32([int(np.argmax(logits[-1]))], cache, logits="last")[0])
    return logits, cache


def check(cfg, weights, prompt, *, nodes, scheme, chunk, budget=None, decode=2, costs=None, group=None,
          factory=None, timeout_s=60.0, kv_store=None):
    """Run on ``factory``'s backend (default: the ISA simulator, with ``costs``) and compare
    (``kv_store``: with the prefix KV tier, ``mcf.sw.runtime.kvprefix``)."""
    group = group or default_group(cfg)
    fm = FixedModel(cfg, weights, group)
    if factory is None:
        factory = (lambda *a: isa_backend(*a, costs=costs)) if costs else isa_backend
    s = Session(cfg, weights, prompt, nodes=nodes, scheme=scheme, chunk=chunk, budget=budget, decode=decode,
                group=group, factory=factory, fixed=fm, timeout_s=timeout_s, kv_store=kv_store)
    rep = s.run()
    want, cache = golden(cfg, fm, prompt, decode)
    assert [st.kind for st in rep.steps] == ["prefill"] + ["decode"] * decode
    for k, (st, ref) in enumerate(zip(rep.steps, want)):
        assert np.array_equal(st.logits, ref), f"step {k}: logits differ"
    assert rep.tokens == [int(np.argmax(x)) for x in want]
    # the decode-ready layout: each node's directory and pool hold exactly its owned blocks
    pl, lw = s.plan, s.lw
    owners = [[b for b in range(pl.num_chunks) if int(pl.owner[b]) == n] for n in range(nodes)]
    assert rep.directory_after_prefill == owners
    starts = np.concatenate([[0], np.cumsum(pl.chunk_tokens)])
    for n in range(nodes):
        assert sorted(b for b, _ in lw.owned[n]) == owners[n]
        mem = s.backend.memories[n]
        for b, slot in lw.owned[n]:
            t = int(pl.chunk_tokens[b])
            for li in range(cfg.num_layers):
                raw = mem.fetch(lw.kv_addr(n, slot, li) - lw.bases[n], kv.block_layer_bytes(t, cfg.head_dim,
                                                                                            cfg.num_kv_heads))
                k4, v4 = kv.unpack_block_layer(raw, t, cfg.head_dim, cfg.num_kv_heads)
                rows = slice(starts[b], starts[b + 1])
                for got, ref in ((k4, cache.k[li]), (v4, cache.v[li])):
                    assert all(np.array_equal(g, r[rows]) for g, r in zip(got, ref)), (n, b, li)
    return rep, s


PROMPT = [int(t) for t in np.random.default_rng(2).integers(0, TINY.vocab_size, 16)]


@pytest.mark.parametrize("nodes,scheme,chunk,budget_tokens", [
    (1, "mars", 4, None),
    (2, "mars", 4, 8), (3, "mars", 2, 6), (4, "mars", 2, 6),
    (2, "ring", 4, None), (3, "ring", 2, None), (4, "ring", 4, None),
    (2, "zigzag", 2, None), (3, "zigzag", 2, None), (4, "zigzag", 2, None),
    (4, "full", 4, None), (4, "pd", 4, None),
])
def test_tiny_model_bit_exact(nodes, scheme, chunk, budget_tokens):
    budget = None if budget_tokens is None else budget_tokens * int(TINY.kv_token_bytes)
    rep, s = check(TINY, TINY_W, PROMPT, nodes=nodes, scheme=scheme, chunk=chunk, budget=budget, group=16)
    if scheme == "mars" and nodes > 2:
        assert max(rep.replica_factor_per_step) > 1 and rep.replica_factor_per_step[-1] == 1   # replicas, drained
    if nodes > 1:
        assert rep.link_bytes and all(v > 0 for v in rep.link_bytes.values())


def test_results_do_not_depend_on_timing():
    """Random instruction and link durations: same bits (the programs carry their own order)."""
    check(TINY, TINY_W, PROMPT[:12], nodes=3, scheme="mars", chunk=2, budget=6 * int(TINY.kv_token_bytes),
          decode=1, costs=JitterCosts(11), group=16)


def test_checkpoints_written_by_transformers(tmp_path):
    """Other widths, head counts, head_dim, GQA ratios, tied and untied embeddings (one test: the
    torch import is paid once)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from mcf.sw.golden.checkpoint import load_checkpoint
    shapes = {
        # GQA 3 (6 q heads on 2 KV heads), untied LM head, intermediate not a power of two
        "gqa3-untied": dict(hidden_size=96, intermediate_size=160, num_hidden_layers=2, num_attention_heads=6,
                            num_key_value_heads=2, head_dim=16, vocab_size=300, tie_word_embeddings=False),
        # multi-head attention, head_dim 32 != hidden / heads
        "mha-d32": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                        num_key_value_heads=2, head_dim=32, vocab_size=200, tie_word_embeddings=True),
        # one KV head for four query heads
        "mqa": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
                    num_key_value_heads=1, head_dim=16, vocab_size=128, tie_word_embeddings=True,
                    rope_theta=500000.0),
    }
    runs = {"gqa3-untied": (3, "mars"), "mha-d32": (2, "zigzag"), "mqa": (4, "ring")}
    for name, shape in shapes.items():
        torch.manual_seed(1)
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**shape)).eval()
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "bias" in pname or "norm" in pname:
                    p.add_(0.2 * torch.randn_like(p))
        model.save_pretrained(tmp_path / name)
        cfg, weights = load_checkpoint(tmp_path / name)
        prompt = [int(t) for t in np.random.default_rng(3).integers(0, cfg.vocab_size, 10)]
        nodes, scheme = runs[name]
        check(cfg, weights, prompt, nodes=nodes, scheme=scheme, chunk=2, decode=2)


def invalidate_a_read_replica(s) -> tuple[int, int]:
    """Turn the first DIR VALID of a replica its holder reads into INVALID in ``s``'s prefill
    programs; returns (that node, the block): its ATTN over the block must fault."""
    pl = s.plan
    reads = [(pl.compute_node(c), b) for c in range(pl.num_chunks) for b in range(c)
             if pl.compute_node(c) in pl.holders(b, c)[1:]]           # a replica its holder reads
    assert reads, "the plan has no replica that its holder reads"
    victim = reads[0]
    prog = s.lw.prefill[victim[0]]
    i = next(i for i, ins in enumerate(prog) if ins.OPCODE == Opcode.DIR and ins.block == victim[1]
             and ins.state == ReplicaState.VALID and not ins.check)
    prog[i] = prog[i].replace(state=ReplicaState.INVALID)
    return victim


def test_a_replica_marked_invalid_stops_the_reader():
    """A program that drops a replica before its holder reads it (its DIR VALID made INVALID):
    the gated attention faults UNREADABLE_BLOCK and the runtime says so in one line."""
    budget = 6 * int(TINY.kv_token_bytes)
    s = Session(TINY, TINY_W, PROMPT, nodes=3, scheme="mars", chunk=2, budget=budget, decode=0, group=16,
                factory=isa_backend)
    victim = invalidate_a_read_replica(s)
    with pytest.raises(NodeFault) as e:
        s.run()
    assert e.value.cause == SeqFault.UNREADABLE_BLOCK
    assert f"node {victim[0]}: fault UNREADABLE_BLOCK" in str(e.value) and "\n" not in str(e.value)
