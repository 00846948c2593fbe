"""What the e2e tests of `p2pctl explain` share: a fresh prompt computed on node-a, explain's JSON, and what an
operator sees for a cause (printed to the real stderr, so `pytest -s` shows it and no p2pctl capture takes it)."""

from __future__ import annotations

import json
import sys
import time

from p2p_ops.endpoints import engine_api, lmcache_api
from p2p_ops.harness import prompts
from p2p_ops.harness.openai_client import complete

CHUNK = 256
PROMPT_CHARS = 8 * CHUNK + 100     # the byte-level engine: ~1 token per character, 8 full chunks + a partial one


def urls(ctx, inst_id: str) -> tuple[str, str]:
    node, inst = ctx.fleet.instance(inst_id)
    return ctx.engine_url(node, inst), ctx.server_url(node, inst)


def held(ctx, text: str) -> int:
    tokens, why = engine_api.tokenize(urls(ctx, "node-a-0")[0], ctx.fleet.model, text)
    assert tokens, why
    return lmcache_api.directory_held_chunks(ctx.fleet.coordinator_url, ctx.fleet.model, tokens) or 0


def until(what: str, check, timeout: float = 60.0, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(every)


def computed_on_a(ctx, tmp_path, seed: int) -> tuple[str, str]:
    """A fresh prompt computed on node-a, once the directory lists its 8 chunks; (text, its file)."""
    text = prompts.document(seed, 0, PROMPT_CHARS)
    r = complete(urls(ctx, "node-a-0")[0], ctx.fleet.model, text, 4)
    assert r.ok and r.cached_tokens == 0, r
    until("node-a's chunks in the key directory", lambda: held(ctx, text) >= 8)
    path = tmp_path / f"prompt-{seed}.txt"
    path.write_text(text)
    return text, str(path)


def explain(p2pctl, ctx, *args: str) -> tuple[int, dict]:
    code, out, err = p2pctl("explain", "-f", str(ctx.fleet_file), "--json", *args)
    assert code in (0, 1), err
    return code, json.loads(out)


def node(doc: dict, inst: str) -> dict:
    return next(n for n in doc["nodes"] if n["instance"] == inst)


def show(title: str, doc: dict) -> None:
    lines = [f"=== {title}"]
    for n in doc["nodes"]:
        lines.append(f"{n['instance']} ({n['node']})  [{n['strip']}]  {n['verdict']}")
        lines += [f"  chunk {c['index']}: {c['reason']}: {c['detail']}" for c in n["chunks"][:1] if c["reason"]]
    lines += [f"  differs: {d}" for d in doc["differences"]]
    print("\n".join(lines), file=sys.__stderr__)
