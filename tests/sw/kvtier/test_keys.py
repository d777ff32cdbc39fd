"""Chunk keys: the hash of the whole prefix up to the chunk's end plus the tier identity."""
import hashlib

import numpy as np
import pytest

from mcf.sw.errors import UserError
from mcf.sw.kvtier.keys import (KEY_PREFIX, TierIdentity, chunk_keys, full_chunks, model_identity,
                                weights_fingerprint)
from mcf.sw.models import load_model


def ident(**kw):
    base = dict(model="m", weights="w", group_size=16, chunk=4)
    base.update(kw)
    return TierIdentity(**base)


def test_key_is_hash_of_identity_and_whole_prefix():
    tokens = np.arange(100, 118)
    idt = ident()
    keys = chunk_keys(tokens, idt)
    assert len(keys) == 4                                    # (18 - 1) // 4 full chunks
    for c, key in enumerate(keys):                           # from scratch, per the docstring
        prefix = np.asarray(tokens[:(c + 1) * 4], dtype="<u4").tobytes()
        want = hashlib.blake2b(idt.digest() + prefix, digest_size=20).hexdigest().encode()
        assert key == KEY_PREFIX + want


def test_a_changed_token_changes_only_later_chunks():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 50000, 41)
    b = a.copy()
    b[13] += 1
    ka, kb = chunk_keys(a, ident()), chunk_keys(b, ident())
    assert ka[:3] == kb[:3]                                  # chunks 0..2 end at token 12
    assert all(x != y for x, y in zip(ka[3:], kb[3:]))
    assert chunk_keys(a[:21], ident()) == ka[:5]              # a longer prompt shares the prefix keys


@pytest.mark.parametrize("change", [dict(model="m2"), dict(weights="w2"), dict(group_size=32),
                                    dict(kv_format="other")])
def test_identity_separates_models_weights_quantisation(change):
    t = np.arange(20)
    assert not set(chunk_keys(t, ident())) & set(chunk_keys(t, ident(**change)))


def test_full_chunks_leave_the_last_token_to_prefill():
    assert [full_chunks(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 0, 0, 1, 1, 2]


def test_model_identity_and_fingerprint():
    cfg = load_model("tiny")
    w1 = {"a": np.zeros(3, np.float32), "b": np.ones((2, 2), np.float32)}
    w2 = dict(w1, b=np.full((2, 2), 2, np.float32))
    f1, f2 = weights_fingerprint(w1), weights_fingerprint(w2)
    assert f1 != f2 and f1 == weights_fingerprint(dict(reversed(list(w1.items()))))
    i1 = model_identity(cfg, f1, 16, 16)
    assert i1.chunk == 16 and i1.group_size == 16 and '"num_layers":2' in i1.model
    assert i1.digest() != model_identity(cfg, f2, 16, 16).digest()


@pytest.mark.parametrize("bad", [
    lambda: chunk_keys([[1, 2]], ident()),
    lambda: chunk_keys([1, -2, 3], ident()),
    lambda: chunk_keys([1.5, 2.0], ident()),
    lambda: chunk_keys(np.arange(8), ident(), count=3),
    lambda: ident(chunk=0),
    lambda: ident(weights=""),
])
def test_refused(bad):
    with pytest.raises(UserError):
        bad()
