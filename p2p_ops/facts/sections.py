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
    return "".join(f"printf '\\n{SECTION} %s\\n' {shlex.quote(label)}\n{{\n{fact.shell}\n}} 2>&1\n"
                   f"printf '\\n{RC} %s\\n' \"$?\"\n" for label, fact in facts.items())


def parse_sections(output: str) -> dict[str, tuple[int, str]]:
    """label -> (exit code, text) from the script's output; a section without its exit line gets -1."""
    found: dict[str, tuple[int, str]] = {}
    label: str | None = None
    lines: list[str] = []
    # Only `\n` separates lines: a fact's output may hold U+2028 or a form feed that is part of a value. The
    # last line added closes a section cut short (and opens one that never ends).
    for line in output.split("\n") + [SECTION + " "]:
        ends = line.startswith(RC + " ")
        if label is not None and (ends or line.startswith(SECTION + " ")):
            rc = line[len(RC) + 1:].strip() if ends else ""
            found[label] = (int(rc) if rc.lstrip("-").isdecimal() else CUT_SHORT, "\n".join(lines).strip("\n"))
            label = None
        if line.startswith(SECTION + " "):
            label, lines = line[len(SECTION) + 1:].rstrip("\r"), []
        elif label is not None:
            lines.append(line)
    return found


def results(output: str, host: str, facts: Mapping[str, CommandFact]) -> dict[str, Result]:
    found = parse_sections(output)
    return {label: Result(host, fact.shell, *found.get(label, (CUT_SHORT, "")),
                          "" if label in found else "the node read stopped before this")
            for label, fact in facts.items()}


def read_node(conn, facts: Mapping[str, CommandFact], timeout: float = 90) -> dict[str, Result]:
    """Run every fact on the connector's node in one round trip. Connection failures raise (the caller turns
    them into that node's error); a failing command is just its section's exit code."""
    return results(conn.run(script(facts), timeout=timeout).stdout, conn.host, facts) if facts else {}


def read_fact(conn, fact: CommandFact[T], timeout: float = 30, check: bool = False) -> T:
    """One fact on the connector's node, parsed. With check, a failing command raises (CommandFailed)."""
    return fact.parse(conn.run(fact.shell, timeout=timeout, check=check).output)
