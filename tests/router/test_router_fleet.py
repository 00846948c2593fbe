"""A real vllm-router in the fleet: up/wait/status/down know it, and kv_aware routes on our engines' events."""

from __future__ import annotations

import json
import tarfile
import time

import pytest

from p2p_ops.diagnose import bundle, doctor
from p2p_ops.endpoints import engine_api, lmcache_api, metrics_api
from p2p_ops.harness import basic, prompts
from p2p_ops.harness.openai_client import complete
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle import prometheus as prom
from p2p_ops.lifecycle import status as fleet_status
from tests.conftest import pid_alive
from tests.e2e.explain_support import explain
from tests.e2e.explain_support import node as explained

pytestmark = pytest.mark.e2e


def served_by(ctx) -> dict[str, float]:
    """Completed requests per engine, from the engines' own counters."""
    return {inst.id: metrics_api.metric_sum(metrics_api.scrape(ctx.engine_url(node, inst)), "vllm:request_success_total")
            for node, inst in ctx.fleet.instances()}


def router_metric(ctx, name: str, **labels: str) -> float:
    node = ctx.fleet.router_node()
    return metrics_api.metric_sum(metrics_api.scrape(f"http://{node.address}:{ctx.fleet.router.prometheus_port}"), name,
                             **labels)


def lmcache_evidence(ctx) -> str:
    """Why an engine computed what its cache should have served: its fallbacks by op and reason, the LMCache
    lines of its log, and the errors and warnings of its server's log (a failed pull from a peer is logged
    there). A string: pytest cuts an assertion message that is not one to 240 characters."""
    out = {}
    for node, inst in ctx.fleet.instances():
        fallbacks = [(lab, v) for n, lab, v in metrics_api.scrape(ctx.engine_url(node, inst))
                     if n == "p2p_engine_lmcache_fallbacks_total"]
        logs = {}
        for role, keep in (("engine", ("LMCache",)), ("server", ("ERROR", "WARNING", "NIXL_ERR"))):
            log = ctx.layout.log(inst.id, role)
            lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
            logs[role] = [ln[-300:] for ln in lines if any(k in ln for k in keep)][-6:]
        out[inst.id] = {"fallbacks": fallbacks, **logs}
    return json.dumps(out, indent=1)


def test_kv_aware_router_follows_the_engines_blocks(use_policy):
    ctx = use_policy("kv_aware")
    rep = fleet_status.report(ctx).to_json()
    assert rep["ready"] and rep["router"]["ready"], rep["router"]
    assert sorted(rep["router"]["workers"]) == sorted(ctx.engine_url(n, i) for n, i in ctx.fleet.instances())
    url, model = ctx.fleet.router_url, ctx.fleet.model
    doc = prompts.document(7, 1, 2048)

    first = complete(url, model, doc + prompts.question(7, 0), max_tokens=4)
    assert first.ok, first.error
    inputs_before = router_metric(ctx, "vllm_router_kv_routing_inputs_total")
    # The first request's blocks are published before its answer returns; give the router's subscriber a
    # moment to apply them (events are asynchronous by design, as with vLLM).
    time.sleep(1.0)
    before = served_by(ctx)
    owner_hits_before = router_metric(ctx, "vllm_router_kv_placement_lookups_total", result="hit")
    follow = [complete(url, model, doc + prompts.question(7, q), max_tokens=4) for q in range(1, 4)]
    assert all(r.ok for r in follow), [r.error for r in follow]
    after = served_by(ctx)
    moved = {k: after[k] - before[k] for k in after}
    # Every follow-up went to one engine (the one holding the document) and was served from cache.
    assert sorted(moved.values()) == [0, 3], moved
    assert all(r.cached_tokens > 0 for r in follow), [r.cached_tokens for r in follow]
    assert router_metric(ctx, "vllm_router_kv_routing_inputs_total") > inputs_before
    assert router_metric(ctx, "vllm_router_kv_placement_lookups_total", result="hit") >= owner_hits_before + 3


