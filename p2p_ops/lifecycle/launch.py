"""Bring a fleet up, wait until it shares, take it down: the lifecycle verbs render, up, wait, down.

What starts, in which order and how each unit is known to be ready is the units table (`spec.units`): units
start phase by phase (coordinator, servers and embedded engines together; vLLM engines after their servers;
the router after the engines), nodes side by side, and stop in reverse role order. `up` and `down` hold the
fleet's lock (`lock.py`): a second one on the same fleet waits, saying who holds it.
"""

from __future__ import annotations

import shlex
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from p2p_ops import files
from p2p_ops.errors import BadInput, CheckFailed, CouldNotRun
from p2p_ops.facts.logs import log_excerpt_fact, log_tail_fact
from p2p_ops.facts.sections import read_fact
from p2p_ops.lifecycle import procs, rejoin
from p2p_ops.lifecycle import router as fleet_router
from p2p_ops.lifecycle.lock import WAIT_S, fleet_lock, record_down
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.nic_plan import InstancePlan, read_plans
from p2p_ops.lifecycle.preflight.probe import preflight
from p2p_ops.lifecycle.render import RenderedFile, check_on_disk, file_mode, render_fleet, write_rendered
from p2p_ops.lifecycle.status import FleetReport, report
from p2p_ops.spec.layout import COORDINATOR
from p2p_ops.spec.model import Node
from p2p_ops.spec.starter import dump_yaml
from p2p_ops.spec.units import INSTANCE_ROLES, LAUNCHED_ROLES, Unit

Progress = Callable[[str], None]
# How often a slow start reports what it is waiting for.
NOTE_EVERY_S = 10.0


def _quiet(_: str) -> None:
    pass


def nic_plans(ctx: FleetContext, only: Optional[str] = None) -> dict[str, InstancePlan]:
    """Each instance's NIC plan, read on nodes off loopback; a node that cannot be read renders without one
    (env.sh then pins the interface of the node's address at start, as before)."""
    found = ctx.for_each_node(lambda node: read_plans(ctx.conn(node), ctx.fleet, node), only)
    return {k: v for plans in found.values() if isinstance(plans, dict) for k, v in plans.items()}


def render(ctx: FleetContext, only: Optional[str] = None) -> list[RenderedFile]:
    """Write the files here (the control copy, kept as evidence), then copy each node's files to its run folder
    when that is elsewhere (an SSH host, or a local node with its own run_dir), nodes in parallel. With `only`,
    that node's files alone: another node's env.sh, hand-edited or not, is left as it is."""
    files = [f for f in render_fleet(ctx.fleet, ctx.node_layout, nic_plans(ctx, only))
             if only is None or f.node == only]
    write_rendered(files, ctx.layout)

    def copy(node: Node) -> None:
        lay = ctx.node_layout(node)
        if node.connection != "ssh" and lay.root == ctx.layout.root:
            return
        conn = ctx.conn(node)
        for f in files:
            if f.node == node.name:
                conn.put(ctx.layout.dir(f.unit) / f.name, str(lay.dir(f.unit) / f.name), mode=file_mode(f.executable))

    if errors := _failed(ctx.for_each_node(copy, only)):
        raise CouldNotRun("could not copy env.sh and wrappers to every node:\n" + "\n".join(errors))
    return files


def _failed(results: dict[str, object]) -> list[str]:
    return [f"- {name}: {res}" for name, res in results.items() if isinstance(res, Exception)]


def _wait_started(ctx: FleetContext, units: list[Unit], timeout: float, progress: Progress, what: str) -> None:
    pending, dead = list(units), []
    start = time.monotonic()
    next_note = start + NOTE_EVERY_S
    while pending and not dead and time.monotonic() < start + timeout:
        if time.monotonic() >= next_note:
            # vLLM takes a minute or more to load; say what each slow process is doing meanwhile.
            next_note += NOTE_EVERY_S
            for unit in pending:
                last = read_fact(ctx.conn(unit.node), log_tail_fact(ctx.proc(unit).log, 1), timeout=15)
                progress(f"waiting for {unit.name} ({time.monotonic() - start:.0f} s of {timeout:.0f}): "
                         f"{(last[0] if last else '(log is empty)')[:160]}")
        still = []
        for unit in pending:
            if unit.ready():
                progress(f"{unit.name} is up")
            elif procs.states(ctx.conn(unit.node), [ctx.proc(unit)])[0].running:
                still.append(unit)
            else:
                dead.append(unit)
        pending = still
        if pending and not dead:
            time.sleep(0.5)
    problems = [describe_failure(ctx, unit, "exited during start") for unit in dead]
    problems += [describe_failure(ctx, unit, f"did not answer within {timeout:.0f} s") for unit in pending]
    if problems:
        raise CouldNotRun(f"{what} failed to start:\n" + "\n".join(problems)
                          + "\nOther processes are left running; `p2pctl down` stops them all.")


