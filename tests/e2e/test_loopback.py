"""Loopback means loopback: every process of a local fleet listens only on 127.0.0.0/8, NIXL/UCX and the fleet's
Prometheus included, and P2P still moves KV (UCX_NET_DEVICES=lo is rendered by default for such a fleet). On
Mooncake's transfer engine, the exception is exactly Mooncake's two wildcard listeners per server (opted in with
settings.mooncake_listen_any), and that fleet passes `test basic` and `test matrix`."""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess

import pytest

from p2p_ops.diagnose.doctor.gather import watched_procs
from p2p_ops.facts.listeners import parse_listeners, parse_sessions
from p2p_ops.harness.basic import run_basic
from p2p_ops.lifecycle import procs
from p2p_ops.lifecycle import prometheus as prom
from p2p_ops.spec.settings import MOONCAKE_PORTS
from tests.conftest import mooncake_settings, require_mooncake
from tests.e2e.conftest import running_fleet

pytestmark = pytest.mark.e2e


def fleet_listeners(ctx) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening socket owned by a fleet process or its children."""
    leaders = {}
    for node in ctx.fleet.nodes:
        for st in procs.states(ctx.conn(node), watched_procs(ctx, node)):
            if st.running and st.pid:
                leaders[st.pid] = st.name
    sessions = parse_sessions(subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True,
                                             timeout=30).stdout)
    ss = subprocess.run(["ss", "-Htlnp"], capture_output=True, text=True, timeout=30).stdout
    out = []
    for ln in parse_listeners(ss):
        owner = leaders.get(sessions.get(ln.pid or -1, -1))
        if owner:
            out.append((owner, ln.address, ln.port))
    return out


def test_local_fleet_listens_only_on_loopback_and_still_shares(fleet2, p2pctl):
    ctx = fleet2
    assert "export UCX_NET_DEVICES=lo" in ctx.layout.env("node-a-0").read_text()
    result = run_basic(ctx, chunks=4, max_tokens=4)  # a real NIXL transfer: UCX opened what it needs
    assert result.passed, result.likely_cause
    with_prometheus = shutil.which("prometheus") is not None  # CI installs it (scripts/test_deps.sh)
    try:
        if with_prometheus:
            prom.up(ctx)
        listeners = fleet_listeners(ctx)
        owners = {o for o, _, _ in listeners}
        expected = {"coordinator/coordinator", "node-a-0/server", "node-b-0/engine"}
        assert expected | ({"prometheus/prometheus"} if with_prometheus else set()) <= owners, listeners
        wide = [(o, a, p) for o, a, p in listeners
                if not ipaddress.ip_address(a.strip("[]").split("%")[0]).is_loopback]
        assert not wide, wide
        code, out, err = p2pctl("doctor", "-f", str(ctx.fleet_file), "--json")
        assert not [f for f in json.loads(out)["findings"] if f["check"] == "bind:wide"], out
    finally:
        if with_prometheus:
            prom.down(ctx)


def test_a_mooncake_fleet_listens_on_loopback_but_for_mooncakes_two_per_server_and_shares(tmp_path, p2pctl):
    require_mooncake()
    with running_fleet(tmp_path, name="mooncake", settings=mooncake_settings()) as ctx:
        env_a = ctx.layout.env("node-a-0").read_text()
        assert "export MC_TE_PROTOCOL=tcp" in env_a and "export LMCACHE_P2P_TRANSFER_ENGINE=mooncake_te" in env_a
        for verb in (("test", "basic", "--chunks", "2"), ("test", "matrix", "--chunks", "2")):
            code, out, err = p2pctl(*verb, "-f", str(ctx.fleet_file), "--json")
            assert code == 0, (verb, out[-3000:], err[-2000:])
        listeners = fleet_listeners(ctx)
        wide = [(o, a, p) for o, a, p in listeners
                if not ipaddress.ip_address(a.strip("[]").split("%")[0].replace("*", "::")).is_loopback]
        servers = ("node-a-0/server", "node-b-0/server")
        for server in servers:
            mine = sorted((a, p in MOONCAKE_PORTS) for o, a, p in wide if o == server)
            # The handshake RPC on 0.0.0.0 and the TCP transport on [::] (ss prints "*"), both in Mooncake's range.
            assert mine == [("*", True), ("0.0.0.0", True)], (server, wide)
        assert {o for o, _, _ in wide} == set(servers), wide
        code, out, err = p2pctl("doctor", "-f", str(ctx.fleet_file), "--json")
        assert not [f for f in json.loads(out)["findings"] if f["check"] in ("bind:wide", "mooncake")], out
