"""Fleet lifecycle commands: init, validate, render, up, wait, status, down."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.table import Table

from p2p_ops.cli.output import console, emit_json, err_console, show
from p2p_ops.cli.output import progress as _progress
from p2p_ops.errors import EXIT_CHECK_FAILED, EXIT_OK, BadInput
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle import status as fleet_status
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.sizing import BUDGET_SHARE, box_budget_gib, describe_sizing
from p2p_ops.spec.ports import check_local_base, default_base
from p2p_ops.spec.starter import (
    DEFAULT_MODEL_DIR,
    DEFAULT_VLLM_VENV,
    local_fleet,
    starter_yaml,
    vllm_missing,
    vllm_paths,
)
from p2p_runtime.profiles import PROFILE_NAMES, TINY


def add_fleet_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--fleet", default="fleet.yaml", help="fleet spec file (default: ./fleet.yaml)")
    p.add_argument("--run-dir", default=None,
                   help="state folder (default: p2p-run/<fleet name> next to the fleet file)")


def add_json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout (nothing else there)")


def context(args: argparse.Namespace) -> FleetContext:
    """The fleet context of -f/--run-dir; use it as `with context(args) as ctx:` so its connectors close."""
    return FleetContext.load(args.fleet, args.run_dir)


def _roles(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(args.role) if args.role else launch.ROLES


def add_role_arg(p: argparse.ArgumentParser, example: str) -> None:
    p.add_argument("--role", action="append", choices=launch.ROLES, default=None,
                   help=f"only these processes (repeatable), e.g. `--node node-b --role server` {example}")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init", help="write a ready-to-run fleet spec")
    p.add_argument("--local", type=int, metavar="N", required=True, help="N single-instance nodes on 127.0.0.1")
    p.add_argument("--name", default="local", help="fleet name (default: local)")
    p.add_argument("--runtime", choices=["embedded", "vllm"], default="embedded")
    p.add_argument("--model-path", default=None,
                   help=f"runtime vllm: the model folder vLLM loads (default: {DEFAULT_MODEL_DIR} beside the fleet "
                        "file, made by `p2pctl make-model`); written as an absolute path")
    p.add_argument("--vllm-venv", default=None,
                   help=f"runtime vllm: the venv holding vLLM (default: {DEFAULT_VLLM_VENV}, made by "
                        "`make setup-vllm`); written as an absolute path")
    p.add_argument("--port-offset", type=int, default=0,
                   help="add this to every default port (run several fleets side by side)")
    p.add_argument("--profile", choices=PROFILE_NAMES, default=TINY,
                   help="runtime embedded: the KV geometry engines store and move (tiny = 2 KiB per token; "
                        "llama-3-8b 128 KiB, qwen3-8b 144 KiB, qwen3-32b 256 KiB, gpt-oss-120b 72 KiB); chunk, "
                        "block and L1 page sizes follow it")
    p.add_argument("--memory-budget", type=float, default=None, metavar="GIB",
                   help="runtime embedded: GiB the whole fleet may use on this box (default: "
                        f"{int(BUDGET_SHARE * 100)}%% of MemAvailable); L1 and engine KV per node are sized to fit")
    p.add_argument("-o", "--output", default="fleet.yaml", help="where to write (default: ./fleet.yaml)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    add_json_arg(p)
    p.set_defaults(handler=cmd_init)

    p = sub.add_parser("validate", help="check a fleet spec and print a one-line verdict")
    add_fleet_args(p)
    add_json_arg(p)
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser("render", help="write env.sh and start wrappers for every instance",
                       description="Write <run-dir>/<instance>/env.sh, start_server.sh and start_engine.sh, and "
                       "<run-dir>/coordinator/*; print the paths written. Source an env.sh to get that "
                       "instance's settings in your shell.")
    add_fleet_args(p)
    add_json_arg(p)
    p.set_defaults(handler=cmd_render)

    p = sub.add_parser("up", help="start coordinator, servers and engines (detached)",
                       description="Without --node: the whole fleet. With --node: that node's servers and engines "
                       "(and the coordinator if it runs there). Returns once every process answers HTTP; a "
                       "process that dies at start is reported with the error lines and the tail of its log. A "
                       "process that already runs is kept (reported as \"kept ...\"), never restarted.")
    add_fleet_args(p)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds each process may take to answer")
    p.add_argument("--node", default=None, help="only this node's processes (and the coordinator if it is there)")
    p.add_argument("--dry-run", action="store_true",
                   help="print, per host, every command `up` would run, and start nothing (honours --node, "
                        "--role, --no-render)")
    p.add_argument("--no-render", action="store_true",
                   help="start from the env.sh files as they are (hand-edited ones included); no spec re-render")
    add_role_arg(p, "starts one lmcache server again after `down` stopped it, keeping its engine")
    add_json_arg(p)
    p.set_defaults(handler=cmd_up)

    p = sub.add_parser("wait", help="wait until every server is registered with N-1 peers and engines are healthy",
                       description="Exit 0 and a status table when ready; exit 1 naming each instance that is not, "
                       "its state and the tail of its log.")
    add_fleet_args(p)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (default 60)")
    add_json_arg(p)
    p.set_defaults(handler=cmd_wait)

    p = sub.add_parser("status", help="show processes, P2P state, peers and L1 use")
    add_fleet_args(p)
    add_json_arg(p)
    p.set_defaults(handler=cmd_status)

    p = sub.add_parser("down", help="stop everything the fleet started (idempotent)",
                       description="Stop engines, then servers, then the coordinator, by pidfile: SIGINT, then TERM, "
                       "then KILL. Safe to run twice; never signals a pid whose command line is not the one it "
                       "started.")
    add_fleet_args(p)
    p.add_argument("--node", default=None, help="only this node's processes (and the coordinator if it is there)")
    add_role_arg(p, "stops one lmcache server and leaves its engine running")
    add_json_arg(p)
    p.set_defaults(handler=cmd_down)


def cmd_init(args: argparse.Namespace) -> int:
    out = Path(args.output)
    if out.exists() and not args.force:
        raise BadInput(f"{out} already exists; pass --force to overwrite it or -o to write elsewhere")
    if not out.parent.is_dir():
        raise BadInput(f"-o {out}: folder {out.parent} does not exist; create it or write elsewhere")
    off = args.port_offset
    base = default_base(off)
    vllm = vllm_paths(out, args.model_path, args.vllm_venv)
    budget = _memory_budget(args)
    data = local_fleet(args.local, name=args.name, base=base, runtime=args.runtime, vllm=vllm,
                       cpu_count=os.cpu_count() or 1, profile=args.profile, memory_budget_gib=budget)
    check_local_base(base, args.local, off)
    parse_fleet(data)  # what we write must load
    out.write_text(starter_yaml(data))
    missing = vllm_missing(vllm["model_path"], vllm["venv"]) if args.runtime == "vllm" else []
    sized = describe_sizing(data, budget) if args.runtime == "embedded" else ""
    if args.json:
        emit_json({"wrote": str(out), "fleet": args.name, "nodes": args.local, "runtime": args.runtime,
                   "profile": args.profile if args.runtime == "embedded" else None, "sizing": sized or None,
                   "notes": missing})
    else:
        console.print(f"wrote {out}: fleet {args.name!r}, {args.local} node(s), runtime {args.runtime}")
        if sized:
            console.print(sized, soft_wrap=True)
        for note in missing:
            console.print(f"note: {note}", soft_wrap=True)
    return EXIT_OK


def _memory_budget(args: argparse.Namespace):
    if args.memory_budget is not None and args.memory_budget <= 0:
        raise BadInput(f"--memory-budget {args.memory_budget}: give the GiB the fleet may use, e.g. 8")
    return args.memory_budget if args.memory_budget is not None else box_budget_gib()


def cmd_validate(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        f = ctx.fleet
    if args.json:
        emit_json({"fleet_file": str(args.fleet), "ok": True, "fleet": f.name, "runtime": f.runtime,
                   "nodes": len(f.nodes), "instances": len(f.instances())})
        return EXIT_OK
    console.print(f"{args.fleet}: ok — fleet {f.name!r}, runtime {f.runtime}, {len(f.nodes)} node(s), "
                  f"{len(f.instances())} instance(s)")
    return EXIT_OK


def cmd_render(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        files = launch.render(ctx)
    paths = [str(ctx.layout.dir(f.unit) / f.name) for f in files]
    if args.json:
        emit_json({"fleet": ctx.fleet.name, "files": paths})
    else:
        for path in paths:
            console.print(path, soft_wrap=True)
    return EXIT_OK


def cmd_up(args: argparse.Namespace) -> int:
    roles = _roles(args)
    with context(args) as ctx:
        if args.dry_run:
            return _dry_run(ctx, args, roles)
        launch.up(ctx, progress=_progress, start_timeout=args.timeout, only=args.node,
                  rerender=not args.no_render, roles=roles)
    what = "started" if roles == launch.ROLES and args.node is None else \
        f"started ({', '.join(roles)}{' on ' + args.node if args.node else ''})"
    if args.json:
        emit_json({"fleet": ctx.fleet.name, "started": True, "node": args.node, "roles": list(roles)})
    else:
        console.print(f"fleet {ctx.fleet.name!r} {what}; run `p2pctl wait` to see it register")
    return EXIT_OK


def _dry_run(ctx: FleetContext, args: argparse.Namespace, roles: tuple[str, ...]) -> int:
    from p2p_ops.lifecycle import dryrun

    launch.check_node(ctx, args.node)
    steps = dryrun.plan(ctx, only=args.node, rerender=not args.no_render, roles=roles)
    if args.json:
        emit_json({"fleet": ctx.fleet.name, "dry_run": True, "plan": steps})
    else:
        print(dryrun.format_plan(steps), end="")
    return EXIT_OK


def cmd_wait(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        rep = launch.wait(ctx, timeout=args.timeout, progress=_progress)
    if args.json:
        emit_json(rep.to_json())
        return EXIT_OK
    _print_status(rep)
    console.print(f"[green]ready[/green]: {len(rep.instances)} server(s) registered with "
                  f"{rep.expected_peers} peer(s) each; engines healthy")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        rep = fleet_status.report(ctx)
    if args.json:
        emit_json(rep.to_json())
    else:
        _print_status(rep)
    return EXIT_OK if rep.ready else EXIT_CHECK_FAILED


def cmd_down(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        outcome = launch.down(ctx, only=args.node, roles=_roles(args))
    errors = launch.down_errors(outcome)
    if args.json:
        emit_json({"fleet": ctx.fleet.name, "stopped": outcome, "ok": not errors})
        return EXIT_CHECK_FAILED if errors else EXIT_OK
    table = Table(title=f"p2pctl down — fleet {ctx.fleet.name}")
    table.add_column("process")
    table.add_column("result")
    for name, what in outcome.items():
        table.add_row(name, what)
    show(table)
    return EXIT_CHECK_FAILED if errors else EXIT_OK


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f}"


def _engine_health(i: fleet_status.InstanceReport) -> str:
    return f"[yellow]{i.engine_health}[/yellow]" if i.engine_degraded else i.engine_health


def _print_status(rep: fleet_status.FleetReport) -> None:
    table = Table(title=f"fleet {rep.fleet} — {'READY' if rep.ready else 'NOT READY'}")
    for col in ("instance", "node", "server pid", "p2p_state", "peers", "peer ids", "L1 used/total GiB",
                "engine", "engine health"):
        table.add_column(col)
    for i in rep.instances:
        ok = i.ready(rep.expected_peers)
        table.add_row(
            f"[green]{i.instance}[/green]" if ok else f"[red]{i.instance}[/red]",
            i.node, i.server_proc, i.server.p2p_state, f"{i.server.peer_count}/{rep.expected_peers}",
            ",".join(i.server.peers) or "-", f"{_gib(i.server.l1_used)}/{_gib(i.server.l1_total)}",
            i.engine_url, _engine_health(i))
    show(table)
    ctable = Table(title=f"coordinator {rep.coordinator_url} ({rep.coordinator_proc}, "
                         f"{'healthy' if rep.coordinator_healthy else 'not healthy'}) — /instances")
    for col in ("instance_id", "ip", "http_port", "mq_port", "p2p_advertised_url"):
        ctable.add_column(col)
    for inst in rep.coordinator_instances or []:
        ctable.add_row(*(str(inst.get(k, "")) for k in ("instance_id", "ip", "http_port", "mq_port",
                                                          "p2p_advertised_url")))
    show(ctable)
    if rep.router is not None:
        r = rep.router
        colour = "green" if r.ready else "red"
        console.print(f"router {r.url} ({r.process}): [{colour}]{r.problem()}[/{colour}]; workers "
                      f"{', '.join(r.workers) or '-'}", soft_wrap=True)
    for node, err in rep.node_errors.items():
        err_console.print(f"[red]node {node} unreachable:[/red] {err}")
