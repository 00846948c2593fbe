"""Detached processes with pidfiles, driven by shell snippets so the same code works locally and over SSH.

A process is started in its own session (setsid), stdin from /dev/null, output to a log file, and its pid
written to a pidfile, its kernel start time (/proc/PID/stat field 22) next to it in `<pidfile>.start`. Before
signalling we check that the pid still is the process we started: same start time (a recycled pid never has
it) and a marker in its command line, so a recycled pid is never killed. Stopping signals the whole process group:
SIGINT (LMCache shuts down cleanly on it), then TERM, then KILL.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from p2p_ops.connectors.base import Connector

# alive PID: exists and is not a zombie. started PID: its start time in clock ticks since boot (field 22;
# the command name in field 2 may hold spaces, hence cutting after its closing parenthesis).
# owns PID MARKER WRAPPER [STARTFILE]: its command line contains MARKER or WRAPPER, and its start time is the
# one recorded at launch (pidfiles written before start times were recorded are judged by the marker alone).
_SH_LIB = r"""
alive() { [ -r "/proc/$1/stat" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -c1)" != Z ]; }
started() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20; }
owns() {
  if [ -n "$4" ] && [ -s "$4" ] && [ "$(cat "$4")" != "$(started "$1")" ]; then return 1; fi
  tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF -e "$2" -e "$3"
}
"""

# The launcher shell that writes the pidfile before it execs the wrapper. A signal that reaches it in the
# instant before exec can be lost (bash's handler only sets a flag, and exec resets it), so start() waits
# until the launcher is gone: a `down` right after `up` then stops the process with its first SIGINT.
# A process whose pidfile cannot be written is never started: nothing could stop it later.
_LAUNCHER = 'sed "s/.*) //" /proc/$$/stat | cut -d" " -f20 > "$1.start" && echo $$ > "$1" && exec bash "$2"'


def startfile(pidfile: str) -> str:
    return pidfile + ".start"


@dataclass(frozen=True)
class Proc:
    """One long-lived process of the fleet: where it lives and how to recognise it."""

    name: str          # e.g. "node-a-0/server"
    workdir: str
    wrapper: str
    log: str
    pidfile: str
    marker: str        # a string its command line contains once running, e.g. "--http-port 8081 "
    # Before the wrapper execs, the command line is `bash <wrapper>`: the wrapper path identifies it too.


@dataclass(frozen=True)
class ProcState:
    name: str
    state: str         # running | dead | stale | none
    pid: int | None
    kept: bool = False  # start() found this process already running and left it alone

    @property
    def running(self) -> bool:
        return self.state == "running"


def start(conn: Connector, proc: Proc) -> ProcState:
    q = shlex.quote
    cmd = _SH_LIB + f"""
cd {q(proc.workdir)} || exit 3
if [ -f {q(proc.pidfile)} ]; then
  pid=$(cat {q(proc.pidfile)})
  if alive "$pid" && owns "$pid" {q(proc.marker)} {q(proc.wrapper)} {q(startfile(proc.pidfile))}; then
    echo "running $pid"; exit 0
  fi
fi
[ -f {q(proc.log)} ] && mv -f {q(proc.log)} {q(proc.log + '.1')}
# Without job control, `&` children start with SIGINT ignored, and LMCache then cannot stop cleanly on it.
# With it, the job leads its own process group, so setsid forks: the session leader writes its own pid.
set -m
rm -f {q(proc.pidfile)} {q(startfile(proc.pidfile))}
umask 077
setsid bash -c {q(_LAUNCHER)} _ {q(proc.pidfile)} {q(proc.wrapper)} > {q(proc.log)} 2>&1 < /dev/null &
for _ in $(seq 1 200); do [ -s {q(proc.pidfile)} ] && break; sleep 0.05; done
[ -s {q(proc.pidfile)} ] || {{ echo {q("no pidfile written by " + proc.wrapper)} >&2; exit 4; }}
pid=$(cat {q(proc.pidfile)})
for _ in $(seq 1 200); do
  alive "$pid" || break
  tr '\\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF 'exec bash "$2"' || break
  sleep 0.05
