"""Walking a symptom: run each step's checks against the evidence, then name the likely cause.

The likely cause is the problem observation whose evidence is most specific by the catalogue's one ranking
(`causes.rank_key`), not the first step that found something: a dead server or a Traceback says *that*
something failed, a setting checked against what the node has (or a log line naming the transport it lacks) says
*why*. Ties go to the earlier step. When no check found a problem the answer says so and lists what was seen,
never a generic guess.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from p2p_ops.causes import rank_key
from p2p_ops.diagnose.tree.checks import run_check
from p2p_ops.diagnose.tree.evidence import Evidence, Observation
from p2p_ops.diagnose.tree.model import Symptom, Tree


@dataclass
class StepResult:
    id: str
    ask: str
    verdict: str                       # problem | ok | n/a | unknown
    observations: list[Observation] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)    # what the step looks for (catalogue ids)
    manual: list[str] = field(default_factory=list)


@dataclass
class Diagnosis:
    symptom: str
    title: str
    fleet: str
    steps: list[StepResult]
    notes: list[str] = field(default_factory=list)

    def likely(self) -> Optional[tuple[StepResult, Observation]]:
        """(step, observation) of the most specific problem whose evidence confirms its cause; None when no check
        found one (a problem that confirms no reason is shown, never named as the cause)."""
        found = [(step, o, o.cause) for step in self.steps for o in step.observations
                 if o.status == "problem" and o.cause and o.cause.confirmed]
        return min(found, key=lambda f: rank_key(f[2], f[1].error))[:2] if found else None

    @property
    def exit_code(self) -> int:
        return 1 if self.likely() else 0

    def seen(self) -> list[str]:
        """What the checks observed, for an answer that confirms no cause."""
        return [f"{o.check} {o.subject}: {o.detail}" for s in self.steps for o in s.observations
                if o.status in ("ok", "info", "n/a") or o.cause and not o.cause.confirmed]

    def to_dict(self) -> dict:
        data = asdict(self)
        for step, out in zip(self.steps, data["steps"]):
            for o, obs in zip(step.observations, out["observations"]):
                obs["cause"] = o.cause.to_dict() if o.cause else None
        got = self.likely()
        if got and got[1].cause:
            step, obs = got
            data["likely_cause"] = {
                "step": step.id, "cause": obs.cause.to_dict(), "detail": f"{obs.subject}: {obs.detail}",
                "evidence": obs.check,
                "subjects": sorted({o.subject for o in step.observations if o.status == "problem"})}
        else:
            data["likely_cause"] = None
            data["no_cause_confirmed"] = {"evidence_seen": self.seen()}
        data["exit_code"] = self.exit_code
        return data


def diagnose(tree: Tree, symptom: Symptom, ev: Evidence) -> Diagnosis:
    steps = []
    for step in symptom.steps:
        obs: list[Observation] = []
        for o in (o for check in step.checks for o in run_check(ev, check)):
            if not any((o.status, o.subject, o.detail) == (x.status, x.subject, x.detail) for x in obs):
                obs.append(o)
        statuses = {o.status for o in obs}
        verdict = ("problem" if "problem" in statuses else "ok" if statuses & {"ok", "info"} else
                   "n/a" if statuses == {"n/a"} else "unknown")
        steps.append(StepResult(step.id, step.ask, verdict, obs, list(step.causes), list(step.manual)))
    fleet = ev.ctx.fleet.name if ev.ctx is not None else "(logs only)"
    notes = []
    if ev.facts is not None and not ev.facts.any_running:
        notes.append("the fleet is not running: live checks are skipped, log checks read the last run's logs")
    if ev.ctx is None:
        notes.append("no fleet: only the log signatures were checked, in the --log files")
    return Diagnosis(symptom.id, symptom.title, fleet, steps, notes)
