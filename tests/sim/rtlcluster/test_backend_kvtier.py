"""The prefix KV tier on the RTL cluster (issue 17, ``mcf run --backend rtl --kv-store``): a
prompt's prefix stored by one RTL run and loaded by another gives the same tokens and logits bit
for bit as the cold run, and the loaded run's TTFT (the nodes' CYCLES counters) is smaller.

Run 1 (cold, MARS on 2 RTL nodes, replicating) is the runtime's end-to-end check (``check``: logits, tokens,
directories and the KV in every node's DDR equal the golden fixed-point model) and afterwards
each owner stores the full chunks it computed, read back from its DDR window, on its own
redis-server (started and stopped by the test).  Run 2 looks the prompt up, each node loads its
owned chunks, the runtime writes them through the owner's DDR window into the pool slots where
the prefill would have written them, the programs set the directory entries and start prefill at
the first missing chunk; ``check`` again (the same golden values), then run 2 against run 1
directly.  Both runs share the session's Verilator build of the cluster.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

from mcf.sim.rtlcluster import backend as rtl
from mcf.spec.isa import Opcode
from mcf.sw.kvtier.servers import LocalServers
from tests.sim.rtlcluster.test_backend import BUILD_S, PROMPT, STEP_S, TINY, TINY_W, _clean
from tests.sw.runtime.test_runtime import check


@pytest.mark.cocotb
@pytest.mark.timeout(BUILD_S)
def test_prefix_stored_by_one_rtl_run_loads_into_another_bit_exact(verilator_cache):
    factory = functools.partial(rtl.rtl_backend, cache_dir=verilator_cache, progress=lambda msg: None)
    kw = dict(nodes=2, scheme="mars", chunk=4, decode=1, group=16, factory=factory, timeout_s=STEP_S)
    prompt = PROMPT[:10]                 # chunks of 4, 4, 2 tokens: 2 full chunks the tier may keep
    with LocalServers(2) as srv:
        store = ",".join(srv.urls)
        cold, s1 = check(TINY, TINY_W, prompt, kv_store=store, **kw)
        _clean(s1.backend)
        assert cold.replica_factor_per_step == [2, 2, 2, 1]        # the cold plan replicates
        assert cold.kv["prefix_chunks"] == 0 and cold.kv["stored_chunks"] == 2
        assert cold.kv["store_status"] == ["ok", "ok"]
        warm, s2 = check(TINY, TINY_W, prompt, kv_store=store, **kw)
        _clean(s2.backend)
    kv = warm.kv
    assert kv["lookup_prefix_chunks"] == kv["prefix_chunks"] == 2 and kv["load_status"] == ["ok", "ok"]
    assert kv["loaded_bytes"] == 2 * kv["chunk_value_bytes"] and kv["stored_chunks"] == 0
    assert warm.replica_factor_per_step == [1] * 4                 # loaded chunks: owner only
    # no compute for the loaded chunks: one EMBED (chunk 2's), the owners only set the entries
    progs = s2.lw.prefill
    assert sum(ins.OPCODE == Opcode.EMBED for p in progs for ins in p) == 1
    assert [[ins.block for ins in p if ins.OPCODE == Opcode.DIR] for p in progs] == [[0, 2], [1]]
    # the loaded run against the cold run, directly
    assert warm.tokens == cold.tokens and len(warm.steps) == len(cold.steps) == 2
    for a, b in zip(warm.steps, cold.steps):
        assert np.array_equal(a.logits, b.logits)
    assert warm.directory_after_prefill == cold.directory_after_prefill == [[0, 2], [1]]
    # TTFT measured by the RTL cycle counters: 2 of the prompt's 10 tokens computed
    assert warm.ttft_cycles < cold.ttft_cycles / 2, (warm.ttft_cycles, cold.ttft_cycles)
    mac = [sum(c["MAC_BEATS"] for c in r.steps[0].counters) for r in (warm, cold)]
    assert mac[0] < mac[1] / 2, mac
