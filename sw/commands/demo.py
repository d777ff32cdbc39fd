"""``mcf demo``: the main job, end to end, printing what was checked at each step.

Steps: Verilog for every registered block, a cocotb simulation of the packet framing
against the spec's encoder, the PS driver programming the register block and DMA against
cocotbext-axi's AxiRam (more steps join as the system grows).  The RTL steps run the blocks'
cocotb benches from ``tests/`` (the demo runs from a repository checkout: ``make demo``).
"""
from __future__ import annotations

import time
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the end-to-end demo and report what was checked",
                       description="Generate Verilog for every block, run RTL simulations against "
                                   "the golden references, and print what was checked.")
    p.add_argument("--out", default="build/demo", help="output folder (default: %(default)s)")
    p.set_defaults(func=run)


def step_verilog(out: Path) -> str:
    from mcf.hw import registry
    folder = out / "verilog"
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for name, info in registry.blocks().items():
        for variant in ({}, *info.variants):
            suffix = "".join(f"_{k}{v}" for k, v in variant.items())
            (folder / f"{name}{suffix}.v").write_text(info.verilog(**variant))
            written += 1
    return f"generated Verilog for {written} block configurations in {folder}/"


def _passed(results: list[dict]) -> str:
    """What the simulator reported: cocotb tests run and failed (run_cocotb raises on a failure)."""
    tests = sum(r["tests"] for r in results)
    failed = sum(r["failed"] for r in results)
    return f"{tests - failed} of {tests} cocotb test(s) passed"


def step_header_sim(out: Path) -> str:
    from mcf.hw.packet.header import HeaderDeserializer, HeaderSerializer
    from mcf.sim.runner import run_cocotb
    results, checked = [], []
    for width in (64, 128):
        results.append(run_cocotb(HeaderSerializer(width), "tests.hw.packet.test_header", out / f"sim_ser{width}",
                                  testcase="run_serialize", params={"data_width": width, "packets": 200}))
        results.append(run_cocotb(HeaderDeserializer(width), "tests.hw.packet.test_header", out / f"sim_des{width}",
                                  testcase="run_deserialize", params={"data_width": width, "packets": 200}))
        checked.append(str(width))
    return (f"header serializer/deserializer (Icarus, random backpressure) at {' and '.join(checked)} bits: "
            f"{_passed(results)} (each: 200 packets against mcf.spec's encoder, truncated and corrupted "
            "headers expected flagged)")


def step_csr_dma(out: Path) -> str:
    from argparse import Namespace

    from mcf.hw.dma import ControlAndDma
    from mcf.sim.benchmarks import dma as dma_bench
    from mcf.sim.runner import run_cocotb
    from mcf.spec.node import NodeConfig
    cfg = NodeConfig(data_width=64, buffer_bytes=512, buffers=2, meta_queue_depth=4, desc_queue_depth=4)
    r = run_cocotb(ControlAndDma(cfg), "tests.hw.dma.test_dma_engine", out / "sim_csr_dma",
                   testcase=["run_bad_input", "run_program"], params={**cfg.as_dict(), "descriptors": 16})
    fig = dma_bench.run(Namespace(data_width=128, buffer_bytes=4096, descriptors=4, store_bytes=8192))
    return ("PS driver (cocotb backend) -> AXI-Lite registers -> DMA vs AxiRam: "
            f"{_passed([r])} (run_program: a 16-descriptor LOAD/STORE program under random backpressure "
            "against the RAM; run_bad_input: each refused descriptor kind counted, no AXI transaction); "
            f"128-bit throughput measured: loader {fig['loader']['utilization']:.1%}, writer "
            f"{fig['writer']['utilization']:.1%} of peak")


def step_golden(out: Path) -> str:
    """The golden model: float vs fixed point on a small random-weight checkpoint."""
    import numpy as np

    from mcf.sw.golden import FixedModel, FloatModel, load_checkpoint, random_weights, write_checkpoint
    from mcf.sw.models import load_model
    cfg = load_model("tiny")
    ckpt = out / "tiny-checkpoint"
    write_checkpoint(ckpt, cfg, random_weights(cfg, 1), "BF16")
    cfg2, w = load_checkpoint(ckpt)
    tokens = np.random.default_rng(0).integers(0, cfg2.vocab_size, 24)
    ref = FloatModel(cfg2, w).forward(tokens)
    fix = FixedModel(cfg2, w, group_size=16).forward(tokens)
    cos = np.sum(ref * fix, -1) / (np.linalg.norm(ref, axis=-1) * np.linalg.norm(fix, axis=-1))
    return (f"bf16 safetensors checkpoint written and read back without torch; fixed-point vs "
            f"float logits over {len(tokens)} positions: cosine {cos.mean():.3f} (min {cos.min():.3f})")


