"""The starter fleet's ports: `p2pctl init`, the demo and `local_fleet` take them from `default_base()`
(instance i of a local fleet listens on base + i + 1 for each kind).

What a fleet listens on where, and which unit owns each port, is `spec.units.port_plan(fleet)`.
"""

from __future__ import annotations

from p2p_ops.errors import BadInput
from p2p_ops.spec.model import Coordinator, Ports

# The ports every instance has (`spec.model.Ports`: mp, http, p2p, engine); all but the engine's are its server's.
INSTANCE_KINDS = tuple(Ports.model_fields)
SERVER_KINDS = tuple(k for k in INSTANCE_KINDS if k != "engine")

# The starter fleet's base ports; the coordinator's is the spec's own default (`spec.model.Coordinator.port`).
DEFAULT_BASE: dict[str, int] = {"coordinator": Coordinator.model_fields["port"].default,
                                "mp": 5600, "http": 8080, "p2p": 8550, "engine": 8000}


def default_base(offset: int = 0) -> dict[str, int]:
    return {kind: port + offset for kind, port in DEFAULT_BASE.items()}


def local_instance_ports(base: dict[str, int], index: int) -> dict[str, int]:
    return {kind: base[kind] + index + 1 for kind in INSTANCE_KINDS}


def local_fleet_ports(base: dict[str, int], n: int) -> list[int]:
    return [base["coordinator"]] + [port for i in range(n) for port in local_instance_ports(base, i).values()]


def check_local_base(base: dict[str, int], n: int, offset: int) -> None:
    """A starter fleet of n instances on `base` (default ports + offset) keeps every port within 1..65535."""
    if any(not 1 <= port <= 65535 - n - 1 for port in base.values()):
        raise BadInput(f"--port-offset {offset}: puts ports out of range; choose a smaller offset")
