"""Network-namespace testbed: each host has its own interface, so the P2P bytes of the cross-node proof show
on the veth counters of exactly the two hosts involved (the rail evidence an operator reads on real NICs).

Needs root and `ip netns` (skipped with the reason otherwise). UCX is limited to TCP here: the namespaces
share one kernel and hostname, so UCX would otherwise move the bytes through shared memory and no interface
would see them; on separate machines that question does not arise.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from bench import testbed
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from tests.multinode.conftest import leftovers, needs_engine, needs_sshd, write_ssh_fleet

pytestmark = [pytest.mark.multinode, needs_sshd, needs_engine]


def _netns_allowed() -> str:
    """'' when we may create namespaces, veths and bridges; else why not."""
    if os.geteuid() != 0:
        return "--netns needs root (ip netns, veth, bridge)"
    name = f"p2pchk{uuid.uuid4().hex[:6]}"
    res = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if res.returncode != 0:
        return f"`ip netns add` is not permitted here: {res.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ""


def veth_bytes(veth: str) -> dict[str, int]:
    stats = Path("/sys/class/net") / veth / "statistics"
    return {k: int((stats / k).read_text()) for k in ("rx_bytes", "tx_bytes")}


def test_p2p_bytes_cross_the_veths_of_the_two_hosts_involved(tmp_path):
    why = _netns_allowed()
    if why:
        pytest.skip(why)
    from p2p_ops.harness.basic import run_basic

    with testbed.running(2, testbed.private_dir(), netns=True) as tb:
        assert tb.mode == "netns" and tb.control_address and all(h.veth for h in tb.hosts)
        fleet_file = write_ssh_fleet(tb, tmp_path, "ns", settings={"ucx_tls": "tcp"})
        ctx = FleetContext.load(fleet_file)
        try:
            launch.up(ctx)
            rep = launch.wait(ctx, timeout=120)
            assert all(i.server.peer_count == 1 for i in rep.instances)
            h1, h2 = tb.hosts
            before = {h.name: veth_bytes(h.veth) for h in tb.hosts}
            result = run_basic(ctx, a="h1-0", b="h2-0")
            after = {h.name: veth_bytes(h.veth) for h in tb.hosts}
            assert result.passed, ([c for c in result.checks if not c.ok], result.likely_cause)
            pulled = result.numbers["kv_bytes_pulled_b"]
            assert pulled > 0
            # Seen from this (root) namespace: what leaves h1 arrives on its veth (rx), what enters h2 leaves
            # the bridge through h2's veth (tx). Both carried at least the KV bytes B pulled from A.
            out_of_a = after["h1"]["rx_bytes"] - before["h1"]["rx_bytes"]
            into_b = after["h2"]["tx_bytes"] - before["h2"]["tx_bytes"]
            assert out_of_a >= pulled and into_b >= pulled, (pulled, before, after)
        finally:
            launch.down(ctx)
            ctx.close()
    assert leftovers(str(tmp_path / "run")) == []
