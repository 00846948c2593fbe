"""Observability commands: the fleet's Prometheus."""

from __future__ import annotations

import argparse
import time

from rich.console import Console

import json

from rich.live import Live

from p2p_ops import monitor, prom
from p2p_ops.cli.fleet_cmds import add_fleet_args, context
from p2p_ops.errors import EXIT_CHECK_FAILED, EXIT_OK, CouldNotRun

console = Console()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prometheus", help="run the fleet's Prometheus (up | down | status)")
    p.add_argument("action", choices=["up", "down", "status"])
    add_fleet_args(p)
    p.set_defaults(handler=cmd_prometheus)

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
    ctx = context(args)
    if args.action == "up":
        url = prom.up(ctx)
        console.print(f"prometheus ready at {url} (config and tsdb in {prom.prom_dir(ctx)})")
        return EXIT_OK
    if args.action == "down":
        console.print(f"prometheus: {prom.down(ctx)}")
        return EXIT_OK
    ok = prom.running(ctx) and prom.ready(ctx)
    console.print(f"prometheus at {prom.url(ctx)}: {'ready' if ok else 'not running'}")
    return EXIT_OK if ok else EXIT_CHECK_FAILED


def _frame(ctx, source: str, window_s: float):
    if source in ("auto", "prometheus") and prom.ready(ctx):
        return monitor.frame_prometheus(prom.url(ctx), ctx), f"prometheus {prom.url(ctx)}"
    if source == "prometheus":
        raise CouldNotRun(f"no Prometheus answers at {prom.url(ctx)}; start it with `p2pctl prometheus up`")
    return monitor.frame_direct(ctx, window_s), "direct /metrics"


def cmd_monitor(args: argparse.Namespace) -> int:
    ctx = context(args)
    window = max(0.5, min(args.interval, 5.0))
    if args.once:
        frames, source = _frame(ctx, args.source, window)
        if args.json:
            print(json.dumps({"source": source, "frames": [f.to_dict() for f in frames]}, indent=2))
        else:
            console.print(monitor.render_table(frames, source))
        return EXIT_OK if all(f.up for f in frames) else EXIT_CHECK_FAILED
    frames, source = _frame(ctx, args.source, window)
    with Live(monitor.render_table(frames, source), console=console, refresh_per_second=1) as live:
        for _ in range(args.max_frames - 1):
            if source.startswith("prometheus"):
                time.sleep(args.interval)
            frames, source = _frame(ctx, args.source, window)
            live.update(monitor.render_table(frames, source))
    return EXIT_OK
