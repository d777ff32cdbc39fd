"""attention = "array" (docs/attention-array.md step 4): the MARS lowering runs attention as GEMM_QK
(scores on the MAC array over a run of KV blocks) -> ATTN_SM MAX / APPLY -> GEMM_PV (o, wide across
runs) -> ATTN_Q O (GEMM_PV's rows at their stride) -> ATTN_EMIT, with the KV-stationary decode protocol.  The runs on the ISA simulator give the golden
fixed-point model's logits bit for bit (prefill and decode, 1-4 nodes, MARS and Ring), the
programs hold the array instructions (the directory check a DIR check = 1 per run of gated blocks;
the decode tokens' keys in blocks of NodeConfig.decode_block_keys read as a run of blocks: no ATTN_KV),
and what the path cannot run is refused in one line."""
import importlib

import numpy as np
import pytest

from mcf.spec import kv
from mcf.spec.isa import AttnLoad, Opcode, SeqFault, VecOp
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
#: array builds no GEMM_PV).  Runs in granules of lcm(8, 8, 8) = 8 keys.
ARRAY_NODE = NodeConfig.tiny(mac_rows=8)
#: A 16 x 16 array: tiles of 16 keys, GEMM_PV keys a multiple of 16 (a chunk of 8 tokens is half).
TILE16_NODE = NodeConfig.tiny(mac_rows=16, mac_lanes=16)


def run(prompt, *, nodes, scheme="mars", chunk=8, budget=None, decode=2, node=ARRAY_NODE, attention="array"):
    s = Session(TINY, TINY_W, prompt, nodes=nodes, scheme=scheme, chunk=chunk, budget=budget, decode=decode,
                group=16, factory=isa_backend, fixed=FM, node=node, attention=attention)
    return s, s.run()


def ops(programs):
    return [ins for prog in programs for ins in prog]


@pytest.mark.parametrize("nodes,scheme,n_tok,budget_tokens,decode", [
    (1, "mars", 16, None, 2), (2, "mars", 32, None, 10), (4, "mars", 32, 16, 2), (3, "ring", 24, None, 2)])
def test_array_attention_is_bit_exact(nodes, scheme, n_tok, budget_tokens, decode):
    """decode = 10: the decode tokens' keys fill a decode block of 8 and start a second (one run of
    two blocks from step 8 on)."""
    budget = budget_tokens * int(TINY.kv_token_bytes) if budget_tokens else None
    s, rep = run(PROMPT[:n_tok], nodes=nodes, scheme=scheme, budget=budget, decode=decode)
    want, _ = golden(TINY, FM, PROMPT[:n_tok], decode)
    assert [st.kind for st in rep.steps] == ["prefill"] + ["decode"] * decode
    for k, (st, ref) in enumerate(zip(rep.steps, want)):
        assert np.array_equal(st.logits, ref), f"step {k}: logits differ"
    # the array path ran: scores, softmax and PV instructions; the directory check a DIR check over
    # each run of gated blocks; no ATTN_KV: the decode tokens' keys are a run of decode blocks on the array
    checks = 0
    B, dec = ARRAY_NODE.decode_block_keys, s.lw.map.regions["decode_kv"]
    for progs in (s.lw.prefill, s.lw.decode_programs(1), s.lw.decode_programs(decode - 1)):
        got = ops(progs)
        kinds = {i.OPCODE for i in got}
        assert {Opcode.ATTN_SM, Opcode.GEMM_PV} <= kinds
        assert any(i.OPCODE == Opcode.GEMM_QK for i in got)
        assert Opcode.ATTN_KV not in kinds
        checks += sum(i.OPCODE == Opcode.DIR and i.check for i in got)
    for step in (1, decode - 1):
        root = s.lw.decode_programs(step)[0]
        qk = [i for i in root if i.OPCODE == Opcode.GEMM_QK and 0 <= i.seg - s.lw.bases[0] - dec[0] < dec[1]]
        assert qk and all(i.block_keys == B and i.tiles * ARRAY_NODE.mac_rows >= step + 1 for i in qk)
        assert all(bool(i.seg_stride) == (step >= B) for i in qk)
        assert not any(i.OPCODE == Opcode.VEC and i.vop == VecOp.RESIDUAL and i.n == TINY.head_dim for i in got)
    assert checks > 0
    # prefill jobs of min(sm_rows, max_tokens) // group tokens: 4 tokens x 2 heads = 8 rows, past the
    # unit's att_rows = 4 rows with products (NodeConfig.sm_rows)
    rows = {i.tokens * i.heads for i in ops(s.lw.prefill) if i.OPCODE in (Opcode.ATTN_Q, Opcode.ATTN_SM)}
    assert rows == {ARRAY_NODE.sm_rows} and ARRAY_NODE.sm_rows == 2 * ARRAY_NODE.att_rows


