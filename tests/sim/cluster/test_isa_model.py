"""The model backend (sim/cluster/isa_model.py): its costs are the node's and the profile's
numbers (checked by hand on two instructions and a packet), and it runs the same programs to the
same tokens as the functional simulator, only slower in cycles."""
import math

import numpy as np

from mcf.sim.cluster.isa_model import ETH_OVERHEAD, TimingCosts, model_backend
from mcf.spec import isa
from mcf.spec.node import NodeConfig
from mcf.sw.golden.node import Exec
from mcf.sw.golden.weights import random_weights
from mcf.sw.mars.profile import load_profile
from mcf.sw.models import load_model
from mcf.sw.runtime.backend import isa_backend
from mcf.sw.runtime.runtime import generate


def test_costs_come_from_the_node_and_the_profile():
    node, prof = NodeConfig.tiny(), load_profile("kr260")
    c = TimingCosts(node, prof)
    g = isa.Gemm(blob=0, n=64, total_tiles=16, tile0=0, tiles=16, tokens=8, group_log2=4, w_exp=0, bias=0, src=0,
                 src_stride=8, dst=0, dst_stride=8)
    ex = Exec(isa.Queue.EX, 0, g, work={"tokens": 8, "n": 64, "out": 64, "ddr_rd": 2048})
    assert c.instr(node, ex) == 16 * 8 * 8 + 7                 # 16 tiles x 8 beats x 8 tokens + latency
    ex.work["ddr_rd"] = 10_000_000                             # DDR-bound: bytes at the sustained rate
    assert c.instr(node, ex) == math.ceil(10_000_000 / (prof.ddr_Bps / node.clock_hz)) + prof.dma_setup_cycles
    ser, lat = c.link(1040)
    assert ser == math.ceil((1040 + ETH_OVERHEAD) / (prof.link_bandwidth_bps / 8 / node.clock_hz))
    assert lat == round(prof.link_latency_s * node.clock_hz) // 2


def test_same_tokens_as_the_functional_simulator_more_cycles():
    cfg = load_model("tiny")
    w = random_weights(cfg, 8)
    prompt = list(np.random.default_rng(4).integers(0, cfg.vocab_size, 8))
    kw = dict(decode=1, nodes=2, scheme="mars", chunk=2, group=16)
    fun = generate(cfg, w, prompt, factory=isa_backend, **kw)
    mod = generate(cfg, w, prompt, factory=model_backend, **kw)
    assert mod.tokens == fun.tokens and all(np.array_equal(a.logits, b.logits) for a, b in zip(mod.steps, fun.steps))
    assert mod.link_bytes == fun.link_bytes                      # the same packets
    assert mod.ttft_cycles > 10 * fun.ttft_cycles and mod.decode_cycles_per_token > fun.decode_cycles_per_token
    busy = mod.steps[0].counters[0]
    assert 0 < busy["BUSY_GEMM"] <= busy["CYCLES"] <= mod.ttft_cycles and busy["MAC_BEATS"] > 0
