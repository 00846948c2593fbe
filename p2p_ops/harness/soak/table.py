"""A soak's evidence in its run folder: soak.md (checks, slopes, minutes), soak.json, requests.csv,
samples.csv and the plots."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Optional

from p2p_ops import files
from p2p_ops.harness.soak.runner import Soaked
from p2p_ops.harness.soak.sampler import FIELDS, Row
from p2p_ops.harness.soak.verdict import Check, Trend, cpu_percent, passed, per_minute
from p2p_ops.observe import charts
from p2p_ops.observe.records import write_csv
from p2p_ops.observe.report import check_table
from p2p_ops.observe.stats import fmt


def _trend_cell(t: Optional[Trend]) -> str:
    if t is None or t.start is None:
        return "-"
    return f"{t.start:g} → {t.end:g} ({fmt(t.slope_per_h, '{:+.1f}')}/h){' **LEAK**' if t.leak else ''}"


def trend_rows(s: Soaked, ts: list[Trend]) -> list[str]:
    lines = ["| process | anonymous MiB (slope) | RSS MiB | fds | threads | CPU % after warm-up |",
             "|---|---|---|---|---|---|"]
    by = {(t.unit, t.metric): t for t in ts}
    for u in s.sampler.units:
        rss = by.get((u.name, "rss_mib"))
        lines.append(f"| {u.name} | {_trend_cell(by.get((u.name, 'anon_mib')))} | "
                     f"{fmt(rss.end if rss else None)} | {_trend_cell(by.get((u.name, 'fds')))} | "
                     f"{_trend_cell(by.get((u.name, 'threads')))} | "
                     f"{fmt(cpu_percent(s.sampler.rows, u.name, s.opts.warmup_s))} |")
    return lines


def soak_markdown(s: Soaked, checks: list[Check], ts: list[Trend], fleet: str) -> str:
    o = s.opts
    lines = [f"# Soak of fleet {fleet}: {s.wall_s / 60:.1f} min", "",
             f"{o.concurrency} client(s){' through the router' if o.via_router else ''}: shared documents, "
             f"{o.sessions} multi-turn sessions, fresh prompts; a sample every {o.sample_every_s:g} s, a cross-node "
             f"proof every {o.proof_every_s:g} s. Slopes from {o.warmup_s:g} s on (warm-up left out); a leak is a "
             "rise through three equal windows in a row (harness/soak/verdict.py).", "",
             f"**Overall: {'PASS' if passed(checks) else 'FAIL'}**", "", *check_table(checks)]
    lines += ["", "## Per process (after warm-up: first → last sample, least-squares slope)", "", *trend_rows(s, ts)]
    f = s.filler
    if f is not None:
        lines += ["", f"L1 fill in warm-up: every server's L1 at {f.fill or 0:.0%} of its size" +
                  (f" from {f.filled_at:g} s on (steady state: evicting)." if f.filled_at is not None else
                   " when the warm-up ended (not yet at the eviction watermark).")]
    stale = next((t for t in ts if t.metric == "stale_p2p"), None)
    lines += ["", f"Stale P2P work (lookup jobs + L1 read locks, all servers): {_trend_cell(stale)}, window floors "
              f"{stale.windows if stale else '-'}.", "", "## Per minute", "",
              "| minute | requests | failed | p50 TTFT ms | p99 TTFT ms | cached share |", "|---|---|---|---|---|---|"]
    lines += [f"| {m.minute} | {m.requests} | {m.failed} | {fmt(m.ttft_p50_s, '{:.0f}', 1000)} | "
              f"{fmt(m.ttft_p99_s, '{:.0f}', 1000)} | {fmt(m.cached_share)} |"
              for m in per_minute(s.load.snapshot())]
    return "\n".join(lines) + "\n"


def _series(rows: list[Row], metric: str, role: Optional[str] = None) -> charts.Series:
    out: charts.Series = {}
    for r in rows:
        v = getattr(r, metric)
        if v is not None and (role is None or r.role == role):
            out.setdefault(r.unit, []).append((r.t, float(v)))
    return out


def write_plots(s: Soaked, out_dir: Path) -> list[Path]:
    rows, w = s.sampler.rows, s.opts.warmup_s
    made = [charts.over_time(out_dir / "soak-anon-memory.png", _series(rows, "anon_mib"), "anonymous memory (MiB)",
                                 "Anonymous memory per process (what a leak grows)", w),
            charts.over_time(out_dir / "soak-fds.png", _series(rows, "fds"), "open file descriptors",
                                 "Open fds per process", w),
            charts.over_time(out_dir / "soak-threads.png", _series(rows, "threads"), "threads",
                                 "Threads per process", w),
            charts.over_time(out_dir / "soak-p2p-inflight.png",
                                 {f"{k} {m}": v for m in ("lookup_jobs", "read_locks")
                                  for k, v in _series(rows, m, "server").items()},
                                 "count", "P2P lookup jobs and L1 read locks per server", w),
            charts.ttft_per_minute(out_dir / "soak-ttft.png",
                                       [(m.minute, m.ttft_p50_s, m.ttft_p99_s) for m in per_minute(s.load.snapshot())])]
    return [p for p in made if p is not None]


def write_evidence(s: Soaked, checks: list[Check], ts: list[Trend], out_dir: Path, fleet: str) -> Path:
    reqs = s.load.snapshot()
    write_csv(out_dir / "requests.csv", reqs)
    write_csv(out_dir / "samples.csv", s.sampler.rows, FIELDS)
    plots = write_plots(s, out_dir)
    md = soak_markdown(s, checks, ts, fleet) + "".join(f"\n![{p.stem}]({p.name})\n" for p in plots)
    files.write_text(out_dir / "soak.md", md)
    doc = {"passed": passed(checks), "wall_s": s.wall_s, "options": asdict(s.opts),
           "checks": [asdict(c) for c in checks], "trends": [asdict(t) for t in ts],
           "minutes": [asdict(m) for m in per_minute(reqs)], "proofs": [asdict(p) for p in s.proofs],
           "drained": asdict(s.drained) if s.drained else None, "stopped_early": s.stopped_early,
           "l1_filled_at_s": s.filler.filled_at if s.filler else None,
           "cpu_percent": {u.name: cpu_percent(s.sampler.rows, u.name, s.opts.warmup_s) for u in s.sampler.units},
           "plots": [p.name for p in plots]}
    files.write_json(out_dir / "soak.json", doc)
    return out_dir / "soak.md"
