"""The command line a process was really started with, by its pidfile ([] when the pidfile or process is gone).
Only flags are judged from it: a command line may carry a secret (an API key flag), so callers keep what they
compare, not the whole line.
"""

from __future__ import annotations

import shlex

from p2p_ops.facts.base import CommandFact


def parse_argv(text: str) -> list[str]:
    return [w for w in text.split("\n") if w != ""]


def process_argv_fact(pidfile: str) -> CommandFact[list[str]]:
    # An empty or non-numeric pidfile would make the path /proc//cmdline, the kernel's own command line.
    body = (f"pid=$(cat {shlex.quote(pidfile)} 2>/dev/null) && case $pid in ''|*[!0-9]*) exit 1;; esac && "
            "tr '\\0' '\\n' < /proc/$pid/cmdline")
    return CommandFact("process_argv", ("sh", "-c", body), parse_argv)
