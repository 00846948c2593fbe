"""Bring a fleet up, wait until it shares, show it, take it down.

Order matters: coordinator, then servers (they register with it), then engines (they connect to their local
server). Each node's processes are handled by its connector; nodes are handled in parallel.
"""

from __future__ import annotations

import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from p2p_ops import auth, probes, procs, readiness
from p2p_ops import router as fleet_router
from p2p_ops.connectors import Connector, connector_for
from p2p_ops.errors import BadInput, CheckFailed, CouldNotRun
from p2p_ops.fleet import Fleet, Instance, Node, load_fleet
from p2p_ops.layout import COORDINATOR, RunLayout
from p2p_ops.render import RenderedFile, file_mode, render_fleet, vllm_python, write_rendered

Progress = Callable[[str], None]
# How often a slow start reports what it is waiting for.
NOTE_EVERY_S = 10.0
# vLLM becomes healthy after 25-90 s on a 2-core box (model load, warm-up); more on a busy one.
VLLM_START_TIMEOUT_S = 900.0


def _quiet(_: str) -> None:
    pass


@dataclass
class FleetContext:
    """A loaded fleet plus where its state lives and how to reach each node."""

    fleet: Fleet
    fleet_file: Path
    layout: RunLayout
    _conns: dict[str, Connector] = field(default_factory=dict)

    @classmethod
    def load(cls, fleet_file: str | Path, run_dir: Optional[str] = None) -> "FleetContext":
        path = Path(fleet_file)
        fleet = load_fleet(path)
        ctx = cls(fleet, path, RunLayout.for_fleet(path, fleet.name, run_dir))
        auth.register_fleet(ctx)  # every client of this process now sends the engines' API key
        return ctx

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

    def for_each_node(self, fn: Callable[[Node], object], only: Optional[str] = None) -> dict[str, object]:
        """Run fn per node in parallel; every node gets a result (an exception is a result too)."""
        nodes = [n for n in self.fleet.nodes if only is None or n.name == only]
        results: dict[str, object] = {}
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            futures = {n.name: pool.submit(fn, n) for n in nodes}
            for name, fut in futures.items():
                try:
                    results[name] = fut.result()
                except Exception as exc:  # noqa: BLE001 - collected and reported per host
                    results[name] = exc
        return results


Proc = procs.Proc


def _proc(lay: RunLayout, unit: str, role: str, marker: str) -> procs.Proc:
    return procs.Proc(name=f"{unit}/{role}", workdir=str(lay.dir(unit)), wrapper=str(lay.wrapper(unit, role)),
                      log=str(lay.log(unit, role)), pidfile=str(lay.pidfile(unit, role)), marker=marker)


# ---- render ------------------------------------------------------------------------------------------

def render(ctx: FleetContext, only: Optional[str] = None) -> list[RenderedFile]:
    """Write every file here (the control copy, kept as evidence), then copy each node's files to its run
    folder when that is elsewhere (an SSH host, or a local node with its own run_dir), nodes in parallel."""
    files = render_fleet(ctx.fleet, ctx.node_layout)
    write_rendered(files, ctx.layout)

    def copy(node: Node) -> None:
        lay = ctx.node_layout(node)
        if node.connection != "ssh" and lay.root == ctx.layout.root:
            return
        conn = ctx.conn(node)
        for f in files:
            if f.node == node.name:
                conn.put(ctx.layout.dir(f.unit) / f.name, str(lay.dir(f.unit) / f.name), mode=file_mode(f.executable))

    errors = [f"- {name}: {res}" for name, res in ctx.for_each_node(copy, only).items() if isinstance(res, Exception)]
    if errors:
        raise CouldNotRun("could not copy env.sh and wrappers to every node:\n" + "\n".join(errors))
    return files


# ---- up ----------------------------------------------------------------------------------------------

