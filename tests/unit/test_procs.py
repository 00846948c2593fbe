"""Detached processes by pidfile: real processes, real signals, and no stray kills."""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from p2p_ops.connectors import LocalConnector
from p2p_ops.connectors.base import CommandFailed
from p2p_ops.facts.logs import log_tail_fact
from p2p_ops.facts.sections import read_fact
from p2p_ops.lifecycle import procs
from tests.conftest import pid_alive as alive


def make_proc(tmp_path: Path, body: str, marker: str = "sleep 300") -> procs.Proc:
    wrapper = tmp_path / "start_x.sh"
    wrapper.write_text(f"#!/usr/bin/env bash\n{body}\n")
    wrapper.chmod(0o755)
    return procs.Proc(name="x/server", workdir=str(tmp_path), wrapper=str(wrapper), log=str(tmp_path / "x.log"),
                      pidfile=str(tmp_path / "x.pid"), marker=marker)


def wait_for(cond, timeout_s: float = 60.0) -> bool:
    """Poll, do not sleep a fixed time: on a busy box the same step takes 10x longer."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def ignored_signals(pid: int) -> int:
    """The SigIgn mask of /proc/PID/status: bit N-1 set means signal N is ignored."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no SigIgn line for pid {pid}")


def ignores(pid: int, sig: int) -> bool:
    return bool(ignored_signals(pid) >> (sig - 1) & 1)


@contextmanager
def caller_ignoring(*sigs: int):
    """Run the block as a caller under `nohup ... &` does: with these signals ignored, inherited by every child."""
    before = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


@pytest.mark.parametrize("caller", ["as-is", "ignoring-sigint"])
def test_start_state_stop_roundtrip(tmp_path, caller):
    """Passes from any caller: the launcher puts SIGINT and SIGQUIT back at their defaults, so the `sleep`
    (which installs no handler) stops on the first SIGINT even when whoever ran `up` ignored it."""
    conn = LocalConnector()
    if caller == "ignoring-sigint":
        with caller_ignoring(signal.SIGINT, signal.SIGQUIT):
            assert ignores(os.getpid(), signal.SIGINT)
            _roundtrip(conn, tmp_path)
    else:
        _roundtrip(conn, tmp_path)


def _roundtrip(conn: LocalConnector, tmp_path: Path) -> None:
    proc = make_proc(tmp_path, "echo hello; exec sleep 300")
    st = procs.start(conn, proc)
    try:
        assert st.running and alive(st.pid)
        # start() returns once the launcher has exec'd the wrapper; the wrapper itself still has to reach its
        # `exec sleep`. A SIGINT in that instant can be lost inside bash, so stop the process it runs for good.
        assert wait_for(lambda: cmdline(st.pid).startswith("sleep 300")), cmdline(st.pid)
        # A second start does not start a second copy.
        again = procs.start(conn, proc)
        assert again.pid == st.pid
        assert procs.states(conn, [proc])[0].state == "running"
        assert os.getsid(st.pid) == st.pid  # its own session: survives the shell that started it
        assert not ignores(st.pid, signal.SIGINT) and not ignores(st.pid, signal.SIGQUIT), hex(ignored_signals(st.pid))
    finally:
        outcome = procs.stop(conn, proc, grace_s=5)
    assert outcome == "stopped"
    assert not alive(st.pid)
    assert not Path(proc.pidfile).exists()
    assert procs.stop(conn, proc) == "none"  # idempotent
    assert procs.states(conn, [proc])[0].state == "none"
    assert "hello" in "\n".join(read_fact(conn, log_tail_fact(proc.log)))


def test_process_ignoring_sigint_is_killed(tmp_path):
    conn = LocalConnector()
    proc = make_proc(tmp_path, "trap '' INT TERM; exec sleep 300")
    st = procs.start(conn, proc)
    outcome = procs.stop(conn, proc, grace_s=0.6)
    assert outcome == "killed"
    assert not alive(st.pid)


def test_recycled_pid_is_not_killed(tmp_path):
    """A pidfile naming someone else's process (here: this test runner) is stale, not a target."""
    conn = LocalConnector()
    proc = make_proc(tmp_path, "exec sleep 300", marker="--no-such-marker ")
    Path(proc.pidfile).write_text(str(os.getpid()))
    assert procs.states(conn, [proc])[0].state == "stale"
    assert procs.stop(conn, proc) == "stale"
    assert alive(os.getpid())


def test_dead_process_is_reported_dead(tmp_path):
    conn = LocalConnector()
    proc = make_proc(tmp_path, "echo boom >&2; exit 3", marker="never ")
    procs.start(conn, proc)
    deadline = time.monotonic() + 10
    while procs.states(conn, [proc])[0].state == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert procs.states(conn, [proc])[0].state == "dead"
    assert "boom" in "\n".join(read_fact(conn, log_tail_fact(proc.log)))
    assert procs.stop(conn, proc) == "dead"


def test_pid_with_another_start_time_is_not_ours(tmp_path):
    """Same pid and a matching command line, but not the start time recorded at launch: a recycled pid."""
    conn = LocalConnector()
    proc = make_proc(tmp_path, "exec sleep 300")
    st = procs.start(conn, proc)
    start_file = Path(procs.startfile(proc.pidfile))
    real = start_file.read_text()
    try:
        assert real.strip().isdigit()
        start_file.write_text("12345\n")
        assert procs.states(conn, [proc])[0].state == "stale"
        assert procs.stop(conn, proc) == "stale" and alive(st.pid)
    finally:
        os.killpg(st.pid, 9)
    assert wait_for(lambda: not alive(st.pid))


def test_pidfile_and_log_are_private(tmp_path):
    conn = LocalConnector()
    proc = make_proc(tmp_path, "echo hi; exec sleep 300")
    procs.start(conn, proc)
    try:
        for f in (proc.pidfile, proc.log, procs.startfile(proc.pidfile)):
            assert Path(f).stat().st_mode & 0o077 == 0, f
    finally:
        assert procs.stop(conn, proc, grace_s=5) in ("stopped", "killed")


def test_no_pidfile_message_runs_nothing_from_the_path(tmp_path):
    """A run folder named `$(...)` must never run it, also on the slow-start error path."""
    canary = tmp_path / "canary"
    odd = tmp_path / f"run$(touch {canary})"
    odd.mkdir(parents=True)
    proc = make_proc(odd, "exec sleep 300")
    # The pidfile's folder does not exist: the launcher cannot write it, start() reports it.
    proc = procs.Proc(proc.name, proc.workdir, proc.wrapper, proc.log, str(odd / "missing" / "x.pid"), proc.marker)
    conn = LocalConnector()
    try:
        procs.start(conn, proc)
        raise AssertionError("start without a pidfile must fail")
    except CommandFailed as exc:
        assert f"no pidfile written by {proc.wrapper}" in str(exc)
    assert not canary.exists()



def test_perl_fallback_also_resets_the_signals(tmp_path):
    """Hosts whose coreutils predate `env --default-signal` (8.31) get the reset from the launcher's perl line."""
    line = next(ln for ln in procs._LAUNCHER.splitlines() if ln.startswith("command -v perl"))
    script = line.replace('bash "$2"', 'grep SigIgn /proc/self/status')
    with caller_ignoring(signal.SIGINT, signal.SIGQUIT):
        out = LocalConnector().run(script, check=True).stdout
    mask = int(out.split()[-1], 16)
    assert not mask >> (signal.SIGINT - 1) & 1 and not mask >> (signal.SIGQUIT - 1) & 1, out
