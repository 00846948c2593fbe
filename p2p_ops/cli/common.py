"""What the verbs share: their parser set-up, the fleet they act on, and how a result ends.

`p = verb(sub, "status", cmd_status, help=...)` makes a verb's parser with -f/--run-dir (unless fleet=False) and
--json, its handler set; a handler ends with `return done(args, doc, show, ok)`: with --json the one document on
stdout, else `show()` renders it, and the verdict becomes the exit code. Kept light (no library import at load):
`diag_cmds` runs standalone in the skill's scripts.
"""

from __future__ import annotations

import argparse
import time
from contextlib import contextmanager
from typing import Callable

from p2p_ops.cli.output import emit_json, progress, say
from p2p_ops.errors import EXIT_CHECK_FAILED, EXIT_OK, BadInput, CheckFailed, CouldNotRun, P2POpsError

JSON_HELP = "print one JSON document on stdout (nothing else there)"


def add_fleet_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--fleet", default="fleet.yaml", help="fleet spec file (default: ./fleet.yaml)")
    p.add_argument("--run-dir", default=None,
                   help="state folder (default: p2p-run/<fleet name> next to the fleet file)")


def verb(sub: argparse._SubParsersAction, name: str, handler: Callable, *, fleet: bool = True,
         json: str = JSON_HELP, **kwargs) -> argparse.ArgumentParser:
    p = sub.add_parser(name, **kwargs)
    if fleet:
        add_fleet_args(p)
    p.add_argument("--json", action="store_true", help=json)
    p.set_defaults(handler=handler)
    return p


def add_port_offset_arg(p: argparse.ArgumentParser, prefix: str = "", ports: str = "the fleet's ports") -> None:
    p.add_argument("--port-offset", type=int, default=None, metavar="K",
                   help=f"{prefix}{ports} are the default plan + K, as `p2pctl init --port-offset K` writes "
                        "(default: the first offset 0, 1000, 2000, ... where every port is free)")


def context(args: argparse.Namespace):
    """The fleet context of -f/--run-dir; use it as `with context(args) as ctx:` so its connectors close."""
    from p2p_ops.lifecycle.context import FleetContext

    return FleetContext.load(args.fleet, args.run_dir)


@contextmanager
def running_context(args: argparse.Namespace):
    """The fleet context of a verb that needs a running fleet: it says so first (exit 2), naming `p2pctl up`."""
    from p2p_ops.lifecycle.status import require_ready

    with context(args) as ctx:
        with refusal_with_cause(ctx):
            require_ready(ctx)
        yield ctx


@contextmanager
def refusal_with_cause(ctx):
    """A refusal of a fleet that is not ready, with the judge's cause for the instances it names: the readiness
    check says *what* is wrong (an engine degraded), the one judge *why* (its server's chunk size differs); the
    refusal carries the cause's verdict (--json: "cause")."""
    try:
        yield
    except (CouldNotRun, CheckFailed) as err:
        from p2p_ops.diagnose.judge import judge

        # Each named instance and its node: a finding about the node (it cannot reach a peer's advertised URL)
        # says why its instance misses that peer.
        about = [x for n, i in ctx.fleet.instances() if i.id in str(err) for x in (i.id, n.name)]
        try:
            found = judge(ctx) if about else None
        except P2POpsError:
            found = None    # the judge could not read the fleet: the refusal stands as it is
        if found is None or found.top(about) is None:
            raise
        kind = CheckFailed if isinstance(err, CheckFailed) else CouldNotRun
        raise kind(f"{err}\nlikely cause: {found.said(about)}", cause=found.cause(about)) from err


def done(args: argparse.Namespace, doc, show: Callable[[], object] | list[str], code: int | bool = EXIT_OK) -> int:
    """The end of a verb: with --json `doc` alone on stdout, else `show()` or, given lines, `say(*show)`. `code`
    is an exit code, or a verdict (True: 0, False: 1)."""
    if args.json:
        emit_json(doc)
    elif callable(show):
        show()
    else:
        say(*show)
    if isinstance(code, bool):
        return EXIT_OK if code else EXIT_CHECK_FAILED
    return code


def verdict(ok: bool, why: str = "") -> str:
    """PASS, or FAIL and where to look (rich markup)."""
    return "[bold green]PASS[/bold green]" if ok else f"[bold red]FAIL[/bold red]{'  (' + why + ')' if why else ''}"


def progress_unless_json(args: argparse.Namespace) -> Callable[[str], None]:
    return (lambda _: None) if args.json else progress


def seed(args: argparse.Namespace) -> int:
    return args.seed if args.seed is not None else int(time.time()) % 10**6


def names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def ints(text: str, flag: str, fix: str) -> list[int]:
    """A comma list of integers; anything else is bad input naming the flag and `fix` (e.g. "give ... e.g.")."""
    try:
        return [int(x) for x in names(text)]
    except ValueError:
        raise BadInput(f"{flag} {text!r}: {fix}") from None


def repeats(value: int | None, default: int) -> int:
    """--repeats as given, else `default`; below 1 is bad input (nothing would be measured)."""
    if value is not None and value < 1:
        raise BadInput(f"--repeats {value}: give 1 or more (3 shows a median with its spread)")
    return default if value is None else value


def given(args: argparse.Namespace, fields: dict[str, str]) -> dict:
    """{field: value} of the options (dest -> field name) given on the command line (not None)."""
    return {field: getattr(args, dest) for dest, field in fields.items() if getattr(args, dest) is not None}
