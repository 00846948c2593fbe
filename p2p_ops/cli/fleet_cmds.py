"""Fleet lifecycle commands: init, validate, render, up, wait, status, down."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.markup import escape

from p2p_ops.cli.common import context, done, refusal_with_cause, verb
from p2p_ops.cli.output import console, err_console, outside, plain, progress, show, table
from p2p_ops.errors import BadInput
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle import status as fleet_status
from p2p_ops.lifecycle.lock import WAIT_S
from p2p_ops.observe.cache_map import cache_map
from p2p_ops.resources import given_path
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.load import warnings as spec_warnings
from p2p_ops.spec.sizing import BUDGET_SHARE, box_budget_gib, describe_sizing
from p2p_ops.spec.ports import check_local_base, default_base
from p2p_ops.spec.starter import (DEFAULT_MODEL_DIR, DEFAULT_VLLM_VENV, local_fleet, vllm_missing, vllm_paths,
                                  write_starter)
from p2p_runtime.profiles import PROFILE_NAMES, TINY


def _roles(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(args.role) if args.role else launch.ROLES


def add_node_role_lock_args(p: argparse.ArgumentParser, example: str) -> None:
    """`up` and `down`: which processes (--node, --role) and how long to wait for the fleet's lock."""
    p.add_argument("--node", default=None, help="only this node's processes (and the coordinator if it is there)")
    p.add_argument("--role", action="append", choices=launch.ROLES, default=None,
                   help=f"only these processes (repeatable), e.g. `--node node-b --role server` {example}")
    p.add_argument("--lock-wait", type=float, default=WAIT_S, metavar="S",
                   help=f"seconds to wait while another `up`/`down` of this fleet holds its lock (default "
                        f"{WAIT_S:.0f}; 0: fail at once, naming who holds it)")


