"""The ISA lowering (sw/mars/lower.py, builder.py): what it refuses (a plan that sends a block
from a node without a copy or reads a drained replica, shapes and sizes the node cannot run),
and what every program it emits satisfies: semaphores consumed by one queue, every wait met by
signals emitted before it in the global order, every SEND preceded by its receivers' RECVs."""
import numpy as np
import pytest

from mcf.spec import isa
from mcf.spec.isa import Opcode, Queue
from mcf.spec.node import NodeConfig
from mcf.spec.plan import EventKind, EventPhase
from mcf.sw.golden.fixed_model import FixedModel
from mcf.sw.golden.weights import random_weights
from mcf.sw.mars.builder import Builder, max_nodes
from mcf.sw.mars.lower import LoweringError, check_model, const_keys, lower
from mcf.sw.mars.planner import Event, PlanRequest, plan
from mcf.sw.mars.profile import load_profile
from mcf.sw.errors import UserError
from mcf.sw.models import ModelConfig, load_model
from mcf.sw.runtime import pack
from mcf.sw.runtime.runtime import node_config

TINY = load_model("tiny")
CONSTS = pack.consts_of(FixedModel(TINY, random_weights(TINY, 0), 16))
NODE = node_config(TINY, 4).replace(route_entries=256, reduce_slots=4)


def tiny_plan(nodes=4, scheme="mars", seq=16, chunk=2, budget_tokens=6):
    budget = budget_tokens * int(TINY.kv_token_bytes) if scheme == "mars" else None
    return plan(PlanRequest(model=TINY, seq_len=seq, nodes=nodes, profile=load_profile("kr260"), scheme=scheme,
                            chunk_size=chunk, budget_bytes=budget))


class Tampered:
    """A plan with some of its answers replaced (a wrong plan)."""

    def __init__(self, plan, **over):
        self._plan, self._over = plan, over

    def __getattr__(self, name):
        return self._over[name] if name in self._over else getattr(self._plan, name)


def test_consts_are_named_and_checked():
    assert set(const_keys(TINY)) == set(CONSTS)
    with pytest.raises(LoweringError, match="consts: missing"):
        lower(tiny_plan(), NODE, 16, {}, [0] * 4)


def test_a_fetch_from_a_node_without_a_copy_is_refused():
    p = tiny_plan()
    c, b, dsts, nobody = next((t, b, d, x) for t in range(p.num_chunks) for b, _, d, _ in p.owner_fetches(t)
                              for x in range(p.nodes) if x not in p.holders(b, t) and x not in d)

    def wrong(t):
        return [(b_, nobody if (t, b_) == (c, b) else s, d, nb) for b_, s, d, nb in p.owner_fetches(t)]
    with pytest.raises(LoweringError, match=rf"step {c}: node \d sends block \d+, of which it holds no copy"):
        lower(Tampered(p, owner_fetches=wrong), NODE, 16, CONSTS, [0] * 4)


def test_a_replica_drained_before_its_holder_reads_it_is_refused():
    p = tiny_plan()
    reads = [(p.compute_node(c), b, c) for c in range(p.num_chunks) for b in range(c - 1)
             if p.compute_node(c) in p.holders(b, c)[1:]]
    n, b, c = reads[-1]
    events = []
    for e in p.events:
        if e.block == b and n in e.nodes and e.kind in (EventKind.DRAIN, EventKind.INVALIDATE):
            rest = tuple(x for x in e.nodes if x != n)
            if not rest:
                continue
            e = Event(e.step, e.phase, e.kind, e.block, rest)
        events.append(e)
    early = [Event(b + 1, EventPhase.START, EventKind.DRAIN, b, (n,)),
             Event(b + 1, EventPhase.END, EventKind.INVALIDATE, b, (n,))]
    events = sorted(events + early, key=lambda e: (e.step, e.phase == EventPhase.END))
    with pytest.raises(LoweringError, match=rf"node {n} computes chunk \d+ without a copy of block {b}"):
        lower(Tampered(p, events=events), NODE, 16, CONSTS, [0] * 4)