def step_mars(out: Path) -> str:
    """MARS plans 16K tokens on 8 nodes with a tight budget; replicas converge to owner-only."""
    from mcf.sw.mars.planner import PlanRequest, plan
    from mcf.sw.mars.profile import load_profile
    from mcf.sw.models import load_model
    model = load_model("qwen2.5-1.5b")
    owner_only = 16384 * model.kv_token_bytes / 8
    p = plan(PlanRequest(model=model, seq_len=16384, nodes=8, profile=load_profile("kr260"),
                         budget_bytes=int(2 * owner_only)))
    r = [int(x) for x in p.r_step]
    steps = " -> ".join(str(v) for i, v in enumerate(r) if i == 0 or v != r[i - 1])
    return (f"Qwen2.5-1.5B, 16K tokens, N=8, budget 2x owner-only: B*={int(p.chunk_tokens[0])}, "
            f"replica factor {steps}; peak {p.memory.max() / 2**20:.0f} MiB/node, final "
            f"{p.memory[-1].max() / 2**20:.0f} MiB = owner-only {owner_only / 2**20:.0f} MiB")


def step_cluster(out: Path) -> str:
    """The SimPy cluster model: MARS vs Ring at 16K on 16 nodes, against the roofline."""
    from mcf.sim.cluster import run as simulate
    mars = simulate("qwen2.5-1.5b", 16384, 16, "mars", chunk=2048).to_json()
    ring = simulate("qwen2.5-1.5b", 16384, 16, "ring", chunk=2048).to_json()
    return (f"16K prefill, N=16 (simulated KR260s): MARS TTFT {mars['ttft_s']:.1f} s, "
            f"{mars['comm_bytes'] / 2**30:.2f} GiB; Ring {ring['ttft_s']:.1f} s, "
            f"{ring['comm_bytes'] / 2**30:.2f} GiB; compute lower bound "
            f"{mars['bounds_s']['lower_bound_s']:.1f} s (paper: 0.62 s / 1.91 s; see `mcf bench paper`)")


def step_nic(out: Path) -> str:
    """One NIC under random backpressure: forwarding, multicast, reductions, injected errors."""
    from mcf.hw.nic.nic import Nic
    from mcf.sim.runner import run_cocotb
    small = dict(buffer_depth=64, desc_depth=8, route_entries=256, reduce_slots=4, reduce_beats=32,
                 softmax_fan_in=4, state_words=6)
    r = run_cocotb(Nic(64, net_ports=3, **small), "tests.hw.nic.test_nic", out / "sim_nic",
                   testcase="run_traffic", params=dict(data_width=64, net_ports=3, packets=250, reductions=12, **small))
    return (f"NIC (3 ports + local, 64-bit, random pauses on every port): {_passed([r])} (run_traffic: "
            "250 packets forwarded / multicast against the golden NIC, 12 reductions against the golden "
            "model, injected errors expected dropped and counted)")


def step_node_pair(out: Path) -> str:
    """mars -> programs -> driver -> hardware: a plan's KV movement between two RTL nodes."""
    from mcf.hw.node import NodePair
    from mcf.sim.runner import run_cocotb
    from mcf.spec.node import NodeConfig
    cfg = NodeConfig.tiny()
    r = run_cocotb(NodePair(cfg), "tests.hw.test_node", out / "sim_node_pair", testcase="run_mars_kv_moves",
                   params={**cfg.as_dict(), "seq": 16, "chunk": 4, "budget_tokens": 12})
    return ("two RTL nodes (registers + DMA + packetizer + NIC, AxiRam as DDR), a MARS plan of 16 tokens "
            f"in chunks of 4 driven by the PS driver: {_passed([r])} (run_mars_kv_moves: every received "
            "block against the sender's DDR, error counters expected 0)")


