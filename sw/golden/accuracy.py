"""How far the fixed-point model is from the float reference (``mcf golden accuracy``).

Cases (random-weight models: no real checkpoint is downloaded here):
  random    uniform random tokens
  motif     a 16-token motif repeated (structured attention: copies of earlier context)
  outliers  random tokens; four hidden channels get RMSNorm gains of 20 (the activation
            outlier channels of trained LLMs): a range test of the BFP16 activations
Figures per case: logit cosine similarity (mean, min over positions), top-1 agreement along
the sequence, and how often the float top-1 is in the fixed-point top-5; once against the
float model (``vs_float``: everything, INT4 weights included) and once against the float
model run on the dequantised INT4 weights (``vs_float_w4``: the datapath alone: BFP16
activations, INT4 KV, LUTs, rounding).
"""
from __future__ import annotations

import numpy as np

from mcf.sw.models import ModelConfig

from .fixed_model import FixedModel
from .float_model import FloatModel
from .weights import random_weights

CASES = ("random", "motif", "outliers")


def case_inputs(cfg: ModelConfig, case: str, tokens: int, seed: int):
    rng = np.random.default_rng(seed)
    w = random_weights(cfg, seed)
    if case == "motif":
        motif = rng.integers(0, cfg.vocab_size, 16)
        toks = np.resize(motif, tokens)
    else:
        toks = rng.integers(0, cfg.vocab_size, tokens)
    if case == "outliers":
        ch = rng.choice(cfg.hidden_size, 4, replace=False)
        for name in w:
            if name.endswith("layernorm.weight"):
                w[name][ch] = 20.0
    return w, toks


def compare(ref: np.ndarray, got: np.ndarray) -> dict:
    cos = (ref * got).sum(-1) / (np.linalg.norm(ref, axis=-1) * np.linalg.norm(got, axis=-1))
    top1_ref = ref.argmax(-1)
    top5_got = np.argsort(-got, axis=-1)[:, :5]
    return {"cosine_mean": float(cos.mean()), "cosine_min": float(cos.min()),
            "top1_agreement": float((top1_ref == got.argmax(-1)).mean()),
            "top1_in_top5": float((top5_got == top1_ref[:, None]).any(-1).mean())}


def report(cfg: ModelConfig, group_size: int = 128, tokens: int = 64, seed: int = 0,
           cases=CASES) -> dict:
    """{case: figures} for the fixed-point vs the float model (prefill of ``tokens``)."""
    out = {}
    for case in cases:
        w, toks = case_inputs(cfg, case, tokens, seed)
        fixed = FixedModel(cfg, w, group_size)
        got = fixed.forward(toks)
        ref = FloatModel(cfg, w).forward(toks).astype(np.float64)
        ref_w4 = FloatModel(cfg, fixed.dequantized_weights(w)).forward(toks).astype(np.float64)
        out[case] = {"vs_float": compare(ref, got), "vs_float_w4": compare(ref_w4, got)}
    return out
