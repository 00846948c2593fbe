"""Who still remembers a server about to start (`lifecycle.rejoin`): the coordinator's list and the running
peers' p2p_peers, read from real loopback HTTP servers standing in for them."""

from __future__ import annotations

from p2p_ops.lifecycle import rejoin
from tests.support.fake_connector import serve

A_KNOWS_B = {"p2p_state": "registered", "p2p_peer_count": 1, "p2p_peers": ["node-b-0"]}
A_ALONE = {"p2p_state": "registered", "p2p_peer_count": 0, "p2p_peers": []}


def members(*ids: str) -> dict:
    return {"instances": [{"instance_id": i, "ip": "127.0.0.1", "p2p_advertised_url": "x", "mq_port": 1} for i in ids]}


def urls(ctx) -> dict[str, str]:
    return {i.id: ctx.server_url(n, i) for n, i in ctx.fleet.instances()}


def test_a_killed_server_is_remembered_by_the_coordinator_and_the_peer_that_lists_it(fakes):
    ctx = fakes.fleet(2).ctx
    with serve(ctx.fleet.coordinator_url, {"/instances": members("node-a-0", "node-b-0")}), \
            serve(urls(ctx)["node-a-0"], {"/status": A_KNOWS_B}):
        assert rejoin.remembered(ctx, {"node-b-0"}) == {"node-b-0": ["the coordinator", "node-a-0"]}


def test_a_cleanly_stopped_server_is_remembered_until_its_peers_poll_it_away(fakes):
    ctx = fakes.fleet(2).ctx
    with serve(ctx.fleet.coordinator_url, {"/instances": members("node-a-0")}):
        with serve(urls(ctx)["node-a-0"], {"/status": A_KNOWS_B}):
            assert rejoin.remembered(ctx, {"node-b-0"}) == {"node-b-0": ["node-a-0"]}
        with serve(urls(ctx)["node-a-0"], {"/status": A_ALONE}):
            assert rejoin.remembered(ctx, {"node-b-0"}) == {}


def test_a_running_server_or_a_fleet_without_coordinator_needs_no_wait(fakes):
    ctx = fakes.fleet(2).ctx
    assert rejoin.remembered(ctx, {"node-b-0"}) == {}          # no coordinator answers: nothing lists it
    with serve(ctx.fleet.coordinator_url, {"/instances": members("node-a-0", "node-b-0")}), \
            serve(urls(ctx)["node-a-0"], {"/status": A_KNOWS_B}), serve(urls(ctx)["node-b-0"], {"/status": A_ALONE}):
        assert rejoin.remembered(ctx, {"node-b-0"}) == {}      # it answers: `up` keeps it


def test_wait_forgotten_says_what_is_still_remembered_at_its_deadline(fakes):
    ctx = fakes.fleet(2).ctx
    said: list[str] = []
    with serve(ctx.fleet.coordinator_url, {"/instances": members("node-a-0", "node-b-0")}), \
            serve(urls(ctx)["node-a-0"], {"/status": A_KNOWS_B}):
        left = rejoin.wait_forgotten(ctx, {"node-b-0"}, 0.0, said.append)
    assert left == {"node-b-0": ["the coordinator", "node-a-0"]}
    assert said and "remote_disconnect" in said[-1] and "node-b-0" in said[-1], said

