"""`p2pctl test ...`: run tests against a running fleet and leave their evidence in the run folder."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, Optional

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.markup import escape

from p2p_ops.cli import output
from p2p_ops.cli.common import done, given, ints, names, running_context, seed, verb, verdict
from p2p_ops.cli.output import console, heading, outside, plain, progress, say, show, table
from p2p_ops.diagnose.explain.prompt import from_file
from p2p_ops.errors import BadInput
from p2p_ops.harness import inference_perf
from p2p_ops.harness.basic import BasicResult, run_basic
from p2p_ops.harness.lmcache_bench import run_lmcache_bench
from p2p_ops.harness.matrix import MatrixResult, cell_text, run_matrix
from p2p_ops.harness.rundir import RunFolder, run_folder
from p2p_ops.harness.stress import StressOptions, run_stress
from p2p_ops.harness.stress_inference_perf import InferencePerfOptions, run_inference_perf_stress
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe.report import Report, build_report
from p2p_ops.observe.stats import fmt

LMCACHE_BENCH = "also run the real `lmcache bench engine --workload long-doc-qa`"


def _add_run_args(p: argparse.ArgumentParser) -> None:
    """What a loaded run (stress, all, longdoc) shares: where requests go, its bound, label and seed."""
    p.add_argument("--policy", choices=["other", "round-robin"], default="other",
                   help="other: send each prefix to another node than the one that warmed it")
    p.add_argument("--max-seconds", type=float, default=900.0, help="hard bound on the whole run")
    p.add_argument("--tag", default="", help="label for this run (folder name and report)")
    p.add_argument("--seed", type=int, default=None, help="prompt seed (default: new every run)")


def register(sub: argparse._SubParsersAction) -> None:
    p = verb(sub, "test", None, fleet=False,
             help="test a running fleet (basic: the cross-node proof; matrix: every pair)")
    tsub = p.add_subparsers(dest="test_kind", metavar="KIND")
    p.set_defaults(handler=lambda args: cmd_kinds(args, tsub))
    b = verb(tsub, "basic", cmd_basic, help="cold on A, served from A's cache on B, identical outputs")
    b.add_argument("--a", default=None, help="instance that computes the prompt (default: first instance)")
    b.add_argument("--b", default=None, help="instance that must get it from A (default: one on another node)")
    b.add_argument("--chunks", type=int, default=8, help="prompt length in full chunks (default 8)")
    b.add_argument("--max-tokens", type=int, default=24, help="tokens to generate (default 24)")
    b.add_argument("--seed", type=int, default=None, help="prompt seed (default: new every run)")
    b.add_argument("--prompt-file", metavar="FILE", default=None,
                   help="send this prompt instead of a fresh one, e.g. a run's saved prompt on other nodes "
                        "(<run>/prompts.jsonl holds them; `p2pctl explain --run` reads them)")

    m = verb(tsub, "matrix", cmd_matrix, help="every pair proven: each node computes a fresh prefix, every other "
             "pulls it", description="N x N table (pass/fail, cached tokens, pull ms, MB/s), heatmap.png and "
             "result.json in the run folder; a failing pair names its likely cause (advertised URL, peer list, "
             "reachability, settings). Bounded by --max-seconds: pairs not reached in time are reported as "
             "skipped and fail the run.")
    m.add_argument("--chunks", type=int, default=4, help="prefix length in full chunks (default 4)")
    m.add_argument("--max-tokens", type=int, default=8, help="tokens to generate per request (default 8)")
    m.add_argument("--max-seconds", type=float, default=None,
                   help="bound on the whole run (default 60 + 8 s per pair: 508 s at 8 nodes)")
    m.add_argument("--seed", type=int, default=None, help="prompt seed (default: new every run)")

    for kind, handler, helptext in (("stress", cmd_stress, "concurrency ladder, long documents, sustained mixed load"),
                                    ("all", cmd_all, "basic + stress (+ lmcache bench) and the report")):
        s = verb(tsub, kind, handler, help=helptext)
        s.add_argument("--quick", action="store_true", help="small ladder (1,2,4,8), 15 s sustained stage")
        s.add_argument("--ladder", default=None, help="concurrency levels, e.g. 1,2,4,8,16,32")
        s.add_argument("--requests-per-level", type=int, default=0, help="default: 2 x level, at least 4")
        s.add_argument("--stages", default=None, help="comma list of ladder,longdoc,sustained (default: all)")
        s.add_argument("--sustained", type=float, default=None, help="seconds of sustained mixed load")
        s.add_argument("--concurrency", type=int, default=None, help="requests in flight in the sustained stage")
        s.add_argument("--doc-tokens", type=int, default=None, help="prefix length of shared documents")
        s.add_argument("--longdoc-tokens", type=int, default=None, help="length of long documents")
        s.add_argument("--via-router", action="store_true",
                       help="send every request to the fleet's router (router.enabled) instead of an engine")
        _add_run_args(s)
        if kind == "stress":
            s.add_argument("--generator", choices=["ours", "inference-perf"], default="ours",
                           help="ours (default): the ladder, long-document and sustained stages; inference-perf: "
                                "llm-d's P2P workload shapes sent by kubernetes-sigs' inference-perf (`make "
                                "setup-inference-perf`), a warm pass on one node, then a pass on every other node")
            s.add_argument("--shapes", default=None, help="with inference-perf: comma list of "
                           f"{','.join(inference_perf.SHAPES)} (default: all three)")
            s.add_argument("--scale", choices=list(inference_perf.SCALES), default="local",
                           help="with inference-perf: llm-d's sizes (llm-d), or scaled down (local, default; smoke)")
            s.add_argument("--tokenizer", default=None, help="with inference-perf: a local Hugging Face tokenizer "
                           "folder (default: the fleet's model folder, else models/tiny-llama)")
        if kind == "all":
            s.add_argument("--with-lmcache-bench", action="store_true", help=LMCACHE_BENCH)

    ld = verb(tsub, "longdoc", cmd_longdoc, help="long-doc-qa: documents warmed on one node, queried from another")
    ld.add_argument("--document-length", type=int, default=4096, help="tokens per document (default 4096)")
    ld.add_argument("--num-documents", type=int, default=4, help="documents (default 4)")
    ld.add_argument("--queries-per-document", type=int, default=2, help="queries per document (default 2)")
    ld.add_argument("--inflight", type=int, default=2, help="requests in flight (default 2)")
    ld.add_argument("--max-tokens", type=int, default=8, help="tokens generated per query (default 8)")
    ld.add_argument("--with-lmcache-bench", action="store_true", help=f"{LMCACHE_BENCH} and fold it in")
    _add_run_args(ld)

    fa = verb(tsub, "faults", cmd_faults, help="kill a server, the coordinator, an engine; cut a link, slow a "
              "peer, fill L1; all under load, figures per fault")
    fa.add_argument("--quick", action="store_true", help="5 s phases, 4 s outages, 3 documents")
    fa.add_argument("--scenarios", default=None,
                    help="comma list of peer_server_killed,coordinator_restart,engine_killed,link_cut,slow_peer,"
                         "l1_full (default: all this fleet allows; link_cut and slow_peer need SSH nodes with "
                         "their own interface and are listed as skipped otherwise)")

    so = verb(tsub, "soak", cmd_soak, help="steady mixed load for minutes or hours: leak slopes, TTFT per minute, "
              "periodic cross-node proofs; fails on a sustained leak or a failed request")
    so.add_argument("--duration", default=None, help="how long, e.g. 30m, 1h, 90s (default 30m; --quick: 3m)")
    so.add_argument("--quick", action="store_true",
                    help="3 minutes: 45 s warm-up, a sample every 5 s, a proof every minute")
    so.add_argument("--warmup", default=None,
                    help="left out of the slopes, e.g. 5m (default 10m, at most a third of --duration; --quick: 45s)")
    so.add_argument("--sample-every", type=float, default=None, help="seconds between samples (default 10)")
    so.add_argument("--proof-every", type=float, default=None, help="seconds between cross-node proofs (default 300)")
    so.add_argument("--concurrency", type=int, default=None, help="clients in flight (default 2)")
    so.add_argument("--via-router", action="store_true", help="send every request to the fleet's router")
    so.add_argument("--seed", type=int, default=None, help="prompt seed (default: new every run)")

    r = verb(sub, "report", cmd_report, fleet=False, help="(re)build summary.md and plots for a test run folder")
    r.add_argument("run_dir", help="a folder under p2p-run/<fleet>/tests/")


def cmd_kinds(args: argparse.Namespace, tsub: argparse._SubParsersAction) -> int:
    """`p2pctl test` without a kind: the kinds, and exit 2 (nothing was tested)."""
    kinds = {a.dest: a.help for a in tsub._choices_actions}
    lines = ["test kinds (p2pctl test KIND -h for options):", *(f"  {n:<8} {t}" for n, t in kinds.items())]
    return done(args, {"kinds": kinds}, lambda: print("\n".join(lines)), 2)


def cmd_basic(args: argparse.Namespace) -> int:
    with running_context(args) as ctx:
        result = run_basic(ctx, a=args.a, b=args.b, chunks=args.chunks, max_tokens=args.max_tokens,
                           seed=args.seed, progress=progress,
                           prompt_text=None if args.prompt_file is None else from_file(args.prompt_file).text)
    return done(args, result.to_dict(), lambda: print_basic(result), result.passed)


def cmd_matrix(args: argparse.Namespace) -> int:
    with running_context(args) as ctx:
        result = run_matrix(ctx, chunks=args.chunks, max_tokens=args.max_tokens, seed=args.seed,
                            max_seconds=args.max_seconds, progress=progress)
    return done(args, result.to_dict(), lambda: print_matrix(result), result.passed)


def print_matrix(result: MatrixResult) -> None:
    t = table(f"pair matrix ({result.chunks} chunks of {result.chunk_size} tokens"
              + (f", profile {result.profile}" if result.profile else "") + "): rows computed, columns pulled",
              "source \\ target")
    for name in result.instances:
        t.add_column(name, overflow="fold")
    def cell(p) -> str:
        colour = "green" if p and p.ok else "red"
        return f"[{colour}]{cell_text(p.to_dict())}[/{colour}]" if p else "·"

    for s in result.instances:
        t.add_row(s, *(cell(result.pair(s, tgt)) for tgt in result.instances))
    show(t)
    for p in result.pairs:
        if not p.ok and not p.skipped:
            console.print(f"[red]{p.source} -> {p.target}{f' ({p.cause.id})' if p.cause else ''}:[/red] "
                          f"{escape(plain(p.likely_cause or p.error))}", soft_wrap=True)
    c = result.counts
    console.print(f"{verdict(result.passed)} — {c['passed']}/{c['pairs']} pairs in {result.seconds:.0f} s; heatmap "
                  f"and table in {result.run_dir}", soft_wrap=True)
    for note in result.notes:
        console.print(f"note: {note}", soft_wrap=True)


def print_basic(result: BasicResult) -> None:
    t = table(f"cross-node proof {result.a} -> {result.b}", "check", "result")
    t.add_column("detail", overflow="fold")
    for c in result.checks:
        t.add_row(c.name, "[green]PASS[/green]" if c.ok else "[red]FAIL[/red]", outside(c.detail))
    show(t)
    n = result.numbers
    nums = table("numbers", "TTFT cold on A", "TTFT on B (from peer)", "TTFT control on B", "prompt tokens",
                 "cached tokens on B", "P2P loads on B", "KV bytes pulled")
    nums.add_row(*(fmt(n[k], "{:.0f} ms", 1000) for k in ("ttft_cold_a_s", "ttft_peer_b_s", "ttft_control_b_s")),
                 str(n["prompt_tokens"]), str(n["cached_tokens_b"]), f"{n['p2p_loads_b']:g}",
                 f"{n['kv_bytes_pulled_b']:,.0f}")
    show(nums)
    console.print(f"{verdict(result.passed)} — evidence in {result.run_dir}")
    if result.explain.get("strip"):
        console.print(plain(f"explain on {result.explain['instance']}: [{result.explain['strip']}] "
                            f"{result.explain['verdict']}"), markup=False, soft_wrap=True)
    if result.likely_cause:
        console.print(f"[red]likely cause{f' ({result.cause.id})' if result.cause else ''}:[/red] "
                      f"{escape(plain(result.likely_cause))}", soft_wrap=True)


def stress_options(args: argparse.Namespace) -> StressOptions:
    kw = given(args, {"sustained": "sustained_s", "concurrency": "sustained_concurrency",
                      "doc_tokens": "doc_tokens", "longdoc_tokens": "longdoc_tokens"})
    if args.ladder:
        kw["ladder"] = ints(args.ladder, "--ladder", "give integers separated by commas, e.g. 1,2,4,8")
    if args.stages:
        kw["stages"] = names(args.stages)
    kw.update(requests_per_level=args.requests_per_level, policy=args.policy, max_seconds=args.max_seconds,
              tag=args.tag, via_router=args.via_router, seed=seed(args))
    return StressOptions.quick(**kw) if args.quick else StressOptions(**kw)


def inference_perf_options(args: argparse.Namespace) -> InferencePerfOptions:
    ours = [f"--{k.replace('_', '-')}" for k in ("quick", "ladder", "stages", "sustained", "concurrency", "doc_tokens",
                                                 "longdoc_tokens") if getattr(args, k) not in (None, False)]
    if ours:
        raise BadInput(f"{', '.join(ours)}: options of --generator ours; inference-perf takes --shapes, --scale, "
                       "--tokenizer, --via-router, --seed, --max-seconds")
    opts = InferencePerfOptions(scale=args.scale, tokenizer=args.tokenizer or "", via_router=args.via_router,
                                seed=seed(args), max_seconds=args.max_seconds, tag=args.tag)
    if args.shapes:
        opts.shapes = names(args.shapes)
    opts.validate()
    return opts


def _run_stages(ctx: FleetContext, opts, out_dir: Path) -> dict:
    """One rich progress bar per stage label, on stderr: stdout holds only results (the JSON document with
    --json)."""
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=output.err_console.get(), disable=output.quiet()) as bars:
        tasks: dict = {}

        def bar(label: str, completed: int, total) -> None:
            if label not in tasks:
                tasks[label] = bars.add_task(label, total=total)
            bars.update(tasks[label], completed=completed, total=total)

        run = run_inference_perf_stress if isinstance(opts, InferencePerfOptions) else run_stress
        return run(ctx, opts, out_dir, bar)


def _run_and_report(args: argparse.Namespace, kind: str, body: Callable[[FleetContext, Path], None]) -> int:
    """A run folder, the work, the report and its verdict; the fleet context is closed whatever happens."""
    run: Optional[RunFolder] = None
    with running_context(args) as ctx:
        try:
            with run_folder(ctx.layout, f"{kind}-{args.tag}" if args.tag else kind) as run:
                body(ctx, run.path)
        except BaseException:
            # A run cut short (Ctrl-C, an error) still gets its report from what it wrote, marked interrupted.
            try:
                if run is not None:
                    build_report(run.path)
            except Exception as exc:  # noqa: BLE001 - the error that cut the run short is the one to show
                output.err_console.get().print(f"no report for {run.path}: {exc}", markup=False)
            raise
    return _verdict(args, build_report(run.path), run.path)


def cmd_stress(args: argparse.Namespace) -> int:
    opts = inference_perf_options(args) if args.generator == "inference-perf" else stress_options(args)
    return _run_and_report(args, "stress", lambda ctx, out: _run_stages(ctx, opts, out))


def cmd_all(args: argparse.Namespace) -> int:
    opts = stress_options(args)

    def body(ctx: FleetContext, out_dir: Path) -> None:
        stage = heading if not args.json else (lambda _: None)
        stage("cross-node proof")
        basic = run_basic(ctx, progress=progress, out_dir=out_dir / "basic")
        if not args.json:
            print_basic(basic)
        stage("stress")
        _run_stages(ctx, opts, out_dir)
        if args.with_lmcache_bench:
            stage("lmcache bench engine --workload long-doc-qa")
            run_lmcache_bench(ctx, out_dir / "lmcache-bench", quick=args.quick, progress=progress)

    return _run_and_report(args, "all", body)


def cmd_longdoc(args: argparse.Namespace) -> int:
    for name in ("document_length", "num_documents", "queries_per_document", "inflight", "max_tokens"):
        if getattr(args, name) < 1:
            raise BadInput(f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 1")
    opts = StressOptions(stages=["longdoc"], longdoc_tokens=args.document_length, longdoc_docs=args.num_documents,
                         longdoc_queries=args.queries_per_document, longdoc_inflight=args.inflight,
                         max_tokens=args.max_tokens, policy=args.policy, max_seconds=args.max_seconds,
                         tag=args.tag, seed=seed(args))

    def body(ctx: FleetContext, out_dir: Path) -> None:
        _run_stages(ctx, opts, out_dir)
        if args.with_lmcache_bench:
            run_lmcache_bench(ctx, out_dir / "lmcache-bench", document_length=args.document_length,
                              num_documents=args.num_documents, queries=args.queries_per_document,
                              inflight=args.inflight, max_tokens=args.max_tokens, progress=progress)

    return _run_and_report(args, "longdoc", body)


def cmd_faults(args: argparse.Namespace) -> int:
    from p2p_ops.harness import faults

    scenarios = faults.parse_scenarios(args.scenarios)
    opts = faults.FaultOptions.quick() if args.quick else faults.FaultOptions()
    with running_context(args) as ctx, run_folder(ctx.layout, "faults") as run:
        out_dir = run.path
        results = faults.run_faults(ctx, scenarios, opts, out_dir, progress=progress,
                                    explicit=args.scenarios is not None)
    ok = faults.passed(results)
    return done(args, {"run_dir": str(out_dir), "table": str(out_dir / "faults.md"), "passed": ok,
                       "scenarios": [f.to_json() for f in results]},
                lambda: _outcome(faults.table_markdown(results, opts), f"table: {out_dir / 'faults.md'}", ok,
                                 "see the table's notes"), ok)


def cmd_report(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise BadInput(f"{run_dir}: no such run folder; give one under p2p-run/<fleet>/tests/")
    return _verdict(args, build_report(run_dir), run_dir)


def _verdict(args: argparse.Namespace, report: Report, run_dir: Path) -> int:
    ok = report.passed
    return done(args, {"run_dir": str(run_dir), "report": str(report.summary), "passed": ok},
                lambda: _outcome("", f"report: {report.summary}", ok, "see the report's checks"), ok)


def _outcome(body: str, where: str, ok: bool, why: str) -> None:
    """A run's text (verbatim), where its evidence lies, and the verdict."""
    say(body, markup=False)
    say(where, verdict(ok, why))


