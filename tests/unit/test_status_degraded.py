"""`p2pctl status`: an engine that serves without its lmcache server shows as degraded, and says why. The verdict
is the status model's (`InstanceReport.engine_health`); the CLI only colours it."""

from __future__ import annotations

from p2p_ops.cli.fleet_cmds import _engine_health
from p2p_ops.endpoints import lmcache_api
from p2p_ops.lifecycle import status as fleet_status
from p2p_ops.spec.model import Fleet
from p2p_ops.spec.starter import local_fleet


def report(link: str, healthy: bool = True, engine_proc: str = "running") -> fleet_status.InstanceReport:
    st = lmcache_api.ServerStatus(reachable=True, p2p_state="registered", peer_count=1)
    return fleet_status.InstanceReport("node-a", "node-a-0", "running", engine_proc, st, healthy, "http://s",
                                       "http://e", link)


def fleet(*instances: fleet_status.InstanceReport) -> fleet_status.FleetReport:
    return fleet_status.FleetReport("f", "http://c", "running", True, [], 1, list(instances))


def test_disconnected_engine_is_degraded_in_status():
    r = report("disconnected")
    assert r.engine_degraded and r.engine_health == "degraded: lmcache unreachable" and not r.ready(1)
    assert r.problem(1).startswith("engine is degraded: its lmcache server is unreachable")
    assert _engine_health(r) == "[yellow]degraded: lmcache unreachable[/yellow]"


def test_connected_engine_is_healthy_and_a_dead_one_shows_its_process_state():
    ok = report("connected")
    assert ok.engine_health == "healthy" and not ok.engine_degraded and ok.ready(1)
    assert _engine_health(ok) == "healthy"
    dead = report("n/a", healthy=False, engine_proc="exited")
    assert dead.engine_health == "exited" and not dead.engine_degraded and _engine_health(dead) == "exited"


def test_engine_health_is_in_the_json_report():
    rows = fleet(report("disconnected"), report("connected")).to_json()["instances"]
    assert [r["engine_health"] for r in rows] == ["degraded: lmcache unreachable", "healthy"]



def test_a_server_advertising_another_url_than_the_spec_is_not_ready():
    """Seen in bench/results/diagnosis-2026-12-02d: node-c advertised 127.0.0.1:9, its peers still counted it once
    a pull had worked around the failed handshake, and `wait` said ready while doctor's reach check failed."""
    fleet_spec = Fleet.model_validate(local_fleet(3, name="adv"))
    (_, a), (_, b), (_, c) = fleet_spec.instances()
    members = [{"instance_id": a.id, "p2p_advertised_url": f"127.0.0.1:{a.ports.p2p}"},
               {"instance_id": b.id, "p2p_advertised_url": "127.0.0.1:9"}]    # c not (yet) listed
    wrong = fleet_status.misadvertised(fleet_spec, members)
    assert list(wrong) == [b.id]
    assert wrong[b.id].startswith(f"advertises P2P URL 127.0.0.1:9 but fleet.yaml places it at 127.0.0.1:{b.ports.p2p}")
    r = report("connected")
    r.misadvertised = wrong[b.id]
    assert not r.ready(1) and r.problem(1) == wrong[b.id]
    fleet_spec.settings.p2p = False     # out of the mesh: what it advertises is nobody's route
    assert fleet_status.misadvertised(fleet_spec, members) == {}
