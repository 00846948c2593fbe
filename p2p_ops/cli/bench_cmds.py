"""`p2pctl bench placement` and `p2pctl calibrate`: the router-side benchmarks.

`bench placement` and `calibrate --launch` start their own local fleets, on free ports or at `--port-offset`
(a progress line and the --json document say which); `calibrate` without --launch measures a running fleet.
With --json, stdout holds one document (the run's results) and progress stays on stderr.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from p2p_ops import files
from p2p_ops.bench.placement_verdict import FULL_REPEATS, QUICK_REPEATS, PlacementOptions
from p2p_ops.cli.common import add_port_offset_arg, context, done, given, ints, names, repeats, verb
from p2p_ops.cli.output import progress, say
from p2p_ops.errors import BadInput
from p2p_ops.observe.stats import with_spread
from p2p_runtime.profiles import PROFILE_NAMES, TINY
from p2p_runtime.timing_profiles import DEFAULT as DEFAULT_TIMING
from p2p_runtime.timing_profiles import TIMING_NAMES


def _out_dir(args: argparse.Namespace, kind: str, ctx=None) -> Path:
    """--out, else a new folder: under the fleet's run folder when measuring one (ctx), else p2p-run/bench/."""
    if args.out:
        return Path(args.out)
    if ctx is not None:
        from p2p_ops.harness.rundir import new_run_dir

        return new_run_dir(ctx.layout, kind)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return Path("p2p-run") / "bench" / f"{stamp}-{kind}"


