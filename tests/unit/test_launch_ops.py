"""`up` and `down` on a 2-node fleet whose nodes are scripted fakes (tests/support/fake_connector.py) and whose
readiness probes are answered by real loopback HTTP servers: what runs where, in which order, and what a
failure says."""

from __future__ import annotations

import time

import pytest

from p2p_ops.errors import CouldNotRun
from p2p_ops.facts.logs import log_excerpt_fact
from p2p_ops.facts.paths import NODE_ANSWERS
from p2p_ops.lifecycle import launch
from p2p_ops.spec.units import LAUNCHED_ROLES
from tests.support.fake_connector import connect_error, fact, pid_states, serve_ready, start, stop, unreachable

PIDS = {"coordinator/coordinator": 100, "node-a-0/server": 101, "node-a-0/engine": 102, "node-b-0/server": 201,
        "node-b-0/engine": 202}


def starts(ctx, node, roles=LAUNCHED_ROLES, kept=()):
    return [start(ctx.proc(u), PIDS[u.name], kept=u.name in kept) for u in ctx.units(node, roles)]


def reached_then_started(ctx, node):
    return [fact(NODE_ANSWERS)] + starts(ctx, node)


def test_up_reaches_every_node_before_it_starts_each_unit_on_its_node(fakes):
    fleet = fakes.fleet(2, reached_then_started)
    ctx, said = fleet.ctx, []
    with serve_ready(ctx.units(roles=LAUNCHED_ROLES)):
        launch.up(ctx, progress=said.append, start_timeout=30)
    labels = fleet.labels()
    assert sorted(labels[:2]) == [("node-a", "fact node_answers"), ("node-b", "fact node_answers")]
    assert sorted(labels[2:]) == [("node-a", "start coordinator/coordinator"), ("node-a", "start node-a-0/engine"),
                                  ("node-a", "start node-a-0/server"), ("node-b", "start node-b-0/engine"),
                                  ("node-b", "start node-b-0/server")]
    assert "started node-a-0/engine on node-a" in said and "started coordinator/coordinator on node-a" in said
    assert {f"{name} is up" for name in PIDS} <= set(said)
    assert said[0].startswith("rendered env.sh for 2 instance(s)")


def test_up_says_kept_when_the_process_already_ran(fakes):
    fleet = fakes.fleet(2, lambda ctx, node: [fact(NODE_ANSWERS)] + starts(ctx, node, kept={"node-a-0/engine"}))
    said: list[str] = []
    with serve_ready(fleet.ctx.units(roles=LAUNCHED_ROLES)):
        launch.up(fleet.ctx, progress=said.append, start_timeout=30)
    assert "started node-a-0/server on node-a" in said
    [kept] = [s for s in said if "node-a-0/engine on" in s]
    assert kept.startswith("kept node-a-0/engine on node-a") and "pid 102" in kept and "started" not in kept


@pytest.mark.parametrize("down", [("node-b",), ("node-a", "node-b")])
def test_an_unreachable_node_fails_up_with_one_line_per_host_and_nothing_starts(fakes, down):
    def script(ctx, node):
        if node.name in down:
            return [fact(NODE_ANSWERS, answer=lambda _: connect_error(node.name))]
        return [fact(NODE_ANSWERS)]

    fleet = fakes.fleet(2, script)
    with pytest.raises(CouldNotRun) as err:
        launch.up(fleet.ctx, start_timeout=5)
    head, *lines = str(err.value).splitlines()
    assert head == "cannot reach every node, so nothing was started:"
    assert lines == [f"- {name}: {name} (root@{name}:22): unreachable: connection refused; start sshd there"
                     for name in down]
    assert {label for _, label in fleet.labels()} == {"fact node_answers"}  # no start script ran anywhere


def test_up_node_and_role_starts_only_that_unit(fakes):
    fleet = fakes.fleet(2, {"node-b": []})
    ctx = fleet.ctx
    server = ctx.unit("server", "node-b-0")
    fleet["node-b"].expect(fact(NODE_ANSWERS), start(ctx.proc(server), 201))
    said: list[str] = []
    with serve_ready([server]):
        launch.up(ctx, progress=said.append, only="node-b", roles=("server",), start_timeout=30)
    assert fleet["node-a"].calls == []  # not even reached: only node-b was asked for
    assert fleet.labels() == [("node-b", "fact node_answers"), ("node-b", "start node-b-0/server")]
    assert [s for s in said if s.startswith(("started", "kept"))] == ["started node-b-0/server on node-b"]


def test_up_node_re_renders_that_node_alone_and_keeps_a_hand_edit_elsewhere(fakes):
    """`up --node node-b` once re-rendered every instance's env.sh, undoing a hand edit on node-a (issue 42)."""
    fleet = fakes.fleet(2, {"node-b": []})
    ctx = fleet.ctx
    launch.render(ctx)
    edited = ctx.layout.env("node-a-0")
    edited.write_text(edited.read_text() + "export HAND_EDIT=1\n")
    before_b = ctx.layout.env("node-b-0").read_text()
    ctx.layout.env("node-b-0").write_text(before_b + "export STALE=1\n")
    server = ctx.unit("server", "node-b-0")
    fleet["node-b"].expect(fact(NODE_ANSWERS), start(ctx.proc(server), 201))
    said: list[str] = []
    with serve_ready([server]):
        launch.up(ctx, progress=said.append, only="node-b", roles=("server",), start_timeout=30)
    assert "export HAND_EDIT=1" in edited.read_text()
    assert ctx.layout.env("node-b-0").read_text() == before_b
    assert said[0].startswith("rendered env.sh for 1 instance(s)"), said