@pytest.mark.parametrize("change,node,group,message", [
    (dict(head_dim=24), {}, 16, "head_dim=24 must be a multiple of 16"),
    (dict(num_heads=8, num_kv_heads=1, hidden_size=128), {}, 16, "GQA group 8 exceeds the attention unit's att_rows=4"),
    (dict(intermediate_size=144), dict(mac_rows=32), 16, "intermediate_size=144 must be a multiple of mac_rows=32"),
    ({}, {}, 4, "group size 4 must be a power of two, a multiple of mac_lanes=8 and at most max_group=128"),
    ({}, dict(max_group=16), 32, "group size 32 must be .* at most max_group=16"),   # the GEMM would fault
    (dict(intermediate_size=136), {}, 16, "group size 16 does not divide intermediate_size=136"),
])
def test_unsupported_shapes_are_refused_in_one_line(change, node, group, message):
    """(The GQA group's limit is the attention path's: ``choose_attention``, after ``check_model``.)"""
    from mcf.sw.mars.lower import Shapes, choose_attention
    cfg = ModelConfig(**{**TINY.to_dict(), **change})
    n = NodeConfig.tiny(head_dim=cfg.head_dim, **node)
    with pytest.raises(LoweringError, match=message):
        check_model(cfg, n, group)
        choose_attention("auto", Shapes(cfg, n, group, 8), [8])


def test_sizes_beyond_the_node_are_refused():
    with pytest.raises(LoweringError, match="at most max_tokens=8"):
        lower(tiny_plan(chunk=16, seq=16, nodes=1, scheme="ring"), NODE, 16, CONSTS, [0])
    with pytest.raises(LoweringError, match="SPAD"):
        lower(tiny_plan(nodes=1, scheme="ring"), NODE.replace(spad_beats=128), 16, CONSTS, [0])
    with pytest.raises(LoweringError, match="softmax_fan_in"):
        lower(tiny_plan(), NODE.replace(softmax_fan_in=2), 16, CONSTS, [0] * 4)
    with pytest.raises(UserError, match="route ids"):
        lower(tiny_plan(), NODE.replace(route_entries=16), 16, CONSTS, [0] * 4)
    assert max_nodes() == 13


def check_programs(programs, nodes):
    """Replay the global-order rules on the encoded programs: per node, a semaphore is waited on by
    one queue only; RECV credits go to a semaphore that only TX waits on."""
    for n, prog in enumerate(programs):
        waiters = {}
        for ins in prog:
            assert ins.OPCODE != 0
            if ins.wait_cnt:
                waiters.setdefault(ins.wait_sem, set()).add(ins.queue)
        assert all(len(q) == 1 for q in waiters.values()), (n, waiters)
        assert prog[-1].OPCODE == Opcode.END
    for n, prog in enumerate(programs):
        for ins in prog:
            if ins.OPCODE == Opcode.RECV and ins.credit:
                sem_queues = {i.queue for i in programs[ins.credit_dst] if i.wait_cnt and i.wait_sem == ins.credit_sem}
                assert sem_queues <= {Queue.TX}


@pytest.mark.parametrize("scheme", ["mars", "ring", "zigzag", "pd"])
def test_programs_keep_the_semaphore_rules(scheme):
    p = tiny_plan(scheme=scheme)
    lw = lower(p, NODE, 16, CONSTS, [0x1000_0000] * 4, decode_steps=2)
    check_programs(lw.prefill, 4)
    check_programs(lw.decode_programs(1), 4)
    assert isa.decode_program(isa.encode_program(lw.prefill[0])) == lw.prefill[0]
    assert lw.route_ids_used <= NODE.route_entries


@pytest.mark.parametrize("nodes,scheme", [(2, "mars"), (3, "ring")])
def test_the_tiny_node_runs_the_tiny_models_decode(nodes, scheme):
    """NodeConfig.tiny as the runtime takes it (no NIC size raised): the decode's softmax-state
    reductions (one per row group, open at once) fit its reduction slots."""
    node = node_config(TINY, nodes)
    lw = lower(tiny_plan(nodes=nodes, scheme=scheme, budget_tokens=16), node, 16, CONSTS, [0] * nodes,
               decode_steps=1)
    assert len(lw.rgroups) == node.reduce_slots == NodeConfig.tiny().reduce_slots == 2
    check_programs(lw.decode_programs(0), nodes)


