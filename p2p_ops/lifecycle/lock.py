"""One `up` or `down` at a time per fleet: an exclusive lock on `<run folder>/.lock`.

Two `up`s started together would both start every process and overwrite each other's pidfiles, and a later
`down` could then stop only the processes whose pidfiles won. With the lock the second waits for the first
(saying who holds it) and then runs against what the first left: an `up` keeps what already runs.

The lock is flock(2) on the control machine, where every p2pctl of this fleet keeps its state; the kernel drops
it when its holder exits, however it exits, so a lock is never stale. Two control machines driving one SSH
fleet are not serialised by it (each has its own run folder). Within one process the lock is re-entrant;
threads of one process take turns like processes do.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

from p2p_ops import files
from p2p_ops.errors import BadInput, CouldNotRun

LOCK_NAME = ".lock"
# How long a second `up`/`down` waits by default: longer than a slow vLLM `up`, shorter than forever.
WAIT_S = 900.0
NOTE_EVERY_S = 15.0
# A new holder writes its name just after it takes the flock; a waiter that reads in between finds the file empty
# (or, after a killed holder, the dead one's name). It waits this long for the name before it says "not said".
NAME_WAIT_S = 5.0


class FleetBusy(CouldNotRun):
    pass


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    command: str
    since: float  # wall clock (for people), seconds since the epoch
    what: str = "the fleet"  # in .last-down: what it stopped (`record_down`)

    def describe(self) -> str:
        held = max(0.0, time.time() - self.since)
        stamp = time.strftime("%H:%M:%S UTC", time.gmtime(self.since))
        return f"`{self.command}` (pid {self.pid} on {self.host}) since {stamp} ({held:.0f} s)"


def command_line() -> str:
    """This process's command as a person typed it: `p2pctl up -f fleet.yaml`, `python -m p2p_ops.cli up ...`."""
    argv = list(getattr(sys, "orig_argv", None) or sys.argv)
    if len(argv) > 1 and os.path.basename(argv[0]).startswith("python"):
        argv = ["python", *argv[1:]] if argv[1] in ("-m", "-c") else argv[1:]
    words = [os.path.basename(argv[0] or "python"), *argv[1:]] if argv else ["python"]
    return " ".join(words)[:200]


def me(command: Optional[str] = None, what: str = "the fleet") -> Holder:
    return Holder(os.getpid(), socket.gethostname(), command or command_line(), time.time(), what)


def read_holder(path: Path) -> Optional[Holder]:
    """The holder a file names; None when it is empty or unreadable: the holder has not written yet."""
    try:
        data = files.parse_json(files.read_text(path, 1 << 16, follow=False) or "null", str(path))
        return Holder(int(data["pid"]), str(data["host"]), str(data["command"]), float(data["since"]),
                      str(data.get("what", "the fleet")))
    except (BadInput, ValueError, TypeError, KeyError, OverflowError):
        return None


@dataclass
class _Held:
    turn: threading.RLock = field(default_factory=threading.RLock)
    depth: int = 0
    fd: Optional[int] = None


_held: dict[str, _Held] = {}
_held_guard = threading.Lock()


def _try_flock(path: Path) -> Optional[int]:
    files.private_dir(path.parent)
    try:  # the holder is written into it: a link planted here would have us truncate its target
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise files.Refused(path, exc.strerror or str(exc), "remove it; p2pctl makes it again") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextmanager
def fleet_lock(root: Path, fleet: str, wait_s: float = WAIT_S, progress: Callable[[str], None] = lambda _: None,
               command: Optional[str] = None) -> Iterator[Holder]:
    """Hold fleet `fleet`'s lock (in run folder `root`) for the block; FleetBusy, naming who holds it, when
    another holder keeps it longer than `wait_s` (0: do not wait)."""
    path = root / LOCK_NAME
    with _held_guard:
        st = _held.setdefault(str(path), _Held())
    deadline = time.monotonic() + wait_s
    if not st.turn.acquire(timeout=max(0.0, wait_s)):
        raise FleetBusy(f"fleet {fleet} is busy: another thread of this process holds its lock ({path})")
    try:
        if st.depth == 0:
            st.fd = _acquire(path, fleet, deadline, wait_s, progress)
            os.ftruncate(st.fd, 0)
            os.pwrite(st.fd, json.dumps(me(command).__dict__).encode(), 0)
        st.depth += 1
        try:
            yield read_holder(path) or me(command)
        finally:
            st.depth -= 1
            if st.depth == 0 and st.fd is not None:
                os.ftruncate(st.fd, 0)  # a waiter must never name a holder that has gone
                os.close(st.fd)  # closing the last descriptor releases the flock
                st.fd = None
    finally:
        st.turn.release()


def _current_holder(path: Path) -> Optional[Holder]:
    """The holder the lock file names, or None while it names nobody or a process of this host that has gone."""
    holder = read_holder(path)
    if holder is not None and holder.host == socket.gethostname():
        try:
            os.kill(holder.pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
    return holder


def _acquire(path: Path, fleet: str, deadline: float, wait_s: float, progress: Callable[[str], None]) -> int:
    next_note = 0.0
    name_by = time.monotonic() + NAME_WAIT_S
    while True:
        if (fd := _try_flock(path)) is not None:
            return fd
        holder = _current_holder(path)
        if holder is None and time.monotonic() < name_by:
            time.sleep(0.05)  # the holder is writing its name: wait for it rather than say nobody
            continue
        who = holder.describe() if holder else "another p2pctl (it has not said who yet)"
        if time.monotonic() >= deadline:
            raise FleetBusy(f"fleet {fleet} is busy: {who} holds its lock ({path}); wait for it to finish and "
                            "try again (the lock goes when that process exits)"
                            + (f", or wait longer with --lock-wait (waited {wait_s:.0f} s)" if wait_s else ""))
        if time.monotonic() >= next_note:
            progress(f"waiting for fleet {fleet}'s lock, held by {who}")
            next_note = time.monotonic() + NOTE_EVERY_S
        time.sleep(0.2)


LAST_DOWN = ".last-down"


def record_down(root: Path, what: str, command: Optional[str] = None) -> None:
    """Note who stopped (part of) the fleet and when, for a test run that was writing its folder meanwhile
    (`harness.rundir` reads it and marks the run interrupted). `what`: the whole fleet, or the node/roles."""
    files.write_json(files.private_dir(root) / LAST_DOWN, me(command, what).__dict__)


def last_down(root: Path) -> Optional[tuple[Holder, str]]:
    holder = read_holder(root / LAST_DOWN)
    return None if holder is None else (holder, holder.what)
