"""Mooncake's transfer engine across two network-namespace hosts (each its own interface and address): a fleet on
settings.transfer_engine mooncake_te, launched over SSH, passes the cross-node proof (`test basic`).

Needs root and `ip netns` (skipped with the reason otherwise), and a Mooncake that imports in the project venv
(skipped otherwise, failed under P2P_REQUIRE_MOONCAKE=1).
"""

from __future__ import annotations

import pytest

from bench import testbed
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from tests.conftest import require_mooncake
from tests.multinode.conftest import leftovers, needs_engine, needs_sshd, write_ssh_fleet
from tests.multinode.test_netns_counters import _netns_allowed

pytestmark = [pytest.mark.multinode, needs_sshd, needs_engine]


def test_a_mooncake_fleet_shares_across_two_namespaced_hosts(tmp_path):
    why = _netns_allowed()
    if why:
        pytest.skip(why)
    require_mooncake()
    from p2p_ops.harness.basic import run_basic

    with testbed.running(2, testbed.private_dir(), netns=True) as tb:
        settings = {"transfer_engine": "mooncake_te", "mooncake_listen_any": True}
        fleet_file = write_ssh_fleet(tb, tmp_path, "mcns", settings=settings)
        ctx = FleetContext.load(fleet_file)
        try:
            launch.up(ctx)
            rep = launch.wait(ctx, timeout=180)
            assert all(i.server.peer_count == 1 for i in rep.instances)
            env_h1 = (tmp_path / "run" / "h1" / "mcns" / "h1-0" / "env.sh").read_text()
            assert "export MC_TE_PROTOCOL=tcp" in env_h1 and "LMCACHE_P2P_TRANSFER_ENGINE=mooncake_te" in env_h1
            result = run_basic(ctx, a="h1-0", b="h2-0")
            assert result.passed, ([c for c in result.checks if not c.ok], result.likely_cause)
            assert result.numbers["p2p_loads_b"] > 0 and result.numbers["kv_bytes_pulled_b"] > 0
        finally:
            launch.down(ctx)
            ctx.close()
    assert leftovers(str(tmp_path / "run")) == []
