"""End to end with the golden fixed-point model: a prefix stored by one run (chunk values, each
by its owner rank, on real servers) and loaded by another gives the same logits and tokens bit
for bit as a cold run; after the load each rank holds exactly the chunks MARS leaves on it."""
import numpy as np
import pytest

from mcf.sim.cluster import make_plan
from mcf.sw.golden import FixedModel, random_weights
from mcf.sw.kvtier.costmodel import chunk_value_bytes
from mcf.sw.kvtier.keys import model_identity, weights_fingerprint
from mcf.sw.kvtier.loader import AsyncLoader
from mcf.sw.kvtier.shard import check_mars_layout
from mcf.sw.kvtier.sink import GoldenCacheSink, RankMemorySink, chunk_values_from_cache
from mcf.sw.kvtier.store import ShardedStore
from mcf.sw.models import ModelConfig

CHUNK, W, K, GROUP = 16, 3, 4, 16


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig(name="t", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
                      intermediate_size=128, vocab_size=256, rope_theta=10000.0)
    w = random_weights(cfg, 7)
    return cfg, FixedModel(cfg, w, GROUP), weights_fingerprint(w)


def generate(model, tokens, cache):
    """Prefill ``tokens`` after what ``cache`` holds, then K greedy steps -> (tokens, logits)."""
    logits = [model.forward_x32(tokens, cache)]
    out = []
    for _ in range(K):
        out.append(int(np.argmax(logits[-1][-1])))
        logits.append(model.forward_x32([out[-1]], cache))
    return out, logits


def open_store(cfg, fp, urls, clients):
    ident = model_identity(cfg, fp, CHUNK, GROUP)
    return ShardedStore(clients(urls), ident, chunk_value_bytes(cfg, CHUNK))


def test_loaded_prefix_is_bit_exact(model, servers, clients):
    cfg, m, fp = model
    srv = servers(W)
    prompt = np.random.default_rng(1).integers(0, cfg.vocab_size, 5 * CHUNK + 7)

    # run 1: cold prefill + decode; the owners store the prompt's full chunks
    cold_cache = m.new_cache()
    cold_tokens, cold_logits = generate(m, prompt, cold_cache)
    st1 = open_store(cfg, fp, srv.urls, clients)
    keys = st1.keys(prompt)
    assert len(keys) == 5
    values = chunk_values_from_cache(cold_cache, CHUNK, 5)
    assert st1.store(keys, values) == ["ok"] * W
    st1.close()

    # run 2: a fresh process -- new connections, empty L1, empty cache
    st2 = open_store(cfg, fp, srv.urls, clients)
    ld = AsyncLoader(st2, deadline_s=5.0)
    try:
        look = st2.lookup(st2.keys(prompt))
        assert look.prefix == 5
        cache = m.new_cache()
        res = ld.submit(st2.keys(prompt), look.prefix, GoldenCacheSink(cache, cfg, CHUNK)).result()
        assert res.prefix == 5 and res.l2_chunks == 5 and cache.length == 5 * CHUNK
        tokens, logits = generate(m, prompt[5 * CHUNK:], cache)
        assert tokens == cold_tokens
        assert np.array_equal(logits[0], cold_logits[0][5 * CHUNK:])
        for a, b in zip(logits[1:], cold_logits[1:]):
            assert np.array_equal(a, b)

        # a prompt that shares only the first two chunks loads two and matches its own cold run
        other = prompt.copy()
        other[2 * CHUNK + 3] = (other[2 * CHUNK + 3] + 1) % cfg.vocab_size
        look = st2.lookup(st2.keys(other))
        assert look.prefix == 2
        cache = m.new_cache()
        ld.submit(st2.keys(other), look.prefix, GoldenCacheSink(cache, cfg, CHUNK)).result()
        t2, l2 = generate(m, other[2 * CHUNK:], cache)
        t_cold, l_cold = generate(m, other, m.new_cache())
        assert t2 == t_cold and np.array_equal(l2[0], l_cold[0][2 * CHUNK:])
        assert all(np.array_equal(a, b) for a, b in zip(l2[1:], l_cold[1:]))

        # the layout after the load is MARS's after prefill: block c on its owner only
        plan = make_plan(cfg, len(prompt), W, "mars", chunk=CHUNK)
        check_mars_layout(plan, CHUNK, W)
        ranks = RankMemorySink(W)
        ld.submit(st2.keys(prompt), 5, ranks).result()
        for r in range(W):
            assert sorted(ranks.memory[r]) == [c for c in range(5) if plan.owner[c] == r]
            assert all(ranks.memory[r][c] == values[c] for c in ranks.memory[r])
    finally:
        ld.close()
        st2.close()


def test_another_model_never_reads_these_bytes(model, servers, clients):
    cfg, m, fp = model
    srv = servers(2)
    prompt = np.arange(3 * CHUNK + 1) % cfg.vocab_size
    cache = m.new_cache()
    m.forward_x32(prompt, cache)
    st = open_store(cfg, fp, srv.urls, clients)
    st.store(st.keys(prompt), chunk_values_from_cache(cache, CHUNK, 3))
    other = open_store(cfg, weights_fingerprint(random_weights(cfg, 8)), srv.urls, clients)
    try:
        assert st.lookup(st.keys(prompt)).prefix == 3
        assert other.lookup(other.keys(prompt)).prefix == 0
    finally:
        st.close()
        other.close()
