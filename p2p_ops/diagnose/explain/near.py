"""A held chunk whose tokens nearly equal one of the prompt's: the evidence for "the prompt differs at chunk k"
(a timestamp, a user id or a changed sentence breaks that chunk's key and, since keys chain, every later one).

Three sources. The engines' KV events (`endpoints/kv_events_api`, where the fleet publishes them): the prompts
each engine stored, compared token by token, so the first token where this prompt departs is known. And two
compared position by position: the token ids the coordinator's key directory keeps per chunk
(LMCache binds them only on its lmcache-driven store path, i.e. vLLM on GPU; engine-driven CPU engines store
none), which only the first chunk can use (a later chunk's parent is not listed); and the prompts the fleet's
test runs saved (prompts.jsonl), tokenized by the target's engine: a saved prompt that shares the first k chunks
with this one, whose chunk k the directory places somewhere while this prompt's chunk k differs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from p2p_ops.diagnose.explain.prompt import saved_requests
from p2p_ops.diagnose.judge.views import InstanceView
from p2p_ops.endpoints import engine_api, lmcache_api
from p2p_ops.endpoints.kv_events_api import departure

MAX_KEYS = 20_000
BATCH = 1000
SAVED_RUNS = 5
SAVED_PROMPTS = 30
STORED_LOOKUPS = 5      # directory lookups for the stored prompts that share the most tokens with this one


def mismatches(mine: list[int], theirs: list[int]) -> list[int]:
    return [i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b]


def closest(first: list[int], held: list[lmcache_api.DirectoryEntry]) -> Optional[dict]:
    """The held chunk of the same length that differs from `first` at the fewest positions (at most 1 in 4, a
    changed first sentence of the same length; at least one: an exact match is another key for the same tokens,
    not a different prompt)."""
    near = [(len(diff), entry) for entry in held if len(entry.token_ids) == len(first)
            and 0 < len(diff := mismatches(first, entry.token_ids)) <= max(1, len(first) // 4)]
    if not near:
        return None
    entry = min(near, key=lambda n: n[0])[1]  # the first of the fewest
    return _near(0, 0, first, entry.token_ids, entry)


def _near(chunk: int, start: int, mine: list[int], theirs: list[int], entry: lmcache_api.DirectoryEntry) -> dict:
    """The near match as explain reports it; positions are the prompt's token positions."""
    diff = mismatches(mine, theirs)[:8]
    holders = sorted({p.instance_id for p in entry.placements})
    return {"chunk": chunk, "holder": ", ".join(holders), "positions": [start + i for i in diff],
            "mine": [mine[i] for i in diff], "theirs": [theirs[i] for i in diff],
            "key": entry.key.get("chunk_hash_hex", "")}


def near_first_chunk(coordinator_url: str, target: InstanceView) -> Optional[dict]:
    cs = target.inputs.chunk_size if target.inputs else 0
    if not cs or not target.tokens or len(target.tokens) < cs:
        return None
    listed = lmcache_api.directory_keys(coordinator_url, tier="l1", max_keys=MAX_KEYS) or []
    held = []
    for i in range(0, len(listed), BATCH):
        got, _ = lmcache_api.directory_lookup(coordinator_url, [e.key for e in listed[i:i + BATCH]])
        held += got or []
    return closest(target.tokens[:cs], held)


def _saved_rows(tests_dir: Path) -> list[tuple[str, dict]]:
    """(run/request, row) of the newest runs' saved requests, newest run first."""
    runs = sorted((p for p in tests_dir.glob("*") if p.is_dir()), key=lambda p: p.name, reverse=True)
    return [(f"{folder.relative_to(tests_dir)} request {row.get('request')}", row)
            for run in runs[:SAVED_RUNS] for folder in (run, run / "basic") for row in saved_requests(folder)]


def _saved_texts(tests_dir: Path) -> list[tuple[str, str]]:
    """(run/request, prompt) of the newest runs' saved prompts, one per distinct text, bounded."""
    out, seen = [], set()
    for label, row in _saved_rows(tests_dir):
        text = row.get("prompt") or ""
        if text and text not in seen:
            seen.add(text)
            out.append((label, text))
    return out[:SAVED_PROMPTS]


def sent_by(tests_dir: Path, text: str, instance: str) -> str:
    """The newest saved request that sent exactly this prompt to `instance` (its run folder's name is when), or ""."""
    return next((label for label, row in _saved_rows(tests_dir)
                 if row.get("prompt") == text and row.get("instance") == instance), "")


def near_saved_prompt(coordinator_url: str, model: str, engine_url: str, tests_dir: Path, tokens: list[int],
                      cs: int) -> Optional[dict]:
    """The saved prompt that shares the most leading chunks with `tokens` and whose next chunk, where `tokens`
    differs (at most 1 position in 4, as `closest`), the directory places: the chunk where this prompt departs from
    one the fleet computed."""
    best: Optional[dict] = None
    for label, text in _saved_texts(tests_dir):
        theirs, _ = engine_api.tokenize(engine_url, model, text)
        diff = mismatches(tokens, theirs or [])
        if not diff:
            continue                                # the same prompt, or one is a prefix of the other
        k = diff[0] // cs
        if (k + 1) * cs > min(len(tokens), len(theirs)) or (best and best["chunk"] >= k):
            continue
        if sum(1 for i in diff if i < (k + 1) * cs) > max(1, cs // 4):
            continue                                # another prompt altogether, not this one changed there
        entries = lmcache_api.directory_lookup_tokens(coordinator_url, model, theirs[:(k + 1) * cs]) or []
        if len(entries) > k and entries[k].placements:
            span = slice(k * cs, (k + 1) * cs)
            best = _near(k, k * cs, tokens[span], theirs[span], entries[k]) | {"saved": label}
    return best


def departures(tokens: list[int], cs: int, stored: dict[str, list[list[int]]]) -> list[tuple[int, str, list[int]]]:
    """(token where `tokens` departs, engine, its stored prompt), the most shared first: prompts an engine stored
    (its KV events; instance -> token sequences) that this one leaves inside a whole chunk of both. In the first
    chunk most of it must be shared (or at most 1 position in 4 differ, as `closest`): a prompt that shares a few
    leading tokens is another prompt, not this one changed."""
    found = []
    for engine, sequences in stored.items():
        for theirs in sequences:
            t = departure(tokens, theirs)
            if t is None or (t // cs + 1) * cs > min(len(tokens), len(theirs)):
                continue
            if t < cs // 2 and len(mismatches(tokens[:cs], theirs[:cs])) > max(1, cs // 4):
                continue
            found.append((t, engine, theirs))
    return sorted(found, key=lambda f: -f[0])


def near_stored(coordinator_url: str, model: str, tokens: list[int], cs: int,
                stored: dict[str, list[list[int]]]) -> Optional[dict]:
    """Of `departures`, the first whose chunk where this prompt departs the directory places: the chunk and the
    token where this prompt departs from one the fleet computed and still holds."""
    for t, engine, theirs in departures(tokens, cs, stored)[:STORED_LOOKUPS]:
        k = t // cs
        entries = lmcache_api.directory_lookup_tokens(coordinator_url, model, theirs[:(k + 1) * cs]) or []
        if len(entries) > k and entries[k].placements:
            span = slice(k * cs, (k + 1) * cs)
            return _near(k, k * cs, tokens[span], theirs[span], entries[k]) | {
                "saved": f"a prompt {engine}'s engine stored, by its KV events", "token": t}
    return None
