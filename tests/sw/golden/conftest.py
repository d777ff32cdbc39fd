"""Shared fixtures of the golden-model tests."""
from __future__ import annotations

import numpy as np
import pytest

from mcf.sw.models import ModelConfig


def _small_config(**kw) -> ModelConfig:
    base = dict(name="t", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
                intermediate_size=128, vocab_size=256, rope_theta=10000.0)
    base.update(kw)
    return ModelConfig(**base)


@pytest.fixture
def small_config():
    """small_config(**overrides) -> a tiny Qwen2-shaped ModelConfig."""
    return _small_config


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
