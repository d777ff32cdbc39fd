"""Lowering: every Meta is a valid wire header, every route id delivers exactly to the nodes the
plan names when the per-node route tables are followed hop by hop, and the programs are a pure
function of the request (any node can compute them)."""
import math

import pytest

from mcf.spec import ROUTE_ENTRY, ROUTE_TABLE_ENTRIES, Collective, Meta, Op, Stage
from mcf.spec.regmap import DMA_DESCRIPTOR, DmaDir
from mcf.spec.routes import ROUTE_LOCAL, RouteIds
from mcf.sw.mars.metaprog import DECODE_ROOT, lower
from mcf.sw.mars.planner import PlanRequest, plan
from mcf.sw.mars.profile import load_profile
from mcf.sw.models.config import load_model

TINY = load_model("tiny")
PROFILE = load_profile("kr260").with_(net_ports=4)


def neighbour(topo, node, port):
    if topo.kind == "ring":
        return (node + (1 if port == 0 else -1)) % topo.n
    k = topo.shape[1]
    return node + {0: 1, 1: -1, 2: k, 3: -k}[port]


def deliver(progs, topo, src, rid):
    """Follow the route tables from src; return the set of nodes that deliver locally."""
    tables = [p.routes for p in progs]
    got, seen, todo = set(), {src}, [src]
    first = True
    while todo:
        x = todo.pop()
        e = tables[x].get(rid)
        assert e and e["valid"], f"route {rid} missing at node {x}"
        if e["local"] and not (first and x == src and rid != ROUTE_LOCAL):
            got.add(x)
        first = False
        if topo.kind == "switch":
            if e["port_mask"]:
                assert x == src or rid >= 0
                # the switch copies the frame to every member of the group
                for y in range(topo.n):
                    if y != x and tables[y].get(rid, {}).get("local"):
                        got.add(y)
            continue
        for port in range(16):
            if e["port_mask"] >> port & 1:
                y = neighbour(topo, x, port)
                assert y not in seen, f"route {rid} loops at {y}"
                seen.add(y)
                todo.append(y)
    return got


CASES = [(scheme, topo) for scheme in ("mars", "ring", "full", "pd", "passq")
         for topo in ("switch", "ring", "grid")]