def test_the_builder_turns_dependencies_into_waits():
    b = Builder(2)
    sems = b.sems
    k = b.ex(0, isa.Sync, on=Queue.EX)
    a = b.recv(1, 0, 5, 0x40, 64, credit_route=2)
    s = b.send(0, [1], [k], ddr=0, length=64, stage=0, mop=8, collective=0, reduce_op=0, dst=1, route_id=3,
               tag=5, seq=0)
    b.ex(1, isa.Sync, [a], on=Queue.EX)
    p0, p1 = b.programs()
    # node 0: the EX SYNC signals EX2TX; the SEND waits for node 1's credit (its CR sem), via a SYNC
    assert p0[0].sig and p0[0].sig_sem == sems.pair[(Queue.EX, Queue.TX)]
    waits = {(i.wait_sem, i.wait_cnt) for i in p0 if i.queue == Queue.TX and i.wait_cnt}
    assert waits == {(sems.pair[(Queue.EX, Queue.TX)], 1), (sems.credit[1], 1)}
    assert p1[0].OPCODE == Opcode.RECV and p1[0].credit_sem == sems.credit[1] and p1[0].done_sem == sems.done[0]
    assert (p1[1].wait_sem, p1[1].wait_cnt) == (sems.done[0], 1)
    assert s.queue == Queue.TX
    with pytest.raises(ValueError, match="posted no receive"):
        b.send(1, [0], ddr=0, length=1, stage=0, mop=8, collective=0, reduce_op=0, dst=0, route_id=2, tag=6, seq=0)


def test_auto_attention_is_the_array_on_the_kr260_node_and_the_unit_on_tiny():
    """``attention = "auto"`` (lower / Session / `mcf run` default): the array path where
    ARRAY_COVERS holds -- Qwen2.5-1.5B on the KR260 node -- the unit where it does not (the tiny
    node's 4 x 8 array builds no GEMM_PV), each with a one-line reason; explicit choices honoured
    (an uncovered "array" refused); anything else refused."""
    from mcf.sw.mars.lower import Shapes, choose_attention
    qwen = load_model("qwen2.5-1.5b")
    kr260 = Shapes(qwen, node_config(qwen, 1), 128, 16)
    path, why = choose_attention("auto", kr260, [16] * 64)
    assert path == "array" and why.startswith("auto -> array") and "\n" not in why
    # the cluster model's kr260 profile takes the path the lowering takes on that node
    from mcf.sw.mars.profile import load_profile
    assert load_profile("kr260").attention_path == path
    # the unit's path needs the GQA group within att_rows (1 on the KR260 node); the array's within its state rows
    with pytest.raises(LoweringError, match="GQA group 6 exceeds the attention unit's att_rows=1"):
        choose_attention("unit", kr260, [16] * 64)
    assert choose_attention("unit", Shapes(qwen, node_config(qwen, 1).replace(att_rows=6), 128, 16),
                            [16] * 64) == ("unit", "attention=unit asked for")
    assert choose_attention("array", kr260, [16] * 64) == ("array", "attention=array asked for")
    tiny = Shapes(TINY, NodeConfig.tiny(), 16, 8)
    path, why = choose_attention("auto", tiny, [8, 8])
    assert path == "unit" and why.startswith("auto -> unit: a 4 x 8 array") and "builds no GEMM_PV" in why
    with pytest.raises(LoweringError, match="builds no GEMM_PV"):
        choose_attention("array", tiny, [8, 8])
    with pytest.raises(LoweringError, match="attention='gemm': one of auto, unit, array"):
        choose_attention("gemm", tiny, [8, 8])
    # the lowering records its choice: tiny (its default node) -> the unit, no GEMM_PV in the programs
    lw = lower(tiny_plan(nodes=2, budget_tokens=16), NODE, 16, CONSTS, [0, 0])
    assert (lw.attention, lw.attention_reason.split(":")[0]) == ("unit", "auto -> unit")
    assert not any(i.OPCODE == Opcode.GEMM_PV for prog in lw.prefill for i in prog)


