"""One port plan: the default ports of a starter fleet, and what a fleet listens on where.

`p2pctl init`, the demo and `local_fleet` take their ports from `default_base()` (instance i of a local fleet
listens on base + i + 1 for each kind); the probes and the doctor read `port_plan(fleet)` to know which
(node, port) belongs to which process before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from p2p_ops.errors import BadInput
from p2p_ops.spec.model import Coordinator, Fleet

# The ports every instance has (fleet_spec.Ports), in the order plans list them.
INSTANCE_KINDS = ("mp", "http", "p2p", "engine")
SERVER_KINDS = ("mp", "http", "p2p")

# The starter fleet's base ports; the coordinator's is the spec's own default (fleet_spec.Coordinator.port).
DEFAULT_BASE: dict[str, int] = {"coordinator": Coordinator.model_fields["port"].default,
                                "mp": 5600, "http": 8080, "p2p": 8550, "engine": 8000}

Kind = Literal["coordinator", "mp", "http", "p2p", "engine", "router", "router_prometheus", "kv_events",
               "kv_events_replay"]
# The process (unit/role, as FleetContext names them) that owns a port of each kind.
_ROLE_OF: dict[str, str] = {"coordinator": "coordinator", "mp": "server", "http": "server", "p2p": "server",
                            "engine": "engine", "kv_events": "engine", "kv_events_replay": "engine",
                            "router": "router", "router_prometheus": "router"}


def default_base(offset: int = 0) -> dict[str, int]:
    """The starter fleet's base ports, each shifted by offset (several fleets side by side)."""
    return {kind: port + offset for kind, port in DEFAULT_BASE.items()}


def local_instance_ports(base: dict[str, int], index: int) -> dict[str, int]:
    """The ports of the index-th (from 0) instance of a local starter fleet."""
    return {kind: base[kind] + index + 1 for kind in INSTANCE_KINDS}


def local_fleet_ports(base: dict[str, int], n: int) -> list[int]:
    """Every port a local starter fleet of n instances listens on."""
    return [base["coordinator"]] + [port for i in range(n) for port in local_instance_ports(base, i).values()]


@dataclass(frozen=True)
class PlannedPort:
    node: str        # the node's name
    port: int
    role: str        # e.g. "node-a-0 http", "coordinator", "router"
    bind: str        # the address it binds
    instance: str    # the instance id, "coordinator" or "router"
    kind: Kind

    @property
    def process(self) -> str:
        """The process that listens on it, named as FleetContext names it, e.g. "node-a-0/server"."""
        return f"{self.instance}/{_ROLE_OF[self.kind]}"


def port_plan(fleet: Fleet) -> list[PlannedPort]:
    """Everything `up` makes listen, node by node: the coordinator, each instance's server and engine ports,
    and when the fleet runs a router, its ports and the engines' KV-event ports."""
    cnode = fleet.coordinator_node()
    out = [PlannedPort(cnode.name, fleet.coordinator.port, "coordinator", fleet.coordinator.host, "coordinator",
                       "coordinator")]
    for node, inst in fleet.instances():
        for kind in INSTANCE_KINDS:
            out.append(PlannedPort(node.name, getattr(inst.ports, kind), f"{inst.id} {kind}", node.bind_host,
                                   inst.id, kind))
    if not fleet.router.enabled:
        return out
    rnode, r = fleet.router_node(), fleet.router
    out.append(PlannedPort(rnode.name, r.port, "router", rnode.bind_host, "router", "router"))
    out.append(PlannedPort(rnode.name, r.prometheus_port, "router prometheus", rnode.bind_host, "router",
                           "router_prometheus"))
    if fleet.kv_events_on:
        for i, (node, inst) in enumerate(fleet.instances()):
            pub, replay = r.kv_event_ports(i)
            out.append(PlannedPort(node.name, pub, f"{inst.id} kv-events", node.bind_host, inst.id, "kv_events"))
            out.append(PlannedPort(node.name, replay, f"{inst.id} kv-events replay", node.bind_host, inst.id,
                                   "kv_events_replay"))
    return out


def check_local_base(base: dict[str, int], n: int, offset: int) -> None:
    """A starter fleet of n instances on `base` (default ports + offset) keeps every port within 1..65535."""
    if any(not 1 <= port <= 65535 - n - 1 for port in base.values()):
        raise BadInput(f"--port-offset {offset}: puts ports out of range; choose a smaller offset")
