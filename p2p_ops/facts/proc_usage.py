"""What a fleet process costs right now: resident memory, open file descriptors, threads and CPU seconds.

A fleet process leads its own session (setsid), so its cost is that of every process in its session: a
wrapper that does not exec (the router's) and any child count with it. One pass over /proc/*/stat on the node.
`anon_bytes` is what a leak grows: an L1 pool in shared memory (`--shm-name`) fills `shmem_bytes` as the cache
fills, which is no leak.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Sequence

from p2p_ops.facts.base import CommandFact

# After the ") " that closes the command name, /proc/PID/stat field N is word N-2: session 6 -> $4, utime 14 ->
# $12, stime 15 -> $13, num_threads 20 -> $18, rss (pages) 24 -> $22.
_SCAN = r"""
echo "tck $(getconf CLK_TCK) page $(getconf PAGESIZE)"
for d in /proc/[0-9]*; do
  read -r stat < "$d/stat" 2>/dev/null || continue
  set -- ${stat##*) }
  case " $SIDS " in *" $4 "*) ;; *) continue ;; esac
  fds=$(ls -U "$d/fd" 2>/dev/null | wc -l)
  kb=$(sed -n 's/^\(RssAnon\|RssShmem\):[[:space:]]*\([0-9]*\) kB/\2/p' "$d/status" 2>/dev/null | tr '\n' ' ')
  echo "proc $4 ${d#/proc/} ${12} ${13} ${18} ${22} $fds ${kb:-0 0}"
done
"""


@dataclass(frozen=True)
class Usage:
    procs: int
    rss_bytes: int
    anon_bytes: int
    shmem_bytes: int
    fds: int
    threads: int
    cpu_s: float


def parse_usage(text: str) -> dict[int, Usage]:
    """`tck T page P`, then per process `proc SID PID UTIME STIME THREADS RSS_PAGES FDS ANON_KB SHMEM_KB`."""
    tck, page = 100, 4096
    acc: dict[int, list[int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "tck" and parts[1].isdecimal() and parts[3].isdecimal():
            tck, page = int(parts[1]) or 100, int(parts[3]) or 4096
        elif len(parts) == 10 and parts[0] == "proc" and all(p.isdecimal() for p in parts[1:]):
            sid, _pid, ut, st, threads, rss, fds, anon, shmem = (int(p) for p in parts[1:])
            add = (1, rss * page, anon * 1024, shmem * 1024, fds, threads, ut + st)
            acc[sid] = [total + v for total, v in zip(acc.get(sid, [0] * 7), add)]
    return {sid: Usage(a[0], a[1], a[2], a[3], a[4], a[5], round(a[6] / tck, 2)) for sid, a in acc.items()}


def usage_fact(sessions: Sequence[int]) -> CommandFact[dict[int, Usage]]:
    """Absent sessions are left out."""
    sids = " ".join(str(int(s)) for s in sessions)
    return CommandFact("proc_usage", ("bash", "-c", f"SIDS={shlex.quote(sids)}\n{_SCAN}"), parse_usage)


# One line per thread: its name (comm may hold spaces: it goes last) and its CPU ticks so far.
_THREADS = r"""
echo "tck $(getconf CLK_TCK)"
for t in /proc/$P/task/[0-9]*; do
  read -r stat < "$t/stat" 2>/dev/null || continue
  set -- ${stat##*) }
  echo "thread ${t##*/} $((${12} + ${13})) $(cat "$t/comm" 2>/dev/null)"
done
"""


def parse_threads(text: str) -> dict[str, float]:
    """`tck T`, then `thread TID TICKS NAME...` -> CPU seconds by thread name (threads of one name summed)."""
    tck = 100
    out: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) == 2 and parts[0] == "tck" and parts[1].isdecimal():
            tck = int(parts[1]) or 100
        elif len(parts) == 4 and parts[0] == "thread" and parts[1].isdecimal() and parts[2].isdecimal():
            out[parts[3].strip()] = out.get(parts[3].strip(), 0.0) + int(parts[2])
    return {name: round(ticks / tck, 2) for name, ticks in out.items()}


def threads_fact(pid: int) -> CommandFact[dict[str, float]]:
    """CPU seconds so far of each of a process's threads, by name: which thread a steady cost comes from
    (NIXL's progress thread, LMCache's periodic notifier, the event loop), e.g. {"python3": 12.1, "nixl": 40.2}."""
    return CommandFact("proc_threads", ("bash", "-c", f"P={int(pid)}\n{_THREADS}"), parse_threads)
