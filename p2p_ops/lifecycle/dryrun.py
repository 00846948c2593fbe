"""`p2pctl up --dry-run`: every command `up` would run, per host, in order, touching no host.

`plan(ctx)` renders the fleet in memory (the same `render_fleet` that `up` uses) and lists per node:

    check    bash -c true                                    (reach the node before anything starts)
    write    /here/p2p-run/f/h1-0/env.sh                     (local node)
    copy     /here/p2p-run/f/h1-0/env.sh -> h1:/srv/run/f/h1-0/env.sh (0644)   (ssh node, over SFTP)
    start    h1-0/server: cd /srv/run/f/h1-0 && setsid bash start_server.sh > server.log 2>&1 < /dev/null &
             (pidfile server.pid)
    exec     nice -n 10 /opt/venv/bin/lmcache server --instance-id h1-0 ...   (the wrapper's command line,
             expanded from env.sh exactly as bash will: `source env.sh` then the `exec` arguments)
    ready    GET http://10.0.0.1:8081/status answers

Engines show the environment that changes what they do (CUDA_VISIBLE_DEVICES, PYTHONHASHSEED, UCX_*) in front
of the command, e.g. `CUDA_VISIBLE_DEVICES=0 PYTHONHASHSEED=0 /opt/venv/bin/vllm serve Qwen/Qwen3-8B --host
10.0.0.1 --port 8001 --kv-transfer-config '{"kv_connector":"LMCacheMPConnector",...}'`.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from pathlib import Path

from p2p_ops.errors import CouldNotRun
from p2p_ops.facts.envfile import parse_env_sh
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.launch import launched_units
from p2p_ops.lifecycle.render import RenderedFile, render_fleet
from p2p_ops.spec.model import Node
from p2p_ops.spec.units import LAUNCHED_ROLES

# Environment that decides how a process behaves beyond its flags; shown in front of exec lines when set.
SHOWN_ENV = ("CUDA_VISIBLE_DEVICES", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "PYTHONHASHSEED",
             "UCX_TLS", "UCX_NET_DEVICES")


def exec_argv(wrapper: str, env_sh: str) -> list[str]:
    """The argv the wrapper's `exec` line runs, expanded by bash from env.sh (nothing else is executed)."""
    lines = wrapper.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("exec ")), None)
    if start is None:
        raise CouldNotRun("rendered wrapper has no `exec` line; re-render (`p2pctl render`)")
    end = start
    while lines[end].rstrip().endswith("\\") and end + 1 < len(lines):
        end += 1
    body = lines[:start] + ["printf '%s\\0' " + lines[start][len("exec "):]] + lines[start + 1:end + 1]
    with tempfile.TemporaryDirectory(prefix="p2p-dryrun-") as tmp:
        (Path(tmp) / "env.sh").write_text(env_sh)
        script = Path(tmp) / "wrapper.sh"
        script.write_text("\n".join(body) + "\n")
        res = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", "bash", str(script)], capture_output=True,
                             timeout=30, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise CouldNotRun(f"cannot expand the wrapper's command line: {res.stderr.decode(errors='replace')[-300:]}")
    return [a.decode() for a in res.stdout.split(b"\0")[:-1]]


def _exec_line(files: dict[tuple[str, str], RenderedFile], unit: str, role: str) -> str:
    env_sh = files[(unit, "env.sh")].text
    argv = exec_argv(files[(unit, f"start_{role}.sh")].text, env_sh)
    env = parse_env_sh(env_sh)
    shown = [f"{k}={shlex.quote(env[k])}" for k in SHOWN_ENV if env.get(k)] if role != "coordinator" else []
    return " ".join(shown + [shlex.join(argv)])


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
    """The files `up --no-render` would use: this machine's copies under the run folder, as they are."""
    out = []
    for f in rendered:
        path = ctx.layout.dir(f.unit) / f.name
        if not path.is_file():
            raise CouldNotRun(f"--no-render: {path} does not exist; run `p2pctl render` (or drop --no-render)")
        out.append(RenderedFile(f.node, f.unit, f.name, path.read_text(), f.executable))
    return out


def plan(ctx: FleetContext, only: str | None = None, rerender: bool = True,
         roles: tuple[str, ...] = LAUNCHED_ROLES) -> dict[str, list[str]]:
    """Per node name, the ordered commands `up` would run there (same `only`, `rerender`, `roles`)."""
    fleet = ctx.fleet
    rendered = render_fleet(fleet, ctx.node_layout)
    if not rerender:
        rendered = _on_disk(ctx, rendered)
    by_unit = {(f.unit, f.name): f for f in rendered}
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
        out[unit.node.name] += [f"start    {_start_line(proc)}",
                                f"exec     {_exec_line(by_unit, unit.folder, unit.role)}",
                                f"ready    {unit.ready_says}"]
    return out


def format_plan(steps: dict[str, list[str]]) -> str:
    """Human-readable plan: one block per host."""
    blocks = []
    for node, lines in steps.items():
        blocks.append(f"# {node}\n" + "\n".join(lines))
    return "\n\n".join(blocks) + "\n"
