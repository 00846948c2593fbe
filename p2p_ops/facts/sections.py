"""Read many facts of one node in one round trip: each fact's command runs as a named section of one bash script.

Over SSH a round trip costs a login's worth of latency, so `p2pctl probe`, `doctor` and `bundle` batch what they
read per node. The script frames each section's combined output and exit code::

    @@p2p-section <label>
    ...output (stdout and stderr together)...
    @@p2p-rc <exit code>

`parse_sections` turns that back into one `Result` per label (a section cut short by a timeout or a dropped
connection gets exit code -1), so each fact's own parser reads exactly what it would read run alone.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import TypeVar

from p2p_ops.connectors.base import Result
from p2p_ops.facts.base import CommandFact

SECTION = "@@p2p-section"
RC = "@@p2p-rc"
CUT_SHORT = -1
T = TypeVar("T")


def script(facts: Mapping[str, CommandFact]) -> str:
    parts = []
    for label, fact in facts.items():
        parts.append(f"printf '\\n{SECTION} %s\\n' {shlex.quote(label)}\n{{\n{fact.shell}\n}} 2>&1\n"
                     f"printf '\\n{RC} %s\\n' \"$?\"")
    return "\n".join(parts) + "\n"


def parse_sections(output: str) -> dict[str, tuple[int, str]]:
    """label -> (exit code, text) from the script's output; a section without its exit line gets -1."""
    found: dict[str, tuple[int, str]] = {}
    label: str | None = None
    lines: list[str] = []
    # Only `\n` separates lines: a fact's output may hold U+2028 or a form feed that is part of a value.
    for line in output.split("\n"):
        if line.startswith(SECTION + " "):
            if label is not None:
                found[label] = (CUT_SHORT, "\n".join(lines).strip("\n"))
            label, lines = line[len(SECTION) + 1:].rstrip("\r"), []
        elif line.startswith(RC + " ") and label is not None:
            rc = line[len(RC) + 1:].strip()
            found[label] = (int(rc) if rc.lstrip("-").isdecimal() else CUT_SHORT, "\n".join(lines).strip("\n"))
            label, lines = None, []
        elif label is not None:
            lines.append(line)
    if label is not None:
        found[label] = (CUT_SHORT, "\n".join(lines).strip("\n"))
    return found


def results(output: str, host: str, facts: Mapping[str, CommandFact]) -> dict[str, Result]:
    found = parse_sections(output)
    out = {}
    for label, fact in facts.items():
        rc, text = found.get(label, (CUT_SHORT, ""))
        out[label] = Result(host, fact.shell, rc, text, "" if label in found else "the node read stopped before this")
    return out


def read_node(conn, facts: Mapping[str, CommandFact], timeout: float = 90) -> dict[str, Result]:
    """Run every fact on the connector's node in one round trip. Connection failures raise (the caller turns
    them into that node's error); a failing command is just its section's exit code."""
    if not facts:
        return {}
    res = conn.run(script(facts), timeout=timeout)
    return results(res.stdout, conn.host, facts)


def read_fact(conn, fact: CommandFact[T], timeout: float = 30, check: bool = False) -> T:
    """One fact on the connector's node, parsed. With check, a failing command raises (CommandFailed)."""
    return fact.parse(conn.run(fact.shell, timeout=timeout, check=check).output)
