"""A server-only restart on one node (`down/up --node X --role server`) keeps the engine, says what it did,
and the fleet registers again."""

from __future__ import annotations

import json

import pytest

from p2p_ops.lifecycle import launch, procs
from tests.conftest import pid_alive

pytestmark = pytest.mark.e2e


def _pid(ctx, node_name: str, role: str) -> int | None:
    node = next(n for n in ctx.fleet.nodes if n.name == node_name)
    inst = node.instances[0]
    proc = ctx.proc("server", inst) if role == "server" else ctx.proc("engine", inst)
    st = procs.states(ctx.conn(node), [proc])[0]
    return st.pid if st.running else None


def test_server_only_restart_keeps_the_engine(fleet2, p2pctl):
    ctx = fleet2
    f = str(ctx.fleet_file)
    engine_pid, server_pid = _pid(ctx, "node-b", "engine"), _pid(ctx, "node-b", "server")
    assert engine_pid and server_pid

    try:
        code, out, err = p2pctl("down", "-f", f, "--node", "node-b", "--role", "server", "--json")
        assert code == 0, err
        assert json.loads(out)["stopped"] == {"node-b-0/server": "stopped"}
        assert not pid_alive(server_pid) and pid_alive(engine_pid)

        code, out, err = p2pctl("up", "-f", f, "--node", "node-b", "--role", "server")
        assert code == 0, err
        assert "started node-b-0/server on node-b" in err and "engine" not in err
        new_server = _pid(ctx, "node-b", "server")
        assert new_server and new_server != server_pid and _pid(ctx, "node-b", "engine") == engine_pid

        # A plain `up --node` now finds both running and says so instead of "started".
        code, out, err = p2pctl("up", "-f", f, "--node", "node-b")
        assert code == 0, err
        assert "kept node-b-0/server" in err and "kept node-b-0/engine" in err and "started" not in err
    finally:  # the shared fleet: whatever happened, both units run again
        launch.up(ctx, only="node-b")

    code, out, err = p2pctl("wait", "-f", f, "--timeout", "90", "--json")
    assert code == 0, err
    assert json.loads(out)["ready"]
