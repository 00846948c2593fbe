"""What the fleet looks like right now: each process's state, each server's P2P view, each engine's health.

`report()` reads it (never raises for one unreachable node: its processes read "unreachable"); `status`,
`wait` and the test harness judge it. A fleet is ready when every server is registered with all its peers,
every engine is healthy and linked to its server, and the router (if any) lists every engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from p2p_ops.endpoints import engine_api, lmcache_api
from p2p_ops.errors import BadInput, CouldNotRun
from p2p_ops.lifecycle import procs
from p2p_ops.lifecycle import router as fleet_router
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.spec.model import Fleet, Instance, Node
from p2p_ops.spec.settings import hostport


@dataclass
class InstanceReport:
    node: str
    instance: str
    server_proc: str
    engine_proc: str
    server: lmcache_api.ServerStatus
    engine_healthy: bool
    server_url: str
    engine_url: str
    engine_lmcache: str = "n/a"     # the embedded engine's link to its server
    p2p: bool = True                # settings.p2p: false -> the server is meant to stay out of the mesh
    misadvertised: str = ""         # what is wrong with the P2P URL the coordinator lists for it ("" if nothing)

    def ready(self, expected_peers: int) -> bool:
        s = self.server
        meshed = not self.p2p or (s.p2p_state == "registered" and s.peer_count == expected_peers
                                  and not self.misadvertised)
        return (s.reachable and meshed and self.engine_healthy and self.engine_lmcache != "disconnected")

    def problem(self, expected_peers: int) -> str:
        s = self.server
        if self.server_proc != "running":
            return f"server process is {self.server_proc}"
        if not s.reachable:
            return "server does not answer /status"
        if self.p2p and s.p2p_state != "registered":
            return f"p2p_state is {s.p2p_state} (not registered with the coordinator)"
        if self.misadvertised:
            return self.misadvertised
        if self.p2p and s.peer_count != expected_peers:
            return f"sees {s.peer_count} peer(s) {s.peers}, expected {expected_peers}"
        if self.engine_proc != "running":
            return f"engine process is {self.engine_proc}"
        if not self.engine_healthy:
            return "engine does not answer /health"
        if self.engine_lmcache == "disconnected":
            return "engine is degraded: its lmcache server is unreachable (serving without the cache)"
        return "ok"

    @property
    def engine_degraded(self) -> bool:
        # Serving without its lmcache server (recomputing), it shares nothing meanwhile.
        return self.engine_healthy and self.engine_lmcache == "disconnected"

    @property
    def engine_health(self) -> str:
        """healthy, degraded (and why), or its process state when it does not answer /health."""
        if not self.engine_healthy:
            return self.engine_proc
        return "degraded: lmcache unreachable" if self.engine_degraded else "healthy"


@dataclass
class FleetReport:
    fleet: str
    coordinator_url: str
    coordinator_proc: str
    coordinator_healthy: bool
    coordinator_instances: Optional[list[dict]]
    expected_peers: int
    instances: list[InstanceReport]
    node_errors: dict[str, str] = field(default_factory=dict)
    router: Optional[fleet_router.RouterStatus] = None

    @property
    def ready(self) -> bool:
        return (self.coordinator_healthy and all(i.ready(self.expected_peers) for i in self.instances)
                and (self.router is None or self.router.ready))

    def to_json(self) -> dict:
        return {
            "fleet": self.fleet,
            "ready": self.ready,
            "coordinator": {"url": self.coordinator_url, "process": self.coordinator_proc,
                            "healthy": self.coordinator_healthy, "instances": self.coordinator_instances},
            "expected_peers": self.expected_peers,
            "node_errors": self.node_errors,
            "instances": [{
                "node": i.node, "instance": i.instance, "server_process": i.server_proc,
                "engine_process": i.engine_proc, "server_url": i.server_url, "engine_url": i.engine_url,
                "p2p_state": i.server.p2p_state, "peer_count": i.server.peer_count, "peers": i.server.peers,
                "l1_used_bytes": i.server.l1_used, "l1_total_bytes": i.server.l1_total,
                "engine_healthy": i.engine_healthy, "engine_lmcache": i.engine_lmcache,
                "engine_health": i.engine_health,
                "ready": i.ready(self.expected_peers),
                "problem": i.problem(self.expected_peers),
            } for i in self.instances],
            **({"router": self.router.to_json()} if self.router is not None else {}),
        }


def misadvertised(fleet: Fleet, members: Optional[list[dict]]) -> dict[str, str]:
    """Each P2P instance the coordinator lists under another URL than fleet.yaml places it at, and what is wrong.
    Peers dial the listed URL; once a handshake to it has failed, LMCache's loopback pulls may still work, so a
    full peer count alone can look ready on a URL that no peer can reach."""
    listed = {str(e.get("instance_id")): str(e.get("p2p_advertised_url") or "") for e in members or []}
    out = {}
    for node, inst in fleet.instances():
        got, want = listed.get(inst.id), hostport(node.address, inst.ports.p2p)
        if got and got != want and fleet.effective_settings(inst).p2p:
            out[inst.id] = (f"advertises P2P URL {got} but fleet.yaml places it at {want}: check "
                            "LMCACHE_P2P_ADVERTISE_URL in its env.sh (`p2pctl render` rewrites it)")
    return out


def report(ctx: FleetContext) -> FleetReport:
    fleet = ctx.fleet
    read = ctx.for_each_node(lambda n: {st.name: st.state for st in procs.states(ctx.conn(n), ctx.procs(n))})
    errors = {name: str(res) for name, res in read.items() if isinstance(res, Exception)}
    states: dict[str, str] = {}
    for node in fleet.nodes:
        # One unreachable host must not hide the others: its processes read "unreachable".
        res = read[node.name]
        states |= {p.name: "unreachable" for p in ctx.procs(node)} if isinstance(res, Exception) else res

    members = lmcache_api.coordinator_instances(fleet.coordinator_url)
    wrong = misadvertised(fleet, members)

    def instance(node: Node, inst: Instance) -> InstanceReport:
        surl, eurl = ctx.server_url(node, inst), ctx.engine_url(node, inst)
        healthy = engine_api.engine_healthy(eurl)
        link = engine_api.engine_lmcache_state(eurl) if healthy and fleet.runtime == "embedded" else "n/a"
        return InstanceReport(node.name, inst.id, states.get(f"{inst.id}/server", "none"),
                              states.get(f"{inst.id}/engine", "none"), lmcache_api.server_status(surl),
                              healthy, surl, eurl, link, fleet.effective_settings(inst).p2p, wrong.get(inst.id, ""))

    # Three HTTP probes per instance: on a large fleet, one node after another would add up (bench/suite/fleet_scale).
    per_node = ctx.for_each_node(lambda n: [instance(n, inst) for inst in n.instances])
    if failed := next((res for res in per_node.values() if isinstance(res, Exception)), None):
        raise failed
    items = [item for res in per_node.values() for item in res]  # type: ignore[union-attr]
    return FleetReport(fleet.name, fleet.coordinator_url, states.get(ctx.unit("coordinator").name, "none"),
                       lmcache_api.coordinator_healthy(fleet.coordinator_url),
                       members, len(fleet.instances()) - 1, items, errors,
                       fleet_router.status(ctx) if fleet.router.enabled else None)


def require_ready(ctx: FleetContext, alternative: str = "") -> FleetReport:
    """Or a one-line refusal naming what to run, before a verb that needs a running fleet starts (the router is
    not required: verbs that need it check it themselves)."""
    rep = report(ctx)
    name, spec = ctx.fleet.name, ctx.fleet_file
    if not rep.coordinator_healthy and not any(i.server.reachable or i.engine_healthy for i in rep.instances):
        raise BadInput(f"fleet {name!r} is not running (nothing answers at {rep.coordinator_url} or on its servers "
                       f"and engines): start it with `p2pctl up -f {spec}` and `p2pctl wait -f {spec}`"
                       + (f", {alternative}" if alternative else ""))
    problems = ([] if rep.coordinator_healthy else [f"the coordinator does not answer at {rep.coordinator_url}"])
    problems += [f"{i.instance}: {i.problem(rep.expected_peers)}" for i in rep.instances
                 if not i.ready(rep.expected_peers)]
    if problems:
        raise CouldNotRun(f"fleet {name!r} is not ready ({'; '.join(problems[:3])}): `p2pctl wait -f {spec}` "
                          f"waits for it, `p2pctl doctor -f {spec}` says why not")
    return rep