def describe_failure(ctx: FleetContext, unit: Unit, why: str) -> str:
    proc = ctx.proc(unit)
    excerpt = read_fact(ctx.conn(unit.node), log_excerpt_fact(proc.log, 10), timeout=15)
    indented = "\n".join("    " + line for line in excerpt.splitlines())
    return f"- {proc.name} on {unit.node.name} ({unit.node.address}) {why}; from {proc.log}:\n{indented}"


def check_node(ctx: FleetContext, only: Optional[str]) -> None:
    if only is not None and only not in {n.name for n in ctx.fleet.nodes}:
        raise BadInput(f"--node {only}: no such node; use one of " + ", ".join(n.name for n in ctx.fleet.nodes))


ROLES = LAUNCHED_ROLES


def _with_router(roles: tuple[str, ...]) -> tuple[str, ...]:
    """The router goes with its engines: it starts after them and stops before them (no client is routed to an
    engine that is gone), so an engine restart takes it along."""
    return roles + ("router",) if "engine" in roles and "router" not in roles else roles


def launched_units(ctx: FleetContext, roles: tuple[str, ...], only: Optional[str]) -> list[Unit]:
    return [u for u in ctx.units(roles=_with_router(roles)) if u.phase is not None
            and (only is None or u.node.name == only)]


# Every remote step has its own timeout (commands, SFTP, connects); this bounds their sum, so a fleet of slow
# hosts cannot keep `up` busy for the sum of all of them.
UP_DEADLINE_S = 1800.0


def up(ctx: FleetContext, progress: Progress = _quiet, start_timeout: float = 120.0,
       only: Optional[str] = None, rerender: bool = True, roles: tuple[str, ...] = ROLES,
       deadline_s: float = UP_DEADLINE_S, lock_wait_s: float = WAIT_S) -> None:
    """Start the fleet, or with `only` one node's units (the coordinator and router too if they live there).
    rerender=False starts from the env.sh files as they are on disk (hand-edited ones included). Holds the
    fleet's lock, waiting up to lock_wait_s for another `up`/`down` of it."""
    with fleet_lock(ctx.layout.root, ctx.fleet.name, lock_wait_s, progress):
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
            count = sum(1 for n, _ in fleet.instances() if only in (None, n.name))
            progress(f"rendered env.sh for {count} instance(s) under {ctx.layout.root}")
        else:
            check_on_disk(render_fleet(fleet, ctx.node_layout), ctx.layout)
            progress(f"starting from the env.sh files already under {ctx.layout.root} (not re-rendered)")
        units = launched_units(ctx, roles, only)
        for phase in sorted({u.phase for u in units}):
            left(0)
            batch = [u for u in units if u.phase == phase]
            if servers := {u.instance.id for u in batch if u.role == "server" and u.instance is not None}:
                rejoin.wait_forgotten(ctx, servers, left(rejoin.forget_deadline_s(ctx)), progress)
            _start_units(ctx, batch, progress)
            timeout = max([start_timeout] + [u.start_timeout_s or 0 for u in batch])
            _wait_started(ctx, batch, left(timeout), progress, _what(batch))


def _what(units: list[Unit]) -> str:
    roles = list(dict.fromkeys(u.role for u in units))
    if len(roles) > 2:
        return "the fleet"
    return " and ".join(f"the {r}s" if r in INSTANCE_ROLES else f"the {r}" for r in roles)


def _each_unit(ctx: FleetContext, units: list[Unit], act: Callable[[Unit], object]) -> dict:
    """act(unit) on every unit, in order on each node, nodes side by side: {node: {unit: result} or exception}."""
    names = {u.node.name for u in units}

    def on_node(node: Node) -> dict[str, object]:
        return {u.name: act(u) for u in units if u.node.name == node.name}

    return {name: res for name, res in ctx.for_each_node(on_node).items() if name in names}


def _start_units(ctx: FleetContext, units: list[Unit], progress: Progress) -> None:
    def start(unit: Unit) -> None:
        proc = ctx.proc(unit)
        state = procs.start(ctx.conn(unit.node), proc)
        progress(f"kept {proc.name} on {unit.node.name} (already running, pid {state.pid}; `down` it to restart)"
                 if state.kept else f"started {proc.name} on {unit.node.name}")

    if errors := _failed(_each_unit(ctx, units, start)):
        raise CouldNotRun(f"could not start every unit of {_what(units)}:\n" + "\n".join(errors)
                          + "\nOther processes are left running; `p2pctl down` stops them all.")


def wait(ctx: FleetContext, timeout: float = 60.0, progress: Progress = _quiet) -> FleetReport:
    deadline = time.monotonic() + timeout
    last_summary = ""
    while True:
        rep = report(ctx)
        if rep.ready:
            return rep
        dead = any({i.server_proc, i.engine_proc} & {"dead", "none"} for i in rep.instances)
        summary = ", ".join(f"{i.instance}: {i.problem(rep.expected_peers)}" for i in rep.instances
                            if not i.ready(rep.expected_peers))
        if summary != last_summary:
            progress(f"waiting: {summary or 'coordinator not healthy'}")
            last_summary = summary
        if dead or time.monotonic() >= deadline:
            raise CheckFailed(_not_ready_message(ctx, rep, timeout, dead))
        time.sleep(1.0)


