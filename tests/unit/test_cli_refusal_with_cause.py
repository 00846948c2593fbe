"""A refusal of a fleet that is not ready names the judge's cause for the instances it names (issue 28: the
diagnosis benchmark's chunk-size case had `test basic` and `wait` say only "node-c-0: engine is degraded"), in
words and as the verdict its --json carries."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from p2p_ops.causes import verdict
from p2p_ops.cli.common import refusal_with_cause
from p2p_ops.diagnose import judge as judge_mod
from p2p_ops.diagnose.doctor.model import FleetFacts
from p2p_ops.diagnose.findings import Finding, Report
from p2p_ops.errors import CheckFailed, CouldNotRun

CTX = SimpleNamespace(fleet=SimpleNamespace(instances=lambda: [
    (SimpleNamespace(name=f"node-{x}"), SimpleNamespace(id=f"node-{x}-0")) for x in "abc"]))
CHUNK = Finding("error", "agree:chunk_size", "node-c-0", "node-c-0=512 (the odd one out)",
                "peers disagree on chunk_size", verdict("chunk_size_differs", "node-c-0", ("doctor:agree:chunk_size",
                                                        "node-c-0=512"), want=256, restart="p2pctl down --node node-c"))
DEGRADED = Finding("error", "engine_degraded", "node-c-0/engine", "lmcache refused", "engine degraded",
                   verdict("engine_degraded", "node-c-0/engine", instance="node-c-0"))


def _judge(findings):
    return lambda ctx: judge_mod.Judgement(findings, ["peers agree on model=m"])


@pytest.mark.parametrize("error", [CouldNotRun, CheckFailed])
def test_the_refusal_gains_the_judges_cause_for_the_instance_it_names(monkeypatch, error):
    monkeypatch.setattr(judge_mod, "judge", _judge([CHUNK, DEGRADED]))
    with pytest.raises(error) as got, refusal_with_cause(CTX):
        raise error("fleet 'f' is not ready (node-c-0: engine is degraded)")
    text = str(got.value)
    assert text.startswith("fleet 'f' is not ready (node-c-0: engine is degraded)\nlikely cause: node-c-0: peers")
    assert "fix: one settings.chunk_size in fleet.yaml" in text and "(chunk_size=256): p2pctl down --node node-c" in text
    assert got.value.cause.id == "chunk_size_differs" and got.value.cause.subject == "node-c-0"


def test_without_a_confirmed_cause_the_refusal_stands_as_it_was(monkeypatch):
    monkeypatch.setattr(judge_mod, "judge", _judge([]))
    with pytest.raises(CouldNotRun) as got, refusal_with_cause(CTX):
        raise CouldNotRun("fleet 'f' is not ready (node-c-0: engine is degraded)")
    assert str(got.value) == "fleet 'f' is not ready (node-c-0: engine is degraded)" and got.value.cause is None


def test_a_peer_missing_from_the_refusal_is_explained_by_what_its_node_cannot_reach(monkeypatch):
    """Issue 28's advertise_url case: node-c-0 advertises 127.0.0.1:9; the refusal names node-a-0 and node-b-0,
    which see one peer. Their peer count is the state; node-a failing to reach node-c-0's advertised URL is why
    (the doctor's reach finding is about the node)."""
    peers = Finding("warn", "peer_count", "node-a-0", "1 peer(s) ['node-b-0']",
                    "node-a-0 sees 1 peer(s), 2 other server(s) are running", verdict("peer_not_connected", "node-a-0"))
    reach = Finding("error", "reach", "node-a -> node-c-0 p2p (advertised)", "127.0.0.1:9",
                    "node node-a cannot open a TCP connection to node-c-0 p2p (advertised) at 127.0.0.1:9",
                    verdict("peer_unreachable", "node-a -> node-c-0 p2p (advertised)"))
    found = judge_mod.judgement(FleetFacts("f", "embedded", "http://c", "node-a"), Report("doctor", [peers, reach]))
    monkeypatch.setattr(judge_mod, "judge", lambda ctx: found)
    with pytest.raises(CouldNotRun) as got, refusal_with_cause(CTX):
        raise CouldNotRun("fleet 'f' is not ready (node-a-0: sees 1 peer(s) ['node-b-0'], expected 2)")
    assert "likely cause: node-a -> node-c-0 p2p (advertised): node node-a cannot open" in str(got.value)
    assert got.value.cause.id == "peer_unreachable"
