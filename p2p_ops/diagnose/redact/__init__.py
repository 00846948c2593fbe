"""Secret redaction for anything that leaves the host (debug bundles, reports, pasted logs).

`redact_text` masks each value a rule finds (`rules`: where a secret starts; `scan`: where its value ends, as the
text's consumer reads it); overlapping spans merge, so the widest reading wins, and one quoted string keeps its
quotes. It returns a `Redaction(kind, where, line, name)` per secret, never the secret nor a hash of it (a short
password is guessable from one). `scrub_known` masks values already known wherever they stand; `structure`
redacts fleet.yaml from its parsed structure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from p2p_ops.diagnose.redact.rules import RULES, Rule, harmless, netrc
from p2p_ops.diagnose.redact.scan import BLOCK_INDICATOR, eol, inside_string_end, line_start, pem_end, quoted_end

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
    values: dict[str, str] = field(default_factory=dict)  # each secret removed -> its name; never written out


def _value_span(text: str, rule: Rule, m: re.Match) -> tuple[int, int] | None:
    start = m.start("s")
    if rule.kind == "private_key" and rule.scan is None and not m.group("s"):
        end = pem_end(text, start)
        return None if end is None else (start, end)
    end = rule.scan(text, start) if rule.scan else m.end("s")
    if quote := m.groupdict().get("oq"):  # `curl -u 'bob:secret words'`: the quote opened before the secret closes it
        close = text.find(quote, start, eol(text, start))
        end = close if close >= 0 else eol(text, start)
    elif rule.kind in ("authorization", "cookie"):
        end = inside_string_end(text, m.start(), start, end)
    elif rule.kind == "secret_assignment" and text[m.start("n") - 1:m.start("n")] in ("\"", "'") \
            and not m.groupdict().get("q"):
        # `"X-Api-Key: abc"`: the name opened a string, so the value ends where that string does.
        end = inside_string_end(text, m.start("n"), start, end)
    if BLOCK_INDICATOR.match(text, start) and end > eol(text, start):
        start = eol(text, start) + 1  # a block scalar: its indicator stays, its lines go
    return start, end


def _candidates(text: str) -> list[tuple[int, int, int, str]]:
    """(start, end, rule index, name) of every secret any rule finds."""
    found: list[tuple[int, int, int, str]] = []
    lower = text.lower()
    for idx, rule in enumerate(RULES):
        if rule.needles and not any(n in lower for n in rule.needles):
            continue
        covered = -1  # a match starting inside a span this rule already found adds nothing: not scanned again
        for m in rule.pattern.finditer(text):
            if m.start("s") < covered or (rule.check and not rule.check(m)):
                continue
            span = _value_span(text, rule, m)
            if span is not None and (hit := _keep(text, *span, m.groupdict().get("n") or "")):
                found.append((*hit, idx, m.groupdict().get("n") or ""))
                covered = max(covered, hit[1])
    for start, end, name in (netrc(text) if "machine" in text or "default" in text else ()):
        if not harmless(name, text[start:end]):
            found.append((start, end, len(RULES), name))
    return found


def _keep(text: str, start: int, end: int, name: str) -> tuple[int, int] | None:
    value = text[start:end]
    if end <= start or harmless(name, value):
        return None
    if value[0] in "\"'" and len(value) >= 2 and quoted_end(text, start) == end:
        start, end = start + 1, end - 1  # exactly one quoted string: keep the quotes, the file still parses
    return start, end


def _spans(text: str) -> list[tuple[int, int, str, str]]:
    """Merged (start, end, kind, name): overlapping findings become one span; the earliest rule names its kind."""
    merged: list[list] = []
    for start, end, idx, name in sorted(_candidates(text)):
        if merged and start < merged[-1][1]:
            last = merged[-1]
            last[1:] = max(last[1], end), min(last[2], idx), last[3] or name
        else:
            merged.append([start, end, idx, name])
    return [(s, e, RULES[i].kind if i < len(RULES) else "netrc_password", n) for s, e, i, n in merged]


def _assigned_to(before: str) -> str:
    """The name a value is assigned to, read back from the text before it (`NAME = "`, `NAME: `, `NAME=`)."""
    s = before.rstrip().removesuffix('"').removesuffix("'").rstrip()
    if not s or s[-1] not in "=:":
        return ""
    s = s[:-1].rstrip().removesuffix('"').removesuffix("'")
    j = len(s)
    while j > 0 and (s[j - 1].isalnum() or s[j - 1] in "_.-") and len(s) - j < 100:
        j -= 1
    name = s[j:]
    return name if name[:1].isalpha() or name[:1] == "_" else ""


def _mask(secret: str) -> str:
    """The secret's place: each of its lines keeps its indentation and trailing blanks (so line numbers and
    a YAML block's shape survive), its text becomes MASK."""
    return "\n".join(line[:len(line) - len(line.lstrip())] + MASK + line[len(line.rstrip()):] if line.strip()
                     else line for line in secret.split("\n"))