def _only_with(args: argparse.Namespace, flag: str, mode: str, why: str) -> None:
    """A launching verb's option given while measuring a running fleet (or the reverse) is bad input."""
    if getattr(args, flag.lstrip("-").replace("-", "_")) is not None:
        raise BadInput(f"{flag}: only {mode} ({why})")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks across fleet variants (placement x P2P)")
    bsub = p.add_subparsers(dest="bench_kind", metavar="KIND")
    pl = verb(bsub, "placement", cmd_placement, fleet=False,
              help="document QA through vllm-router under each policy, P2P on and off",
              description="Starts a local fleet with a router (P2P on, then the same fleet whose servers stay out "
              "of the mesh), runs contended document QA under each router policy and reports served req/s, TTFT "
              "p50/p90, tokens from the local cache / a peer / recomputed, and the P2P margin per policy. Needs "
              "`make setup-router`.",
              epilog="exit codes: 0 every arm ran, 1 an arm failed or had failed requests, 2 bad input")
    pl.add_argument("--quick", action="store_true", help="8 sessions x 3 questions, 2K-token documents (minutes)")
    pl.add_argument("--repeats", type=int, default=None, metavar="N",
                    help=f"runs of every arm, interleaved; figures are their median (min-max) (default "
                         f"{QUICK_REPEATS} with --quick, the fewest with a median inside its range; {FULL_REPEATS} "
                         "without, as llm-d's published medians)")
    pl.add_argument("--policies", default=None, help="comma list (default: round_robin,power_of_two,cache_aware,"
                                                     "kv_aware,consistent_hash)")
    pl.add_argument("--nodes", type=int, default=2, help="nodes of the local fleet (default 2)")
    pl.add_argument("--sessions", type=int, default=None, help="document-QA sessions per arm")
    pl.add_argument("--questions", type=int, default=None, help="questions per session")
    pl.add_argument("--doc-tokens", type=int, default=None, help="tokens per private document")
    pl.add_argument("--inflight", type=int, default=None, help="sessions in flight at once")
    add_timing_arg(pl, f"the engines' emulated GPU timing (default {DEFAULT_TIMING}, the one calibrate uses)")
    pl.add_argument("--no-gpu-timing", action="store_true", help="the same as --timing off: engines at CPU speed")
    pl.add_argument("--p2p", choices=["both", "on", "off"], default="both", help="which P2P arms (default both)")
    pl.add_argument("--max-seconds", type=float, default=None, help="hard bound on the whole run (default 600 s "
                    "per repeat with --quick, 1800 s without)")
    pl.add_argument("--generator", choices=["ours", "inference-perf"], default="ours",
                    help="who sends the sessions: ours (default) or inference-perf (`make setup-inference-perf`; the "
                         "same sessions as conversations, x-session-id their id)")
    pl.add_argument("--tokenizer", default=None, help="with inference-perf: a local Hugging Face tokenizer folder "
                    "(default models/tiny-llama)")
    add_port_offset_arg(pl, ports="the fleet's ports, the router's included,")
    pl.add_argument("--out", default=None, help="run folder (default p2p-run/bench/<UTC time>-placement)")

    c = verb(sub, "calibrate", cmd_calibrate, help="pull-vs-recompute crossover: the shortest prefix worth pulling",
             description="On a running fleet (or, with --launch, a temporary 2-node local one it starts, times and "
             "takes down): per prefix length, fresh prompts computed on A then served on B from A (pulled) and "
             "cold on B (recomputed), medians over repetitions; prints the shortest length where the pull wins "
             "and the router cache threshold to match.",
             epilog="exit codes: 0 measured, 1 no length could be measured, 2 bad input or the fleet is not running")
    c.add_argument("--launch", action="store_true",
                   help="start a temporary 2-node local fleet for the run (up and wait timed), always taken down; "
                        "-f is then not read")
    add_port_offset_arg(c, "with --launch: ")
    add_timing_arg(c, f"profile the GPU answer is projected with; with --launch also what the engines run "
                      f"(default: the GPU profile the fleet's engines run, else {DEFAULT_TIMING})")
    c.add_argument("--profile", choices=PROFILE_NAMES, default=None, metavar="NAME",
                   help=f"with --launch: the KV geometry the engines store and pull: {' | '.join(PROFILE_NAMES)} "
                        "(default tiny; gpt-oss-120b is the model of the h200-* timing profiles)")
    c.add_argument("--quick", action="store_true", help="lengths 256..4096, 2 repetitions")
    c.add_argument("--lengths", default=None, help="comma list of prefix lengths in tokens")
    c.add_argument("--repeats", type=int, default=None, help="repetitions per length (default 3, 2 with --quick)")
    c.add_argument("--doc-tokens", type=int, default=None,
                   help="typical request length, for the cache threshold advice (default: longest length)")
    c.add_argument("--seed", type=int, default=None)
    c.add_argument("--out", default=None, help="run folder (default <run>/tests/<UTC time>-calibrate; with "
                                               "--launch p2p-run/bench/<UTC time>-calibrate)")

    t = verb(bsub, "transfer", cmd_transfer,
             help="LMCache's transfer-channel benchmark between two nodes of the fleet, beside memcpy",
             description="Runs `lmcache tool transfer-channel-benchmark` (server on --source, client on --reader, "
             "--verify) on the fleet's UCX_TLS / UCX_NET_DEVICES / l1_align_bytes, for one chunk up to the prefix "
             "of --prompt-tokens at the fleet's KV profile; prints GB/s and p50/p99 per size with memcpy on the "
             "reader, and a verdict against --need-ms for the whole prefix. Starts its own benchmark processes on "
             "free ports; the fleet need not be running.",
             epilog="exit codes: 0 every read verified and fast enough, 1 a read failed or was too slow, 2 bad input")
    t.add_argument("--source", default=None, help="node that serves the bytes (default: the first node)")
    t.add_argument("--reader", default=None, help="node that reads them (default: the second node, else the first)")
    t.add_argument("--pattern", choices=("pairwise", "many-to-one", "one-to-many"), default="pairwise",
                   help="pairwise (--source to --reader), many-to-one (every other node serves, --reader reads "
                        "from all at once) or one-to-many (--source serves, every other node reads at once)")
    t.add_argument("--engine", default=None, help="transfer engine(s) to time, comma-separated, side by side "
                   "(nixl,mooncake_te; default: the fleet's settings.transfer_engine); pairwise only")
    t.add_argument("--prompt-tokens", type=int, default=4096, help="longest prefix to test (default 4096)")
    t.add_argument("--iters", type=int, default=5, help="measured reads per size (default 5)")
    t.add_argument("--repeats", type=int, default=None, metavar="N",
                   help="sweeps of every size, interleaved; GB/s and p50 per size are their median (min-max) "
                        "(default 3)")
    t.add_argument("--need-ms", type=float, default=None, help="the whole prefix must read within this (default: "
                   "recomputing it, from engine.prefill_us_per_token, else the default GPU timing profile's)")
    t.add_argument("--out", default=None, help="run folder for transfer.json and transfer.png, the plot of GB/s "
                                               "against size (default <run>/tests/<UTC time>-transfer)")

    pe = verb(bsub, "peers", cmd_peers,
              help="multi-peer behaviour: which peer serves a prefix, lookup latency against N",
              description="On temporary local fleets of each --nodes size (or, with --running, the fleet of -f): "
              "the first instance asks for fresh prefixes held by one peer (first and last in its lookup order), "
              "by two peers, and by nobody. Prints per N and scenario the serving peer, cached tokens, P2P loads, "
              "lookup ms p50/p99 and pull ms, the line against the target 'P2P lookup at 8 peers: 10 ms or less', "
              "and writes peers.json, summary.md and lookup.png (lookup ms against N).",
              epilog="exit codes: 0 every request served as expected, 1 one was not (or nothing was measured), "
                     "2 bad input")
    pe.add_argument("--running", action="store_true", help="measure the running fleet of -f instead of launching")
    pe.add_argument("--nodes", default="2,4,8", help="fleet sizes to launch, comma list (default 2,4,8)")
    pe.add_argument("--repeats", type=int, default=5, help="requests per scenario and size (default 5)")
    pe.add_argument("--chunks", type=int, default=2, help="full chunks per prefix (default 2)")
    pe.add_argument("--seed", type=int, default=None)
    add_port_offset_arg(pe, "without --running: ")
    pe.add_argument("--out", default=None, help="run folder (default p2p-run/bench/<UTC time>-peers; with "
                                                "--running <run>/tests/<UTC time>-peers)")


