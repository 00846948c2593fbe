"""`p2pctl baseline save|list` and `p2pctl compare`: keep a fleet's figures under a name, flag what moved since."""

from __future__ import annotations

import argparse
from pathlib import Path

from p2p_ops import files
from p2p_ops.cli.common import context, done, verb
from p2p_ops.cli.output import say, show, table
from p2p_ops.errors import EXIT_CHECK_FAILED, EXIT_OK, BadInput, CouldNotRun
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
             "never a failure. Settings that differ from the baseline's are the first finding, and every figure "
             "is still compared (marked \"settings differ\"). Exit 1 on a regression, a figure the run could not "
             "measure, or (runs chosen by default) a newer run that did not finish or a fleet running but not "
             "ready now; exit 2 when nothing can be compared (another fleet, every figure measured another way), "
             "naming what differs.")
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
        settings = bl.setting_changes(base, runs)
        rows = bl.compare(base, runs)
        versions = bl.installed_versions(ctx)
        blockers = [] if args.run else _blockers(ctx, runs)
    regressed = [r["figure"] for r in rows if r["verdict"] in ("REGRESSED", "FAILED")]
    changed = {k: (v, versions.get(k)) for k, v in base["versions"].items() if versions.get(k) != v}
    doc = {"baseline": base["name"], "runs": [str(r) for r in runs], "tolerance": bl.TOLERANCE,
           "settings_changed": settings, "blockers": blockers, "regressed": regressed,
           "versions": {"baseline": base["versions"], "now": versions}, "figures": rows}
    code = EXIT_CHECK_FAILED if regressed or blockers else EXIT_OK
    return done(args, doc, lambda: _show(doc, rows, changed), code)


def _blockers(ctx, runs: list[Path]) -> list[str]:
    """What the newest finished runs cannot speak for: a newer run that did not finish, or a fleet that runs but is
    not ready now (a fleet that is down entirely leaves the runs' figures as the last word)."""
    from p2p_ops.endpoints import lmcache_api
    from p2p_ops.lifecycle.status import require_ready

    out = [f"a newer run did not finish: {x}" for x in bl.later_unfinished(ctx.layout.tests, max(r.name for r in runs))]
    fleet = ctx.fleet
    if lmcache_api.coordinator_healthy(fleet.coordinator_url) or any(
            lmcache_api.server_status(ctx.server_url(n, i)).reachable for n, i in fleet.instances()):
        try:
            require_ready(ctx)
        except (BadInput, CouldNotRun) as exc:
            out.append(f"the fleet is not ready now: {exc}")
    return out


def _num(v) -> str:
    """Three significant digits, never an exponent (a 1,670 ms TTFT, not 1.67e+03)."""
    return fmt(v, "{:,.0f}" if v is not None and abs(v) >= 100 else "{:.3g}")


def _show(doc: dict, rows: list[dict], changed: dict) -> None:
    if doc["settings_changed"]:
        say(f"settings changed since baseline {doc['baseline']} (every figure below is marked so):",
            *(f"  {c}" for c in doc["settings_changed"]), markup=False)
    t = table(f"compare with baseline {doc['baseline']} ({', '.join(Path(r).name for r in doc['runs'])})",
              "figure", "baseline (spread)", "now", "change", "verdict")
    colour = {"REGRESSED": "red", "FAILED": "red", "improved": "green"}
    for r in rows:
        spread = f"{_num(r['baseline'])} ({_num(r['spread'][0])}-{_num(r['spread'][1])})"
        v = r["verdict"]
        v = f"[{colour[v]}]{v}[/{colour[v]}]" if v in colour else v
        t.add_row(r["figure"], f"{spread} {r['unit']}", _num(r["now"]), fmt(r["change"], "{:+.0%}"),
                  v + (" (settings differ)" if doc["settings_changed"] and r["now"] is not None else ""))
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
        markup=False)
    say(*(f"NOT OK: {b}" for b in doc["blockers"]), markup=False)
    say(f"[bold red]REGRESSED[/bold red]: {n} of {len(rows)} figures regressed or failed" if n else
        "[bold red]NOT OK[/bold red]: the runs compared are not the fleet's state now (above)" if doc["blockers"] else
        f"[bold green]OK[/bold green]: no figure regressed beyond its spread and {doc['tolerance']:.0%} "
        f"({bl.THIN_TOLERANCE:.0%} on the median of a figure of fewer than {bl.THIN_SAMPLES} samples)")
