"""A refusal of a fleet that is not ready names the judge's cause for the instances it names (issue 28: the
diagnosis benchmark's chunk-size case had `test basic` and `wait` say only "node-c-0: engine is degraded")."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from p2p_ops.cli.common import refusal_with_cause
from p2p_ops.diagnose import judge as judge_mod
from p2p_ops.diagnose.doctor.model import FleetFacts
from p2p_ops.diagnose.findings import Finding, Report
from p2p_ops.errors import CheckFailed, CouldNotRun

CTX = SimpleNamespace(fleet=SimpleNamespace(instances=lambda: [
    (SimpleNamespace(name=f"node-{x}"), SimpleNamespace(id=f"node-{x}-0")) for x in "abc"]))
CHUNK = Finding("error", "agree:chunk_size", "node-c-0", "node-c-0=512 (the odd one out)",
                "peers disagree on chunk_size", "restart node-c-0's server from fleet.yaml")
DEGRADED = Finding("error", "engine_degraded", "node-c-0/engine", "lmcache refused", "engine degraded", "see above")


def _judge(findings):
    return lambda ctx: judge_mod.Judgement(findings, ["peers agree on model=m"])


@pytest.mark.parametrize("error", [CouldNotRun, CheckFailed])
def test_the_refusal_gains_the_judges_cause_for_the_instance_it_names(monkeypatch, error):
    monkeypatch.setattr(judge_mod, "judge", _judge([CHUNK, DEGRADED]))
    with pytest.raises(error) as got, refusal_with_cause(CTX):
        raise error("fleet 'f' is not ready (node-c-0: engine is degraded)")
    text = str(got.value)
    assert text.startswith("fleet 'f' is not ready (node-c-0: engine is degraded)\nlikely cause: node-c-0: peers")
    assert "fix: restart node-c-0's server" in text


def test_without_a_confirmed_cause_the_refusal_stands_as_it_was(monkeypatch):
    monkeypatch.setattr(judge_mod, "judge", _judge([]))
    with pytest.raises(CouldNotRun) as got, refusal_with_cause(CTX):
        raise CouldNotRun("fleet 'f' is not ready (node-c-0: engine is degraded)")
    assert str(got.value) == "fleet 'f' is not ready (node-c-0: engine is degraded)"


def test_a_peer_missing_from_the_refusal_is_explained_by_what_its_node_cannot_reach(monkeypatch):
    """Issue 28's advertise_url case: node-c-0 advertises 127.0.0.1:9; the refusal names node-a-0 and node-b-0,
    which see one peer. Their peer count is the state; node-a failing to reach node-c-0's advertised URL is why
    (the doctor's reach finding is about the node)."""
    peers = Finding("warn", "peer_count", "node-a-0", "1 peer(s) ['node-b-0']",
                    "node-a-0 sees 1 peer(s), 2 other server(s) are running", "wait one poll interval")
    reach = Finding("error", "reach", "node-a -> node-c-0 p2p (advertised)", "127.0.0.1:9",
                    "node node-a cannot open a TCP connection to node-c-0 p2p (advertised) at 127.0.0.1:9",
                    "check the advertised address")
    found = judge_mod.judgement(FleetFacts("f", "embedded", "http://c", "node-a"), Report("doctor", [peers, reach]))
    monkeypatch.setattr(judge_mod, "judge", lambda ctx: found)
    with pytest.raises(CouldNotRun) as got, refusal_with_cause(CTX):
        raise CouldNotRun("fleet 'f' is not ready (node-a-0: sees 1 peer(s) ['node-b-0'], expected 2)")
    assert "likely cause: node-a -> node-c-0 p2p (advertised): node node-a cannot open" in str(got.value)
