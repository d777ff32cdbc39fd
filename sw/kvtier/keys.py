"""Chunk keys of the prefix KV tier.

A prompt is cut into fixed-size chunks of ``chunk`` tokens (the MARS chunk size, see
``shard.check_mars_layout``).  The key of chunk c names everything its KV depends on:

    key(c) = "mcfkv:" + hex(BLAKE2b-160(identity || tokens[0 : (c + 1) * chunk]))

where tokens are little-endian uint32 and ``identity`` is the digest of the model's shape,
its weights, the INT4 weight group size, the KV byte format (``spec/kv.py``) and the chunk
size.  The hash covers the whole prefix up to the chunk's end, so equal keys mean equal
prefixes (a chunk's KV depends on every earlier token through attention), and a different
model, checkpoint, quantisation or layout can never read another's bytes.  The digest is
computed incrementally (one BLAKE2b state fed chunk by chunk and copied at each chunk end),
which is the same value as hashing each prefix from scratch.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import numpy as np

from mcf.sw.errors import UserError

#: Version of the chunk-value byte format (spec/kv.py: segment = scales then nibble rows,
#: 64-byte aligned; block layer = K heads then V heads; chunk value = layers 0 .. L-1).
KV_FORMAT = "mcf-kv4-seg64-v1"
KEY_PREFIX = b"mcfkv:"
DIGEST_BYTES = 20


@dataclass(frozen=True)
class TierIdentity:
    """What a chunk's bytes depend on besides the tokens."""
    model: str              # model shape: canonical JSON of the ModelConfig
    weights: str            # fingerprint of the weights (``weights_fingerprint``) or a label
    group_size: int         # INT4 weight group size the KV was computed with
    chunk: int              # tokens per chunk
    kv_format: str = KV_FORMAT

    def __post_init__(self):
        if isinstance(self.chunk, bool) or not isinstance(self.chunk, (int, np.integer)) or self.chunk < 1:
            raise UserError(f"chunk={self.chunk!r}: must be a positive integer")
        if not self.weights:
            raise UserError("tier identity: the weights fingerprint must not be empty")

    def digest(self) -> bytes:
        text = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=DIGEST_BYTES).digest()


def model_identity(cfg, weights: str, chunk: int, group_size: int = 128) -> TierIdentity:
    """``cfg`` is a ModelConfig (anything with ``to_dict``); ``weights`` a fingerprint."""
    text = json.dumps(cfg.to_dict(), sort_keys=True, separators=(",", ":"))
    return TierIdentity(model=text, weights=weights, group_size=int(group_size), chunk=int(chunk))


def weights_fingerprint(weights: dict) -> str:
    """BLAKE2b of every tensor's name, dtype, shape and bytes, in name order."""
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    for name in sorted(weights):
        a = np.ascontiguousarray(weights[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _tokens_bytes(tokens) -> bytes:
    t = np.asarray(tokens)
    if t.ndim != 1:
        raise UserError(f"tokens must be a 1-D sequence, got shape {t.shape}")
    if t.size and (not np.issubdtype(t.dtype, np.integer) or t.min() < 0 or t.max() >= 2 ** 32):
        raise UserError("token ids must be integers in [0, 2^32)")
    return t.astype("<u4").tobytes()


def full_chunks(n_tokens: int, chunk: int) -> int:
    """Chunks of a prompt the tier may serve: full chunks only, and never the prompt's last
    token (prefill must compute at least one position to produce the first token's logits)."""
    return max(0, (int(n_tokens) - 1) // int(chunk))


def chunk_keys(tokens, identity: TierIdentity, count: int | None = None) -> list[bytes]:
    """Keys of chunks 0 .. count-1 (default: ``full_chunks(len(tokens))``)."""
    raw = _tokens_bytes(tokens)
    n = len(raw) // 4
    c = identity.chunk
    count = full_chunks(n, c) if count is None else int(count)
    if count < 0 or count * c > n:
        raise UserError(f"{count} chunks of {c} tokens need {count * c} tokens, the prompt has {n}")
    h = hashlib.blake2b(identity.digest(), digest_size=DIGEST_BYTES)
    keys = []
    for i in range(count):
        h.update(raw[4 * i * c: 4 * (i + 1) * c])
        keys.append(KEY_PREFIX + h.copy().hexdigest().encode())
    return keys
