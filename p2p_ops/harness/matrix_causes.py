"""Why a pair of the matrix failed: the likeliest cause from evidence gathered once for all failing pairs.

Checked in this order, the first that applies names the cause: the request itself; bytes or model (a hit with a
different answer); a stale own-L1 hit; the source's advertised P2P URL (the coordinator's /instances against the
spec); the target's peer list; TCP reachability from the target's node to the source's P2P and request ports;
then the must-agree settings of the two peers.
"""

from __future__ import annotations

from typing import Protocol

from p2p_ops.diagnose import peer_settings
from p2p_ops.endpoints import lmcache_api
from p2p_ops.facts.reach import reach_fact
from p2p_ops.facts.sections import read_fact
from p2p_ops.lifecycle.context import FleetContext


class Pair(Protocol):
    """What a cause reads of a failing `matrix.Pair` (a protocol: matrix imports this module, not the reverse)."""

    source: str
    target: str
    need: int
    cached_tokens: int
    p2p_loads: float
    identical: bool
    mismatch_tokens: float
    error: str
    cause: str


def explain(ctx: FleetContext, failing: list[Pair]) -> None:
    """Fill `cause` of every failing pair (in place)."""
    ev = _Evidence(ctx, failing)
    for pair in failing:
        pair.cause = _cause(ev, pair)


class _Evidence:
    """What every cause needs, read once: advertised URLs, peer lists, reachability, settings."""

    def __init__(self, ctx: FleetContext, failing: list[Pair]) -> None:
        self.ctx = ctx
        self.where = {i.id: (n, i) for n, i in ctx.fleet.instances()}
        listed = lmcache_api.coordinator_instances(ctx.fleet.coordinator_url)
        self.coordinator_ok = listed is not None
        self.advertised = {e.get("instance_id"): e.get("p2p_advertised_url", "") for e in listed or []}
        targets = {p.target for p in failing}
        self.peers = {t: lmcache_api.server_status(ctx.server_url(*self.where[t])) for t in targets}
        self.unreachable = self._reach(failing)
        self._settings = None

    def expected_url(self, inst_id: str) -> str:
        node, inst = self.where[inst_id]
        return f"{node.address}:{inst.ports.p2p}"

    def settings(self) -> list:
        if self._settings is None:
            try:
                self._settings = peer_settings.mismatches(peer_settings.collect(self.ctx))
            except Exception:  # noqa: BLE001 - a node that cannot be read is not evidence of a mismatch
                self._settings = []
        return self._settings

    def _reach(self, failing: list[Pair]) -> dict[tuple[str, str], str]:
        """(source, target) -> "host:port (what)" the target's node could not connect to."""
        out: dict[tuple[str, str], str] = {}
        by_target: dict[str, set[str]] = {}
        for p in failing:
            by_target.setdefault(p.target, set()).add(p.source)
        for target, sources in by_target.items():
            node = self.where[target][0]
            wanted = []
            for s in sorted(sources):
                sn, si = self.where[s]
                wanted += [(f"{s} p2p", sn.address, si.ports.p2p), (f"{s} mp", sn.address, si.ports.mp)]
            try:
                results = read_fact(self.ctx.conn(node), reach_fact(node.name, wanted), timeout=20)
            except Exception:  # noqa: BLE001 - an unreachable node is reported by its own pairs' errors
                continue
            for r in results:
                if not r.ok:
                    out.setdefault((r.target.split()[0], target), f"{r.host}:{r.port} ({r.target.split()[1]})")
        return out


def _cause(ev: _Evidence, p: Pair) -> str:
    if p.error.startswith("source "):
        return p.error
    if p.error:
        return f"the request to {p.target} failed ({p.error[:120]}): check its engine (`p2pctl status`, engine.log)"
    if p.mismatch_tokens:
        return (f"{p.target} loaded {p.mismatch_tokens:g} token(s) whose KV bytes disagree: a corrupted or mis-laid "
                "transfer, or the peers' engine.profile differs")
    if p.cached_tokens >= p.need and p.p2p_loads > 0 and not p.identical:
        return (f"{p.target} used {p.source}'s KV but answered differently: the engines disagree on the model "
                "(engine.model_seed, layers, profile)")
    if p.cached_tokens >= p.need and p.p2p_loads == 0:
        return f"{p.target} hit its own L1: the prompt was seen there before (rerun with a new --seed)"
    return _path_cause(ev, p) or _settings_cause(ev, p) or (
        f"no P2P hit on {p.target} although {p.source}'s URL, the peer list, reachability and settings look right: "
        f"look for P2P lookup/load timeouts in {p.target}'s server.log (`p2pctl diagnose`)")


def _path_cause(ev: _Evidence, p: Pair) -> str:
    if not ev.coordinator_ok:
        return "the coordinator does not answer /instances: peers cannot find each other (`p2pctl status`)"
    got, want = ev.advertised.get(p.source), ev.expected_url(p.source)
    if got is None:
        return f"{p.source} is not registered with the coordinator: no peer can find it (`p2pctl wait`)"
    if got != want:
        return (f"{p.source} advertises P2P URL {got!r} but the spec says {want!r}: peers dial the wrong place "
                "(re-render and restart its server)")
    st = ev.peers.get(p.target)
    if st is not None and st.reachable and p.source not in st.peers:
        return (f"{p.target}'s server does not list {p.source} as a peer ({st.p2p_state}, peers "
                f"{', '.join(st.peers) or 'none'}): it never asks it (`p2pctl wait`, coordinator reachability)")
    blocked = ev.unreachable.get((p.source, p.target))
    if blocked:
        return (f"{p.target}'s node cannot open a TCP connection to {p.source}'s {blocked}: a blocked port or a "
                "server bound to another address")
    return ""


def _settings_cause(ev: _Evidence, p: Pair) -> str:
    for d in ev.settings():
        if {p.source, p.target} & set(d.values) and len({d.values.get(p.source), d.values.get(p.target)} - {None}) > 1:
            return d.describe()
    return ""
