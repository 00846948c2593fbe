"""The multi-host testbed (`scripts/testbed.sh`) from Python: bring it up or down, read what it wrote, and
turn it into a fleet spec whose nodes are reached over real SSH. The multinode tests and the fleet-scale
benchmark both drive it from here.

    with testbed.running(3, testbed.private_dir()) as tb:   # 127.0.0.2..4, one sshd each (not under /tmp)
        base = free_ports.choose(3, addresses=[h.address for h in tb.hosts]).base
        data = tb.fleet("mn", venv=".venv", run_root=tmp / "run", base=base)
        Path("fleet.yaml").write_text(dump_yaml(data))

`testbed.json` (written by `testbed.sh up` through scripts/testbed_describe.py) is the contract: mode, user,
ssh_config, known_hosts, user_key, control_address/bridge (netns mode) and one entry per host with name, address,
port, netns and veth.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from p2p_ops.errors import CouldNotRun
from p2p_ops.resources import CHECKOUT
from p2p_ops.spec.settings import Settings
from p2p_ops.spec.starter import local_fleet

# The script stays in the checkout's scripts/ (it is a tool for the shell too); it ships with no wheel.
SCRIPT = CHECKOUT / "scripts" / "testbed.sh"


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    port: int
    dir: str
    netns: Optional[str] = None
    veth: Optional[str] = None


@dataclass
class Testbed:
    mode: str
    dir: Path
    user: str
    ssh_config: str
    known_hosts: str
    user_key: str
    hosts: list[Host] = field(default_factory=list)
    control_address: Optional[str] = None
    bridge: Optional[str] = None

    @classmethod
    def load(cls, directory: str | Path) -> "Testbed":
        path = Path(directory) / "testbed.json"
        if not path.is_file():
            raise CouldNotRun(f"{path}: no testbed there; start one with scripts/testbed.sh up N --dir {directory}")
        data = json.loads(path.read_text())
        hosts = [Host(h["name"], h["address"], int(h["port"]), h["dir"], h.get("netns"), h.get("veth"))
                 for h in data["hosts"]]
        return cls(data["mode"], Path(data["dir"]), data["user"], data["ssh_config"], data["known_hosts"],
                   data["user_key"], hosts, data.get("control_address"), data.get("bridge"))

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def node(self, host: Host, venv: str, run_dir: str, instances: list[dict]) -> dict:
        """A `connection: ssh` fleet node for one testbed host (host keys verified via the testbed's files)."""
        return {"name": host.name, "address": host.address, "connection": "ssh", "ssh_port": host.port,
                "ssh_key": self.user_key, "ssh_config": self.ssh_config, "venv": venv, "run_dir": run_dir,
                "instances": instances}

    def fleet(self, name: str, venv: str | Path, run_root: str | Path, base: dict[str, int],
              settings: Optional[dict] = None) -> dict:
        """A one-instance-per-host fleet (plain data for YAML). The coordinator runs on the first host.

        Each host gets its own run folder `<run_root>/<host>` (they share this machine's filesystem) and its
        own ports (base + index, as `p2pctl init` does), so nothing clashes in loopback mode either.
        """
        data = local_fleet(len(self.hosts), name=name, base=base)
        data["settings"] = {**Settings(server_nice=10).model_dump(), **(settings or {})}
        first = self.hosts[0]
        data["coordinator"] = {"host": first.address, "port": base["coordinator"], "node": first.name}
        nodes = []
        for host, spec in zip(self.hosts, data["nodes"]):
            inst = {"id": f"{host.name}-0", "ports": spec["instances"][0]["ports"]}
            nodes.append(self.node(host, str(venv), str(Path(run_root) / host.name), [inst]))
        data["nodes"] = nodes
        return data


def private_dir(prefix: str = "tb-") -> Path:
    """A fresh folder for a testbed that sshd's StrictModes accepts: below ~/.cache (never /tmp, which others
    can write to), 0700. `testbed.sh up` fills it; `down` removes it."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "p2p-testbed"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    base.chmod(0o700)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def up(n: int, directory: str | Path, netns: bool = False, port: Optional[int] = None,
       timeout: float = 60) -> Testbed:
    """Run `testbed.sh up`; on failure raise with its output (it has already undone what it started)."""
    cmd = [str(SCRIPT), "up", str(n), "--dir", str(directory)]
    if netns:
        cmd.append("--netns")
    if port:
        cmd += ["--port", str(port)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise CouldNotRun(f"testbed.sh up {n} failed (exit {res.returncode}):\n{res.stdout}{res.stderr}")
    return Testbed.load(directory)


def down(directory: str | Path, timeout: float = 120) -> str:
    res = subprocess.run([str(SCRIPT), "down", "--dir", str(directory)], capture_output=True, text=True,
                         timeout=timeout, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise CouldNotRun(f"testbed.sh down failed (exit {res.returncode}):\n{res.stdout}{res.stderr}")
    return res.stdout


@contextlib.contextmanager
def running(n: int, directory: str | Path, netns: bool = False, port: Optional[int] = None) -> Iterator[Testbed]:
    """A testbed for the duration of a `with` block; always torn down, also when the block fails."""
    try:
        yield up(n, directory, netns=netns, port=port)
    finally:
        down(directory)