def step_compute(out: Path) -> str:
    """Compute-engine units in the Amaranth simulator against the golden fixed-point model."""
    import numpy as np

    from mcf.hw.compute.attention import AttentionUnit
    from mcf.hw.compute.matrix import MatrixUnit
    from mcf.sim.compute.drive import run_attention, run_matrix
    from mcf.sim.compute.jobs import attention_job, linear_job
    rng = np.random.default_rng(7)
    lin = [linear_job(rng, 2, 4, 4, t=3, n=32, out=4, group=8) for _ in range(3)]
    got = run_matrix(MatrixUnit(mac_rows=2, mac_lanes=4, max_tokens=4, max_inputs=32, max_tiles=4), lin)
    if got != [j.expected for j in lin]:
        raise ValueError("matrix unit differs from golden fixed.linear")
    att = [attention_job(rng, d=8, group=2, tokens=2, keys=11, final=f) for f in (False, True)]
    got = run_attention(AttentionUnit(head_dim=8, rows=4, max_keys=16), att)
    if got != [(j.max_words, j.expected) for j in att]:
        raise ValueError("attention unit differs from golden partial_state / finalize")
    return ("INT4 matrix unit (3 random GEMMs, packed DSP products) and attention unit ((m, l, o) "
            "states and final rows, GQA) equal golden fixed.linear / partial_state / finalize word "
            "for word (`mcf bench compute`: MAC utilization, cycles per layer)")


def step_rtl_cluster(out: Path) -> str:
    """The PS runtime on a 4-node RTL cluster (Verilator): a MARS run of the tiny model."""
    import numpy as np

    from mcf.sim.rtlcluster.backend import rtl_backend
    from mcf.sw.golden import FixedModel, random_weights
    from mcf.sw.models import load_model
    from mcf.sw.runtime.runtime import generate
    cfg = load_model("tiny")
    w = random_weights(cfg, 5)
    prompt = [int(t) for t in np.random.default_rng(2).integers(0, cfg.vocab_size, 16)]
    fm = FixedModel(cfg, w, 16)
    rep = generate(cfg, w, prompt, decode=2, nodes=4, scheme="mars", chunk=2, budget=6 * int(cfg.kv_token_bytes),
                   group=16, factory=rtl_backend, fixed=fm, timeout_s=1800)
    cache = fm.new_cache()
    want = [int(np.argmax(fm.forward_x32(prompt, cache, logits="last")[0]))]
    for _ in range(2):
        want.append(int(np.argmax(fm.forward_x32([want[-1]], cache, logits="last")[0])))
    if rep.tokens != want:
        raise ValueError(f"RTL tokens {rep.tokens} differ from the golden model's {want}")
    j = rep.to_json()
    plot = _plot_rtl_memory(rep, out / "rtl_cluster_memory.png")
    return (f"prompt of {len(prompt)} tokens -> tokens {rep.tokens} (= golden FixedModel); TTFT "
            f"{j['ttft_cycles']} cycles = {j['ttft_s'] * 1e3:.3f} ms at {j['clock_hz'] / 1e6:g} MHz (measured, RTL "
            f"counters); decode {j['decode_cycles_per_token']:.0f} cycles/token; link bytes {j['link_bytes_total']}; "
            f"replica factor per step (plan) {j['replica_factor_per_step']}; directory after prefill "
            f"{j['directory_after_prefill']}; KV per node over the steps: {plot}")


def _plot_rtl_memory(rep, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    mem = np.asarray(rep.kv_bytes_plan)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for n in range(mem.shape[1]):
        ax.step(range(1, mem.shape[0] + 1), mem[:, n] / 1024, where="post", label=f"node {n}")
    ax.set_xlabel("prefill step (chunk)")
    ax.set_ylabel("KV held (KiB, plan)")
    ax.set_title(f"{rep.nodes}-node RTL MARS run, tiny model: KV per node")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


STEPS = [
    ("Verilog", step_verilog),
    ("packet framing RTL vs spec", step_header_sim),
    ("driver + registers + DMA vs AxiRam", step_csr_dma),
    ("NIC: routing, multicast, reductions, errors", step_nic),
    ("two nodes: MARS plan -> driver -> RTL", step_node_pair),
    ("compute engine units vs golden fixed point", step_compute),
    ("4-node RTL cluster: MARS run of the tiny model (PS runtime)", step_rtl_cluster),
    ("golden model: checkpoint, float vs fixed point", step_golden),
    ("MARS plan: replication and convergence", step_mars),
    ("cluster model: TTFT and communication", step_cluster),
]


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    total = len(STEPS)
    for i, (title, step) in enumerate(STEPS, 1):
        print(f"[{i}/{total}] {title} ...", flush=True)
        t0 = time.monotonic()
        result = step(out)
        print(f"      ok ({time.monotonic() - t0:.1f} s): {result}", flush=True)
    print(f"demo: all {total} steps passed")
    return 0
