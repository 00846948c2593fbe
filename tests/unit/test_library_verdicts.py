"""The verdicts `p2pctl` prints are the library's: each module judges its own results (a stop that failed, a
port plan out of range, a frame source, a probe's exit code) and the CLI only renders them."""

from __future__ import annotations

import socket

import pytest

from p2p_ops.causes import verdict
from p2p_ops.diagnose.nixl.probe import Failure, ProbeResult
from p2p_ops.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, BadInput, CouldNotRun
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle import prometheus as prom
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.preflight.probe import NodeProbe, fleet_exit_code, fleet_ok
from p2p_ops.observe import grafana, monitor
from p2p_ops.spec import ports, starter
from tests.conftest import write_local_fleet


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ctx(tmp_path):
    # Its own Prometheus port: another fleet's Prometheus on the default port must not answer for this one.
    fleet = write_local_fleet(tmp_path / "fleet.yaml", 2, name="verdicts", prometheus={"port": free_port()})
    with FleetContext.load(str(fleet), None) as c:
        yield c


def test_down_errors_are_the_stops_that_failed():
    outcome = {"node-a-0/engine": "stopped", "node-b/servers": "error: node-b unreachable",
               "coordinator/coordinator": "none", "router/router": "error: timed out"}
    assert launch.down_errors(outcome) == ["node-b/servers", "router/router"]
    assert launch.down_errors({"node-a-0/server": "stopped"}) == []


def test_a_port_offset_that_leaves_the_port_range_is_refused():
    ports.check_local_base(ports.default_base(1000), 2, 1000)
    with pytest.raises(BadInput, match=r"--port-offset 60000: puts ports out of range"):
        ports.check_local_base(ports.default_base(60000), 2, 60000)
    with pytest.raises(BadInput, match=r"--port-offset -6000"):
        ports.check_local_base(ports.default_base(-6000), 2, -6000)


def test_vllm_starter_names_what_is_missing_with_the_command_that_makes_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    notes = starter.vllm_missing("models/tiny", ".venv-vllm")
    assert notes == [f"{tmp_path / 'models/tiny/config.json'} does not exist yet; make it with "
                     "`p2pctl make-model models/tiny`",
                     f"{tmp_path / '.venv-vllm/bin/python'} does not exist yet; make it with `make setup-vllm`"]
    (tmp_path / "models/tiny").mkdir(parents=True)
    (tmp_path / "models/tiny/config.json").write_text("{}")
    (tmp_path / ".venv-vllm/bin").mkdir(parents=True)
    (tmp_path / ".venv-vllm/bin/python").write_text("")
    assert starter.vllm_missing("models/tiny", ".venv-vllm") == []


def test_starter_yaml_says_what_may_differ_across_peers_then_loads():
    import yaml

    text = starter.starter_yaml(starter.local_fleet(2))
    assert text.startswith("# Fleet spec written by `p2pctl init`")
    assert "instances[].settings" in text and yaml.safe_load(text)["nodes"][1]["name"] == "node-b"


def test_prometheus_state_of_a_fleet_without_one(ctx, monkeypatch):
    assert prom.state(ctx) == "not running"
    # Its process runs but /-/ready does not answer yet (starting, or wedged): not "not running".
    monkeypatch.setattr(prom, "running", lambda c: True)
    assert prom.state(ctx) == "not ready"


def test_grafana_window_must_be_a_prometheus_duration():
    for ok in ("30s", "1m", "5m", "2h"):
        grafana.check_window(ok)
    for bad in ("", "m", "1d", "1.5m", "5 m", "five"):
        with pytest.raises(BadInput, match="give a Prometheus duration"):
            grafana.check_window(bad)


def test_monitor_rate_window_is_the_interval_within_half_a_second_and_five():
    assert [monitor.rate_window(s) for s in (0.1, 0.5, 3.0, 5.0, 60.0)] == [0.5, 0.5, 3.0, 5.0, 5.0]


def test_monitor_frames_without_prometheus(ctx):
    with pytest.raises(CouldNotRun, match="p2pctl prometheus up"):
        next(monitor.frames(ctx, "prometheus", 1.0, 1))
    frames, source = next(monitor.frames(ctx, "auto", 0.1, 1))
    assert source == "direct /metrics" and sorted(f.instance for f in frames) == ["node-a-0", "node-b-0"]
    assert not monitor.all_up(frames)  # a stopped fleet answers no scrape
    assert len(list(monitor.frames(ctx, "direct", 0.1, 0))) == 1  # always one frame to show


def test_all_up_needs_every_instance():
    up, down = monitor.NodeFrame("a", "n", True), monitor.NodeFrame("b", "n", False)
    assert monitor.all_up([up, up]) and not monitor.all_up([up, down])


def _failure(cause: str) -> Failure:
    return Failure("initiator", "read", "nixlBackendError", "NIXL_ERR_BACKEND", verdict(cause, "the initiator"))


def test_nixl_probe_exit_code():
    assert ProbeResult(True, {}, 1, 1).exit_code == EXIT_OK
    assert ProbeResult(False, {}, 1, 1, failure=_failure("tls_unavailable")).exit_code == EXIT_CHECK_FAILED
    assert ProbeResult(False, {}, 1, 1, failure=_failure("nixl_missing")).exit_code == EXIT_BAD_INPUT


def test_node_probe_verdicts_and_the_fleet_exit_code():
    ok = NodeProbe("a", "127.0.0.1", "local", warnings=[verdict("memlock", "a", ("probe", "memlock limited"))])
    bad = NodeProbe("b", "127.0.0.1", "local", problems=[verdict("versions_differ", "b", (
        "probe", "lmcache 0.5.5 here, 0.5.6 on a"), package="lmcache")])
    gone = NodeProbe("c", "10.0.0.3", "ssh", error="c (root@10.0.0.3:22): unreachable")
    assert [p.verdict for p in (ok, bad, gone)] == ["ok", "problems", "unreachable"]
    assert bad.to_json()["verdict"] == "problems" and bad.to_json()["problems"][0]["id"] == "versions_differ"
    assert fleet_ok({"a": ok}) and fleet_exit_code({"a": ok}) == EXIT_OK
    assert not fleet_ok({"a": ok, "b": bad}) and fleet_exit_code({"a": ok, "b": bad}) == EXIT_CHECK_FAILED
    assert fleet_exit_code({"a": ok, "b": bad, "c": gone}) == EXIT_BAD_INPUT
