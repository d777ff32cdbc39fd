"""Ownership of chunks by rank, and the lookup that finds the longest cached prefix.

Chunk c belongs to rank ``c mod W``: only that rank stores it, looks it up and loads it, from
its own server (``resp.rank_urls``).  This is MARS's default placement for the ``mars`` scheme
(``mcf.sw.mars.planner.owners_for("round-robin", C, W)``), so with the tier's chunk size equal to
the plan's chunk size a loaded chunk lands exactly where MARS leaves it after prefill (owner only,
no replica).  ``check_mars_layout`` refuses plans where the two differ.

Lookup (docs/kvtier.md, "Why the minimum is the longest prefix"): rank r reports ``a_r``, the
global index of its first owned chunk that is missing (its *contiguous owned hits*, measured in
chunks of the whole prompt), or C when all its owned chunks are present -- including when it
owns none.  The cluster takes ``min_r a_r``, which is the index of the first missing chunk, i.e.
the longest cached prefix in chunks.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from mcf.sw.errors import UserError


def check_ranks(ranks: int) -> int:
    if isinstance(ranks, bool) or not isinstance(ranks, (int, np.integer)) or ranks < 1:
        raise UserError(f"ranks={ranks!r}: must be an integer >= 1")
    return int(ranks)


def owner(c: int, ranks: int) -> int:
    """The rank that stores and loads chunk c."""
    return int(c) % ranks


def owned(rank: int, ranks: int, count: int) -> range:
    """Global indexes of the chunks rank owns among chunks 0 .. count-1 (ascending)."""
    return range(rank, count, ranks)


def contiguous_hits(rank: int, ranks: int, count: int, present: Sequence[bool]) -> int:
    """a_r: ``present[k]`` says whether rank's k-th owned chunk (global index rank + k * ranks) is
    available.  Returns the global index of the first owned chunk that is not, or ``count`` if
    none is missing (a rank that owns no chunk at all reports ``count``, not 0).  A rank whose
    first owned chunk is missing reports ``rank`` (chunks 0 .. rank-1 belong to other ranks)."""
    idx = owned(rank, ranks, count)
    if len(present) != len(idx):
        raise ValueError(f"rank {rank}: {len(present)} presence flags for {len(idx)} owned chunks")
    for k, ok in enumerate(present):
        if not ok:
            return idx[k]
    return count


def cluster_prefix(hits: Sequence[int]) -> int:
    """The scheduler's answer: the minimum over ranks of a_r (chunks)."""
    return int(min(hits))


def longest_prefix(present_all: Sequence[bool]) -> int:
    """Brute force: chunks before the first missing one."""
    for c, ok in enumerate(present_all):
        if not ok:
            return c
    return len(present_all)


def check_mars_layout(plan, chunk: int, ranks: int) -> None:
    """Refuse a MARS plan whose final KV layout is not the tier's (chunk c on rank c mod W).

    The plan must have W nodes, the tier's chunk size, and owners equal to round-robin over all
    nodes (the ``mars`` scheme's default sharding; ``pd`` hands KV to decode nodes, contiguous
    and zigzag sharding give a chunk another owner).  A tier chunk that is a multiple of the MARS
    chunk would span blocks owned by several nodes: refused too."""
    req = plan.request
    if plan.nodes != ranks:
        raise UserError(f"the plan has {plan.nodes} nodes, the tier {ranks} ranks: they must be equal")
    if plan.chunk_size != chunk:
        raise UserError(f"the plan's chunk is {plan.chunk_size} tokens, the tier's {chunk}: a loaded "
                        f"chunk would not be one MARS block (plan with chunk={chunk})")
    if req.scheme == "pd":
        raise UserError("scheme pd moves KV to decode nodes after prefill: chunk c is not kept by "
                        "rank c mod W; the tier needs the mars scheme with round-robin sharding")
    want = np.arange(plan.num_chunks) % ranks
    if not np.array_equal(np.asarray(plan.owner), want) or not np.array_equal(np.asarray(plan.holder_owner), want):
        raise UserError(f"sharding {req.sharding!r} of scheme {plan.scheme!r} does not place chunk c "
                        f"on node c mod {ranks}; the tier needs round-robin (the mars default)")
