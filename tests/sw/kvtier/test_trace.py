"""The trace format and the synthetic shared-prefix stream."""
import json

import numpy as np
import pytest

from mcf.sw.errors import UserError
from mcf.sw.kvtier.keys import chunk_keys, TierIdentity
from mcf.sw.kvtier.trace import read_trace, segment_tokens, synthetic, synthetic_lines, write_trace


def test_read_tokens_and_segments_sorted_by_time(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('# a comment\n'
                 '{"t": 2.0, "tokens": [1, 2, 3], "id": "late"}\n'
                 '\n'
                 '{"t": 0.5, "segments": [[7, 5], [9, 2]]}\n')
    reqs = read_trace(str(p), vocab=100)
    assert [r.id for r in reqs] == ["4", "late"] and [r.t for r in reqs] == [0.5, 2.0]
    want = np.r_[np.random.default_rng(7).integers(0, 100, 5), np.random.default_rng(9).integers(0, 100, 2)]
    assert np.array_equal(reqs[0].tokens, want) and reqs[0].tokens.dtype == np.uint32
    assert np.array_equal(reqs[1].tokens, [1, 2, 3])


@pytest.mark.parametrize("line,match", [
    ("not json", "line 1: not JSON"),
    ('{"t": -1, "tokens": [1]}', "t=-1"),
    ('{"t": 0, "tokens": [1], "segments": [[1, 2]]}', "exactly one"),
    ('{"t": 0, "tokens": [100]}', r"\[0, 100\)"),
    ('{"t": 0, "tokens": []}', "non-empty"),
    ('{"t": 0, "segments": [[1, 0]]}', "segment"),
    ('{"t": 0, "tokens": [1], "x": 1}', "unknown field"),
    ('[1, 2]', "JSON object"),
    ('{"t": true, "tokens": [1]}', "t=True"),
])
def test_bad_lines_name_the_line(tmp_path, line, match):
    p = tmp_path / "t.jsonl"
    p.write_text(line + "\n")
    with pytest.raises(UserError, match=match):
        read_trace(str(p), vocab=100)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(UserError, match="No such file"):
        read_trace(str(tmp_path / "nope.jsonl"), 10)
    (tmp_path / "e.jsonl").write_text("# nothing\n")
    with pytest.raises(UserError, match="no requests"):
        read_trace(str(tmp_path / "e.jsonl"), 10)


def test_synthetic_stream_shares_prefixes_and_round_trips(tmp_path):
    kw = dict(rate=2.0, prefixes=3, prefix_tokens=(40, 80), suffix_tokens=(5, 9), seed=4)
    reqs = synthetic(30, 500, **kw)
    assert reqs[0].t == 0.0 and all(a.t <= b.t for a, b in zip(reqs, reqs[1:]))
    assert 1.0 < (len(reqs) - 1) / reqs[-1].t < 4.0                  # about 2 requests/s
    idt = TierIdentity("m", "w", 16, 8)
    firsts = {tuple(chunk_keys(r.tokens, idt)[:5]) for r in reqs}
    assert len(firsts) == 3                                          # 3 shared prefixes (>= 40 tokens)
    assert len({r.tokens.tobytes() for r in reqs}) == 30             # every prompt its own suffix
    p = tmp_path / "s.jsonl"
    write_trace(str(p), synthetic_lines(30, **kw))
    back = read_trace(str(p), 500)
    assert all(np.array_equal(a.tokens, b.tokens) and a.t == b.t for a, b in zip(reqs, back))
    assert [f.name for f in tmp_path.iterdir()] == ["s.jsonl"]     # no temporary left
    assert json.loads(p.read_text().splitlines()[0])["segments"][0][1] >= 40
    assert np.array_equal(segment_tokens(3, 4, 10), segment_tokens(3, 4, 10))


@pytest.mark.parametrize("kw", [dict(rate=0), dict(prefixes=0), dict(prefix_tokens=(5, 4)),
                                dict(suffix_tokens=(0, 3))])
def test_synthetic_refuses_bad_shapes(kw):
    base = dict(rate=1.0, prefixes=2, prefix_tokens=(4, 8), suffix_tokens=(1, 2))
    base.update(kw)
    with pytest.raises(UserError):
        synthetic_lines(5, **base)
