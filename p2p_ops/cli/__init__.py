"""`p2pctl`: one CLI over the p2p_ops library.

Each command group lives in its own module exposing `register(subparsers)`; a command's handler takes the
parsed args and returns an exit code. Exit codes: 0 success, 1 a check failed, 2 bad input or could not run.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from p2p_ops.errors import EXIT_BAD_INPUT, P2POpsError

# Order is the order of `p2pctl --help`.
COMMAND_MODULES = [
    "p2p_ops.cli.fleet_cmds",
    "p2p_ops.cli.test_cmds",
    "p2p_ops.cli.observe_cmds",
    "p2p_ops.cli.diag_cmds",
    "p2p_ops.cli.doctor_cmds",
    "p2p_ops.cli.probe_cmds",
    "p2p_ops.cli.model_cmds",
    "p2p_ops.cli.bench_cmds",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="p2pctl",
        description="Launch, test and diagnose an LMCache P2P KV-cache fleet.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args.handler(args) or 0)
    except P2POpsError as exc:
        print(f"p2pctl {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("p2pctl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
