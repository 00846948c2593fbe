"""A fleet launched over real SSH on three testbed hosts, proven to share across hosts, checked and stopped
from fresh processes; and what an operator sees when one host is unreachable, refuses the key or changed its
host key."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from p2p_ops.errors import CouldNotRun
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from tests.multinode.conftest import leftovers, needs_engine, needs_sshd, p2pctl, write_ssh_fleet

pytestmark = [pytest.mark.multinode, needs_sshd]


@needs_engine
def test_fleet_over_ssh_registers_shares_across_hosts_and_stops_from_a_fresh_shell(testbed3, tmp_path):
    from p2p_ops.harness.basic import run_basic
    from p2p_ops.harness.matrix import run_matrix

    fleet_file = write_ssh_fleet(testbed3, tmp_path, "mn")
    run_root = str(tmp_path / "run")
    ctx = FleetContext.load(fleet_file)
    try:
        launch.up(ctx)
        rep = launch.wait(ctx, timeout=120)
        # Every server registered with its 2 peers; the coordinator lists three different addresses.
        assert [(i.instance, i.server.p2p_state, i.server.peer_count) for i in rep.instances] == [
            ("h1-0", "registered", 2), ("h2-0", "registered", 2), ("h3-0", "registered", 2)]
        ips = sorted(i["ip"] for i in rep.coordinator_instances)
        assert ips == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        # Each host runs its processes from its own run folder, started through its own sshd.
        for host in ("h1", "h2", "h3"):
            assert (tmp_path / "run" / host / "mn" / f"{host}-0" / "server.pid").is_file()

        # The node probe over SSH sees this fleet holding its ports.
        probe = p2pctl("probe", "-f", str(fleet_file), "--json")
        data = json.loads(probe.stdout)
        assert probe.returncode == 0, (probe.stderr, data)
        assert {p["state"] for n in data["nodes"].values() for p in n["ports"]} == {"this fleet"}

        # The cross-node proof between two hosts with different addresses.
        result = run_basic(ctx, a="h1-0", b="h2-0")
        assert result.passed, ([c for c in result.checks if not c.ok], result.likely_cause)
        assert result.numbers["p2p_loads_b"] > 0 and result.numbers["kv_bytes_pulled_b"] > 0

        # Every ordered pair of the three hosts, over the same SSH fleet.
        matrix = run_matrix(ctx, chunks=2, out_dir=tmp_path / "matrix")
        assert matrix.passed, [(p.source, p.target, p.likely_cause or p.error) for p in matrix.pairs if not p.ok]
        assert len(matrix.pairs) == 6 and all(p.p2p_loads > 0 and p.identical for p in matrix.pairs)
        assert (tmp_path / "matrix" / "heatmap.png").is_file()

        # status and down from a fresh process, as a later shell would.
        status = p2pctl("status", "-f", str(fleet_file), "--json")
        assert status.returncode == 0, status.stderr
        st = json.loads(status.stdout)
        assert st["ready"] and {i["node"]: i["peer_count"] for i in st["instances"]} == {"h1": 2, "h2": 2, "h3": 2}
        down = p2pctl("down", "-f", str(fleet_file))
        assert down.returncode == 0, down.stdout + down.stderr
        assert "error" not in down.stdout and "Traceback" not in down.stderr
        after = p2pctl("status", "-f", str(fleet_file), "--json")
        assert after.returncode == 1
        assert {i["server_process"] for i in json.loads(after.stdout)["instances"]} == {"none"}
    finally:
        launch.down(ctx)
        ctx.close()
    assert leftovers(run_root) == []


# ---- one bad host among good ones ---------------------------------------------------------------------

def _wrong_key(tb, tmp: Path) -> dict:
    key = tmp / "not_authorized"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return {"ssh_key": str(key)}


def _changed_host_key(tb, tmp: Path) -> dict:
    """h3 as if reinstalled: our known_hosts holds another key for its address and port."""
    other = tmp / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    pub = " ".join(other.with_suffix(".pub").read_text().split()[:2])
    h3 = tb.host("h3")
    stale = tmp / "stale_known_hosts"
    lines = [ln for ln in Path(tb.known_hosts).read_text().splitlines() if not ln.startswith(f"[{h3.address}]")]
    stale.write_text("\n".join(lines + [f"[{h3.address}]:{h3.port} {pub}"]) + "\n")
    cfg = tmp / "ssh_config"
    cfg.write_text(Path(tb.ssh_config).read_text().replace(tb.known_hosts, str(stale)))
    return {"ssh_config": str(cfg)}


def _unreachable(tb, tmp: Path) -> dict:
    from p2p_ops.lifecycle.free_ports import free_port

    return {"address": "127.0.0.9", "ssh_port": free_port(["127.0.0.9"])}  # nothing listens there


@pytest.mark.parametrize("breaks,what", [
    (_unreachable, "unreachable"),
    (_wrong_key, "authentication failed"),
    (_changed_host_key, "host key CHANGED"),
], ids=["unreachable", "wrong-key", "changed-host-key"])
def test_one_bad_host_is_named_the_others_still_report_and_nothing_starts(testbed3, tmp_path, breaks, what):
    import yaml

    fleet_file = write_ssh_fleet(testbed3, tmp_path, "bad")
    data = yaml.safe_load(fleet_file.read_text())
    data["nodes"][2].update(breaks(testbed3, tmp_path))
    fleet_file.write_text(yaml.safe_dump(data, sort_keys=False))
    run_root = str(tmp_path / "run")

    ctx = FleetContext.load(fleet_file)
    try:
        with pytest.raises(CouldNotRun) as err:
            launch.up(ctx)
    finally:
        ctx.close()
    text = str(err.value)
    assert "- h3: h3 (" in text and what in text and "nothing was started" in text, text
    # The host named on each "- host: error" line, not a substring of the text: h3's error quotes a random
    # host key fingerprint, which may well contain "h1".
    assert re.findall(r"^- ([\w.-]+): ", text, re.M) == ["h3"], text
    assert leftovers(run_root) == [] and not (tmp_path / "run").exists()

    # The probe reports every host: the good ones with their facts, the bad one with its error.
    probe = p2pctl("probe", "-f", str(fleet_file), "--json")
    assert probe.returncode == 2 and "Traceback" not in probe.stderr, probe.stderr
    nodes = json.loads(probe.stdout)["nodes"]
    assert nodes["h1"]["error"] is None and nodes["h1"]["python"]["packages"]["lmcache"]
    assert nodes["h2"]["error"] is None
    assert what in nodes["h3"]["error"] and nodes["h3"]["error"].startswith("h3 (")

    # down reports each host too: nothing to stop on the good ones, the error for the bad one.
    down = p2pctl("down", "-f", str(fleet_file))
    assert down.returncode == 1 and "Traceback" not in down.stderr, down.stderr
    rows = dict(line.rstrip().split(None, 1) for line in down.stdout.splitlines()[2:])
    assert rows["h1-0/server"] == rows["h2-0/engine"] == "none", down.stdout
    assert rows["h3/servers"].startswith("error: h3 (") and what in rows["h3/servers"], down.stdout
    assert leftovers(run_root) == []
    shutil.rmtree(tmp_path / "run", ignore_errors=True)
