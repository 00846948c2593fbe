"""`p2pctl bench peers` as people read it: one table row per fleet size and scenario, and lookup ms against N.

Both take the run's JSON document (p2p_ops.bench.peers.document), so a saved peers.json redraws the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from p2p_ops.observe import charts
from p2p_ops.observe.stats import fmt

COLUMNS = ("N", "scenario", "serving peer", "cached tokens", "P2P loads", "lookup ms p50", "lookup ms p99",
           "pull ms p50", "result")
MS_KEYS = ("lookup_ms_p50", "lookup_ms_p99", "pull_ms_p50")


def scenario_text(row: dict[str, Any]) -> str:
    return row["scenario"] + (f" ({row['where']} in lookup order)" if row.get("where") else "")


def cells(row: dict[str, Any]) -> list[str]:
    result = "PASS" if row["passed"] == row["samples"] else f"FAIL {row['samples'] - row['passed']}/{row['samples']}"
    return [str(row["nodes"]), scenario_text(row), row["serving_peer"], f"{row['cached_tokens']:g} / {row['need']}",
            f"{row['load_tasks']:g}", *(fmt(row[k], "{:.1f}", none="—") for k in MS_KEYS), result]


def markdown(doc: dict[str, Any]) -> str:
    lines = [f"# Multi-peer behaviour: {'PASS' if doc['passed'] else 'FAIL'}", "",
             f"The first instance asks for a fresh prefix of {doc['chunks']} chunks and a half, held by one peer, "
             f"two peers or nobody; {doc['repeats']} repetition(s) per row (p99 of few samples is their maximum). "
             "Serving peer: LMCache's rule (lowest P2P adapter index among the holders) on the holders the "
             "coordinator's key directory shows; P2P loads: the requester's load tasks (one per peer read). Lookup: "
             "the requester engine's LMCache lookup (the P2P fan-out to every peer, and for a hit the NIXL READ); "
             "pull: lookup + retrieve.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in doc["rows"]]
    lines += ["", f"**{doc['target']['line']}**", ""]
    if doc["target"].get("why"):
        lines += [f"Why: {doc['target']['why']}.", ""]
    lines += [fleet_line(f) for f in doc.get("fleets") or []]
    for r in doc["rows"]:
        lines += [f"- N={r['nodes']} {scenario_text(r)}: {e}" for e in r["errors"]]
    lines += [f"- {n}" for n in doc.get("notes") or []]
    return "\n".join(lines).rstrip() + "\n"


def fleet_line(f: dict[str, Any]) -> str:
    """What each fleet ran on: its size, start-up seconds and the box's load (launched fleets only)."""
    t, load = f.get("timings_s") or {}, f.get("loadavg_start")
    up = f", up {t['up_s']:.0f} s + ready {t['wait_s']:.0f} s" if "up_s" in t else ""
    box = (f"; {f.get('cpus')} CPUs, load average {' '.join(map(str, load))} at start, "
           f"{' '.join(map(str, f.get('loadavg_end') or []))} at end") if load else ""
    return f"- N={f['nodes']}: fleet {f.get('fleet', '')}, profile {f.get('profile', '')}{up}{box}"


def series(rows: list[dict[str, Any]]) -> dict[str, list[tuple[int, float, float]]]:
    """Per scenario: (N, lookup p50, lookup p99), by N, rows without a lookup left out."""
    out: dict[str, list[tuple[int, float, float]]] = {}
    for r in rows:
        if r["lookup_ms_p50"] is not None:
            out.setdefault(scenario_text(r), []).append((r["nodes"], r["lookup_ms_p50"], r["lookup_ms_p99"]))
    return {k: sorted(v) for k, v in out.items()}


def lookup_plot(path: Path, rows: list[dict[str, Any]], target_ms: float = 10.0) -> str:
    """Lookup ms (p50, p99 as the bar) against the number of servers, one line per scenario, the target dashed."""
    fig, ax = charts.figure((7, 4.5))
    for name, pts in series(rows).items():
        xs, p50, p99 = [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts]
        ax.errorbar(xs, p50, yerr=[[0] * len(xs), [b - a for a, b in zip(p50, p99)]], fmt="o-", capsize=3, label=name)
    ax.axhline(target_ms, color="grey", linestyle="--", label=f"target {target_ms:g} ms")
    ax.set_xticks(sorted({r["nodes"] for r in rows}))
    charts.label(ax, "servers in the fleet (N)", "LMCache lookup (ms, p50; bar to p99)",
                 "P2P lookup latency against fleet size", fontsize=8)
    return charts.save(fig, path).name
