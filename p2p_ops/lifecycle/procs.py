"""Detached processes with pidfiles, driven by shell snippets so the same code works locally and over SSH.

A process is started in its own session (setsid), stdin from /dev/null, output to a log file, its pid and start
time next to it (`facts.pidfile`, which also decides whether a pid is still ours, so a recycled pid is never
killed). Stopping signals the whole process group: SIGINT (LMCache shuts down cleanly on it), then TERM, then KILL.

Every process starts with SIGINT and SIGQUIT at their defaults, whoever started `up`: a signal ignored at exec
stays ignored in the child (and `set -m` does not undo it), so under `nohup ... &`, a background job of a
non-interactive shell or an SSH session that ignores them, a wrapper or tool that installs no handler of its own
would sit out the first SIGINT and be "killed" instead of "stopped".
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from p2p_ops.connectors.base import Connector
from p2p_ops.facts.pidfile import SH_LIB, Watched, pid_states_fact, startfile
from p2p_ops.facts.sections import read_fact
from p2p_ops.spec.units import Proc

# The launcher shell that writes the pidfile before it execs the wrapper. A signal that reaches it in the
# instant before exec can be lost (bash's handler only sets a flag, and exec resets it), so start() waits
# until the launcher is gone: a `down` right after `up` then stops the process with its first SIGINT.
# A process whose pidfile cannot be written is never started: nothing could stop it later.
# bash cannot un-ignore a signal it was started with (`trap - INT` is a no-op then), so the reset is done by
# what execs the wrapper: coreutils `env --default-signal` (8.31+), else perl (Debian's perl-base is essential).
LAUNCHER_TAG = ": p2p-launcher;"
_LAUNCHER = (LAUNCHER_TAG + ' sed "s/.*) //" /proc/$$/stat | cut -d" " -f20 > "$1.start" && echo $$ > "$1" || exit 4\n'
             'env --default-signal=INT true 2>/dev/null && exec env --default-signal=INT,QUIT bash "$2"\n'
             'command -v perl >/dev/null && exec perl -e \'$SIG{INT}=$SIG{QUIT}="DEFAULT"; exec @ARGV\' bash "$2"\n'
             'exec bash "$2"')


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
    cmd = SH_LIB + f"""
cd {q(proc.workdir)} || exit 3
if [ -f {q(proc.pidfile)} ]; then
  pid=$(cat {q(proc.pidfile)})
  if alive "$pid" && owns "$pid" {q(proc.marker)} {q(proc.wrapper)} {q(startfile(proc.pidfile))}; then
    echo "running $pid"; exit 0
  fi
fi
[ -f {q(proc.log)} ] && mv -f {q(proc.log)} {q(proc.log + '.1')}
# Without job control, `&` children start with SIGINT ignored (the launcher resets that too). With it, the job
# leads its own process group, so setsid forks: the session leader writes its own pid.
set -m
rm -f {q(proc.pidfile)} {q(startfile(proc.pidfile))}
umask 077
setsid bash -c {q(_LAUNCHER)} _ {q(proc.pidfile)} {q(proc.wrapper)} > {q(proc.log)} 2>&1 < /dev/null &
for _ in $(seq 1 200); do [ -s {q(proc.pidfile)} ] && break; sleep 0.05; done
[ -s {q(proc.pidfile)} ] || {{ echo {q("no pidfile written by " + proc.wrapper)} >&2; exit 4; }}
pid=$(cat {q(proc.pidfile)})
for _ in $(seq 1 200); do
  alive "$pid" || break
  tr '\\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF {q(LAUNCHER_TAG)} || break
  sleep 0.05
done
echo "started $pid"
"""
    res = conn.run(cmd, timeout=30, check=True)
    word, pid = res.stdout.split()[-2:]
    return ProcState(proc.name, "running", int(pid), kept=word == "running")


def states(conn: Connector, procs: list[Proc]) -> list[ProcState]:
    # One round trip per node.
    if not procs:
        return []
    fact = pid_states_fact([Watched(p.pidfile, p.marker, p.wrapper) for p in procs])
    found = read_fact(conn, fact, timeout=30, check=True)
    return [ProcState(p.name, st.state, st.pid) for p, st in zip(procs, found)]


def stop(conn: Connector, proc: Proc, grace_s: float = 20.0) -> str:
    """stopped | killed | dead | stale | none. The grace per signal is generous: an lmcache server or vLLM winding
    down on a busy 2-core box can take well over 10 s to honour SIGINT, and one that does is "stopped"."""
    q = shlex.quote
    ticks = max(1, int(grace_s / 0.2))
    cmd = SH_LIB + f"""
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
