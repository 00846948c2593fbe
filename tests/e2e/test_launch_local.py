"""Launch on the local connector with real lmcache coordinator/server processes (no mocks of LMCache)."""

from __future__ import annotations

import json
import socket

import pytest
import requests

from p2p_ops.endpoints import lmcache_api
from p2p_ops.lifecycle import procs
from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import pid_alive as _alive
from tests.conftest import write_local_fleet

pytestmark = pytest.mark.e2e


def _pids(ctx: FleetContext) -> list[int]:
    out = []
    for node in ctx.fleet.nodes:
        for st in procs.states(ctx.conn(node), ctx.procs(node)):
            if st.pid:
                out.append(st.pid)
    return out


def test_fleet_registers_and_status_shows_it(fleet2, p2pctl):
    ctx, fleet = fleet2, fleet2.fleet
    # The coordinator really holds both registrations, with the advertised P2P URLs.
    listed = {i["instance_id"]: i for i in lmcache_api.coordinator_instances(fleet.coordinator_url)}
    for node, inst in fleet.instances():
        assert listed[inst.id]["p2p_advertised_url"] == f"{node.address}:{inst.ports.p2p}"
        assert listed[inst.id]["mq_port"] == inst.ports.mp
        st = lmcache_api.server_status(ctx.server_url(node, inst))
        assert st.p2p_state == "registered" and st.peer_count == 1
        others = [i.id for _, i in fleet.instances() if i.id != inst.id]
        assert st.peers == others and st.p2p_adapters == 1
        assert requests.get(ctx.engine_url(node, inst) + "/health", timeout=5).status_code == 200
    # `status --json` from the CLI (a fresh context, as a later shell would see it).
    code, out, _ = p2pctl("status", "-f", str(ctx.fleet_file), "--json")
    data = json.loads(out)
    assert code == 0 and data["ready"] and len(data["coordinator"]["instances"]) == 2
    assert {i["instance"] for i in data["instances"]} == {"node-a-0", "node-b-0"}
    assert len(_pids(ctx)) == 5  # coordinator + 2 servers + 2 engines


@pytest.mark.breaks_fleet2(2)
def test_down_leaves_nothing_and_is_idempotent(fleet2, p2pctl):
    """The shared fleet's last user: whatever the tests before it left running, down stops all of it."""
    pids = _pids(fleet2)
    assert pids
    code, _, _ = p2pctl("down", "-f", str(fleet2.fleet_file))
    assert code == 0
    assert [p for p in pids if _alive(p)] == []
    code, _, _ = p2pctl("down", "-f", str(fleet2.fleet_file))  # idempotent
    assert code == 0
    code, out, _ = p2pctl("status", "-f", str(fleet2.fleet_file), "--json")
    assert code == 1 and not json.loads(out)["ready"]


def test_port_taken_at_start_is_reported_with_the_log_tail(tmp_path, p2pctl):
    fleet_file = write_local_fleet(tmp_path / "fleet.yaml", 1, name="busy")
    ctx = FleetContext.load(fleet_file)
    _, inst = ctx.fleet.instance("node-a-0")
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", inst.ports.http))
    blocker.listen(1)
    try:
        code, _, err = p2pctl("up", "-f", str(fleet_file), "--timeout", "90")
        assert code == 2
        assert "node-a-0/server" in err and "exited during start" in err
        assert "errors:" in err and "address already in use" in err
        assert "Traceback" not in err.split("from ")[0]
    finally:
        blocker.close()
        code, _, _ = p2pctl("down", "-f", str(fleet_file))
    assert code == 0
    assert [p for p in _pids(ctx) if _alive(p)] == []
    assert not lmcache_api.coordinator_healthy(ctx.fleet.coordinator_url)