def _not_ready_message(ctx: FleetContext, rep: FleetReport, timeout: float, dead: bool) -> str:
    head = "a process of the fleet is not running" if dead else f"fleet not ready after {timeout:.0f} s"
    lines = [f"{head}:"]
    if not rep.coordinator_healthy:
        lines.append(f"- coordinator at {rep.coordinator_url} is not healthy (process {rep.coordinator_proc}); "
                     f"log: {ctx.proc('coordinator').log}")
    for i in (i for i in rep.instances if not i.ready(rep.expected_peers)):
        engine_side = i.server.reachable and i.server.p2p_state == "registered" and \
            i.server.peer_count == rep.expected_peers and not i.misadvertised
        unit = ctx.unit("engine" if engine_side else "server", i.instance)
        lines.append(describe_failure(ctx, unit, i.problem(rep.expected_peers)))
    if rep.router is not None and not rep.router.ready:
        lines.append(describe_failure(ctx, ctx.unit("router"), rep.router.problem()))
    return "\n".join(lines)


def _remove_shm(ctx: FleetContext, only: Optional[str]) -> None:
    """A server stopped cleanly unlinks its shared-memory L1 pool; a killed one leaves it (its size in RAM)."""
    def on_node(node: Node) -> None:
        names = [f"/dev/shm/lmcache_l1_pool_{ctx.fleet.shm_name(i)}" for i in node.instances
                 if ctx.fleet.shm_name(i)]
        if names:
            ctx.conn(node).run("rm -f " + " ".join(shlex.quote(n) for n in names), timeout=30)

    ctx.for_each_node(on_node, only)


def down(ctx: FleetContext, progress: Progress = _quiet, only: Optional[str] = None,
         roles: tuple[str, ...] = ROLES, lock_wait_s: float = WAIT_S) -> dict[str, str]:
    """Stop the units role by role in reverse start order (router, engines, servers, coordinator); servers
    deregister on the way. Idempotent; `roles` and `only` (a node) limit it. Holds the fleet's lock, and
    records who stopped what (`lock.record_down`): a test run writing its folder meanwhile ends "interrupted"."""
    check_node(ctx, only)
    with fleet_lock(ctx.layout.root, ctx.fleet.name, lock_wait_s, progress):
        record_down(ctx.layout.root, "the fleet" if only is None and roles == ROLES
                    else f"{', '.join(roles)}{' on ' + only if only else ''}")
        outcome: dict[str, str] = {}
        units = launched_units(ctx, roles, only)
        for role in reversed(LAUNCHED_ROLES):
            batch = [u for u in units if u.role == role]
            if batch:
                stopped = _each_unit(ctx, batch, lambda u: procs.stop(ctx.conn(u.node), ctx.proc(u)))
                for name, res in stopped.items():
                    outcome.update({f"{name}/{role}s": f"error: {res}"} if isinstance(res, Exception) else res)
                if role == "server":
                    _remove_shm(ctx, only)
        for name, done in outcome.items():
            progress(f"{name}: {done}")
        return outcome


def down_errors(outcome: dict[str, str]) -> list[str]:
    return [name for name, what in outcome.items() if what.startswith("error")]


@contextmanager
def running(ctx: FleetContext, timeout: float = 120.0, progress: Progress = _quiet, start_timeout: float = 120.0,
            timings: Optional[dict[str, float]] = None) -> Iterator[FleetContext]:
    """The fleet up and ready for the block, and down after it, also when up, wait or the block fails or is
    interrupted: nothing a test or a benchmark started outlives it. `timings` receives up_s and wait_s."""
    try:
        t = time.monotonic()
        up(ctx, progress=progress, start_timeout=start_timeout)
        up_s = time.monotonic() - t
        wait(ctx, timeout=timeout, progress=progress)
        if timings is not None:
            timings.update(up_s=up_s, wait_s=time.monotonic() - t - up_s)
        yield ctx
    finally:
        down(ctx, progress=progress)


@contextmanager
def temporary(data: dict, where: Optional[Path] = None, timings: Optional[dict[str, float]] = None,
              progress: Progress = _quiet, wait_timeout: float = 180.0, start_timeout: float = 120.0
              ) -> Iterator[FleetContext]:
    """A fleet of this machine from its spec data (ports from `free_ports.choose`), running for the block
    (`running`: always taken down). Its spec (`fleet.yaml`) and run folder are `where` when given, kept since
    the logs are evidence, else a temporary folder removed afterwards."""
    with ExitStack() as stack:
        if where is None:
            where = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"{data.get('name', 'fleet')}-")))
        files.write_text(files.private_dir(where) / "fleet.yaml", dump_yaml(data))
        ctx = stack.enter_context(FleetContext.load(where / "fleet.yaml", run_dir=str(where)))
        yield stack.enter_context(running(ctx, wait_timeout, progress, start_timeout, timings))
