"""attention = "array" (docs/attention-array.md step 4): the MARS lowering runs attention as GEMM kv
(scores on the MAC array) -> ATTN_SM MAX / APPLY -> GEMM_PV (o, wide across segments) -> ATTN_Q O
-> ATTN_EMIT, with the KV-stationary decode protocol.  The runs on the ISA simulator give the golden
fixed-point model's logits bit for bit (prefill and decode, 1-4 nodes, MARS and Ring), the
programs hold the array instructions (the attention unit's ATTN_KV only for the directory check
and the decode tokens' one-token segments), and what the path cannot run is refused in one line."""
import importlib

import numpy as np
import pytest

from mcf.spec.isa import Opcode, SeqFault
from mcf.spec.node import NodeConfig
from mcf.sw.driver import NodeFault
from mcf.sw.errors import UserError
from mcf.sw.golden.fixed_model import FixedModel
from mcf.sw.golden.weights import random_weights
from mcf.sw.models import load_model
from mcf.sw.runtime.backend import isa_backend
from mcf.sw.runtime.runtime import Session
from tests.sw.runtime.test_runtime import golden, invalidate_a_read_replica

lower_mod = importlib.import_module("mcf.sw.mars.lower")
TINY = load_model("tiny")
TINY_W = random_weights(TINY, 5)
FM = FixedModel(TINY, TINY_W, 16)
PROMPT = [int(t) for t in np.random.default_rng(7).integers(0, TINY.vocab_size, 64)]
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


@pytest.mark.parametrize("nodes", [1, 2])
def test_score_rows_of_one_segment_are_bit_exact(monkeypatch, nodes):
    """When the scores of every key do not fit the SPAD share, the score rows hold one segment and
    the APPLY pass computes them again (GEMM kv twice a segment)."""
    monkeypatch.setattr(lower_mod, "SCORE_SPAD_SHARE", 1 << 20)
    s, rep = run(PROMPT[:24], nodes=nodes, decode=1)
    assert s.lw.spad.beats["sk"] == 8
    want, _ = golden(TINY, FM, PROMPT[:24], 1)
    for k, (st, ref) in enumerate(zip(rep.steps, want)):
        assert np.array_equal(st.logits, ref), f"step {k}: logits differ"
    # per attention (from one ATTN_Q QUERY to the next): a GEMM kv before each ATTN_SM pass, but
    # for one segment, whose scores fit (MAX and APPLY read the same)
    seen = set()
    for prog in s.lw.prefill:
        g = m = 0
        for i in prog + [None]:
            if i is None or (i.OPCODE == Opcode.ATTN_Q and i.what == 0):
                if m:
                    assert g == m or (g, m) == (1, 2), (g, m)
                    seen.add(m // 2)
                g = m = 0
            elif i.OPCODE == Opcode.GEMM and i.kv:
                g += 1
            elif i.OPCODE == Opcode.ATTN_SM and i.w != s.lw.spad.beats["ZERO"]:     # not the zero words
                m += 1
    assert seen == {1, 2, 3} if nodes == 1 else max(seen) >= 2


def test_a_replica_marked_invalid_stops_the_array_reader():
    """GEMM kv reads no directory: the array path's one-key ATTN_KV check faults UNREADABLE_BLOCK
    on a replica made INVALID before its holder reads it, as the unit path does."""
    budget = 24 * int(TINY.kv_token_bytes)
    s = Session(TINY, TINY_W, PROMPT[:64], nodes=4, scheme="mars", chunk=8, budget=budget, decode=0, group=16,
                factory=isa_backend, fixed=FM, node=ARRAY_NODE, attention="array")
    invalidate_a_read_replica(s)
    with pytest.raises(NodeFault) as e:
        s.run()
    assert e.value.cause == SeqFault.UNREADABLE_BLOCK


def test_bench_attention_path_compares_the_two_paths(capsys):
    """`mcf bench attention-path`: the same prefill and decode lowered both ways on the cluster
    model; equal logits, the array's cycles in GEMM kv / ATTN_SM / GEMM_PV, the unit's in ATTN_KV,
    the ratio of the attention instructions' cycles; a prompt of partial chunks is refused."""
    import json
    from mcf.sw import cli
    capsys.readouterr()
    assert cli.main(["bench", "attention-path", "--model", "tiny", "--prompt", "16", "--chunk", "8", "--decode", "1",
                     "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["logits_equal"] is True and out["kind"] == "model"
    u, a = out["unit"], out["array"]
    assert set(u["prefill_by_kind"]) == {"ATTN_Q", "ATTN_KV", "ATTN_EMIT"}
    assert all(a["prefill_by_kind"][k] > 0 for k in ("GEMM_KV", "ATTN_SM", "GEMM_PV", "VEC_O"))
    assert 0 < a["prefill_attention_cycles"] < a["prefill_cycles"]
    assert out["prefill_attention_ratio_unit_over_array"] == round(u["prefill_attention_cycles"]
                                                                   / a["prefill_attention_cycles"], 3)
    assert cli.main(["bench", "attention-path", "--model", "tiny", "--prompt", "12", "--chunk", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mcf: error: --prompt 12") and len(err.splitlines()) == 1
