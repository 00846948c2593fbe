"""Failover behind a real vllm-router: an engine killed under load costs no failed request beyond the responses
it was streaming at the kill (the router routes around it and back), and its figures come from the router's own
metrics."""

from __future__ import annotations

import pytest

from p2p_ops.harness import faults
from p2p_ops.lifecycle import launch

pytestmark = pytest.mark.e2e

OPTS = faults.FaultOptions.quick()


@pytest.fixture
def fleet(use_policy):
    return use_policy("cache_aware")


def test_engine_killed_behind_the_router_fails_no_request(fleet):
    fig, samples = faults.run_scenario(fleet, "engine_killed_via_router", OPTS)
    print(faults.table_markdown([fig], OPTS))
    x = fig.extra
    assert fig.recovered, fig.note
    assert fig.sent_by_phase["during"] > 0 and {s.url for s in samples} == {fleet.fleet.router_url}
    # A response the dead engine was already streaming cannot be retried by the router (vllm-router 0.1.17 has
    # sent its headers): at most one such cut per client, at the kill. Any other failure is a failover miss.
    cut = {k: v for k, v in x["client_saw"].items() if "Response ended prematurely" in k} \
        if isinstance(x["client_saw"], dict) else {}
    assert fig.failed == sum(cut.values()) <= OPTS.concurrency, (fig.note, x["client_saw"])
    assert fig.failed_by_phase["before"] == fig.failed_by_phase["after"] == 0, fig.failed_by_phase
    # The router marked the dead engine down, stopped sending to it, and sent to it again after the restart.
    assert x["marked_down_after_s"] is not None and x["stopped_sending_after_s"] <= OPTS.hold_s + 1, x
    # Whether it sends to the restarted engine within the short after-phase is the policy's choice (cache_aware
    # keeps prefixes where they are): a figure for the table. What must hold is that the router lists it again.
    rep = launch.wait(fleet, timeout=60)
    assert rep.ready and rep.router.ready, rep.router


def test_server_killed_behind_the_router_fails_no_request(fleet):
    fig, _ = faults.run_scenario(fleet, "peer_server_killed_via_router", OPTS)
    print(faults.table_markdown([fig], OPTS))
    assert fig.recovered and fig.failed == 0, (fig.note, fig.extra["client_saw"])
    # The engine stayed up (it recomputes without its server): the router never took it out of the rotation.
    assert fig.extra["marked_down_after_s"] is None, fig.extra