@pytest.mark.parametrize("scheme, topo", CASES)
def test_programs_route_and_encode(scheme, topo):
    nodes = 6
    p = plan(PlanRequest(TINY, 200, nodes, PROFILE, scheme=scheme, topology=topo, chunk_size=16,
                         budget_bytes=5000 if scheme == "mars" else 10**8,
                         alpha=math.inf if scheme == "mars" else None))
    progs = lower(p)
    t = p.topology
    L = TINY.num_layers
    expected_fetch = {}
    for step in range(p.num_chunks):
        for b, src, dsts, _ in p.fetches(step):
            for layer in range(L):
                expected_fetch.setdefault((step, b * L + layer, src), set()).update(dsts)
    seen_fetch = {}
    for prog in progs:
        for rid, word in prog.route_words().items():
            assert 0 < rid < ROUTE_TABLE_ENTRIES and word == ROUTE_ENTRY.pack({**prog.routes[rid], "reserved": 0})
        for stage, step, op in prog.ops:
            if isinstance(op, Meta):
                assert Meta.decode(op.encode()) == op and op.src == prog.node
                if op.route_id == ROUTE_LOCAL:
                    assert op.op in (Op.KV_DRAIN, Op.KV_INVALIDATE) and op.length == 0
                    continue
                got = deliver(progs, t, op.src, op.route_id)
                if op.op == Op.KV_FETCH and p.handoff_bytes and op.dst not in p.compute_nodes:
                    assert got == {int(p.owner[op.kv_id // L])}        # pd hand-off to the decode owner
                elif op.op == Op.KV_FETCH:
                    seen_fetch.setdefault((step, op.kv_id, op.src), set()).update(got)
                elif op.op == Op.KV_REPLICA:
                    b = op.kv_id // L
                    assert got == set(p.replicas(b)) and op.collective in (Collective.MULTICAST, Collective.UNICAST)
                elif op.op == Op.QUERY and scheme != "passq":
                    assert got == set(range(nodes)) - {DECODE_ROOT}
                elif op.op == Op.PARTIAL_STATE and scheme != "passq":
                    assert op.collective == Collective.REDUCE
                    if op.src == DECODE_ROOT:      # the root's own share goes into its local merge
                        assert progs[DECODE_ROOT].routes[op.route_id]["local"] and got == set()
                    else:
                        assert got == {DECODE_ROOT}
            else:
                assert op.length > 0 and op.dir in (DmaDir.LOAD, DmaDir.STORE)
                DMA_DESCRIPTOR.pack({"addr": op.addr, "length": op.length, "buffer": op.buffer,
                                     "dir": int(op.dir), "tag": op.tag})
    assert seen_fetch == expected_fetch


def test_reduce_tree_fan_in_counts_every_contribution():
    p = plan(PlanRequest(TINY, 128, 8, PROFILE, topology="grid", chunk_size=16))
    progs = lower(p)
    rid = RouteIds(8).reduce(DECODE_ROOT)
    assert sum(pr.routes[rid]["fan_in"] for pr in progs) == 2 * 8 - 1    # N own + (N - 1) children


def test_lowering_is_deterministic():
    req = PlanRequest(TINY, 300, 5, PROFILE, topology="ring", budget_bytes=6000)
    a = [(pr.routes, pr.ops) for pr in lower(plan(req))]
    b = [(pr.routes, pr.ops) for pr in lower(plan(req))]
    assert a == b


@pytest.mark.parametrize("topo", ["switch", "grid"])
def test_pool_slots_never_overlap_live_blocks(topo):
    """A block's pool stores never hit the range of another block the node still holds, and
    every DMA stays inside the node's window."""
    from mcf.sw.mars.metaprog import KV_POOL_BASE
    p = plan(PlanRequest(TINY, 400, 5, PROFILE, topology=topo, budget_bytes=9000, chunk_size=16,
                         alpha=math.inf))
    for prog in lower(p):
        live = {}                                  # block -> [(addr, length)] of its pool copy
        for stage, step, op in prog.ops:
            if isinstance(op, Meta):
                if op.op == Op.KV_INVALIDATE:
                    live.pop(op.kv_id)
                continue
            assert KV_POOL_BASE <= op.addr and op.addr + op.length <= KV_POOL_BASE + prog.window_bytes
            if stage == Stage.PREFILL and op.dir == DmaDir.STORE and op.addr < prog.staging_base:
                for b, ranges in live.items():
                    if b != step:
                        for a, n in ranges:
                            assert op.addr + op.length <= a or a + n <= op.addr, (prog.node, step, b)
                live.setdefault(step, []).append((op.addr, op.length))


@pytest.mark.parametrize("scheme,topo", [("mars", "switch"), ("mars", "ring"), ("ring", "switch"), ("pd", "switch")])
def test_every_store_names_its_source(scheme, topo):
    """``NodeProgram.sources``: each STORE is the node's own KV writer (its KV_REPLICA block) or a
    packet that the named node sends, in the same step, on a route that the hop-by-hop tables
    deliver to this node."""
    p = plan(PlanRequest(TINY, 300, 4, PROFILE, scheme=scheme, topology=topo, chunk_size=16,
                         budget_bytes=6000 if scheme == "mars" else None))
    progs = lower(p)
    sent = {}
    for prog in progs:
        for stage, step, op in prog.ops:
            if isinstance(op, Meta) and op.op in (Op.KV_FETCH, Op.KV_REPLICA):
                sent.setdefault((prog.node, step, op.op, op.kv_id), set()).update(
                    deliver(progs, p.topology, prog.node, op.route_id))
    for prog in progs:
        stores = [i for i, (st, _, op) in enumerate(prog.ops) if not isinstance(op, Meta) and op.dir == DmaDir.STORE]
        assert sorted(prog.sources) == stores
        for i in stores:
            src, op, kv_id = prog.sources[i]
            step = prog.ops[i][1]
            if src == prog.node and op == Op.KV_REPLICA:
                assert kv_id // TINY.num_layers == step          # the block this step computes
            else:
                assert prog.node in sent[(src, step, op, kv_id)], (prog.node, src, step, op, kv_id)
