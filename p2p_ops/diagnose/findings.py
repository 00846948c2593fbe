"""What a diagnose check reports: findings that name the subject, the value seen and the cause, whose fix the
catalogue words (`p2p_ops.causes`).

A `Report` turns its findings into the CLI exit code: 0 healthy (only `info`), 1 at least one `warn` or
`error`, 2 the check could not run (`could_not_check` set). In --json each finding carries its cause's verdict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from p2p_ops.causes import CAUSES, Verdict, verdict
from p2p_ops.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK

SEVERITIES = ("error", "warn", "info")


@dataclass
class Finding:
    """One observation. `subject` is what it is about (`mlx5_0/1`, `eth0`, `memlock`), `value` what was seen,
    `message` what it means there (the cause's meaning in the catalogue's words, where it adds nothing of its own)."""

    severity: str
    check: str
    subject: str
    value: str
    message: str
    cause: Optional[Verdict] = None     # every warning and error names one; an info line may

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        if self.severity != "info" and self.cause is None:
            raise ValueError(f"{self.check} {self.subject}: a {self.severity} names its cause")
        self.message = self.message or (CAUSES[self.cause.id].means if self.cause else "")

    @property
    def fix(self) -> str:
        return self.cause.fix if self.cause else ""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fix": self.fix, "cause": self.cause.to_dict() if self.cause else None}

    def line(self) -> str:
        text = f"[{self.severity.upper():5}] {self.subject}: {self.message} (seen: {self.value})"
        return f"{text}\n        fix ({self.cause.id}): {self.fix}" if self.cause else text


@dataclass
class Report:
    """Findings of one diagnose run plus whatever facts it wants to show (`facts`, free-form, JSON-able)."""

    title: str
    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    could_not_check: str | None = None
    source: str = ""            # what the evidence of its findings is named by: "doctor" gives doctor:<check>

    def add(self, severity: str, check: str, subject: str, value: object, message: str, cause: str = "",
            **values: object) -> None:
        """`cause`: the catalogue's id; `values` fill its fix's placeholders."""
        seen = (f"{self.source}:{check}" if self.source else check, str(value))
        self.findings.append(Finding(severity, check, subject, str(value), message,
                                     verdict(cause, subject, seen, **values) if cause else None))

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.severity != "info"]

    @property
    def exit_code(self) -> int:
        if self.could_not_check:
            return EXIT_BAD_INPUT
        return EXIT_CHECK_FAILED if self.problems else EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        data = {**asdict(self), "findings": [f.to_dict() for f in self.findings]}
        data["exit_code"] = self.exit_code
        data["healthy"] = self.exit_code == EXIT_OK
        return data

    def render(self) -> str:
        lines = [self.title]
        if self.could_not_check:
            lines.append(f"could not check: {self.could_not_check}")
        lines += [f.line() for f in sorted(self.findings, key=lambda f: SEVERITIES.index(f.severity))]
        verdict = {0: "healthy", 1: f"{len(self.problems)} problem(s)", 2: "not checked"}[self.exit_code]
        lines.append(f"result: {verdict}")
        return "\n".join(lines)
