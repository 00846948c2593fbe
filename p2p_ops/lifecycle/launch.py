"""Bring a fleet up, wait until it shares, take it down: the lifecycle verbs render, preflight, up, wait, down.

Order matters: coordinator, then servers (they register with it), then engines (they connect to their local
server). Each node's processes are handled by its connector; nodes are handled in parallel. What the fleet
looks like meanwhile (`report()`) is in fleet_status; the context every verb takes is in context.
"""

from __future__ import annotations

import shlex
import time
from typing import Callable, Optional

from p2p_ops.lifecycle import procs
from p2p_ops.lifecycle import router as fleet_router
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.errors import BadInput, CheckFailed, CouldNotRun
from p2p_ops.spec.model import Node
from p2p_ops.lifecycle.status import FleetReport, report
from p2p_ops.spec.layout import COORDINATOR
from p2p_ops.lifecycle.render import RenderedFile, file_mode, render_fleet, vllm_python, write_rendered
from p2p_ops.endpoints import engine_api
from p2p_ops.endpoints import lmcache_api

Progress = Callable[[str], None]
# How often a slow start reports what it is waiting for.
NOTE_EVERY_S = 10.0
# vLLM becomes healthy after 25-90 s on a 2-core box (model load, warm-up); more on a busy one.
VLLM_START_TIMEOUT_S = 900.0


def _quiet(_: str) -> None:
    pass


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
        started.append((cnode, cproc, lambda: lmcache_api.coordinator_healthy(fleet.coordinator_url)))

    def start_role(role: str) -> list[tuple[Node, procs.Proc, Callable[[], bool]]]:
        if role not in roles:
            return []

        def on_node(node: Node) -> list[tuple[Node, procs.Proc, Callable[[], bool]]]:
            out = []
            for inst in node.instances:
                if role == "server":
                    proc, url = ctx.server_proc(node, inst), ctx.server_url(node, inst)
                    ready = (lambda u=url: lmcache_api.server_status(u).reachable)
                else:
                    proc, url = ctx.engine_proc(node, inst), ctx.engine_url(node, inst)
                    ready = (lambda u=url: engine_api.engine_ready(fleet.runtime, u, fleet.model))
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


def down_errors(outcome: dict[str, str]) -> list[str]:
    """What `down` could not stop (a process, or a node's role it could not reach): a failed `down`."""
    return [name for name, what in outcome.items() if what.startswith("error")]
