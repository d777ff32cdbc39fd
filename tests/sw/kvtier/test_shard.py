"""Ownership and lookup: min over ranks of contiguous owned hits = the longest cached prefix
(brute force over random presence patterns), and the MARS layout check."""
import numpy as np
import pytest

from mcf.sim.cluster import make_plan
from mcf.sw.errors import UserError
from mcf.sw.kvtier.shard import (check_mars_layout, cluster_prefix, contiguous_hits, longest_prefix,
                                 owned, owner)
from mcf.sw.mars.planner import owners_for


def hits_of(present_all, ranks):
    count = len(present_all)
    return [contiguous_hits(r, ranks, count, [present_all[c] for c in owned(r, ranks, count)])
            for r in range(ranks)]


def test_min_over_ranks_is_longest_prefix_3000_patterns():
    rng = np.random.default_rng(17)
    seen = {"first_owned_missing": 0, "rank_owns_nothing": 0, "all_present": 0, "none_present": 0}
    for _ in range(3200):
        ranks = int(rng.integers(1, 9))
        count = int(rng.integers(0, 33))
        density = rng.choice([0.3, 0.7, 0.9, 0.97, 1.0])
        present = list(rng.random(count) < density)
        hits = hits_of(present, ranks)
        assert cluster_prefix(hits) == longest_prefix(present), (ranks, present, hits)
        # every rank's answer is a bound the prefix cannot exceed, and the owner of the first
        # missing chunk reports exactly that chunk
        p = longest_prefix(present)
        assert all(a >= p for a in hits)
        if p < count:
            assert hits[owner(p, ranks)] == p
        for r in range(ranks):
            mine = owned(r, ranks, count)
            if not len(mine):
                seen["rank_owns_nothing"] += 1
                assert hits[r] == count
            elif not present[mine[0]]:
                seen["first_owned_missing"] += 1
                assert hits[r] == r
        seen["all_present"] += all(present) and count > 0
        seen["none_present"] += not any(present) and count > 0
    assert min(seen.values()) >= 20, seen


def test_paper_edge_case_rank_with_no_hits():
    # W = 2: rank 1's first owned chunk (chunk 1) is missing; chunk 0 is present on rank 0.
    # The answer is 1 chunk (256 tokens with 256-token chunks), not 0.
    present = [True, False, True, True]
    assert hits_of(present, 2) == [4, 1]
    assert cluster_prefix(hits_of(present, 2)) * 256 == 256


def test_mars_round_robin_is_the_tier_layout():
    plan = make_plan("tiny", 16 * 7, 3, "mars", chunk=16)
    assert plan.request.sharding == "round-robin"
    check_mars_layout(plan, 16, 3)
    assert [owner(c, 3) for c in range(7)] == list(owners_for("round-robin", 7, 3))


@pytest.mark.parametrize("kw,tier,match", [
    (dict(scheme="ring"), (16, 3), "does not place chunk"),          # contiguous sharding
    (dict(scheme="zigzag"), (16, 3), "does not place chunk"),
    (dict(scheme="pd"), (16, 3), "decode nodes"),
    (dict(), (32, 3), "chunk is 16"),                                  # tier chunk = 2 MARS chunks
    (dict(), (16, 2), "3 nodes"),
])
def test_mismatched_layouts_refused(kw, tier, match):
    plan = make_plan("tiny", 16 * 7, 3, kw.get("scheme", "mars"), chunk=16)
    with pytest.raises(UserError, match=match):
        check_mars_layout(plan, *tier)