def register(sub: argparse._SubParsersAction) -> None:
    p = verb(sub, "init", cmd_init, fleet=False, help="write a ready-to-run fleet spec")
    p.add_argument("--local", type=int, metavar="N", required=True, help="N single-instance nodes on 127.0.0.1")
    p.add_argument("--name", default="local", help="fleet name (default: local)")
    p.add_argument("--runtime", choices=["embedded", "vllm"], default="embedded")
    p.add_argument("--model-path", default=None,
                   help=f"runtime vllm: the model folder vLLM loads (default: {DEFAULT_MODEL_DIR} beside the fleet "
                        "file, made by `p2pctl make-model`); written as an absolute path")
    p.add_argument("--vllm-venv", default=None, type=given_path,
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

    verb(sub, "validate", cmd_validate, help="check a fleet spec and print a one-line verdict")
    verb(sub, "render", cmd_render, help="write env.sh and start wrappers for every instance",
         description="Write <run-dir>/<instance>/env.sh, start_server.sh and start_engine.sh, and "
         "<run-dir>/coordinator/*; print the paths written. Source an env.sh to get that instance's settings in "
         "your shell.")

    p = verb(sub, "up", cmd_up, help="start coordinator, servers and engines (detached)",
             description="Without --node: the whole fleet. With --node: that node's servers and engines (and the "
             "coordinator if it runs there). Returns once every process answers HTTP; a process that dies at start "
             "is reported with the error lines and the tail of its log. A process that already runs is kept "
             "(reported as \"kept ...\"), never restarted.")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds each process may take to answer")
    p.add_argument("--dry-run", action="store_true",
                   help="print, per host, every command `up` would run, and start nothing (honours --node, "
                        "--role, --no-render)")
    p.add_argument("--no-render", action="store_true",
                   help="start from the env.sh files as they are (hand-edited ones included); no spec re-render")
    add_node_role_lock_args(p, "starts one lmcache server again after `down` stopped it, keeping its engine")

    p = verb(sub, "wait", cmd_wait, help="wait until every server is registered with N-1 peers and engines are "
             "healthy", description="Exit 0 and a status table when ready; exit 1 naming each instance that is "
             "not, its state and the tail of its log.")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait (default 60)")

    p = verb(sub, "status", cmd_status, help="show processes, P2P state, peers and L1 use")
    p.add_argument("--cache", action="store_true",
                   help="also the cache map: per node the objects held (coordinator key directory), their bytes, "
                        "how many a peer holds too, and the test-run prefixes they belong to")

    p = verb(sub, "down", cmd_down, help="stop everything the fleet started (idempotent)",
             description="Stop engines, then servers, then the coordinator, by pidfile: SIGINT, then TERM, then "
             "KILL. Safe to run twice; never signals a pid whose command line is not the one it started.")
    add_node_role_lock_args(p, "stops one lmcache server and leaves its engine running")


def cmd_init(args: argparse.Namespace) -> int:
    out = Path(args.output)
    if not out.parent.is_dir():
        raise BadInput(f"-o {out}: folder {out.parent} does not exist; create it or write elsewhere")
    if out.is_dir() and not out.is_symlink():
        raise BadInput(f"-o {out}: is a folder; name a file, e.g. -o {out / 'fleet.yaml'}")
    off = args.port_offset
    base = default_base(off)
    vllm = vllm_paths(out, args.model_path, args.vllm_venv)
    if args.memory_budget is not None and args.memory_budget <= 0:
        raise BadInput(f"--memory-budget {args.memory_budget}: give the GiB the fleet may use, e.g. 8")
    budget = args.memory_budget if args.memory_budget is not None else box_budget_gib()
    data = local_fleet(args.local, name=args.name, base=base, runtime=args.runtime, vllm=vllm,
                       cpu_count=os.cpu_count() or 1, profile=args.profile, memory_budget_gib=budget)
    check_local_base(base, args.local, off)
    parse_fleet(data)  # what we write must load
    write_starter(out, data, force=args.force)  # refuses an existing file without --force
    missing = vllm_missing(vllm["model_path"], vllm["venv"]) if args.runtime == "vllm" else []
    sized = describe_sizing(data, budget) if args.runtime == "embedded" else ""
    return done(args, {"wrote": str(out), "fleet": args.name, "nodes": args.local, "runtime": args.runtime,
                       "profile": args.profile if args.runtime == "embedded" else None, "sizing": sized or None,
                       "notes": missing},
                [f"wrote {out}: fleet {args.name!r}, {args.local} node(s), runtime {args.runtime}", sized,
                 *(f"note: {note}" for note in missing)])


def cmd_validate(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        f = ctx.fleet
    notes = spec_warnings(f, Path(args.fleet))
    for note in notes:
        err_console.print(f"warning: {note}", soft_wrap=True, markup=False)
    return done(args, {"fleet_file": str(args.fleet), "ok": True, "fleet": f.name, "runtime": f.runtime,
                       "nodes": len(f.nodes), "instances": len(f.instances()), "warnings": notes},
                [f"{args.fleet}: ok — fleet {f.name!r}, runtime {f.runtime}, {len(f.nodes)} node(s), "
                 f"{len(f.instances())} instance(s)"])


def cmd_render(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        files = launch.render(ctx)
    paths = [str(ctx.layout.dir(f.unit) / f.name) for f in files]
    return done(args, {"fleet": ctx.fleet.name, "files": paths}, paths)


def cmd_up(args: argparse.Namespace) -> int:
    roles = _roles(args)
    with context(args) as ctx:
        if args.dry_run:
            from p2p_ops.lifecycle import dryrun

            launch.check_node(ctx, args.node)
            steps = dryrun.plan(ctx, only=args.node, rerender=not args.no_render, roles=roles)
            return done(args, {"fleet": ctx.fleet.name, "dry_run": True, "plan": steps},
                        lambda: print(dryrun.format_plan(steps), end=""))
        launch.up(ctx, progress=progress, start_timeout=args.timeout, only=args.node,
                  rerender=not args.no_render, roles=roles, lock_wait_s=args.lock_wait)
    what = "started" if roles == launch.ROLES and args.node is None else \
        f"started ({', '.join(roles)}{' on ' + args.node if args.node else ''})"
    return done(args, {"fleet": ctx.fleet.name, "started": True, "node": args.node, "roles": list(roles)},
                [f"fleet {ctx.fleet.name!r} {what}; run `p2pctl wait` to see it register"])


def cmd_wait(args: argparse.Namespace) -> int:
    with context(args) as ctx, refusal_with_cause(ctx):
        rep = launch.wait(ctx, timeout=args.timeout, progress=progress)

    def show() -> None:
        _print_status(rep)
        console.print(f"[green]ready[/green]: {len(rep.instances)} server(s) registered with "
                      f"{rep.expected_peers} peer(s) each; engines healthy")

    return done(args, rep.to_json(), show)


def cmd_status(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        rep = fleet_status.report(ctx)
        cmap = cache_map(ctx) if args.cache else None

    def show() -> None:
        _print_status(rep)
        if cmap:
            _print_cache(cmap)

    return done(args, rep.to_json() | ({"cache": cmap.to_json()} if cmap else {}), show, rep.ready)


def _print_cache(cmap) -> None:
    t = table(f"cache map — {cmap.total_keys} L1 key(s) in the directory, {cmap.duplicated_keys} held by more "
              "than one node" + (f" ({cmap.error})" if cmap.error else ""),
              "instance", "node", "objects (directory)", "MiB (directory)", "objects (/status)",
              "L1 used/total GiB", "also on a peer", "test-run prefixes held (chunks)")
    for n in cmap.nodes:
        t.add_row(n.instance, n.node, str(n.directory_objects), f"{n.directory_bytes / 2**20:.1f}",
                  "-" if n.status_objects is None else str(n.status_objects),
                  f"{_gib(n.l1_used)}/{_gib(n.l1_total)}", str(n.duplicated),
                  ", ".join(f"{k} ({v})" for k, v in sorted(n.prefixes.items())[:6])
                  + (" ..." if len(n.prefixes) > 6 else ""))
    show(t)
    if cmap.prefixes:
        show(table("test-run prefixes: leading chunks held per instance", "prefix", "chunks", "held on",
                   rows=([p.label, str(p.chunks), ", ".join(f"{i}: {c}" for i, c in sorted(p.held.items())) or "-"]
                         for p in cmap.prefixes)))


def cmd_down(args: argparse.Namespace) -> int:
    # `down` prints its outcome as a table; of its progress only the wait for the fleet's lock goes to stderr.
    with context(args) as ctx:
        outcome = launch.down(ctx, only=args.node, roles=_roles(args), lock_wait_s=args.lock_wait,
                              progress=lambda line: progress(line) if line.startswith("waiting for fleet") else None)
    errors = launch.down_errors(outcome)

    return done(args, {"fleet": ctx.fleet.name, "stopped": outcome, "ok": not errors},
                lambda: show(table(f"p2pctl down — fleet {ctx.fleet.name}", "process", "result",
                                   rows=outcome.items())), not errors)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f}"


def _engine_health(i: fleet_status.InstanceReport) -> str:
    return f"[yellow]{i.engine_health}[/yellow]" if i.engine_degraded else i.engine_health


def _print_status(rep: fleet_status.FleetReport) -> None:
    t = table(f"fleet {rep.fleet} — {'READY' if rep.ready else 'NOT READY'}", "instance", "node", "server pid",
              "p2p_state", "peers", "peer ids", "L1 used/total GiB", "engine", "engine health")
    for i in rep.instances:
        ok = i.ready(rep.expected_peers)
        # What the servers and the coordinator answer is printed as plain text (outside): an id or state a
        # service reports may hold markup or terminal control sequences.
        t.add_row(
            f"[green]{i.instance}[/green]" if ok else f"[red]{i.instance}[/red]",
            i.node, i.server_proc, outside(i.server.p2p_state), f"{i.server.peer_count}/{rep.expected_peers}",
            outside(",".join(map(str, i.server.peers)) or "-"), f"{_gib(i.server.l1_used)}/{_gib(i.server.l1_total)}",
            i.engine_url, _engine_health(i))
    show(t)
    columns = ("instance_id", "ip", "http_port", "mq_port", "p2p_advertised_url")
    show(table(f"coordinator {rep.coordinator_url} ({rep.coordinator_proc}, "
               f"{'healthy' if rep.coordinator_healthy else 'not healthy'}) — /instances", *columns,
               rows=([outside(inst.get(k, "")) for k in columns] for inst in rep.coordinator_instances or [])))
    if rep.router is not None:
        r = rep.router
        colour = "green" if r.ready else "red"
        console.print(f"router {r.url} ({r.process}): [{colour}]{escape(plain(r.problem()))}[/{colour}]; workers "
                      f"{escape(plain(', '.join(r.workers) or '-'))}", soft_wrap=True)
    for node, err in rep.node_errors.items():
        err_console.print(f"[red]node {node} unreachable:[/red] {escape(plain(err))}")
