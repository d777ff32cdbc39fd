"""The prefix KV tier (second paper: remote KV tiers for context-parallel prefill), for MCF.

A prompt's KV is cut into chunks of the MARS chunk size; chunk c is keyed by a hash of the whole
token prefix up to its end (``keys``), owned by rank c mod W (``shard``: the owner-only layout
MARS converges to), kept in that rank's L1 LRU (``l1``) and on the rank's own Redis/Valkey
server (``resp``: every call bounded).  ``store.ShardedStore`` looks up (minimum over ranks of the
contiguous owned hits = the longest cached prefix), stores and fetches; ``loader.AsyncLoader``
loads in the background into a ``sink.KVSink`` within a deadline; ``costmodel`` decides load or
recompute (B* = s R, T0); ``replay`` runs a request stream against the cluster model with the
tier; ``servers.LocalServers`` starts local redis-server processes.  docs/kvtier.md explains all.

PS-side code: runs on Python 3.10 (Kria-PYNQ); imports nothing from hw, golden, sim or boards.
"""