def _wait_started(ctx: FleetContext, items: list[tuple[Node, procs.Proc, Callable[[], bool]]],
                  timeout: float, progress: Progress, what: str) -> None:
    """Wait until each process answers its readiness probe, or fail naming those that died or hung."""
    pending = list(items)
    start = time.monotonic()
    deadline = start + timeout
    next_note = start + NOTE_EVERY_S
    dead: list[tuple[Node, procs.Proc]] = []
    while pending and time.monotonic() < deadline:
        if time.monotonic() >= next_note:
            # vLLM takes a minute or more to load; say what each slow process is doing meanwhile.
            next_note += NOTE_EVERY_S
            for node, proc, _ in pending:
                last = procs.log_tail(ctx.conn(node), proc.log, 1)
                progress(f"waiting for {proc.name} ({time.monotonic() - start:.0f} s of {timeout:.0f}): "
                         f"{last[:160]}")
        still = []
        for node, proc, ready in pending:
            if ready():
                progress(f"{proc.name} is up")
                continue
            st = procs.states(ctx.conn(node), [proc])[0]
            if not st.running:
                dead.append((node, proc))
            else:
                still.append((node, proc, ready))
        pending = still
        if dead:
            break
        if pending:
            time.sleep(0.5)
    problems = [_describe_failure(ctx, node, proc, "exited during start") for node, proc in dead]
    problems += [_describe_failure(ctx, node, proc, f"did not answer within {timeout:.0f} s")
                 for node, proc, _ in pending]
    if problems:
        raise CouldNotRun(f"{what} failed to start:\n" + "\n".join(problems)
                          + "\nOther processes are left running; `p2pctl down` stops them all.")


def _describe_failure(ctx: FleetContext, node: Node, proc: procs.Proc, why: str) -> str:
    excerpt = procs.log_excerpt(ctx.conn(node), proc.log, 10)
    indented = "\n".join("    " + line for line in excerpt.splitlines())
    return f"- {proc.name} on {node.name} ({node.address}) {why}; from {proc.log}:\n{indented}"


def check_node(ctx: FleetContext, only: Optional[str]) -> None:
    if only is not None and only not in {n.name for n in ctx.fleet.nodes}:
        raise BadInput(f"--node {only}: no such node; use one of " + ", ".join(n.name for n in ctx.fleet.nodes))


def preflight(ctx: FleetContext, only: Optional[str] = None) -> None:
    """Reach every node before anything starts: an unreachable host, a refused key or a bad host key then
    fails the launch with one line per host while nothing runs anywhere. vLLM nodes must also hold vLLM's
    interpreter and, for a local model folder, the model."""
    results = ctx.for_each_node(lambda n: ctx.conn(n).run("true", timeout=30, check=True), only)
    errors = [f"- {name}: {res}" for name, res in results.items() if isinstance(res, Exception)]
    if errors:
        raise CouldNotRun("cannot reach every node, so nothing was started:\n" + "\n".join(errors))
    if ctx.fleet.runtime == "vllm":
        missing = {name: res for name, res in ctx.for_each_node(lambda n: _vllm_missing(ctx, n), only).items()
                   if res}
        if missing:
            raise CouldNotRun("vLLM cannot start on every node, so nothing was started:\n"
                              + "\n".join(f"- {name}: {res}" for name, res in missing.items()))


def _vllm_missing(ctx: FleetContext, node: Node) -> str:
    """What a vLLM node lacks (its interpreter, a local model folder), with the fix; empty when nothing."""
    py = vllm_python(ctx.fleet, node)
    model = ctx.fleet.vllm.model_path
    q = shlex.quote
    checks = [(f"test -x {q(py)}", f"no vLLM interpreter at {py}; run `make setup-vllm` there or set "
                                   "vllm.venv / nodes[].vllm_venv")]
    if model.startswith("/"):
        checks.append((f"test -f {q(model + '/config.json')}",
                       f"no model at {model} (no config.json); make one with `p2pctl make-model {model}` or "
                       "fix vllm.model_path"))
    for cmd, problem in checks:
        if not ctx.conn(node).run(cmd, timeout=30).ok:
            return problem
    return ""


ROLES = ("coordinator", "server", "engine")


def _started(proc: procs.Proc, node: Node, state: procs.ProcState) -> str:
    if state.kept:
        return f"kept {proc.name} on {node.name} (already running, pid {state.pid}; `down` it to restart)"
    return f"started {proc.name} on {node.name}"


