"""NodeConfig (spec/node.py): presets agree with the model files, bad sizes are refused by name,
and the tops, the registry and the cluster profile take their sizes from it."""
import re
from dataclasses import fields

import pytest

from mcf.spec import SpecError
from mcf.spec.node import MODEL_SHAPES, PL_CLOCK_HZ, NodeConfig
from mcf.sw.mars.profile import NODE_FIELDS, load_profile
from mcf.sw.models import load_model


@pytest.mark.parametrize("preset,model", [(NodeConfig.tiny, "tiny"), (NodeConfig.qwen2_5_1_5b, "qwen2.5-1.5b")])
def test_presets_have_the_model_files_shapes(preset, model):
    cfg = load_model(model)
    node = preset()
    assert {k: getattr(node, k) for k in MODEL_SHAPES} == {k: getattr(cfg, k) for k in MODEL_SHAPES}
    assert NodeConfig.for_model(cfg) == NodeConfig().replace(**{k: getattr(cfg, k) for k in MODEL_SHAPES})
    assert node.state_words == cfg.head_dim + 2 and node.group == cfg.num_heads // cfg.num_kv_heads


def test_derived_sizes_and_nic_params():
    node = NodeConfig(data_width=64, head_dim=4, nic_buffer_depth=64)
    assert node.data_bytes == 8 and node.macs_per_cycle == 64 * 32 and node.clock_hz == PL_CLOCK_HZ
    assert node.nic_params() == {"buffer_depth": 64, "desc_depth": 16, "route_entries": 4096,
                                 "reduce_slots": 4, "reduce_beats": 128, "softmax_fan_in": 4, "state_words": 6}


@pytest.mark.parametrize("kw,message", [
    (dict(buffer_bytes=1000), "NodeConfig.buffer_bytes=1000: must be a power of two in [16, 1048576] "
                              "(fits: 16, 32, 64, ..., 1048576)"),
    (dict(mac_lanes=6), "NodeConfig.mac_lanes=6: must be a power of two in [1, 256] (fits: 1, 2, 4, ..., 256)"),
    (dict(net_ports=0), "NodeConfig.net_ports=0: must be an integer in [1, 15] (fits: 1, 2, 3, ..., 15)"),
    (dict(data_width=48), "NodeConfig.data_width=48: must be a power of two in [32, 1024] "
                          "(fits: 32, 64, 128, 256, 512, 1024)"),
    (dict(softmax_fan_in=3), "NodeConfig.softmax_fan_in=3: must be 0 or a power of two in [2, 16] "
                             "(fits: 0, 2, 4, 8, 16)"),
    (dict(num_heads=3, num_kv_heads=2), "NodeConfig: num_heads=3 is not a multiple of num_kv_heads=2"),
    (dict(att_lanes=3), "NodeConfig.att_lanes=3: must be 0 or a power of two in [1, 256] (fits: 0, 1, 2, ..., 256)"),
    (dict(att_lanes=8, head_dim=4), "NodeConfig: att_lanes=8 does not divide head_dim=4"),
    (dict(clock_hz=2e8), "NodeConfig.clock_hz=200000000.0: must be an integer in [1000000, 1000000000]"),
    (dict(hp_ports=True), "NodeConfig.hp_ports=True: must be an integer in [1, 5]"),
    (dict(num_sems=33), "NodeConfig.num_sems=33: must be an integer in [1, 32] (fits: 1, 2, 3, ..., 32)"),
    (dict(rx_slots=64), "NodeConfig.rx_slots=64: must be an integer in [1, 63] (fits: 1, 2, 3, ..., 63)"),
    (dict(seq_queue_depth=3), "NodeConfig.seq_queue_depth=3: must be a power of two in [2, 1024] "
                                "(fits: 2, 4, 8, ..., 1024)"),
])
def test_bad_sizes_are_refused_by_name(kw, message):
    with pytest.raises(SpecError, match=f"^{re.escape(message)}$"):
        NodeConfig(**kw)