def reads_stay_in_the_kv_regions(lw, steps):
    """Every block a GEMM_QK, GEMM_PV or ATTN_SM APPLY reads (its keys in whole tiles or as given)
    lies in the KV pool or the staging region of its node."""
    P, d = lw.node.mac_rows, lw.node.head_dim
    for progs in steps:
        for n, prog in enumerate(progs):
            regions = [(lw.bases[n] + lw.map.off(r), lw.bases[n] + lw.map.off(r) + lw.map.regions[r][1])
                       for r in ("pool", "staging", "decode_kv")]
            for i in prog:
                if i.OPCODE == Opcode.GEMM_QK:
                    keys = i.tiles * P
                elif i.OPCODE == Opcode.GEMM_PV or (i.OPCODE == Opcode.ATTN_SM and i.phase == 1):
                    keys = i.keys
                else:
                    continue
                hi = i.seg + (keys - 1) // i.block_keys * i.seg_stride * 64 + kv.segment_bytes(i.block_keys, d)
                assert any(a <= i.seg and hi <= b for a, b in regions), (n, i)


@pytest.mark.parametrize("nodes,n_tok", [(1, 28), (2, 28), (1, 24)])
def test_chunks_smaller_than_a_tile_are_bit_exact(nodes, n_tok):
    """Chunks of 8 tokens on a 16 x 16 array (tiles of 16 keys, GEMM_PV keys a multiple of 16) and a
    last chunk of 4: a run of blocks is one GEMM_QK over whole tiles (the keys past it read from
    the KV pool's next blocks or, for one block, its own again: invisible), GEMM_PV over 16-key
    multiples (keys past the run that a row would see get w = 0 from an ATTN_SM APPLY at positions
    after every query).  The decode reads the 4-token block, which later keys follow, on the array too
    (as a block of 8 keys, ATTN_SM's positions those of keys up to the token's: the 4 past it invisible).
    24 tokens: the decode's run of the 3 blocks reads a 4th past the last pool slot (allocated)."""
    s, rep = run(PROMPT[:n_tok], nodes=nodes, node=TILE16_NODE)
    want, _ = golden(TINY, FM, PROMPT[:n_tok], 2)
    for k, (st, ref) in enumerate(zip(rep.steps, want)):
        assert np.array_equal(st.logits, ref), f"step {k}: logits differ"
    pre, dec = ops(s.lw.prefill), ops(s.lw.decode_programs(0))
    reads_stay_in_the_kv_regions(s.lw, [s.lw.prefill, s.lw.decode_programs(0), s.lw.decode_programs(1)])
    assert all(i.keys == 1 for i in pre if i.OPCODE == Opcode.ATTN_KV)
    # ATTN_Q ROWS (no query data) where no ATTN_KV follows (the golden node refuses one after it)
    assert any(i.OPCODE == Opcode.ATTN_Q and i.what == AttnLoad.ROWS for i in pre)
    assert not any(i.OPCODE == Opcode.ATTN_KV for i in dec)
    if (nodes, n_tok) == (1, 28):
        # a run of 3 blocks in one GEMM_QK of 2 tiles; w = 0 keys past it (positions >= 28)
        assert any(i.OPCODE == Opcode.GEMM_QK and i.tiles == 2 and i.block_keys == 8 and i.seg_stride for i in pre)
        assert any(i.OPCODE == Opcode.GEMM_PV and i.keys == 32 and i.block_keys == 8 for i in pre)
        for prog in (pre, dec):
            assert any(i.OPCODE == Opcode.ATTN_SM and i.kpos0 >= 28 for i in prog)
        g = 0
        for i in pre + [None]:
            if i is None or (i.OPCODE == Opcode.ATTN_Q and i.what in (AttnLoad.QUERY, AttnLoad.ROWS)):
                assert g <= 2                   # the full chunks' run, the 4-token block
                g = 0
            elif i.OPCODE == Opcode.GEMM_QK:
                g += 1


