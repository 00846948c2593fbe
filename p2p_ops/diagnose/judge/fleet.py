"""The judge of a fleet's state: the doctor's findings about the instances involved, ranked by the catalogue's one
ranking (`causes.rank_key`), or "no cause confirmed" with what was seen.

`test basic`, `test matrix`, explain, the refusals of `wait` and the tests, and the bundle all read it, so they
cannot name different causes for one fleet. What a verb measured about its own request (the request failed, it
hit the node's own L1, the answer differed) is `request.py`'s; every cause about the fleet comes from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Callable, Collection, Optional, cast

from p2p_ops.causes import CAUSES, Verdict, rank_key
from p2p_ops.diagnose.doctor import FleetFacts, run
from p2p_ops.diagnose.findings import Finding, Report
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

    def why(self, instance: str) -> Optional[Finding]:
        """What put an instance in the state another verb saw (its server down, its engine degraded, not among its
        peers' peers): the finding about it when that evidence is more specific than a state (rank above 1); None
        when the state is all the evidence says."""
        f = self.top([instance])
        return f if f is not None and f.cause is not None and CAUSES[f.cause.id].rank > 1 else None

    def cause(self, about: Collection[str] = ()) -> Optional[Verdict]:
        f = self.top(about)
        return f.cause if f is not None else None

    def said(self, about: Collection[str] = ()) -> str:
        """The cause in words: what was seen and its fix, or that none is confirmed and what was seen instead."""
        f = self.top(about)
        if f is not None and f.cause is not None:
            return (f"{f.subject}: {f.message} (seen: {f.value}); fix: {f.fix} (cause {f.cause.id}, scope "
                    f"{f.cause.scope})")
        return "no cause confirmed; evidence seen: " + ("; ".join(self.seen[:6]) or "nothing")


def judgement(facts: FleetFacts, report: Report) -> Judgement:
    """Rank a doctor report (pure) by the catalogue's ranking, the doctor's own order breaking ties; a finding
    that explains no missed pull (rank below 0: a listener wider than loopback) is left out."""
    problems = [f for f in report.problems if f.cause is not None and CAUSES[f.cause.id].rank >= 0]
    ranked = sorted(problems, key=lambda f: rank_key(cast(Verdict, f.cause), f.severity == "error"))
    seen = [f"{f.check} {f.subject}: {f.message}" for f in report.findings if f.severity == "info"]
    agreed = report.facts.get("agreed") or {}
    if agreed:
        seen.insert(0, "peers agree on " + ", ".join(f"{k}={v}" for k, v in sorted(agreed.items())))
    if facts.any_running and not any(f.check in ("p2p_state", "registration") for f in problems):
        seen.append("every running server is registered with the coordinator")
    return Judgement(ranked, seen)


def document(facts: FleetFacts, report: Report) -> dict[str, Any]:
    """The doctor's --json: its report, each finding with its cause's verdict, and `causes`, the problems in the
    judge's order (the likely cause first)."""
    return report.to_dict() | {"causes": [f.cause.to_dict() for f in judgement(facts, report).findings if f.cause]}


def judge(ctx: FleetContext, reach: bool = True) -> Judgement:
    """Gather the fleet's evidence once (the doctor's read) and rank what it found."""
    facts, report = run(ctx, reach=reach)
    return judgement(facts, report)


def once(ctx: FleetContext) -> Callable[[], Judgement]:
    """The judgement of this fleet, read at the first call and kept: several verbs' steps share one read."""
    return cache(lambda: judge(ctx))
