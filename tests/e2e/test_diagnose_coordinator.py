"""A server that never registers (its env.sh points at a closed coordinator port), then a stopped coordinator:
`diagnose "peers not registered"` and `doctor` must point at them. One fleet, started from hand-edited env.sh."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from p2p_ops.endpoints import lmcache_api
from p2p_ops.lifecycle import launch, procs
from tests.e2e.test_diagnose import edit_env, start_edited

pytestmark = pytest.mark.e2e


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(what: str, predicate, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _findings(out: str, check: str) -> list[dict]:
    return [f for f in json.loads(out)["findings"] if f["check"] == check]


@pytest.fixture
def lost_server(tmp_path):
    closed = _closed_port()
    ctx = start_edited(tmp_path, "lost", lambda c: edit_env(
        c.layout.env("node-b-0"), "LMCACHE_COORDINATOR_URL", f"http://127.0.0.1:{closed}"), wait=False)
    try:
        yield ctx, closed
    finally:
        launch.down(ctx)
        ctx.close()


def test_unregistered_server_then_stopped_coordinator(lost_server, p2pctl, tmp_path):
    ctx, closed = lost_server
    fleet_file = str(ctx.fleet_file)
    node_a, inst_a = ctx.fleet.instance("node-a-0")
    node_b, inst_b = ctx.fleet.instance("node-b-0")
    b_log = Path(ctx.proc("server", inst_b).log)
    _wait_for("node-a-0 registered and node-b-0 failing to register", lambda: (
        lmcache_api.server_status(ctx.server_url(node_a, inst_a)).p2p_state == "registered"
        and "Coordinator registration/heartbeat failed" in b_log.read_text(errors="replace")))

    code, out, err = p2pctl("diagnose", "peers not registered", "-f", fleet_file, "--json")
    diag = json.loads(out)
    assert code == 1, err
    assert diag["likely_cause"]["step"] == "coordinator-url" and diag["likely_cause"]["subjects"] == ["node-b-0"]
    assert diag["likely_cause"]["cause"]["id"] == "coordinator_url_wrong"
    steps = {s["id"]: s for s in diag["steps"]}
    assert steps["coordinator-up"]["verdict"] == "ok"
    logged = {o["subject"] for o in steps["registration-errors"]["observations"] if o["status"] == "problem"}
    assert logged == {"node-b-0/server.log"}
    assert "node-b-0" in {o["subject"] for o in steps["membership"]["observations"] if o["status"] == "problem"}

    code, out, _ = p2pctl("doctor", "-f", fleet_file, "--json")
    [url] = _findings(out, "coordinator_url")
    assert code == 1 and url["subject"] == "node-b-0" and f"127.0.0.1:{closed}" in url["value"]
    assert [f["subject"] for f in _findings(out, "registration")] == ["node-b-0"]
    assert not _findings(out, "coordinator")

    assert procs.stop(ctx.conn(ctx.fleet.coordinator_node()), ctx.proc("coordinator")) == "stopped"
    code, out, _ = p2pctl("doctor", "-f", fleet_file, "--json")
    [coord] = _findings(out, "coordinator")
    assert code == 1 and coord["severity"] == "error" and "not running" in coord["message"]
    code, out, _ = p2pctl("diagnose", "peers not registered", "-f", fleet_file, "--json")
    assert code == 1 and json.loads(out)["likely_cause"]["step"] == "coordinator-up"
    assert json.loads(out)["likely_cause"]["cause"]["id"] == "coordinator_down"

    out_file = tmp_path / "partial.tar.gz"
    code, out, err = p2pctl("bundle", "-f", fleet_file, "-o", str(out_file), "--no-doctor", "--json")
    manifest = json.loads(out)
    assert code == 0, err
    assert "coordinator /healthz, /instances, /metrics" in {u["what"] for u in manifest["unreachable"]}
    assert "nodes/node-b/node-b-0/status.json" in {f["path"] for f in manifest["files"]}
    assert manifest["processes"]["coordinator/coordinator"] == "none"
