"""The cost model: s from spec/kv.py, the paper's worked numbers, the decision rule."""
import math

import pytest

from mcf.sw.errors import UserError
from mcf.sw.kvtier.costmodel import (CostModel, PrefillCurve, bytes_per_token, chunk_value_bytes,
                                     fit_t0)
from mcf.sw.models import load_model


def test_s_is_the_stored_bytes_per_token():
    cfg = load_model("qwen2.5-1.5b")      # 28 layers, 2 KV heads, head_dim 128
    # per (layer, head, K or V): 256 tokens x (A, E) = 512 scale bytes + 256 x 64 nibble bytes
    assert chunk_value_bytes(cfg, 256) == 28 * 2 * 2 * (512 + 256 * 64)
    assert bytes_per_token(cfg, 256) == 7392.0
    assert bytes_per_token(cfg, 256) > cfg.kv_token_bytes     # eq. 1 leaves the scales out


def paper_model(bandwidth, t0=0.33):
    # GLM-5.3 FP8 on one B300 node (paper section 4): s = 48.4 KB/token, R = 52.2k tokens/s
    s, R = 48.4e3, 52.2e3
    curve = PrefillCurve.constant(R, 256, 64 * 1024, "paper: median cold miss rate")
    return CostModel(s=s, chunk=256, value_bytes=int(s * 256), bandwidth=(bandwidth,), t0=t0, prefill=curve)


def test_paper_break_even_and_decisions():
    one = paper_model(1.71e9)
    assert one.b_star(16384) == pytest.approx(2.53e9, rel=0.01)      # B* = s R = 2.53 GB/s
    assert one.load_s(64) == pytest.approx(0.79, abs=0.02)           # 16k hit, one instance
    assert one.recompute_s(64) == pytest.approx(0.31, abs=0.01)
    assert one.choose(64) == "recompute"                             # a hit slower than a miss
    eight = paper_model(10.76e9)
    assert eight.choose(64) == "recompute"                           # R T0 ~ 17k tokens > 16k
    assert eight.choose(128) == "load"                               # 32k tokens pays off
    assert 16384 < eight.min_tokens() <= 17408 + 256
    # T0 fitted on the 8-instance point: 0.40 s measured, 0.79 GB at 10.76 GB/s
    assert fit_t0([(0.40, 0.79 / 10.76)]) == pytest.approx(0.33, abs=0.005)
    # rho of the hit-heavy replay: 1.21 requests/s, 0.79 GB each, 0.78-0.89 GB/s sustained
    assert paper_model(0.85e9).rho(1.21, 0.79e9 / 48.4e3) == pytest.approx(1.13, abs=0.03)


def test_ranks_load_their_own_chunks_in_parallel():
    curve = PrefillCurve.constant(1000.0, 16, 16 * 64, "given")
    m = CostModel(s=10.0, chunk=16, value_bytes=160, bandwidth=(1600.0, 1600.0, 800.0, 1600.0), t0=0.5,
                  prefill=curve)
    assert m.rank_bytes(10) == [480, 480, 320, 320]
    assert m.transfer_s(10) == pytest.approx(320 / 800)               # the slowest rank bounds it
    assert m.load_s(10) == pytest.approx(0.9)
    assert m.recompute_s(10) == pytest.approx(0.16)
    assert m.choose(10) == "recompute" and m.choose(0) == "recompute"
    fast = CostModel(s=10.0, chunk=16, value_bytes=160, bandwidth=(1e6,) * 4, t0=0.01,
                     prefill=PrefillCurve.constant(100.0, 16, 16 * 64, "given"))
    assert fast.choose(10) == "load"
    assert fast.choose(10, backlog_s=[0, 0, 2.0, 0]) == "recompute"   # a queued server
    fast.observe(2, 1600, 0.01 + 1600 / 1e5)           # rank 2 delivers 100 kB/s: B follows
    assert 1e5 < fast.bandwidth[2] < 1e6 and fast.bandwidth[1] == 1e6
    fast.observe(1, 1600, 0.015)                      # shorter than 2 T0: no bandwidth signal
    assert fast.bandwidth[1] == 1e6
    assert math.isinf(fast.breakeven_bandwidth(0.5))


def test_prefill_curve():
    c = PrefillCurve(4, (1.0, 3.0, 6.0), 0.5, "model: test")
    assert c.steps_s(4) == 1.0 and c.steps_s(6) == 2.0 and c.steps_s(12) == 6.0
    assert c.time(12) == 6.5 and c.time(12, cached=4) == 5.5
    assert c.rate(8) == 8 / 3.0
    with pytest.raises(UserError, match="covers 0 .. 12"):
        c.steps_s(13)
    with pytest.raises(UserError):
        c.time(4, cached=4)
    with pytest.raises(UserError):
        PrefillCurve(4, (1.0, 1.0), 0.0, "x")
    with pytest.raises(UserError):
        PrefillCurve.constant(0.0, 4, 8, "x")
