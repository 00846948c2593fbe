"""Tests that only send requests to one healthy 2-node fleet share it (one start for the module):
the cross-node proof, `p2pctl explain` on a healthy pull and on a first-token difference, a real Prometheus and
the monitor, and `p2pctl test all --quick` with its report."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import requests
from prometheus_api_client import PrometheusConnect

from p2p_ops.harness.basic import run_basic
from p2p_ops.lifecycle import prometheus as prom
from p2p_ops.observe import grafana
from p2p_ops.observe.records import read_csv
from tests.e2e.explain_support import computed_on_a, explain, node, show

pytestmark = pytest.mark.e2e

needs_prometheus = pytest.mark.skipif(not shutil.which("prometheus"),
                                      reason="prometheus not installed (.ci/run installs it)")


def test_matrix_proves_both_pairs_and_writes_table_and_heatmap(fleet2, p2pctl):
    code, out, err = p2pctl("test", "matrix", "-f", str(fleet2.fleet_file), "--chunks", "2", "--json")
    result = json.loads(out)
    assert code == 0, ([p for p in result.get("pairs", []) if not p["ok"]], err[-2000:])
    assert result["counts"] == {"pairs": 2, "passed": 2, "failed": 0, "skipped": 0}
    for pair in result["pairs"]:
        assert pair["cached_tokens"] >= 2 * result["chunk_size"] and pair["p2p_loads"] > 0 and pair["identical"]
        assert pair["kv_bytes"] > 0 and pair["mbps"] and pair["mismatch_tokens"] == 0
    run_dir = Path(result["run_dir"])
    assert (run_dir / "heatmap.png").read_bytes()[:4] == b"\x89PNG"
    assert "PASS" in (run_dir / "summary.md").read_text()


def test_basic_proof_passes_and_leaves_evidence(fleet2, p2pctl):
    code, out, err = p2pctl("test", "basic", "-f", str(fleet2.fleet_file), "--json")
    result = json.loads(out)
    assert code == 0, (result.get("checks"), result.get("likely_cause"), err[-2000:])
    assert result["passed"]
    n = result["numbers"]
    assert n["cached_tokens_b"] >= 7 * result["chunk_size"]
    assert n["p2p_loads_b"] > 0 and n["kv_bytes_pulled_b"] > 0
    req = result["requests"]
    assert req["a"]["text"] == req["b"]["text"] and req["a"]["text"]
    assert req["control_b"]["cached_tokens"] == 0
    run_dir = Path(result["run_dir"])
    assert (run_dir / "result.json").is_file() and "PASS" in (run_dir / "summary.md").read_text()
    assert (run_dir / "env" / "node-a-0.env.sh").is_file()


def test_explain_shows_a_healthy_pull_as_every_chunk_pulled_from_node_a(fleet2, p2pctl, tmp_path):
    _, path = computed_on_a(fleet2, tmp_path, 2101)
    code, doc = explain(p2pctl, fleet2, "--prompt-file", path, "--node", "node-b")
    b = node(doc, "node-b-0")
    assert code == 0 and b["strip"] == "PPPPPPPP.", b["verdict"]
    pulls = [c for c in b["chunks"] if c["action"] == "pull"]
    assert len(pulls) == 8 and {c["source"] for c in pulls} == {"node-a"} and pulls[0]["holders"] == ["node-a-0"]
    show("healthy pull", doc)


def test_explain_names_a_prompt_that_differs_in_its_first_token(fleet2, p2pctl, tmp_path):
    """The proof saves its prompts; the same prompt with another first character misses, and explain finds the
    saved prompt the fleet holds that differs only there."""
    code, out, err = p2pctl("test", "basic", "-f", str(fleet2.fleet_file), "--json")
    basic = json.loads(out)
    assert code == 0, basic["checks"]
    saved = [json.loads(line) for line in open(f"{basic['run_dir']}/prompts.jsonl")]
    assert [r["request"] for r in saved] == ["a", "b", "control_b"] and saved[1]["computed_on"] == "node-a-0"
    text = saved[0]["prompt"]
    changed = tmp_path / "changed.txt"
    changed.write_text(("X" if text[0] != "X" else "Y") + text[1:])
    code, doc = explain(p2pctl, fleet2, "--prompt-file", str(changed), "--node", "node-b")
    b = node(doc, "node-b-0")
    first = b["chunks"][0]
    assert code == 1 and first["reason"] == "prompt_differs", first
    assert "node-a-0" in first["detail"] and "except at token position(s) [" in first["detail"]
    assert "request a" in first["detail"] and b["strip"].startswith("xxxxxxx"), (first, b["strip"])
    show("first token differs", doc)
    # A character changed in the middle: the chunks before it are pulled, the one holding it is named with its
    # token position, and every later chunk misses because keys chain (issue 28).
    mid = len(text) // 2
    changed.write_text(text[:mid] + ("Q" if text[mid] != "Q" else "Z") + text[mid + 1:])
    code, doc = explain(p2pctl, fleet2, "--prompt-file", str(changed), "--node", "node-b")
    b = node(doc, "node-b-0")
    miss = next(c for c in b["chunks"] if c["action"] == "recompute")
    assert code == 1 and miss["index"] > 0 and miss["reason"] == "prompt_differs", (miss, b["strip"])
    assert f"chunk {miss['index']} (after the same" in miss["detail"], miss
    assert all(c["action"] in ("pull", "hit") for c in b["chunks"][:miss["index"]]), b["strip"]
    assert all(c["reason"] == "prefix_broken" for c in b["chunks"][miss["index"] + 1:] if c["action"] != "partial")
    show("middle token differs", doc)


def test_status_cache_maps_objects_duplicates_and_the_proofs_prefix(fleet2, p2pctl):
    code, out, err = p2pctl("test", "basic", "-f", str(fleet2.fleet_file), "--json")
    run = json.loads(out)["run_dir"].rstrip("/").rsplit("/", 1)[-1]
    assert code == 0, err[-2000:]
    # The directory learns of stores from the servers' event batches, which lag the store itself (on a loaded box
    # by seconds): wait until it lists the proof's prompt, as a reader of `status --cache` would.
    deadline = time.monotonic() + 60
    while True:
        code, out, err = p2pctl("status", "-f", str(fleet2.fleet_file), "--cache", "--json")
        cmap = json.loads(out)["cache"]
        assert code == 0 and not cmap["error"], cmap
        [proof] = [p for p in cmap["prefixes"] if p["label"] == f"{run}/a"]
        if proof["held"].get("node-a-0", 0) == proof["chunks"] or time.monotonic() > deadline:
            break
        time.sleep(1)
    by = {n["instance"]: n for n in cmap["nodes"]}
    assert all(by[i]["directory_objects"] > 0 and by[i]["directory_bytes"] > 0 for i in ("node-a-0", "node-b-0"))
    assert sum(n["directory_objects"] for n in cmap["nodes"]) == cmap["total_keys"] + sum(
        n["duplicated"] for n in cmap["nodes"]) - cmap["duplicated_keys"]   # each duplicate counted on every holder
    assert proof["chunks"] >= 7 and proof["held"].get("node-a-0", 0) == proof["chunks"], proof     # computed on a


@needs_prometheus
def test_prometheus_scrapes_servers_and_engines_and_monitor_shows_p2p_loads(fleet2, p2pctl, tmp_path):
    assert run_basic(fleet2).passed
    url = prom.up(fleet2)
    try:
        pc = PrometheusConnect(url=url, disable_ssl=True)
        deadline = time.monotonic() + 60
        servers = engines = []
        while time.monotonic() < deadline:
            servers = pc.custom_query('lmcache_mp_l1_usage_ratio')
            engines = pc.custom_query('vllm:num_requests_running')
            loads = pc.custom_query('lmcache_mp_l2_load_completed_requests_total{l2_name="p2p"}')
            if len(servers) == 2 and len(engines) == 2 and loads:
                break
            time.sleep(1)
        assert {s["metric"]["fleet_instance"] for s in servers} == {"node-a-0", "node-b-0"}
        assert {s["metric"]["fleet_instance"] for s in engines} == {"node-a-0", "node-b-0"}
        assert any(float(x["value"][1]) > 0 for x in loads)
        code, out, _ = p2pctl("monitor", "-f", str(fleet2.fleet_file), "--once", "--json")
        frame = json.loads(out)
        assert code == 0 and frame["source"].startswith("prometheus")
        by = {f["instance"]: f for f in frame["frames"]}
        assert by["node-b-0"]["p2p_loads_total"] > 0
    finally:
        assert prom.down(fleet2) == "stopped"
    code, out, _ = p2pctl("monitor", "-f", str(fleet2.fleet_file), "--once", "--json", "--source", "direct")
    frame = json.loads(out)
    assert frame["source"] == "direct /metrics"
    assert {f["instance"]: f for f in frame["frames"]}["node-b-0"]["p2p_loads_total"] > 0


@needs_prometheus
def test_every_dashboard_query_returns_data_and_rules_are_loaded(fleet2):
    """`p2pctl grafana`'s panels read real series of this fleet; `prometheus up` loaded the fleet's rules."""
    assert run_basic(fleet2).passed  # P2P loads, lookups and TTFTs to look at
    url = prom.up(fleet2)
    try:
        pc = PrometheusConnect(url=url, disable_ssl=True)
        # rate() needs two scrapes inside the window after the traffic; poll (scrape interval 2 s).
        deadline = time.monotonic() + 120
        pending = [p.expr for p in grafana.panels()]
        while pending and time.monotonic() < deadline:
            assert run_basic(fleet2).passed
            pending = [e for e in pending if not pc.custom_query(e)]
            time.sleep(2)
        assert pending == [], "dashboard queries without data"
        groups = requests.get(f"{url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        names = {r["name"] for g in groups for r in g["rules"]}
        assert {"P2PPeerCountBelowExpected", "P2PLoadFailures", "P2PLookupTimeouts", "L1OutOfMemory",
                "EngineDown", "p2p:peers"} <= names
        peers = pc.custom_query("p2p:peers")
        deadline = time.monotonic() + 60
        while len(peers) < 2 and time.monotonic() < deadline:
            time.sleep(2)
            peers = pc.custom_query("p2p:peers")
        assert {float(x["value"][1]) for x in peers} == {1.0}  # each of 2 servers sees its one peer
        firing = [r["name"] for g in groups for r in g["rules"] if r.get("state") == "firing"]
        assert firing == []
    finally:
        assert prom.down(fleet2) == "stopped"


def test_piped_json_of_the_fleet_verbs(fleet2, p2pctl):
    for verb in (["status"], ["wait", "--timeout", "30"], ["test", "basic"]):
        code, out, err = p2pctl(*verb, "-f", str(fleet2.fleet_file), "--json")
        assert code == 0, err[-2000:]
        json.loads(out)


def test_quick_all_passes_with_report_plots_and_csv(fleet2, p2pctl):
    code, out, err = p2pctl("test", "all", "-f", str(fleet2.fleet_file), "--quick", "--tag", "ci",
                            "--with-lmcache-bench")
    runs = sorted(fleet2.layout.tests.glob("*-all-ci"))
    assert runs, out + err
    run = runs[-1]
    summary = (run / "summary.md").read_text()
    assert code == 0, summary
    assert "**Overall: PASS**" in summary
    assert len(list(run.glob("*.png"))) >= 3
    records = read_csv(run / "requests.csv")
    main = [r for r in records if r.stage in ("ladder", "sustained", "longdoc")]
    assert {r.instance for r in main} == {"node-a-0", "node-b-0"}  # served on both nodes
    for stage in ("ladder", "longdoc", "sustained"):
        cross = [r for r in main if r.stage == stage and r.cross_node]
        assert cross and any(r.cached_tokens > 0 for r in cross), stage  # P2P hits on the non-warmer
        assert all(r.ok for r in main if r.stage == stage)
    assert "| lmcache bench engine long-doc-qa: no failed requests | PASS |" in summary
    assert (run / "lmcache-bench" / "bench_results.csv").is_file()
    for name in ("status_before.json", "status_after.json", "stages.json", "basic/result.json", "env/node-a-0.env.sh"):
        assert (run / name).exists(), name


def test_bench_peers_on_the_running_pair_names_the_serving_peer_and_a_clean_miss(fleet2, p2pctl):
    code, out, err = p2pctl("bench", "peers", "--running", "-f", str(fleet2.fleet_file), "--repeats", "1", "--json")
    doc = json.loads(out)
    assert code == 0, (doc.get("rows"), doc.get("notes"), err[-2000:])
    rows = {r["scenario"]: r for r in doc["rows"]}
    assert set(rows) == {"no holder", "one holder"}  # two holders need two peers besides the requester
    hit, miss = rows["one holder"], rows["no holder"]
    assert hit["serving_peer"] == "node-b-0" and hit["cached_tokens"] >= hit["need"] > 0 and hit["load_tasks"] == 1
    assert miss["cached_tokens"] == 0 and miss["load_tasks"] == 0 and miss["lookup_ms_p50"] > 0
    assert (Path(doc["run_dir"]) / "lookup.png").read_bytes()[:4] == b"\x89PNG"
    assert "not measured at 8" in doc["target"]["line"]


# What a client can make a server log: each request's path quotes a log signature (issue 44 item 1). The access
# log keeps a path's spaces as %20, so the signatures a client can really write there are those without a space.
SIGNED_PATHS = ("/NIXL_ERR_BACKEND", "/RLIMIT_MEMLOCK", "/NIXL_ERR_REMOTE_DISCONNECT", "/nixlRemoteDisconnectError",
                "/Traceback (most recent call last)")
SIGNED_CAUSES = {"ucx_backend_failed", "memlock", "remote_disconnect", "traceback"}


def test_requests_that_quote_log_signatures_give_a_healthy_fleet_no_cause(fleet2, p2pctl):
    ctx = fleet2
    urls = [ctx.fleet.coordinator_url] + [u for n, i in ctx.fleet.instances()
                                          for u in (ctx.server_url(n, i), ctx.engine_url(n, i))]
    for url in urls:
        for path in SIGNED_PATHS:
            requests.get(url + path, timeout=10)
    node, inst = ctx.fleet.instance("node-a-0")
    assert '"GET /NIXL_ERR_BACKEND HTTP/1.1" 404' in Path(ctx.proc("server", inst).log).read_text(errors="replace")
    for argv in (("doctor",), ("diagnose", "NIXL_ERR_BACKEND"), ("diagnose", "pulls fail with NIXL_ERR_REMOTE_DISCONNECT")):
        code, out, _ = p2pctl(*argv, "-f", str(ctx.fleet_file), "--json")
        named = verdict_ids(json.loads(out))
        assert not named & SIGNED_CAUSES, (argv, code, named)


def verdict_ids(doc) -> set[str]:
    """Every cause id a --json document names (each verdict is a dict with id, subject, fix and confirmed)."""
    if isinstance(doc, list):
        return set().union(*map(verdict_ids, doc)) if doc else set()
    if not isinstance(doc, dict):
        return set()
    own = {doc["id"]} if {"id", "subject", "fix", "confirmed"} <= doc.keys() else set()
    return own.union(*map(verdict_ids, doc.values()))
