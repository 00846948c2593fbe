"""The soak's verdict: no failed request, every cross-node proof passed, every process ran throughout, no
sustained leak in any process, and no stale P2P work piling up in LMCache (`soak_checks`); and what it rests on,
pure functions over the recorded rows: slopes, the leak rule and TTFT per minute.

A slope is the least-squares fit over the samples after warm-up, per hour. A leak is a *sustained* rise
(`options.LeakRule`): split the post-warm-up span into three equal windows and take each window's floor (its
lowest sample); the metric leaks when each floor is above the one before, the last rise is not much smaller
than the one before it (`STEADY`), it grew by at least `min_growth` from the first floor to the last, and the
slope is at least `min_per_hour`. Floors, not medians: a Python process's memory spikes with each large request
and the allocator keeps its high-water mark, so peaks ratchet up for a while under any load, while a leak lifts
the floor. Warm-up growth (a pool filling, an allocator settling) rises and levels off, so its floors stop
climbing or slow down. The stale P2P work (lookup jobs + read locks summed over the servers) is judged the same
way: under load they come and go, what stays at the floor is what leaks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import StatisticsError, linear_regression
from typing import Callable, Optional

from p2p_ops import files
from p2p_ops.harness.soak.options import LeakRule, SoakOptions
from p2p_ops.harness.soak.runner import Soaked
from p2p_ops.harness.soak.sampler import FIELDS, Row
from p2p_ops.observe import charts
from p2p_ops.observe.records import RequestRecord, write_csv
from p2p_ops.observe.report import Check, check_table
from p2p_ops.observe.stats import fmt, percentile

Point = tuple[float, float]  # (seconds since start, value)
# A leak's last third rises at least this fraction of its second third's rise; warm-up decelerates below it.
STEADY = 0.3
# Below this span after warm-up a rise is reported, not judged: bounded pools (an engine's paged KV cache, the
# allocator's arenas) are still being touched for the first time minutes into a run.
MIN_SPAN_S = 600.0


def slope_per_hour(points: list[Point]) -> Optional[float]:
    if len(points) < 3:
        return None
    try:
        return linear_regression(*zip(*points)).slope * 3600.0
    except StatisticsError:  # every sample at one time
        return None


def windows(points: list[Point], stat: Callable[[list[float]], float]) -> list[float]:
    """`stat` of each third of the span the points cover (empty when a third holds no point)."""
    if len(points) < 6:
        return []
    t0, t1 = points[0][0], points[-1][0]
    edges = [t0 + (t1 - t0) * k / 3 for k in (1, 2)]
    parts: list[list[float]] = [[], [], []]
    for t, v in points:
        parts[0 if t < edges[0] else 1 if t < edges[1] else 2].append(v)
    return [stat(p) for p in parts] if all(parts) else []


@dataclass
class Trend:
    unit: str
    metric: str            # anon_mib | rss_mib | fds | threads | stale_p2p
    start: Optional[float]  # the first post-warm-up value
    end: Optional[float]
    slope_per_h: Optional[float]
    windows: list[float]
    leak: bool
    why: str = ""
    too_short: bool = False  # rising, but the span after warm-up is too short to tell it from warm-up


def trend(unit: str, metric: str, points: list[Point], rule: Optional[LeakRule]) -> Trend:
    slope = slope_per_hour(points)
    wins = windows(points, min)
    tr = Trend(unit, metric, points[0][1] if points else None, points[-1][1] if points else None,
               None if slope is None else round(slope, 2), [round(w, 2) for w in wins], False)
    if rule is None or not wins or slope is None:
        return tr
    rising = wins[0] < wins[1] < wins[2]
    growth = wins[2] - wins[0]
    # Still climbing in the last third at a good part of the pace before: a curve levelling off is warm-up.
    steady = (wins[2] - wins[1]) >= STEADY * (wins[1] - wins[0])
    if rising and steady and growth >= rule.min_growth and slope >= rule.min_per_hour:
        tr.why = (f"{metric} of {unit} rose at the floor through all three windows "
                  f"({' -> '.join(f'{w:g}' for w in wins)}), {slope:+.1f}/hour")
        span = points[-1][0] - points[0][0]
        tr.leak = span >= MIN_SPAN_S
        tr.too_short = not tr.leak
        if tr.too_short:
            tr.why += f", over only {span:.0f} s after warm-up (a leak needs {MIN_SPAN_S:.0f} s to tell)"
    return tr


def trends(rows: list[Row], opts: SoakOptions) -> list[Trend]:
    """Per unit: anonymous memory, RSS (reported, not judged: it includes an L1 pool filling), fds, threads;
    fleet-wide: stale P2P work. Only samples after warm-up count."""
    post = [r for r in rows if r.t >= opts.warmup_s]
    out: list[Trend] = []
    for unit in dict.fromkeys(r.unit for r in post):
        mine = [r for r in post if r.unit == unit and r.state == "running"]
        for metric, rule in (("anon_mib", opts.rss), ("rss_mib", None), ("fds", opts.fds),
                             ("threads", opts.threads)):
            pts = [(r.t, float(getattr(r, metric))) for r in mine if getattr(r, metric) is not None]
            out.append(trend(unit, metric, pts, rule))
    by_t: dict[float, float] = {}
    for r in post:
        if r.role == "server" and r.lookup_jobs is not None:
            by_t[r.t] = by_t.get(r.t, 0.0) + r.lookup_jobs + (r.read_locks or 0)
    out.append(trend("all servers", "stale_p2p", sorted(by_t.items()), opts.stale))
    return out


def cpu_percent(rows: list[Row], unit: str, since: float) -> Optional[float]:
    """Average CPU use of a unit after `since` (100 = one core busy)."""
    pts = [(r.t, r.cpu_s) for r in rows if r.unit == unit and r.t >= since and r.cpu_s is not None]
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return round((pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]) * 100.0, 1)


@dataclass
class Minute:
    minute: int
    requests: int
    failed: int
    ttft_p50_s: Optional[float]
    ttft_p99_s: Optional[float]
    cached_share: Optional[float]  # cached / prompt tokens of the minute's successful requests


def per_minute(requests: list[RequestRecord]) -> list[Minute]:
    out = []
    for m in sorted({int(r.t_start_s // 60) for r in requests if r.stage != "warm"}):
        rs = [r for r in requests if r.stage != "warm" and int(r.t_start_s // 60) == m]
        ok = [r for r in rs if r.ok]
        ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
        prompt = sum(r.prompt_tokens for r in ok)
        p50, p99 = percentile(ttfts, 50), percentile(ttfts, 99)
        out.append(Minute(m, len(rs), len(rs) - len(ok), None if p50 is None else round(p50, 4),
                          None if p99 is None else round(p99, 4),
                          round(sum(r.cached_tokens for r in ok) / prompt, 3) if prompt else None))
    return out


def _requests(s: Soaked) -> Check:
    reqs = [r for r in s.load.snapshot() if r.stage != "warm"]
    failed = [r for r in reqs if not r.ok]
    detail = f"{len(reqs)} requests, {len(failed)} failed"
    if failed:
        f = failed[0]
        detail += f"; first at {f.t_start_s:.0f} s ({f.stage} to {f.url}): {f.error}"
    return Check("no failed request", bool(reqs) and not failed, detail)


def _proofs(s: Soaked) -> Check:
    bad = [p for p in s.proofs if not p.passed]
    detail = f"{len(s.proofs) - len(bad)} of {len(s.proofs)} passed"
    if bad:
        detail += f"; at {bad[0].t:.0f} s: {bad[0].detail}"
    return Check("cross-node proof passed every time", bool(s.proofs) and not bad, detail)


def _processes(s: Soaked) -> Check:
    problems = []
    for unit in dict.fromkeys(r.unit for r in s.sampler.rows):
        mine = [r for r in s.sampler.rows if r.unit == unit]
        pids = {r.pid for r in mine}
        down = [r for r in mine if r.state != "running"]
        if down:
            problems.append(f"{unit} was {down[0].state} at {down[0].t:.0f} s")
        elif len(pids) > 1:
            problems.append(f"{unit} restarted (pids {sorted(p for p in pids if p)})")
    return Check("every process ran throughout", not problems,
                 "; ".join(problems) or f"{len(s.sampler.units)} processes, none restarted")


def _leaks(ts: list[Trend]) -> Check:
    leaks = [t.why for t in ts if t.leak and t.metric != "stale_p2p"]
    short = [t.why for t in ts if t.too_short and t.metric != "stale_p2p"]
    detail = "; ".join(leaks) or f"{sum(t.slope_per_h is not None for t in ts)} slopes, none sustained"
    if short and not leaks:
        detail += "; not judged: " + "; ".join(short)
    return Check("no sustained leak (anonymous memory, fds, threads)", not leaks, detail)


def _stale(s: Soaked, ts: list[Trend]) -> Check:
    [st] = [t for t in ts if t.metric == "stale_p2p"] or [None]
    d = s.drained
    after = "not measured (stopped early)" if d is None else (
        f"drained in {d.drained_after_s:g} s" if d.drained else
        f"{d.inflight_at_end} still held after the load stopped ({s.inflight_at_rest_before} at rest before): "
        "LMCache keeps P2P lookup jobs and their L1 read locks that nobody finished")
    ok = st is None or not st.leak
    why = st.why if st is not None and st.leak else "the floor did not keep rising"
    return Check("stale P2P lookup jobs and read locks do not pile up (LMCache)", ok, f"{why}; {after}")


def soak_checks(s: Soaked) -> tuple[list[Check], list[Trend]]:
    ts = trends(s.sampler.rows, s.opts)
    checks = [_requests(s), _proofs(s), _processes(s), _leaks(ts), _stale(s, ts)]
    if s.stopped_early:
        checks.append(Check("ran its whole duration (not interrupted)", False, s.stopped_early))
    return checks, ts


def passed(checks: list[Check]) -> bool:
    return all(c.ok for c in checks)


def _trend_cell(t: Optional[Trend]) -> str:
    if t is None or t.start is None:
        return "-"
    return f"{t.start:g} → {t.end:g} ({fmt(t.slope_per_h, '{:+.1f}')}/h){' **LEAK**' if t.leak else ''}"


def soak_markdown(s: Soaked, checks: list[Check], ts: list[Trend], fleet: str) -> str:
    o = s.opts
    lines = [f"# Soak of fleet {fleet}: {s.wall_s / 60:.1f} min", "",
             f"{o.concurrency} client(s){' through the router' if o.via_router else ''}: shared documents, "
             f"{o.sessions} multi-turn sessions, fresh prompts; a sample every {o.sample_every_s:g} s, a "
             f"cross-node proof every {o.proof_every_s:g} s. Slopes from {o.warmup_s:g} s on (warm-up left out); "
             "a leak is a rise through three equal windows in a row (harness/soak/leaks.py).", "",
             f"**Overall: {'PASS' if passed(checks) else 'FAIL'}**", "", *check_table(checks)]
    lines += ["", "## Per process (after warm-up: first → last sample, least-squares slope)", "",
              "| process | anonymous MiB (slope) | RSS MiB | fds | threads | CPU % after warm-up |",
              "|---|---|---|---|---|---|"]
    by = {(t.unit, t.metric): t for t in ts}
    for u in s.sampler.units:
        rss = by.get((u.name, "rss_mib"))
        lines.append(f"| {u.name} | {_trend_cell(by.get((u.name, 'anon_mib')))} | "
                     f"{fmt(rss.end if rss else None)} | {_trend_cell(by.get((u.name, 'fds')))} | "
                     f"{_trend_cell(by.get((u.name, 'threads')))} | "
                     f"{fmt(cpu_percent(s.sampler.rows, u.name, o.warmup_s))} |")
    f = s.filler
    if f is not None:
        lines += ["", f"L1 fill in warm-up: every server's L1 at {f.fill or 0:.0%} of its size" +
                  (f" from {f.filled_at:g} s on (steady state: evicting)." if f.filled_at is not None else
                   " when the warm-up ended (not yet at the eviction watermark).")]
    stale = next((t for t in ts if t.metric == "stale_p2p"), None)
    lines += ["", f"Stale P2P work (lookup jobs + L1 read locks, all servers): {_trend_cell(stale)}, window "
              f"floors {stale.windows if stale else '-'}.", "", "## Per minute", "",
              "| minute | requests | failed | p50 TTFT ms | p99 TTFT ms | cached share |",
              "|---|---|---|---|---|---|"]
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
    inflight = {f"{k} {m}": v for m in ("lookup_jobs", "read_locks")
                for k, v in _series(rows, m, "server").items()}
    made = [charts.over_time(out_dir / f"soak-{name}.png", series, ylabel, title, w)
            for name, series, ylabel, title in (
                ("anon-memory", _series(rows, "anon_mib"), "anonymous memory (MiB)",
                 "Anonymous memory per process (what a leak grows)"),
                ("fds", _series(rows, "fds"), "open file descriptors", "Open fds per process"),
                ("threads", _series(rows, "threads"), "threads", "Threads per process"),
                ("p2p-inflight", inflight, "count", "P2P lookup jobs and L1 read locks per server"))]
    made.append(charts.ttft_per_minute(out_dir / "soak-ttft.png", [(m.minute, m.ttft_p50_s, m.ttft_p99_s)
                                                                   for m in per_minute(s.load.snapshot())]))
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
