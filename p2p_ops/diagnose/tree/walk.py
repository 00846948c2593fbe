"""Walking a symptom: run each step's checks against the evidence and say which step found the problem."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from p2p_ops.diagnose.tree.checks import run_check
from p2p_ops.diagnose.tree.evidence import Evidence, Observation
from p2p_ops.diagnose.tree.model import Symptom, Tree


@dataclass
class StepResult:
    id: str
    ask: str
    verdict: str                       # problem | ok | unknown
    observations: list[Observation] = field(default_factory=list)
    cause: str = ""
    fix: str = ""
    manual: list[str] = field(default_factory=list)


@dataclass
class Diagnosis:
    symptom: str
    title: str
    fleet: str
    steps: list[StepResult]
    notes: list[str] = field(default_factory=list)

    @property
    def first_problem(self) -> Optional[StepResult]:
        return next((s for s in self.steps if s.verdict == "problem"), None)

    @property
    def exit_code(self) -> int:
        return 1 if self.first_problem else 0

    def to_dict(self) -> dict:
        data = asdict(self)
        first = self.first_problem
        data["likely_cause"] = {"step": first.id, "cause": first.cause, "fix": first.fix,
                                "subjects": sorted({o.subject for o in first.observations if o.status == "problem"})
                                } if first else None
        data["exit_code"] = self.exit_code
        return data


def diagnose(tree: Tree, symptom: Symptom, ev: Evidence) -> Diagnosis:
    steps = []
    for step in symptom.steps:
        obs: list[Observation] = []
        for o in (o for check in step.checks for o in run_check(ev, check)):
            if not any((o.status, o.subject, o.detail) == (x.status, x.subject, x.detail) for x in obs):
                obs.append(o)
        if any(o.status == "problem" for o in obs):
            verdict = "problem"
        elif any(o.status in ("ok", "info") for o in obs):
            verdict = "ok"
        else:
            verdict = "unknown"
        steps.append(StepResult(step.id, step.ask, verdict, obs, step.cause, step.fix, list(step.manual)))
    fleet = ev.ctx.fleet.name if ev.ctx is not None else "(logs only)"
    notes = []
    if ev.facts is not None and not ev.facts.any_running:
        notes.append("the fleet is not running: live checks are skipped, log checks read the last run's logs")
    if ev.ctx is None:
        notes.append("no fleet: only the log signatures were checked, in the --log files")
    return Diagnosis(symptom.id, symptom.title, fleet, steps, notes)
