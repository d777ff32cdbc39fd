"""Decode on simulated nodes (SimPy): one token, layer by layer, at a given context length.

Variants (``variant=``):

* ``kv-stationary`` (the paper's decode, section 3.1 / 5): the *root* node holds all the weights
  and runs the dense layers; for each layer it multicasts the query to the KV holders, every
  holder attends over its stationary shard (DDR-bound: it streams its KV once), and the (m, l, o)
  partial states are reduced to the root along the topology's reduction tree.  Tokens/s is capped
  by the root's DDR: all layer weights + the LM head stream once per token.
* ``tensor-parallel``: the weights are sharded over all N nodes (Megatron-style: QKV / up / gate
  by columns, O / down by rows, LM head by vocabulary).  Per layer: all-gather of the query
  slices, KV-stationary attention over each node's shard, all-reduce of the partial states,
  all-reduce of the hidden vector after the row-parallel O and down projections.  Each node
  streams 1/N of the weights.
* ``pass-q`` (the runtime's ``passq`` scheme): the query and the running state walk the logical
  ring of KV holders, one after another.

The KV layout comes from the plan (``plan.memory[-1]``: bytes per node after prefill), so decode
starts from whatever the plan leaves (MARS: owner-only; pd: the decode group).  Collectives on a
switch are all-to-all multicasts (every node's piece goes to every other node); on a ring or grid
the reduction follows ``Topology.reduce_tree``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from mcf.sw.errors import UserError
from . import costs
from .resources import Network, Node

VARIANTS = ("kv-stationary", "tensor-parallel", "pass-q")


@dataclass
class DecodeResult:
    variant: str
    token_s: float
    tokens_per_s: float
    comm_bytes_per_token: float
    root_ddr_bytes_per_token: float
    bound_tokens_per_s: float        # DDR/compute roofline of the busiest node, no network
    #: The root's DDR roofline at the DDR's peak (its bytes per token / ``ddr_bandwidth_Bps``, no
    #: efficiency) over the simulated token time: issue 14's "one board >= 90 % of its DDR roofline".
    ddr_roofline_fraction: float = float("nan")


def simulate_decode(model, profile, topo, kv_tokens_per_node, variant: str = "kv-stationary",
                    root: int = 0, packet_payload: int = costs.DEFAULT_PACKET_PAYLOAD) -> DecodeResult:
    if variant not in VARIANTS:
        raise UserError(f"decode variant {variant!r}: one of {', '.join(VARIANTS)}")
    env = simpy.Environment()
    N = topo.n
    net = Network(env, topo, profile, packet_payload)
    nodes = [Node(env, i, profile) for i in range(N)]
    kv = np.asarray(kv_tokens_per_node, dtype=float)
    holders = [int(n) for n in np.flatnonzero(kv > 0)] or [root]
    L = model.num_layers
    mt_layer = model.kv_token_bytes / L
    lw = costs.layer_weight_bytes(model)
    lflops = 2.0 * model.params_per_layer
    qb, sb, hb = costs.query_bytes(model), costs.state_bytes(model), costs.hidden_bytes(model)
    done = {}

    def attn(n):
        t = kv[n]
        return nodes[n].op(0.0, t * mt_layer, attn_flops=costs.attn_flops(model, 1, t) / L, attn_keys=t)

    def collect(src_list, dst, nbytes, kind):
        """Every src sends nbytes to dst; wait for all."""
        arr = [net.transmit(s, [dst], nbytes, kind) for s in src_list if s != dst]
        last = max([a[dst] for a in arr], default=env.now)
        return env.timeout(max(0.0, last - env.now))

    def reduce_to(root_, members, nbytes, kind):
        """Partial-state reduction towards root_ along the topology's tree (switch: star)."""
        if topo.kind == "switch":
            yield collect(members, root_, nbytes, kind)
            return
        parent, _ = topo.reduce_tree(root_)
        depth = {n: int(topo.dist[n, root_]) for n in range(N)}
        # children first: a node forwards its merged state once its whole subtree has arrived
        t_ready = {n: env.now for n in range(N)}
        for n in sorted(range(N), key=lambda x: -depth[x]):
            if n == root_:
                continue
            par = int(parent[n])
            arr = net.transmit(n, [par], nbytes, kind, earliest=t_ready[n])
            t_ready[par] = max(t_ready[par], arr[par])
        yield env.timeout(max(0.0, t_ready[root_] - env.now))

    def allgather(members, nbytes, kind):
        arr = [net.transmit(s, [d for d in members if d != s], nbytes, kind) for s in members]
        last = max([max(a.values(), default=env.now) for a in arr], default=env.now)
        return env.timeout(max(0.0, last - env.now))

    def kv_stationary():
        r = root
        for _ in range(L):
            yield from nodes[r].op(lflops, lw)
            others = [h for h in holders if h != r]
            if others:
                arr = net.transmit(r, others, qb, "query")
                procs = []
                for h in holders:
                    procs.append(env.process(_after(arr.get(h, env.now), attn(h))))
                yield simpy.AllOf(env, procs)
                yield from reduce_to(r, holders, sb, "state")
            else:
                yield from attn(r)
        yield from nodes[r].op(costs.head_flops(model), costs.head_bytes(model))

    def _after(at, gen):
        if at > env.now:
            yield env.timeout(at - env.now)
        yield from gen

    def tensor_parallel():
        members = list(range(N))
        for _ in range(L):
            # column-parallel QKV (its share of the layer's weights and FLOPs ~ attention part)
            procs = [env.process(nodes[n].op(lflops / N, lw / N)) for n in members]
            yield simpy.AllOf(env, procs)
            yield allgather(members, qb / N, "query")
            procs = [env.process(attn(n)) for n in members]
            yield simpy.AllOf(env, procs)
            yield allgather(members, sb, "state")         # all-reduce of (m, l, o)
            yield allgather(members, hb, "hidden")        # all-reduce after row-parallel O / down
        procs = [env.process(nodes[n].op(costs.head_flops(model) / N, costs.head_bytes(model) / N))
                 for n in members]
        yield simpy.AllOf(env, procs)
        yield collect(members, root, 8, "argmax")         # (value, index) of each vocab slice

    def pass_q():
        r = root
        ring = holders
        for _ in range(L):
            yield from nodes[r].op(lflops, lw)
            cur = r
            for h in ring:
                if h != cur:
                    at = net.transmit(cur, [h], qb + sb, "query")
                    yield env.timeout(max(0.0, at[h] - env.now))
                yield from attn(h)
                cur = h
            if cur != r:
                at = net.transmit(cur, [r], sb, "state")
                yield env.timeout(max(0.0, at[r] - env.now))
        yield from nodes[r].op(costs.head_flops(model), costs.head_bytes(model))

    body = {"kv-stationary": kv_stationary, "tensor-parallel": tensor_parallel, "pass-q": pass_q}[variant]
    proc = env.process(body())
    env.run(until=proc)
    t = env.now
    # roofline of the busiest node (no network): weights + LM head + its KV shard
    share = N if variant == "tensor-parallel" else 1
    w = (costs.weight_bytes(model) + costs.head_bytes(model)) / share
    f = (costs.dense_flops(model, 1) + costs.head_flops(model)) / share
    kvmax = kv.max() * model.kv_token_bytes
    bound = max(f / profile.p_node, (w + (kvmax if variant == "tensor-parallel" or N == 1 else 0))
                / profile.ddr_Bps)
    return DecodeResult(variant, t, 1.0 / t, net.payload_bytes, nodes[root].ddr_bytes, 1.0 / bound,
                        nodes[root].ddr_bytes / profile.ddr_bandwidth_Bps / t)
