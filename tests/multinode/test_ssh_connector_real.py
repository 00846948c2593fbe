"""SSHConnector against a real OpenSSH server (testbed host h1): quoting, files, detached processes, timeouts,
connection reuse and host-key policy."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import pytest

from p2p_ops.connectors.ssh import SSHConnectError, SSHConnector
from p2p_ops.lifecycle import procs
from tests.multinode.conftest import needs_sshd

pytestmark = [pytest.mark.multinode, needs_sshd]

AWKWARD = "it's a \"dir\"; touch PWNED; $(touch PWNED2) `touch PWNED3` & echo"


@pytest.fixture
def h1(testbed3):
    host = testbed3.host("h1")
    conn = SSHConnector("h1", host.address, key=testbed3.user_key, ssh_config=testbed3.ssh_config)
    yield conn
    conn.close()


def test_values_reach_the_remote_shell_intact_and_inject_nothing(h1, tmp_path):
    res = h1.run(f"cd {shlex.quote(str(tmp_path))} && printf '%s\\n' {shlex.quote(AWKWARD)}", check=True)
    assert res.stdout == AWKWARD + "\n"
    assert not list(tmp_path.glob("PWNED*"))
    res = h1.run("echo $0; exit 7")
    assert (res.exit_code, res.stdout) == (7, "bash\n")


def test_put_into_an_awkward_path_sets_mode_atomically(h1, tmp_path):
    src = tmp_path / "src.sh"
    src.write_text("#!/usr/bin/env bash\necho ran\n")
    remote = tmp_path / AWKWARD / "sub dir" / "start_server.sh"
    h1.put(src, str(remote), mode=0o755)
    assert remote.read_text() == src.read_text() and (remote.stat().st_mode & 0o777) == 0o755
    assert not Path(str(remote) + ".tmp").exists() and not list(tmp_path.glob("PWNED*"))
    assert h1.run(shlex.quote(str(remote)), check=True).stdout == "ran\n"


def test_detached_process_in_an_awkward_folder_starts_reports_and_stops(h1, tmp_path):
    work = tmp_path / AWKWARD
    work.mkdir()
    wrapper = work / "start_x.sh"
    wrapper.write_text("#!/usr/bin/env bash\nexec sleep 300\n")
    proc = procs.Proc(name="x/server", workdir=str(work), wrapper=str(wrapper), log=str(work / "x.log"),
                      pidfile=str(work / "x.pid"), marker="sleep 300")
    try:
        started = procs.start(h1, proc)
        assert started.running and started.pid
        assert procs.states(h1, [proc])[0].state == "running"
        # It outlived the SSH channel that started it, and runs in its own session.
        assert os.getsid(started.pid) == started.pid
        # SIGINT at its default whatever the SSH session ignored, so `sleep` stops on the first signal (once the
        # wrapper's bash has exec'd it: a SIGINT inside bash's own exec can be lost).
        deadline = time.monotonic() + 60
        while not Path(f"/proc/{started.pid}/cmdline").read_bytes().startswith(b"sleep") \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        sig_ign = next(ln for ln in Path(f"/proc/{started.pid}/status").read_text().splitlines()
                       if ln.startswith("SigIgn:"))
        assert not int(sig_ign.split()[1], 16) & 0b110, sig_ign  # bit 1: SIGINT, bit 2: SIGQUIT
    finally:
        outcome = procs.stop(h1, proc, grace_s=5)
    assert outcome == "stopped"
    assert procs.states(h1, [proc])[0].state == "none" and not list(tmp_path.glob("PWNED*"))


def test_one_connection_is_reused_and_a_slow_command_times_out(h1):
    h1.run("true", check=True)
    transport = h1._conn.transport
    for _ in range(5):
        h1.run("true", check=True)
    assert h1._conn.transport is transport
    res = h1.run("sleep 10", timeout=1)
    assert res.exit_code == 124 and "timed out" in res.stderr
    assert h1.run("echo still", check=True).stdout == "still\n"  # the connection survived the timeout


def test_an_unknown_host_is_refused_unless_the_node_opts_out(testbed3):
    host = testbed3.host("h2")
    # No ssh_config: the testbed's known_hosts is not consulted, so h2's key is unknown.
    strict = SSHConnector("h2", host.address, port=host.port, key=testbed3.user_key)
    with pytest.raises(SSHConnectError) as err:
        strict.run("true")
    assert err.value.what == "unknown host key" and "ssh-keyscan" in str(err.value)
    loose = SSHConnector("h2", host.address, port=host.port, key=testbed3.user_key, insecure_host_keys=True)
    try:
        assert loose.run("echo ok", check=True).stdout == "ok\n"
    finally:
        loose.close()
