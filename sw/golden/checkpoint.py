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
        try:
            doc = json.loads(index.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise UserError(f"{index}: not a readable JSON index ({str(e).splitlines()[0]})") from None
        wm = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(wm, dict) or not all(isinstance(v, str) and v and "/" not in v for v in wm.values()):
            raise UserError(f"{index}: no weight_map of tensor names to shard file names")
        where = {name: d / fname for name, fname in wm.items()}
        _no_duplicates(d, sorted(set(where.values())))
        return where
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise UserError(f"{d}: no *.safetensors files")
    return _no_duplicates(d, files)


def _no_duplicates(d: Path, files: list[Path]) -> dict[str, Path]:
    """Tensor name -> the shard that holds it; a tensor in two shards is refused (which copy
    would be meant is not knowable)."""
    out: dict[str, Path] = {}
    for f in files:
        if not f.is_file():
            continue                      # named by the index but absent: load_checkpoint says so
        for name in safetensors.read_header(f)[0]:
            if name in out:
                raise UserError(f"checkpoint {d}: tensor {name} is in two shards ({out[name].name} and {f.name})")
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
    for name in names:
        w = weights[name]
        if not np.isfinite(w).all():
            bad = ~np.isfinite(w)
            raise UserError(f"checkpoint {d}: tensor {name} holds {int(bad.sum())} non-finite value(s) "
                            f"(NaN/Inf; first at index {tuple(int(i) for i in np.argwhere(bad)[0])})")
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
