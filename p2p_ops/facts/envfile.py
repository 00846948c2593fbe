"""Environment as the fleet's processes see it: a rendered env.sh, and the environment of a running process.

env.sh is read only in the one format p2pctl writes (`export KEY=<shlex-quoted value>`, comments, blank
lines); any other line is returned as foreign, never interpreted: what bash would make of it is not guessed.
A process's environment is read from `/proc/<pid>/environ` for a pid named by a pidfile, and only for the keys
asked for: the rest may hold secrets.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Optional

from p2p_ops.facts.base import CommandFact
from p2p_ops.facts.logs import guard, read_cmd
from p2p_ops.facts.secret_names import is_secret_name

# `export KEY=value` exactly as shlex.quote writes value: bare safe characters, or one single-quoted string
# whose quotes are spelt '"'"' (the value may span lines). Nothing else is read as an assignment.
_EXPORT = re.compile(r"""export ([A-Za-z_][A-Za-z0-9_]*)=([\w@%+=:,./-]+|'(?:[^']|'"'"')*')(?:\n|\Z)""", re.ASCII)
_ASSIGNMENT = re.compile(r"(export (\w+)=).*")


@dataclass
class EnvSh:
    env: dict[str, str] = field(default_factory=dict)        # the exports, a later one winning
    foreign: list[tuple[int, str]] = field(default_factory=list)   # (line number, text) not in p2pctl's format


def read_env_sh(text: str) -> EnvSh:
    out, pos, line = EnvSh(), 0, 1
    while pos < len(text):
        if m := _EXPORT.match(text, pos):
            raw = m.group(2)
            out.env[m.group(1)] = raw[1:-1].replace("'\"'\"'", "'") if raw.startswith("'") else raw
            end = m.end()
        else:
            end = text.find("\n", pos) + 1 or len(text)
            stripped = text[pos:end].strip(" \t\n")
            if stripped and not stripped.startswith("#"):
                out.foreign.append((line, text[pos:end].rstrip("\n")))
        line += text.count("\n", pos, end)
        pos = end
    return out


def file_diff(rendered: str, on_disk: str, name: str, limit: int = 200) -> list[str]:
    """Unified diff, rendered -> on disk (`+` lines are what the file on disk has instead), with the values of
    secret variables (`secret_names`) masked; at most `limit` lines."""
    lines = list(difflib.unified_diff(rendered.split("\n"), on_disk.split("\n"),
                                      f"{name} (rendered from fleet.yaml)", f"{name} (on disk)", n=0, lineterm=""))
    lines = [_ASSIGNMENT.sub(lambda m: m[1] + "<masked>" if is_secret_name(m[2]) else m[0], x) for x in lines]
    return lines[:limit] + ([f"... {len(lines) - limit} more lines"] if len(lines) > limit else [])


def _parse_env_file(text: str) -> EnvSh:
    return EnvSh() if text.startswith(("@@p2p-refused", "@@p2p-no-such-file")) else read_env_sh(text)


def env_file_fact(path: str) -> CommandFact[EnvSh]:
    """One that is a link, a FIFO or larger than 1 MiB is not read ({})."""
    return CommandFact("env_file", ("sh", "-c", f"{guard(path)}; {read_cmd(path, 1 << 20)}"), _parse_env_file)


def parse_environ(text: str, keys: Sequence[str]) -> dict[str, Optional[str]]:
    """environ with NULs turned into newlines -> the asked keys, None when unset."""
    env: dict[str, Optional[str]] = {k: None for k in keys}
    for line in text.split("\n"):  # a value may hold U+2028 or \r; only a newline separates variables here
        k, _, v = line.partition("=")
        if k in env:
            env[k] = v
    return env


def process_env_fact(pidfile: str, keys: Sequence[str]) -> CommandFact[dict[str, Optional[str]]]:
    """Every key is None when the process's environ is unreadable."""
    pf = shlex.quote(pidfile)
    body = (f"pid=$(cat {pf} 2>/dev/null) && case $pid in ''|*[!0-9]*) exit 1;; esac && "
            "tr '\\0' '\\n' < /proc/$pid/environ")
    return CommandFact("process_env", ("sh", "-c", body), partial(parse_environ, keys=tuple(keys)))
