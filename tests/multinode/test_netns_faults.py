"""Faults that need hosts with their own interface, on the netns testbed: a cut link and a slow peer, plus
"SSH nodes bind only their own address" (UCX pinned to the interface that holds it, found by env.sh).

Needs root and `ip netns` (skipped with the reason otherwise; CI runs as root, so these run there). UCX is
limited to TCP as in test_netns_counters.py (the namespaces share one kernel: UCX would use shared memory).
The fleet's p2p_load_timeout is 2 s, so a pull through the slowed peer (800 kbit/s, ~3 MB) cannot make it:
B's engine must recompute, and no request may fail.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from bench import testbed
from p2p_ops.harness import faults
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from tests.multinode.conftest import leftovers, needs_engine, needs_sshd, write_ssh_fleet
from tests.multinode.test_netns_counters import _netns_allowed

pytestmark = [pytest.mark.multinode, needs_sshd, needs_engine]

OPTS = faults.FaultOptions.quick()
LOAD_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def nsfleet(tmp_path_factory):
    why = _netns_allowed()
    if why:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("nsfaults")
    with testbed.running(2, testbed.private_dir(), netns=True) as tb:
        fleet_file = write_ssh_fleet(tb, tmp, "nsf", settings={"ucx_tls": "tcp",
                                                               "p2p_load_timeout": LOAD_TIMEOUT_S})
        with FleetContext.load(fleet_file) as ctx:
            try:
                launch.up(ctx)
                launch.wait(ctx, timeout=120)
                yield tb, ctx, tmp
            finally:
                launch.down(ctx)
    assert leftovers(str(tmp / "run")) == []


def _listeners(netns: str) -> list[tuple[str, int]]:
    """(local address, pid) of every TCP listener in a namespace (`ss -ltnpH`)."""
    out = subprocess.run(["ip", "netns", "exec", netns, "ss", "-ltnpH"], capture_output=True, text=True,
                         check=True).stdout
    found = []
    for line in out.splitlines():
        cols = line.split()
        if len(cols) < 5:
            continue
        addr = cols[3].rsplit(":", 1)[0].strip("[]")
        found += [(addr, int(p)) for p in re.findall(r"pid=(\d+)", line)]
    return found


def _is_fleet_pid(pid: int, marker: str) -> bool:
    try:
        return f"P2P_RUN_DIR={marker}".encode() in (Path("/proc") / str(pid) / "environ").read_bytes()
    except OSError:
        return False


def test_every_fleet_process_listens_only_on_its_node_address(nsfleet):
    tb, ctx, tmp = nsfleet
    seen = 0
    for host in tb.hosts:
        fleet_listeners = [(a, p) for a, p in _listeners(host.netns) if _is_fleet_pid(p, str(tmp / "run"))]
        wider = [(a, p) for a, p in fleet_listeners if a != host.address and not a.startswith("127.")]
        assert not wider, f"{host.name}: fleet listeners beyond {host.address}: {wider}"
        seen += len(fleet_listeners)
        envs = [(Path("/proc") / str(p) / "environ").read_bytes() for _, p in fleet_listeners]
        assert any(b"UCX_NET_DEVICES=eth0\0" in e for e in envs), f"{host.name}: no server pinned UCX to eth0"
    assert seen >= 5  # coordinator, 2 servers (HTTP, MP, P2P, UCX), 2 engines
    from p2p_ops.harness.basic import run_basic

    result = run_basic(ctx, a="h1-0", b="h2-0")
    assert result.passed, ([c for c in result.checks if not c.ok], result.likely_cause)


def test_link_cut_comes_back_by_itself_and_other_engines_keep_serving(nsfleet):
    tb, ctx, _ = nsfleet
    fig, _ = faults.run_scenario(ctx, "link_cut", OPTS)
    print(faults.table_markdown([fig], OPTS))
    assert fig.recovered, fig           # the node restored its own link; peers registered again
    assert fig.failed_by_phase["before"] == 0 and fig.failed_by_phase["after"] == 0, fig
    assert fig.unexpected_failures == 0, fig.note
    # Measured and reported, not required: a lookup cut off mid-way is never consumed, and LMCache 0.5.6 keeps
    # such jobs (no TTL) and their read locks (300 s read TTL); see drain.py.
    assert fig.lookups_drained is not None and fig.lookups_inflight_max is not None, fig
    # The node's scheduled restore ran: its interface is up again.
    link = subprocess.run(["ip", "netns", "exec", tb.hosts[1].netns, "ip", "-o", "link", "show", "eth0"],
                          capture_output=True, text=True).stdout
    assert "state UP" in link or ",UP" in link, link


def test_slow_peer_slower_than_the_load_timeout_is_recomputed(nsfleet):
    tb, ctx, _ = nsfleet
    fig, _ = faults.run_scenario(ctx, "slow_peer", OPTS)
    print(faults.table_markdown([fig], OPTS))
    assert fig.extra["p2p_load_timeout_s"] == LOAD_TIMEOUT_S
    assert fig.extra["fresh_docs"] == OPTS.docs and fig.extra["fresh_ok"] == OPTS.docs, fig.extra
    assert fig.failed == 0, fig.note    # every pull that timed out was recomputed
    assert fig.recovered and fig.lookups_drained is not None, fig
    qdisc = subprocess.run(["ip", "netns", "exec", tb.hosts[0].netns, "tc", "qdisc", "show", "dev", "eth0"],
                           capture_output=True, text=True).stdout
    assert "tbf" not in qdisc, qdisc    # the rate limit is gone again

