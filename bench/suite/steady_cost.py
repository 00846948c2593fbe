"""The fleet's steady cost: CPU each process burns at rest, where it goes, and settings that lower it.

An idle lmcache server is not idle: NIXL's UCX progress thread polls its worker, and LMCache's periodic
notifier pulses the lookup/load eventfds every `--periodic-notifier-interval-ms` (5 ms) so the prefetch loop
re-polls. Per variant: a 2-node local fleet (one at a time: a second idle fleet would load the first), left to
settle, then CPU seconds per process over a window at rest (facts.proc_usage), the server's CPU by thread name
(facts.proc_usage.threads_fact: which thread it is), and one P2P pull per repeat on the same fleet (engine TTFT
of a prefix pulled from the peer, and of a fresh one recomputed) to show whether the setting slows pulls.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.free_ports import choose
from p2p_ops.spec.starter import local_fleet
from p2p_ops.facts.proc_usage import threads_fact
from p2p_ops.facts.sections import read_fact
from p2p_ops.harness.crossover import measure
from p2p_ops.harness.soak.sampler import sample, soak_units

SETTLE_S = {"tiny": 3.0, "quick": 10.0, "full": 15.0}
WINDOW_S = {"tiny": 5.0, "quick": 20.0, "full": 60.0}
REPEATS = {"tiny": 1, "quick": 3, "full": 5}
PULL_TOKENS = 1024

# name -> fleet-wide settings.
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "notifier 20 ms": {"server_extra_args": ["--periodic-notifier-interval-ms=20"]},
    "notifier 50 ms": {"server_extra_args": ["--periodic-notifier-interval-ms=50"]},
    "UCX_TLS=tcp": {"ucx_tls": "tcp"},
    "notifier 50 ms + UCX_TLS=tcp": {"ucx_tls": "tcp", "server_extra_args": ["--periodic-notifier-interval-ms=50"]},
}
COLS = ["variant", "server CPU %", "engine CPU %", "coordinator CPU %", "fleet CPU %", "busiest server threads",
        "TTFT pulled ms", "TTFT recompute ms", "pulled vs defaults", "cached tokens"]


def _at_rest(ctx, window_s: float) -> tuple[dict[str, float], dict[str, float]]:
    """CPU % per unit over `window_s` at rest, and the first server's CPU % by thread name."""
    units = soak_units(ctx)
    server = next(u for u in units if u.role == "server")
    before = {r.unit: r for r in sample(ctx, units, 0.0)}
    conn = ctx.conn(server.node)
    pid = before[server.name].pid
    threads0 = read_fact(conn, threads_fact(pid), timeout=30)
    t0 = time.monotonic()
    time.sleep(window_s)
    after = {r.unit: r for r in sample(ctx, units, window_s)}
    threads1 = read_fact(conn, threads_fact(pid), timeout=30)
    dt = time.monotonic() - t0
    cpu = {u: round((after[u].cpu_s - before[u].cpu_s) / dt * 100, 1) for u in before
           if before[u].cpu_s is not None and after.get(u) and after[u].cpu_s is not None}
    by_thread = {n: round((threads1.get(n, 0) - c) / dt * 100, 1) for n, c in threads0.items()}
    return cpu, by_thread


def _mean(cpu: dict[str, float], role: str) -> float:
    vals = [v for u, v in cpu.items() if u.endswith("/" + role)]
    return round(statistics.mean(vals), 1) if vals else float("nan")


def run(report) -> None:
    size = report.size
    t = report.table("steady_cost", f"The fleet's steady CPU cost at rest (2 nodes, {WINDOW_S[size]:g} s window "
                     "after settling; 100 % = one core) and a P2P pull on the same fleet", COLS, plot=None)
    report.note(t, "CPU % per process from /proc (all threads of its session); server CPU %: the mean of both "
                "servers; busiest server threads: node A's server by thread name; TTFT: engine side, medians of "
                f"{REPEATS[size]} pulls of {PULL_TOKENS} tokens (B pulls what A computed) and of as many recomputes")
    base_pull = None
    variants = VARIANTS if size == "full" else {k: VARIANTS[k] for k in ("defaults", "notifier 50 ms", "UCX_TLS=tcp")}
    for name, settings in variants.items():
        data = local_fleet(2, name="bench-idle", base=choose(2).base)
        data["settings"].update(settings)
        with launch.temporary(data) as ctx:
            measure(ctx, [256], 1)  # the first pull of a fresh fleet also sets up NIXL's connection
            time.sleep(SETTLE_S[size])
            cpu, by_thread = _at_rest(ctx, WINDOW_S[size])
            rows = measure(ctx, [PULL_TOKENS], REPEATS[size])
        pulled, recompute = rows[0].ttft_pulled_b_s * 1e3, rows[0].ttft_recompute_b_s * 1e3
        base_pull = pulled if name == "defaults" else base_pull
        top = sorted(by_thread.items(), key=lambda kv: -kv[1])[:3]
        row = {"variant": name, "server CPU %": _mean(cpu, "server"), "engine CPU %": _mean(cpu, "engine"),
               "coordinator CPU %": cpu.get("coordinator/coordinator"), "fleet CPU %": round(sum(cpu.values()), 1),
               "busiest server threads": ", ".join(f"{n} {v:g} %" for n, v in top),
               "TTFT pulled ms": pulled, "TTFT recompute ms": recompute,
               "pulled vs defaults": pulled / base_pull if base_pull else None, "cached tokens": rows[0].cached_tokens_b}
        report.add_row(t, **row)
        report.facts.setdefault("steady_cost", []).append(row)
    _advice(report, t)


def _advice(report, t) -> None:
    rows = report.facts.get("steady_cost", [])
    base = next((r for r in rows if r["variant"] == "defaults"), None)
    if not base:
        return
    for r in rows:
        if r is not base:
            report.note(t, f"{r['variant']}: servers {r['server CPU %']:g} % vs {base['server CPU %']:g} % at rest "
                        f"(fleet {r['fleet CPU %']:g} % vs {base['fleet CPU %']:g} %); pulled TTFT "
                        f"{r['pulled vs defaults']:.2f}x the defaults'")
