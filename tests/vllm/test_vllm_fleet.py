"""The toolkit against real vLLM: one 2-node fleet (vLLM CPU + LMCacheMPConnector + real lmcache servers) is
launched for the module; the skills' verbs run against it; the last tests break it on purpose."""

from __future__ import annotations

import json
import os
import signal
import tarfile
import time
from pathlib import Path

import pytest

from p2p_ops.endpoints import engine_api, metrics_api
from p2p_ops.facts.logs import log_tail_fact
from p2p_ops.facts.sections import read_fact
from p2p_ops.harness import basic, prompts
from p2p_ops.harness.openai_client import complete
from p2p_ops.lifecycle import procs
from tests.conftest import pid_alive
from tests.vllm.conftest import VLLM_UP_TIMEOUT

pytestmark = pytest.mark.vllm

EXTERNAL = "vllm:prompt_tokens_by_source_total"


def _engine_metric(ctx, inst_id: str, name: str, **labels: str) -> float:
    node, inst = ctx.fleet.instance(inst_id)
    return metrics_api.metric_sum(metrics_api.scrape(ctx.engine_url(node, inst)), name, **labels)


def test_fleet_is_up_with_vllm_engines_bound_to_loopback(vllm_fleet, p2pctl):
    code, out, err = p2pctl("status", "-f", str(vllm_fleet.fleet_file), "--json")
    rep = json.loads(out)
    assert code == 0 and rep["ready"], (rep, err)
    for inst in rep["instances"]:
        assert inst["engine_healthy"] and inst["peer_count"] == 1
    log = (vllm_fleet.layout.dir("node-a-0") / "engine.log").read_text(errors="replace")
    # The production path: vLLM loaded LMCache's MP connector in engine-driven CPU mode.
    assert "LMCacheMPConnector" in log


def test_cross_node_proof_on_vllm(vllm_fleet, p2pctl):
    before = _engine_metric(vllm_fleet, "node-b-0", EXTERNAL, source="external_kv_transfer")
    code, out, err = p2pctl("test", "basic", "-f", str(vllm_fleet.fleet_file), "--json")
    result = json.loads(out)
    assert code == 0 and result["passed"], (result["checks"], result.get("likely_cause"), err[-2000:])
    n = result["numbers"]
    assert n["cached_tokens_b"] >= 7 * result["chunk_size"]
    assert n["p2p_loads_b"] > 0
    req = result["requests"]
    assert req["a"]["text"] == req["b"]["text"] and req["a"]["text"]
    assert req["control_b"]["cached_tokens"] == 0
    # vLLM itself says the tokens came through its KV connector, not its own prefix cache.
    after = _engine_metric(vllm_fleet, "node-b-0", EXTERNAL, source="external_kv_transfer")
    assert after - before >= 7 * result["chunk_size"]


def test_explain_on_vllm_tells_lmcache_from_vllms_own_prefix_cache(vllm_fleet, p2pctl):
    """explain on a vLLM fleet: keys from LMCache's hasher under each server's settings, vLLM's /tokenize, and
    for the proof's request b the split vLLM itself recorded (external_kv_transfer = through LMCache)."""
    f = str(vllm_fleet.fleet_file)
    code, out, err = p2pctl("test", "basic", "-f", f, "--json")
    result = json.loads(out)
    assert code == 0, (result["checks"], err[-2000:])
    code, out, err = p2pctl("explain", "-f", f, "--run", result["run_dir"], "--request", "b", "--node", "node-b",
                            "--json")
    doc = json.loads(out)
    [b] = doc["nodes"]
    assert code == 0 and set(b["strip"].rstrip(".")) <= {"P", "H"} and len(b["strip"].rstrip(".")) >= 7, b["verdict"]
    notes = " ".join(b["notes"])
    assert "external_kv_transfer=" in notes and "LMCache served it" in notes, notes


def test_stress_report_monitor_on_vllm(vllm_fleet, p2pctl):
    code, out, err = p2pctl("test", "all", "-f", str(vllm_fleet.fleet_file), "--quick", "--max-seconds", "300")
    assert code == 0, (out[-3000:], err[-3000:])
    run_dirs = sorted((vllm_fleet.layout.root / "tests").glob("*-all"))
    assert run_dirs, list((vllm_fleet.layout.root / "tests").iterdir())
    summary = (run_dirs[-1] / "summary.md").read_text()
    assert "FAIL" not in summary.split("##")[0], summary[:2000]
    assert list(run_dirs[-1].glob("*.png"))
    code, out, _ = p2pctl("monitor", "-f", str(vllm_fleet.fleet_file), "--once", "--json")
    frame = json.loads(out)
    assert code == 0
    rows = {r["instance"]: r for r in frame["frames"]}
    assert set(rows) == {"node-a-0", "node-b-0"} and all(r["up"] for r in rows.values()), rows
    # The stress run's P2P loads are visible through the servers' counters.
    assert rows["node-a-0"]["p2p_loads_total"] + rows["node-b-0"]["p2p_loads_total"] > 0, rows


