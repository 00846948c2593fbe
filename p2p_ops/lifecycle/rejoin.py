"""A server started again must first be forgotten by its peers, or they never pull from it again.

Each running lmcache server keeps one P2P adapter per peer the coordinator lists. It replaces one only when the
peer's address changes or when the peer stays unlisted for more than three of its polls (LMCache 0.5.6,
`P2PController._MAX_MISSES`). A server started again at the same address before that keeps its peers' old
adapters, whose NIXL agent was the dead process's: every pull from it fails with NIXL_ERR_REMOTE_DISCONNECT and
nothing heals it (cause remote_disconnect). Measured here: a server SIGKILLed and started again 16 s later was
never pulled from again; started after its peers had dropped it (38 s), it was. A server that died without
deregistering stays listed until the coordinator evicts it (--instance-timeout 30 s, swept every 10 s).
"""

from __future__ import annotations

import time
from typing import Callable

from p2p_ops.endpoints import lmcache_api
from p2p_ops.lifecycle.context import FleetContext

# LMCache's coordinator defaults (p2pctl does not change them) and its servers' poll tolerance.
INSTANCE_TIMEOUT_S = 30.0
HEALTH_CHECK_INTERVAL_S = 10.0
PEER_MISSES = 3


def forget_deadline_s(ctx: FleetContext) -> float:
    """The longest a dead server stays in some peer's adapters: evicted by the coordinator, then missed by
    every peer's polls (one more than PEER_MISSES), plus a poll of slack."""
    beat = max(ctx.fleet.effective_settings(i).heartbeat_interval for _, i in ctx.fleet.instances())
    return INSTANCE_TIMEOUT_S + HEALTH_CHECK_INTERVAL_S + (PEER_MISSES + 2) * beat


def remembered(ctx: FleetContext, ids: set[str]) -> dict[str, list[str]]:
    """Of the servers `ids` that do not answer (not running), who still remembers each: the coordinator's
    list, or a running peer's p2p_peers. Only peers the coordinator lists are asked (a fresh fleet: none)."""
    members = lmcache_api.coordinator_instances(ctx.fleet.coordinator_url)
    if members is None:
        return {}
    listed = {str(m.get("instance_id")) for m in members}
    urls = {inst.id: ctx.server_url(node, inst) for node, inst in ctx.fleet.instances()}
    peers = {pid: ctx.server_url(*ctx.fleet.instance(pid)) for pid in listed - ids if pid in urls}
    asked = ids | set(peers)
    answers = ctx.for_each_node(lambda n: {i.id: lmcache_api.server_status(urls[i.id]) for i in n.instances
                                           if i.id in asked})
    status = {k: v for res in answers.values() if isinstance(res, dict) for k, v in res.items()}
    out: dict[str, list[str]] = {}
    for sid in sorted(ids):
        if sid in status and status[sid].reachable:
            continue                                   # running: `up` keeps it, nobody holds a stale adapter
        who = (["the coordinator"] if sid in listed else []) + sorted(
            p for p in peers if p in status and sid in status[p].peers)
        if who:
            out[sid] = who
    return out


def wait_forgotten(ctx: FleetContext, ids: set[str], timeout_s: float,
                   progress: Callable[[str], None]) -> dict[str, list[str]]:
    """Wait until no one remembers the servers `ids` about to start; what is still remembered at timeout_s is
    returned (and said): starting it then risks remote_disconnect on those peers."""
    until = time.monotonic() + timeout_s
    said = False
    while (left := remembered(ctx, ids)) and time.monotonic() < until:
        if not said:
            progress("waiting for " + "; ".join(f"{s} to leave {', '.join(w)}" for s, w in left.items())
                     + f" (up to {timeout_s:.0f} s): a server started again at the address its peers remember is "
                     "never pulled from (their NIXL link is the dead process's)")
            said = True
        time.sleep(1.0)
    for sid, who in left.items():
        progress(f"warning: {', '.join(who)} still remember(s) {sid}: pulls from it may fail "
                 "(cause remote_disconnect; `p2pctl doctor` names it and its fix)")
    return left
