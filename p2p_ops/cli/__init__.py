"""`p2pctl`: one CLI over the p2p_ops library.

Each command group lives in its own module exposing `register(subparsers)`; a command's handler takes the
parsed args and returns an exit code. Exit codes: 0 success, 1 a check failed, 2 bad input or could not run.
Output rules (stdout for results, stderr for progress, --json, piping, colour) live in `output.py`.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys

from p2p_ops.cli import output
from p2p_ops.errors import EXIT_BAD_INPUT, CouldNotRun, P2POpsError

# Order is the order of `p2pctl --help`.
COMMAND_MODULES = [
    "p2p_ops.cli.fleet_cmds",
    "p2p_ops.cli.test_cmds",
    "p2p_ops.cli.baseline_cmds",
    "p2p_ops.cli.observe_cmds",
    "p2p_ops.cli.diag_cmds",
    "p2p_ops.cli.doctor_cmds",
    "p2p_ops.cli.explain_cmds",
    "p2p_ops.cli.probe_cmds",
    "p2p_ops.cli.model_cmds",
    "p2p_ops.cli.bench_cmds",
]

# The packages a control host's core install leaves out (pyproject's extras), each imported only by the verbs
# that need it: a verb that reaches one names the extra to install instead of a traceback.
EXTRA_OF = {"matplotlib": "plots", "fastapi": "engine", "uvicorn": "engine", "zmq": "engine", "msgspec": "engine",
            "torch": "engine", "lmcache": "node", "nixl": "node", "numpy": "node", "transformers": "node",
            "tokenizers": "node"}

EXIT_CODES_EPILOG = "exit codes: 0 success, 1 a check failed, 2 bad input or could not run"

# Global flags are accepted anywhere before `--` (p2pctl status -q == p2pctl -q status).
_GLOBAL_FLAGS = {"--no-color": "no_color", "-q": "quiet", "--quiet": "quiet"}


def version() -> str:
    from importlib import metadata

    try:
        return metadata.version("p2p-kv-ops")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


class _Paragraphs(argparse.HelpFormatter):
    """argparse's formatter, filling each blank-line-separated paragraph on its own (an epilog's example stays
    apart from the exit codes line)."""

    def _fill_text(self, text, width, indent):
        return "\n\n".join(super(_Paragraphs, self)._fill_text(p, width, indent) for p in text.split("\n\n"))


def finite_float(text: str) -> float:
    """`type=float` of every flag: a size, a time or a ratio is a finite number; float() also reads nan and inf."""
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number; give one such as 8 or 0.5")
    return value


def finish(parser: argparse.ArgumentParser) -> None:
    """Every --help ends with the exit codes (a parser's own epilog keeps its text and gains the line), every
    `type=float` flag refuses nan and infinities, and --json (added first by `common.verb`) is listed last,
    where every verb's usage shows it."""
    parser.epilog = f"{parser.epilog}\n\n{EXIT_CODES_EPILOG}" if parser.epilog else EXIT_CODES_EPILOG
    parser.formatter_class = _Paragraphs
    parser.register("type", float, finite_float)
    for actions in (parser._actions, *(g._group_actions for g in parser._action_groups)):
        actions.sort(key=lambda a: "--json" in a.option_strings)
    for sub in _subcommands(parser).values():
        finish(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="p2pctl",
        description="Launch, test and diagnose an LMCache P2P KV-cache fleet.",
    )
    parser.add_argument("--version", action="version", version=f"p2pctl {version()}")
    parser.add_argument("--no-color", action="store_true", help="no colours or styles (also: NO_COLOR=1)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress messages, bars or spinners")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    finish(parser)
    return parser


def _hoist_globals(argv: list[str]) -> tuple[list[str], dict]:
    flags, rest = {}, []
    for i, tok in enumerate(argv):
        if tok == "--":
            rest.extend(argv[i:])
            break
        if tok in _GLOBAL_FLAGS:
            flags[_GLOBAL_FLAGS[tok]] = True
        else:
            rest.append(tok)
    return rest, flags


def _leaf(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The (sub)parser the command words of argv select, e.g. `test basic` -> the basic parser."""
    node = parser
    for word in argv:
        if word not in _subcommands(node):
            break
        node = _subcommands(node)[word]
    return node


def main(argv: list[str] | None = None) -> int:
    argv, flags = _hoist_globals(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    leaf = _leaf(parser, argv)
    if os.environ.get("P2PCTL_PROG"):
        # Skill wrappers (basic_test.py -> `p2pctl test basic`) set it so usage and error lines name the
        # script the user ran, not the p2pctl command behind it.
        leaf.prog = os.environ["P2PCTL_PROG"]
    args, extra = parser.parse_known_args(argv)
    if extra:
        leaf.error(f"unrecognized arguments: {' '.join(extra)}")
    output.configure(no_color=flags.get("no_color", False) or args.no_color,
                     quiet=flags.get("quiet", False) or args.quiet)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return _run_handler(args)
    except P2POpsError as exc:
        print(f"p2pctl {args.command}: {exc}", file=sys.stderr)
        if getattr(args, "json", False):
            # A script that asked for JSON still gets exactly one document on stdout.
            output.emit_json({"ok": False, "error": str(exc), "exit_code": exc.exit_code}
                             | ({"cause": exc.cause.to_dict()} if exc.cause else {}))
        return exc.exit_code
    except KeyboardInterrupt:
        print("p2pctl: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `p2pctl ... | head`: the reader left; say nothing more (and let interpreter shutdown not complain).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _run_handler(args) -> int:
    try:
        return int(args.handler(args) or 0)
    except ModuleNotFoundError as exc:
        extra = EXTRA_OF.get((exc.name or "").partition(".")[0])
        if extra is None:
            raise
        raise CouldNotRun(f"this needs {exc.name}, which is not installed here: pip install 'p2p-kv-ops[{extra}]'"
                          ) from None
