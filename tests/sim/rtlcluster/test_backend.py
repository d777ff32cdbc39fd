"""The runtime's ``rtl`` backend (sim/rtlcluster/backend.py): the PS runtime drives N RTL Node
tops (sequencer + execute unit + NIC) through the switch model under Verilator, through the same
Driver and DDR windows it uses on the ISA simulator.

The strongest evidence: 2-node and 4-node MARS runs of the tiny model give the golden
fixed-point model's logits and greedy tokens bit for bit, every node's directory and DDR after
prefill hold exactly its owned blocks' KV equal to the golden cache (``check``, the ISA backend's
test), each node streaming its GEMM weights over two HP ports (two weight loaders; one run with
random pauses on every AXI channel of both ports); so do 3-node MARS, Ring and Zigzag runs (lean:
8 tokens, prefill), a `transformers` checkpoint of another shape (GQA 3, untied) on the same build,
and 2-node weight-sharded (tensor-parallel) prefill + decode against the TP golden model.  The
model backend, calibrated
on another run, gives the 2-node run's TTFT and link bytes within 15 %.  `mcf run --backend rtl`
prints `mcf golden generate --fixed`'s tokens.  Faults: an
instruction outside the DMA window, an illegal instruction, a corrupted packet: the node stops
with the cause, the runtime says so in one line.  A Node top that cannot run programs, and
options the RTL cluster cannot honour, are refused in one line (never simulated into fake
results).  One Verilator build (4 node slots) serves every run of the module and the one-node run
and the two-node program benches of tests/hw/test_node.py.
"""
from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from mcf.hw.node import Node
from mcf.sim.rtlcluster import backend as rtl
from mcf.spec.isa import AttnLoad, Opcode, SeqFault
from mcf.spec.node import NodeConfig
from mcf.sw import cli
from mcf.sw.driver import NodeFault
from mcf.sw.errors import UserError
from mcf.sw.golden.weights import random_weights
from mcf.sw.models import load_model
from mcf.sw.runtime.backend import isa_backend
from mcf.sw.runtime.runtime import Session
from tests.sw.runtime.test_runtime import check
from tests.sw.runtime.test_tensor_parallel import check_tp


def test_a_node_that_cannot_run_programs_is_refused():
    """A Node top without sequencer or execute unit cannot run the runtime's programs."""
    class Bare:                              # what the Node top was before issue 13
        pass
    with pytest.raises(UserError, match="no sequencer and no execute unit, so it cannot run"):
        rtl.check_node(Bare())
    rtl.check_node(Node(NodeConfig.tiny()))     # today's Node can


def _one_line(capsys, argv) -> str:
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mcf: error: --backend rtl") and len(err.splitlines()) == 1, err
    return err


def test_cli_refusals_are_one_line(checkpoint, capsys):
    base = ["run", "--backend", "rtl", "--checkpoint", str(checkpoint), "--tokens", "1,2,3"]
    assert "switch" in _one_line(capsys, base + ["--nodes", "2", "--topology", "ring"])


# --- end to end: the runtime on the RTL cluster -------------------------------------------------------

TINY = load_model("tiny")
TINY_W = random_weights(TINY, 5)
PROMPT = [int(t) for t in np.random.default_rng(2).integers(0, TINY.vocab_size, 16)]
#: Bound of a test that may pay the cluster's Verilator build (one per session, ~6 min on an idle
#: 2-core machine, ~12 min on a loaded one) besides its simulation.
BUILD_S = 2400
#: Wall-clock bound of one step (a 2-node prefill simulates in ~30-60 s on a loaded 2-core box).
STEP_S = 900.0


@pytest.fixture
def rtl_factory(verilator_cache):
    """The rtl backend on the session's Verilator cache (one 4-slot build serves every run)."""
    return functools.partial(rtl.rtl_backend, cache_dir=verilator_cache, progress=lambda msg: None)


def _clean(backend):
    sw = backend.switch
    assert sw["dropped"] == sw["corrupted"] == sw["unrouted"] == 0, sw
    assert sum(sw["packets_out"]) >= sum(sw["packets_in"]), sw      # multicast: one in, several out


