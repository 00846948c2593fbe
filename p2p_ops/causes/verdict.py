"""The types of the one vocabulary of causes: a `Cause` of the catalogue (data), and the `Verdict` a verb gives
when evidence confirms one about a subject, with the fix rendered for that subject.

Ranks (how specific the evidence is about *why*): -1 true but explains no missed pull (a listener wider than
loopback); 0 a consequence another cause explains (an engine degraded because its server is down); 1 a state
many causes produce (a process down, a Traceback); 2 the symptom's own signature or a pressure gauge; 3 a
setting or fact checked against what it must be, or a log line that names the reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

SCOPES = ("instance", "node", "fleet", "request", "run")


@dataclass(frozen=True)
class Cause:
    """`fix` may name what it is about as {placeholders} ({node}, {restart}, ...), filled per verdict. A cause
    that is not `confirmed` says what was seen but confirms no reason: verbs show it, never as the cause."""

    id: str
    scope: str
    means: str
    fix: str
    rank: int = 3
    confirmed: bool = True
    # A failure operators reported upstream: the thread (checked against its tracker), the versions it affects,
    # and what here reproduces or covers it (the diagnose skill's references/known-issues.md is these three).
    upstream: str = ""
    affects: str = ""
    covered: str = ""

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"cause {self.id}: scope must be one of {SCOPES}, got {self.scope!r}")


@dataclass(frozen=True)
class Evidence:
    source: str     # where it was read: a doctor check, a log, a metric, a chunk, a request
    seen: str


@dataclass(frozen=True)
class Verdict:
    """One cause, confirmed (or only seen) about one subject (an instance, a node or the fleet)."""

    id: str
    subject: str
    evidence: tuple[Evidence, ...]
    fix: str
    scope: str
    confirmed: bool

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "evidence": [asdict(e) for e in self.evidence]}

    def line(self) -> str:
        """What was seen, then the fix: the one line a list of problems shows."""
        return "; ".join(e.seen for e in self.evidence) + f": {self.fix}"


class _Fill(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"      # unknown here: shown as the placeholder, never a KeyError


def fill(template: str, values: dict[str, object]) -> str:
    return template.format_map(_Fill({k: str(v) for k, v in values.items()}))


def template(text: str) -> str:
    """A fix as a reference page shows it: each placeholder as <name>."""
    return text.replace("{", "<").replace("}", ">")


def restart(*units: tuple[str, str]) -> str:
    """The commands that restart these (node, role) units from fleet.yaml (`up --node` re-renders their env.sh)."""
    steps = [f"p2pctl down --node {node} --role {role} && p2pctl up --node {node} --role {role}"
             for node, role in units]
    return " && ".join(dict.fromkeys(steps))
