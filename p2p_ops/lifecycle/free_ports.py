"""Free ports on this machine for everything that starts its own fleet (the demo, the benchmarks, the tests).

`choose(n, offset)` is the one way to a fleet's ports: spec/ports.py's default plan (with `router=True` also the
router's ports) shifted by the user's `--port-offset` (refused in one line when a port is taken), or by the
first multiple of 1000 at which every port is free, so a run beside a fleet on the default ports takes the next
offset. The offset a verb prints is one the user can pass again, and `p2pctl init --port-offset` shifts the same
plan. `free_port(addresses)` is one port for a helper process (a testbed sshd, a bare engine, a stub server).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from p2p_ops.errors import BadInput, CouldNotRun
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.ports import default_base
from p2p_ops.spec.settings import RouterSettings
from p2p_ops.spec.starter import local_fleet
from p2p_ops.spec.units import port_plan

LOOPBACK = ("127.0.0.1",)
# The router's ports in a base -> its settings (spec.settings.RouterSettings), whose defaults an offset shifts.
_ROUTER_KEYS = {"router": "port", "router_prometheus": "prometheus_port", "kv_events": "kv_events_port_base"}
# Offsets the verbs try, 0 first: the highest keeps the whole plan below the ephemeral range (32768+).
OFFSET_STEP, OFFSET_LIMIT = 1000, 20000


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Nothing listens on host:port right now (a port in TIME_WAIT counts as free, as for the servers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def free_port(addresses: Sequence[str] = LOOPBACK, attempts: int = 200) -> int:
    """The kernel's pick on the first address, checked on the others."""
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((addresses[0], 0))
            port = s.getsockname()[1]
        if all(port_free(port, a) for a in addresses[1:]):
            return port
    raise CouldNotRun(f"no port free on all of {', '.join(addresses)} after {attempts} tries")


def router_ports(base: dict[str, int]) -> dict[str, int]:
    return {setting: base[kind] for kind, setting in _ROUTER_KEYS.items()}


def planned_ports(base: dict[str, int], n: int) -> list[int]:
    """The port plan of the starter fleet of n nodes on this base (its router's too when the base has them)."""
    data = local_fleet(n, name="free-ports", base=base)
    if "router" in base:
        data["router"] = {"enabled": True, **router_ports(base)}
    return [p.port for p in port_plan(parse_fleet(data))]


def offset_base(offset: int, router: bool = False) -> dict[str, int]:
    """The default plan (the router's too, with router) shifted by offset, as `p2pctl init --port-offset` does."""
    base = default_base(offset)
    if router:
        base |= {kind: RouterSettings.model_fields[setting].default + offset
                 for kind, setting in _ROUTER_KEYS.items()}
    return base


@dataclass(frozen=True)
class PortChoice:
    base: dict[str, int]
    offset: int
    picked: bool  # True: the first free offset; False: the user's --port-offset

    def line(self) -> str:
        b = self.base
        how = (f"picked free ports: the default plan + {self.offset}, the first free offset (--port-offset K "
               "chooses one)" if self.picked else f"ports: the default plan + {self.offset} (--port-offset)")
        where = (f"coordinator {b['coordinator']}, servers mp/http/p2p from {b['mp'] + 1}/{b['http'] + 1}/"
                 f"{b['p2p'] + 1}, engines from {b['engine'] + 1}")
        if "router" in b:
            where += (f", router {b['router']} (prometheus {b['router_prometheus']}), KV events from "
                      f"{b['kv_events']}")
        return f"{how}: {where}"

    def to_json(self) -> dict[str, Any]:
        return {"how": "free" if self.picked else "port-offset", "offset": self.offset, "base": dict(self.base)}


def choose(n: int, offset: Optional[int] = None, router: bool = False,
           addresses: Sequence[str] = LOOPBACK) -> PortChoice:
    if offset is not None:
        base = offset_base(offset, router)
        try:
            ports = planned_ports(base, n)
        except (ValueError, BadInput):  # the spec's own bounds refuse ports shifted past 65535
            ports = []
        if not ports or not all(1 <= p <= 65535 for p in ports):
            raise BadInput(f"--port-offset {offset}: puts ports out of range; choose a smaller offset")
        if taken := next(((p, a) for p in ports for a in addresses if not port_free(p, a)), None):
            raise BadInput(f"--port-offset {offset}: port {taken[0]} is in use on {taken[1]}; choose another "
                           "offset, or leave --port-offset out to pick free ports")
        return PortChoice(base, offset, picked=False)
    for off in range(0, OFFSET_LIMIT, OFFSET_STEP):
        base = offset_base(off, router)
        if all(port_free(p, a) for p in planned_ports(base, n) for a in addresses):
            return PortChoice(base, off, picked=True)
    raise CouldNotRun(f"no free port range for {n} nodes at offsets 0..{OFFSET_LIMIT - OFFSET_STEP} of the "
                      "default plan; pass --port-offset K")