def _weights_on_both_ports(rep, s):
    """Each node's GEMM weights streamed over both HP ports (the build's two weight loaders,
    weight loader k on HP port k: ``NodeConfig.ddr_masters``): the prefill program's GEMM weight
    bytes W (``BlobLayout``: tiles x n x P / 2) split about evenly, loader 0's half on HP0 beside
    only the fetch unit (32 B per instruction) and the TX engine's DMA loader (the bytes it sent),
    loader 1's on HP1 beside the execute unit's other reads."""
    hw = s.backend.hw_config
    assert (hw.weight_ports, hw.hp_ports) == (2, 2) and hw.ddr_masters()["weight1"] == 1
    for n, program in enumerate(s.lw.prefill):
        w = sum(i.tiles * i.n * hw.mac_rows // 2 for i in program if i.OPCODE == Opcode.GEMM)
        c = rep.steps[0].counters[n]
        assert c["HP0_RD_BYTES"] + c["HP1_RD_BYTES"] == c["DDR_RD_BYTES"], c
        on_hp0 = c["HP0_RD_BYTES"] - 32 * len(program) - c["NET_TX_BYTES"]    # weight loader 0's at least
        assert 0.4 * w <= on_hp0 <= 0.6 * w and c["HP1_RD_BYTES"] >= 0.4 * w, (n, w, c)


@pytest.mark.cocotb
@pytest.mark.timeout(BUILD_S)
@pytest.mark.parametrize("nodes,scheme,prompt,chunk,budget_tokens,decode,pauses", [
    (2, "mars", 16, 4, 8, 2, 0.0),
    (4, "mars", 16, 2, 6, 1, 0.0),
    # lean runs of the other node count and the baselines (prefill only: decode is the same
    # KV-stationary machine whatever the prefill scheme, run above)
    (3, "mars", 8, 2, 4, 0, 0.0),         # replica factor 3, 3, 2, 1, 1: replicas made and drained
    (2, "ring", 8, 2, None, 0, 0.25),     # two chunks per node, forwarded around the ring; random
                                          # pauses on every AXI channel of both HP ports' DDR
    (3, "zigzag", 8, 2, None, 0, 0.0),    # owners 0, 1, 2, 1
])
def test_rtl_cluster_runs_the_tiny_model_bit_exact(rtl_factory, nodes, scheme, prompt, chunk, budget_tokens, decode,
                                                   pauses):
    """The PS runtime on N RTL Node tops (sequencer + execute unit + NIC) through the switch:
    every step's logits and the greedy tokens equal the golden FixedModel bit for bit; after
    prefill each node's directory holds exactly its owned blocks and its DDR their KV, equal to
    the golden cache (``check``, the ISA backend's test).  MARS on 2, 3 and 4 nodes, Ring and
    Zigzag: the same RTL, other programs.  Every node streams its weights over two HP ports
    (``_weights_on_both_ports``); one run with random backpressure on them."""
    budget = None if budget_tokens is None else budget_tokens * int(TINY.kv_token_bytes)
    factory = functools.partial(rtl_factory, pause_probability=pauses) if pauses else rtl_factory
    rep, s = check(TINY, TINY_W, PROMPT[:prompt], nodes=nodes, scheme=scheme, chunk=chunk, budget=budget,
                   decode=decode, group=16, factory=factory, timeout_s=STEP_S)
    _clean(s.backend)
    _weights_on_both_ports(rep, s)
    assert len(rep.link_bytes) == 2 * nodes and all(v > 0 for v in rep.link_bytes.values()), rep.link_bytes
    isa = Session(TINY, TINY_W, PROMPT[:prompt], nodes=nodes, scheme=scheme, chunk=chunk, budget=budget, decode=decode,
                  group=16, factory=isa_backend).run()
    assert rep.link_bytes == isa.link_bytes, "the switch's link counters differ from the bytes the ISA simulator sent"
    if scheme == "mars" and nodes > 2:
        assert max(rep.replica_factor_per_step) > 1 and rep.replica_factor_per_step[-1] == 1
    assert rep.ttft_cycles > 0 and all(st.counters[0]["RETIRED_EX"] > 0 for st in rep.steps)
    if not pauses:
        _model_within(rep, 0.15, nodes=nodes, scheme=scheme, prompt=PROMPT[:prompt], chunk=chunk, budget=budget,
                      decode=decode)


def _model_within(rep, bound, *, prompt, **kw):
    """The model backend (``mcf run --backend model``: the profile's ISA costs, calibrated by
    ``mcf bench isa-costs --write`` on other runs, and the RTL switch's link figures) on the same
    session: the same link bytes, TTFT and decode cycles per token within ``bound`` of the RTL's."""
    from mcf.sim.cluster import isa_model
    prof = rtl.model_profile()
    mod = Session(TINY, TINY_W, prompt, group=16, **kw,
                  factory=lambda *a: isa_model.model_backend(*a, profile=prof)).run()
    assert mod.link_bytes == rep.link_bytes
    gaps = [mod.ttft_cycles / rep.ttft_cycles - 1]
    if rep.decode_cycles_per_token:
        gaps.append(mod.decode_cycles_per_token / rep.decode_cycles_per_token - 1)
    print(f"RTL TTFT {rep.ttft_cycles}, decode {rep.decode_cycles_per_token} cycles/token; model gaps "
          + ", ".join(f"{g:+.3f}" for g in gaps))
    assert all(abs(g) <= bound for g in gaps), gaps


@pytest.mark.cocotb
@pytest.mark.timeout(BUILD_S)
def test_mcf_run_rtl_equals_golden_generate(checkpoint, capsys, monkeypatch, verilator_cache):
    """`mcf run --backend rtl --nodes 2` prints the tokens `mcf golden generate --fixed` prints."""
    monkeypatch.setenv("MCF_SIM_CACHE", str(verilator_cache))
    prompt = "5,9,200,3,17,33,1,8,90,2"
    capsys.readouterr()
    assert cli.main(["golden", "generate", "--checkpoint", str(checkpoint), "--tokens", prompt, "--decode", "1",
                     "--fixed", "--json"]) == 0
    golden = json.loads(capsys.readouterr().out)
    assert cli.main(["run", "--backend", "rtl", "--nodes", "2", "--checkpoint", str(checkpoint), "--tokens", prompt,
                     "--decode", "1", "--timeout", "900", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "rtl" and out["tokens"] == golden["tokens"] and len(out["tokens"]) == 2
    assert out["ttft_cycles"] > 0 and out["decode_cycles_per_token"] > 0 and out["link_bytes_total"] > 0


@pytest.mark.cocotb
@pytest.mark.timeout(BUILD_S)
def test_rtl_cluster_runs_tensor_parallel_bit_exact(rtl_factory):
    """Weight-sharded (tensor-parallel) prefill and decode on 2 RTL nodes, each holding half of
    the weights (its heads, KV heads and MLP slice): the o_proj and down_proj partials are added
    by the NICs' SUM reduction (4 pieces per all-reduce in prefill, 2 reductions open at once).
    Every step's logits and the tokens equal the TP golden model bit for bit, each node's DDR
    holds its KV heads' cache (``check_tp``, the ISA backend's test), and the switch counted the
    bytes the ISA simulator sent.  The cluster model on the same programs gives TTFT and decode
    cycles within 20 % (measured: -12 %, -4 %)."""
    rep, s = check_tp(TINY, TINY_W, PROMPT[:8], nodes=2, chunk=4, decode=2, group=16, factory=rtl_factory,
                      timeout_s=STEP_S)
    _clean(s.backend)
    isa = Session(TINY, TINY_W, PROMPT[:8], nodes=2, chunk=4, decode=2, group=16, factory=isa_backend,
                  decode_scheme="tensor-parallel").run()
    assert rep.link_bytes == isa.link_bytes and all(v > 0 for v in rep.link_bytes.values()), rep.link_bytes
    assert rep.ttft_cycles > 0 and rep.decode_cycles_per_token > 0
    # the program-level model (`mcf bench tp-decode`'s) on the same programs, with the switch's link figures
    _model_within(rep, 0.2, prompt=PROMPT[:8], nodes=2, chunk=4, decode=2, decode_scheme="tensor-parallel")


@pytest.mark.cocotb          # ~1 min on the cached build: the one RTL run of the context-split path
@pytest.mark.timeout(BUILD_S)
def test_rtl_cluster_splits_the_tensor_parallel_decode_attention(rtl_factory):
    """Tensor-parallel on 4 RTL nodes (the tiny model's 2 KV heads: two nodes hold each): decode
    splits each KV head's keys over its two nodes (query rows gathered by unicast, the NICs'
    MAX reduction, the two (M, l, o) states exchanged and added, docs/fixed-point.md 7.4), and
    every step's logits and the tokens equal the TP golden model's bit for bit (``check_tp``)."""
    rep, s = check_tp(TINY, TINY_W, PROMPT[:4], nodes=4, chunk=4, decode=2, group=16, factory=rtl_factory,
                      timeout_s=STEP_S)
    _clean(s.backend)
    assert s.lw.map.replicas == 2 and rep.decode_cycles_per_token > 0


# --- faults: counted, the node stops with an error status, the runtime says so in one line --------------

def _session(factory, **kw):
    return Session(TINY, TINY_W, PROMPT[:8], nodes=2, scheme="mars", chunk=4, decode=0, group=16, factory=factory,
                   timeout_s=STEP_S, **kw)


def _first(prog, opcode):
    return next(i for i, ins in enumerate(prog) if ins.OPCODE == opcode)


@pytest.mark.cocotb
@pytest.mark.timeout(BUILD_S)
def test_faults_stop_the_node_and_are_one_line(rtl_factory):
    # an instruction whose DDR range leaves the DMA window: the interconnect's firewall
    s = _session(rtl_factory)
    prog = s.lw.prefill[1]
    i = _first(prog, Opcode.EMBED)
    prog[i] = prog[i].replace(ids=0x100)          # below the window (it starts at rtl.PHYS_BASE)
    with pytest.raises(NodeFault) as e:
        s.run()
    assert e.value.cause == SeqFault.OUT_OF_WINDOW and "node 1: fault OUT_OF_WINDOW" in str(e.value)
    assert "\n" not in str(e.value)
    # an illegal instruction: a field out of range for this build (EMBED of more than max_tokens)
    s = _session(rtl_factory)
    prog = s.lw.prefill[0]
    i = _first(prog, Opcode.EMBED)
    prog[i] = prog[i].replace(count=s.node.max_tokens + 1)
    with pytest.raises(NodeFault) as e:
        s.run()
    assert e.value.cause == SeqFault.ILLEGAL_INSTRUCTION and "node 0: fault ILLEGAL_INSTRUCTION" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.cocotb
@pytest.mark.timeout(BUILD_S)
def test_a_corrupted_packet_is_counted_and_stops_the_receiver(verilator_cache):
    """The switch flips a header bit of node 0's first packet: the receiver's NIC drops and
    counts it (header check), the network fault stops the node, one line names it."""
    factory = functools.partial(rtl.rtl_backend, cache_dir=verilator_cache, progress=lambda msg: None,
                                corrupt_at={0: 1})
    s = _session(factory)
    with pytest.raises(NodeFault) as e:
        s.run()
    assert e.value.cause == SeqFault.NETWORK and "fault NETWORK" in str(e.value) and "\n" not in str(e.value)
    assert s.backend.switch["corrupted"] == 1


#: The watchdog of the dropped-packet run: above every quiet stretch of a clean run of its prompt (the
#: whole clean 2-node prefill of these 8 tokens takes 40 291 cycles, `mcf run --backend rtl --nodes 2
#: --tokens 5,9,200,3,17,33,1,8 --chunk 4`, so no wait in it is longer), far below the register's reset
#: value (2^24 cycles: hours of simulation).
DROP_WATCHDOG = 60_000


# --- other checkpoint shapes: written by transformers itself ---------------------------------------------

#: A Qwen2 checkpoint of another shape that still runs on the tiny model's build (head_dim 16, rows
#: no wider than 128): hidden 96, GQA 3 (6 query heads on 2 KV heads), an untied LM head, another
#: vocabulary.  Shapes with another head_dim or wider rows are built for (a build of their own,
#: minutes: `mcf run --backend rtl` does it; docs/node.md "Supported Qwen2 shapes").
GQA3_UNTIED = dict(hidden_size=96, intermediate_size=128, num_hidden_layers=2, num_attention_heads=6,
                   num_key_value_heads=2, head_dim=16, vocab_size=300, tie_word_embeddings=False)
#: One the node cannot run: a GQA group of 8 query heads per KV head (the attention unit has 4 rows).
GQA8 = dict(hidden_size=128, intermediate_size=128, num_hidden_layers=1, num_attention_heads=8,
            num_key_value_heads=1, head_dim=16, vocab_size=128, tie_word_embeddings=True)


def _transformers_checkpoint(path, shape):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**shape)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "bias" in name or "norm" in name:          # non-trivial biases and gains
                p.add_(0.2 * torch.randn_like(p))
    model.save_pretrained(path)
    return path


@pytest.mark.cocotb
@pytest.mark.timeout(BUILD_S)
def test_a_dropped_packet_ends_on_the_watchdog(checkpoint, capsys, monkeypatch, verilator_cache):
    """The switch drops node 0's first packet: a node waits for it, nothing moves, its watchdog
    (`mcf run --watchdog`, set by the runtime) stops it WATCHDOG within the bound; the drop is
    counted by the switch and `mcf run --backend rtl` says so in one line, exit 2."""
    made = []

    def factory(*a, **kw):                  # the CLI's rtl backend, with the switch told to drop
        made.append(rtl.RtlBackend(*a[:3], cache_dir=verilator_cache, progress=lambda msg: None,
                                   drop_at={0: 1}))
        return made[-1]
    monkeypatch.setattr(rtl, "rtl_backend", factory)
    capsys.readouterr()
    assert cli.main(["run", "--backend", "rtl", "--nodes", "2", "--checkpoint", str(checkpoint),
                     "--tokens", "5,9,200,3,17,33,1,8", "--chunk", "4", "--watchdog", str(DROP_WATCHDOG),
                     "--timeout", "900"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mcf: error: ") and len(err.splitlines()) == 1, err
    assert "fault WATCHDOG" in err, err
    (b,) = made
    assert b.switch["dropped"] == 1 and b.switch["corrupted"] == b.switch["unrouted"] == 0, b.switch
    assert DROP_WATCHDOG < b.cycles < 100_000 + DROP_WATCHDOG, b.cycles
    print(f"dropped packet: stopped at cycle {b.cycles}: {err}")


@pytest.mark.cocotb
@pytest.mark.timeout(BUILD_S)
def test_a_transformers_checkpoint_of_another_shape_runs_on_the_tiny_build(tmp_path, rtl_factory, capsys):
    """GQA 3, hidden 96, untied embeddings, written by `transformers`: on the RTL cluster (the tiny
    model's build, shared: the execute unit depends on the shapes only through head_dim and the
    widest row) the logits, tokens, directories and owned KV equal the golden FixedModel bit for
    bit.  A shape the node cannot run is refused before any build, in one line naming the limit."""
    from mcf.sw.golden.checkpoint import load_checkpoint
    from mcf.sw.runtime.runtime import node_config
    cfg, weights = load_checkpoint(_transformers_checkpoint(tmp_path / "gqa3", GQA3_UNTIED))
    assert rtl.build_config(node_config(cfg, 2)) == rtl.tiny_cluster_config()
    prompt = [int(t) for t in np.random.default_rng(3).integers(0, cfg.vocab_size, 8)]
    check(cfg, weights, prompt, nodes=2, scheme="mars", chunk=4, decode=0, factory=rtl_factory, timeout_s=STEP_S)
    bad = _transformers_checkpoint(tmp_path / "gqa8", GQA8)
    capsys.readouterr()
    assert cli.main(["run", "--backend", "rtl", "--nodes", "2", "--checkpoint", str(bad), "--tokens", "1,2,3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("mcf: error:") and "GQA group 8" in err \
        and "att_rows=4" in err, err


@pytest.mark.slow
@pytest.mark.cocotb
@pytest.mark.timeout(BUILD_S)
def test_rtl_cluster_runs_array_attention_bit_exact(rtl_factory):
    """attention = "array" (GEMM_QK -> ATTN_SM -> GEMM_PV -> ATTN_Q O, docs/attention-array.md
    step 4) on one RTL node: prefill of two chunks of 8 tokens (the second over a run of two
    blocks: one GEMM_QK and one GEMM_PV with block_keys = 8, ATTN_Q O reading its rows at their
    stride) and one decode step (its key the first of a decode block of 8, spec.kv's decode layout,
    read by GEMM_QK / GEMM_PV as a piece of its own: no ATTN_KV) give the golden logits bit for bit.
    Slow: the tiny node's
    4 x 8 array builds no GEMM_PV, so this is a Verilator build of its own (mac_rows = 8)."""
    from tests.sw.runtime.test_attention_array import ARRAY_NODE, FM
    s = Session(TINY, TINY_W, PROMPT[:16], nodes=1, chunk=8, decode=1, group=16, factory=rtl_factory, fixed=FM,
                node=ARRAY_NODE, attention="array", timeout_s=STEP_S)
    rep = s.run()
    cache = FM.new_cache()
    want = [FM.forward_x32(PROMPT[:16], cache, logits="last")[0]]
    want.append(FM.forward_x32([int(np.argmax(want[0]))], cache, logits="last")[0])
    for k, (st, ref) in enumerate(zip(rep.steps, want)):
        assert np.array_equal(st.logits, ref), f"step {k}: logits differ"
    prog = s.lw.prefill[0]
    # the second chunk's attention runs over both blocks in one instruction each, and O reads its rows
    assert any(i.OPCODE == Opcode.GEMM_QK and i.block_keys == 8 and i.tiles * ARRAY_NODE.mac_rows > 8 for i in prog)
    assert any(i.OPCODE == Opcode.GEMM_PV and i.block_keys == 8 and i.keys > 8 for i in prog)
    assert any(i.OPCODE == Opcode.ATTN_Q and i.what == AttnLoad.O and i.head_stride for i in prog)
    dec = s.lw.decode_programs(0)[0]
    assert not any(i.OPCODE == Opcode.ATTN_KV for i in dec)
    lo, size = s.lw.map.regions["decode_kv"]
    assert any(i.OPCODE == Opcode.GEMM_QK and i.block_keys == 8 and 0 <= i.seg - s.lw.bases[0] - lo < size
               for i in dec)
