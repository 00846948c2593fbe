"""scripts/testbed_describe.py: what testbed.sh started, as testbed.json and nodes.yaml that read back exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench import testbed

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "testbed_describe.py"


def describe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", str(SCRIPT), *args], capture_output=True, text=True, timeout=30)


def test_loopback_descriptions_read_back(tmp_path):
    d = tmp_path / 'tb "quoted" \\ back'  # testbed.sh refuses whitespace; quotes and backslashes must survive
    d.mkdir()
    res = describe("--dir", str(d), "--mode", "loopback", "--user", "o'brien", "--port", "22001",
                   "--host", "h1", "127.0.0.2", "--host", "h2", "127.0.0.3")
    assert res.returncode == 0, res.stderr
    tb = testbed.Testbed.load(d)
    assert (tb.mode, tb.user, tb.ssh_config, tb.control_address) == ("loopback", "o'brien", f"{d}/ssh_config", None)
    assert [(h.name, h.address, h.port, h.dir, h.netns) for h in tb.hosts] == [
        ("h1", "127.0.0.2", 22001, f"{d}/h1", None), ("h2", "127.0.0.3", 22001, f"{d}/h2", None)]
    nodes = yaml.safe_load((d / "nodes.yaml").read_text())
    assert nodes[1] == {"name": "h2", "address": "127.0.0.3", "connection": "ssh", "ssh_port": 22001,
                        "ssh_key": f"{d}/user_key", "ssh_config": f"{d}/ssh_config"}
    for name in ("testbed.json", "nodes.yaml"):
        assert (d / name).stat().st_mode & 0o777 == 0o600 and not (d / (name + ".new")).exists()


def test_netns_descriptions_name_namespace_veth_and_bridge(tmp_path):
    res = describe("--dir", str(tmp_path), "--mode", "netns", "--user", "root", "--port", "22002",
                   "--control-address", "198.18.7.1", "--bridge", "p2pabcdbr",
                   "--host", "h1", "198.18.7.2", "p2p-abcd-h1", "p2pabcdh1")
    assert res.returncode == 0, res.stderr
    data = json.loads((tmp_path / "testbed.json").read_text())
    assert (data["control_address"], data["bridge"]) == ("198.18.7.1", "p2pabcdbr")
    assert (data["hosts"][0]["netns"], data["hosts"][0]["veth"]) == ("p2p-abcd-h1", "p2pabcdh1")
    assert data["hosts"][0]["sshd_pidfile"] == f"{tmp_path}/h1/sshd.pid"


@pytest.mark.parametrize("hosts,needle", [
    (["--host", "h1"], "give NAME ADDRESS"),
    (["--host", "h1", "198.18.7.2"], "netns mode names NETNS and VETH"),
])
def test_bad_host_arguments_are_named(tmp_path, hosts, needle):
    res = describe("--dir", str(tmp_path), "--mode", "netns", "--user", "u", "--port", "1", *hosts)
    assert res.returncode == 2 and needle in res.stderr and not (tmp_path / "testbed.json").exists()


def test_a_planted_symlink_is_replaced_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    d = tmp_path / "tb"
    d.mkdir()
    os.symlink(victim, d / "testbed.json.new")
    os.symlink(victim, d / "testbed.json")
    res = describe("--dir", str(d), "--mode", "loopback", "--user", "u", "--port", "1", "--host", "h1", "127.0.0.2")
    assert res.returncode == 0, res.stderr
    assert victim.read_text() == "keep me" and not (d / "testbed.json").is_symlink()
