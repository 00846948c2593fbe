"""Secret redaction for anything that leaves the host (debug bundles, reports, pasted logs).

`redact_text(text, where)` returns the redacted text and a list of `Redaction(kind, where, line, name)` for the
bundle manifest. A finding says *what* was removed and *where*, never the secret itself (not even a hash: short
passwords would be guessable from one).

Detected, in priority order (earlier patterns win where matches overlap):

- PEM private-key blocks, including JSON-escaped ones (`"private_key": "-----BEGIN ...\\n..."`);
- bearer tokens and `Authorization: Basic|Token` headers, credentials inside URLs (`scheme://user:pass@host`);
- well-known token shapes: OpenAI/Anthropic `sk-...`, Hugging Face `hf_...`, GitHub `ghp_`/`github_pat_`,
  Slack `xox?-`, AWS access key ids `AKIA...`/`ASIA...`, GCP API keys `AIza...`, JWTs;
- assignments whose name ends in TOKEN, SECRET, PASSWORD/PASSWD, _KEY/APIKEY or CREDENTIAL(S), in env files,
  shell, YAML, JSON or CLI-flag form (`HF_TOKEN=..`, `export AWS_SECRET_ACCESS_KEY=..`, `api_key: ..`,
  `"password": ".."`, `--hf-token ..`); only the value is replaced, so the file stays readable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MASK = "<redacted>"


@dataclass(frozen=True)
class Redaction:
    kind: str
    where: str
    line: int
    name: str = ""


@dataclass
class RedactionResult:
    text: str
    redactions: list[Redaction]


_NAME = (r"[A-Za-z0-9_.-]*(?:TOKEN|SECRET|PASSWORD|PASSWD|_KEY|-KEY|_KEY_ID|APIKEY|ACCESSKEY|ACCOUNTKEY|"
         r"PRIVATEKEY|CREDENTIALS?)")
_VALUE = r"(?:\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|[^\s,;}'\"#]+)"

# (kind, pattern, group holding the secret). Order matters: earlier entries claim their span first.
PATTERNS: tuple[tuple[str, re.Pattern, str], ...] = (
    ("private_key", re.compile(
        r"-----BEGIN (?P<t>[A-Z0-9 ]*)PRIVATE KEY(?: BLOCK)?-----(?P<s>.*?)-----END [A-Z0-9 ]*PRIVATE KEY"
        r"(?: BLOCK)?-----", re.S), "s"),
    # A block cut off before its END line (truncated log tails) still leaks key material.
    ("private_key", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?P<s>(?:\s*(?:\\n)?[A-Za-z0-9+/=]{16,})+)"),
     "s"),
    ("bearer_token", re.compile(r"(?i)\bBearer\s+(?P<s>[A-Za-z0-9._~+/=-]{8,})"), "s"),
    ("authorization", re.compile(r"(?i)\bAuthorization:\s*(?:Basic|Token)\s+(?P<s>[A-Za-z0-9._~+/=-]{8,})"), "s"),
    ("url_password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:(?P<s>[^\s@/]+)@"), "s"),
    ("openai_key", re.compile(r"(?<![A-Za-z0-9])(?P<s>sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,})"), "s"),
    ("huggingface_token", re.compile(r"(?<![A-Za-z0-9])(?P<s>hf_[A-Za-z0-9]{20,})"), "s"),
    ("github_token", re.compile(r"(?<![A-Za-z0-9])(?P<s>(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{30,}))"),
     "s"),
    ("slack_token", re.compile(r"(?<![A-Za-z0-9])(?P<s>xox[abprs]-[A-Za-z0-9-]{10,})"), "s"),
    ("aws_access_key_id", re.compile(r"(?<![A-Z0-9])(?P<s>(?:AKIA|ASIA)[A-Z0-9]{16})(?![A-Z0-9])"), "s"),
    ("gcp_api_key", re.compile(r"(?<![A-Za-z0-9])(?P<s>AIza[0-9A-Za-z_-]{35})"), "s"),
    ("jwt", re.compile(r"(?<![A-Za-z0-9])(?P<s>eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"),
     "s"),
    ("secret_assignment", re.compile(
        r"(?i)(?P<n>(?<![A-Za-z0-9_])" + _NAME + r")[\"']?\s*(?:=|:)\s*(?P<s>" + _VALUE + r")"), "s"),
    ("secret_flag", re.compile(
        r"(?i)--(?P<n>[a-z0-9-]*(?:token|secret|password|passwd|api-key|apikey|credentials?))(?:=|\s+)"
        r"(?P<s>[^\s-][^\s]*)"), "s"),
)

# Names that end in TOKEN because they are per-token rates (P2P_ENGINE_PREFILL_US_PER_TOKEN), not credentials.
_RATE_NAME = re.compile(r"(?i)per[_-]?token$")
# Values that are already placeholders, references or empty are left alone: redacting them hides nothing.
_HARMLESS = re.compile(r"^[\"']?(?:|<redacted>|\*+|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|<[^>]*>|null|none|None|"
                       r"true|false)[\"']?$")


def _spans(text: str) -> list[tuple[int, int, str, str]]:
    """(start, end, kind, name) of every secret, earlier patterns first, overlaps dropped."""
    taken: list[tuple[int, int, str, str]] = []
    for kind, pattern, group in PATTERNS:
        for m in pattern.finditer(text):
            start, end = m.span(group)
            value = m.group(group)
            if _HARMLESS.match(value) or any(s < end and start < e for s, e, _, _ in taken):
                continue
            if _RATE_NAME.search(m.groupdict().get("n") or ""):
                continue  # prefill_us_per_token=0.0 is a rate, not a token
            if value[:1] in "\"'" and value[-1:] == value[:1] and len(value) >= 2:
                start, end = start + 1, end - 1  # keep the quotes, so the file still parses
            name = m.groupdict().get("n") or ""
            taken.append((start, end, kind, name))
    return sorted(taken)


_ASSIGNED_TO = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)[\"']?\s*[=:]\s*[\"']?$")


def _mask(secret: str) -> str:
    # Keep surrounding whitespace (a PEM body's newlines), so line structure and numbering survive.
    stripped = secret.strip()
    lead = secret[: len(secret) - len(secret.lstrip())]
    return lead + MASK + secret[len(lead) + len(stripped):]


def redact_text(text: str, where: str = "<text>") -> RedactionResult:
    spans = _spans(text)
    out, pos, found = [], 0, []
    for start, end, kind, name in spans:
        out += [text[pos:start], _mask(text[start:end])]
        pos = end
        if not name:  # a token-shaped value: name the variable it was assigned to, if any
            line_start = text.rfind("\n", 0, start) + 1
            assigned = _ASSIGNED_TO.search(text[line_start:start])
            name = assigned[1] if assigned else ""
        found.append(Redaction(kind, where, text.count("\n", 0, start) + 1, name))
    out.append(text[pos:])
    return RedactionResult("".join(out), found)


def redact_file(path: Path, where: str | None = None) -> RedactionResult:
    """Redact a text file's content (the file itself is not changed); binary-ish bytes are replaced, not kept."""
    return redact_text(Path(path).read_text(errors="replace"), where or str(path))


def manifest_entries(redactions: list[Redaction]) -> list[dict]:
    """JSON-ready list for a bundle manifest's `redactions` field."""
    return [{"kind": r.kind, "where": r.where, "line": r.line, **({"name": r.name} if r.name else {})}
            for r in redactions]
