"""A refusal of a fleet that is not ready names the judge's cause for the instances it names (issue 28: the
diagnosis benchmark's chunk-size case had `test basic` and `wait` say only "node-c-0: engine is degraded")."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from p2p_ops.cli.common import judged
from p2p_ops.diagnose import judge as judge_mod
from p2p_ops.diagnose.findings import Finding
from p2p_ops.errors import CheckFailed, CouldNotRun

CTX = SimpleNamespace(fleet=SimpleNamespace(instances=lambda: [(None, SimpleNamespace(id="node-a-0")),
                                                                (None, SimpleNamespace(id="node-c-0"))]))
CHUNK = Finding("error", "agree:chunk_size", "node-c-0", "node-c-0=512 (the odd one out)",
                "peers disagree on chunk_size", "restart node-c-0's server from fleet.yaml")
DEGRADED = Finding("error", "engine_degraded", "node-c-0/engine", "lmcache refused", "engine degraded", "see above")


def _judge(findings):
    return lambda ctx: judge_mod.Judgement(findings, ["peers agree on model=m"])


@pytest.mark.parametrize("error", [CouldNotRun, CheckFailed])
def test_the_refusal_gains_the_judges_cause_for_the_instance_it_names(monkeypatch, error):
    monkeypatch.setattr(judge_mod, "judge", _judge([CHUNK, DEGRADED]))
    with pytest.raises(error) as got, judged(CTX):
        raise error("fleet 'f' is not ready (node-c-0: engine is degraded)")
    text = str(got.value)
    assert text.startswith("fleet 'f' is not ready (node-c-0: engine is degraded)\nlikely cause: node-c-0: peers")
    assert "fix: restart node-c-0's server" in text


def test_without_a_confirmed_cause_the_refusal_stands_as_it_was(monkeypatch):
    monkeypatch.setattr(judge_mod, "judge", _judge([]))
    with pytest.raises(CouldNotRun) as got, judged(CTX):
        raise CouldNotRun("fleet 'f' is not ready (node-c-0: engine is degraded)")
    assert str(got.value) == "fleet 'f' is not ready (node-c-0: engine is degraded)"