def cmd_peers(args: argparse.Namespace) -> int:
    from p2p_ops.bench import peers
    from p2p_ops.observe.peers_plot import fleet_line

    sizes = tuple(ints(args.nodes, "--nodes", "give fleet sizes, e.g. 2,4,8"))
    opts = peers.PeersOptions(repeats=args.repeats, chunks=args.chunks, seed=args.seed, sizes=sizes)
    opts.validate()
    if args.running:
        _only_with(args, "--port-offset", "without --running", "a running fleet's ports are in its fleet.yaml")
        with context(args) as ctx:
            doc = peers.run_running(ctx, Path(args.out) if args.out else None, opts, progress)
    else:
        doc = peers.run_launched(_out_dir(args, "peers"), opts, args.port_offset, progress)

    why = doc["target"].get("why")
    return done(args, doc, lambda: say(
        peers_table(doc), doc["target"]["line"], why and f"why: {why}", *(fleet_line(f) for f in doc["fleets"]),
        *(f"note: {note}" for note in doc["notes"]), f"run folder: {doc['run_dir']} (plot: {doc['plot'] or 'none'})",
        markup=False), bool(doc["passed"]))


def peers_table(doc: dict) -> str:
    from p2p_ops.observe.peers_plot import COLUMNS, cells

    table = [list(COLUMNS)] + [cells(r) for r in doc["rows"]]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)


def cmd_transfer(args: argparse.Namespace) -> int:
    from p2p_ops.bench import transfer

    with context(args) as ctx:
        nodes = [n.name for n in ctx.fleet.nodes]
        source = args.source or nodes[0]
        reader = args.reader or (nodes[1] if len(nodes) > 1 else nodes[0])
        engines = names(args.engine) if args.engine else []
        if [e for e in engines if e not in ("nixl", "mooncake_te")] or engines and args.pattern != "pairwise":
            raise BadInput(f"--engine {args.engine}: give nixl and/or mooncake_te, with --pattern pairwise")
        n = repeats(args.repeats, 3)
        if args.pattern == "pairwise":
            doc = transfer.run_transfer(ctx, source, reader, args.prompt_tokens, args.iters, args.need_ms, progress,
                                        engines, n)
        else:
            hub = (args.reader if args.pattern == "many-to-one" else args.source) or nodes[0]
            doc = transfer.run_fan(ctx, args.pattern, hub, args.prompt_tokens, args.iters, args.need_ms, progress, n)
        doc = transfer.write_run(_out_dir(args, "transfer", ctx), doc)

    return done(args, doc, lambda: say(transfer_table(doc), doc["verdict"], f"run folder: {doc['run_dir']} (plot: "
                                       f"{doc['plot'] or 'none, no rows'})", markup=False), bool(doc["ok"]))


def transfer_table(doc: dict) -> str:
    from p2p_ops.bench.transfer_rails import label

    if len(doc.get("engines", [])) > 1:
        return engines_table(doc)
    lines = [f"size (MiB)  chunks  {'GB/s median (min-max)':>21}  {'p50 ms (min-max)':>21}  p99 ms  memcpy GB/s  "
             "verified  rails (moved the bytes)"]
    notes = []
    for r in doc["rows"]:
        gbps, p50 = (with_spread(r[f] or 0, r.get(s), "{:.2f}") for f, s in (("median_gbps", "gbps_range"),
                                                                                ("p50_ms", "p50_range")))
        lines.append(f"{r['payload_bytes'] / 2**20:>10.2f}  {r['num_objects']:>6}  {gbps:>21}  {p50:>21}  "
                     f"{r['p99_ms'] or 0:>6.2f}  {r['memcpy_gbps'] or 0:>11.2f}  "
                     f"{'yes' if r['ok'] else 'NO ' + r['error'][:40]:<8}  {label(r.get('rails', []))}")
        notes += [r["note"]] if r.get("note") else []
        notes += [f"{r['num_objects']} chunk(s): a reader connected after the common start, reads not overlapped"
                  ] if r.get("overlapped") is False else []
    notes += [doc["rails_note"]] if doc.get("rails_note") else []
    lines += [f"note: {n}" for n in dict.fromkeys(notes)]
    if doc.get("need_why"):
        lines.append(f"need: {doc['need_ms']:g} ms, {doc['need_why']}")
    return "\n".join(lines)


