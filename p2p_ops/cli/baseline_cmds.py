"""`p2pctl baseline save|list` and `p2pctl compare`: keep a fleet's figures under a name, flag what moved since."""

from __future__ import annotations

import argparse
from pathlib import Path

from p2p_ops import files
from p2p_ops.cli.common import context, done, verb
from p2p_ops.cli.output import say, show, table
from p2p_ops.errors import EXIT_CHECK_FAILED, EXIT_OK, BadInput
from p2p_ops.observe import baseline as bl
from p2p_ops.observe.stats import fmt

RUN_HELP = ("a run folder (or its name under p2p-run/<fleet>/tests/); repeat for repeats, which widen the spread "
            "(default: the newest finished run of each kind: basic, matrix, stress, transfer, soak)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("baseline", help="keep a fleet's figures under a name (save | list), for `p2pctl compare`")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = verb(actions, "save", cmd_save, help="save the figures of runs, with versions and settings",
             description="Proof TTFTs, matrix pull times, stress TTFT p50/p99 per stage, transfer GB/s per size "
             "and soak slopes, each with its spread, the LMCache/vLLM/NIXL/UCX versions installed and the settings "
             "the runs were made with, in p2p-run/<fleet>/baselines/NAME.json. Save one before an upgrade or a "
             "settings change; `p2pctl compare` after it.")
    s.add_argument("name", help="e.g. before, lmcache-0.5.6")
    s.add_argument("--run", action="append", default=[], metavar="RUN", help=RUN_HELP)
    verb(actions, "list", cmd_list, help="the fleet's baselines")
    c = verb(sub, "compare", cmd_compare, help="flag each figure that moved beyond its baseline's spread",
             description=f"Each figure of the baseline against the same figure of the runs: REGRESSED when it lies "
             f"beyond the baseline's spread in the worse direction and moved more than {bl.TOLERANCE:.0%} (and "
             f"more than its floor, e.g. {bl.MS_FLOOR:g} ms); a figure of fewer than {bl.THIN_SAMPLES} samples (a "
             f"pull, a proof TTFT) when its median moved more than {bl.THIN_TOLERANCE:.0%}. Improvements are shown, "
             "never a failure. Exit 1 on a regression or a figure the run could not measure; "
             "exit 2 when the runs cannot be compared (another fleet, other settings, a figure "
             "measured another way), naming what differs.")
    c.add_argument("baseline", nargs="?", default=None, help="baseline name (default: the newest saved)")
    c.add_argument("run", nargs="*", default=[], help=RUN_HELP.replace("of each kind", "of each kind the baseline "
                                                                        "holds, newer than its runs"))


def _given(tests: Path, names: list[str]) -> list[Path]:
    out = []
    for name in names:
        path = Path(name) if Path(name).is_dir() else tests / name
        if not path.is_dir():
            raise BadInput(f"run {name!r}: no such folder here or under {tests}; `ls {tests}` lists the runs")
        if why := bl.unfinished(path):
            raise BadInput(f"run {name!r} did not finish ({why}); give a finished run")
        out.append(path)
    return out


