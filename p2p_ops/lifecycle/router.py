"""The fleet's router (vllm-router): its process, start, readiness and state.

Launch calls in here after the engines are up (the router waits for healthy workers before it serves) and
before anything else goes down, so clients never see a router without engines behind it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import requests

from p2p_ops.lifecycle import procs
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.render import ROUTER, router_bin


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
        if self.process not in ("running", "n/a"):
            return f"router process is {self.process}"
        if not self.healthy:
            return f"router at {self.url} does not answer /health"
        if self.missing:
            return f"router does not list engine(s) {', '.join(self.missing)} as workers"
        if self.unhealthy:
            return f"router marks engine(s) {', '.join(self.unhealthy)} unhealthy"
        return "ok"

    def to_json(self) -> dict:
        return {"url": self.url, "process": self.process, "healthy": self.healthy, "workers": self.workers,
                "unhealthy": self.unhealthy, "missing": self.missing, "ready": self.ready,
                "problem": self.problem()}


def router_proc(ctx: FleetContext) -> procs.Proc:
    lay = ctx.node_layout(ctx.fleet.router_node())
    return procs.Proc(name=f"{ROUTER}/router", workdir=str(lay.dir(ROUTER)), wrapper=str(lay.wrapper(ROUTER, "router")),
                      log=str(lay.log(ROUTER, "router")), pidfile=str(lay.pidfile(ROUTER, "router")),
                      marker=f"--port {ctx.fleet.router.port} ")


def missing_binary(ctx: FleetContext) -> Optional[str]:
    """A one-line fix when the router binary is absent (checked on local nodes; SSH nodes fail at start)."""
    node = ctx.fleet.router_node()
    binary = router_bin(ctx.fleet)
    if node.connection == "local" and not Path(binary).is_file():
        return (f"router.venv: no vllm-router at {binary}; run `make setup-router` (or set router.venv to a venv "
                "holding `pip install vllm-router==0.1.17`)")
    return None


def start(ctx: FleetContext) -> procs.Proc:
    proc = router_proc(ctx)
    procs.start(ctx.conn(ctx.fleet.router_node()), proc)
    return proc


def stop(ctx: FleetContext) -> str:
    return procs.stop(ctx.conn(ctx.fleet.router_node()), router_proc(ctx))


def status(ctx: FleetContext, process: Optional[str] = None, timeout: float = 3.0) -> RouterStatus:
    fleet = ctx.fleet
    url = fleet.router_url
    if process is None:
        states = procs.states(ctx.conn(fleet.router_node()), [router_proc(ctx)])
        process = states[0].state if states else "none"
    engines = [f"http://{n.address}:{i.ports.engine}" for n, i in fleet.instances()]
    st = RouterStatus(url, process, False)
    try:
        st.healthy = requests.get(f"{url}/health", timeout=timeout).status_code == 200
        body = requests.get(f"{url}/workers", timeout=timeout).json()
    except (requests.RequestException, ValueError):
        st.missing = engines
        return st
    listed = {w.get("url", "").rstrip("/"): bool(w.get("is_healthy")) for w in body.get("workers", [])}
    st.workers = sorted(listed)
    st.missing = [e for e in engines if e not in listed]
    st.unhealthy = [e for e in engines if e in listed and not listed[e]]
    return st
