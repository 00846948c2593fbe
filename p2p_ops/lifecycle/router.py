"""The fleet's router (vllm-router), a unit of the fleet (`spec.units`): whether its binary is there, and its
state (process, health, what it says about its workers).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from p2p_ops.endpoints import fetch, router_api
from p2p_ops.lifecycle import procs
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.render import router_bin


@dataclass
class RouterStatus:
    url: str
    process: str
    healthy: bool
    workers: list[str] = field(default_factory=list)
    unhealthy: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return self.healthy and not self.missing and not self.unhealthy

    def problem(self) -> str:
        if self.process != "running":
            return f"router process is {self.process}"
        if not self.healthy:
            return f"router at {self.url} does not answer /health"
        if self.missing:
            return f"router does not list engine(s) {', '.join(self.missing)} as workers"
        if self.unhealthy:
            return f"router marks engine(s) {', '.join(self.unhealthy)} unhealthy"
        return "ok"

    def to_json(self) -> dict:
        return {**asdict(self), "ready": self.ready, "problem": self.problem()}


def missing_binary(ctx: FleetContext) -> Optional[str]:
    """A one-line fix when the router binary is absent (checked on local nodes; SSH nodes fail at start)."""
    binary = router_bin(ctx.fleet)
    if ctx.fleet.router_node().connection == "local" and not Path(binary).is_file():
        return (f"router.venv: no vllm-router at {binary}; run `make setup-router` (or set router.venv to a venv "
                "holding `pip install vllm-router==0.1.17`)")
    return None


def status(ctx: FleetContext) -> RouterStatus:
    fleet, url = ctx.fleet, ctx.fleet.router_url
    process = procs.states(ctx.conn(fleet.router_node()), [ctx.proc("router")])[0].state
    engines = [ctx.engine_url(n, i) for n, i in fleet.instances()]
    st = RouterStatus(url, process, fetch.answers(f"{url}/health", timeout=3.0))
    listed = router_api.workers(url, timeout=3.0)
    st.workers = sorted(listed or {})
    st.missing = [e for e in engines if listed is None or e not in listed]
    st.unhealthy = [e for e in engines if listed and e in listed and not listed[e]]
    return st
