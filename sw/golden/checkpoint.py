"""Loading a Hugging Face Qwen2 checkpoint directory without torch.

``config.json`` plus ``model.safetensors`` or shards listed by ``model.safetensors.index.json``
(any ``*.safetensors`` in the directory when there is neither).  Tensors are widened to
float32 (bf16, fp16, fp32 and fp64 supported).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mcf.sw.errors import UserError
from mcf.sw.models import ModelConfig, load_model

from . import safetensors
from .weights import check_weights, expected_shapes


def _shard_map(d: Path) -> dict[str, Path]:
    index = d / "model.safetensors.index.json"
    if index.is_file():
        wm = json.loads(index.read_text()).get("weight_map")
        if not isinstance(wm, dict):
            raise UserError(f"{index}: no weight_map")
        return {name: d / fname for name, fname in wm.items()}
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise UserError(f"{d}: no *.safetensors files")
    out = {}
    for f in files:
        for name in safetensors.read_header(f)[0]:
            out[name] = f
    return out


def load_checkpoint(path: str | Path) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    """(config, float32 weights under HF names) of a Qwen2 checkpoint directory."""
    d = Path(path)
    if not d.is_dir():
        raise UserError(f"checkpoint {d} is not a directory")
    cfg = load_model(d)                 # reads config.json, rejects other architectures
    where = _shard_map(d)
    names = list(expected_shapes(cfg))
    for name in names:
        if name not in where:
            raise UserError(f"checkpoint {d}: missing tensor {name}")
    by_file: dict[Path, list[str]] = {}
    for name in names:
        by_file.setdefault(where[name], []).append(name)
    weights = {}
    for f, fnames in by_file.items():
        if not f.is_file():
            raise UserError(f"checkpoint {d}: shard {f.name} (holds {fnames[0]}) does not exist")
        weights.update(safetensors.load_file(f, fnames))
    weights = {k: np.asarray(v, dtype=np.float32) for k, v in weights.items()}
    check_weights(cfg, weights)
    return cfg, weights


def hf_config_dict(cfg: ModelConfig) -> dict:
    """A Qwen2 ``config.json`` for ``cfg`` (rope_theta at the top level, as Qwen2.5 ships it)."""
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "num_hidden_layers": cfg.num_layers, "hidden_size": cfg.hidden_size,
            "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
            "head_dim": cfg.head_dim, "intermediate_size": cfg.intermediate_size,
            "vocab_size": cfg.vocab_size, "rope_theta": cfg.rope_theta,
            "rms_norm_eps": cfg.rms_norm_eps, "tie_word_embeddings": cfg.tie_word_embeddings,
            "hidden_act": "silu", "torch_dtype": "float32"}


def write_checkpoint(path: str | Path, cfg: ModelConfig, weights: dict, dtype: str = "F32") -> None:
    """Write ``config.json`` + ``model.safetensors`` (F32, F16 or BF16)."""
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    check_weights(cfg, weights)
    (d / "config.json").write_text(json.dumps(hf_config_dict(cfg), indent=2) + "\n")
    safetensors.save_file({k: weights[k] for k in expected_shapes(cfg)}, d / "model.safetensors", dtype,
                          metadata={"format": "pt"})
