"""scripts/testbed.sh: hosts with verified host keys, a fleet fragment, and a `down` that leaves nothing,
also after a failed `up`."""

from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

import pytest

from bench import testbed
from p2p_ops.lifecycle.free_ports import free_port
from tests.multinode.conftest import needs_sshd

pytestmark = [pytest.mark.multinode, needs_sshd]


def sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(testbed.SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def sshd_pids(directory: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(directory).encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                pass
    return pids


def test_help_answers():
    res = sh("--help")
    assert res.returncode == 0 and "usage: testbed.sh up N" in res.stdout and "--netns" in res.stdout


def test_up_describes_hosts_that_ssh_verifies_and_down_removes_everything():
    d = testbed.private_dir()
    res = sh("up", "2", "--dir", str(d), "--port", str(free_port(["127.0.0.2", "127.0.0.3"])))
    try:
        assert res.returncode == 0, res.stderr
        data = json.loads((d / "testbed.json").read_text())
        assert data["mode"] == "loopback" and [h["address"] for h in data["hosts"]] == ["127.0.0.2", "127.0.0.3"]
        assert len((d / "known_hosts").read_text().splitlines()) == 2
        assert "StrictHostKeyChecking yes" in (d / "ssh_config").read_text()
        assert "StrictModes yes" in (d / "h1" / "sshd_config").read_text()
        assert d.stat().st_mode & 0o077 == 0 and (d / "user_key").stat().st_mode & 0o077 == 0
        assert "connection: ssh" in (d / "nodes.yaml").read_text()
        out = subprocess.run(["ssh", "-F", str(d / "ssh_config"), "h2", "echo $SSH_CONNECTION"],
                             capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert out.returncode == 0 and out.stdout.split()[2] == "127.0.0.3", out.stderr
        # Each host's own row says its sshd runs: "h1" alone is in the "try: ssh ... h1" hint, up or down.
        status = sh("status", "--dir", str(d)).stdout
        assert re.search(r"^  h1 +127\.0\.0\.2:\d+  sshd pid \d+$", status, re.M), status
        assert re.search(r"^  h2 +127\.0\.0\.3:\d+  sshd pid \d+$", status, re.M), status
        assert len(sshd_pids(d)) >= 2
    finally:
        down = sh("down", "--dir", str(d))
    assert down.returncode == 0 and sshd_pids(d) == [] and not d.exists()
    assert "nothing to stop" in sh("down", "--dir", str(d)).stdout  # idempotent


def test_a_failed_up_stops_what_it_started_and_down_cleans_the_rest():
    d = testbed.private_dir()
    port = free_port(["127.0.0.2", "127.0.0.3"])
    with socket.socket() as blocker:  # h2's address:port is taken, so h2's sshd cannot start
        blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        blocker.bind(("127.0.0.3", port))
        blocker.listen()
        res = sh("up", "2", "--dir", str(d), "--port", str(port))
    assert res.returncode == 2 and "127.0.0.3" in res.stderr and "up failed" in res.stderr
    assert sshd_pids(d) == []  # h1's sshd was started, then stopped
    assert sh("down", "--dir", str(d)).returncode == 0 and not d.exists()


def test_python_helper_builds_an_ssh_fleet(testbed3, tmp_path):
    data = testbed3.fleet("x", venv="/v", run_root=tmp_path / "run",
                          base={"coordinator": 40000, "mp": 40010, "http": 40030, "p2p": 40050, "engine": 40070})
    from p2p_ops.spec.load import parse_fleet

    fleet = parse_fleet(data)
    assert [n.connection for n in fleet.nodes] == ["ssh"] * 3
    assert fleet.coordinator.host == "127.0.0.2" and fleet.coordinator_node().name == "h1"
    assert fleet.nodes[2].run_dir == str(tmp_path / "run" / "h3") and fleet.nodes[2].ssh_config == testbed3.ssh_config


# ---- hardening: the folder, the state file, symlinks --------------------------------------------------

def test_default_folder_is_private_and_printed():
    res = sh("up", "1", "--port", str(free_port(["127.0.0.2"])))
    line = next((ln for ln in res.stderr.splitlines() if "private folder" in ln), "")
    d = Path(line.split("private folder ", 1)[1].split(" ", 1)[0]) if line else None
    try:
        assert res.returncode == 0, res.stderr
        assert d is not None and d.is_dir() and d.stat().st_mode & 0o777 == 0o700 and "/tmp/" not in str(d)
    finally:
        if d is not None:
            assert sh("down", "--dir", str(d)).returncode == 0
    assert not d.exists()
    assert sh("down").returncode == 2  # down without --dir: it cannot guess


@pytest.mark.parametrize("how", ["world-writable", "under-tmp", "symlink"])
def test_up_refuses_folders_others_can_write(tmp_path, how):
    d = testbed.private_dir()
    try:
        if how == "world-writable":
            d.chmod(0o777)
            target = d
        elif how == "under-tmp":
            target = tmp_path / "tb"  # /tmp is world-writable: sshd's StrictModes would refuse the keys
        else:
            target = d.parent / (d.name + "-link")
            target.symlink_to(d)
        res = sh("up", "1", "--dir", str(target), "--port", str(free_port(["127.0.0.2"])))
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert sshd_pids(d) == [] and not (d / "state").exists()
        if how == "symlink":
            target.unlink()
    finally:
        d.chmod(0o700)
        d.rmdir()


def test_down_removes_only_what_carries_its_marker(tmp_path):
    """A planted `file` line (or one from another folder's state) never makes down delete anything else."""
    victim = tmp_path / "precious"
    victim.mkdir()
    (victim / "data").write_text("keep me")
    d = testbed.private_dir()
    res = sh("up", "1", "--dir", str(d), "--port", str(free_port(["127.0.0.2"])))
    assert res.returncode == 0, res.stderr
    foreign = d / "h7"
    foreign.mkdir()
    (foreign / "mine").write_text("not the testbed's")
    with (d / "state").open("a") as f:
        f.write(f"file {victim}\nfile {d}/../{d.name}-x\nfile {foreign}\nfile {d}/h1/../../precious\n"
                "netns not-ours\nlink eth0\n")
    out = sh("down", "--dir", str(d))
    assert out.returncode == 0, out.stderr
    assert (victim / "data").read_text() == "keep me"
    assert (foreign / "mine").exists() and not (d / "h1").exists() and sshd_pids(d) == []
    (foreign / "mine").unlink()
    foreign.rmdir()
    d.rmdir()


def test_down_refuses_a_state_file_it_did_not_write(tmp_path):
    d = testbed.private_dir()
    victim = tmp_path / "precious"
    victim.mkdir()
    (d / "state").write_text(f"file {victim}\n")
    res = sh("down", "--dir", str(d))
    assert res.returncode == 2 and "refusing" in res.stderr and victim.exists()
    (d / "state").unlink()
    d.rmdir()