def test_every_field_has_a_range_its_presets_fit():
    from mcf.spec.node import RANGES
    assert set(RANGES) == {f.name for f in fields(NodeConfig)}
    for cfg in (NodeConfig(), NodeConfig.tiny()):
        for name, r in RANGES.items():
            assert getattr(cfg, name) in r, name


def test_replace_refuses_unknown_fields():
    with pytest.raises(SpecError, match="^NodeConfig has no field[(]s[)] warp$"):
        NodeConfig().replace(warp=1)


def test_profile_takes_the_node_build_parameters():
    """The cluster profile's clock, MAC array, tile and ports are the node's (not the YAML's)."""
    prof, node = load_profile("kr260"), NodeConfig()
    assert {f: getattr(prof, f) for f in NODE_FIELDS} == {f: getattr(node, n) for f, n in NODE_FIELDS.items()}


def test_tops_and_registry_derive_from_the_config():
    from mcf.hw import registry
    from mcf.hw.dma import ControlAndDma
    from mcf.hw.nic.top import NicNode
    from mcf.hw.node import Node
    cfg = NodeConfig.tiny(net_ports=2)
    node = Node(cfg)
    assert node.nic.net_ports == 2 and node.nic.buffer_depth == cfg.nic_buffer_depth
    assert node.csr.dma_buffers == cfg.buffers and node.packetizer is not None
    assert node.exec.config is cfg and node.seq is not None
    assert ControlAndDma(cfg).csr.desc_queue_depth == cfg.desc_queue_depth
    assert len(NicNode(cfg).tx) == cfg.net_ports and NicNode(cfg).config is cfg
    default = NodeConfig()
    # hp_ports / weight_ports 0: the preset's (the Qwen node: HP0..3 + HPC0, 4 weight loaders)
    assert registry.get("node").params == {"model": "qwen2.5-1.5b", "net_ports": default.net_ports, "hp_ports": 0,
                                           "weight_ports": 0}
    assert (default.hp_ports, default.weight_ports) == (5, 4) == (NodeConfig.qwen2_5_1_5b().hp_ports,
                                                                  NodeConfig.qwen2_5_1_5b().weight_ports)
    assert (NodeConfig.tiny().hp_ports, NodeConfig.tiny().weight_ports) == (1, 1)
    assert registry.get("compute").build().config.mac_rows == NodeConfig.tiny().mac_rows


def test_max_payload_is_what_a_loader_buffer_and_a_nic_input_hold():
    assert NodeConfig().max_payload == 4096
    assert NodeConfig.tiny().max_payload == 512
    assert NodeConfig.tiny(nic_buffer_depth=16).max_payload == 16 * 8
    assert NodeConfig.tiny(buffer_bytes=256).max_payload == 256


@pytest.mark.parametrize("hp,w,expect", [
    # one HP port: everything on m_axi
    (1, 1, {"fetch": 0, "loader": 0, "writer": 0, "exec": 0}),
    (1, 2, {"fetch": 0, "loader": 0, "writer": 0, "exec": 0, "weight0": 0, "weight1": 0}),
    # the execute unit's m_axi (with W = 1 also the weights) away from the node's own clients
    (2, 1, {"fetch": 0, "loader": 0, "writer": 0, "exec": 1}),
    # the RTL cluster's build: one weight loader on each port, the scales / KV port beside loader 1
    (2, 2, {"fetch": 0, "loader": 0, "writer": 0, "exec": 1, "weight0": 0, "weight1": 1}),
    # a port of its own for the execute unit's m_axi when one is left
    (4, 2, {"fetch": 0, "loader": 0, "writer": 0, "exec": 2, "weight0": 0, "weight1": 1}),
    # four ports, four loaders: the scales / KV port beside loader 1
    (4, 4, {"fetch": 0, "loader": 0, "writer": 0, "exec": 1, "weight0": 0, "weight1": 1, "weight2": 2, "weight3": 3}),
    # the KR260 node: weight loader k alone on S_AXI_HP<k>_FPD, the execute unit's m_axi on HPC0
    (5, 4, {"fetch": 0, "loader": 0, "writer": 0, "exec": 4, "weight0": 0, "weight1": 1, "weight2": 2, "weight3": 3}),
])
def test_ddr_masters_put_each_weight_loader_on_its_own_hp_port(hp, w, expect):
    assert NodeConfig.tiny(hp_ports=hp, weight_ports=w).ddr_masters() == expect