@pytest.mark.parametrize("nodes", [1, 2])
def test_a_short_last_chunk_is_on_the_array(monkeypatch, nodes):
    """A prompt of 37 tokens in chunks of 8: its last block of 5 keys (not a multiple of VL = 8) is read
    as a block of 8 by GEMM_QK, ATTN_SM and GEMM_PV (``_Lowerer.padded_block``), its keys past the prompt
    invisible: in the prefill they lie after every query, in decode ATTN_SM sees the 5 keys at the
    positions up to the token's.  On a node with att_rows = 1 (whose ATTN_KV takes none of these jobs):
    no ATTN_KV.  The DDR filled with random bytes first (the segments' padding and the bytes read as
    keys 5 .. 7): the golden logits bit for bit."""
    from mcf.sw.golden.node import ddr as ddr_mod
    init = ddr_mod.SimDdr.__init__

    def random_ddr(self, size, *a, **kw):
        init(self, size, *a, **kw)
        self._cpu[:] = self._ddr[:] = np.random.default_rng(size % 97).integers(0, 256, size, np.uint8).tobytes()
    monkeypatch.setattr(ddr_mod.SimDdr, "__init__", random_ddr)
    s, rep = run(PROMPT[:37], nodes=nodes, node=ARRAY_NODE.replace(att_rows=1), decode=2)
    want, _ = golden(TINY, FM, PROMPT[:37], 2)
    for k, (st, ref) in enumerate(zip(rep.steps, want)):
        assert np.array_equal(st.logits, ref), f"step {k}: logits differ"
    steps = [s.lw.prefill, s.lw.decode_programs(0), s.lw.decode_programs(1)]
    reads_stay_in_the_kv_regions(s.lw, steps)
    assert not any(i.OPCODE == Opcode.ATTN_KV for progs in steps for i in ops(progs))
    # decode step j (position 37 + j): the 5 keys at positions 33 + j .. 37 + j
    assert all(any(i.OPCODE == Opcode.ATTN_SM and i.kpos0 == 33 + j for i in ops(progs))
               for j, progs in enumerate(steps[1:]))


def test_unit_and_array_agree_and_differ_in_programs():
    s_u, rep_u = run(PROMPT[:16], nodes=2, attention="unit", decode=1)
    s_a, rep_a = run(PROMPT[:16], nodes=2, decode=1)
    for a, b in zip(rep_u.steps, rep_a.steps):
        assert np.array_equal(a.logits, b.logits)
    assert not any(i.OPCODE == Opcode.GEMM_PV for i in ops(s_u.lw.prefill))
    assert any(i.OPCODE == Opcode.ATTN_KV and i.keys > 1 for i in ops(s_u.lw.prefill))


def test_auto_runs_the_array_where_covered_and_says_so():
    """The default (``attention = "auto"``): the array path on a node that builds GEMM_PV (its
    programs hold GEMM_PV), the unit on the tiny node; the report (``mcf run``) carries the choice and
    its one-line reason; the same logits either way."""
    s_a, rep_a = run(PROMPT[:16], nodes=1, decode=0, attention="auto")
    s_u, rep_u = run(PROMPT[:16], nodes=1, decode=0, node=NodeConfig.tiny(), attention="auto")
    assert rep_a.attention == "array" and rep_a.to_json()["attention_reason"].startswith("auto -> array")
    assert any(i.OPCODE == Opcode.GEMM_PV for i in ops(s_a.lw.prefill))
    assert rep_u.attention == "unit" and "builds no GEMM_PV" in rep_u.to_json()["attention_reason"]
    assert not any(i.OPCODE == Opcode.GEMM_PV for i in ops(s_u.lw.prefill))
    assert np.array_equal(rep_a.steps[0].logits, rep_u.steps[0].logits)


def test_what_the_array_path_cannot_run_is_refused():
    with pytest.raises(UserError, match=r"attention=array: a 4 x 8 array .* builds no GEMM_PV"):
        run(PROMPT[:16], nodes=1, node=NodeConfig.tiny())
    with pytest.raises(UserError, match="attention 'gemm': one of auto, unit, array"):
        run(PROMPT[:16], nodes=1, attention="gemm")
    # the tensor-parallel lowering: the same choice and refusal (its runs: test_tensor_parallel.py)
    with pytest.raises(UserError, match=r"attention=array: a 4 x 8 array .* builds no GEMM_PV"):
        Session(TINY, TINY_W, PROMPT[:16], nodes=2, decode_scheme="tensor-parallel", factory=isa_backend,
                node=NodeConfig.tiny(), attention="array")


