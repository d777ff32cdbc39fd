"""The prefix KV tier on the node runtime (sw/runtime/kvprefix.py, ``mcf run --kv-store``), on the
ISA simulator (the RTL cluster's run is tests/sim/rtlcluster/test_backend_kvtier.py): a prefix
stored by one run and loaded by another gives the cold run's logits and tokens bit for bit, the
loaded KV lands where the prefill writes it (``check``: every node's DDR equals the golden cache),
prefill computes only the missing chunks; a partial hit, a dead server and bad options."""
from __future__ import annotations

import json

import numpy as np
import pytest

from mcf.spec.isa import Opcode
from mcf.sw import cli
from mcf.sw.errors import UserError
from mcf.sw.golden.node import JitterCosts
from mcf.sw.kvtier.servers import LocalServers, free_port
from mcf.sw.mars.lower import LoweringError, lower
from mcf.sw.runtime.backend import isa_backend
from mcf.sw.runtime.kvprefix import parse_store
from mcf.sw.runtime.runtime import Session
from tests.sw.runtime.test_runtime import PROMPT, TINY, TINY_W, check


def _embeds(session) -> int:
    return sum(ins.OPCODE == Opcode.EMBED for p in session.lw.prefill for ins in p)


@pytest.mark.parametrize("nodes,chunk", [(2, 4), (3, 4)])
def test_loaded_prefix_equals_the_cold_run(nodes, chunk):
    jitter = lambda *a: isa_backend(*a, costs=JitterCosts(seed=nodes))        # noqa: E731
    kw = dict(nodes=nodes, scheme="mars", chunk=chunk, decode=2, group=16, factory=jitter)
    full = (len(PROMPT) - 1) // chunk
    with LocalServers(nodes) as srv:
        store = ",".join(srv.urls)
        cold, s1 = check(TINY, TINY_W, PROMPT, kv_store=store, **kw)
        assert cold.kv["prefix_chunks"] == 0 and cold.kv["stored_chunks"] == full
        assert _embeds(s1) == s1.plan.num_chunks
        warm, s2 = check(TINY, TINY_W, PROMPT, kv_store=store, **kw)
        assert warm.kv["prefix_chunks"] == full and warm.kv["loaded_bytes"] == full * warm.kv["chunk_value_bytes"]
        assert _embeds(s2) == s2.plan.num_chunks - full == 1
        assert warm.tokens == cold.tokens
        assert all(np.array_equal(a.logits, b.logits) for a, b in zip(warm.steps, cold.steps))
        assert warm.ttft_cycles < cold.ttft_cycles
        # a prompt that shares the first chunk only: one loaded, the rest computed (and stored)
        other = list(PROMPT)
        other[chunk + 1] = (other[chunk + 1] + 1) % TINY.vocab_size
        part, s3 = check(TINY, TINY_W, other, kv_store=store, **kw)
        assert part.kv["lookup_prefix_chunks"] == part.kv["prefix_chunks"] == 1
        assert part.kv["stored_chunks"] == full - 1 and _embeds(s3) == s3.plan.num_chunks - 1


def test_a_dead_server_means_a_cold_run_counted():
    url = f"redis://127.0.0.1:{free_port()}"           # nobody listens there
    rep, _ = check(TINY, TINY_W, PROMPT[:9], kv_store=f"{url},{url[:-1]}{int(url[-1]) ^ 1}", nodes=2,
                   scheme="mars", chunk=4, decode=1, group=16)
    assert rep.kv["prefix_chunks"] == 0 and set(rep.kv["lookup_status"]) == {"unavailable"}
    assert rep.kv["store_status"] != ["ok", "ok"] and rep.kv["stored_chunks"] == 2


def test_lowering_refuses_a_prefix_it_cannot_hold():
    s = Session(TINY, TINY_W, PROMPT, nodes=4, scheme="mars", chunk=2, budget=6 * int(TINY.kv_token_bytes),
                decode=0, group=16, factory=isa_backend)
    bases = [m.phys_base for m in s.backend.memories]
    s.backend.close()
    assert max(s.plan.r_step) > 1
    with pytest.raises(LoweringError, match="lives on its owners only; the plan replicates"):
        lower(s.plan, s.node, s.group, s.consts, bases, prefix=2)
    with pytest.raises(LoweringError, match="prefix=8: loaded chunks must be in"):
        lower(s.plan, s.node, s.group, s.consts, bases, prefix=8)


def test_store_urls():
    assert parse_store("redis://kv-{rank}:6379", 2) == ["redis://kv-0:6379", "redis://kv-1:6379"]
    assert parse_store("redis://a:1, redis://b:2", 2) == ["redis://a:1", "redis://b:2"]
    for bad, msg in (("redis://a:1", "1 server URLs for 2 ranks"), ("redis://a:1,redis://a:1", "share"),
                     ("http://x:1,http://y:2", "expected redis://")):
        with pytest.raises(UserError, match=f"--kv-store: .*{msg}"):
            parse_store(bad, 2)


def test_mcf_run_kv_store(checkpoint, capsys):
    """The same option on the model backend as on the rtl one: the second run loads, same tokens."""
    prompt = "5,9,200,3,17,33,1,8,90,2"
    with LocalServers(2) as srv:
        base = ["run", "--backend", "model", "--nodes", "2", "--checkpoint", str(checkpoint), "--tokens", prompt,
                "--chunk", "4", "--decode", "1", "--kv-store", ",".join(srv.urls)]
        capsys.readouterr()
        assert cli.main(base + ["--json"]) == 0
        cold = json.loads(capsys.readouterr().out)
        assert cli.main(base) == 0
        assert "kv tier: 2 of 2 full chunks loaded (8 tokens" in capsys.readouterr().out
        assert cli.main(base + ["--json"]) == 0
        warm = json.loads(capsys.readouterr().out)
    assert cold["kv_tier"]["stored_chunks"] == 2 and warm["kv_tier"]["prefix_chunks"] == 2
    assert warm["tokens"] == cold["tokens"] and warm["ttft_cycles"] < cold["ttft_cycles"]
    capsys.readouterr()
    assert cli.main(base[:-2] + ["--kv-store", "redis://x:1", "--scheme", "ring"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mcf: error: --kv-store: scheme ring") and len(err.splitlines()) == 1
