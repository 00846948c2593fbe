#!/usr/bin/env python3
"""Writes the testbed's descriptions for clients: DIR/testbed.json and DIR/nodes.yaml (called by testbed.sh up).

usage: testbed_describe.py --dir DIR --mode loopback|netns --user USER --port PORT
                           [--control-address ADDR --bridge NAME] --host NAME ADDRESS [NETNS VETH] ...

The shell script starts the hosts; this writes what it started as data, so a value (a path, a user name) is
escaped by a serializer rather than by hand. Standard library only: it runs with the system python3 of a
checkout (and as root in --netns mode), before any venv exists.

Each file is created fresh (O_EXCL, never through a symlink) as NAME.new, mode 0600, then renamed over NAME:
DIR is private to its owner (testbed.sh checks it), and a reader never sees half a file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def describe(directory: str, mode: str, user: str, port: int, hosts: list[list[str]],
             control_address: str | None = None, bridge: str | None = None) -> dict:
    """testbed.json's content: what bench/testbed.py and other scripts read back."""
    return {
        "mode": mode, "dir": directory, "user": user, "port": port,
        "ssh_config": f"{directory}/ssh_config", "known_hosts": f"{directory}/known_hosts",
        "user_key": f"{directory}/user_key", "control_address": control_address, "bridge": bridge,
        "hosts": [{"name": h[0], "address": h[1], "port": port, "dir": f"{directory}/{h[0]}",
                   "sshd_pidfile": f"{directory}/{h[0]}/sshd.pid", "netns": h[2] if len(h) > 2 else None,
                   "veth": h[3] if len(h) > 2 else None} for h in hosts],
    }


def nodes_yaml(data: dict) -> str:
    """A `nodes:` fragment for fleet.yaml. Strings are JSON literals, which YAML reads as double-quoted scalars."""
    q = json.dumps
    lines = [f"# nodes: for fleet.yaml (testbed in {data['dir']}); give each node its instances and a run_dir."]
    for h in data["hosts"]:
        lines += [f"- name: {q(h['name'])}", f"  address: {q(h['address'])}", "  connection: ssh",
                  f"  ssh_port: {h['port']}", f"  ssh_key: {q(data['user_key'])}",
                  f"  ssh_config: {q(data['ssh_config'])}"]
    return "\n".join(lines) + "\n"


def write_fresh(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".new")
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="testbed_describe.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--mode", required=True, choices=["loopback", "netns"])
    p.add_argument("--user", required=True)
    p.add_argument("--port", required=True, type=int)
    p.add_argument("--control-address")
    p.add_argument("--bridge")
    p.add_argument("--host", action="append", nargs="+", required=True, metavar="NAME ADDRESS [NETNS VETH]")
    args = p.parse_args(argv)
    for h in args.host:
        if len(h) not in (2, 4):
            p.error(f"--host {' '.join(h)}: give NAME ADDRESS, or NAME ADDRESS NETNS VETH in netns mode")
    if (args.mode == "netns") != all(len(h) == 4 for h in args.host):
        p.error("netns mode names NETNS and VETH for every --host; loopback mode for none")
    return args


def main(argv: list[str]) -> int:
    a = parse_args(argv)
    data = describe(a.dir, a.mode, a.user, a.port, a.host, a.control_address, a.bridge)
    write_fresh(Path(a.dir) / "testbed.json", json.dumps(data, indent=2) + "\n")
    write_fresh(Path(a.dir) / "nodes.yaml", nodes_yaml(data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