@pytest.mark.parametrize("nodes", [1, 2])
def test_score_rows_of_one_segment_are_bit_exact(monkeypatch, nodes):
    """When the scores of every key do not fit the SPAD share, the score rows hold one granule (a
    block here) and the APPLY pass computes them again (GEMM_QK twice a block)."""
    monkeypatch.setattr(lower_mod, "SCORE_SPAD_SHARE", 1 << 20)
    s, rep = run(PROMPT[:24], nodes=nodes, decode=1)
    assert s.lw.spad.beats["sk"] == 8
    want, _ = golden(TINY, FM, PROMPT[:24], 1)
    for k, (st, ref) in enumerate(zip(rep.steps, want)):
        assert np.array_equal(st.logits, ref), f"step {k}: logits differ"
    # per attention (from one ATTN_Q QUERY / ROWS to the next): a GEMM_QK before each ATTN_SM pass, but
    # for one segment, whose scores fit (MAX and APPLY read the same)
    seen = set()
    for prog in s.lw.prefill:
        g = m = 0
        for i in prog + [None]:
            if i is None or (i.OPCODE == Opcode.ATTN_Q and i.what in (AttnLoad.QUERY, AttnLoad.ROWS)):
                if m:
                    assert g == m or (g, m) == (1, 2), (g, m)
                    seen.add(m // 2)
                g = m = 0
            elif i.OPCODE == Opcode.GEMM_QK:
                g += 1
            elif i.OPCODE == Opcode.ATTN_SM:
                m += 1
    assert seen == {1, 2, 3} if nodes == 1 else max(seen) >= 2


def test_a_replica_marked_invalid_stops_the_array_reader():
    """GEMM_QK reads no directory: the array path's DIR check faults UNREADABLE_BLOCK on a replica
    made INVALID before its holder reads it, as the unit path's gated ATTN_KV does."""
    budget = 24 * int(TINY.kv_token_bytes)
    s = Session(TINY, TINY_W, PROMPT[:64], nodes=4, scheme="mars", chunk=8, budget=budget, decode=0, group=16,
                factory=isa_backend, fixed=FM, node=ARRAY_NODE, attention="array")
    node, block = invalidate_a_read_replica(s)
    with pytest.raises(NodeFault) as e:
        s.run()
    assert e.value.cause == SeqFault.UNREADABLE_BLOCK
    assert f"node {node}: fault UNREADABLE_BLOCK at instruction " in str(e.value)
    ins = s.lw.prefill[node][int(str(e.value).split("at instruction ")[1].split(";")[0])]
    assert ins.OPCODE == Opcode.DIR and ins.check                      # the DIR check faulted, over the block
    assert block in range(ins.block, ins.block + ins.count * max(1, ins.stride), max(1, ins.stride))


def test_bench_attention_path_compares_the_two_paths(capsys):
    """`mcf bench attention-path`: the same prefill and decode lowered both ways on the cluster
    model; equal logits, the array's cycles in GEMM_QK / ATTN_SM / GEMM_PV, the unit's in ATTN_KV,
    the ratio of the attention instructions' cycles; a chunk the node cannot compute is refused."""
    import json
    from mcf.sw import cli
    capsys.readouterr()
    assert cli.main(["bench", "attention-path", "--model", "tiny", "--prompt", "16", "--chunk", "8", "--decode", "1",
                     "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["logits_equal"] is True and out["kind"] == "model"
    u, a = out["unit"], out["array"]
    assert set(u["prefill_by_kind"]) == {"ATTN_Q", "ATTN_KV", "ATTN_EMIT"}
    assert all(a["prefill_by_kind"][k] > 0 for k in ("GEMM_QK", "ATTN_SM", "GEMM_PV", "DIR_CHECK"))
    assert "ATTN_KV" not in a["prefill_by_kind"]                # the directory check is no ATTN_KV pass
    assert 0 < a["prefill_attention_cycles"] < a["prefill_cycles"]
    assert out["prefill_attention_ratio_unit_over_array"] == round(u["prefill_attention_cycles"]
                                                                   / a["prefill_attention_cycles"], 3)
    assert cli.main(["bench", "attention-path", "--model", "tiny", "--prompt", "16", "--chunk", "12"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mcf: error:") and "chunk of 12" in err and len(err.splitlines()) == 1