def redact_text(text: str, where: str = "<text>") -> RedactionResult:
    # A token-shaped value is named after the variable it was assigned to, if any.
    return _masked(text, [(s, e, kind, name or _assigned_to(text[max(line_start(text, s), s - 200):s]))
                          for s, e, kind, name in _spans(text)], where)


def _masked(text: str, spans: list[tuple[int, int, str, str]], where: str) -> RedactionResult:
    out, pos, found, values, line, counted = [], 0, [], {}, 1, 0
    for start, end, kind, name in spans:
        out += [text[pos:start], _mask(text[start:end])]
        line, counted, pos = line + text.count("\n", counted, start), start, end
        found.append(Redaction(kind, where, line, name))
        values[text[start:end]] = name or kind
    out.append(text[pos:])
    return RedactionResult("".join(out), found, values)


# Shorter values would mask half of any log: below 8 characters a value goes only where it stands as a word,
# and one of digits only not at all (it would mask ports, PIDs and counts; such a password protects nothing).
KNOWN_MIN = 4


def scrub_known(text: str, known: dict[str, str], where: str) -> RedactionResult:
    """Every occurrence of a secret value the tool knows (the spec's api_key, a value masked in another file)
    in `text`, whatever surrounds it: `used key Zq8x...` in a log names no variable a rule could see."""
    pattern, names = _known_pattern(tuple(sorted(known.items())))
    found = pattern.finditer(text) if pattern else ()
    return _masked(text, [(m.start(), m.end(), "known_secret", names.get(m.group(), "")) for m in found], where)


# A key's BEGIN/END lines are public labels, not its secret: they stay in a log as the sign of what was masked.
_PEM_ARMOR = re.compile(r"-----(?:BEGIN|END) [A-Z0-9 ]+-----")


@lru_cache(maxsize=4)
def _known_pattern(known: tuple[tuple[str, str], ...]) -> tuple[re.Pattern | None, dict[str, str]]:
    """One alternation of every known value (and each line of a multi-line one), longest first."""
    names = {piece.strip(): name for value, name in known for piece in (value, *value.splitlines())
             if len(piece.strip()) >= KNOWN_MIN and MASK not in piece and not _PEM_ARMOR.fullmatch(piece.strip())
             and not (len(piece.strip()) < 8 and piece.strip().isdecimal())}
    ordered = sorted(names, key=lambda v: (-len(v), v))
    long = [re.escape(v) for v in ordered if len(v) >= 8]
    short = [re.escape(v) for v in ordered if len(v) < 8]
    parts = long + ([rf"(?<![\w-])(?:{'|'.join(short)})(?![\w-])"] if short else [])
    return (re.compile("|".join(parts)) if parts else None), names


def manifest_entries(redactions: list[Redaction]) -> list[dict]:
    """JSON-ready list for a bundle manifest's `redactions` field."""
    return [{"kind": r.kind, "where": r.where, "line": r.line, **({"name": r.name} if r.name else {})}
            for r in redactions]
