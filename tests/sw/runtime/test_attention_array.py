"""attention = "array" (docs/attention-array.md step 4): the MARS lowering runs attention as GEMM kv
(scores on the MAC array) -> ATTN_SM MAX / APPLY -> GEMM_PV (o, wide across segments) -> ATTN_Q O
-> ATTN_EMIT, with the KV-stationary decode protocol.  The runs on the ISA simulator give the golden
fixed-point model's logits bit for bit (prefill and decode, 1-4 nodes, MARS and Ring), the
programs hold the array instructions (the attention unit's ATTN_KV only for the directory check
and the decode tokens' one-token segments), and what the path cannot run is refused in one line."""
import numpy as np
import pytest

from mcf.spec.isa import Opcode
from mcf.spec.node import NodeConfig
from mcf.sw.errors import UserError
from mcf.sw.golden.fixed_model import FixedModel
from mcf.sw.golden.weights import random_weights
from mcf.sw.models import load_model
from mcf.sw.runtime.backend import isa_backend
from mcf.sw.runtime.runtime import Session
from tests.sw.runtime.test_runtime import golden

TINY = load_model("tiny")
TINY_W = random_weights(TINY, 5)
FM = FixedModel(TINY, TINY_W, 16)
PROMPT = [int(t) for t in np.random.default_rng(7).integers(0, TINY.vocab_size, 32)]
#: The tiny node with an 8 x 8 array: GEMM_PV needs mac_rows >= vec_lanes (the tiny node's 4 x 8
#: array builds no GEMM_PV).  Segments of a multiple of lcm(8, 8, 8) = 8 keys.
ARRAY_NODE = NodeConfig.tiny(mac_rows=8)


def run(prompt, *, nodes, scheme="mars", chunk=8, budget=None, decode=2, node=ARRAY_NODE, attention="array"):
    s = Session(TINY, TINY_W, prompt, nodes=nodes, scheme=scheme, chunk=chunk, budget=budget, decode=decode,
                group=16, factory=isa_backend, fixed=FM, node=node, attention=attention)
    return s, s.run()


def ops(programs):
    return [ins for prog in programs for ins in prog]


@pytest.mark.parametrize("nodes,scheme,n_tok,budget_tokens", [
    (1, "mars", 16, None), (2, "mars", 32, None), (4, "mars", 32, 16), (3, "ring", 24, None)])
def test_array_attention_is_bit_exact(nodes, scheme, n_tok, budget_tokens):
    budget = budget_tokens * int(TINY.kv_token_bytes) if budget_tokens else None
    s, rep = run(PROMPT[:n_tok], nodes=nodes, scheme=scheme, budget=budget)
    want, _ = golden(TINY, FM, PROMPT[:n_tok], 2)
    assert [st.kind for st in rep.steps] == ["prefill", "decode", "decode"]
    for k, (st, ref) in enumerate(zip(rep.steps, want)):
        assert np.array_equal(st.logits, ref), f"step {k}: logits differ"
    # the array path ran: scores, softmax and PV instructions; ATTN_KV only as the directory check
    # (one key a block, MAX) or over the decode tokens' one-token segments
    for progs in (s.lw.prefill, s.lw.decode_programs(1)):
        got = ops(progs)
        kinds = {i.OPCODE for i in got}
        assert {Opcode.ATTN_SM, Opcode.GEMM_PV} <= kinds
        assert any(i.OPCODE == Opcode.GEMM and i.kv for i in got)
        assert all(i.keys == 1 for i in got if i.OPCODE == Opcode.ATTN_KV)


def test_unit_and_array_agree_and_differ_in_programs():
    s_u, rep_u = run(PROMPT[:16], nodes=2, attention="unit", decode=1)
    s_a, rep_a = run(PROMPT[:16], nodes=2, decode=1)
    for a, b in zip(rep_u.steps, rep_a.steps):
        assert np.array_equal(a.logits, b.logits)
    assert not any(i.OPCODE == Opcode.GEMM_PV for i in ops(s_u.lw.prefill))
    assert any(i.OPCODE == Opcode.ATTN_KV and i.keys > 1 for i in ops(s_u.lw.prefill))


def test_what_the_array_path_cannot_run_is_refused():
    with pytest.raises(UserError, match=r"attention=array: a chunk of 4 tokens; .* multiple of 8"):
        run(PROMPT[:16], nodes=1, chunk=4)
    with pytest.raises(UserError, match=r"attention=array: a 4 x 8 array .* builds no GEMM_PV"):
        run(PROMPT[:16], nodes=1, node=NodeConfig.tiny())
    with pytest.raises(UserError, match="attention 'gemm': one of unit, array"):
        run(PROMPT[:16], nodes=1, attention="gemm")
    with pytest.raises(UserError, match="tensor-parallel lowering runs attention on the unit only"):
        Session(TINY, TINY_W, PROMPT[:16], nodes=2, decode_scheme="tensor-parallel", factory=isa_backend,
                node=ARRAY_NODE, attention="array")
