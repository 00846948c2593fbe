"""`p2pctl up --dry-run`: every command `up` would run, per host, in order, touching no host.

`plan(ctx)` renders the fleet in memory (the same `render_fleet` that `up` uses) and lists per node:

    check    bash -c true                                    (reach the node before anything starts)
    write    /here/p2p-run/f/h1-0/env.sh                     (local node)
    copy     /here/p2p-run/f/h1-0/env.sh -> h1:/srv/run/f/h1-0/env.sh (0644)   (ssh node, over SFTP)
    start    h1-0/server: cd /srv/run/f/h1-0 && setsid bash start_server.sh > server.log 2>&1 < /dev/null &
             (pidfile server.pid)
    exec     nice -n 10 /opt/venv/bin/lmcache server --instance-id h1-0 ...   (the wrapper's command line,
             expanded from env.sh by bash's rules: `source env.sh` then the `exec` arguments)
    ready    GET http://10.0.0.1:8081/status answers

Nothing of env.sh or the wrappers is executed: they are read (`p2p_ops.facts.shellview`). With `--no-render` the
files on disk are used only once their folders are ours alone (`render.check_on_disk`), and any statement in
them that would run a command p2pctl does not render is listed as `runs     <unit>/<file>:<line>: <text>`.

Engines show the environment that changes what they do (CUDA_VISIBLE_DEVICES, PYTHONHASHSEED, UCX_*) in front
of the command, e.g. `CUDA_VISIBLE_DEVICES=0 PYTHONHASHSEED=0 /opt/venv/bin/vllm serve Qwen/Qwen3-8B --host
10.0.0.1 --port 8001 --kv-transfer-config '{"kv_connector":"LMCacheMPConnector",...}'`.
"""

from __future__ import annotations

import shlex

from p2p_ops import files
from p2p_ops.errors import CouldNotRun
from p2p_ops.facts.envfile import parse_env_sh
from p2p_ops.facts.shellview import Ran, ShellView
from p2p_ops.facts.shellwords import statements
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.launch import launched_units
from p2p_ops.lifecycle.render import RenderedFile, check_on_disk, render_fleet
from p2p_ops.spec.model import Node
from p2p_ops.spec.units import LAUNCHED_ROLES

# Environment that decides how a process behaves beyond its flags; shown in front of exec lines when set.
SHOWN_ENV = ("CUDA_VISIBLE_DEVICES", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "PYTHONHASHSEED",
             "UCX_TLS", "UCX_NET_DEVICES")


def view(wrapper: str, env_sh: str, here: str = "/run-folder") -> ShellView:
    """The wrapper read as bash would run it (`source env.sh` included), without running anything."""
    shell = ShellView({"wrapper": wrapper, "env.sh": env_sh}, here=here)
    shell.run("wrapper")
    return shell


def exec_argv(wrapper: str, env_sh: str) -> list[str]:
    """The argv the wrapper's `exec` line runs, expanded from env.sh by bash's rules (nothing is executed)."""
    argv = view(wrapper, env_sh).argv
    if argv is None:
        raise CouldNotRun("rendered wrapper has no `exec` line; re-render (`p2pctl render`)")
    return argv


def _exec_line(files: dict[tuple[str, str], RenderedFile], unit: str, role: str, here: str) -> tuple[str, list[Ran]]:
    env_sh = files[(unit, "env.sh")].text
    shell = view(files[(unit, f"start_{role}.sh")].text, env_sh, here)
    if shell.argv is None:
        raise CouldNotRun(f"{here}/start_{role}.sh has no `exec` line; re-render (`p2pctl render`)")
    env = parse_env_sh(env_sh)
    shown = [f"{k}={shlex.quote(env[k])}" for k in SHOWN_ENV if env.get(k)] if role != "coordinator" else []
    return " ".join(shown + [shlex.join(shell.argv)]), shell.runs


