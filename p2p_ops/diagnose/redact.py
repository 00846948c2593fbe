"""Secret redaction for anything that leaves the host (debug bundles, reports, pasted logs).

`redact_text(text, where)` returns the redacted text and a list of `Redaction(kind, where, line, name)` for the
bundle manifest. A finding says *what* was removed and *where*, never the secret itself (not even a hash: short
passwords would be guessable from one).

A rule finds where a secret *starts*; a scanner then follows the value to its real end the way the consumer of
that text would read it (a shell word with its quotes and escapes, a JSON/Python string with its escapes, a
YAML/header value to the end of the line, a URL query value to the next `&`). Cutting a value at the first
quote, `#` or `,` is how tails of secrets used to leak. Spans found by several rules are merged, never dropped,
so the widest reading wins.

Detected:

- PEM private-key blocks (also JSON-escaped and truncated ones), JWTs, known token prefixes (`sk-`, `hf_`,
  `ghp_`/`github_pat_`, `glpat-`, `xox?-`, `nvapi-`, `AKIA`/`ASIA`, `AIza`, `ya29.`, `npm_`, `pypi-`, Stripe, ...);
- `Authorization` headers of any scheme, `Cookie`/`Set-Cookie`, bearer tokens;
- URL userinfo (`scheme://user:pass@host`, also `redis://:pass@host`), secret query keys (`?key=`, `sig=`,
  `token=`, `X-Amz-Signature=`, ...), Slack/Discord webhook paths;
- assignments (env, shell, YAML, JSON, Python reprs, INI) whose name ends in PASS/PASSWORD/PASSWD/PWD/TOKEN/
  SECRET/KEY/AUTH/CREDENTIAL(S)/JSON/COOKIE or contains SECRET/PASSWORD, CLI flags of such names
  (`--hf-token X`, `--password=X`), `mysql -pPASS`, `sshpass -p PASS`.
Only the value is replaced (a value that is exactly one quoted string keeps its quotes), so files stay readable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

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


# ---------------------------------------------------------------------------------------------------- names

_LAST_WORDS = {"password", "passwd", "passphrase", "pass", "secret", "secrets", "token", "credential",
               "credentials", "apikey", "accesskey", "accountkey", "privatekey", "auth", "authorization",
               "cookie", "pwd", "key", "json", "sig", "signature"}
# Bare `PWD` is the shell's working directory and a bare `key`/`json`/`sig` is usually a cache key or a
# config blob: these words count only after a prefix (MYSQL_PWD, API_KEY, GOOGLE_CREDENTIALS_JSON).
_NEEDS_PREFIX = {"pwd", "key", "json", "sig", "signature"}
_ANYWHERE = {"secret", "password", "passwd", "passphrase"}
# Tokenizer settings (`eos_token: "</s>"`) and per-token rates (`prefill_us_per_token`) are not credentials.
_NOT_SECRET_BEFORE_TOKEN = {"bos", "eos", "pad", "unk", "sep", "cls", "mask", "per", "max", "num", "first",
                            "last", "next", "end", "start", "special", "prompt", "cached", "hit"}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def is_secret_name(name: str) -> bool:
    parts = [p for p in re.split(r"[_.\-\s]+", _CAMEL.sub("_", name.strip("-_.")).lower()) if p]
    if not parts:
        return False
    last = parts[-1]
    if last == "id" and len(parts) >= 3 and parts[-2] == "key":  # private_key_id, AWS_ACCESS_KEY_ID
        return True
    if last in {"token", "tokens"} and len(parts) >= 2 and parts[-2] in _NOT_SECRET_BEFORE_TOKEN:
        return False
    if last in _LAST_WORDS:
        return len(parts) > 1 or last not in _NEEDS_PREFIX
    return any(p in _ANYWHERE for p in parts[:-1]) and last not in {"policy", "file", "path", "length", "min",
                                                                  "max", "rules", "prompt"}


# ------------------------------------------------------------------------------------------------- scanners
# A scanner gets the text and the index where the value starts and returns where the value ends.

_MAX_QUOTED = 64 * 1024  # a quote that never closes within this is treated as cut off at the line's end


def _eol(text: str, i: int) -> int:
    j = text.find("\n", i)
    return len(text) if j < 0 else j


def _quoted_end(text: str, i: int) -> int:
    """End (after the closing quote) of the quoted string opening at i; backslash escapes count inside `"`,
    in `$'...'` and in `'` strings that look like a Python/JSON repr (an escaped quote before the close)."""
    q = text[i]
    j, limit = i + 1, min(len(text), i + _MAX_QUOTED)
    while j < limit:
        c = text[j]
        if c == "\\" and (q == '"' or _backslash_escapes_single(text, i)):
            j += 2
            continue
        if c == q and q == "'" and text[j + 1:j + 2] == "'":
            j += 2  # YAML's '' is an escaped quote (in a shell it is two strings glued: same end either way)
            continue
        if c == q:
            return j + 1
        j += 1
    return _eol(text, i)  # never closed: everything to the line's end may be part of it


def _backslash_escapes_single(text: str, i: int) -> bool:
    # `$'..'` (bash ANSI-C quoting) and Python reprs escape a single quote with a backslash.
    return i > 0 and text[i - 1] == "$" or "\\'" in text[i:_eol(text, i)]


_WORD_STOP = set(" \t\r\n;&|<>`")
_TRAIL = ",)}]"


def shell_word_end(text: str, i: int) -> int:
    """End of the shell word starting at i: unquoted text, quoted parts and backslash escapes, concatenated."""
    j, n = i, len(text)
    while j < n and text[j] not in _WORD_STOP:
        c = text[j]
        if c in "\"'":
            j = _quoted_end(text, j)
            # After a closing quote, `,)}]` end the value in JSON/Python/YAML flow text.
            if j < n and text[j] in _TRAIL:
                return j
            continue
        if c == "\\":
            j += 2
            continue
        j += 1
    j = min(j, n)
    while j > i and text[j - 1] in _TRAIL and _opens_before(text, i, text[j - 1]):
        j -= 1
    return j


def _opens_before(text: str, i: int, closer: str) -> bool:
    """True when `closer` at a value's end belongs to a bracket opened earlier on the line, not to the value."""
    if closer == ",":
        return True
    opener = {")": "(", "}": "{", "]": "["}[closer]
    return opener in text[text.rfind("\n", 0, i) + 1:i]