# Every remote step has its own timeout (commands, SFTP, connects); this bounds their sum, so a fleet of slow
# hosts cannot keep `up` busy for the sum of all of them.
UP_DEADLINE_S = 1800.0


def up(ctx: FleetContext, progress: Progress = _quiet, start_timeout: float = 120.0,
       only: Optional[str] = None, rerender: bool = True, roles: tuple[str, ...] = ROLES,
       deadline_s: float = UP_DEADLINE_S) -> None:
    """Start the fleet, or with `only` one node's processes (plus the coordinator if it lives there).

    rerender=False starts from the env.sh files as they are on disk (hand-edited ones included).
    roles limits what starts, e.g. ("server",) restarts only lmcache servers after a `down --role server`.
    """
    until = time.monotonic() + deadline_s

    def left(wanted: float) -> float:
        remaining = until - time.monotonic()
        if remaining <= 0:
            raise CouldNotRun(f"`up` did not finish within its overall deadline of {deadline_s:.0f} s; "
                              "`p2pctl status` shows what runs, `p2pctl down` stops it")
        return min(wanted, remaining)

    fleet = ctx.fleet
    check_node(ctx, only)
    preflight(ctx, only)
    if fleet.router.enabled and (why := fleet_router.missing_binary(ctx)):
        raise BadInput(why)
    if rerender or not ctx.layout.env(COORDINATOR).is_file():
        render(ctx, only)
        progress(f"rendered env.sh for {len(fleet.instances())} instance(s) under {ctx.layout.root}")
    else:
        progress(f"starting from the env.sh files already under {ctx.layout.root} (not re-rendered)")

    left(0)
    cnode = fleet.coordinator_node()
    started: list[tuple[Node, procs.Proc, Callable[[], bool]]] = []
    if "coordinator" in roles and (only is None or only == cnode.name):
        cproc = ctx.coordinator_proc()
        progress(_started(cproc, cnode, procs.start(ctx.conn(cnode), cproc)))
        started.append((cnode, cproc, lambda: probes.coordinator_healthy(fleet.coordinator_url)))

    def start_role(role: str) -> list[tuple[Node, procs.Proc, Callable[[], bool]]]:
        if role not in roles:
            return []

        def on_node(node: Node) -> list[tuple[Node, procs.Proc, Callable[[], bool]]]:
            out = []
            for inst in node.instances:
                if role == "server":
                    proc, url = ctx.server_proc(node, inst), ctx.server_url(node, inst)
                    ready = (lambda u=url: probes.server_status(u).reachable)
                else:
                    proc, url = ctx.engine_proc(node, inst), ctx.engine_url(node, inst)
                    ready = (lambda u=url: readiness.engine_ready(fleet.runtime, u, fleet.model))
                progress(_started(proc, node, procs.start(ctx.conn(node), proc)))
                out.append((node, proc, ready))
            return out

        results = ctx.for_each_node(on_node, only)
        errors = [f"- {name}: {res}" for name, res in results.items() if isinstance(res, Exception)]
        if errors:
            raise CouldNotRun(f"could not start every {role}:\n" + "\n".join(errors)
                              + "\nOther processes are left running; `p2pctl down` stops them all.")
        return [item for res in results.values() for item in res]  # type: ignore[union-attr]

    if fleet.runtime == "embedded":
        # Servers retry registration and embedded engines reconnect to their server, so everything starts at
        # once: the imports (seconds of CPU each) overlap instead of queueing phase after phase.
        started += start_role("server") + start_role("engine")
        _wait_started(ctx, started, left(start_timeout), progress, "the fleet")
    else:
        # vLLM's connector expects its lmcache server at start-up: servers first, then engines.
        _wait_started(ctx, started + start_role("server"), left(start_timeout), progress,
                      "the coordinator and servers")
        _wait_started(ctx, start_role("engine"), left(VLLM_START_TIMEOUT_S), progress, "engines")
    if "engine" in roles:
        _start_router(ctx, progress, left(start_timeout), only)