def soak_options(args: argparse.Namespace):
    from p2p_ops.harness.soak import SoakOptions, parse_duration

    kw: dict = {"via_router": args.via_router, "seed": seed(args),
                **given(args, {"sample_every": "sample_every_s", "proof_every": "proof_every_s",
                               "concurrency": "concurrency"})}
    if args.duration is not None:
        kw["duration_s"] = parse_duration(args.duration)
    if args.warmup is not None:
        kw["warmup_s"] = parse_duration(args.warmup)
    elif not args.quick and "duration_s" in kw:
        kw["warmup_s"] = min(SoakOptions.warmup_s, kw["duration_s"] / 3)
    if args.sample_every is not None and not 1 <= args.sample_every <= 600:
        raise BadInput(f"--sample-every {args.sample_every:g}: use 1..600 seconds")
    if args.proof_every is not None and args.proof_every < 10:
        raise BadInput(f"--proof-every {args.proof_every:g}: use at least 10 seconds")
    opts = SoakOptions.quick(**kw) if args.quick else SoakOptions(**kw)
    opts.validate()
    return opts


def cmd_soak(args: argparse.Namespace) -> int:
    from p2p_ops.harness import soak

    opts = soak_options(args)
    with running_context(args) as ctx, run_folder(ctx.layout, "soak") as run:
        s = soak.run_soak(ctx, opts, run.path, progress=progress, stop=run.interrupted)
        checks, trends = soak.soak_checks(s)
        evidence = soak.write_evidence(s, checks, trends, run.path, ctx.fleet.name)
    ok = soak.passed(checks)
    return done(args, {"run_dir": str(run.path), "table": str(evidence), "passed": ok,
                       "checks": [c.__dict__ for c in checks]},
                lambda: _outcome(soak.soak_markdown(s, checks, trends, ctx.fleet.name), f"evidence: {run.path}", ok,
                                 "see the checks"), ok)
