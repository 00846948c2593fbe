"""Observability commands: the fleet's Prometheus, its Grafana dashboard, the live monitor."""

from __future__ import annotations

import argparse

from rich.live import Live

from p2p_ops import files
from p2p_ops.cli.common import context, done, verb
from p2p_ops.cli.output import console, emit_json, show
from p2p_ops.errors import EXIT_OK
from p2p_ops.lifecycle import prometheus as prom
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
        verb(actions, action, cmd_prometheus, help=helptext, description=description)

    p = verb(sub, "grafana", cmd_grafana, help="print (or write) a Grafana dashboard JSON for the fleet's Prometheus",
             description="A dashboard with P2P loads and KV bytes per node, peers per server, TTFT and "
             "cached-token ratio per engine, L1 use and LMCache lookup latency. Import it in Grafana "
             "(Dashboards > Import) and pick the fleet's Prometheus as the data source.")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    p.add_argument("--window", default=grafana.WINDOW, help=f"rate window (default {grafana.WINDOW})")

    p = verb(sub, "monitor", cmd_monitor, json="with --once: print the frame as JSON",
             help="live per-node view: P2P loads, hit ratio, L1, queue, TTFT")
    p.add_argument("--once", action="store_true", help="print one frame and exit (for scripts and tests)")
    p.add_argument("--interval", type=float, default=3.0, help="seconds between frames (default 3)")
    p.add_argument("--source", choices=["auto", "prometheus", "direct"], default="auto",
                   help="auto: the fleet's Prometheus when it runs, else scrape /metrics directly")
    p.add_argument("--max-frames", type=int, default=100000, help="stop after this many frames")


def cmd_prometheus(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        if args.action == "up":
            where, folder = prom.up(ctx), prom.prom_dir(ctx)
            return done(args, {"prometheus": where, "ready": True, "dir": str(folder),
                               "rules": str(folder / prom.RULES_FILE)},
                        [f"prometheus ready at {where} (config, rules and tsdb in {folder})"])
        if args.action == "down":
            what = prom.down(ctx)
            return done(args, {"prometheus": prom.url(ctx), "stopped": what},
                        [f"prometheus: {what}"])
        state = prom.state(ctx)
        return done(args, {"prometheus": prom.url(ctx), "ready": state == "ready", "state": state},
                    [f"prometheus at {prom.url(ctx)}: {state}"], state == "ready")


def cmd_grafana(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        pass  # loading checks the spec; the dashboard needs only the fleet's name
    grafana.check_window(args.window)
    board = grafana.dashboard(ctx.fleet.name, window=args.window)
    if not args.output:
        emit_json(board)
        return EXIT_OK
    out = files.write_json(args.output, board)  # a link at -o is replaced, never written through
    return done(args, {"wrote": str(out), "panels": len(board["panels"])},
                [f"wrote {out}: {len(board['panels'])} panels for fleet {ctx.fleet.name!r}"])


def cmd_monitor(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        if args.once or args.json:
            frames, source = next(monitor.frames(ctx, args.source, args.interval, 1))
            return done(args, {"source": source, "frames": [f.to_dict() for f in frames]},
                        lambda: show(monitor.render_table(frames, source)), monitor.all_up(frames))
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
