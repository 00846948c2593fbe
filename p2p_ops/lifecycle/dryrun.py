"""`p2pctl up --dry-run`: every command `up` would run, per host, in order, touching no host.

`plan(ctx)` builds the fleet's environments and command lines in memory (`render.fleet_runs`, what `up` renders
the files from) and lists per node the check, the file writes or SFTP copies, and per unit its start line, the
`exec` line the wrapper is rendered from (word for word, with the environment that changes what an engine does,
such as CUDA_VISIBLE_DEVICES or UCX_*, in front) and its readiness probe.

No file on disk is executed, sourced or interpreted. With `--no-render` the files on disk are read (once their
folders are ours alone, `render.check_on_disk`) only to be compared with what fleet.yaml renders: one that
differs is shown as a diff under `differs`, flagged as not what p2pctl rendered, since `up --no-render` would
run it and not the `exec` line shown.
"""

from __future__ import annotations

import shlex

from p2p_ops import files
from p2p_ops.errors import CouldNotRun
from p2p_ops.facts.envfile import file_diff
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.launch import launched_units
from p2p_ops.lifecycle.render import RenderedFile, check_on_disk, file_mode, fleet_runs, render_fleet
from p2p_ops.spec.model import Node
from p2p_ops.spec.units import LAUNCHED_ROLES

# Environment that decides how a process behaves beyond its flags; shown in front of exec lines when set.
SHOWN_ENV = ("CUDA_VISIBLE_DEVICES", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "PYTHONHASHSEED",
             "UCX_TLS", "UCX_NET_DEVICES")


def _reach_line(node: Node) -> str:
    if node.connection != "ssh":
        return "bash -c true   (local)"
    user = f"{node.ssh_user}@" if node.ssh_user else ""
    port = f":{node.ssh_port}" if "ssh_port" in node.model_fields_set else ""
    extra = [f"key {node.ssh_key}"] if node.ssh_key else []
    extra += [f"ssh_config {node.ssh_config}"] if node.ssh_config else []
    keys = "host key NOT verified" if node.ssh_insecure_host_keys else "host key verified against known_hosts"
    return f"bash -c true   (ssh {user}{node.address}{port}; {', '.join(extra + [keys])})"


def _differs(ctx: FleetContext, rendered: RenderedFile) -> list[str]:
    path = ctx.layout.dir(rendered.unit) / rendered.name
    if not path.is_file():
        raise CouldNotRun(f"--no-render: {path} does not exist; run `p2pctl render` (or drop --no-render)")
    text = files.read_text(path, 1 << 20, follow=False)
    if text == rendered.text:
        return []
    return [f"differs  {rendered.unit}/{rendered.name} on disk is NOT what p2pctl renders from fleet.yaml (not "
            "rendered by p2pctl: hand-edited or stale); `up --no-render` would use it as it is, not the `exec` "
            "line below; re-render, or keep the edit knowingly:",
            *(f"         {line}" for line in file_diff(rendered.text, text, rendered.name))]


def plan(ctx: FleetContext, only: str | None = None, rerender: bool = True,
         roles: tuple[str, ...] = LAUNCHED_ROLES) -> dict[str, list[str]]:
    fleet = ctx.fleet
    runs = fleet_runs(fleet, ctx.node_layout)
    rendered = render_fleet(fleet, ctx.node_layout)
    if not rerender:
        check_on_disk(rendered, ctx.layout)
    out = {n.name: [f"check    {_reach_line(n)}"] for n in fleet.nodes if only is None or n.name == only}
    for f in rendered:
        if f.node not in out:
            continue
        node = next(n for n in fleet.nodes if n.name == f.node)
        local = ctx.layout.dir(f.unit) / f.name
        if not rerender:
            out[node.name] += [f"use      {local} (as it is on disk; not re-rendered)", *_differs(ctx, f)]
        elif node.connection == "ssh":
            remote = ctx.node_layout(node).dir(f.unit) / f.name
            out[node.name].append(f"copy     {local} -> {node.name}:{remote} "
                                  f"({file_mode(f.executable):04o}, over SFTP)")
        else:
            out[node.name].append(f"write    {local}")
    q = shlex.quote
    for unit in launched_units(ctx, roles, only):
        p, run = ctx.proc(unit), runs[unit.folder]
        shown = [f"{k}={q(run.env[k])}" for k in SHOWN_ENV if run.env.get(k) and unit.role != "coordinator"]
        out[unit.node.name] += [
            f"start    {p.name}: cd {q(p.workdir)} && setsid bash {q(p.wrapper)} > {q(p.log)} 2>&1 < /dev/null & "
            f"(pidfile {p.pidfile})",
            f"exec     {' '.join(shown + [shlex.join(run.command(unit.role))])}", f"ready    {unit.ready_says}"]
    return out


def format_plan(steps: dict[str, list[str]]) -> str:
    return "\n\n".join(f"# {node}\n" + "\n".join(lines) for node, lines in steps.items()) + "\n"