def _runs_lines(runs: list[Ran], unit: str, role: str, rendered: dict[tuple[str, str], RenderedFile]) -> list[str]:
    """Statements of the files on disk that would run a command: shown, never run. Those p2pctl renders
    itself (the SSH env.sh's interface lookup) are its own; anything else is said to be foreign."""
    lines = []
    for ran in runs:
        name = "env.sh" if ran.file == "env.sh" else f"start_{role}.sh"
        ours = {st.source for st in statements(rendered[(unit, name)].text)} if (unit, name) in rendered else set()
        if ran.text in ours:
            continue
        text = " ".join(ran.text.split())
        lines.append(f"runs     {unit}/{name}:{ran.line}: {text[:300]}   (not rendered by p2pctl: `up --no-render` "
                     "would run it; re-render, or remove it)")
    return lines


def _start_line(proc) -> str:
    q = shlex.quote
    return (f"{proc.name}: cd {q(proc.workdir)} && setsid bash {q(proc.wrapper)} > {q(proc.log)} 2>&1 "
            f"< /dev/null & (pidfile {proc.pidfile})")


def _reach_line(node: Node) -> str:
    if node.connection != "ssh":
        return "bash -c true   (local)"
    user = f"{node.ssh_user}@" if node.ssh_user else ""
    port = f":{node.ssh_port}" if "ssh_port" in node.model_fields_set else ""
    extra = [f"key {node.ssh_key}"] if node.ssh_key else []
    extra += [f"ssh_config {node.ssh_config}"] if node.ssh_config else []
    keys = "host key NOT verified" if node.ssh_insecure_host_keys else "host key verified against known_hosts"
    return f"bash -c true   (ssh {user}{node.address}{port}; {', '.join(extra + [keys])})"


def _on_disk(ctx: FleetContext, rendered: list[RenderedFile]) -> list[RenderedFile]:
    """The files `up --no-render` would use: this machine's copies under the run folder, as they are (read,
    never run), once the folders and files are known to be ours alone."""
    check_on_disk(rendered, ctx.layout)
    out = []
    for f in rendered:
        path = ctx.layout.dir(f.unit) / f.name
        if not path.is_file():
            raise CouldNotRun(f"--no-render: {path} does not exist; run `p2pctl render` (or drop --no-render)")
        out.append(RenderedFile(f.node, f.unit, f.name, files.read_text(path, 1 << 20, follow=False), f.executable))
    return out


def plan(ctx: FleetContext, only: str | None = None, rerender: bool = True,
         roles: tuple[str, ...] = LAUNCHED_ROLES) -> dict[str, list[str]]:
    """Per node name, the ordered commands `up` would run there (same `only`, `rerender`, `roles`)."""
    fleet = ctx.fleet
    fresh = render_fleet(fleet, ctx.node_layout)
    rendered = fresh if rerender else _on_disk(ctx, fresh)
    by_unit = {(f.unit, f.name): f for f in rendered}
    ours = {(f.unit, f.name): f for f in fresh}
    nodes = [n for n in fleet.nodes if only is None or n.name == only]
    out: dict[str, list[str]] = {n.name: [f"check    {_reach_line(n)}"] for n in nodes}
    for f in rendered:
        if f.node not in out:
            continue
        node = next(n for n in fleet.nodes if n.name == f.node)
        local = ctx.layout.dir(f.unit) / f.name
        if not rerender:
            out[node.name].append(f"use      {local} (as it is on disk; not re-rendered)")
        elif node.connection == "ssh":
            remote = ctx.node_layout(node).dir(f.unit) / f.name
            out[node.name].append(f"copy     {local} -> {node.name}:{remote} "
                                  f"({'0755' if f.executable else '0644'}, over SFTP)")
        else:
            out[node.name].append(f"write    {local}")
    for unit in launched_units(ctx, roles, only):
        proc = ctx.proc(unit)
        line, runs = _exec_line(by_unit, unit.folder, unit.role, proc.workdir)
        out[unit.node.name] += [f"start    {_start_line(proc)}", *_runs_lines(runs, unit.folder, unit.role, ours),
                                f"exec     {line}", f"ready    {unit.ready_says}"]
    return out


def format_plan(steps: dict[str, list[str]]) -> str:
    """Human-readable plan: one block per host."""
    blocks = []
    for node, lines in steps.items():
        blocks.append(f"# {node}\n" + "\n".join(lines))
    return "\n\n".join(blocks) + "\n"
