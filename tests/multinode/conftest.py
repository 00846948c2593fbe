"""Multinode tier: fleets on several "hosts" of one machine, each with its own real OpenSSH server.

The testbed (`scripts/testbed.sh`) is brought up once per session (3 hosts on loopback aliases 127.0.0.2-4)
and always torn down. Host keys are verified with the testbed's known_hosts. The hosts share this machine's
filesystem, so nodes use this checkout's .venv and each gets its own run folder under the test's tmp dir.
Needs `/usr/sbin/sshd` (Debian openssh-server); skipped with that reason when it is missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench import testbed
from p2p_ops.lifecycle.free_ports import choose, free_port
from tests.conftest import REPO

VENV = REPO / ".venv"
P2PCTL = VENV / "bin" / "p2pctl"

needs_sshd = pytest.mark.skipif(not os.access("/usr/sbin/sshd", os.X_OK) or not shutil.which("ssh-keygen"),
                                reason="needs OpenSSH server and client (apt-get install openssh-server)")
needs_engine = pytest.mark.skipif(importlib.util.find_spec("p2p_runtime.engine") is None,
                                  reason="the embedded engine (p2p_runtime.engine) is not importable yet")


@pytest.fixture(scope="session")
def testbed3(tmp_path_factory):
    """Three SSH hosts h1..h3 on 127.0.0.2..4 (one sshd each, verified host keys)."""
    if not os.access("/usr/sbin/sshd", os.X_OK):
        pytest.skip("needs /usr/sbin/sshd (apt-get install openssh-server)")
    directory = testbed.private_dir()  # not under /tmp: sshd runs with StrictModes yes
    port = free_port(["127.0.0.2", "127.0.0.3", "127.0.0.4"])
    with testbed.running(3, directory, port=port) as tb:
        yield tb


def write_ssh_fleet(tb: testbed.Testbed, tmp: Path, name: str, settings: dict | None = None,
                    hosts: list[str] | None = None) -> Path:
    """fleet.yaml with one `connection: ssh` node per testbed host, run folders under `tmp/run/<host>`."""
    if hosts is not None:
        tb = testbed.Testbed(**{**tb.__dict__, "hosts": [tb.host(h) for h in hosts]})
    # Namespaced hosts start with every port free (and their addresses cannot be bound from here).
    base = choose(len(tb.hosts), addresses=[h.address for h in tb.hosts] if tb.mode == "loopback" else []).base
    data = tb.fleet(name, venv=VENV, run_root=tmp / "run", base=base, settings=settings)
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def leftovers(marker: str) -> list[str]:
    """Processes whose environment says they belong to a run folder under `marker` (env.sh exports
    P2P_RUN_DIR, so every coordinator, server and engine carries it, whatever its command line)."""
    found = []
    needle = f"P2P_RUN_DIR={marker}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if needle in (proc / "environ").read_bytes():
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{proc.name}: {cmd[:160]}")
        except OSError:
            continue
    return found


def p2pctl(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """The CLI in a fresh process, as an operator's later shell would run it."""
    exe = [str(P2PCTL)] if P2PCTL.exists() else [sys.executable, "-m", "p2p_ops.cli"]
    return subprocess.run(exe + list(args), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=str(REPO))