done
echo "started $pid"
"""
    res = conn.run(cmd, timeout=30, check=True)
    word, pid = res.stdout.split()[-2:]
    return ProcState(proc.name, "running", int(pid), kept=word == "running")


def states(conn: Connector, procs: list[Proc]) -> list[ProcState]:
    """One round trip per node: the state of every pidfile."""
    if not procs:
        return []
    q = shlex.quote
    lines = [_SH_LIB]
    for p in procs:
        lines.append(f"""pf={q(p.pidfile)}; m={q(p.marker)}; w={q(p.wrapper)}; sf={q(startfile(p.pidfile))}
if [ ! -f "$pf" ]; then echo none -
else pid=$(cat "$pf"); if alive "$pid"; then if owns "$pid" "$m" "$w" "$sf"; then echo running "$pid"; else echo stale "$pid"; fi
else echo dead "$pid"; fi; fi""")
    res = conn.run("\n".join(lines), timeout=30, check=True)
    out = res.stdout.split("\n")
    parsed = [line.split() for line in out if line.strip()]
    result = []
    for p, (state, pid) in zip(procs, parsed):
        result.append(ProcState(p.name, state, int(pid) if pid.isdigit() else None))
    return result


def stop(conn: Connector, proc: Proc, grace_s: float = 20.0) -> str:
    """Stop by pidfile; idempotent. Returns what happened: stopped | killed | dead | stale | none.

    The grace per signal is generous: an lmcache server or vLLM winding down on a busy 2-core box can take
    well over 10 s to honour SIGINT, and one that does is "stopped", not "killed"."""
    q = shlex.quote
    ticks = max(1, int(grace_s / 0.2))
    cmd = _SH_LIB + f"""
pf={q(proc.pidfile)}
[ -f "$pf" ] || {{ echo none; exit 0; }}
pid=$(cat "$pf")
sf={q(startfile(proc.pidfile))}
if ! alive "$pid"; then rm -f "$pf" "$sf"; echo dead; exit 0; fi
if ! owns "$pid" {q(proc.marker)} {q(proc.wrapper)} "$sf"; then rm -f "$pf" "$sf"; echo stale; exit 0; fi
how=stopped
for sig in INT TERM KILL; do
  kill -s "$sig" -- "-$pid" 2>/dev/null || kill -s "$sig" "$pid" 2>/dev/null
  for _ in $(seq 1 {ticks}); do alive "$pid" || break; sleep 0.2; done
  alive "$pid" || break
  how=killed
done
# Anything the leader left behind in its process group goes too.
kill -s KILL -- "-$pid" 2>/dev/null
rm -f "$pf" "$sf"
echo "$how"
"""
    res = conn.run(cmd, timeout=grace_s * 3 + 30, check=True)
    return res.stdout.strip().splitlines()[-1] if res.stdout.strip() else "none"


def log_excerpt(conn: Connector, log: str, lines: int = 10) -> str:
    """The first error lines of a log plus its tail: the cause is often above a long shutdown sequence."""
    q = shlex.quote(log)
    cmd = (f"grep -m 4 -E 'ERROR|Error:|error while|Errno|Exception|Traceback' {q} 2>/dev/null; echo ---; "
           f"tail -n {int(lines)} {q} 2>/dev/null")
    out = conn.run(f"({cmd}) | sed 's/\\x1b\\[[0-9;]*m//g'", timeout=15).stdout
    errors, _, tail_text = out.partition("---\n")
    tail_lines = tail_text.rstrip().splitlines()
    picked = [e for e in errors.rstrip().splitlines() if e not in tail_lines]
    if picked:
        return "\n".join(["errors:", *picked, "last lines:", *tail_lines])
    return "\n".join(tail_lines) or "(log is empty)"


def log_tail(conn: Connector, log: str, lines: int = 20) -> str:
    res = conn.run(f"tail -n {int(lines)} {shlex.quote(log)} 2>/dev/null | sed 's/\\x1b\\[[0-9;]*m//g'", timeout=15)
    return res.stdout.rstrip() or "(log is empty)"