def _start_router(ctx: FleetContext, progress: Progress, timeout: float, only: Optional[str]) -> None:
    """After the engines: vllm-router serves only once every worker answers its health check."""
    rnode = ctx.fleet.router_node() if ctx.fleet.router.enabled else None
    if rnode is None or (only is not None and only != rnode.name):
        return
    proc = fleet_router.start(ctx)
    progress(f"started {proc.name} on {rnode.name} ({ctx.fleet.router.policy}, {ctx.fleet.router_url})")
    _wait_started(ctx, [(rnode, proc, lambda: fleet_router.status(ctx, "running").healthy)], timeout, progress,
                  "the router")


# ---- wait --------------------------------------------------------------------------------------------

@dataclass
class InstanceReport:
    node: str
    instance: str
    server_proc: str
    engine_proc: str
    server: probes.ServerStatus
    engine_healthy: bool
    server_url: str
    engine_url: str
    engine_lmcache: str = "n/a"     # the embedded engine's link to its server
    p2p: bool = True                # settings.p2p: false -> the server is meant to stay out of the mesh

    def ready(self, expected_peers: int) -> bool:
        s = self.server
        meshed = not self.p2p or (s.p2p_state == "registered" and s.peer_count == expected_peers)
        return (s.reachable and meshed and self.engine_healthy and self.engine_lmcache != "disconnected")

    def problem(self, expected_peers: int) -> str:
        s = self.server
        if self.server_proc != "running":
            return f"server process is {self.server_proc}"
        if not s.reachable:
            return "server does not answer /status"
        if self.p2p and s.p2p_state != "registered":
            return f"p2p_state is {s.p2p_state} (not registered with the coordinator)"
        if self.p2p and s.peer_count != expected_peers:
            return f"sees {s.peer_count} peer(s) {s.peers}, expected {expected_peers}"
        if self.engine_proc != "running":
            return f"engine process is {self.engine_proc}"
        if not self.engine_healthy:
            return "engine does not answer /health"
        if self.engine_lmcache == "disconnected":
            return "engine is degraded: its lmcache server is unreachable (serving without the cache)"
        return "ok"


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
                "ready": i.ready(self.expected_peers),
                "problem": i.problem(self.expected_peers),
            } for i in self.instances],
            **({"router": self.router.to_json()} if self.router is not None else {}),
        }


def report(ctx: FleetContext) -> FleetReport:
    fleet = ctx.fleet
    states: dict[str, str] = {}

    def node_states(node: Node) -> None:
        for st in procs.states(ctx.conn(node), ctx.node_procs(node)):
            states[st.name] = st.state

    errors: dict[str, str] = {}
    for name, res in ctx.for_each_node(node_states).items():
        if isinstance(res, Exception):
            # One unreachable host must not hide the others: its processes read "unreachable".
            errors[name] = str(res)
            node = next(n for n in fleet.nodes if n.name == name)
            for proc in ctx.node_procs(node):
                states[proc.name] = "unreachable"
    items = []
    for node, inst in fleet.instances():
        surl, eurl = ctx.server_url(node, inst), ctx.engine_url(node, inst)
        healthy = probes.engine_healthy(eurl)
        link = probes.engine_lmcache_state(eurl) if healthy and fleet.runtime == "embedded" else "n/a"
        items.append(InstanceReport(node.name, inst.id, states.get(f"{inst.id}/server", "none"),
                                    states.get(f"{inst.id}/engine", "none"), probes.server_status(surl),
                                    healthy, surl, eurl, link, fleet.effective_settings(inst).p2p))
    return FleetReport(fleet.name, fleet.coordinator_url, states.get(f"{COORDINATOR}/coordinator", "none"),
                       probes.coordinator_healthy(fleet.coordinator_url),
                       probes.coordinator_instances(fleet.coordinator_url),
                       len(fleet.instances()) - 1, items, errors,
                       fleet_router.status(ctx) if fleet.router.enabled else None)


def wait(ctx: FleetContext, timeout: float = 60.0, progress: Progress = _quiet) -> FleetReport:
    deadline = time.monotonic() + timeout
    last_summary = ""
    while True:
        rep = report(ctx)
        if rep.ready:
            return rep
        dead = [i for i in rep.instances if i.server_proc in ("dead", "none") or i.engine_proc in ("dead", "none")]
        summary = ", ".join(f"{i.instance}: {i.problem(rep.expected_peers)}" for i in rep.instances
                            if not i.ready(rep.expected_peers))
        if summary != last_summary:
            progress(f"waiting: {summary or 'coordinator not healthy'}")
            last_summary = summary
        if dead or time.monotonic() >= deadline:
            raise CheckFailed(_not_ready_message(ctx, rep, timeout, bool(dead)))
        time.sleep(1.0)


