"""The one catalogue of causes: every cause says what confirms it, what rules it out, its fix and the fix's scope,
and every reason a verb names is one of its causes."""

from __future__ import annotations

import pytest

from p2p_ops.diagnose.judge import CAUSES, MEASURED, UNCONFIRMED, measured_cause
from p2p_ops.diagnose.judge.catalogue import SCOPES, Cause


def test_every_cause_names_its_evidence_its_fix_and_a_known_scope():
    for c in CAUSES.values():
        assert c.means and c.confirms and c.rules_out and c.fix, c
        assert c.scope in SCOPES, c


def test_a_scope_outside_the_known_ones_is_refused_with_the_cause_named():
    with pytest.raises(ValueError, match="cause x: scope must be one of"):
        Cause("x", "m", "c", "r", "f", "everywhere")


def test_measured_misses_and_unconfirmed_reasons_are_causes_of_the_catalogue():
    assert set(MEASURED) <= set(CAUSES) and set(UNCONFIRMED) <= set(CAUSES)
    assert {"cold", "not_confirmed", "holdings_unknown", "not_held"} <= set(UNCONFIRMED)
    assert "evicted" not in UNCONFIRMED and "prompt_differs" not in UNCONFIRMED
    assert measured_cause("l1_oom") == ("l1_oom: L1 cannot hold the restore buffers: raise settings.l1_size_gb or "
                                        "lower the eviction watermark")
    assert measured_cause("cold").endswith("a fallback reason this toolkit does not know")


def test_basic_and_matrix_name_what_their_requests_prove_with_one_rule_set():
    """Issue 28: `test basic` and `test matrix` each had their own words and order for a failed request, an own-L1
    hit and a differing answer; both now read `judge.request`, so one measurement gives one cause."""
    from p2p_ops.diagnose.judge.request import request_cause
    assert request_cause("b-0", "a-0", failed_on="a-0", error="ConnectionError").startswith(
        "request_failed: the request to a-0 failed (ConnectionError)")
    assert request_cause("b-0", "a-0", cached_tokens=256, own_l1=True, identical=False).startswith("own_l1: b-0")
    assert request_cause("b-0", "a-0", cached_tokens=256, identical=False).startswith("answer_differs: b-0")
    assert request_cause("b-0", "a-0", cached_tokens=256, mismatch_tokens=3).startswith("kv_mismatch")
    assert request_cause("b-0", "a-0", cached_tokens=0, identical=False) == ""
    for cause in ("request_failed", "own_l1", "answer_differs", "kv_mismatch"):
        assert cause in CAUSES


def test_the_fleet_judges_cause_says_the_scope_of_its_fix():
    from p2p_ops.diagnose.findings import Finding
    from p2p_ops.diagnose.judge import Judgement
    agree = Finding("error", "agree:chunk_size", "node-a-0, node-b-0", "256 vs 512", "chunk_size differs", "one value")
    memlock = Finding("error", "memlock", "node-b", "64 KiB", "memlock too low", "ulimit -l unlimited")
    down = Finding("error", "process", "node-b-0/server", "dead", "server is dead", "p2pctl up")
    assert Judgement([agree]).cause().endswith("fix: one value (scope: fleet)")
    assert Judgement([memlock]).cause().endswith("(scope: node)")
    assert Judgement([down]).cause().endswith("(scope: instance)")


def test_every_cause_of_the_catalogue_is_one_a_rule_can_name():
    """No dead entry: each cause is named by a rule of the judge (or explain's summary, or the doctor's start-up
    refusals), or is a reason LMCache's own counters report (MEASURED)."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[2] / "p2p_ops" / "diagnose"
    rules = "".join((root / p).read_text() for p in ("judge/chunk.py", "judge/margin.py", "judge/request.py",
                                                     "explain/answer.py", "doctor/checks.py"))
    unused = [c for c in CAUSES if c not in MEASURED and f'"{c}"' not in rules and f"{c}:" not in rules]
    assert not unused
