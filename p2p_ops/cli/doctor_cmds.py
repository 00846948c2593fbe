"""Why does this fleet not share: `p2pctl doctor`, `p2pctl diagnose SYMPTOM`, `p2pctl bundle`, `p2pctl triage`."""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from pathlib import Path

from p2p_ops.cli.common import add_fleet_args, context, done, progress_unless_json, verb
from p2p_ops.cli.output import plain
from p2p_ops.diagnose.tree import evidence, model, render, walk
from p2p_ops.errors import BadInput


def cmd_doctor(args: argparse.Namespace) -> int:
    from p2p_ops.diagnose import doctor
    from p2p_ops.diagnose.judge.fleet import document

    with context(args) as ctx:
        facts, report = doctor.run(ctx, reach=not args.no_reach)
    doc = document(facts, report) | ({"gathered": facts.to_dict()} if args.facts else {})
    return done(args, doc, lambda: print(plain("\n".join(doctor.summary_lines(report)))), report.exit_code)


def cmd_diagnose(args: argparse.Namespace) -> int:
    data = model.load_tree()
    if args.markdown:
        sys.stdout.write(render.render_markdown(data))
        return 0
    if args.list or not args.symptom:
        return done(args, [{"id": s.id, "title": s.title, "aliases": list(s.aliases), "looks_like": s.looks_like}
                           for s in data.symptoms],
                    lambda: print("\n".join(["symptoms (p2pctl diagnose \"SYMPTOM\"):",
                                             *(f"  {s.title:<40} {s.looks_like[:110]}" for s in data.symptoms)])),
                    0 if args.list else 2)
    symptom = model.find_symptom(data, " ".join(args.symptom))
    logs = tuple(Path(p) for p in args.log or [])
    for p in logs:
        if not p.is_file():
            raise BadInput(f"--log {p}: no such file")
    if not Path(args.fleet).is_file() and not logs:
        raise BadInput(f"{args.fleet}: no fleet file; pass -f fleet.yaml (or --log FILE to check a log alone)")
    # Without a fleet file the logs alone are checked (ctx None).
    with context(args) if Path(args.fleet).is_file() else nullcontext() as ctx:
        result = walk.diagnose(data, symptom, evidence.Evidence(ctx, data, logs, reach=not args.no_reach))
    return done(args, result.to_dict(), lambda: print(plain("\n".join(render.render_text(result)))), result.exit_code)


def cmd_bundle(args: argparse.Namespace) -> int:
    from p2p_ops.diagnose import bundle

    with context(args) as ctx:
        out = Path(args.output) if args.output else None
        if out is not None and out.is_dir():
            raise BadInput(f"-o {out} is a folder; name the file, e.g. -o {out / 'p2p-bundle.tar.gz'}")
        if out is not None and (out.exists() or out.is_symlink()) and not args.force:
            raise BadInput(f"-o {out} exists; name a new file or add --force to replace it")
        manifest = bundle.collect(ctx, out, with_doctor=not args.no_doctor, force=args.force,
                                  progress=progress_unless_json(args))
    return done(args, manifest, lambda: print("\n".join(bundle.summary_lines(manifest))))


def cmd_triage(args: argparse.Namespace) -> int:
    from p2p_ops.diagnose.triage import triage

    t = triage(Path(args.bundle))
    return done(args, t.to_dict(), lambda: print(plain("\n".join(t.lines()))), 1 if t.causes else 0)


NO_REACH = "skip the TCP connects between nodes"


def register(sub: argparse._SubParsersAction) -> None:
    p = verb(sub, "doctor", cmd_doctor, json="machine-readable report",
             help="check what peers must agree on, coordinator, reachability, ports, memlock",
             description="Fleet doctor: reads every env.sh and, on a running fleet, each server's /status, "
             "/config and process environment; checks PYTHONHASHSEED, chunk size, hash algorithm, L1 "
             "alignment, model, world size, LMCache/NIXL versions and transfer engine across peers, the "
             "coordinator and its /instances, TCP reachability of every advertised P2P URL and mq port from "
             "every node, ports (free before launch, listening after), memlock and UCX_TLS. Works on a "
             "stopped fleet (env.sh agreement, ports free). Each finding names the instances, the values "
             "and the fix; healthy output ends with \"result: healthy\". Exit 0 healthy, 1 findings, 2 "
             "could not check.")
    p.add_argument("--no-reach", action="store_true", help=NO_REACH)
    p.add_argument("--facts", action="store_true", help="with --json: include everything gathered")

    p = verb(sub, "diagnose", cmd_diagnose, fleet=False,
             json="machine-readable result; \"likely_cause\" names the step, its subjects and the cause (id, fix)",
             help="walk the decision tree of a symptom, running its checks",
             description="Walk a symptom's decision tree: each step runs its automated checks (doctor "
             "findings, log signatures, metrics, /status) and prints what it found, the cause and the fix; "
             "the last line names the likely cause, or says that no automated check found one. --list "
             "shows the symptoms; close wordings match too (e.g. \"no hits\", \"unregistered\", \"hang\"). "
             "Exit 0 no problem found, 1 a step found the problem, 2 bad input.")
    p.add_argument("symptom", nargs="*", help="e.g. \"peers not registered\", \"zero cached tokens\", l1_oom")
    add_fleet_args(p)
    p.add_argument("--list", action="store_true", help="list the symptoms")
    p.add_argument("--markdown", action="store_true", help="print the whole tree as Markdown (the skill reference)")
    p.add_argument("--log", action="append", metavar="FILE",
                   help="also grep this log for the signatures (works without a fleet file)")
    p.add_argument("--no-reach", action="store_true", help=NO_REACH)

    p = verb(sub, "bundle", cmd_bundle, json="print the manifest instead of the summary",
             help="one redacted tar.gz with env, logs, status, metrics, facts and doctor output",
             description="Collect env.sh files, logs, /status, /config, /instances, metrics, package "
             "versions, host facts and the doctor's output into one tar.gz with manifest.json. Secrets are "
             "redacted in memory before anything is written (tokens, API keys, passwords, private keys, "
             "cloud credentials); manifest.json lists every redaction (kind, file, line, variable name), "
             "never the value. Prints the path, size, how many secrets were redacted and what could not be "
             "collected. Works on a stopped fleet: what cannot be read is listed under \"unreachable\".")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="bundle path, mode 0600 (default: p2p-run/<fleet>/bundles/p2p-bundle-<fleet>-<UTC>.tar.gz)")
    p.add_argument("--no-doctor", action="store_true", help="do not run the doctor into the bundle")
    p.add_argument("--force", action="store_true", help="replace an existing -o file")

    p = verb(sub, "triage", cmd_triage, fleet=False, json="machine-readable: causes (ids), likely_cause, logs, lacks",
             help="judge a debug bundle offline: the doctor's causes from its captured facts, no fleet needed",
             description="Read a bundle `p2pctl bundle` wrote (never extracted) and run the doctor's judge on the "
             "facts it captured, with no fleet and no network: the causes in the judge's order with the same ids the "
             "live doctor gave (compared with what it recorded), the log lines in it that name a cause, explain's "
             "verdict on the last request that missed, and what the bundle lacks to decide more. Exit 0 no cause, "
             "1 causes found, 2 not a bundle.")
    p.add_argument("bundle", help="the .tar.gz `p2pctl bundle` wrote")
