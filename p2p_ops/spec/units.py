"""The fleet's units: every long-lived process a fleet can have (coordinator, an instance's lmcache server or
engine, the router, the fleet's own Prometheus), in one table, in the order `up` starts them. `up`, `down`,
`status`, the dry run, the probe, the doctor and the bundle iterate it; adding a unit means adding a builder
below (and a template for its wrapper). A unit's `marker` is what its command line contains once running, so a
recycled pid is never taken for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Optional, cast

from p2p_ops.endpoints import engine_api, fetch, lmcache_api
from p2p_ops.spec.layout import COORDINATOR, PROMETHEUS, ROUTER, RunLayout
from p2p_ops.spec.model import Fleet, Instance, Node, hostport
from p2p_ops.spec.ports import SERVER_KINDS

# What every instance runs (its folder holds one wrapper, log and pidfile of each).
INSTANCE_ROLES = ("server", "engine")
# In start order; `down` stops them in reverse (the router first: no client is sent to an engine going away).
ROLES = ("coordinator", *INSTANCE_ROLES, "router", "prometheus")
# What `up` and `down` manage (`--role`); the fleet's Prometheus has its own verb, `p2pctl prometheus`.
LAUNCHED_ROLES = ROLES[:4]

Kind = Literal["coordinator", "mp", "http", "p2p", "engine", "router", "router_prometheus", "kv_events",
               "kv_events_replay", "prometheus"]


@dataclass(frozen=True)
class PlannedPort:
    node: str        # the node's name ("" for Prometheus: the machine p2pctl runs on)
    port: int
    role: str        # what listens, in words: "node-a-0 http", "coordinator", "router"
    bind: str        # the address it binds
    instance: str    # the instance id, or the singleton's folder ("coordinator", "router", "prometheus")
    kind: Kind
    process: str     # the unit that listens on it, e.g. "node-a-0/server"
    field: str = ""  # where the spec sets it, e.g. "nodes[1].instances[0].ports.http"


@dataclass(frozen=True)
class Unit:
    role: str
    node: Optional[Node]
    instance: Optional[Instance]
    folder: str
    url: str
    marker: str
    ports: tuple[PlannedPort, ...]
    phase: Optional[int]    # units of a phase start together; None: not started by `up`
    ready: Callable[..., bool] = field(compare=False, repr=False)   # called without arguments
    ready_says: str = ""
    # How long `up` waits for it at most when the caller's default is too short (vLLM loads its model).
    start_timeout_s: Optional[float] = None

    @property
    def name(self) -> str:
        return f"{self.folder}/{self.role}"

    def proc(self, layout: RunLayout) -> Proc:
        return Proc(name=self.name, workdir=str(layout.dir(self.folder)),
                    wrapper=str(layout.wrapper(self.folder, self.role)), log=str(layout.log(self.folder, self.role)),
                    pidfile=str(layout.pidfile(self.folder, self.role)), marker=self.marker)


@dataclass(frozen=True)
class Proc:
    name: str          # e.g. "node-a-0/server"
    workdir: str
    wrapper: str
    log: str
    pidfile: str
    marker: str        # a string its command line contains once running, e.g. "--http-port 8081 "
    # Before the wrapper execs, the command line is `bash <wrapper>`: the wrapper path identifies it too.


# vLLM becomes healthy after 25-90 s on a 2-core box (model load, warm-up); more on a busy one.
VLLM_START_TIMEOUT_S = 900.0


def _coordinator(fleet: Fleet) -> list[Unit]:
    node, c, url = fleet.coordinator_node(), fleet.coordinator, fleet.coordinator_url
    port = PlannedPort(node.name, c.port, "coordinator", c.host, COORDINATOR, "coordinator",
                       f"{COORDINATOR}/coordinator", "coordinator.port")
    return [Unit("coordinator", node, None, COORDINATOR, url, f"--port {c.port} ", (port,), 0,
                 lambda: lmcache_api.coordinator_healthy(url), f"GET {url}/healthz answers status healthy")]


def _servers(fleet: Fleet) -> list[Unit]:
    out = []
    for where, node, inst in fleet.placed_instances():
        url = f"http://{hostport(node.address, inst.ports.http)}"
        ports = tuple(PlannedPort(node.name, getattr(inst.ports, k), f"{inst.id} {k}", node.bind_host, inst.id,
                                  cast(Kind, k), f"{inst.id}/server", f"{where}.ports.{k}") for k in SERVER_KINDS)
        out.append(Unit("server", node, inst, inst.id, url, f"--http-port {inst.ports.http} ", ports, 0,
                        lambda u=url: lmcache_api.server_status(u).reachable, f"GET {url}/status answers"))
    return out


def _engines(fleet: Fleet) -> list[Unit]:
    # vLLM's connector expects its lmcache server at start-up; embedded engines reconnect to theirs, so they
    # start with the servers and the imports (seconds of CPU each) overlap instead of queueing.
    vllm = fleet.runtime == "vllm"
    out = []
    for index, (where, node, inst) in enumerate(fleet.placed_instances()):
        url = f"http://{hostport(node.address, inst.ports.engine)}"
        name = f"{inst.id}/engine"
        ports = [PlannedPort(node.name, inst.ports.engine, f"{inst.id} engine", node.bind_host, inst.id, "engine",
                             name, f"{where}.ports.engine")]
        if fleet.kv_events_on:
            pub, replay = fleet.router.kv_event_ports(index)
            ports += [PlannedPort(node.name, pub, f"{inst.id} kv-events", node.bind_host, inst.id, "kv_events", name,
                                  "router.kv_events_port_base"),
                      PlannedPort(node.name, replay, f"{inst.id} kv-events replay", node.bind_host, inst.id,
                                  "kv_events_replay", name, "router.kv_events_port_base")]
        out.append(Unit("engine", node, inst, inst.id, url, f"--port {inst.ports.engine} ", tuple(ports),
                        1 if vllm else 0, lambda u=url: engine_api.engine_ready(fleet.runtime, u, fleet.model),
                        engine_api.describe_ready(fleet.runtime, url, fleet.model),
                        VLLM_START_TIMEOUT_S if vllm else None))
    return out


def _router(fleet: Fleet) -> list[Unit]:
    if not fleet.router.enabled:
        return []
    node, r, url = fleet.router_node(), fleet.router, fleet.router_url
    name = f"{ROUTER}/router"
    ports = (PlannedPort(node.name, r.port, "router", node.bind_host, ROUTER, "router", name, "router.port"),
             PlannedPort(node.name, r.prometheus_port, "router prometheus", node.bind_host, ROUTER,
                         "router_prometheus", name, "router.prometheus_port"))
    # vllm-router serves only once every worker answers its health check: after the engines.
    return [Unit("router", node, None, ROUTER, url, f"--port {r.port} ", ports, 2,
                 lambda: fetch.answers(url + "/health"), f"GET {url}/health answers 200")]


def _prometheus(fleet: Fleet) -> list[Unit]:
    p = fleet.prometheus
    url = f"http://{hostport(p.host, p.port)}"
    port = PlannedPort("", p.port, "prometheus", p.host, PROMETHEUS, "prometheus", f"{PROMETHEUS}/prometheus",
                       "prometheus.port")
    marker = f"--web.listen-address={hostport(p.host, p.port)} "
    return [Unit("prometheus", None, None, PROMETHEUS, url, marker, (port,), None,
                 lambda: fetch.answers(url + "/-/ready"), f"GET {url}/-/ready answers 200")]


_BUILDERS: dict[str, Callable[[Fleet], list[Unit]]] = {
    "coordinator": _coordinator, "server": _servers, "engine": _engines, "router": _router,
    "prometheus": _prometheus}
assert tuple(_BUILDERS) == ROLES


def fleet_units(fleet: Fleet, roles: tuple[str, ...] = ROLES) -> list[Unit]:
    return [u for role in ROLES if role in roles for u in _BUILDERS[role](fleet)]


def port_plan(fleet: Fleet, roles: tuple[str, ...] = LAUNCHED_ROLES) -> list[PlannedPort]:
    return [p for u in fleet_units(fleet, roles) for p in u.ports]
