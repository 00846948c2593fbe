"""The one judge of *why*: the doctor's findings about the instances involved, ranked by how specific their
evidence is, or "no cause confirmed" with what was seen.

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
from p2p_ops.lifecycle.context import FleetContext

# How specific a check's evidence is about *why* (check ids are the tree's, `doctor:<check>` for the doctor's
# findings): 0 a consequence of another finding that says so, ranked below everything so the cause comes first
# (an engine degraded because its server is down or disagrees with its peers); 1 a state that many causes
# produce (a process down, a Traceback, no RDMA device); 2 the symptom's own signature or a pressure gauge; 3
# (every other check) a setting or fact checked against what it must be, or a log line that names the reason.
_SPECIFICITY = {"doctor:engine_degraded": 0, **dict.fromkeys((
    "doctor:process", "doctor:server_http", "doctor:port_listening", "doctor:peer_count", "engines:health",
    "log:traceback", "node:rdma"), 1), **dict.fromkeys((
        "log:nixl_err_backend", "log:p2p_lookup_timeout", "log:p2p_load_timeout", "log:remote_disconnect",
        "log:endpoint_timeout", "metric:l1_usage", "metric:l1_evictions", "metric:active_lookup_jobs",
        "status:locks"), 2)}
# Doctor findings that are true but explain no missed pull: a listener wider than loopback, the router's KV
# events, a missing env.sh the doctor rendered in its place.
_NOT_A_MISS = {"bind:wide", "kv_events", "env_file"}


# Why a pull missed as a server's counters measure it, with the one fix for each: the `reason` of LMCache's
# l2_prefetch_failure counters (a reader's prefetch fell back to recompute) and the holder's eviction loop
# (lmcache_mp_l1_eviction_loop_triggered). explain, the tree's metric checks and calibrate name a measured miss
# with these only.
MEASURED_CAUSES = {
    "l1_oom": "L1 cannot hold the restore buffers: raise settings.l1_size_gb or lower the eviction watermark",
    "l1_contended": "the chunk was write-locked by a concurrent store: stagger identical prefixes",
    "not_found": "the owner evicted the chunk between lookup and load: give owners more L1",
    "evicted": "the holder's L1 evicted it to stay under its watermark: raise settings.l1_size_gb to keep more "
               "prefixes, or send shorter ones",
}


def measured_cause(reason: str) -> str:
    return f"{reason}: {MEASURED_CAUSES.get(reason, 'a fallback reason this toolkit does not know')}"


def specificity(check: str) -> int:
    return _SPECIFICITY.get(check, 3)


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
            return f"{f.subject}: {f.message} (seen: {f.value}); fix: {f.fix}"
        return "no cause confirmed; evidence seen: " + ("; ".join(self.seen[:6]) or "nothing")


def judgement(facts: FleetFacts, report: Report) -> Judgement:
    """Rank a doctor report (pure): specificity, then errors before warnings, then the doctor's own order."""
    problems = [f for f in report.problems if f.check not in _NOT_A_MISS]
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