def cmd_save(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        name = bl.check_name(args.name)
        runs = _given(ctx.layout.tests, args.run) or bl.latest_runs(ctx.layout.tests)
        if not runs:
            raise BadInput(f"no finished run in {ctx.layout.tests}; run `p2pctl test matrix` (or stress, basic, "
                           "soak, bench transfer) first")
        doc = bl.build(name, ctx.fleet.name, runs, bl.installed_versions(ctx))
        path = bl.path_of(ctx.layout, name)
        files.write_json(files.private_dir(path.parent) / path.name, doc)
    return done(args, {**doc, "path": str(path)}, [
        f"baseline {name}: {len(doc['figures'])} figures from {', '.join(Path(r).name for r in runs)}",
        "versions: " + _versions(doc["versions"]), f"saved: {path}"])


def cmd_list(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        docs = [bl.load(ctx.layout, n) for n in bl.saved(ctx.layout)]
    t = table(f"baselines of fleet {ctx.fleet.name}", "name", "figures", "runs", "versions")
    for d in docs:
        t.add_row(d["name"], str(len(d["figures"])), ", ".join(Path(r).name for r in d["runs"]),
                  _versions(d["versions"]))
    return done(args, [{k: d[k] for k in ("name", "runs", "versions")} for d in docs],
                (lambda: show(t)) if docs else ["no baselines yet: `p2pctl baseline save NAME` after a test run"])


def _versions(v: dict) -> str:
    return v["error"] if "error" in v else ", ".join(f"{k} {x or '-'}" for k, x in v.items())


def cmd_compare(args: argparse.Namespace) -> int:
    with context(args) as ctx:
        names = bl.saved(ctx.layout)
        if args.baseline is None and not names:
            raise BadInput("no baseline saved for this fleet; `p2pctl baseline save NAME` after a test run")
        base = bl.load(ctx.layout, args.baseline or names[-1])
        kinds = set(base["kinds"])
        runs = _given(ctx.layout.tests, args.run) or bl.latest_runs(ctx.layout.tests, kinds,
                                                                  max(Path(r).name for r in base["runs"]))
        if not runs:
            raise BadInput(f"no {'/'.join(sorted(kinds))} run finished after baseline {base['name']!r}; run the "
                           "test again (e.g. `p2pctl test matrix`), then compare")
        rows = bl.compare(base, runs)
        versions = bl.installed_versions(ctx)
    regressed = [r["figure"] for r in rows if r["verdict"] in ("REGRESSED", "FAILED")]
    changed = {k: (v, versions.get(k)) for k, v in base["versions"].items() if versions.get(k) != v}
    doc = {"baseline": base["name"], "runs": [str(r) for r in runs], "tolerance": bl.TOLERANCE,
           "regressed": regressed, "versions": {"baseline": base["versions"], "now": versions}, "figures": rows}
    code = EXIT_CHECK_FAILED if regressed else EXIT_OK
    return done(args, doc, lambda: _show(doc, rows, changed), code)


def _num(v) -> str:
    """Three significant digits, never an exponent (a 1,670 ms TTFT, not 1.67e+03)."""
    return fmt(v, "{:,.0f}" if v is not None and abs(v) >= 100 else "{:.3g}")


def _show(doc: dict, rows: list[dict], changed: dict) -> None:
    t = table(f"compare with baseline {doc['baseline']} ({', '.join(Path(r).name for r in doc['runs'])})",
              "figure", "baseline (spread)", "now", "change", "verdict")
    colour = {"REGRESSED": "red", "FAILED": "red", "improved": "green"}
    for r in rows:
        spread = f"{_num(r['baseline'])} ({_num(r['spread'][0])}-{_num(r['spread'][1])})"
        v = r["verdict"]
        t.add_row(r["figure"], f"{spread} {r['unit']}", _num(r["now"]), fmt(r["change"], "{:+.0%}"),
                  f"[{colour[v]}]{v}[/{colour[v]}]" if v in colour else v)
    show(t)
    say(*(f"{r['figure']}: {r['why']}" for r in rows if r.get("why")), markup=False)
    if thin := [r["figure"] for r in rows if r["verdict"] == "REGRESSED" and r["samples"] < bl.THIN_SAMPLES]:
        say(f"note: {', '.join(thin)}: fewer than {bl.THIN_SAMPLES} samples; one run's pull or TTFT can vary 2-3x on "
            f"a busy box: rerun and compare the runs together (p2pctl compare {doc['baseline']} RUN RUN RUN)",
            markup=False)
    moved = ", ".join(f"{k} {a or '-'} -> {b or '-'}" for k, (a, b) in changed.items())
    unread = next((v["error"] for v in doc["versions"].values() if "error" in v), "")
    n = len(doc["regressed"])
    say(f"versions not compared: {unread}" if unread else f"versions since the baseline: {moved or 'unchanged'}",
        f"[bold red]REGRESSED[/bold red]: {n} of {len(rows)} figures regressed or failed" if n else
        f"[bold green]OK[/bold green]: no figure regressed beyond its spread and {doc['tolerance']:.0%} "
        f"({bl.THIN_TOLERANCE:.0%} on the median of a figure of fewer than {bl.THIN_SAMPLES} samples)")
