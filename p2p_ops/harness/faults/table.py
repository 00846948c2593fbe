"""The figures of a fault run as faults.md, faults.json and one CSV of requests per scenario."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from p2p_ops import files
from p2p_ops.harness.faults.core import PHASES, FaultOptions, Figures
from p2p_ops.observe.stats import fmt


def _drained(f: Figures) -> str:
    if f.lookups_drained is None:
        return "-"
    word = f"yes ({f.lookups_drained_after_s:g} s)" if f.lookups_drained else f"NO ({f.lookups_inflight_end} left)"
    return f"{word}, {f.lookups_inflight_before} at rest before, max {f.lookups_inflight_max} in flight"


def _extra(f: Figures) -> str:
    keep = {k: v for k, v in f.extra.items() if k != "inflight_by_server"}
    return ", ".join(f"{k}={v}" for k, v in keep.items()) or "-"


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
        seconds = [f.p99_ttft_s.get(ph) for ph in PHASES] + [f.recovered_after_fault_s,
                                                             f.reregistered_after_restart_s]
        lines.append(
            f"| {f.scenario} | {f.part} | {f.sent} | {f.failed} ({failed}) | "
            f"{' | '.join(fmt(v, '{:.3f}') for v in seconds)} | {'yes' if f.recovered else 'NO'} | "
            f"{_drained(f)} | {_extra(f)} | {f.note} |")
    return "\n".join(lines) + "\n"


def write_table(results: list[Figures], out_dir: Path, opts: FaultOptions) -> Path:
    path = out_dir / "faults.md"
    files.write_text(path, table_markdown(results, opts))
    files.write_json(out_dir / "faults.json", {"options": asdict(opts), "scenarios": [f.to_json() for f in results]})
    return path


def passed(results: list[Figures]) -> bool:
    """Every scenario that ran recovered and lost no request recompute could serve. Undrained lookups are named
    in the note but do not fail the run: LMCache keeps a lookup whose requester gave up (no TTL on the job, its
    read locks until the 300 s read TTL), which no setting of ours changes."""
    return all(f.recovered and f.unexpected_failures == 0 for f in results if not f.skipped)