def line_value_end(text: str, i: int) -> int:
    """A YAML/header/INI value: a quoted string, else everything to the end of the line."""
    if i < len(text) and text[i] in "\"'":
        return _quoted_end(text, i)
    j = _eol(text, i)
    while j > i and text[j - 1] in " \t\r":
        j -= 1
    while j > i and text[j - 1] in _TRAIL and _opens_before(text, i, text[j - 1]):
        j -= 1
    return j


def _token_end(text: str, i: int) -> int:
    j = i
    while j < len(text) and not (text[j].isspace() or text[j] in "\"'<>,;)}]&\\`|"):
        j += 1
    return j


def _query_end(text: str, i: int) -> int:
    j = i
    while j < len(text) and not (text[j].isspace() or text[j] in "&#\"'<>`|;"):
        j += 1
    return j


# ----------------------------------------------------------------------------------------------------- rules

@dataclass(frozen=True)
class Rule:
    kind: str
    pattern: re.Pattern
    scan: Callable[[str, int], int] | None = None  # None: the `s` group's own end
    check: Callable[[re.Match], bool] | None = None  # extra test on the match (e.g. the name is a secret)


def _named(m: re.Match) -> bool:
    return is_secret_name(m.group("n"))


_TOKEN_PREFIXES = (
    ("openai_key", r"sk-(?:proj-|ant-|svcacct-)?[A-Za-z0-9_-]{20,}"),
    ("stripe_key", r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("huggingface_token", r"hf_[A-Za-z0-9]{20,}"),
    ("github_token", r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{30,})"),
    ("gitlab_token", r"glpat-[A-Za-z0-9_-]{20,}"),
    ("slack_token", r"xox[abprse]-[A-Za-z0-9-]{10,}"),
    ("nvidia_api_key", r"nvapi-[A-Za-z0-9_-]{20,}"),
    ("aws_access_key_id", r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"),
    ("gcp_api_key", r"AIza[0-9A-Za-z_-]{35}"),
    ("google_oauth_token", r"ya29\.[0-9A-Za-z_-]{20,}"),
    ("npm_token", r"npm_[A-Za-z0-9]{30,}"),
    ("pypi_token", r"pypi-AgE[A-Za-z0-9_-]{30,}"),
    ("sendgrid_key", r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),
    ("jwt", r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
)

_NAME = r"(?P<n>[A-Za-z_][A-Za-z0-9_.-]*)"

RULES: tuple[Rule, ...] = (
    Rule("private_key", re.compile(
        r"-----BEGIN (?:[A-Z0-9 ]*)PRIVATE KEY(?: BLOCK)?-----(?P<s>.*?)-----END [A-Z0-9 ]*PRIVATE KEY"
        r"(?: BLOCK)?-----", re.S)),
    # A block cut off before its END line (truncated log tails) still leaks key material.
    Rule("private_key", re.compile(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?P<s>(?:\s*(?:\\n)?[A-Za-z0-9+/=:-]{16,})+)")),
    *(Rule(kind, re.compile(r"(?<![A-Za-z0-9])(?P<s>" + rx + ")"), _token_end) for kind, rx in _TOKEN_PREFIXES),
    Rule("bearer_token", re.compile(r"(?i)\bBearer\s+(?P<s>[A-Za-z0-9._~+/=-]{8,})"), _token_end),
    # Any scheme (Basic, Token, Digest, AWS4-HMAC-SHA256, a bare key); the scheme word itself stays.
    Rule("authorization", re.compile(
        r"(?i)\b(?:proxy-)?authorization[\"']?\s*[:=]\s*(?P<oq>[\"']?)(?:(?:Bearer|Basic|Token|Digest|Negotiate|"
        r"AWS4-HMAC-SHA256)\s+)?(?P<s>\S)"), None),
    Rule("cookie", re.compile(r"(?i)\b(?:set-)?cookie[\"']?\s*:\s*(?P<oq>[\"']?)(?P<s>\S)"), None),
    Rule("url_password", re.compile(
        r"\b[a-zA-Z][a-zA-Z0-9+.-]*://(?P<u>[^\s:/?#@\"'<>]*):(?P<s>[^\s/\"'<>]*)@")),
    # A bare token as the user (`https://ghp_x@github.com`, `https://<40 hex>@host`).
    Rule("url_password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://(?P<s>[A-Za-z0-9_-]{24,})@")),
    Rule("url_query_secret", re.compile(r"[?&;]" + _NAME + r"=(?P<s>[^&#\s\"'<>]+)"), _query_end,
         lambda m: is_secret_name(m.group("n")) or m.group("n").lower() in {"key", "sig", "code", "signature"}),
    Rule("webhook_url", re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9/_-]+)"),
         _token_end),
    Rule("webhook_url", re.compile(r"discord(?:app)?\.com/api/webhooks/(?P<s>[A-Za-z0-9/_-]+)"), _token_end),
    Rule("mysql_password", re.compile(
        r"\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump|mysqlimport)\b[^\n]*?(?<=\s)-p(?P<s>[^\s-])"),
        shell_word_end),
    Rule("sshpass_password", re.compile(r"\bsshpass\s+-p\s*(?P<s>\S)"), shell_word_end),
    # NAME=value (shell/env/INI); `NAME = value` (INI/TOML, spaces allowed in the value) reads to the line end.
    Rule("secret_assignment", re.compile(r"(?<![A-Za-z0-9_.-])" + _NAME + r"(?P<q>[\"']?)=(?P<s>[^\s=])"),
         shell_word_end, _named),
    Rule("secret_assignment", re.compile(r"(?<![A-Za-z0-9_.-])" + _NAME + r"(?P<q>[\"']?)[ \t]+=[ \t]*(?P<s>\S)"),
         line_value_end, _named),
    # NAME: value (YAML, JSON, Python reprs, headers).
    Rule("secret_assignment", re.compile(r"(?<![A-Za-z0-9_.-])" + _NAME + r"(?P<q>[\"']?)[ \t]*:[ \t]*(?P<s>\S)"),
         line_value_end, _named),
    Rule("secret_flag", re.compile(r"(?<![\w-])--(?P<n>[A-Za-z0-9][A-Za-z0-9_-]*)(?:=|[ \t]+)(?P<s>[^\s-])"),
         shell_word_end, _named),
)

# Values that are already placeholders, references or empty are left alone: redacting them hides nothing.
_HARMLESS = re.compile(r"^[\"']?(?:|<redacted>|\*+|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|<[^>]*>|null|none|None|"
                       r"true|false|True|False|\[\]|\{\})[\"']?$")


def _value_span(text: str, rule: Rule, m: re.Match) -> tuple[int, int]:
    start = m.start("s")
    end = rule.scan(text, start) if rule.scan else m.end("s")
    if rule.kind in ("authorization", "cookie"):
        end = line_value_end(text, start)
        if m.group("oq"):  # the value opened a quote before the scheme word: it ends where that quote closes
            close = text.find(m.group("oq"), start, end + 1)
            end = close if close >= 0 else end
        else:
            end = _inside_string_end(text, m.start(), start, end)
    elif rule.kind == "secret_assignment" and text[m.start("n") - 1:m.start("n")] in ("\"", "'") \
            and not m.group("q"):
        # `"X-Api-Key: abc"`: the name opened a string, so the value ends where that string does.
        end = _inside_string_end(text, m.start("n"), start, end)
    return start, end


def _inside_string_end(text: str, name_start: int, start: int, end: int) -> int:
    q = text[name_start - 1:name_start]
    if q in ("\"", "'") and text[start:start + 1] != q:
        close = text.find(q, start, end)
        if close >= 0:
            return close
    return end


def _candidates(text: str) -> list[tuple[int, int, int, str]]:
    """(start, end, rule index, name) of every secret any rule finds."""
    found = []
    for idx, rule in enumerate(RULES):
        for m in rule.pattern.finditer(text):
            if rule.check and not rule.check(m):
                continue
            start, end = _value_span(text, rule, m)
            value = text[start:end]
            if end <= start or _HARMLESS.match(value):
                continue
            if value[0] in "\"'" and len(value) >= 2 and _quoted_end(text, start) == end:
                start, end = start + 1, end - 1  # exactly one quoted string: keep the quotes, the file still parses
            name = m.groupdict().get("n") or ""
            found.append((start, end, idx, name))
    return found


def _spans(text: str) -> list[tuple[int, int, str, str]]:
    """Merged (start, end, kind, name): overlapping findings become one span; the earliest rule names its kind."""
    merged: list[list] = []
    for start, end, idx, name in sorted(_candidates(text)):
        if merged and start < merged[-1][1]:
            last = merged[-1]
            last[1] = max(last[1], end)
            if idx < last[2]:
                last[2] = idx
            last[3] = last[3] or name
        else:
            merged.append([start, end, idx, name])
    return [(s, e, RULES[i].kind, n) for s, e, i, n in merged]


_ASSIGNED_TO = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)[\"']?\s*[=:]\s*[\"']?$")


def _mask(secret: str) -> str:
    # Keep surrounding whitespace (a PEM body's newlines), so line structure and numbering survive.
    stripped = secret.strip()
    lead = secret[: len(secret) - len(secret.lstrip())]
    return lead + MASK + secret[len(lead) + len(stripped):]


def redact_text(text: str, where: str = "<text>") -> RedactionResult:
    out, pos, found = [], 0, []
    for start, end, kind, name in _spans(text):
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