def _up_with_a_silent_engine(fakes, engine_state, log: str):
    """Every unit answers its readiness probe but node-b-0's engine, whose pidfile says `engine_state`."""
    fleet = fakes.fleet(2, reached_then_started)
    ctx = fleet.ctx
    engine = ctx.proc("engine", "node-b-0")
    fleet["node-b"].expect(pid_states([engine], {engine.name: engine_state}, repeat=True),
                           fact(log_excerpt_fact(engine.log, 10), log))
    with serve_ready([u for u in ctx.units(roles=LAUNCHED_ROLES) if u.name != engine.name]):
        with pytest.raises(CouldNotRun) as err:
            launch.up(ctx, start_timeout=1)
    return engine, str(err.value)


def test_a_unit_that_never_answers_fails_up_naming_it_its_node_and_its_log(fakes):
    engine, text = _up_with_a_silent_engine(fakes, 202, "loading weights\nstill loading")
    assert text.startswith("the fleet failed to start:\n")
    assert f"- node-b-0/engine on node-b (127.0.0.1) did not answer within 1 s; from {engine.log}:" in text
    assert "\n    loading weights\n    still loading\n" in text
    assert text.endswith("Other processes are left running; `p2pctl down` stops them all.")
    assert "node-a-0" not in text


def test_a_unit_that_exits_during_start_fails_up_with_its_error_lines(fakes):
    log = "Traceback (most recent call last):\nValueError: no port\n@@p2p-log-tail\nstarting\nValueError: no port"
    engine, text = _up_with_a_silent_engine(fakes, "dead 202", log)
    assert f"- node-b-0/engine on node-b (127.0.0.1) exited during start; from {engine.log}:" in text
    assert "    errors:\n    Traceback (most recent call last):\n    last lines:\n    starting\n" in text


def test_up_has_an_overall_deadline(fakes):
    """Slow remote steps (each within its own timeout) cannot add up beyond `up`'s deadline."""
    def slow(_command):
        time.sleep(0.3)  # a slow node
        return ""

    fleet = fakes.fleet(2, {"node-a": [fact(NODE_ANSWERS, answer=slow)], "node-b": [fact(NODE_ANSWERS)]})
    with pytest.raises(CouldNotRun, match="overall deadline of 0 s"):
        launch.up(fleet.ctx, deadline_s=0.2)
    assert {label for _, label in fleet.labels()} == {"fact node_answers"}  # nothing started after the deadline


def _with_router(data: dict) -> None:
    # The router's own default ports, shifted with the plan (coordinator + 90 is the fleet's Prometheus port).
    port = data["coordinator"]["port"] - 9300 + 8200
    data["router"] = {"enabled": True, "policy": "round_robin", "port": port, "prometheus_port": port + 1}


def test_down_stops_the_router_engines_servers_and_coordinator_in_that_order(fakes):
    outcomes = {"node-b-0/engine": "killed"}
    fleet = fakes.fleet(2, lambda ctx, node: [stop(ctx.proc(u), outcomes.get(u.name, "stopped"))
                                              for u in ctx.units(node, LAUNCHED_ROLES)], edit=_with_router)
    said: list[str] = []
    outcome = launch.down(fleet.ctx, progress=said.append)
    roles = [label.split("/")[-1] for _, label in fleet.labels()]
    assert roles == ["router", "engine", "engine", "server", "server", "coordinator"]
    assert outcome == {"router/router": "stopped", "node-a-0/engine": "stopped", "node-b-0/engine": "killed",
                       "node-a-0/server": "stopped", "node-b-0/server": "stopped",
                       "coordinator/coordinator": "stopped"}
    assert "node-b-0/engine: killed" in said


def test_down_reports_a_node_it_cannot_reach_and_stops_the_others(fakes):
    fleet = fakes.fleet(2, lambda ctx, node: [unreachable(node.name)] if node.name == "node-b" else
                        [stop(ctx.proc(u)) for u in ctx.units(node, LAUNCHED_ROLES)])
    outcome = launch.down(fleet.ctx)
    assert outcome["node-a-0/engine"] == outcome["coordinator/coordinator"] == "stopped"
    assert outcome["node-b/engines"].startswith("error: node-b (root@node-b:22): unreachable")
    assert outcome["node-b/servers"].startswith("error: node-b (root@node-b:22): unreachable")


def test_down_of_one_role_on_one_node_touches_nothing_else(fakes):
    fleet = fakes.fleet(2, {"node-a": []})
    ctx = fleet.ctx
    fleet["node-b"].expect(stop(ctx.proc("server", "node-b-0"), "none"))
    assert launch.down(ctx, only="node-b", roles=("server",)) == {"node-b-0/server": "none"}
    assert fleet["node-a"].calls == []


def test_running_downs_the_fleet_when_up_fails(fakes):
    """launch.running: a failed `up` still ends in `down` on every node (nothing it started outlives it)."""
    def script(ctx, node):
        answers = [fact(NODE_ANSWERS, answer=lambda _: connect_error(node.name))] if node.name == "node-b" else \
            [fact(NODE_ANSWERS)]
        return answers + [stop(ctx.proc(u)) for u in ctx.units(node, LAUNCHED_ROLES)]

    fleet = fakes.fleet(2, script)
    with pytest.raises(CouldNotRun, match="cannot reach every node"):
        with launch.running(fleet.ctx, timeout=5):
            raise AssertionError("the block must not run when up failed")
    stopped = sorted(label for _, label in fleet.labels() if label.startswith("stop"))
    assert stopped == sorted(f"stop {u.name}" for u in fleet.ctx.units(roles=LAUNCHED_ROLES))