def test_weight_clock_gives_the_loaders_ports_of_their_own():
    """The Qwen node's weight loaders on their own 300 MHz clock (HP ports up to 333 MHz): alone on
    HP0..3, every other client on HPC0 at the engine's 250 MHz; the engine takes 2 bus beats per
    loader per cycle (1.2 arrive); tiny and one-loader builds have no weight clock."""
    from mcf.spec.bits import SpecError
    q = NodeConfig()
    assert (q.weight_clock_hz, q.clock_hz, q.weight_ratio) == (300_000_000, 250_000_000, 2)
    assert q.ddr_masters() == {"fetch": 4, "loader": 4, "writer": 4, "exec": 4,
                               "weight0": 0, "weight1": 1, "weight2": 2, "weight3": 3}
    assert [q.port_clock_hz(p) for p in range(5)] == [300_000_000] * 4 + [250_000_000]
    assert (NodeConfig.tiny().weight_clock_hz, NodeConfig.tiny().weight_ratio) == (0, 1)
    assert NodeConfig.tiny(weight_clock_hz=500_000_000 // 2, hp_ports=3, weight_ports=2).weight_ratio == 1
    with pytest.raises(SpecError, match="weight_clock_hz=300000000 needs weight_ports > 1"):
        NodeConfig(weight_ports=4, hp_ports=4)
    with pytest.raises(SpecError, match="weight_clock_hz"):
        NodeConfig(weight_clock_hz=400_000_000)        # above the HP ports' 333 MHz


def test_the_kr260_node_folds_its_attention_unit_narrow():
    """The KR260 node (Qwen2.5-1.5B, attention on the MAC array by default) builds its attention
    unit at att_lanes = 2 and att_rows = 1 (round 24: no program of its emits ATTN_KV) -- 1 row x (2 score
    + 2 P.V) = 4 DSP48E2 instead of 6 x default_lanes(128) = 16's 192 -- and keeps the o load / FINAL emit
    at a SPAD beat (8 words) a cycle; the tiny node keeps its default (0: default_lanes).  The execute
    unit's unit and the cost model read the field.  Its state rows (``sm_rows``) are 2 x the GQA group
    = 12: the array path's jobs of two tokens."""
    from mcf.hw.compute.attention import default_lanes
    from mcf.hw.compute.exec.movers import AttnMover, Geometry
    from mcf.sim.compute.cost import attn_kv_cycles
    kr, tiny = NodeConfig.qwen2_5_1_5b(), NodeConfig.tiny()
    assert (kr.att_lanes, kr.att_rows, kr.group, tiny.att_lanes, default_lanes(kr.head_dim)) == (2, 1, 6, 0, 16)
    assert (kr.sm_rows, tiny.sm_rows, NodeConfig.tiny(att_rows=1).sm_rows) == (12, 8, 8)
    au = AttnMover(Geometry.from_config(kr)).unit
    # state rows for the array path's jobs of 2 tokens x 6 heads (sm_rows), products on att_rows of them
    assert (au.rows, au.prod_rows, au.lanes, au.chunks, au.words, au.o_lanes, au.multipliers) == (
        12, 1, 2, 64, 8, 8, 1 * (2 + 2))
    assert AttnMover(Geometry.from_config(tiny)).unit.lanes == default_lanes(tiny.head_dim)
    # ATTN_KV: 64 cycles a key in APPLY (P.V of 128 elements on 2 lanes), 32 in MAX (a pair in 64)
    assert (attn_kv_cycles(5, 128, kr.att_lanes, True), attn_kv_cycles(5, 128, kr.att_lanes, False)) == \
        (5 * 64 + 4, 5 * 32 + 2)
    assert attn_kv_cycles(5, 128, 0, True) == 5 * 128 // 16 + 4
