"""Decoder model configuration: the shape facts every part of MCF needs.

Presets live beside this file as ``<name>.yaml``; ``load_model`` also accepts a path to a
YAML file or a Hugging Face checkpoint directory (its ``config.json``).
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path

import yaml

from mcf.sw.errors import UserError

PRESET_DIR = Path(__file__).parent
#: Largest width / count a model config may give (2^24: beyond any released model, small
#: enough that the products the tools allocate are decided before they are attempted).
MAX_DIM = 1 << 24


@dataclass(frozen=True)
class ModelConfig:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    #: Bytes per KV element as stored (INT4 = 0.5): the ``b`` of MCF eq. (1).
    kv_bytes_per_element: float = 0.5
    #: Bytes per weight as stored (INT4 = 0.5, scales excluded).
    weight_bytes_per_element: float = 0.5

    def __post_init__(self):
        for f in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                  "intermediate_size", "vocab_size"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_DIM:
                raise UserError(f"model {self.name}: {f}={v!r} must be an integer in [1, {MAX_DIM}]")
        if self.num_heads % self.num_kv_heads:
            raise UserError(f"model {self.name}: num_heads={self.num_heads} is not a multiple of "
                            f"num_kv_heads={self.num_kv_heads}")

    @property
    def kv_token_bytes(self) -> float:
        """M_token = 2 * L * H_kv * d * b (MCF eq. 1)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_bytes_per_element

    @property
    def params_per_layer(self) -> int:
        h, d = self.hidden_size, self.head_dim
        attn = h * self.num_heads * d + 2 * h * self.num_kv_heads * d + self.num_heads * d * h
        mlp = 3 * h * self.intermediate_size
        return attn + mlp

    @property
    def num_params(self) -> int:
        emb = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else emb
        return self.num_layers * self.params_per_layer + emb + head

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, name: str | None = None) -> "ModelConfig":
        where = f"model {name}" if name else "model config"
        if not isinstance(d, dict):
            raise UserError(f"{where}: expected a mapping of keys (num_layers: ..., hidden_size: ...), "
                            f"got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise UserError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
        d = dict(d)
        if name is not None:
            d.setdefault("name", name)
        required = [f.name for f in fields(cls) if f.default is MISSING]
        missing = [k for k in required if k not in d]
        if missing:
            raise UserError(f"{where}: missing key(s) {', '.join(missing)}")
        for f in ("rope_theta", "rms_norm_eps", "kv_bytes_per_element", "weight_bytes_per_element"):
            if f in d:
                d[f] = _positive(where, f, d[f])
        if not isinstance(d.get("tie_word_embeddings", True), bool):
            raise UserError(f"{where}: tie_word_embeddings={d['tie_word_embeddings']!r} must be true or false")
        return cls(**d)

    @classmethod
    def from_hf_config(cls, cfg: dict, name: str = "checkpoint") -> "ModelConfig":
        """From a Hugging Face Qwen2 ``config.json`` (``rope_theta`` at the top level or in
        ``rope_parameters``)."""
        if not isinstance(cfg, dict):
            raise UserError(f"config.json of {name}: expected a JSON object, got {type(cfg).__name__}")
        archs = cfg.get("architectures") or [cfg.get("model_type", "?")]
        if not isinstance(archs, list) or not archs:
            archs = [str(archs)]
        if cfg.get("model_type") not in ("qwen2",) and "Qwen2ForCausalLM" not in archs:
            raise UserError(f"unsupported architecture {archs[0]!r}: only Qwen2 (model_type qwen2) is supported")
        rope = cfg.get("rope_theta")
        if rope is None:
            rope = (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)
        scaling = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        if not isinstance(scaling, dict):
            raise UserError(f"config.json of {name}: rope_scaling must be an object")
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise UserError(f"unsupported hidden_act {act!r}: only silu (SwiGLU, as Qwen2) is supported")
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
        if rope_type != "default":
            raise UserError(f"unsupported RoPE type {rope_type!r}: only the default RoPE is supported")
        if cfg.get("use_sliding_window"):
            raise UserError("unsupported attention: sliding-window attention (use_sliding_window) is not supported")
        for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
                    "vocab_size"):
            if key not in cfg:
                raise UserError(f"config.json: missing key {key}")
        heads = cfg["num_attention_heads"]
        if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
            raise UserError(f"config.json of {name}: num_attention_heads={heads!r} must be a positive integer")
        return cls(
            name=name,
            num_layers=cfg["num_hidden_layers"],
            hidden_size=cfg["hidden_size"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads", heads),
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            intermediate_size=cfg["intermediate_size"],
            vocab_size=cfg["vocab_size"],
            rope_theta=_positive(f"config.json of {name}", "rope_theta", rope),
            rms_norm_eps=_positive(f"config.json of {name}", "rms_norm_eps", cfg.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        )


def _positive(where: str, key: str, value) -> float:
    """A finite positive number of a config (one-line error otherwise)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if isinstance(value, bool) or not (math.isfinite(v) and v > 0):
        raise UserError(f"{where}: {key}={value!r} must be a finite number > 0")
    return v


def _read(path: Path, parse, what: str):
    """Parsed text of a config file; unreadable or broken files are one-line errors."""
    try:
        return parse(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read {what} ({e.strerror if isinstance(e, OSError) else e})") from None
    except (ValueError, yaml.YAMLError) as e:      # json.JSONDecodeError is a ValueError
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"{path}: not valid {what} ({first})") from None


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_model(spec: str | Path) -> ModelConfig:
    """A preset name, a YAML file, or a Hugging Face checkpoint directory."""
    p = Path(spec)
    if p.is_dir():
        cfg_file = p / "config.json"
        if not cfg_file.is_file():
            raise UserError(f"{p}: no config.json (not a Hugging Face checkpoint directory)")
        return ModelConfig.from_hf_config(_read(cfg_file, json.loads, "JSON"), name=p.name)
    if p.suffix in (".yaml", ".yml"):
        if not p.is_file():
            raise UserError(f"model file {p} does not exist")
        return ModelConfig.from_dict(_read(p, yaml.safe_load, "YAML"), name=p.stem)
    preset = PRESET_DIR / f"{spec}.yaml"
    if not preset.is_file():
        raise UserError(f"unknown model {str(spec)!r}; presets: {', '.join(preset_names())} "
                        "(or give a .yaml file or a checkpoint directory)")
    return ModelConfig.from_dict(yaml.safe_load(preset.read_text()), name=str(spec))


# --- weight-sharded (tensor-parallel) shards (mcf.sw.golden.fixed_model.TensorParallel, mcf.sw.mars.lower_tp)
def shard_config(cfg: ModelConfig, nodes: int) -> ModelConfig:
    """The model one of ``nodes`` tensor-parallel shards computes: the same hidden size, 1/N of
    the query heads and of the MLP width, and the KV heads those query heads read: 1/N of them,
    or (more nodes than KV heads) one, shared by N / H_kv nodes that each compute and cache it
    (its matrices are the whole model's row / column shards)."""
    return dataclasses.replace(cfg, name=f"{cfg.name}/tp{nodes}", num_heads=cfg.num_heads // nodes,
                               num_kv_heads=max(1, cfg.num_kv_heads // nodes),
                               intermediate_size=cfg.intermediate_size // nodes)


def shard_kv_head(cfg: ModelConfig, nodes: int, n: int) -> int:
    """The first KV head of shard ``n`` (its query heads' group)."""
    return n * cfg.num_kv_heads // nodes


def check_tensor_parallel(cfg: ModelConfig, nodes: int, group: int) -> None:
    """Refuse (one line) a model that does not split over ``nodes`` shards with group size ``group``."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise UserError(f"tensor-parallel: nodes={nodes!r} must be a positive integer")
    if cfg.num_heads % nodes or cfg.intermediate_size % nodes or (cfg.num_kv_heads % nodes and
                                                                  nodes % cfg.num_kv_heads):
        raise UserError(f"tensor-parallel: model {cfg.name} ({cfg.num_heads} heads on {cfg.num_kv_heads} KV heads, "
                        f"intermediate size {cfg.intermediate_size}) does not split over {nodes} node(s): the heads "
                        f"and the intermediate size must divide by N, and N divide or be a multiple of the KV heads")
    for what, n in (("num_heads x head_dim", cfg.num_heads * cfg.head_dim), ("intermediate_size", cfg.intermediate_size)):
        if (n // nodes) % group:
            raise UserError(f"tensor-parallel: {what}={n} / {nodes} node(s) = {n // nodes} columns per shard is not a "
                            f"whole number of groups of {group} (use --group-size {math.gcd(n // nodes, group)} or "
                            f"fewer nodes)")
