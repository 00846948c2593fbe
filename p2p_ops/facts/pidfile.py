"""Whether a fleet process still runs: its pidfile, the pid's kernel start time and its command line.

A process is recognised by the pid in its pidfile, the start time recorded next to it (`<pidfile>.start`,
/proc/PID/stat field 22: a recycled pid never has it) and a marker its command line contains (or its wrapper's
path, before the wrapper execs). `SH_LIB` holds the shell functions that decide it; the start and stop acts in
`p2p_ops.lifecycle.procs` use the same ones, so "ours" means one thing everywhere.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Optional, Sequence

from p2p_ops.facts.base import CommandFact

# alive PID: exists and is not a zombie. started PID: its start time in clock ticks since boot (field 22;
# the command name in field 2 may hold spaces, hence cutting after its closing parenthesis).
# owns PID MARKER WRAPPER [STARTFILE]: its command line contains MARKER or WRAPPER, and its start time is the
# one recorded at launch (pidfiles written before start times were recorded are judged by the marker alone).
SH_LIB = r"""
alive() { [ -r "/proc/$1/stat" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -c1)" != Z ]; }
started() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20; }
owns() {
  if [ -n "$4" ] && [ -s "$4" ] && [ "$(cat "$4")" != "$(started "$1")" ]; then return 1; fi
  tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF -e "$2" -e "$3"
}
"""
STATES = ("running", "dead", "stale", "none")


def startfile(pidfile: str) -> str:
    return pidfile + ".start"


@dataclass(frozen=True)
class Watched:
    pidfile: str
    marker: str
    wrapper: str


@dataclass(frozen=True)
class PidState:
    state: str          # running | dead (pid gone) | stale (pid reused by another process) | none (no pidfile)
    pid: Optional[int]


def parse_pid_states(text: str, count: int) -> list[PidState]:
    """One `<state> <pid|->` line per watched process, in order; missing lines read as "none"."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in STATES:
            out.append(PidState(parts[0], int(parts[1]) if parts[1].isdecimal() else None))
    return (out + [PidState("none", None)] * count)[:count]


def pid_states_fact(watched: Sequence[Watched]) -> CommandFact[list[PidState]]:
    q = shlex.quote
    checks = [f"""pf={q(w.pidfile)}; m={q(w.marker)}; w={q(w.wrapper)}; sf={q(startfile(w.pidfile))}
if [ ! -f "$pf" ]; then echo none -
else pid=$(cat "$pf"); if alive "$pid"; then if owns "$pid" "$m" "$w" "$sf"; then echo running "$pid"; else echo stale "$pid"; fi
else echo dead "$pid"; fi; fi""" for w in watched]
    n = len(watched)
    return CommandFact("pid_states", ("bash", "-c", "\n".join([SH_LIB, *checks])),
                       lambda text: parse_pid_states(text, n))
