"""No verb hangs on a hung fleet (issue 41 item 3): each component frozen in turn, every verb that reads the fleet
timed against it.

On a 4-node local fleet, one component at a time is stopped with SIGSTOP (its whole process group, found by its
pidfile: alive, its ports open, answering nothing, as a deadlocked server is, LMCache #4676): node-a's server,
the coordinator, node-b's engine, and the router where the fleet has one (`--router`, needs `make setup-router`).
Then `status`, `wait`, `doctor`, `explain`, `diagnose`, `bundle` and `test basic` run through the CLI, each with a
240 s limit; the table gives each verb's time, exit code, the cause id its --json names (where it names one) and
whether its output names the frozen component. The component gets SIGCONT and is restarted from fleet.yaml
before the next one. Timings are printed, never asserted.

    python -m bench.freeze [--nodes 4] [--router] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import yaml

from bench.diagnosis import VERB_TIMEOUT_S, Bench, Case, answer, log, signal_unit
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.free_ports import choose
from p2p_ops.spec.starter import local_fleet

REPO = Path(__file__).resolve().parents[1]
# (role, node, what the verbs should name): the unit frozen, and the word that names it in their output.
COMPONENTS = [("server", "node-a", "node-a-0"), ("coordinator", None, "coordinator"), ("engine", "node-b", "node-b-0")]
ROUTER = ("router", None, "router")


@dataclass
class Row:
    frozen: str
    verb: str
    seconds: float
    exit_code: int
    cause: str
    names_it: bool


def _argv(b: Bench, verb: str) -> list[str]:
    return {"status": ["status", "-f", b.f], "wait": ["wait", "-f", b.f, "--timeout", "20"],
            "doctor": ["doctor", "-f", b.f],
            "explain": ["explain", "-f", b.f, "--prompt-file", b.prompt_file, "--node", "node-b"],
            "diagnose": ["diagnose", "zero cached tokens", "-f", b.f],
            "bundle": ["bundle", "-f", b.f, "-o", str(b.tmp / "bundle.tar.gz"), "--force"],
            "basic": ["test", "basic", "-f", b.f, "--a", "node-a-0", "--b", "node-b-0", "--chunks", "4",
                      "--max-tokens", "4"]}[verb] + ["--json"]


VERBS = ("status", "wait", "doctor", "explain", "diagnose", "bundle", "basic")
CASE = Case("frozen", "a component frozen", (), {}, lambda b: None, explain_node="node-b")


def _cause(verb: str, code: int, out: str) -> str:
    if verb in ("status", "bundle"):
        return "-"
    try:
        return answer(verb, CASE, code, json.loads(out))[0]
    except (ValueError, KeyError, TypeError):
        return "?"


def freeze_one(b: Bench, role: str, node: Optional[str], name: str) -> list[Row]:
    rows = []
    log(f"freezing {name}'s {role}")
    signal_unit(b, role, node, signal.SIGSTOP)
    try:
        for verb in VERBS:
            t = time.monotonic()
            code, out, err = b.cli(*_argv(b, verb), timeout=VERB_TIMEOUT_S)
            row = Row(f"{name} {role}" if node else role, verb, round(time.monotonic() - t, 1), code,
                      _cause(verb, code, out), name in out + err)
            log(f"  {verb:9} {row.seconds:6.1f}s exit {code:3}  cause {row.cause:20} names it: {row.names_it}")
            rows.append(row)
    finally:
        signal_unit(b, role, node, signal.SIGCONT)   # a stopped process cannot honour the SIGINT of `down`
        launch.down(b.ctx, only=node, roles=(role,))
        launch.up(b.ctx, only=node, roles=(role,), start_timeout=120)
        launch.wait(b.ctx, timeout=180)
    return rows


def fleet_file(tmp: Path, nodes: int, router: bool) -> Path:
    data = local_fleet(nodes, name="freeze", base=choose(nodes).base)
    if router:
        data["router"] = {"enabled": True}
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def table(rows: list[Row]) -> str:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="verbs with one component frozen (SIGSTOP)")
    frozen = list(dict.fromkeys(r.frozen for r in rows))
    t.add_column("verb")
    for f in frozen:
        t.add_column(f"{f} frozen: s / exit / cause / names it")
    for verb in VERBS:
        cells = []
        for f in frozen:
            r = next((r for r in rows if r.frozen == f and r.verb == verb), None)
            cells.append("-" if r is None else f"{r.seconds:.1f} / {r.exit_code} / {r.cause} / "
                                               f"{'yes' if r.names_it else 'no'}")
        t.add_row(verb, *cells)
    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(t)
    return console.export_text(styles=False)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.freeze", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--router", action="store_true", help="also freeze the router (needs make setup-router)")
    ap.add_argument("--out", default="", help="results folder (default bench/results/freeze-<stamp>/)")
    args = ap.parse_args(argv)
    out = Path(args.out or REPO / "bench" / "results" / f"freeze-{time.strftime('%Y%m%d-%H%M%S')}")
    tmp = Path(tempfile.mkdtemp(prefix="freeze-"))
    rows: list[Row] = []
    with FleetContext.load(fleet_file(tmp, args.nodes, args.router)) as ctx, launch.running(ctx, timeout=180):
        b = Bench(ctx, tmp)
        b.compute()
        for role, node, name in COMPONENTS + ([ROUTER] if args.router else []):
            rows += freeze_one(b, role, node, name)
    out.mkdir(parents=True, exist_ok=True)
    text = table(rows)
    (out / "table.txt").write_text(text)
    (out / "results.json").write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    print(text)
    print(f"wrote {out}/table.txt and results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
