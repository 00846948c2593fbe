"""A held chunk whose tokens nearly equal a prompt's first chunk: the evidence for "the prompt differs in its
first chunk" (a timestamp, a user id or a changed system prompt at the start breaks every chained key).

The coordinator's key directory keeps each stored chunk's token ids (servers report them with their cache
events). This scans the L1 keys it lists (bounded) and compares their tokens position by position.
"""

from __future__ import annotations

from typing import Optional

from p2p_ops.diagnose.explain.model import InstanceView
from p2p_ops.endpoints import lmcache_api

MAX_KEYS = 20_000
BATCH = 1000


def mismatches(mine: list[int], theirs: list[int]) -> list[int]:
    return [i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b]


def closest(first: list[int], held: list[lmcache_api.DirectoryEntry]) -> Optional[dict]:
    """The held chunk of the same length that differs from `first` at the fewest positions (at most 1 in 16,
    and at least one: an exact match is another key for the same tokens, not a different prompt)."""
    best: Optional[tuple[list[int], lmcache_api.DirectoryEntry]] = None
    for entry in held:
        if len(entry.token_ids) != len(first):
            continue
        diff = mismatches(first, entry.token_ids)
        if 0 < len(diff) <= max(1, len(first) // 16) and (best is None or len(diff) < len(best[0])):
            best = diff, entry
    if best is None:
        return None
    diff, entry = best
    holders = sorted({p.instance_id for p in entry.placements})
    return {"holder": ", ".join(holders), "positions": diff[:8], "mine": [first[i] for i in diff[:8]],
            "theirs": [entry.token_ids[i] for i in diff[:8]], "key": entry.key.get("chunk_hash_hex", "")}


def near_first_chunk(coordinator_url: str, target: InstanceView, views: dict[str, InstanceView]) -> Optional[dict]:
    cs = target.inputs.chunk_size if target.inputs else 0
    if not cs or not target.tokens or len(target.tokens) < cs:
        return None
    listed = lmcache_api.directory_keys(coordinator_url, tier="l1", max_keys=MAX_KEYS) or []
    held = []
    for i in range(0, len(listed), BATCH):
        got, _ = lmcache_api.directory_lookup(coordinator_url, [e.key for e in listed[i:i + BATCH]])
        held += got or []
    return closest(target.tokens[:cs], held)
