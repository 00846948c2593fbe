"""Observability commands: the fleet's Prometheus, its Grafana dashboard, the live monitor."""

from __future__ import annotations

import argparse

from rich.live import Live

from p2p_ops import files
from p2p_ops.cli.fleet_cmds import add_fleet_args, add_json_arg, context
from p2p_ops.cli.output import console, emit_json, show
from p2p_ops.errors import EXIT_CHECK_FAILED, EXIT_OK
from p2p_ops.lifecycle import prometheus as prom
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe import grafana, monitor
from p2p_ops.spec.settings import PrometheusSettings

_PROM = PrometheusSettings()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prometheus", help="run the fleet's Prometheus with its alert and recording rules "
                                          "(up | down | status)")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, helptext, description in (
            ("up", "start it (or find it running) and wait until it answers",
             "Render prometheus.yml (every server's, engine's and the coordinator's /metrics) and rules.yml "
             "(alert and recording rules from the fleet: peers below N-1, P2P load failures, lookup timeouts, "
             "L1 out of memory, engine or server down) into p2p-run/<fleet>/prometheus/, start the `prometheus` "
             f"binary (Debian package) on prometheus.host:port (default {_PROM.host}:{_PROM.port}) with its "
             "tsdb there, and wait for /-/ready; a running one reloads them. `p2pctl grafana` writes a "
             "dashboard for it."),
            ("down", "stop it", "Stop the fleet's Prometheus (its tsdb stays in the run folder)."),
            ("status", "ready, not ready or not running", "Say whether the fleet's Prometheus answers /-/ready.")):
        a = actions.add_parser(action, help=helptext, description=description)
        add_fleet_args(a)
        add_json_arg(a)
        a.set_defaults(handler=cmd_prometheus)

    p = sub.add_parser("grafana", help="print (or write) a Grafana dashboard JSON for the fleet's Prometheus",
                       description="A dashboard with P2P loads and KV bytes per node, peers per server, TTFT and "
                       "cached-token ratio per engine, L1 use and LMCache lookup latency. Import it in Grafana "
                       "(Dashboards > Import) and pick the fleet's Prometheus as the data source.")
    add_fleet_args(p)
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    p.add_argument("--window", default=grafana.WINDOW, help=f"rate window (default {grafana.WINDOW})")
    add_json_arg(p)
    p.set_defaults(handler=cmd_grafana)

    p = sub.add_parser("monitor", help="live per-node view: P2P loads, hit ratio, L1, queue, TTFT")
    add_fleet_args(p)
    p.add_argument("--once", action="store_true", help="print one frame and exit (for scripts and tests)")
    p.add_argument("--interval", type=float, default=3.0, help="seconds between frames (default 3)")
    p.add_argument("--source", choices=["auto", "prometheus", "direct"], default="auto",
                   help="auto: the fleet's Prometheus when it runs, else scrape /metrics directly")
    p.add_argument("--json", action="store_true", help="with --once: print the frame as JSON")
    p.add_argument("--max-frames", type=int, default=100000, help="stop after this many frames")
    p.set_defaults(handler=cmd_monitor)


def cmd_prometheus(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        return _prometheus(ctx, args)


def _prometheus(ctx: FleetContext, args: argparse.Namespace) -> int:
    if args.action == "up":
        where = prom.up(ctx)
        if args.json:
            emit_json({"prometheus": where, "ready": True, "dir": str(prom.prom_dir(ctx)),
                       "rules": str(prom.prom_dir(ctx) / prom.RULES_FILE)})
        else:
            console.print(f"prometheus ready at {where} (config, rules and tsdb in {prom.prom_dir(ctx)})",
                          soft_wrap=True)
        return EXIT_OK
    if args.action == "down":
        what = prom.down(ctx)
        if args.json:
            emit_json({"prometheus": prom.url(ctx), "stopped": what})
        else:
            console.print(f"prometheus: {what}")
        return EXIT_OK
    state = prom.state(ctx)
    if args.json:
        emit_json({"prometheus": prom.url(ctx), "ready": state == "ready", "state": state})
    else:
        console.print(f"prometheus at {prom.url(ctx)}: {state}")
    return EXIT_OK if state == "ready" else EXIT_CHECK_FAILED


def cmd_grafana(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        pass  # loading checks the spec; the dashboard needs only the fleet's name
    grafana.check_window(args.window)
    board = grafana.dashboard(ctx.fleet.name, window=args.window)
    if not args.output:
        emit_json(board)
        return EXIT_OK
    out = files.write_json(args.output, board)  # a link at -o is replaced, never written through
    if args.json:
        emit_json({"wrote": str(out), "panels": len(board["panels"])})
    else:
        console.print(f"wrote {out}: {len(board['panels'])} panels for fleet {ctx.fleet.name!r}", soft_wrap=True)
    return EXIT_OK


def cmd_monitor(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        return _monitor(ctx, args)


def _monitor(ctx: FleetContext, args: argparse.Namespace) -> int:
    if args.once or args.json:
        frames, source = next(monitor.frames(ctx, args.source, args.interval, 1))
        if args.json:
            emit_json({"source": source, "frames": [f.to_dict() for f in frames]})
        else:
            show(monitor.render_table(frames, source))
        return EXIT_OK if monitor.all_up(frames) else EXIT_CHECK_FAILED
    stream = monitor.frames(ctx, args.source, args.interval, args.max_frames)
    if not console.is_terminal:
        # Piped: one plain table per frame (a Live display would show nothing until it ends).
        for frames, source in stream:
            show(monitor.render_table(frames, source))
        return EXIT_OK
    with Live(monitor.render_table(*next(stream)), console=console.get(), refresh_per_second=1) as live:
        for frames, source in stream:
            live.update(monitor.render_table(frames, source))
    return EXIT_OK
