"""Restarts that lose nothing, on real processes: two `up`s racing on one fleet, `up` after a reboot left stale
pidfiles (dead pids, and pids recycled by other processes), `down` while a test writes its run folder, and
`wait` across a coordinator restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from p2p_ops.lifecycle import launch, procs
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe.records import read_csv
from tests.conftest import REPO, pid_alive, write_local_fleet

pytestmark = pytest.mark.e2e

P2PCTL = [sys.executable, "-m", "p2p_ops.cli"]
ENV = dict(os.environ, PYTHONPATH=str(REPO), LMCACHE_TRACK_USAGE="false")


def poll(cond, what: str, timeout_s: float = 120.0, every_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout_s:.0f} s")
        time.sleep(every_s)


def fleet_processes(root: Path) -> dict[int, str]:
    """Every process on this machine whose working folder is in the fleet's run folder: pid -> command line.
    Each fleet process starts with `cd <its folder>`, so this finds copies no pidfile names any more."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if (cwd == str(root) or cwd.startswith(str(root) + "/")) and pid_alive(int(entry.name)):
            out[int(entry.name)] = cmd
    return out


def sessions(root: Path) -> set[int]:
    """The fleet's process sessions: one per started unit (each leads its own, setsid)."""
    out = set()
    for pid in fleet_processes(root):
        try:
            out.add(os.getsid(pid))
        except ProcessLookupError:
            pass
    return out


