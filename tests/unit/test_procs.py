"""Detached processes by pidfile: real processes, real signals, and no stray kills."""

from __future__ import annotations

import os
import time
from pathlib import Path

from p2p_ops import procs
from p2p_ops.connectors import LocalConnector
from tests.conftest import pid_alive as alive


def make_proc(tmp_path: Path, body: str, marker: str = "sleep 300") -> procs.Proc:
    wrapper = tmp_path / "start_x.sh"
    wrapper.write_text(f"#!/usr/bin/env bash\n{body}\n")
    wrapper.chmod(0o755)
    return procs.Proc(name="x/server", workdir=str(tmp_path), wrapper=str(wrapper), log=str(tmp_path / "x.log"),
                      pidfile=str(tmp_path / "x.pid"), marker=marker)


def test_start_state_stop_roundtrip(tmp_path):
    conn = LocalConnector()
    proc = make_proc(tmp_path, "echo hello; exec sleep 300")
    st = procs.start(conn, proc)
    try:
        assert st.running and alive(st.pid)
        # A second start does not start a second copy.
        again = procs.start(conn, proc)
        assert again.pid == st.pid
        assert procs.states(conn, [proc])[0].state == "running"
        assert os.getsid(st.pid) == st.pid  # its own session: survives the shell that started it
    finally:
        outcome = procs.stop(conn, proc, grace_s=5)
    assert outcome == "stopped"
    assert not alive(st.pid)
    assert not Path(proc.pidfile).exists()
    assert procs.stop(conn, proc) == "none"  # idempotent
    assert procs.states(conn, [proc])[0].state == "none"
    assert "hello" in procs.log_tail(conn, proc.log)


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
    assert "boom" in procs.log_tail(conn, proc.log)
    assert procs.stop(conn, proc) == "dead"
