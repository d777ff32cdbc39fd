"""The model backend (sim/cluster/isa_model.py): its costs are the node's and the profile's
numbers (checked by hand on two instructions and a packet), and it runs the same programs to the
same tokens as the functional simulator, only slower in cycles."""
import math

import numpy as np

from mcf.sim.cluster.isa_model import ETH_OVERHEAD, TimingCosts, fit, model_backend
from mcf.sim.compute.cost import MATRIX_LATENCY
from mcf.spec import isa, kv
from mcf.spec.node import NodeConfig
from mcf.sw.golden import fixed as fx
from mcf.sw.golden.node import ClusterSim, Exec
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
    ex.work["ddr_rd"] = 10_000_000                             # DDR-bound: bytes at the sustained rate,
    rate = min(prof.ddr_Bps / node.clock_hz, node.hp_ports * node.data_bytes)   # at most a bus word per port
    assert rate == node.data_bytes < prof.ddr_Bps / node.clock_hz              # (the tiny node: one 64-bit port)
    assert c.instr(node, ex) == math.ceil(10_000_000 / rate) + prof.dma_setup_cycles
    wide = node.replace(data_width=1024, hp_ports=4)
    assert TimingCosts(wide, prof).instr(wide, ex) == math.ceil(10_000_000 / (prof.ddr_Bps / node.clock_hz)) \
        + prof.dma_setup_cycles
    # calibrated: a x cycles + b for the instruction's busy counter (GEMM), others unchanged
    cal = TimingCosts(node, prof, {"BUSY_GEMM": (1.5, 10.0), "BUSY_VEC": (9.0, 9.0)})
    assert cal.instr(node, ex) == round(1.5 * c.instr(node, ex) + 10.0)
    ser, lat = c.link(1040)
    assert ser == math.ceil((1040 + ETH_OVERHEAD) / (prof.link_bandwidth_bps / 8 / node.clock_hz))
    assert lat == round(prof.link_latency_s * node.clock_hz) // 2


def test_dir_costs_an_entry_a_cycle():
    """DIR: an entry a cycle, written or (check) looked up, + the start the execute unit's RTL takes
    (sim/compute/cost.py DIR_START, checked by tests/hw/compute/exec/test_movers.py)."""
    from mcf.sim.compute.cost import DIR_START
    node = NodeConfig.tiny()
    c = TimingCosts(node, load_profile("kr260"))
    for check in (0, 1):
        d = isa.Dir(block=3, count=5, stride=2, state=isa.ReplicaState.VALID, check=check)
        ex = Exec(isa.Queue.EX, 0, d, work={"count": 5})
        assert c.instr(node, ex) == 5 + DIR_START["check" if check else "write"]
    assert DIR_START["check"] == DIR_START["write"] + 1            # the lookup's read latency


