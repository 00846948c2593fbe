"""The judge of a fleet's state: the doctor's findings about the instances involved, ranked by how specific their
evidence is (the catalogue's `specificity`), or "no cause confirmed" with what was seen.

`test basic`, `test matrix` and the decision tree's likely cause all read it, so they cannot name different
causes for one fleet. What a verb measured about its own request (the request failed, it hit the node's own
L1, the answer differed) stays with that verb; every cause about the fleet comes from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Collection, Optional

from p2p_ops.diagnose.doctor import FleetFacts, run
from p2p_ops.diagnose.findings import Finding, Report
from p2p_ops.diagnose.judge.catalogue import NOT_A_MISS, check_scope, specificity
from p2p_ops.lifecycle.context import FleetContext


def _names(subject: str, about: Collection[str]) -> bool:
    """The finding's subject names one of `about` as a whole word (node-b does not match node-b-0)."""
    return any(re.search(rf"(?<![\w-]){re.escape(a)}(?![\w-])", subject) for a in about)


@dataclass
class Judgement:
    findings: list[Finding]                       # the doctor's problems, most specific first
    seen: list[str] = field(default_factory=list)  # what it found fine, for an answer that confirms nothing

    def top(self, about: Collection[str] = ()) -> Optional[Finding]:
        """The most specific finding about these instances/nodes (or the whole fleet); all when `about` is empty."""
        for f in self.findings:
            if not about or f.subject in ("coordinator", "fleet") or _names(f.subject, about):
                return f
        return None

    def why(self, instance: str) -> Optional[str]:
        """What put an instance in the state another verb saw (its server down, its engine degraded, not among its
        peers' peers): the cause about it when that evidence is more specific than a state (rank above 1); None
        when the state is all the evidence says."""
        f = self.top([instance])
        return self.cause([instance]) if f is not None and specificity(f"doctor:{f.check}") > 1 else None

    def cause(self, about: Collection[str] = ()) -> str:
        f = self.top(about)
        if f is not None:
            return f"{f.subject}: {f.message} (seen: {f.value}); fix: {f.fix} (scope: {check_scope(f.check)})"
        return "no cause confirmed; evidence seen: " + ("; ".join(self.seen[:6]) or "nothing")


def judgement(facts: FleetFacts, report: Report) -> Judgement:
    """Rank a doctor report (pure): specificity, then errors before warnings, then the doctor's own order."""
    problems = [f for f in report.problems if f.check not in NOT_A_MISS]
    ranked = sorted(problems, key=lambda f: (-specificity(f"doctor:{f.check}"), f.severity != "error"))
    seen = [f"{f.check} {f.subject}: {f.message}" for f in report.findings if f.severity == "info"]
    agreed = report.facts.get("agreed") or {}
    if agreed:
        seen.insert(0, "peers agree on " + ", ".join(f"{k}={v}" for k, v in sorted(agreed.items())))
    if facts.any_running and not any(f.check in ("p2p_state", "registration") for f in problems):
        seen.append("every running server is registered with the coordinator")
    return Judgement(ranked, seen)


def judge(ctx: FleetContext, reach: bool = True) -> Judgement:
    """Gather the fleet's evidence once (the doctor's read) and rank what it found."""
    facts, report = run(ctx, reach=reach)
    return judgement(facts, report)
