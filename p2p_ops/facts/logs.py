"""Reading a fleet process's log on its node: the tail, the error lines worth showing, grep, a capped copy.

Every log reader of the toolkit is a fact here (launch errors, the decision tree's checks, the doctor, the
bundle), so colour codes are stripped by one rule, `strip_ansi`, in the parsers: the commands send the bytes
as they are and the parsers are tested from captured output.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Sequence

from p2p_ops.facts.base import CommandFact

# CSI sequences (colours, cursor moves) that LMCache's and vLLM's loggers write to a terminal or a file.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Lines that name the cause of a failed start; a long shutdown sequence often pushes them out of the tail.
ERROR_LINE = re.compile(r"ERROR|Error:|error while|Errno|Exception|Traceback")
EXCERPT_ERRORS = 4
_SPLIT = "@@p2p-log-tail"
_MISSING = "@@p2p-no-such-file"


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _lines(text: str) -> list[str]:
    return strip_ansi(text).rstrip("\n").splitlines()


def log_tail_fact(path: str, lines: int = 20) -> CommandFact[list[str]]:
    """The last `lines` lines of a log ([] when it is missing or empty)."""
    return CommandFact("log_tail", ("sh", "-c", f"tail -n {int(lines)} {shlex.quote(path)} 2>/dev/null"), _lines)


def parse_excerpt(text: str) -> str:
    """The first error lines not already in the tail, then the tail: what a failed start is reported with."""
    errors, _, tail_text = text.partition(_SPLIT + "\n")
    tail_lines = _lines(tail_text)
    picked = [e for e in _lines(errors)[:EXCERPT_ERRORS] if e not in tail_lines]
    if picked:
        return "\n".join(["errors:", *picked, "last lines:", *tail_lines])
    return "\n".join(tail_lines) or "(log is empty)"


def log_excerpt_fact(path: str, lines: int = 10) -> CommandFact[str]:
    q = shlex.quote(path)
    cmd = (f"grep -a -m {EXCERPT_ERRORS} -E {shlex.quote(ERROR_LINE.pattern)} {q} 2>/dev/null; "
           f"echo {_SPLIT}; tail -n {int(lines)} {q} 2>/dev/null")
    return CommandFact("log_excerpt", ("sh", "-c", cmd), parse_excerpt)


def log_grep_fact(path: str, patterns: Sequence[str], limit: int) -> CommandFact[list[str]]:
    """The last `limit` lines matching any of the extended regexes (one pass over the log)."""
    args = " ".join(f"-e {shlex.quote(p)}" for p in patterns)
    cmd = f"grep -a -E {args} {shlex.quote(path)} 2>/dev/null | tail -n {int(limit)}"
    return CommandFact("log_grep", ("sh", "-c", cmd), _lines)


def recent_grep_fact(path: str, patterns: Sequence[str], window: int, limit: int) -> CommandFact[list[str]]:
    """The last `limit` lines matching any of the extended regexes among the log's last `window` lines: what
    the process logged lately, not since it started."""
    args = " ".join(f"-e {shlex.quote(p)}" for p in patterns)
    cmd = f"tail -n {int(window)} {shlex.quote(path)} 2>/dev/null | grep -a -E {args} | tail -n {int(limit)}"
    return CommandFact("recent_grep", ("sh", "-c", cmd), _lines)


def first_match_argv(path: str, pattern: str) -> tuple[str, ...]:
    """The command that prints the first line matching a basic regex (nothing when none, or no file)."""
    return ("sh", "-c", f"grep -a -m1 -e {shlex.quote(pattern)} {shlex.quote(path)} 2>/dev/null")


@dataclass(frozen=True)
class FileCopy:
    """A capped copy of a file: its text (the last `cap` bytes, colours stripped) and its whole size."""

    exists: bool
    size: int = 0
    text: str = ""

    def truncated(self, cap: int) -> bool:
        return self.size > cap


def parse_file_copy(text: str) -> FileCopy:
    if text.startswith(_MISSING):
        return FileCopy(False)
    size_line, _, body = text.partition("\n")
    size = int(size_line.strip()) if size_line.strip().isdigit() else len(body)
    return FileCopy(True, size, strip_ansi(body))


def file_copy_fact(path: str, cap_bytes: int) -> CommandFact[FileCopy]:
    """Size and the last `cap_bytes` of a file, as valid UTF-8 (a log may hold anything a client sent)."""
    q = shlex.quote(path)
    cmd = (f"[ -f {q} ] || {{ echo {_MISSING}; exit 3; }}; wc -c < {q}; "
           f"tail -c {int(cap_bytes)} {q} | iconv -c -f UTF-8 -t UTF-8 2>/dev/null")
    return CommandFact("file_copy", ("sh", "-c", cmd), parse_file_copy)
