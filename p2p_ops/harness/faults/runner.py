"""Run fault scenarios on a healthy fleet under the same bounded shape, and write their figures:

    warm     every shared document is computed once on the first engine (so other nodes pull it over P2P)
    before   `phase_s` of load: clients query the documents on every engine
    fault    the scenario breaks its part (scenarios.py)
    during   load goes on while the part stays broken; then it is mended (started again, link back, ...)
    after    load until the fleet is ready again (all peers registered, engines healthy and connected), then
             `phase_s` more; then the load stops and LMCache's in-flight P2P work must drain (drain.py)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.harness.faults import drain
from p2p_ops.harness.faults.core import (
    FaultOptions,
    Figures,
    Load,
    Progress,
    fill_figures,
    shared_jobs,
    wait_ready,
)
from p2p_ops.harness.faults.scenarios import SCENARIOS, why_not
from p2p_ops.harness.faults.table import write_table
from p2p_ops.harness.openai_client import complete
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe.records import RequestRecord, write_csv


def run_scenario(ctx: FleetContext, name: str, opts: FaultOptions, progress: Progress = lambda _: None,
                 seed: Optional[int] = None) -> tuple[Figures, list[RequestRecord]]:
    why = why_not(ctx, name)
    if why:
        raise BadInput(f"scenario {name} cannot run on fleet {ctx.fleet.name}: {why}")
    seed = seed if seed is not None else int(time.time() * 1000) % 10**6
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
    load = Load(jobs, model, opts, t0).start()
    sampler = drain.Sampler(ctx).start()
    marks: dict[str, float] = {}
    try:
        time.sleep(opts.phase_s)
        fault.inject(load, lambda m: progress(f"{name}: {m}"))
        marks["fault"] = time.monotonic() - t0
        fault.hold(load, opts, lambda m: progress(f"{name}: {m}"))
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
    samples = sorted(load.samples, key=lambda s: s.t_start_s)
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