def _not_ready_message(ctx: FleetContext, rep: FleetReport, timeout: float, dead: bool) -> str:
    head = "a process of the fleet is not running" if dead else f"fleet not ready after {timeout:.0f} s"
    lines = [f"{head}:"]
    if not rep.coordinator_healthy:
        lines.append(f"- coordinator at {rep.coordinator_url} is not healthy (process {rep.coordinator_proc}); "
                     f"log: {ctx.coordinator_proc().log}")
    for i in rep.instances:
        if i.ready(rep.expected_peers):
            continue
        node, inst = ctx.fleet.instance(i.instance)
        engine_side = i.server.reachable and i.server.p2p_state == "registered" and \
            i.server.peer_count == rep.expected_peers
        proc = ctx.engine_proc(node, inst) if engine_side else ctx.server_proc(node, inst)
        lines.append(_describe_failure(ctx, node, proc, i.problem(rep.expected_peers)))
    if rep.router is not None and not rep.router.ready:
        lines.append(_describe_failure(ctx, ctx.fleet.router_node(), fleet_router.router_proc(ctx),
                                       rep.router.problem()))
    return "\n".join(lines)


# ---- down --------------------------------------------------------------------------------------------

def _remove_shm(ctx: FleetContext, only: Optional[str]) -> None:
    """A server stopped cleanly unlinks its shared-memory L1 pool; a killed one leaves it (its size in RAM)."""
    def on_node(node: Node) -> None:
        names = [f"/dev/shm/lmcache_l1_pool_{ctx.fleet.shm_name(i)}" for i in node.instances
                 if ctx.fleet.shm_name(i)]
        if names:
            ctx.conn(node).run("rm -f " + " ".join(shlex.quote(n) for n in names), timeout=30)

    ctx.for_each_node(on_node, only)


def down(ctx: FleetContext, progress: Progress = _quiet, only: Optional[str] = None,
         roles: tuple[str, ...] = ROLES) -> dict[str, str]:
    """Stop engines, then servers (they deregister), then the coordinator. Idempotent; `roles` limits it."""
    check_node(ctx, only)
    outcome: dict[str, str] = {}
    if ctx.fleet.router.enabled and "engine" in roles and (only is None or only == ctx.fleet.router_node().name):
        # First: no client is routed to an engine that is going away (a server-only restart keeps it).
        try:
            outcome[fleet_router.router_proc(ctx).name] = fleet_router.stop(ctx)
        except Exception as exc:  # noqa: BLE001 - reported with the rest
            outcome[fleet_router.router_proc(ctx).name] = f"error: {exc}"

    def stop_role(role: str) -> None:
        if role not in roles:
            return

        def on_node(node: Node) -> dict[str, str]:
            done = {}
            for inst in node.instances:
                proc = ctx.engine_proc(node, inst) if role == "engine" else ctx.server_proc(node, inst)
                done[proc.name] = procs.stop(ctx.conn(node), proc)
            return done

        for name, res in ctx.for_each_node(on_node, only).items():
            if isinstance(res, Exception):
                outcome[f"{name}/{role}s"] = f"error: {res}"
            else:
                outcome.update(res)  # type: ignore[arg-type]

    stop_role("engine")
    stop_role("server")
    if "server" in roles:
        _remove_shm(ctx, only)
    cnode = ctx.fleet.coordinator_node()
    if "coordinator" not in roles or (only is not None and only != cnode.name):
        return outcome
    try:
        outcome[ctx.coordinator_proc().name] = procs.stop(ctx.conn(cnode), ctx.coordinator_proc())
    except Exception as exc:  # noqa: BLE001 - reported with the rest
        outcome[ctx.coordinator_proc().name] = f"error: {exc}"
    for name, what in outcome.items():
        progress(f"{name}: {what}")
    return outcome