def engines_table(doc: dict) -> str:
    """One line per size: each engine's median GB/s and p50 ms side by side, then memcpy."""
    engines = doc["engines"]
    by = {(r["engine"], r["num_objects"]): r for r in doc["rows"]}
    lines = ["size (MiB)  chunks  " + "  ".join(f"{e + ' GB/s (min-max)':>26}  {'p50 ms':>7}" for e in engines)
             + "  memcpy GB/s"]
    for count in dict.fromkeys(r["num_objects"] for r in doc["rows"]):
        rows = [by.get((e, count)) for e in engines]
        first = next(r for r in rows if r)
        lines.append(f"{first['payload_bytes'] / 2**20:>10.2f}  {count:>6}  " + "  ".join(
            f"{with_spread(r['median_gbps'] or 0, r.get('gbps_range'), '{:.2f}'):>26}  {r['p50_ms'] or 0:>7.2f}"
            if r and r["ok"] else f"{'FAIL ' + (r['error'][:20] if r else 'not run'):>35}" for r in rows)
            + f"  {first['memcpy_gbps'] or 0:>11.2f}")
    return "\n".join(lines)


def add_timing_arg(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--timing", choices=TIMING_NAMES, default=None, metavar="NAME",
                   help=f"{text}: {' | '.join(TIMING_NAMES)} (h200-*: fitted to llm-d's gpt-oss-120b H200 figures)")


def placement_options(args: argparse.Namespace) -> PlacementOptions:
    opts = PlacementOptions.quick() if args.quick else PlacementOptions()
    if args.policies:
        opts.policies = names(args.policies)
    opts.nodes = args.nodes
    opts.repeats = repeats(args.repeats, opts.repeats)
    if args.no_gpu_timing and args.timing not in (None, "off"):
        raise BadInput(f"--no-gpu-timing with --timing {args.timing}: pass one of them")
    opts.timing = "off" if args.no_gpu_timing else (args.timing or DEFAULT_TIMING)
    opts.p2p_arms = {"both": [True, False], "on": [True], "off": [False]}[args.p2p]
    if args.max_seconds:
        opts.max_seconds = args.max_seconds
    opts.port_offset = args.port_offset
    opts.workload = replace(opts.workload, **given(args, {n: n for n in ("sessions", "questions", "doc_tokens",
                                                                           "inflight")}))
    if args.generator == "inference-perf":   # resolved before any fleet starts: a missing one is bad input now
        from p2p_ops.harness.stress_inference_perf import tokenizer_dir, venv_dir

        opts.generator, opts.inference_perf_venv = args.generator, str(venv_dir())
        opts.tokenizer = str(tokenizer_dir(args.tokenizer or "", ""))
    return opts


def cmd_placement(args: argparse.Namespace) -> int:
    from p2p_ops.bench import placement

    opts = placement_options(args)
    out = _out_dir(args, "placement")
    results = placement.run(out, opts, progress)
    ok = bool(results) and not any(r.error or r.failed for r in results)
    return _show(args, out, {**files.read_json(out / "results.json", within=out), "passed": ok}, ok)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from p2p_ops.bench import calibrate

    lengths = list(calibrate.QUICK_LENGTHS if args.quick else calibrate.LENGTHS)
    if args.lengths:
        lengths = ints(args.lengths, "--lengths", "give token counts, e.g. 512,1024,2048")
        if not lengths or min(lengths) < 1:
            raise BadInput(f"--lengths {args.lengths!r}: give positive token counts, e.g. 512,1024,2048")
    n = repeats(args.repeats, 2 if args.quick else 3)
    if args.launch:
        out = _out_dir(args, "calibrate")
        doc = calibrate.run_launched(out, lengths, n, args.seed, args.doc_tokens, args.port_offset, progress,
                                     timing=args.timing or DEFAULT_TIMING, profile=args.profile or TINY)
    else:
        _only_with(args, "--port-offset", "with --launch", "a running fleet's ports are in its fleet.yaml")
        _only_with(args, "--profile", "with --launch", "a running fleet's KV profile is engine.profile in its "
                   "fleet.yaml")
        with context(args) as ctx:
            calibrate.check_running(ctx)  # before the run folder: a fleet that is not up leaves nothing behind
            out = _out_dir(args, "calibrate", ctx)
            doc = calibrate.run(ctx, out, lengths, n, args.seed, args.doc_tokens, progress, timing=args.timing)
    return _show(args, out, doc, bool(doc["rows"]))


def _show(args: argparse.Namespace, out: Path, doc: dict, ok: bool) -> int:
    """--json: the run's document and its folder, alone on stdout; else summary.md and the folder."""
    return done(args, {"run_dir": str(out), **doc},
                lambda: say(files.read_text(out / "summary.md", within=out), f"run folder: {out}", markup=False), ok)