def test_no_decode_step_emits_attn_kv_on_the_kr260_node():
    """On the KR260 node (Qwen2.5-1.5B's shapes; attention "auto" -> the array) no decode step's
    programs hold an ATTN_KV, so the attention unit's product rows serve nothing in decode: the
    decode tokens' keys are a run of decode blocks of ``NodeConfig.decode_block_keys`` = 8 keys
    (``spec.kv``'s decode layout) that GEMM_QK / ATTN_SM / GEMM_PV read -- the KV-stationary decode
    on 1 and 2 nodes, and the tensor-parallel decode on 4 (its split attention: tp-decode's programs),
    at every step (a decode block's keys 0 .. 7, then the second block).  The shard's decode rows
    (one KV head: 17 beats a token) are not whole DDR_ALIGN units: the STORE starts a token early.
    Nor does a prompt of 37 tokens (a short last chunk) on either."""
    import dataclasses
    from mcf.sw.mars.lower_tp import lower_tp
    full = load_model("qwen2.5-1.5b")        # its attention shapes (as `mcf bench attention-path`)
    qwen = dataclasses.replace(full, num_layers=1, intermediate_size=full.hidden_size, vocab_size=256)
    consts = {k: 0 for k in const_keys(qwen)}
    steps = 10

    def check(lw, nodes):
        assert lw.attention == "array" and lw.node.decode_block_keys == 8
        dec = lw.map.off("decode_kv")
        for step in range(steps):
            progs = lw.decode_programs(step)
            assert not any(i.OPCODE == Opcode.ATTN_KV for prog in progs for i in prog), (nodes, step)
            qk = [i for n, prog in enumerate(progs) for i in prog if i.OPCODE == Opcode.GEMM_QK
                  and 0 <= i.seg - lw.bases[n] - dec < lw.map.regions["decode_kv"][1]]
            assert qk and all(i.block_keys == 8 and bool(i.seg_stride) == (step >= 8) for i in qk), (nodes, step)
            kvw = [i for prog in progs for i in prog if i.OPCODE == Opcode.KVW]
            assert kvw and all(i.rows == step % 8 + 1 for i in kvw), (nodes, step)

    for nodes in (1, 2):
        p = plan(PlanRequest(model=qwen, seq_len=32, nodes=nodes, profile=load_profile("kr260"), scheme="mars",
                             chunk_size=16))
        check(lower(p, node_config(qwen, nodes), 128, consts, [0] * nodes, decode_steps=steps), nodes)
    check(lower_tp(qwen, node_config(qwen, 4), 128, consts, [0] * 4, seq_len=32, chunk=16, decode_steps=steps), 4)
    # a prompt of 37 tokens: its last chunk of 5 keys (not a multiple of VL = 8) is read by GEMM_QK / GEMM_PV as
    # a block of 8 whose keys past the prompt are invisible (in decode: at positions after the token), so
    # neither the prefill nor a decode step holds an ATTN_KV (the node's att_rows = 1 admits none of their jobs)
    assert node_config(qwen, 1).att_rows == 1
    for lw in [lower(plan(PlanRequest(model=qwen, seq_len=37, nodes=nodes, profile=load_profile("kr260"),
                                      scheme="mars", chunk_size=16)), node_config(qwen, nodes), 128, consts,
                     [0] * nodes, decode_steps=2) for nodes in (1, 2)] + \
            [lower_tp(qwen, node_config(qwen, 4), 128, consts, [0] * 4, seq_len=37, chunk=16, decode_steps=2)]:
        progs = [lw.prefill, lw.decode_programs(0), lw.decode_programs(1)]
        assert not any(i.OPCODE == Opcode.ATTN_KV for pr in progs for prog in pr for i in prog)
        assert any(i.OPCODE == Opcode.GEMM_QK and i.block_keys == 8 and not i.seg_stride
                   for pr in progs for prog in pr for i in prog)
