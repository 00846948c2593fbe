"""The fleet context: a loaded fleet, where its state lives, how to reach each node and its processes.

Every verb (launch, status, tests, doctor, bundle, ...) takes one. It sits below all of them and imports none
of them, so any module may type its `ctx` parameter without an import cycle. Use it as a context manager:
`with FleetContext.load(path) as ctx:` closes its connectors (SSH sessions) on the way out.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Callable, Optional, TypeVar

from p2p_ops.endpoints import auth
from p2p_ops.lifecycle import procs
from p2p_ops.connectors import Connector, connector_for
from p2p_ops.spec.model import Fleet, Instance, Node
from p2p_ops.spec.load import load_fleet
from p2p_ops.spec.layout import COORDINATOR, RunLayout

Proc = procs.Proc
T = TypeVar("T")


@dataclass
class FleetContext:
    """A loaded fleet plus where its state lives and how to reach each node."""

    fleet: Fleet
    fleet_file: Path
    layout: RunLayout
    _conns: dict[str, Connector] = field(default_factory=dict)

    @classmethod
    def load(cls, fleet_file: str | Path, run_dir: Optional[str] = None) -> FleetContext:
        path = Path(fleet_file)
        fleet = load_fleet(path)
        ctx = cls(fleet, path, RunLayout.for_fleet(path, fleet.name, run_dir))
        ctx._register_api_key()
        return ctx

    def _register_api_key(self) -> None:
        """Every client of this process now sends the engines' API key (to the engines only)."""
        if self.fleet.api_key:
            for node, inst in self.fleet.instances():
                auth.register(self.engine_url(node, inst), self.fleet.api_key)

    def __enter__(self) -> FleetContext:
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def node_layout(self, node: Node) -> RunLayout:
        """The run folder on that node (the same path as here unless the node sets run_dir)."""
        if node.run_dir:
            return RunLayout(Path(node.run_dir) / self.fleet.name)
        return self.layout

    def conn(self, node: Node) -> Connector:
        if node.name not in self._conns:
            self._conns[node.name] = connector_for(node)
        return self._conns[node.name]

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    # ---- the fleet's processes ----------------------------------------------------------------------
    def coordinator_proc(self) -> Proc:
        lay = self.node_layout(self.fleet.coordinator_node())
        return _proc(lay, COORDINATOR, "coordinator", f"--port {self.fleet.coordinator.port} ")

    def server_proc(self, node: Node, inst: Instance) -> Proc:
        return _proc(self.node_layout(node), inst.id, "server", f"--http-port {inst.ports.http} ")

    def engine_proc(self, node: Node, inst: Instance) -> Proc:
        return _proc(self.node_layout(node), inst.id, "engine", f"--port {inst.ports.engine} ")

    def node_procs(self, node: Node) -> list[Proc]:
        out = []
        if self.fleet.coordinator_node().name == node.name:
            out.append(self.coordinator_proc())
        for inst in node.instances:
            out += [self.server_proc(node, inst), self.engine_proc(node, inst)]
        return out

    def server_url(self, node: Node, inst: Instance) -> str:
        return f"http://{node.address}:{inst.ports.http}"

    def engine_url(self, node: Node, inst: Instance) -> str:
        return f"http://{node.address}:{inst.ports.engine}"

    def for_each_node(self, fn: Callable[[Node], T], only: Optional[str] = None) -> dict[str, T | Exception]:
        """Run fn per node in parallel; every node gets a result (an exception is a result too)."""
        nodes = [n for n in self.fleet.nodes if only is None or n.name == only]
        results: dict[str, T | Exception] = {}
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            futures = {n.name: pool.submit(fn, n) for n in nodes}
            for name, fut in futures.items():
                try:
                    results[name] = fut.result()
                except Exception as exc:  # noqa: BLE001 - collected and reported per host
                    results[name] = exc
        return results


def _proc(lay: RunLayout, unit: str, role: str, marker: str) -> Proc:
    return procs.Proc(name=f"{unit}/{role}", workdir=str(lay.dir(unit)), wrapper=str(lay.wrapper(unit, role)),
                      log=str(lay.log(unit, role)), pidfile=str(lay.pidfile(unit, role)), marker=marker)