def test_doctor_diagnose_and_bundle_read_a_vllm_fleet(vllm_fleet, p2pctl, tmp_path):
    f = str(vllm_fleet.fleet_file)
    code, out, err = p2pctl("doctor", "-f", f, "--json")
    report = json.loads(out)
    assert code == 0, (report, err[-2000:])
    code, out, _ = p2pctl("diagnose", "no-p2p-hits", "-f", f, "--json")
    diag = json.loads(out)
    # A healthy vLLM fleet: the tree walks every step and confirms no cause.
    assert code == 0 and diag["likely_cause"] is None, diag["likely_cause"]
    assert not [s for s in diag["steps"] if s["verdict"] == "problem"], diag["steps"]
    bundle = tmp_path / "bundle.tar.gz"
    code, out, err = p2pctl("bundle", "-f", f, "-o", str(bundle))
    assert code == 0, err[-2000:]
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert any(n.endswith("node-a-0/engine.log") for n in names), names
    assert any("vllm" in n for n in names) or any(n.endswith("env.sh") for n in names)


def _l1_objects(ctx, inst_id: str) -> int:
    node, inst = ctx.fleet.instance(inst_id)
    return basic.l1_objects(ctx.server_url(node, inst))


def _stored(ctx, inst_id: str, before: int, prompt_tokens: int, timeout: float = 60.0) -> None:
    """Wait until the server's L1 holds every full chunk of the prompt just sent (vLLM's connector stores after
    the forward pass, asynchronously): its object count grown by that many."""
    node, inst = ctx.fleet.instance(inst_id)
    chunks = prompt_tokens // ctx.fleet.settings.chunk_size
    basic.wait_l1_objects(ctx.server_url(node, inst), before + chunks, time.monotonic() + timeout)
    assert _l1_objects(ctx, inst_id) >= before + chunks, f"{inst_id}'s server never stored the prompt's {chunks} chunks"


def _restart_engine(ctx, inst_id: str) -> None:
    node, inst = ctx.fleet.instance(inst_id)
    proc = ctx.proc("engine", inst)
    assert procs.stop(ctx.conn(node), proc) in ("stopped", "killed")
    procs.start(ctx.conn(node), proc)
    url = ctx.engine_url(node, inst)
    deadline = time.monotonic() + VLLM_UP_TIMEOUT
    while not engine_api.engine_ready("vllm", url, ctx.fleet.model):
        assert procs.states(ctx.conn(node), [proc])[0].running, "\n".join(read_fact(ctx.conn(node), log_tail_fact(proc.log, 30)))
        assert time.monotonic() < deadline, "restarted vLLM did not become ready"
        time.sleep(2)


def test_restarted_vllm_is_served_from_its_lmcache_server(vllm_fleet):
    ctx = vllm_fleet
    node, inst = ctx.fleet.instance("node-a-0")
    url = ctx.engine_url(node, inst)
    prompt = prompts.document(7007, 7, 9000)
    objects = _l1_objects(ctx, "node-a-0")
    first = complete(url, ctx.fleet.model, prompt, max_tokens=16)
    assert first.ok and first.cached_tokens == 0, first
    _stored(ctx, "node-a-0", objects, first.prompt_tokens)
    _restart_engine(ctx, "node-a-0")
    again = complete(url, ctx.fleet.model, prompt, max_tokens=16)
    # A fresh vLLM has an empty prefix cache: every cached token came from its lmcache server, which holds
    # every full chunk of the prompt (the last partial chunk is never stored).
    chunk = ctx.fleet.settings.chunk_size
    assert first.prompt_tokens >= 5 * chunk, first
    assert again.ok and again.cached_tokens >= (first.prompt_tokens // chunk - 1) * chunk, again
    assert _engine_metric(ctx, "node-a-0", EXTERNAL, source="external_kv_transfer") >= again.cached_tokens
    assert again.text == first.text


def test_peer_server_killed_mid_run_vllm_recomputes(vllm_fleet):
    """Last: it kills A's server. B's lookup cannot reach A; vLLM's recompute policy still serves the prompt."""
    ctx = vllm_fleet
    (na, ia), (nb, ib) = ctx.fleet.instance("node-a-0"), ctx.fleet.instance("node-b-0")
    a_url, b_url = ctx.engine_url(na, ia), ctx.engine_url(nb, ib)
    prompt = prompts.document(7011, 11, 9000)
    objects = _l1_objects(ctx, "node-a-0")
    on_a = complete(a_url, ctx.fleet.model, prompt, max_tokens=16)
    assert on_a.ok
    _stored(ctx, "node-a-0", objects, on_a.prompt_tokens)
    server = ctx.proc("server", ia)
    pid = int(Path(server.pidfile).read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not pid_alive(pid)
    on_b = complete(b_url, ctx.fleet.model, prompt, max_tokens=16, timeout=180)
    assert on_b.ok, on_b
    assert on_b.text == on_a.text
