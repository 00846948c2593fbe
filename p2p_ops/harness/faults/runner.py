"""Run fault scenarios on a healthy fleet under the same bounded shape, and write their figures:

    warm     every shared document is computed once on the first engine (so other nodes pull it over P2P)
    before   `phase_s` of load: clients query the documents on every engine
    fault    the scenario breaks its part (scenarios.py)
    during   load goes on while the part stays broken; then it is mended (started again, link back, ...)
    after    load until the fleet is ready again (all peers registered, engines healthy and connected), then
             `phase_s` more; then the load stops and LMCache's in-flight P2P work must drain (drain.py)

The figures go to faults.md, faults.json and one CSV of requests per scenario.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.harness.faults import drain
from p2p_ops.harness.faults.core import (PHASES, FaultOptions, Figures, Progress, clients, closed_loop, fill_figures,
                                         shared_jobs, wait_ready)
from p2p_ops.harness.faults.scenarios import SCENARIOS, why_not
from p2p_ops.harness.openai_client import complete
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe.records import RequestRecord, write_csv
from p2p_ops.observe.stats import fmt


def run_scenario(ctx: FleetContext, name: str, opts: FaultOptions,
                 progress: Progress = lambda _: None) -> tuple[Figures, list[RequestRecord]]:
    if why := why_not(ctx, name):
        raise BadInput(f"scenario {name} cannot run on fleet {ctx.fleet.name}: {why}")
    seed = int(time.time() * 1000) % 10**6
    fault = SCENARIOS[name].make(ctx, opts, seed)
    model = ctx.fleet.model
    if wait_ready(ctx, opts.recover_timeout_s) is None:
        raise BadInput(f"fleet {ctx.fleet.name} is not ready (`p2pctl status`); a fault test needs a healthy fleet")
    docs, jobs = shared_jobs(ctx, opts, seed)
    if SCENARIOS[name].via_router:
        jobs = [(ctx.fleet.router_url, prompt) for _, prompt in jobs]
    first = ctx.engine_url(*ctx.fleet.instances()[0])
    for doc in docs:  # computed once on A: every other engine pulls these prefixes over P2P
        complete(first, model, doc, max_tokens=1, timeout=opts.request_timeout_s)

    # What is in flight at rest before the fault: "drained" means back to this, not necessarily to 0.
    baseline = drain.total(drain.snapshot(ctx))
    figures = Figures(name, fault.part, lookups_inflight_before=baseline)
    t0 = time.monotonic()
    runner = clients(model, opts, t0)
    load = closed_loop(runner, jobs, opts)
    sampler = drain.Sampler(ctx).start()
    marks: dict[str, float] = {}
    try:
        time.sleep(opts.phase_s)
        fault.inject(runner, lambda m: progress(f"{name}: {m}"))
        marks["fault"] = time.monotonic() - t0
        fault.hold(runner, opts, lambda m: progress(f"{name}: {m}"))
        fault.restore(lambda m: progress(f"{name}: {m}"))
        marks["restart"] = time.monotonic() - t0
        waited = wait_ready(ctx, opts.recover_timeout_s)
        marks["recovered"] = time.monotonic() - t0
        figures.recovered = waited is not None
        if figures.recovered:
            figures.recovered_after_fault_s = round(marks["recovered"] - marks["fault"], 2)
            if fault.restarted:
                figures.reregistered_after_restart_s = round(marks["recovered"] - marks["restart"], 2)
            time.sleep(opts.phase_s)
    finally:
        load.stop()
        sampler.stop()
        fault.cleanup()
    figures.part = fault.part
    timeout = max(opts.drain_timeout_s, drain.lookup_timeout_s(ctx) + 5)
    d = drain.wait_drained(ctx, sampler.max_seen, timeout, baseline)
    figures.lookups_inflight_max, figures.lookups_inflight_end = d.inflight_max_during, d.inflight_at_end
    figures.lookups_drained, figures.lookups_drained_after_s = d.drained, d.drained_after_s
    samples = sorted(runner.records, key=lambda s: s.t_start_s)
    fault.finish(marks, samples)
    figures.extra = dict(fault.extra, inflight_by_server=d.last)
    fill_figures(figures, samples, marks, fault.unreachable_url, fault.why_unreachable)
    return figures, samples


def run_faults(ctx: FleetContext, names: list[str], opts: FaultOptions, out_dir: Path,
               progress: Progress = lambda _: None, explicit: bool = True) -> list[Figures]:
    """Every named scenario in turn. A scenario this fleet cannot run is refused when it was asked for by
    name (`explicit`), and listed as skipped (with why) when it came from the default set."""
    reasons = {n: why_not(ctx, n) for n in names}
    refused = [f"{n}: {w}" for n, w in reasons.items() if w]
    if explicit and refused:
        raise BadInput("cannot run on fleet " + ctx.fleet.name + ": " + "; ".join(refused))
    files.make_dirs(out_dir)
    results = []
    for name in names:
        if reasons[name]:
            results.append(Figures(name, "-", skipped=reasons[name], note="skipped: " + reasons[name]))
            continue
        progress(f"scenario {name}")
        fig, samples = run_scenario(ctx, name, opts, progress)
        results.append(fig)
        write_csv(out_dir / f"faults-{name}-requests.csv", samples)
        write_table(results, out_dir, opts)  # after each scenario: a partial run still leaves its figures
    write_table(results, out_dir, opts)
    return results


def _drained(f: Figures) -> str:
    if f.lookups_drained is None:
        return "-"
    word = f"yes ({f.lookups_drained_after_s:g} s)" if f.lookups_drained else f"NO ({f.lookups_inflight_end} left)"
    return f"{word}, {f.lookups_inflight_before} at rest before, max {f.lookups_inflight_max} in flight"


def table_markdown(results: list[Figures], opts: FaultOptions) -> str:
    lines = [
        "# Faults under load", "",
        f"phase {opts.phase_s:g} s before and after, part broken for {opts.hold_s:g} s, {opts.concurrency} "
        f"client(s), {opts.docs} shared document(s) of ~{opts.doc_chars} characters warmed on the first engine. "
        "`lookups drained`: every lmcache server's active_p2p_lookup_jobs, active_prefetch_jobs and L1 "
        "read_locked_count back at 0 after the load stopped (LMCache 0.5.6 has no pending-transfer counter).", "",
        "| scenario | broken | sent | failed (before/during/after) | p99 TTFT s before | during | after | "
        "ready again after fault s | after restart s | recovered | lookups drained | scenario figures | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in results:
        if f.skipped:
            lines.append(f"| {f.scenario} | - | - | - | - | - | - | - | - | - | - | - | skipped: {f.skipped} |")
            continue
        failed = "/".join(str(f.failed_by_phase.get(ph, 0)) for ph in PHASES)
        extra = ", ".join(f"{k}={v}" for k, v in f.extra.items() if k != "inflight_by_server")
        seconds = [f.p99_ttft_s.get(ph) for ph in PHASES] + [f.recovered_after_fault_s,
                                                             f.reregistered_after_restart_s]
        lines.append(
            f"| {f.scenario} | {f.part} | {f.sent} | {f.failed} ({failed}) | "
            f"{' | '.join(fmt(v, '{:.3f}') for v in seconds)} | {'yes' if f.recovered else 'NO'} | "
            f"{_drained(f)} | {extra or '-'} | {f.note} |")
    return "\n".join(lines) + "\n"


def write_table(results: list[Figures], out_dir: Path, opts: FaultOptions) -> None:
    files.write_text(out_dir / "faults.md", table_markdown(results, opts))
    files.write_json(out_dir / "faults.json", {"options": asdict(opts), "scenarios": [f.to_json() for f in results]})


def passed(results: list[Figures]) -> bool:
    """Every scenario that ran recovered and lost no request recompute could serve. Undrained lookups are named
    in the note but do not fail the run: LMCache keeps a lookup whose requester gave up (no TTL on the job, its
    read locks until the 300 s read TTL), which no setting of ours changes."""
    return all(f.recovered and f.unexpected_failures == 0 for f in results if not f.skipped)
