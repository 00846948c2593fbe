"""The fleet context: a loaded fleet, where its state lives, how to reach each node and its processes.

Every verb (launch, status, tests, doctor, bundle, ...) takes one. It imports only the spec and the connectors,
so any module of a layer above may type its `ctx` parameter without an import cycle. Use it as a context
manager: `with FleetContext.load(path) as ctx:` closes its connectors (SSH sessions) on the way out. Unit tests
pass `connect=` a scripted fake connector (tests/support/fake_connector.py) instead of reaching a node.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, TypeVar

from p2p_ops.connectors import Connector, LocalConnector, connector_for
from p2p_ops.endpoints import auth
from p2p_ops.errors import BadInput
from p2p_ops.spec.layout import RunLayout
from p2p_ops.spec.load import load_fleet
from p2p_ops.spec.model import Fleet, Instance, Node, hostport
from p2p_ops.spec.units import LAUNCHED_ROLES, ROLES, Proc, Unit, fleet_units

T = TypeVar("T")


def connect_node(node: Optional[Node]) -> Connector:
    return LocalConnector() if node is None else connector_for(node)


@dataclass
class FleetContext:
    fleet: Fleet
    fleet_file: Path
    layout: RunLayout
    # How a node is reached: `connector_for` (local or SSH) unless a caller (a unit test's scripted fake)
    # says otherwise.
    connect: Callable[[Optional[Node]], Connector] = connect_node
    _conns: dict[str, Connector] = field(default_factory=dict)

    @classmethod
    def load(cls, fleet_file: str | Path, run_dir: Optional[str] = None,
             connect: Callable[[Optional[Node]], Connector] = connect_node) -> FleetContext:
        path = Path(fleet_file)
        fleet = load_fleet(path)
        ctx = cls(fleet, path, RunLayout.for_fleet(path, fleet.name, run_dir), connect)
        for node, inst in fleet.instances() if fleet.api_key else ():
            auth.register(ctx.engine_url(node, inst), fleet.api_key)
        return ctx

    def __enter__(self) -> FleetContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def node_layout(self, node: Optional[Node]) -> RunLayout:
        """The same path as here unless the node sets run_dir."""
        return RunLayout(Path(node.run_dir) / self.fleet.name) if node is not None and node.run_dir else self.layout

    def conn(self, node: Optional[Node]) -> Connector:
        """One per node, opened on first use; None is the machine p2pctl runs on."""
        key = node.name if node is not None else ""
        if key not in self._conns:
            self._conns[key] = self.connect(node)
        return self._conns[key]

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def units(self, node: Optional[Node] = None, roles: tuple[str, ...] = ROLES) -> list[Unit]:
        units = fleet_units(self.fleet, roles)
        return units if node is None else [u for u in units if u.node is not None and u.node.name == node.name]

    def unit(self, role: str, instance: Optional[Instance | str] = None) -> Unit:
        iid = instance.id if isinstance(instance, Instance) else instance
        for u in fleet_units(self.fleet, (role,)):
            if u.instance is None or u.instance.id == iid:
                return u
        raise BadInput(f"fleet {self.fleet.name!r} has no {role}" + (f" for instance {iid!r}" if iid else ""))

    def proc(self, unit: Unit | str, instance: Optional[Instance | str] = None) -> Proc:
        """`ctx.proc("server", inst)` names the unit by role."""
        u = self.unit(unit, instance) if isinstance(unit, str) else unit
        return u.proc(self.node_layout(u.node))

    def procs(self, node: Optional[Node] = None, roles: tuple[str, ...] = LAUNCHED_ROLES) -> list[Proc]:
        return [self.proc(u) for u in self.units(node, roles)]

    def server_url(self, node: Node, inst: Instance) -> str:
        return f"http://{hostport(node.address, inst.ports.http)}"

    def engine_url(self, node: Node, inst: Instance) -> str:
        return f"http://{hostport(node.address, inst.ports.engine)}"

    def for_each_node(self, fn: Callable[[Node], T], only: Optional[str] = None) -> dict[str, T | Exception]:
        nodes = [n for n in self.fleet.nodes if only is None or n.name == only]
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            futures = {n.name: pool.submit(fn, n) for n in nodes}
        # An Exception is collected and reported per host; anything else (KeyboardInterrupt) is raised.
        return {name: exc if isinstance(exc := fut.exception(), Exception) else fut.result()
                for name, fut in futures.items()}