def test_two_ups_racing_start_one_copy_each_and_down_leaves_nothing(tmp_path):
    fleet_file = write_local_fleet(tmp_path / "fleet.yaml", 2, name="race")
    ctx = FleetContext.load(fleet_file)
    try:
        ups = [subprocess.Popen([*P2PCTL, "up", "-f", str(fleet_file), "--timeout", "150"], env=ENV, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
        results = [(p.wait(timeout=600), *p.communicate()) for p in ups]
        assert [code for code, _, _ in results] == [0, 0], results
        waited = [err for _, _, err in results if "waiting for fleet race's lock, held by `" in err]
        assert len(waited) == 1, [err for _, _, err in results]
        assert "python -m p2p_ops.cli up -f " in waited[0] and "pid " in waited[0] and "since " in waited[0], \
            waited[0]
        # The second found everything running and kept it: one copy of each unit, each in its pidfile.
        assert waited[0].count("kept ") == 5, waited[0]
        units = [u for u in ctx.units() if u.phase is not None]
        pids = {st.pid for node in ctx.fleet.nodes for st in procs.states(ctx.conn(node), ctx.procs(node))}
        assert len(units) == 5 and len(pids) == 5 and sessions(ctx.layout.root) == pids
        down = subprocess.run([*P2PCTL, "down", "-f", str(fleet_file)], env=ENV, text=True, capture_output=True,
                              timeout=300)
        assert down.returncode == 0, down.stderr
        assert fleet_processes(ctx.layout.root) == {}
    finally:
        launch.down(ctx)
        ctx.close()


@pytest.fixture
def fleet(fleet2):
    """The shared healthy fleet: each test below brings it back up (and waits for it) before it ends."""
    return fleet2


def _crash(ctx: FleetContext) -> dict[str, procs.ProcState]:
    """What a host reboot does to the fleet: every process gone at once, pidfiles and start files left behind."""
    before = {p.name: st for node in ctx.fleet.nodes for p, st in zip(ctx.procs(node),
                                                                        procs.states(ctx.conn(node), ctx.procs(node)))}
    for st in before.values():
        os.killpg(st.pid, signal.SIGKILL)
    poll(lambda: not any(pid_alive(st.pid) for st in before.values()), "every fleet process gone")
    return before


def test_up_after_a_reboot_ignores_stale_and_recycled_pidfiles(fleet):
    ctx = fleet
    before = _crash(ctx)
    server = ctx.proc("server", ctx.fleet.instances()[1][1])
    # After the reboot another process got the server's old pid number... (here: a decoy whose command line
    # even carries the server's marker; only its start time differs from the one recorded at launch)
    decoy = subprocess.Popen(["bash", "-c", f"exec -a 'decoy {server.marker}' sleep 600"], start_new_session=True)
    try:
        Path(server.pidfile).write_text(f"{decoy.pid}\n")
        assert procs.states(ctx.conn(None), [server])[0].state == "stale"
        notes: list[str] = []
        launch.up(ctx, progress=notes.append)
        assert not [n for n in notes if n.startswith("kept ")], notes  # nothing taken for still running
        rep = launch.wait(ctx, timeout=120)
        assert rep.ready
        after = {p.name: st for node in ctx.fleet.nodes
                 for p, st in zip(ctx.procs(node), procs.states(ctx.conn(node), ctx.procs(node)))}
        assert all(st.running for st in after.values()) and after[server.name].pid != decoy.pid
        assert not set(st.pid for st in after.values()) & {st.pid for st in before.values()} - {decoy.pid}
        assert pid_alive(decoy.pid)  # never signalled: not ours
    finally:
        decoy.kill()
        decoy.wait(timeout=30)


def test_down_during_a_test_leaves_a_complete_run_folder_marked_interrupted(fleet):
    ctx = fleet
    earlier = set(ctx.layout.tests.glob("*-stress/run.json"))  # the shared fleet may hold other runs
    test = subprocess.Popen([*P2PCTL, "test", "stress", "--quick", "--stages", "sustained", "--sustained", "40",
                             "-f", str(ctx.fleet_file), "--json"], env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        run_json = poll(lambda: next(iter(sorted(set(ctx.layout.tests.glob("*-stress/run.json")) - earlier)), None),
                        "the test's run folder", 180)
        poll(lambda: json.loads(run_json.read_text())["state"] == "running", "run.json says running")
        time.sleep(3)  # some requests in flight: the down cuts into a run that is writing  # noqa: fixed pause is the point
        outcome = launch.down(ctx)
        assert set(outcome.values()) <= {"stopped", "killed"}, outcome
        out, err = test.communicate(timeout=600)
    finally:
        if test.poll() is None:
            test.kill()
        launch.up(ctx)
        launch.wait(ctx, timeout=120)
    assert test.returncode == 1, err[-2000:]
    doc = json.loads(out)
    run_dir = Path(doc["run_dir"])
    state = json.loads((run_dir / "run.json").read_text())
    assert state["state"] == "interrupted" and state["ended"] >= state["started"], state
    assert state["reason"].startswith("the fleet was stopped by `") and "while the test ran" in state["reason"]
    summary = (run_dir / "summary.md").read_text()
    assert "**Overall: FAIL**" in summary and "run ran to its end (not interrupted) | **FAIL**" in summary
    assert read_csv(run_dir / "requests.csv")  # readable, with the requests sent before and after the down
    assert sorted(p.name for p in (run_dir / "env").iterdir())  # the env.sh files it ran with


def test_wait_survives_a_coordinator_restart(fleet):
    ctx = fleet
    coord = ctx.proc("coordinator")
    [st] = procs.states(ctx.conn(None), [coord])
    os.killpg(st.pid, signal.SIGKILL)
    poll(lambda: not pid_alive(st.pid), "coordinator gone")
    seen: list[str] = []
    result: dict = {}

    def wait() -> None:
        try:
            result["report"] = launch.wait(ctx, timeout=240, progress=seen.append)
        except Exception as exc:  # noqa: BLE001 - the assertion below names it
            result["error"] = exc

    waiter = threading.Thread(target=wait)
    waiter.start()
    poll(lambda: seen, "wait saying what it waits for", 60)
    launch.up(ctx, roles=("coordinator",))  # the coordinator comes back while `wait` runs
    waiter.join(timeout=300)
    assert "error" not in result, result.get("error")
    assert result["report"].ready and result["report"].coordinator_healthy
    assert procs.states(ctx.conn(None), [coord])[0].running
