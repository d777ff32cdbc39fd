"""The PS runtime: a checkpoint, a prompt and a cluster of nodes in, tokens out.

    report = generate(cfg, weights, prompt, decode=4, nodes=4, scheme="mars", factory=isa_backend)

What it does, on any backend (``mcf.sw.runtime.backend``): quantizes the checkpoint with the
golden model (``FixedModel``), plans the prefill (``mcf.sw.mars.plan``), lowers the plan to the
nodes' programs, DDR map and route tables (``mcf.sw.mars.lower``), then drives every node only
through its ``Driver``: identity check, node id, cluster size and DMA window, route table,
fault mask, watchdog (``watchdog`` cycles without progress stop a node: a lost packet ends
as a WATCHDOG fault within that bound, not on the wall-clock ``timeout_s``), NIC enable; writes weights, tables, token ids and programs into each node's DDR (a
DMA-memory object: ``put`` flushes, ``fetch`` invalidates), starts all nodes, waits for all of
them (bounded, in seconds; a fault or a timeout on any node is one line naming the node, its
fault cause, what its queues wait on and its error counters), reads the logits of the last
token, takes the argmax (greedy), writes the next token id and the next decode step's programs,
and starts again.

It reports the tokens, every step's logits, TTFT and decode cycles (the nodes' CYCLES counters:
start to done), per-node performance counters, link bytes and the KV each node holds over the
run (when the backend measures them), and the plan's replica factor per step.

With the prefix KV tier (``kv_store``: one server per node, ``mcf.sw.runtime.kvprefix``) the
prompt's cached prefix is loaded before the plan, written into the owners' DDR where the prefill
would have written it, the prefill starts at the first missing chunk, and the chunks the run
computed are stored after it (``RunReport.kv``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from mcf.spec import isa
from mcf.spec.isa import PerfCounter, SeqFault
from mcf.spec.node import NodeConfig
from mcf.spec.plan import ReplicaState
from mcf.spec.regmap import NETWORK_FAULTS, WATCHDOG_RESET
from mcf.spec.topology import Topology
from mcf.sw.driver import NodeFault
from mcf.sw.errors import UserError
from mcf.sw.golden.fixed_model import FixedModel, TensorParallel, default_group
from mcf.sw.models.config import shard_config
from mcf.sw.mars.lower import ATTENTION_CHOICES, DECODE_ROOT, lower
from mcf.sw.mars.lower_tp import TENSOR_PARALLEL, lower_tp
from mcf.sw.mars.planner import PlanRequest, plan
from mcf.sw.mars.profile import load_profile
from mcf.sw.models import ModelConfig

from . import pack

#: Decode schemes of ``Session`` (``mcf run --decode-scheme``): KV-stationary decode after a MARS /
#: Ring / Zigzag / ... prefill (whole weights on every node), or weight-sharded tensor-parallel
#: prefill and decode (``mcf.sw.mars.lower_tp``).
DECODE_SCHEMES = ("kv-stationary", TENSOR_PARALLEL)

#: Models up to this hidden size run on the tiny node's engine and buffers (NodeConfig.tiny).
SMALL_HIDDEN = 256


def tp_group(model: ModelConfig, nodes: int) -> int:
    """The default INT4 group size of a tensor-parallel run: ``default_group`` of one shard
    (a node's columns of o_proj and down_proj are whole groups)."""
    if model.num_heads % nodes or model.intermediate_size % nodes:
        return default_group(model)          # refused with its reason by TensorParallel
    return default_group(shard_config(model, nodes))


def node_config(model: ModelConfig, nodes: int, base: NodeConfig | None = None) -> NodeConfig:
    """The node the runtime runs ``model`` on: ``base`` (default: the tiny node's engine and
    buffers for small models, the KR260 node's otherwise) with the model's shapes, and the NIC
    sizes decode needs on ``nodes`` nodes (a softmax merge of every contribution)."""
    shapes = dict(hidden_size=model.hidden_size, intermediate_size=model.intermediate_size,
                  num_heads=model.num_heads, num_kv_heads=model.num_kv_heads, head_dim=model.head_dim)
    if base is None:
        base = NodeConfig.tiny(**shapes) if model.hidden_size <= SMALL_HIDDEN else NodeConfig.for_model(model)
    else:
        base = base.replace(**shapes)
    if nodes > 1:
        fan = int(Topology("switch", nodes).reduce_tree(DECODE_ROOT)[1].max())
        fan = 1 << max(fan - 1, 1).bit_length()      # the NIC merges up to a power of two
        base = base.replace(softmax_fan_in=max(base.softmax_fan_in, fan))
    return base


@dataclass
class StepReport:
    kind: str                    # "prefill" or "decode"
    cycles: int                  # the slowest node's CYCLES (start to done)
    logits: np.ndarray           # X32 logits of the last token
    token: int                   # argmax
    counters: list               # per node {PerfCounter name: value}
    ps_seconds: float            # host time of the step (writes, start, wait, read)


@dataclass
class RunReport:
    backend: str
    model: str
    scheme: str
    nodes: int
    chunk: int
    prompt: list
    tokens: list
    steps: list
    clock_hz: int
    replica_factor_per_step: list
    kv_bytes_course: list | None         # per node [(cycle, bytes)] over the run (None: not measured)
    kv_bytes_plan: list                  # per prefill step and node, the plan's KV bytes
    link_bytes: dict | None
    directory_after_prefill: list        # per node: blocks VALID after prefill
    lowered: object = field(repr=False, default=None)
    kv: dict | None = None               # the prefix KV tier's figures (None: no tier)
    kv_values: dict = field(repr=False, default_factory=dict)   # chunk -> value read after prefill
    attention: str = "unit"              # the attention path the programs run (``choose_attention``)
    attention_reason: str = ""           # why, in one line

    @property
    def ttft_cycles(self) -> int:
        return self.steps[0].cycles

    @property
    def decode_cycles_per_token(self) -> float | None:
        dec = [s.cycles for s in self.steps[1:]]
        return float(np.mean(dec)) if dec else None

    def peak_kv_bytes_per_node(self) -> list:
        if self.kv_bytes_course is not None:
            return [max([b for _, b in c] or [0]) for c in self.kv_bytes_course]
        return [int(x) for x in np.asarray(self.kv_bytes_plan).max(axis=0)]

    def to_json(self) -> dict:
        dec = self.decode_cycles_per_token
        return {
            "backend": self.backend, "model": self.model, "scheme": self.scheme, "nodes": self.nodes,
            "chunk": self.chunk, "prompt": self.prompt, "tokens": self.tokens,
            "ttft_cycles": self.ttft_cycles, "ttft_s": self.ttft_cycles / self.clock_hz,
            "decode_cycles_per_token": dec,
            "decode_s_per_token": None if dec is None else dec / self.clock_hz,
            "clock_hz": self.clock_hz,
            "link_bytes": self.link_bytes,
            "link_bytes_total": None if self.link_bytes is None else int(sum(self.link_bytes.values())),
            "peak_kv_bytes_per_node": self.peak_kv_bytes_per_node(),
            "kv_bytes_course": self.kv_bytes_course,
            "kv_bytes_source": "directory" if self.kv_bytes_course is not None else "plan",
            "kv_bytes_plan_per_step": [[int(x) for x in row] for row in self.kv_bytes_plan],
            "replica_factor_per_step": self.replica_factor_per_step,
            "directory_after_prefill": self.directory_after_prefill,
            "kv_tier": self.kv,
            "attention": self.attention, "attention_reason": self.attention_reason,
            "steps": [{"kind": s.kind, "cycles": s.cycles, "token": s.token, "ps_seconds": s.ps_seconds,
                       "counters": s.counters} for s in self.steps],
        }


class Session:
    """One model on one cluster: plan, lowering, backend, and the coroutine that drives it."""

    def __init__(self, model: ModelConfig, weights: dict, prompt, *, nodes: int, factory, scheme: str = "mars",
                 chunk: int | None = None, budget: int | None = None, topology: str = "switch", decode: int = 0,
                 group: int | None = None, node: NodeConfig | None = None, timeout_s: float = 60.0,
                 watchdog: int = WATCHDOG_RESET, fixed: FixedModel | None = None, kv_store=None,
                 decode_scheme: str = "kv-stationary", attention: str = "auto"):
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise UserError("no prompt tokens")
        if min(prompt) < 0 or max(prompt) >= model.vocab_size:
            raise UserError(f"token ids must be in [0, {model.vocab_size})")
        if decode < 0:
            raise UserError(f"decode={decode}: must be >= 0")
        if not timeout_s > 0:
            raise UserError(f"timeout={timeout_s}: must be > 0 seconds")
        if isinstance(watchdog, bool) or not isinstance(watchdog, int) or not 0 <= watchdog < 1 << 32:
            raise UserError(f"watchdog={watchdog!r}: cycles in 0 .. 2^32-1 (0: never)")
        self.model, self.prompt, self.decode, self.timeout_s = model, prompt, decode, timeout_s
        self.watchdog = watchdog
        cfg = node_config(model, nodes, node)
        if group is None:
            group = tp_group(model, nodes) if decode_scheme == TENSOR_PARALLEL else default_group(model)
        self.fm = fixed if fixed is not None else FixedModel(model, weights, group)
        if self.fm.group_size != group:
            raise UserError(f"the fixed model has group size {self.fm.group_size}, not {group}")
        self.consts = pack.consts_of(self.fm)
        if chunk is None:
            chunk = min(cfg.max_tokens, len(prompt))
        self._tier, self.kv_prefix, loaded = None, 0, {}
        if decode_scheme not in DECODE_SCHEMES:
            raise UserError(f"decode scheme {decode_scheme!r}: one of {', '.join(DECODE_SCHEMES)}")
        self.tp = decode_scheme == TENSOR_PARALLEL
        if attention not in ATTENTION_CHOICES:
            raise UserError(f"attention {attention!r}: one of {', '.join(ATTENTION_CHOICES)}")
        # "auto": the lowering's choice (``choose_attention``), set from the programs below
        self.attention, self.attention_reason = attention, ""
        if self.tp:
            if kv_store is not None:
                raise UserError("--kv-store: the prefix tier keeps whole chunks on their owners (mars scheme); "
                                "tensor-parallel nodes hold KV heads")
            if scheme != "mars":
                raise UserError(f"decode scheme {TENSOR_PARALLEL}: the weights are sharded, so the prefill is "
                                f"tensor-parallel too; --scheme {scheme} needs whole weights on a node")
            self._prepare_tp(model, prompt, cfg, nodes, factory, chunk, topology, decode, group)
            return
        if kv_store is not None:
            from .kvprefix import PrefixTier, parse_store
            if scheme != "mars":
                raise UserError(f"--kv-store: scheme {scheme}: the tier keeps chunk c on node c mod N, the "
                                f"layout of the mars scheme")
            self._tier = PrefixTier(parse_store(kv_store, nodes), model, weights, chunk, group)
            self.kv_prefix, loaded = self._tier.load(prompt)
        try:
            self._prepare(model, prompt, cfg, nodes, factory, scheme, chunk, budget, topology, decode, group, loaded)
        except BaseException:
            if self._tier is not None:
                self._tier.close()
            raise

    def _prepare(self, model, prompt, cfg, nodes, factory, scheme, chunk, budget, topology, decode, group,
                 loaded) -> None:
        # a loaded prefix lives on its owners only: the plan creates no replicas (MARS's converged
        # schedule, alpha = 0) -- a replica of a loaded chunk would have to be moved there first
        self.plan = plan(PlanRequest(model=model, seq_len=len(prompt), nodes=nodes, profile=load_profile("kr260"),
                                     scheme=scheme, chunk_size=chunk, budget_bytes=budget, topology=topology,
                                     alpha=0.0 if self.kv_prefix else None))
        if self._tier is not None:
            from mcf.sw.kvtier.shard import check_mars_layout
            check_mars_layout(self.plan, chunk, nodes)
        # size the route table and the reduction slots from a first lowering, then lower for the
        # backend's DDR
        probe = lower(self.plan, cfg.replace(route_entries=isa.LAYOUTS[isa.Opcode.SEND]["route_id"].max + 1,
                                             reduce_slots=max(cfg.reduce_slots, 64)),
                      group, self.consts, [0] * nodes, decode, attention=self.attention)
        entries = 1 << max(0, probe.route_ids_used - 1).bit_length()
        self.node = cfg.replace(route_entries=max(entries, 2), reduce_slots=max(cfg.reduce_slots, len(probe.rgroups)))
        from mcf.sw.cliutil import check_memory      # before the backend allocates its DDR models
        check_memory(2 * nodes * probe.map.size, f"{nodes} node(s) x {probe.map.size / 2**20:.0f} MiB of DDR image "
                     "(CPU and device views)")
        self.backend = factory(nodes, self.node, probe.map.size, topology)
        self.lw = lower(self.plan, self.node, group, self.consts, [m.phys_base for m in self.backend.memories],
                        decode, prefix=self.kv_prefix, attention=self.attention)
        self.attention, self.attention_reason = self.lw.attention, self.lw.attention_reason
        self.group = group
        # the loaded chunks: per node [(offset in its DDR window, bytes)], written before start
        self.kv_writes = [[] for _ in range(nodes)]
        for c in sorted(loaded):
            o, parts = self.lw.loaded_kv(c, loaded[c])
            self.kv_writes[o] += [(addr - self.lw.bases[o], data) for addr, data in parts]

    def _prepare_tp(self, model, prompt, cfg, nodes, factory, chunk, topology, decode, group) -> None:
        """Tensor-parallel: every node holds 1/N of the weights (``TensorParallel.shard``) and
        runs every chunk and decode token (``mcf.sw.mars.lower_tp``)."""
        try:
            self.tpm = TensorParallel(self.fm, nodes)
        except UserError as exc:
            raise UserError(str(exc)) from None
        self.plan, self.group = None, group
        probe = lower_tp(model, cfg.replace(route_entries=isa.LAYOUTS[isa.Opcode.SEND]["route_id"].max + 1),
                         group, self.consts, [0] * nodes, len(prompt), chunk, decode, topology, self.attention)
        entries = 1 << max(0, probe.route_ids_used - 1).bit_length()
        self.node = cfg.replace(route_entries=max(entries, 2))
        from mcf.sw.cliutil import check_memory
        check_memory(2 * nodes * probe.map.size, f"{nodes} node(s) x {probe.map.size / 2**20:.0f} MiB of DDR image "
                     "(CPU and device views)")
        self.backend = factory(nodes, self.node, probe.map.size, topology)
        self.lw = lower_tp(model, self.node, group, self.consts, [m.phys_base for m in self.backend.memories],
                           len(prompt), chunk, decode, topology, self.attention)
        self.attention, self.attention_reason = self.lw.attention, self.lw.attention_reason
        self.kv_writes = [[] for _ in range(nodes)]

    def weight_images(self) -> list:
        """Per node, (offset, bytes) of its weight regions: the whole model on every node, or
        (tensor-parallel) node n's shard."""
        lw = self.lw
        positions = len(self.prompt) + lw.map.dec_tokens
        if self.tp:
            import copy
            out = []
            for i in range(lw.nodes):
                shard = copy.copy(self.tpm.shard(i))
                shard.head = self.fm.head.rows(*lw.map.head_rows[i])      # its LM head rows
                out.append(pack.weight_image(shard, lw.map, positions))
            return out
        return [pack.weight_image(self.fm, lw.map, positions)] * lw.nodes

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_tier"] = None            # sockets and threads stay in the PS process
        return state

    # --- driving the nodes ---------------------------------------------------------------------------
    async def configure(self) -> None:
        lw, N = self.lw, self.lw.nodes
        images = self.weight_images()
        for i in range(N):
            drv, mem = self.backend.drivers[i], self.backend.memories[i]
            await drv.check_id()
            await drv.configure(node_id=i, num_nodes=N, memory=mem)
            for rid, e in sorted(lw.routes[i].items()):
                await drv.write_route(rid, e)
            await drv.set_fault_mask(NETWORK_FAULTS)
            await drv.set_watchdog(self.watchdog)
            await drv.enable()                   # the NIC takes and sends packets (CONTROL.enable)
            for off, data in images[i]:
                mem.put(off, data)
            for off, data in self.kv_writes[i]:       # the loaded prefix, where the prefill writes it
                mem.put(off, data)

    async def run_step(self, kind: str, programs, logits_node: int) -> StepReport:
        t0 = time.perf_counter()
        lw = self.lw
        for i, prog in enumerate(programs):
            mem = self.backend.memories[i]
            mem.put(lw.map.off("program"), isa.encode_program(prog))
            await self.backend.drivers[i].load_program(lw.program_addr(i), len(prog))
        for drv in self.backend.drivers:
            await drv.start()
        await self.wait_all()
        mem = self.backend.memories[logits_node]
        raw = mem.fetch(lw.map.off("logits"), 4 * self.model.vocab_size)
        logits = np.frombuffer(raw, dtype="<i4").astype(np.int64)
        counters = []
        for drv in self.backend.drivers:
            perf = await drv.read_perf()
            counters.append({c.name: int(v) for c, v in perf.items()})
        cycles = max(c["CYCLES"] for c in counters)
        return StepReport(kind, cycles, logits, int(np.argmax(logits)), counters, time.perf_counter() - t0)

    async def wait_all(self) -> None:
        """Until every node is done; the first fault (a cause other than a stall the fault of
        another node caused) or ``timeout_s`` without progress on any node (the driver's one
        bounded wait, ``Driver.wait_for``) raises one line."""
        drivers = self.backend.drivers

        async def poll():
            states = [await d.seq_status() for d in drivers]
            faulted = [i for i, st in enumerate(states) if st["fault"]]
            if faulted:
                primary = [i for i in faulted if states[i]["fault_cause"] not in (SeqFault.WATCHDOG, SeqFault.ABORTED)]
                i = (primary or faulted)[0]
                others = [j for j in faulted if j != i]
                more = f" (also stopped: nodes {others})" if others else ""
                raise NodeFault(await drivers[i].describe(states[i]) + more, states[i]["fault_cause"], 0)
            done = all(st["done"] and not st["running"] for st in states)
            pcs = None if done else tuple([(await d.read_fields("SEQ_PC"))["pc"] for d in drivers])
            return done, (states, pcs)

        async def describe(value):
            return " | ".join([await drivers[i].describe(st) for i, st in enumerate(value[0]) if not st["done"]])
        await drivers[0].wait_for(f"{len(drivers)} node(s) to finish", poll, timeout_s=self.timeout_s,
                                  progress=lambda v: v[1], describe=describe)

    async def main(self) -> RunReport:
        if self.tp:
            return await self._main_tp()
        lw, N = self.lw, self.lw.nodes
        await self.configure()
        starts = np.concatenate([[0], np.cumsum(self.plan.chunk_tokens)])
        for c in range(lw.prefix, self.plan.num_chunks):
            ids = np.asarray(self.prompt[starts[c]:starts[c + 1]], dtype="<i4").tobytes()
            o = self.plan.compute_node(c)
            self.backend.memories[o].put(lw.ids_addr(o, c) - lw.bases[o], ids)
        steps = [await self.run_step("prefill", lw.prefill, lw.logits_node)]
        directory = []
        for i, drv in enumerate(self.backend.drivers):
            d = await drv.read_directory(self.plan.num_chunks)
            directory.append([b for b, st in d.items() if st == ReplicaState.VALID])
        kv_values = self._computed_chunks() if self.kv_store_wanted else {}
        tokens = [steps[0].token]
        for k in range(self.decode):
            mem = self.backend.memories[DECODE_ROOT]
            mem.put(lw.ids_addr(DECODE_ROOT, None) - lw.bases[DECODE_ROOT], np.array([tokens[-1]], "<i4").tobytes())
            steps.append(await self.run_step("decode", lw.decode_programs(k), DECODE_ROOT))
            tokens.append(steps[-1].token)
        report = self._report(steps, tokens, directory)
        report.kv_values = kv_values
        return report

    async def _main_tp(self) -> RunReport:
        """Tensor-parallel: every node gets every chunk's and decode token's ids and runs the
        same step; node 0 holds the logits."""
        lw, N = self.lw, self.lw.nodes
        await self.configure()
        starts = np.concatenate([[0], np.cumsum(lw.chunk_tokens)])
        for c in range(lw.num_chunks):
            ids = np.asarray(self.prompt[starts[c]:starts[c + 1]], dtype="<i4").tobytes()
            for i in range(N):
                self.backend.memories[i].put(lw.ids_addr(i, c) - lw.bases[i], ids)
        steps = [await self.run_step("prefill", lw.prefill, lw.logits_node)]
        tokens = [steps[0].token]
        for k in range(self.decode):
            for i in range(N):
                self.backend.memories[i].put(lw.ids_addr(i, None) - lw.bases[i],
                                             np.array([tokens[-1]], "<i4").tobytes())
            steps.append(await self.run_step("decode", lw.decode_programs(k), lw.logits_node))
            tokens.append(steps[-1].token)
        sh = lw.shapes
        kv = [int(sum(sh.L * sh.block_bytes(t) for t in lw.chunk_tokens))] * N
        return RunReport(
            backend=self.backend.name, model=self.model.name, scheme=TENSOR_PARALLEL, nodes=N,
            chunk=int(max(lw.chunk_tokens)), prompt=self.prompt, tokens=[int(t) for t in tokens], steps=steps,
            clock_hz=self.backend.clock_hz, replica_factor_per_step=[], kv_bytes_course=None,
            kv_bytes_plan=[kv], link_bytes=self.backend.link_bytes(), directory_after_prefill=[[] for _ in range(N)],
            lowered=lw, attention=self.attention, attention_reason=self.attention_reason)

    def _computed_chunks(self) -> dict:
        """The full chunks this prefill computed, read back from their owners' DDR windows (each a
        chunk value: block layers 0 .. L-1, ``spec/kv.py``)."""
        from .kvprefix import stored_chunks
        lw, out = self.lw, {}
        for c in stored_chunks(len(self.prompt), int(self.plan.chunk_size), lw.prefix):
            o = self.plan.compute_node(c)
            n = lw.shapes.block_bytes(int(self.plan.chunk_tokens[c]))
            mem = self.backend.memories[o]
            out[c] = b"".join(mem.fetch(lw.kv_addr(o, lw.slots[(o, c)], li) - lw.bases[o], n)
                              for li in range(lw.shapes.L))
        return out

    @property
    def kv_store_wanted(self) -> bool:
        """Whether main() reads the computed chunks back for the tier (set by ``run``)."""
        return getattr(self, "_kv_store_wanted", False)

    def _report(self, steps, tokens, directory) -> RunReport:
        lw, pl = self.lw, self.plan
        course = self.backend.kv_course()
        if course is not None:
            tok = [int(x) for x in pl.chunk_tokens]
            per_block = [self.model.num_layers * lw.shapes.block_bytes(t) for t in tok]
            out = []
            for log in course:
                held, series = {}, []
                for cyc, blk, st in log:
                    if st == ReplicaState.INVALID:
                        held.pop(blk, None)
                    elif blk < len(per_block):
                        held[blk] = per_block[blk]
                    series.append((int(cyc), int(sum(held.values()))))
                out.append(series)
            course = out
        return RunReport(
            backend=self.backend.name, model=self.model.name, scheme=str(pl.scheme), nodes=lw.nodes,
            chunk=int(pl.chunk_size), prompt=self.prompt, tokens=[int(t) for t in tokens], steps=steps,
            clock_hz=self.backend.clock_hz, replica_factor_per_step=[int(x) for x in pl.r_step],
            kv_bytes_course=course, kv_bytes_plan=[[int(x) for x in row] for row in pl.memory],
            link_bytes=self.backend.link_bytes(), directory_after_prefill=directory, lowered=lw,
            attention=self.attention, attention_reason=self.attention_reason)

    def run(self) -> RunReport:
        """Run the session on its backend; with the tier, the owners then store what it computed."""
        tier = self._tier
        self._kv_store_wanted = tier is not None
        try:
            try:
                report = self.backend.run_session(self)
            finally:
                self.backend.close()
            if tier is not None:
                tier.save(self.prompt, report.kv_values)
                report.kv = dict(tier.stats)
            return report
        finally:
            if tier is not None:
                tier.close()


def generate(model: ModelConfig, weights: dict, prompt, **kw) -> RunReport:
    """Prefill ``prompt`` and decode ``decode`` tokens greedily on a cluster (``Session``)."""
    return Session(model, weights, prompt, **kw).run()


def step_counter(report: RunReport, counter: PerfCounter) -> list:
    """One counter of every node in every step."""
    return [[c[counter.name] for c in s.counters] for s in report.steps]
