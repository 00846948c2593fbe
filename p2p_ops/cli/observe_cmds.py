"""Observability commands: the fleet's Prometheus."""

from __future__ import annotations

import argparse

from rich.console import Console

from p2p_ops import prom
from p2p_ops.cli.fleet_cmds import add_fleet_args, context
from p2p_ops.errors import EXIT_CHECK_FAILED, EXIT_OK

console = Console()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prometheus", help="run the fleet's Prometheus (up | down | status)")
    p.add_argument("action", choices=["up", "down", "status"])
    add_fleet_args(p)
    p.set_defaults(handler=cmd_prometheus)


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