def test_round_robin_router_spreads_a_session_and_p2p_serves_it(use_policy):
    ctx = use_policy("round_robin")
    url, model = ctx.fleet.router_url, ctx.fleet.model
    doc = prompts.document(8, 1, 2048)
    before = served_by(ctx)
    servers = {i.id: ctx.server_url(n, i) for n, i in ctx.fleet.instances()}
    stored = {k: basic.l1_objects(u) for k, u in servers.items()}
    first = complete(url, model, doc + prompts.question(8, 0), max_tokens=4)
    # The next question goes to the other engine, whose server pulls what the first one's stored: wait for the
    # store (a peer asked before the chunks land computes them; on a busy box that took longer than a request).
    owner = next(k for k, v in served_by(ctx).items() if v > before[k])
    assert basic.wait_l1_objects(servers[owner], stored[owner] + len(doc) // ctx.fleet.settings.chunk_size,
                                 time.monotonic() + 60), f"{owner}'s server never held the document"
    results = [first] + [complete(url, model, doc + prompts.question(8, q), max_tokens=4) for q in range(1, 4)]
    assert all(r.ok for r in results), [r.error for r in results]
    moved = {k: v - before[k] for k, v in served_by(ctx).items()}
    assert sorted(moved.values()) == [2, 2], moved
    # Questions after the first are served from cache on either engine: locally or pulled from the peer.
    assert all(r.cached_tokens > 0 for r in results[1:]), \
        f"cached_tokens {[r.cached_tokens for r in results]}; {lmcache_evidence(ctx)}"
    # The router is scraped by the fleet's Prometheus and collected by bundle.
    assert f'"{ctx.fleet.router_node().address}:{ctx.fleet.router.prometheus_port}"' in prom.render_config(ctx)
    names = tarfile.open(bundle.collect(ctx, with_doctor=False)["path"]).getnames()
    for part in ("router/router.log", "router/status.json", "router/workers.json", "router/metrics.txt"):
        assert any(n.endswith(part) for n in names), part
    # The doctor reads the router's sockets too: it is a fleet process, and it stays on loopback.
    facts, report = doctor.run(ctx, reach=False)
    router_node = facts.node(ctx.fleet.router_node().name)
    assert "router/router" in router_node.fleet_pids.values(), router_node.fleet_pids
    assert any(ln.pid in router_node.fleet_pids or router_node.sessions.get(ln.pid) in router_node.fleet_pids
               for ln in router_node.listeners if ln.port == ctx.fleet.router.port), router_node.listeners
    assert not [f for f in report.findings if f.check == "bind:wide"], report.render()


def test_explain_names_the_token_where_a_prompt_sent_straight_to_an_engine_departs(router_fleet, p2pctl, tmp_path):
    """The fleet's engines publish KV events (the router reads them): explain reads what node-a's engine stored and
    names the chunk and the token where a copy with a changed middle sentence departs from it (issue 40 item 4)."""
    ctx = router_fleet
    launch.wait(ctx, timeout=120)
    node, inst = ctx.fleet.instance("node-a-0")
    url, model, cs = ctx.engine_url(node, inst), ctx.fleet.model, ctx.fleet.settings.chunk_size
    text = prompts.document(4242, 0, 6000)
    assert complete(url, model, text, max_tokens=4).ok
    tokens, _ = engine_api.tokenize(url, model, text)
    deadline = time.monotonic() + 60       # the store is asynchronous: wait until the directory lists it all
    while (lmcache_api.directory_held_chunks(ctx.fleet.coordinator_url, model, tokens) or 0) < len(tokens) // cs:
        assert time.monotonic() < deadline, "node-a's server never listed the document's chunks"
        time.sleep(0.3)
    mid = len(text) // 2
    changed = text[:mid] + " Nothing here was said before. " + text[mid:]
    theirs, _ = engine_api.tokenize(url, model, changed)
    t = next(i for i, (a, b) in enumerate(zip(tokens, theirs)) if a != b)
    path = tmp_path / "changed.txt"
    path.write_text(changed)
    code, doc = explain(p2pctl, ctx, "--prompt-file", str(path), "--node", "node-b")
    b = explained(doc, "node-b-0")
    miss = next(c for c in b["chunks"] if c["action"] == "recompute")
    assert code == 1 and (miss["index"], miss["reason"]) == (t // cs, "prompt_differs"), (miss, b["strip"])
    assert f"from token {t} on" in miss["detail"] and "KV events" in miss["detail"], miss["detail"]


def test_down_stops_the_router_with_the_fleet(router_fleet):
    """The tier's last test: `down` takes the router down with everything else."""
    pid = int(open(router_fleet.proc("router").pidfile).read())
    assert pid_alive(pid)
    launch.down(router_fleet)
    assert not pid_alive(pid), "down left the router running"
