"""Network faults injected on the node itself, through its connector: generic, so they work on a real
cluster as on the netns testbed.

The interface is the one that holds the node's address (found on the node, like env.sh does for UCX). Each
fault schedules its own undo *on the node* (`nohup sh -c '...; sleep N; undo'`) before it bites, so losing the
SSH session to the cut node (which the cut causes) can never leave the link down or the rate limit on.

`tc netem` would be the natural slow-peer tool, but this kernel has no netem qdisc ("Specified qdisc kind is
unknown"), so the slow peer is a token-bucket rate limit (`tbf`) on the node's egress: bytes it serves to a
peer (a P2P pull) crawl, requests still get through.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass

from p2p_ops.errors import BadInput, CouldNotRun
from p2p_ops.facts.netdev import IPV4_INTERFACES
from p2p_ops.facts.sections import read_fact
from p2p_ops.lifecycle.context import FleetContext


def eligible(ctx: FleetContext) -> str:
    """'' when network faults can be injected on every node of this fleet; else why not (one line)."""
    for node in ctx.fleet.nodes:
        if node.connection != "ssh":
            return (f"node {node.name} is connection: {node.connection}; network faults need SSH nodes with "
                    "their own interface (e.g. the netns testbed: scripts/testbed.sh up N --netns)")
    for node in ctx.fleet.nodes:
        iface = interface_of(ctx, node)
        if iface in ("", "lo"):
            return (f"node {node.name}'s address {node.address} is on {iface or 'no interface'}: taking that "
                    "down would cut every host, not one link; network faults need a host with its own interface")
    return ""


def interface_of(ctx: FleetContext, node) -> str:
    """The interface that holds the node's address, as the node sees it ("" when none does)."""
    return read_fact(ctx.conn(node), IPV4_INTERFACES, timeout=15).get(node.address, "")


@dataclass
class NetFault:
    """One fault on one node's interface; `undo()` is idempotent and also safe after the node's own undo."""

    ctx: object
    node: object
    iface: str
    undo_cmd: str
    what: str

    def undo(self) -> None:
        try:
            self.ctx.conn(self.node).run(self.undo_cmd + " 2>/dev/null || true", timeout=20)
        except Exception:  # noqa: BLE001 - the node's scheduled undo still runs; never mask the scenario's result
            pass


def _iface(ctx: FleetContext, node) -> str:
    iface = interface_of(ctx, node)
    if iface in ("", "lo"):
        raise BadInput(f"node {node.name}: no interface of its own holds {node.address} ({iface or 'none'})")
    return iface


def _schedule(ctx: FleetContext, node, body: str, what: str) -> None:
    """Run `body` detached on the node (it outlives this SSH session and the link it cuts)."""
    cmd = f"nohup sh -c {shlex.quote(body)} >/dev/null 2>&1 </dev/null & echo scheduled"
    res = ctx.conn(node).run(cmd, timeout=20)
    if not res.ok or "scheduled" not in res.stdout:
        raise CouldNotRun(f"node {node.name}: could not {what}: {(res.stderr or res.stdout).strip()[:300]}")


def cut_link(ctx: FleetContext, node, seconds: float) -> NetFault:
    """Take the node's interface down for `seconds`; the node brings it back by itself."""
    iface = _iface(ctx, node)
    q, n = shlex.quote(iface), max(1, int(round(seconds)))
    up = f"ip link set dev {q} up"
    # One second's grace: the SSH answer to this very command must leave before the link goes.
    _schedule(ctx, node, f"sleep 1; ip link set dev {q} down; sleep {n}; {up}", f"take {iface} down")
    time.sleep(1.2)
    return NetFault(ctx, node, iface, up, f"{iface} down for {n} s")


def rate_limit(ctx: FleetContext, node, seconds: float, rate_kbit: int) -> NetFault:
    """A token-bucket limit on the node's egress for `seconds` (undone by the node itself, and by undo())."""
    iface = _iface(ctx, node)
    q, n = shlex.quote(iface), max(1, int(round(seconds))) + 5
    burst = max(4, rate_kbit // 8)  # kbit: about 1/8 s of traffic (tbf needs at least one MTU)
    add = f"tc qdisc replace dev {q} root tbf rate {int(rate_kbit)}kbit burst {burst}kbit latency 2s"
    delete = f"tc qdisc del dev {q} root"
    # Added synchronously (so its failure is seen here); the undo is scheduled before it.
    _schedule(ctx, node, f"sleep {n}; {delete}", f"schedule the removal of a rate limit on {iface}")
    res = ctx.conn(node).run(add, timeout=20)
    if not res.ok:
        ctx.conn(node).run(delete + " 2>/dev/null || true", timeout=20)
        raise CouldNotRun(f"node {node.name}: `{add}` failed: {(res.stderr or res.stdout).strip()[:300]}")
    return NetFault(ctx, node, iface, delete, f"{iface} egress limited to {rate_kbit} kbit/s")
