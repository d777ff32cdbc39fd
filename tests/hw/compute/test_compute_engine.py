"""The compute engine block (hw/compute/engine.py): its units take their sizes from a
NodeConfig, and the registry's engine is the tiny model's."""
from mcf.hw import registry
from mcf.hw.compute.engine import ComputeEngine
from mcf.spec.node import NodeConfig


def test_units_sized_from_the_config():
    cfg = NodeConfig.tiny(mac_rows=8, mac_lanes=16, vec_lanes=4)
    eng = ComputeEngine(cfg)
    mu, vu, au, kv = (eng.units[k] for k in ("matrix", "vector", "attention", "kv"))
    assert (mu.mac_rows, mu.mac_lanes, mu.max_tokens) == (8, 16, cfg.max_tokens)
    widest = max(cfg.hidden_size, cfg.intermediate_size, cfg.num_heads * cfg.head_dim)
    assert mu.max_inputs == vu.max_n == widest and mu.max_tiles == widest // 8
    assert (vu.lanes, au.head_dim, au.rows, au.max_keys, kv.lanes) == (4, cfg.head_dim, cfg.att_rows,
                                                                      cfg.max_keys, cfg.kv_lanes)
    assert au.words == 4                     # o words a cycle: gcd(VL 4, lanes 4), the execute unit's
    assert set(eng.signature.members) == {"matrix", "vector", "attention", "kv"}


def test_registry_engine_is_the_tiny_models():
    info = registry.get("compute")
    assert info.build().config == NodeConfig.tiny()
    assert info.build(**info.variants[0]).units["matrix"].macs_per_cycle == 256
