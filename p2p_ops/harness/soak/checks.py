"""The soak's verdict: no failed request, every cross-node proof passed, every process ran throughout, no
sustained leak in any process, and no stale P2P work piling up in LMCache."""

from __future__ import annotations

from p2p_ops.harness.soak.runner import Soaked
from p2p_ops.harness.soak.verdict import Trend, trends
from p2p_ops.observe.report import Check


def _requests(s: Soaked) -> Check:
    reqs = [r for r in s.load.snapshot() if r.stage != "warm"]
    failed = [r for r in reqs if not r.ok]
    detail = f"{len(reqs)} requests, {len(failed)} failed"
    if failed:
        detail += f"; first at {failed[0].t_start_s:.0f} s ({failed[0].stage} to {failed[0].url}): {failed[0].error}"
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
