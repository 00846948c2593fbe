"""The fleet lock between real processes: the second waits and names the holder, a dead holder frees it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from p2p_ops.harness.rundir import RunFolder, run_folder, run_state
from p2p_ops.lifecycle import lock
from p2p_ops.lifecycle.lock import FleetBusy, fleet_lock, last_down, read_holder, record_down
from p2p_ops.spec.layout import RunLayout

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from p2p_ops.lifecycle.lock import fleet_lock
    with fleet_lock(Path(sys.argv[1]), "f", command="p2pctl up -f fleet.yaml"):
        print("held", flush=True)
        sys.stdin.read()   # until the test closes our stdin (or kills us)
""")


def holder_process(root: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2])))
    assert proc.stdout.readline().strip() == "held"  # blocks until it holds the lock: no sleep, no race
    return proc


def test_second_holder_is_refused_naming_the_first(tmp_path):
    proc = holder_process(tmp_path)
    try:
        with pytest.raises(FleetBusy) as err:
            with fleet_lock(tmp_path, "f", wait_s=0):
                pass
        msg = str(err.value)
        assert f"pid {proc.pid} on " in msg and "`p2pctl up -f fleet.yaml`" in msg and "since " in msg, msg
        assert read_holder(tmp_path / ".lock").pid == proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_second_holder_waits_then_runs_and_says_who_it_waited_for(tmp_path):
    proc = holder_process(tmp_path)
    notes: list[str] = []

    def note(line: str) -> None:
        notes.append(line)
        proc.stdin.close()  # the first finishes once the second has said it waits

    with fleet_lock(tmp_path, "f", wait_s=120, progress=note) as me:
        assert me.pid == os.getpid()
        assert proc.wait(timeout=60) == 0
    assert notes and f"held by `p2pctl up -f fleet.yaml` (pid {proc.pid}" in notes[0], notes


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    proc = holder_process(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    with fleet_lock(tmp_path, "f", wait_s=0) as me:  # at once: the kernel dropped the dead holder's flock
        assert read_holder(tmp_path / ".lock").pid == me.pid


# Takes the flock as fleet_lock does, then writes its name only when told: the window a racing `up` once fell into.
HOLD_UNNAMED = textwrap.dedent("""
    import fcntl, json, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("held", flush=True)
    sys.stdin.readline()
    os.pwrite(fd, json.dumps(dict(pid=os.getpid(), host=os.uname().nodename, command="p2pctl up", since=0)).encode(), 0)
    print("named", flush=True)
    sys.stdin.read()
""")


def test_a_waiter_waits_for_the_new_holder_to_say_who_it_is(tmp_path, monkeypatch):
    monkeypatch.setattr(lock, "NAME_WAIT_S", 120.0)  # generous: a busy box may stall the holder
    proc = subprocess.Popen([sys.executable, "-c", HOLD_UNNAMED, str(tmp_path / ".lock")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        threading.Timer(0.5, lambda: (proc.stdin.write("\n"), proc.stdin.flush())).start()
        with pytest.raises(FleetBusy) as err:
            with fleet_lock(tmp_path, "f", wait_s=0):
                pass
        assert f"`p2pctl up` (pid {proc.pid} on " in str(err.value), str(err.value)
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_waiter_never_names_a_holder_that_has_gone(tmp_path, monkeypatch):
    monkeypatch.setattr(lock, "NAME_WAIT_S", 0.5)
    with fleet_lock(tmp_path, "f", wait_s=0):
        pass
    assert read_holder(tmp_path / ".lock") is None  # released: the file names nobody
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    (tmp_path / ".lock").write_text(json.dumps(dict(pid=dead_pid, host=socket.gethostname(), command="p2pctl down",
                                                    since=0)))  # as a SIGKILLed holder leaves it
    proc = subprocess.Popen([sys.executable, "-c", HOLD_UNNAMED, str(tmp_path / ".lock")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(FleetBusy) as err:
            with fleet_lock(tmp_path, "f", wait_s=0):
                pass
        assert "it has not said who yet" in str(err.value) and f"pid {dead_pid}" not in str(err.value), str(err.value)
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_reentrant_within_one_thread(tmp_path):
    with fleet_lock(tmp_path, "f", wait_s=0):
        with fleet_lock(tmp_path, "f", wait_s=0):
            pass
        # still held after the inner block: another process is refused
        res = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            from pathlib import Path
            from p2p_ops.lifecycle.lock import fleet_lock, FleetBusy
            try:
                with fleet_lock(Path({str(tmp_path)!r}), "f", wait_s=0):
                    print("got it")
            except FleetBusy as exc:
                print("busy:", exc)
        """)], capture_output=True, text=True, timeout=60,
            env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2])))
        assert res.stdout.startswith("busy:") and f"pid {os.getpid()}" in res.stdout, res.stdout + res.stderr


def test_a_down_during_a_run_marks_it_interrupted(tmp_path):
    layout = RunLayout(tmp_path / "run")
    with run_folder(layout, "stress") as run:
        assert run_state(run.path)["state"] == "running" and run.interrupted() is None
        record_down(layout.root, "the fleet", command="p2pctl down")
        why = run.interrupted()
        assert why and why.startswith("the fleet was stopped by `p2pctl down` (pid ") and "while the test ran" in why
    state = run_state(run.path)
    assert state["state"] == "interrupted" and state["reason"] == why and state["ended"] >= state["started"]


def test_a_down_before_the_run_does_not_count(tmp_path):
    layout = RunLayout(tmp_path / "run")
    record_down(layout.root, "server on node-b")
    assert last_down(layout.root)[1] == "server on node-b"
    with run_folder(layout, "basic") as run:
        pass
    assert run_state(run.path)["state"] == "complete" and RunFolder(run.path, layout).interrupted() is None


def test_ctrl_c_and_errors_end_the_run_interrupted(tmp_path):
    layout = RunLayout(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        with run_folder(layout, "soak") as run:
            raise KeyboardInterrupt
    assert run_state(run.path)["state"] == "interrupted" and "SIGINT" in run_state(run.path)["reason"]
    with pytest.raises(RuntimeError):
        with run_folder(layout, "soak") as run2:
            raise RuntimeError("engine gone")
    assert "RuntimeError: engine gone" in run_state(run2.path)["reason"]


def test_the_holder_is_named_as_it_was_typed(monkeypatch):
    import sys

    from p2p_ops.lifecycle.lock import command_line

    monkeypatch.setattr(sys, "orig_argv", ["/v/bin/python3", "-m", "p2p_ops.cli", "up", "-f", "f.yaml"])
    assert command_line() == "python -m p2p_ops.cli up -f f.yaml"
    monkeypatch.setattr(sys, "orig_argv", ["/v/bin/python3", "/v/bin/p2pctl", "down"])
    assert command_line() == "p2pctl down"


@pytest.mark.parametrize("text", ["[" * 60_000, "[1]", '{"pid": 1e999, "host": "h", "command": "c", "since": 1}'])
def test_a_hostile_holder_or_last_down_file_reads_as_no_holder(tmp_path, text):
    """Issue 44 item 5: a `.last-down` or lock file nested deep under its cap, or of another shape, is no holder,
    never a RecursionError that would end every later stress, soak and faults run."""
    (tmp_path / lock.LAST_DOWN).write_text(text)
    assert read_holder(tmp_path / lock.LAST_DOWN) is None
    assert last_down(tmp_path) is None


@pytest.mark.parametrize("text", ["[" * 100_000, "[1, 2]", "nope"])
def test_a_hostile_run_json_reads_as_a_run_folder_without_one(tmp_path, text):
    (tmp_path / "run.json").write_text(text)
    assert run_state(tmp_path) == {}
