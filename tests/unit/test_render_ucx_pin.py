"""SSH nodes without settings.ucx_net_devices pin UCX to the interface holding the node's address, found by
env.sh at start time (the interface name is unknown when rendering). A fake `ip` stands in for the node."""

from __future__ import annotations

import subprocess
from pathlib import Path

from p2p_ops.lifecycle.render import render_fleet
from p2p_ops.spec.layout import RunLayout
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.starter import local_fleet

IP_OUTPUT = """\
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: eth0    inet 10.1.2.3/24 brd 10.1.2.255 scope global eth0\\       valid_lft forever preferred_lft forever
5: p2pv1@if6    inet 198.18.0.12/24 brd 198.18.0.255 scope global p2pv1\\       valid_lft forever
"""


def ssh_env(address: str, settings: dict | None = None) -> str:
    data = local_fleet(2, name="pin")
    data["settings"] = settings or {}
    for i, node in enumerate(data["nodes"]):
        node.update(connection="ssh", address=address if i == 0 else "198.18.0.13", venv="/opt/p2p/.venv",
                    run_dir="/srv/p2p")
    data["coordinator"]["host"] = address
    fleet = parse_fleet(data)
    layout = RunLayout(Path("/srv/p2p/pin"))
    return next(f.text for f in render_fleet(fleet, lambda n: layout)
                if f.unit == fleet.instances()[0][1].id and f.name == "env.sh")


def source(env_sh: str, tmp: Path, ip_output: str | None) -> subprocess.CompletedProcess:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    if ip_output is not None:
        (bindir / "ip").write_text(f"#!/bin/sh\ncat <<'EOF'\n{ip_output}EOF\n")
        (bindir / "ip").chmod(0o755)
    (tmp / "env.sh").write_text(env_sh)
    # PATH without /usr/sbin: only the fake ip (or none) is found; awk comes from /usr/bin.
    return subprocess.run(["bash", "-c", 'source "$1"; echo "UCX=${UCX_NET_DEVICES-<unset>}"', "_",
                           str(tmp / "env.sh")], capture_output=True, text=True,
                          env={"PATH": f"{bindir}:/usr/bin:/bin"})


def test_ssh_node_pins_ucx_to_the_interface_of_its_address(tmp_path):
    res = source(ssh_env("198.18.0.12"), tmp_path, IP_OUTPUT)
    assert res.returncode == 0, res.stderr
    assert "UCX=p2pv1" in res.stdout  # the veth's "@ifN" suffix is cut off
    assert res.stderr == ""


def test_address_on_no_interface_leaves_ucx_unset_with_a_warning(tmp_path):
    res = source(ssh_env("198.18.0.99"), tmp_path, IP_OUTPUT)
    assert "UCX=<unset>" in res.stdout
    assert "no interface holds 198.18.0.99" in res.stderr and "settings.ucx_net_devices" in res.stderr


def test_no_ip_command_falls_back_the_same_way(tmp_path):
    res = source(ssh_env("198.18.0.12"), tmp_path, None)
    assert "UCX=<unset>" in res.stdout and "UCX_NET_DEVICES left unset" in res.stderr


def test_a_prefix_of_the_address_does_not_match(tmp_path):
    res = source(ssh_env("198.18.0.1"), tmp_path, IP_OUTPUT)
    assert "UCX=<unset>" in res.stdout


def test_an_explicit_setting_wins(tmp_path):
    env = ssh_env("198.18.0.12", {"ucx_net_devices": "mlx5_0:1"})
    assert "export UCX_NET_DEVICES=mlx5_0:1" in env and "ip -o -4 addr" not in env