def test_gemm_qk_costs_its_macs_on_the_array_and_its_segment_bytes():
    """GEMM_QK run by the ISA simulator under the timing model: rows x head_dim x keys MACs
    on the P x K array, or the K segment's bytes (scale region + rows) over the weight ports.  The
    same keys as a run of 4 blocks cost the same (a run adds nothing beyond its reads)."""
    node, prof = NodeConfig.tiny(), load_profile("kr260")
    P, K, d, vl = node.mac_rows, node.mac_lanes, node.head_dim, node.vec_lanes
    costs = TimingCosts(node, prof)
    rng = np.random.default_rng(3)
    for tokens, heads, keys in ((2, 2, 64), (1, 4, 256)):
        c = ClusterSim(node, 1, costs=costs, ddr_bytes=1 << 17)
        c.open_window()
        n = c.nodes[0]
        seg = n.ddr.phys_base + 0x4000
        n.ddr.device_write(seg, kv.pack_segment(*fx.quantize_kv((rng.integers(-999, 999, (keys, d)),
                                                                  np.zeros(keys, np.int64)))))
        rows, rb = tokens * heads, d // vl
        g = isa.GemmQk(seg=seg, seg_stride=0, block_keys=keys, tile0=0, tiles=keys // P, tokens=tokens, src=0,
                       src_stride=heads * rb, dst=rows * rb, dst_stride=keys // vl, heads=heads, head_stride=rb)
        c.load_program(0, [g, isa.End()])
        c.start()
        assert c.run(max_cycles=1 << 20).ok
        seg_bytes = kv.segment_bytes(keys, d)
        assert n.perf[isa.PerfCounter.DDR_RD_BYTES] == seg_bytes
        array = rows * d * keys // (P * K) + MATRIX_LATENCY
        ddr = math.ceil(seg_bytes / costs.gemm_per_cycle) + prof.dma_setup_cycles
        assert n.perf[isa.PerfCounter.BUSY_GEMM] == max(array, ddr), (tokens, heads, keys)
        assert n.perf[isa.PerfCounter.MAC_BEATS] == rows * d * keys // (P * K)
        busy = int(n.perf[isa.PerfCounter.BUSY_GEMM])
        q, a, e = kv.unpack_segment(n.ddr.device_read(seg, seg_bytes), keys, d)
        bk = keys // 4
        for b in range(4):
            n.ddr.device_write(seg + 0x4000 + b * 0x1000, kv.pack_segment(q[b * bk:(b + 1) * bk], a[b * bk:(b + 1) * bk],
                                                                          e[b * bk:(b + 1) * bk]))
        c.load_program(0, [g.replace(seg=seg + 0x4000, seg_stride=0x1000 // 64, block_keys=bk), isa.End()])
        c.start()
        assert c.run(max_cycles=1 << 20).ok
        assert n.perf[isa.PerfCounter.BUSY_GEMM] == busy
        assert n.perf[isa.PerfCounter.DDR_RD_BYTES] == keys * (2 + d // 2)


def test_attn_sm_costs_its_groups_of_vl_keys():
    """ATTN_SM run by the ISA simulator under the timing model: MAX R cycles per banks x VL keys (a
    row's SPAD beats of them a cycle), APPLY ceil(keys / VL) groups of max(R, VL, ceil((R + VL + 2)
    / 2)) cycles, + the start
    (sim/compute/cost.py, checked against the execute unit's RTL by
    tests/hw/compute/exec/test_softmax.py); APPLY reads 2 bytes a key."""
    from mcf.hw.compute.attention import max_write_latency, out_words
    from mcf.sim.compute.cost import SOFTMAX_START
    node, prof = NodeConfig.tiny(), load_profile("kr260")
    vl = node.vec_lanes
    banks = max(node.mac_lanes // vl, 1)              # MAX: a row's ``banks`` SPAD beats a cycle
    costs = TimingCosts(node, prof)
    for tokens, heads, keys in ((1, 2, 64), (2, 2, 256)):
        c = ClusterSim(node, 1, costs=costs, ddr_bytes=1 << 17)
        c.open_window()
        n = c.nodes[0]
        rows = dict(tokens=tokens, heads=heads, tok_stride=heads * 2, head_stride=2)
        R = tokens * heads
        sm = dict(scores=64, s_stride=keys // vl, keys=keys, kpos0=0, seg=n.ddr.phys_base + 0x4000, w=1024,
                  w_stride=keys // vl, tokens=tokens, heads=heads)
        c.load_program(0, [isa.AttnQ(what=isa.AttnLoad.QUERY, spad=0, qpos0=keys, **rows),
                           isa.AttnSm(phase=isa.AttnPass.MAX, first=1, **sm),
                           isa.AttnSm(phase=isa.AttnPass.APPLY, first=1, **sm), isa.End()])
        c.start()
        assert c.run(max_cycles=1 << 20).ok
        group = max(R, vl, -(-(R + vl + 2) // 2))
        # QUERY: W = out_words mantissas a cycle into the unit (4 at tiny: two cycles a SPAD beat of 8)
        want = (R * (node.head_dim // out_words(node.head_dim, vl)) + (keys // vl) * group
                + -(-(keys // vl) // banks) * R
                + SOFTMAX_START["MAX"] + max_write_latency(banks * vl) + SOFTMAX_START["APPLY"])
        assert n.perf[isa.PerfCounter.BUSY_ATTN] == want, (tokens, heads, keys)
        assert n.perf[isa.PerfCounter.DDR_RD_BYTES] == 2 * keys


def test_gemm_pv_costs_its_schedule_or_its_v_rows_bytes():
    """GEMM_PV under the timing model, by hand on the 8 x 8 array with VL 4 (2 channel tiles, SPAD
    banks 2): 2 rows x 2 (the first key beat's digits) + 2 tiles x 2 digits x 8 key beats x 4 rows +
    latency + the drain (sat32 at a bank-aligned dst: a cycle an output beat, 4 rows; wide with acc:
    its previous value, 2 reads of 2 banks + 1 = 3 cycles a beat, 2 tiles x 4 rows x 3 - 3 x 4); or the V
    rows over the weight port."""
    from mcf.sim.compute.jobs import pv_weights
    node, prof = NodeConfig.tiny(mac_rows=8, vec_lanes=4), load_profile("kr260")
    costs = TimingCosts(node, prof)
    rng = np.random.default_rng(5)
    c = ClusterSim(node, 1, costs=costs, ddr_bytes=1 << 17)
    c.open_window()
    n = c.nodes[0]
    seg, keys, R = n.ddr.phys_base + 0x4000, 64, 4
    w, (vq, va, ve), _ = pv_weights(rng, R, keys, node.head_dim, scales=True)
    n.ddr.device_write(seg, kv.pack_segment(vq, va, ve))
    n.spad[:R * keys // 4] = w.reshape(-1, 4)
    ddr = math.ceil(keys * node.head_dim // 2 / costs.gemm_per_cycle) + prof.dma_setup_cycles
    g = dict(seg=seg, keys=keys, tile0=0, tiles=2, tokens=2, heads=2, head_stride=keys // 4, src=0,
             src_stride=2 * keys // 4, dst=100, dst_stride=8)
    for acc, wide, drain in ((0, 0, 4), (1, 1, 2 * 4 * 3 - 3 * 4)):
        n.perf[:] = 0
        c.load_program(0, [isa.GemmPv(acc=acc, wide=wide, **g), isa.End()])
        c.start()
        assert c.run(max_cycles=1 << 20).ok
        assert n.perf[isa.PerfCounter.MAC_BEATS] == 2 * 2 * 8 * R
        assert n.perf[isa.PerfCounter.BUSY_GEMM] == max(2 * R + 128 + MATRIX_LATENCY + drain, ddr), (acc, wide)


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


def test_fit_recovers_costs_and_keeps_them_non_negative():
    """The calibration's least squares: exact rows give their (a, b) back; a fit that would make
    b (or a) negative is redone without it; nothing to fit leaves the costs as they are."""
    rng = np.random.default_rng(1)
    x, c = rng.integers(100, 5000, 8), rng.integers(1, 60, 8)
    a, b = fit(list(zip(x, c, 1.4 * x + 17 * c)))
    assert abs(a - 1.4) < 1e-9 and abs(b - 17) < 1e-6
    a, b = fit(list(zip(x, c, 1.2 * x - 30 * c)))            # the best b is negative: b = 0
    assert b == 0 and a > 0
    a, b = fit(list(zip(x, c, -1.0 * x + 500 * c)))          # the best a is negative: a = 0
    assert a == 0 and b > 0
    assert fit([]) == (1.0, 0.0) and fit([(0, 0, 5)]) == (1.0, 0.0)


def test_attn_kv_costs_the_attention_units_lanes():
    """ATTN_KV under the timing model runs at the attention unit's rate on the node's
    ``att_lanes`` (c = head_dim / lanes: MAX c / 2, APPLY c cycles a key; the unit's
    ``cycles_per_key``) when that is slower than its reads: the tiny node's unit (default 4 lanes,
    c = 4) and one folded to 2 lanes (c = 8) over the same 64 keys."""
    from mcf.hw.compute.attention import AttentionUnit, out_words
    prof = load_profile("kr260")
    busy = {}
    for lanes in (0, 2):
        node = NodeConfig.tiny(att_lanes=lanes)
        d, keys = node.head_dim, 64
        c = ClusterSim(node, 1, costs=TimingCosts(node, prof), ddr_bytes=1 << 17)
        c.open_window()
        n = c.nodes[0]
        seg = n.ddr.phys_base + 0x4000
        n.ddr.device_write(seg, kv.pack_segment(*fx.quantize_kv((np.ones((keys, d), np.int64), np.zeros(keys, np.int64)))))
        run = dict(seg=seg, v_off=0, seg_stride=0, blocks=1, keys=keys, kpos0=0, pos_stride=0, block0=0,
                   block_stride=0, gated=0, first=1)
        c.load_program(0, [isa.AttnQ(what=isa.AttnLoad.QUERY, spad=0, qpos0=keys, tokens=1, heads=2, tok_stride=4,
                                     head_stride=2),
                           isa.AttnKV(phase=isa.AttnPass.MAX, **run), isa.AttnKV(phase=isa.AttnPass.APPLY, **run),
                           isa.End()])
        c.start()
        assert c.run(max_cycles=1 << 20).ok
        mx, ap = AttentionUnit(d, node.att_rows, node.max_keys, lanes=lanes or None).cycles_per_key
        busy[lanes] = int(n.perf[isa.PerfCounter.BUSY_ATTN])
        assert busy[lanes] == 2 * (d // out_words(d, node.vec_lanes)) + int(keys * mx) + 2 + keys * ap + 4, lanes
    assert busy[2] - busy[0] == keys * (8 // 2 - 4 // 2) + keys * (8 - 4)


def test_attn_sm_apply_groups_of_two_beats():
    """APPLY on a node whose SPAD has 2 banks and VL 4 with 8 state rows: groups of 2 beats (8 keys) a
    row, by hand at R = 8 over 36 keys (4 groups of 8 + one of 4): max(8, 8, 9) = 9 a group with wide w
    writes (w, w_stride even), 16 (8 rows x 2 one-beat writes) when w is odd; the last group 8 either
    way: 44 / 72 + 34.  MAX with defer: 5 cycles (no read)."""
    from mcf.sim.compute.cost import sm_apply_beats, softmax_pass_cycles
    assert [sm_apply_beats(*a) for a in ((12, 8, 4), (8, 4, 2), (8, 8, 1), (6, 8, 4), (40, 8, 4))] == [2, 2, 1, 1, 4]
    assert softmax_pass_cycles(36, 8, 4, True, 2, 2) == 44 + 34
    assert softmax_pass_cycles(36, 8, 4, True, 2, 2, w_wide=False) == 72 + 34
    assert softmax_pass_cycles(36, 8, 4, False, 2, 2, defer=True) == 5
    node, prof = NodeConfig.tiny(vec_lanes=4), load_profile("kr260")
    assert node.sm_rows == 8 and node.mac_lanes // node.vec_lanes == 2
    costs = TimingCosts(node, prof)
    busy = []
    for w, defer in ((1024, 0), (1025, 0), (1024, 1)):
        c = ClusterSim(node, 1, costs=costs, ddr_bytes=1 << 17)
        c.open_window()
        n = c.nodes[0]
        rows = dict(tokens=4, heads=2, tok_stride=2 * 4, head_stride=4)
        sm = dict(scores=64, s_stride=10, keys=36, kpos0=0, seg=n.ddr.phys_base + 0x4000, w=w, w_stride=10,
                  tokens=4, heads=2)
        c.load_program(0, [isa.AttnQ(what=isa.AttnLoad.QUERY, spad=0, qpos0=36, **rows),
                           isa.AttnSm(phase=isa.AttnPass.APPLY if not defer else isa.AttnPass.MAX, first=1,
                                      defer=defer, **sm), isa.End()])
        c.start()
        assert c.run(max_cycles=1 << 20).ok
        busy.append(n.perf[isa.PerfCounter.BUSY_ATTN])
    assert busy[1] - busy[0] == 72 - 44 and busy[0] - busy[2] == 44 + 34 - 5, busy
