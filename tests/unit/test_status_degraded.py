"""`p2pctl status`: an engine that serves without its lmcache server shows as degraded, and says why."""

from __future__ import annotations

from p2p_ops.lifecycle import status as fleet_status
from p2p_ops.cli.fleet_cmds import _engine_health
from p2p_ops.endpoints import lmcache_api


def report(link: str, healthy: bool = True) -> fleet_status.InstanceReport:
    st = lmcache_api.ServerStatus(reachable=True, healthy=True, p2p_enabled=True, p2p_state="registered", peer_count=1)
    return fleet_status.InstanceReport("node-a", "node-a-0", "running", "running", st, healthy, "http://s", "http://e", link)


def test_disconnected_engine_is_degraded_in_status():
    r = report("disconnected")
    assert "degraded" in _engine_health(r) and not r.ready(1)
    assert r.problem(1).startswith("engine is degraded: its lmcache server is unreachable")


def test_connected_engine_is_healthy_and_a_dead_one_shows_its_process_state():
    assert _engine_health(report("connected")) == "healthy" and report("connected").ready(1)
    assert _engine_health(report("n/a", healthy=False)) == "running"
