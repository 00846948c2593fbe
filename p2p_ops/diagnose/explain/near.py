"""A held chunk whose tokens nearly equal a prompt's first chunk: the evidence for "the prompt differs in its
first chunk" (a timestamp, a user id or a changed system prompt at the start breaks every chained key).

Two sources, compared position by position: the token ids the coordinator's key directory keeps per chunk
(LMCache binds them only on its lmcache-driven store path, i.e. vLLM on GPU; engine-driven CPU engines store
none), and the prompts the fleet's test runs saved (prompts.jsonl), tokenized by the target's engine, whose
first chunk the directory places somewhere.
"""

from __future__ import annotations

from typing import Optional

from pathlib import Path

from p2p_ops.diagnose.explain.model import InstanceView
from p2p_ops.diagnose.explain.prompt import saved_requests
from p2p_ops.endpoints import engine_api, lmcache_api

MAX_KEYS = 20_000
BATCH = 1000
SAVED_RUNS = 5
SAVED_PROMPTS = 30


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


def _saved_texts(tests_dir: Path) -> list[tuple[str, str]]:
    """(run/request, prompt) of the newest runs' saved prompts, one per distinct text, bounded."""
    out, seen = [], set()
    runs = sorted((p for p in tests_dir.glob("*") if p.is_dir()), key=lambda p: p.name, reverse=True)
    for run in runs[:SAVED_RUNS]:
        for folder in (run, run / "basic"):
            for row in saved_requests(folder):
                text = row.get("prompt") or ""
                if text and text not in seen:
                    seen.add(text)
                    out.append((f"{folder.relative_to(tests_dir)} request {row.get('request')}", text))
    return out[:SAVED_PROMPTS]


def near_saved_prompt(coordinator_url: str, model: str, engine_url: str, tests_dir: Path,
                      first: list[int]) -> Optional[dict]:
    """A saved prompt whose first chunk nearly equals `first` and whose first chunk the directory places."""
    for label, text in _saved_texts(tests_dir):
        tokens, _ = engine_api.tokenize(engine_url, model, text)
        if not tokens or len(tokens) < len(first) or tokens[:len(first)] == first:
            continue
        entries = lmcache_api.directory_lookup_tokens(coordinator_url, model, tokens[:len(first)]) or []
        if entries and entries[0].placements:
            near = closest(first, [lmcache_api.DirectoryEntry(entries[0].key, entries[0].placements,
                                                              tokens[:len(first)])])
            if near:
                return near | {"saved": label}
    return None
