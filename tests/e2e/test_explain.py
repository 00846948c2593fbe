"""`p2pctl explain` on a real 3-node fleet: each planted cause is named with its evidence.

One fleet for the module (3 nodes: the odd-one-out case needs a majority), tests in this order, each restarting
only the one server its cause needs: a healthy pull; a prompt that differs in its first token; a different
hash seed on node-c; a different chunk size on node-c (the doctor names node-c and the one-server fix, which
the test then runs); node-a's server stopped; node-a's L1 filled until it evicts (node-a alone evicts from
10 % of its L1, so the fill is bounded). Every wait polls against a deadline.
"""

from __future__ import annotations

import json
import sys
import time

import pytest
import yaml

from p2p_ops.endpoints import engine_api, lmcache_api
from p2p_ops.harness import prompts
from p2p_ops.harness.openai_client import complete
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import write_local_fleet

pytestmark = pytest.mark.e2e

CHUNK = 256
PROMPT_CHARS = 8 * CHUNK + 100     # the byte-level engine: ~1 token per character, 8 full chunks + a partial one


@pytest.fixture(scope="module")
def fleet3(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("explain")
    path = write_local_fleet(tmp / "fleet.yaml", 3, name="explain")
    data = yaml.safe_load(path.read_text())
    # node-a-0 alone evicts from 10 % of its 1 GB L1: the eviction case fills it with a bounded number of prompts.
    data["nodes"][0]["instances"][0]["settings"] = {"server_extra_args": ["--eviction-trigger-watermark", "0.1"]}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    ctx = FleetContext.load(path)
    try:
        launch.up(ctx)
        launch.wait(ctx, timeout=120)
        yield ctx
    finally:
        launch.down(ctx)
        ctx.close()


def _urls(ctx, inst_id: str) -> tuple[str, str]:
    node, inst = ctx.fleet.instance(inst_id)
    return ctx.engine_url(node, inst), ctx.server_url(node, inst)


def _tokens(ctx, text: str) -> list[int]:
    tokens, why = engine_api.tokenize(_urls(ctx, "node-a-0")[0], ctx.fleet.model, text)
    assert tokens, why
    return tokens


def _held(ctx, text: str) -> int:
    return lmcache_api.directory_held_chunks(ctx.fleet.coordinator_url, ctx.fleet.model, _tokens(ctx, text)) or 0


def _until(what: str, check, timeout: float = 60.0, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(every)


def _computed_on_a(ctx, tmp_path, seed: int) -> tuple[str, str]:
    """A fresh prompt computed on node-a, once the directory lists its 8 chunks; (text, its file)."""
    text = prompts.document(seed, 0, PROMPT_CHARS)
    r = complete(_urls(ctx, "node-a-0")[0], ctx.fleet.model, text, 4)
    assert r.ok and r.cached_tokens == 0, r
    _until("node-a's chunks in the key directory", lambda: _held(ctx, text) >= 8)
    path = tmp_path / f"prompt-{seed}.txt"
    path.write_text(text)
    return text, str(path)


def _explain(p2pctl, ctx, *args: str) -> tuple[int, dict]:
    code, out, err = p2pctl("explain", "-f", str(ctx.fleet_file), "--json", *args)
    assert code in (0, 1), err
    return code, json.loads(out)


def _show(title: str, doc: dict) -> None:
    """What an operator sees for this cause (strip, verdict, reasons, differences), on the real stderr so that
    `pytest -s` shows it and no p2pctl capture picks it up."""
    lines = [f"=== {title}"]
    for n in doc["nodes"]:
        lines.append(f"{n['instance']} ({n['node']})  [{n['strip']}]  {n['verdict']}")
        lines += [f"  chunk {c['index']}: {c['reason']}: {c['detail']}" for c in n["chunks"][:1] if c["reason"]]
    lines += [f"  differs: {d}" for d in doc["differences"]]
    print("\n".join(lines), file=sys.__stderr__)


def _node(doc: dict, inst: str) -> dict:
    return next(n for n in doc["nodes"] if n["instance"] == inst)


def _restart_server(ctx, node: str, rerender: bool) -> None:
    launch.down(ctx, only=node, roles=("server",))
    launch.up(ctx, only=node, rerender=rerender, roles=("server",))
    inst = next(n for n in ctx.fleet.nodes if n.name == node).instances[0].id

    def meshed() -> bool:
        st = lmcache_api.server_status(_urls(ctx, inst)[1])
        return st.p2p_state == "registered" and st.peer_count == 2
    _until(f"{inst}'s server registered with both peers", meshed, timeout=90)


def _edit_env(ctx, inst: str, key: str, value: str) -> None:
    env = ctx.layout.env(inst)
    lines = [f"export {key}={value}" if line.startswith(f"export {key}=") else line
             for line in env.read_text().splitlines()]
    env.write_text("\n".join(lines) + "\n")


def test_a_healthy_pull_shows_every_chunk_pulled_from_node_a(fleet3, p2pctl, tmp_path):
    _, path = _computed_on_a(fleet3, tmp_path, 101)
    code, doc = _explain(p2pctl, fleet3, "--prompt-file", path, "--node", "node-b", "--node", "node-c")
    for inst in ("node-b-0", "node-c-0"):
        n = _node(doc, inst)
        assert n["strip"] == "PPPPPPPP.", n["verdict"]
        assert {c["source"] for c in n["chunks"] if c["action"] == "pull"} == {"node-a"}
    assert code == 0 and _node(doc, "node-b-0")["chunks"][0]["holders"] == ["node-a-0"]
    _show("healthy pull", doc)


def test_a_prompt_that_differs_in_its_first_token_is_named(fleet3, p2pctl, tmp_path):
    """The proof saves its prompt; the same prompt with another first character misses everywhere, and explain
    finds the saved prompt the fleet holds that differs only there."""
    code, out, err = p2pctl("test", "basic", "-f", str(fleet3.fleet_file), "--a", "node-a-0", "--b", "node-b-0",
                            "--json")
    basic = json.loads(out)
    assert code == 0, basic["checks"]
    saved = [json.loads(line) for line in open(f"{basic['run_dir']}/prompts.jsonl")]
    assert [r["request"] for r in saved] == ["a", "b", "control_b"] and saved[1]["computed_on"] == "node-a-0"
    text = saved[0]["prompt"]
    changed = tmp_path / "changed.txt"
    changed.write_text(("X" if text[0] != "X" else "Y") + text[1:])
    code, doc = _explain(p2pctl, fleet3, "--prompt-file", str(changed), "--node", "node-c")
    first = _node(doc, "node-c-0")["chunks"][0]
    assert code == 1 and first["reason"] == "prompt_differs", first
    assert "node-a-0" in first["detail"] and "except at position(s) [" in first["detail"] and "request a" in first["detail"]
    assert _node(doc, "node-c-0")["strip"].startswith("xxxxxxxx")
    _show("first token differs", doc)


def test_a_different_hash_seed_on_one_server_is_named_and_shown_harmless_under_blake3(fleet3, p2pctl, tmp_path):
    _edit_env(fleet3, "node-c-0", "PYTHONHASHSEED", "7")
    _restart_server(fleet3, "node-c", rerender=False)
    _, path = _computed_on_a(fleet3, tmp_path, 103)
    code, doc = _explain(p2pctl, fleet3, "--prompt-file", path, "--node", "node-c")
    seed = next(d for d in doc["differences"] if d.startswith("PYTHONHASHSEED"))
    assert "node-c-0=7 (the odd one out; node-a-0, node-b-0 use PYTHONHASHSEED=0)" in seed
    assert "harmless here: NONE_HASH is identical" in seed
    assert code == 0 and _node(doc, "node-c-0")["strip"] == "PPPPPPPP."
    _show("hash seed 7 on node-c", doc)


def test_a_different_chunk_size_on_node_c_names_node_c_and_the_one_server_fix(fleet3, p2pctl, tmp_path):
    """The odd one out: node-c's env.sh edited to chunk size 512 and its server restarted from it by hand."""
    f = str(fleet3.fleet_file)
    _edit_env(fleet3, "node-c-0", "LMCACHE_CHUNK_SIZE", "512")
    _restart_server(fleet3, "node-c", rerender=False)
    _, path = _computed_on_a(fleet3, tmp_path, 104)
    code, doc = _explain(p2pctl, fleet3, "--prompt-file", path, "--node", "node-c")
    c = _node(doc, "node-c-0")
    assert code == 1 and c["chunk_size"] == 512 and "x" in c["strip"]
    assert any("chunk_size: node-c-0=512 (the odd one out; node-a-0, node-b-0 use chunk_size=256)" in d
               for d in doc["differences"])
    assert c["chunks"][0]["reason"] in ("engine_degraded", "keys_differ") and "chunk_size" in c["chunks"][0]["detail"]
    _show("chunk size 512 on node-c", doc)

    code, out, err = p2pctl("doctor", "-f", f, "--json", "--no-reach")
    findings = json.loads(out)["findings"]
    [agree] = [x for x in findings if x["check"] == "agree:chunk_size"]
    assert agree["subject"] == "node-c-0" and "node-c-0 is the odd one out" in agree["message"]
    fix = "p2pctl down --node node-c --role server && p2pctl up --node node-c --role server"
    assert agree["fix"].endswith(fix)
    [drift] = [x for x in findings if x["check"] == "env_drift"]
    assert drift["subject"] == "node-c-0" and "LMCACHE_CHUNK_SIZE: env.sh 512, fleet.yaml renders 256" in drift["value"]
    assert any(x["check"] == "engine_degraded" and x["subject"] == "node-c-0/engine" for x in findings), findings
    print("\n".join(f"[{x['severity']}] {x['subject']}: {x['message'][:160]}\n    fix: {x['fix']}" for x in findings
                    if "node-c" in x["subject"]), file=sys.__stderr__)

    code, out, _ = p2pctl("test", "basic", "-f", f, "--a", "node-a-0", "--b", "node-c-0", "--json")
    basic = json.loads(out)
    assert code == 1 and basic["explain"]["instance"] == "node-c-0" and "x" in basic["explain"]["strip"]

    _restart_server(fleet3, "node-c", rerender=True)            # the doctor's fix: up --node re-renders node-c
    _until("node-c's engine linked again", lambda: engine_api.engine_lmcache_state(
        _urls(fleet3, "node-c-0")[0]) == "connected", timeout=60)
    code, out, _ = p2pctl("doctor", "-f", f, "--json", "--no-reach")
    left = {x["check"] for x in json.loads(out)["findings"] if x["severity"] != "info"}
    assert not left & {"agree:chunk_size", "agree:PYTHONHASHSEED", "env_drift", "engine_degraded"}, left


def test_a_peers_server_stopped_is_named(fleet3, p2pctl, tmp_path):
    _, path = _computed_on_a(fleet3, tmp_path, 105)
    launch.down(fleet3, only="node-a", roles=("server",))
    try:
        code, doc = _explain(p2pctl, fleet3, "--prompt-file", path, "--node", "node-b")
        first = _node(doc, "node-b-0")["chunks"][0]
        assert code == 1 and first["reason"] in ("holder_down", "peer_not_connected"), first
        assert "node-a-0" in first["detail"] and ("not running" in first["detail"] or "dead" in first["detail"]
                                                  or "none" in first["detail"])
        _show("node-a's server stopped", doc)
    finally:
        launch.up(fleet3, only="node-a", rerender=False, roles=("server",))
        _until("node-a's server back with its peers", lambda: lmcache_api.server_status(
            _urls(fleet3, "node-a-0")[1]).peer_count == 2, timeout=90)


def test_chunks_evicted_by_filling_l1_are_named_with_the_eviction_counter(fleet3, p2pctl, tmp_path):
    text, path = _computed_on_a(fleet3, tmp_path, 106)
    a_engine = _urls(fleet3, "node-a-0")[0]
    sent = 0

    def evicted() -> bool:
        nonlocal sent
        if _held(fleet3, text) == 0:
            return True
        r = complete(a_engine, fleet3.fleet.model, prompts.document(107, sent, 4096), 1)
        assert r.ok, r
        sent += 1
        assert sent <= 150, "node-a never evicted the prompt's chunks"
        return False
    _until("node-a to evict the prompt's chunks", evicted, timeout=400, every=0.0)
    code, doc = _explain(p2pctl, fleet3, "--prompt-file", path, "--node", "node-b")
    first = _node(doc, "node-b-0")["chunks"][0]
    assert code == 1 and first["reason"] == "evicted", first
    assert "node-a-0: its eviction loop evicted" in first["detail"] and "L1 chunks deleted" in first["detail"]
    _show(f"evicted on node-a (after {sent} fill prompts of 4096 tokens)", doc)
