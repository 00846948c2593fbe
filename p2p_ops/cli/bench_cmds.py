"""`p2pctl bench placement` and `p2pctl calibrate`: the router-side benchmarks (they start their own fleets)."""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from p2p_ops.bench.placement import PlacementOptions
from p2p_ops.cli.fleet_cmds import _progress, add_fleet_args, context
from p2p_ops.errors import EXIT_CHECK_FAILED, EXIT_OK, BadInput

console = Console()


def _out_dir(args: argparse.Namespace, kind: str) -> Path:
    if args.out:
        return Path(args.out)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return Path("p2p-run") / "bench" / f"{stamp}-{kind}"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks across fleet variants (placement x P2P)")
    bsub = p.add_subparsers(dest="bench_kind", metavar="KIND")
    pl = bsub.add_parser(
        "placement", help="document QA through vllm-router under each policy, P2P on and off",
        description="Starts a local fleet with a router (P2P on, then the same fleet whose servers stay out of "
                    "the mesh), runs contended document QA under each router policy and reports served req/s, "
                    "TTFT p50/p90, tokens from the local cache / a peer / recomputed, and the P2P margin per "
                    "policy. Needs `make setup-router`.",
        epilog="exit codes: 0 every arm ran, 1 an arm failed or had failed requests, 2 bad input")
    pl.add_argument("--quick", action="store_true", help="8 sessions x 3 questions, 2K-token documents (minutes)")
    pl.add_argument("--policies", default=None, help="comma list (default: round_robin,power_of_two,cache_aware,"
                                                     "kv_aware,consistent_hash)")
    pl.add_argument("--nodes", type=int, default=2, help="nodes of the local fleet (default 2)")
    pl.add_argument("--sessions", type=int, default=None, help="document-QA sessions per arm")
    pl.add_argument("--questions", type=int, default=None, help="questions per session")
    pl.add_argument("--doc-tokens", type=int, default=None, help="tokens per private document")
    pl.add_argument("--inflight", type=int, default=None, help="sessions in flight at once")
    pl.add_argument("--no-gpu-timing", action="store_true", help="engines run at CPU speed (no GPU cost profile)")
    pl.add_argument("--p2p", choices=["both", "on", "off"], default="both", help="which P2P arms (default both)")
    pl.add_argument("--max-seconds", type=float, default=None, help="hard bound on the whole run")
    pl.add_argument("--out", default=None, help="run folder (default p2p-run/bench/<UTC time>-placement)")
    pl.set_defaults(handler=cmd_placement)

    c = sub.add_parser(
        "calibrate", help="pull-vs-recompute crossover: the shortest prefix worth pulling",
        description="On a running fleet: per prefix length, fresh prompts computed on A then served on B from A "
                    "(pulled) and cold on B (recomputed), medians over repetitions; prints the shortest length "
                    "where the pull wins and the router cache threshold to match.",
        epilog="exit codes: 0 measured, 1 no length could be measured, 2 bad input")
    add_fleet_args(c)
    c.add_argument("--quick", action="store_true", help="lengths 256..4096, 2 repetitions")
    c.add_argument("--lengths", default=None, help="comma list of prefix lengths in tokens")
    c.add_argument("--repeats", type=int, default=None, help="repetitions per length (default 3)")
    c.add_argument("--doc-tokens", type=int, default=None,
                   help="typical request length, for the cache threshold advice (default: longest length)")
    c.add_argument("--seed", type=int, default=None)
    c.add_argument("--out", default=None, help="run folder (default <run>/tests/<UTC time>-calibrate)")
    c.set_defaults(handler=cmd_calibrate)


def placement_options(args: argparse.Namespace) -> PlacementOptions:
    opts = PlacementOptions.quick() if args.quick else PlacementOptions()
    if args.policies:
        opts.policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    opts.nodes = args.nodes
    opts.gpu_timing = not args.no_gpu_timing
    opts.p2p_arms = {"both": [True, False], "on": [True], "off": [False]}[args.p2p]
    if args.max_seconds:
        opts.max_seconds = args.max_seconds
    wl = opts.workload
    for name in ("sessions", "questions", "doc_tokens", "inflight"):
        if getattr(args, name) is not None:
            wl = replace(wl, **{name: getattr(args, name)})
    opts.workload = wl
    return opts


def cmd_placement(args: argparse.Namespace) -> int:
    from p2p_ops.bench import placement

    opts = placement_options(args)
    opts.validate()
    out = _out_dir(args, "placement")
    results = placement.run(out, opts, _progress)
    console.print((out / "summary.md").read_text(), soft_wrap=True, markup=False)
    console.print(f"run folder: {out}", soft_wrap=True)
    bad = [r for r in results if r.error or r.failed]
    return EXIT_CHECK_FAILED if bad or not results else EXIT_OK


def cmd_calibrate(args: argparse.Namespace) -> int:
    from p2p_ops.bench import calibrate
    from p2p_ops.harness.rundir import new_run_dir

    if args.lengths:
        try:
            lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
        except ValueError:
            raise BadInput(f"--lengths {args.lengths!r}: give token counts, e.g. 512,1024,2048") from None
    else:
        lengths = list(calibrate.QUICK_LENGTHS if args.quick else calibrate.LENGTHS)
    repeats = args.repeats or (2 if args.quick else 3)
    with context(args) as ctx:
        out = Path(args.out) if args.out else new_run_dir(ctx.layout, "calibrate")
        result = calibrate.run(ctx, out, lengths, repeats, args.seed, args.doc_tokens, _progress)
    console.print((out / "summary.md").read_text(), soft_wrap=True, markup=False)
    console.print(f"run folder: {out}", soft_wrap=True)
    return EXIT_OK if result["rows"] else EXIT_CHECK_FAILED


