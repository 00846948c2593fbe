"""Faults under load on a real local fleet: each scenario is a test, bounded in time, with its figures.

On the shared healthy fleet (tests/e2e/conftest.py): each scenario leaves it healthy again (that is what it
measures).
"""

from __future__ import annotations

import json

import pytest

from p2p_ops.harness import basic, faults

pytestmark = pytest.mark.e2e

OPTS = faults.FaultOptions.quick()


@pytest.fixture
def fleet(fleet2):
    return fleet2


def _check(fig: faults.Figures) -> None:
    print(faults.table_markdown([fig], OPTS))  # the figures, for whoever reads the log (-s)
    assert fig.recovered, fig
    assert fig.sent_by_phase["before"] > 0 and fig.sent_by_phase["during"] > 0 and fig.sent_by_phase["after"] > 0
    assert fig.failed_by_phase["before"] == 0, fig
    assert fig.recovered_after_fault_s is not None and fig.recovered_after_fault_s >= OPTS.hold_s
    # LMCache's in-flight P2P work was sampled under load and after it (reported; see faults/drain.py).
    assert fig.lookups_drained is not None and fig.lookups_inflight_before is not None, fig


def test_peer_server_killed_recompute_serves_every_request(fleet):
    fig, samples = faults.run_scenario(fleet, "peer_server_killed", OPTS)
    _check(fig)
    assert fig.unexpected_failures == 0, fig.note  # B's engine recomputes while its server is gone
    # B's server was started again only once A had dropped its link to the killed one (lifecycle.rejoin): A pulls
    # from it. Started at once, A's NIXL link stayed the dead process's (NIXL_ERR_REMOTE_DISCONNECT), and A never
    # pulled from B again; the router tier's round-robin test met that after its server-kill test.
    (_, a), (_, b) = fleet.fleet.instances()[:2]
    res = basic.run_basic(fleet, a=b.id, b=a.id, chunks=4, max_tokens=4)
    assert res.passed, (res.likely_cause, [c for c in res.checks if not c.ok])


def test_coordinator_killed_and_restarted(fleet):
    fig, _ = faults.run_scenario(fleet, "coordinator_restart", OPTS)
    _check(fig)
    assert fig.unexpected_failures == 0, fig.note


def test_engine_killed_fails_only_its_own_requests_and_the_cli_writes_the_table(fleet, p2pctl):
    """Through `p2pctl test faults`: its run folder's figures are the scenario's (one run serves both checks)."""
    code, out, err = p2pctl("test", "faults", "--quick", "--scenarios", "engine_killed", "-f", str(fleet.fleet_file))
    assert code == 0, err  # the scenario recovered with no failure but its own engine's: a PASS
    [table] = sorted(fleet.layout.tests.glob("*-faults/faults.md"))[-1:]
    assert "| engine_killed |" in table.read_text() and "lookups drained" in table.read_text()
    data = json.loads((table.parent / "faults.json").read_text())
    fig = faults.Figures(**data["scenarios"][0])
    assert fig.scenario == "engine_killed" and fig.sent > 0
    _check(fig)
    assert fig.unexpected_failures == 0, fig.note
    assert set(fig.failed_urls) <= {fleet.engine_url(*fleet.fleet.instances()[1])}
    assert (table.parent / "faults-engine_killed-requests.csv").read_text().startswith("stage,level,instance")
