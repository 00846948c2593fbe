"""Reading a fleet process's log on its node: the tail, the error lines worth showing, grep, a capped copy.

Every log reader of the toolkit is a fact here (launch errors, the decision tree's checks, the doctor, the
bundle), so colour codes are stripped by one rule, `strip_ansi`, in the parsers: the commands send the bytes
as they are and the parsers are tested from captured output.

The commands read a file only when it is a regular file with one name, no link (and, given `within`, when its
folder resolves inside that folder), through `dd iflag=nofollow,nonblock`: a log swapped for a link to
/etc/shadow, a FIFO or a device is never read, and never blocks. They print `@@p2p-refused <reason>` instead,
which the parsers turn into a line saying why (`FileCopy.refused` for the bundle's manifest).
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
REFUSED = "@@p2p-refused"
# What a tail reads at most from a log's end: its last lines are there unless a line is longer than this.
TAIL_WINDOW = 1 << 20


def guard(path: str, within: str | None = None) -> str:
    """Shell that stops the command (exit 3 missing, 4 refused) unless `path` is a regular file that is no
    link, symbolic or hard (another name of it may be anywhere), and, with `within`, lies inside that folder
    once resolved; it leaves the size in `$size`."""
    q = shlex.quote(path)
    lines = [f'if [ -L {q} ]; then echo "{REFUSED} is a symbolic link (to $(readlink -- {q})); not followed"; exit 4; fi',
             f"if [ ! -e {q} ]; then echo {_MISSING}; exit 3; fi",
             f'if [ ! -f {q} ]; then echo "{REFUSED} is not a regular file ($(stat -c %F -- {q} 2>/dev/null)); not read"; '
             "exit 4; fi"]
    if within:
        w = shlex.quote(within)
        lines.append(f'd=$(cd -P -- "$(dirname -- {q})" 2>/dev/null && pwd -P); r=$(cd -P -- {w} 2>/dev/null && pwd -P); '
                     f'case "$d/" in "$r"/*) ;; *) echo "{REFUSED} resolves to $d, outside {within}; not read"; exit 4;; esac')
    lines.append(f"set -- $(stat -c '%s %h' -- {q}); size=$1; if [ \"$2\" -gt 1 ]; then "
                 f'echo "{REFUSED} has $2 hard links (the others may lie outside); not read"; exit 4; fi')
    return "; ".join(lines)


def read_cmd(path: str, cap: int | None = None) -> str:
    """Shell that prints the file's bytes (its last `cap` with a cap) without following a link, never blocking."""
    q = shlex.quote(path)
    if cap is None:
        return f"dd if={q} iflag=nofollow,nonblock bs=65536 status=none"
    return (f"skip=$(( size > {int(cap)} ? size - {int(cap)} : 0 )); "
            f"dd if={q} iflag=nofollow,nonblock,skip_bytes,count_bytes skip=$skip count={int(cap)} bs=65536 status=none")


def refusal(text: str) -> str | None:
    return text[len(REFUSED):].split("\n", 1)[0].strip() if text.startswith(REFUSED) else None


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _lines(text: str) -> list[str]:
    if text.startswith(_MISSING):
        return []
    if (why := refusal(text)) is not None:
        return [f"(log not read: {why})"]
    return strip_ansi(text).rstrip("\n").splitlines()


def _guarded(path: str, body: str) -> tuple[str, ...]:
    return ("sh", "-c", f"{guard(path)}; {body}")


def log_tail_fact(path: str, lines: int = 20) -> CommandFact[list[str]]:
    return CommandFact("log_tail", _guarded(path, f"{read_cmd(path, TAIL_WINDOW)} | tail -n {int(lines)}"), _lines)


def parse_excerpt(text: str) -> str:
    """What a failed start is reported with: the first error lines not already in the tail, then the tail."""
    if text.startswith(_MISSING):
        return "(no log file)"
    if (why := refusal(text)) is not None:
        return f"(log not read: {why})"
    errors, _, tail_text = text.partition(_SPLIT + "\n")
    tail_lines = _lines(tail_text)
    picked = [e for e in _lines(errors)[:EXCERPT_ERRORS] if e not in tail_lines]
    if picked:
        return "\n".join(["errors:", *picked, "last lines:", *tail_lines])
    return "\n".join(tail_lines) or "(log is empty)"


def log_excerpt_fact(path: str, lines: int = 10) -> CommandFact[str]:
    cmd = (f"{read_cmd(path)} | grep -a -m {EXCERPT_ERRORS} -E {shlex.quote(ERROR_LINE.pattern)}; "
           f"echo {_SPLIT}; {read_cmd(path, TAIL_WINDOW)} | tail -n {int(lines)}")
    return CommandFact("log_excerpt", _guarded(path, cmd), parse_excerpt)


def log_grep_fact(path: str, patterns: Sequence[str], limit: int) -> CommandFact[list[str]]:
    args = " ".join(f"-e {shlex.quote(p)}" for p in patterns)
    cmd = f"{read_cmd(path)} | grep -a -E {args} | tail -n {int(limit)}"
    return CommandFact("log_grep", _guarded(path, cmd), _lines)


def recent_grep_fact(path: str, patterns: Sequence[str], window: int, limit: int) -> CommandFact[list[str]]:
    """Among the log's last `window` lines: what the process logged lately, not since it started."""
    args = " ".join(f"-e {shlex.quote(p)}" for p in patterns)
    cmd = f"{read_cmd(path, TAIL_WINDOW)} | tail -n {int(window)} | grep -a -E {args} | tail -n {int(limit)}"
    return CommandFact("recent_grep", _guarded(path, cmd), _lines)


def first_match_argv(path: str, pattern: str) -> tuple[str, ...]:
    """Prints nothing when no line matches, no file, or a file `guard` refuses."""
    return ("sh", "-c", f"{guard(path)} >/dev/null || exit 0; {read_cmd(path)} | grep -a -m1 -e {shlex.quote(pattern)}")


@dataclass(frozen=True)
class FileCopy:
    """The last `cap` bytes, colours stripped, and the whole size; `refused`: why a file that is there was not
    read (a link, a FIFO, outside its folder)."""

    exists: bool
    size: int = 0
    text: str = ""
    refused: str = ""

    def truncated(self, cap: int) -> bool:
        return self.size > cap


def parse_file_copy(text: str) -> FileCopy:
    if text.startswith(_MISSING):
        return FileCopy(False)
    if (why := refusal(text)) is not None:
        return FileCopy(True, refused=why)
    size_line, _, body = text.partition("\n")
    size = int(size_line.strip()) if size_line.strip().isdecimal() else len(body)
    return FileCopy(True, size, strip_ansi(body))


def file_copy_fact(path: str, cap_bytes: int, within: str | None = None) -> CommandFact[FileCopy]:
    """As valid UTF-8: a log may hold anything a client sent."""
    cmd = (f"{guard(path, within)}; echo \"$size\"; "
           f"{read_cmd(path, cap_bytes)} | iconv -c -f UTF-8 -t UTF-8 2>/dev/null")
    return CommandFact("file_copy", ("sh", "-c", cmd), parse_file_copy)
