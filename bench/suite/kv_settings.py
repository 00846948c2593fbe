"""LMCache server settings against the KV pull: the notifier tick, server workers, the shm transport.

Each variant is a two-node fleet with fleet-wide settings (every server the same), so the shm transport
is measured with both nodes offering it and the roles swapped pull by pull: A warms and B pulls, then B
warms and A pulls. Each variant's fleet runs next to a fleet with the defaults, and every measure
alternates between the two, so a variant and its defaults share the same load (this box is shared; run
one after the other they did not: recompute TTFT alone moved by a third between two fleets). Per
variant, prefix length and direction, both warmed first:

- pull: the adapter-level P2P pull of kv_path.pull_once (lookup incl. the peer's NIXL READ, then the
  retrieve into paged KV blocks), as bytes per second end to end;
- pull / recompute: on the pulling node's engine, TTFT of the prefix pulled from the peer over TTFT of
  a fresh prefix of the same length recomputed (harness/crossover.py), i.e. pull and recompute on the
  same node.
"""

from __future__ import annotations

import random
import statistics
from typing import Any

from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle.free_ports import choose
from p2p_ops.spec.starter import local_fleet
from bench.suite.kv_path import BLOCK, CHUNK, VOCAB, Side, bytes_per_token, pull_once

LENGTHS = {"tiny": [512], "quick": [1024, 2048], "full": [1024, 2048]}
REPEATS = {"tiny": 1, "quick": 3, "full": 3}

# name -> fleet-wide settings (the fleet's defaults otherwise: pickle transport, 5 ms notifier, 1 worker).
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "notifier 1 ms": {"server_extra_args": ["--periodic-notifier-interval-ms=1"]},
    "max_workers 4": {"max_workers": 4},
    "shm transport": {"shm_transport": True},
    "shm + notifier 1 ms + 4 workers": {"shm_transport": True, "max_workers": 4,
                                        "server_extra_args": ["--periodic-notifier-interval-ms=1"]},
}
PULL_GOAL_MBPS, RATIO_GOAL = 1000.0, 0.5
COLS = ["variant", "arm", "direction", "tokens", "pull ms", "pull MB/s", "goal MB/s", "MB/s vs defaults",
        "lookup ms", "retrieve ms", "TTFT pulled ms", "TTFT recompute ms", "pull / recompute", "goal ratio",
        "ratio vs defaults", "verified"]


def _measure_arm(ctx, num_blocks: int):
    """Sides (in-process engines) on both servers of a fleet, plus the fleet's instance ids."""
    (na, ia), (nb, ib) = ctx.fleet.instances()[:2]
    sides = {}
    for iid, (node, inst) in {ia.id: (na, ia), ib.id: (nb, ib)}.items():
        sides[iid] = Side(f"tcp://{node.address}:{inst.ports.mp}", f"{iid}-set", "poll", num_blocks)
    logs = {iid: ctx.layout.log(iid, "server") for iid in sides}
    dirs = [("A warms, B pulls", ia.id, ib.id), ("B warms, A pulls", ib.id, ia.id)]
    return sides, logs, dirs


def _fleet(name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """A 2-node spec on the first free ports (the paired fleet, up by then, holds its own)."""
    data = local_fleet(2, name=name, base=choose(2).base)
    data["settings"].update(settings)
    return data


def run(report) -> None:
    from p2p_ops.harness.crossover import measure

    lengths, repeats = LENGTHS[report.size], REPEATS[report.size]
    bpt = bytes_per_token()
    t = report.table("kv_settings", "LMCache settings vs the KV pull (medians; each variant paired with a defaults "
                     "fleet measured alternately; A warms/B pulls and B warms/A pulls)", COLS, plot=None)
    report.note(t, "pull: adapter-level P2P pull (lookup + NIXL READ + retrieve into KV blocks); pull / recompute: "
                "engine TTFT on the pulling node, pulled prefix over a fresh one of the same length; "
                "vs defaults: the variant's figure over its paired defaults fleet's (MB/s: > 1 is better; "
                "ratio: < 1 is better)")
    rng = random.Random(1414)
    num_blocks = max(lengths) // BLOCK + 64
    for variant, settings in VARIANTS.items():
        if not settings:
            continue
        with launch.temporary(_fleet("bench-kvdef", {})) as base, launch.temporary(_fleet("bench-kvset", settings)) as var:
            arms = {"defaults": base, "variant": var}
            sides: dict = {}
            pulls: dict[tuple[str, str, int], list[dict]] = {}
            try:
                setup = {arm: _measure_arm(ctx, num_blocks) for arm, ctx in arms.items()}
                sides = {arm: v[0] for arm, v in setup.items()}
                for arm, (sd, logs, dirs) in setup.items():  # warm each path (REGISTER, NIXL connection)
                    for _, w, r in dirs:
                        pull_once(sd[w], sd[r], [rng.randrange(VOCAB) for _ in range(CHUNK + 1)], logs[r])
                for n in lengths:
                    for _ in range(repeats):
                        for arm, (sd, logs, dirs) in setup.items():
                            for label, w, r in dirs:
                                pulls.setdefault((arm, label, n), []).append(
                                    pull_once(sd[w], sd[r], [rng.randrange(VOCAB) for _ in range(n + 1)], logs[r]))
                transport = {arm: next(iter(sd.values())).transport for arm, sd in sides.items()}
            finally:
                for sd in sides.values():
                    for s in sd.values():
                        s.close()
            for arm, (_, _, dirs) in setup.items():  # warm both engines' paths
                for _, w, r in dirs:
                    measure(arms[arm], [min(lengths)], 1, a=w, b=r)
            ttft: dict[tuple[str, str, int], list] = {}
            for n in lengths:
                for _ in range(repeats):
                    for arm, (_, _, dirs) in setup.items():
                        for label, w, r in dirs:
                            ttft.setdefault((arm, label, n), []).extend(measure(arms[arm], [n], 1, a=w, b=r))
        figures = {}
        for (arm, label, n), rows in pulls.items():
            pull_ms = statistics.median(x["e2e"] for x in rows) * 1e3
            tr = ttft[(arm, label, n)]
            pulled = statistics.median(x.ttft_pulled_b_s for x in tr) * 1e3
            recompute = statistics.median(x.ttft_recompute_b_s for x in tr) * 1e3
            figures[(arm, label, n)] = {
                "variant": variant, "arm": f"{arm} ({transport[arm]})", "direction": label, "tokens": n,
                "pull ms": pull_ms, "pull MB/s": n * bpt / (pull_ms / 1e3) / 1e6, "goal MB/s": f">= {PULL_GOAL_MBPS:.0f}",
                "lookup ms": statistics.median(x["lookup"] for x in rows) * 1e3,
                "retrieve ms": statistics.median(x["retrieve"] for x in rows) * 1e3,
                "TTFT pulled ms": pulled, "TTFT recompute ms": recompute,
                "pull / recompute": pulled / recompute, "goal ratio": f"<= {RATIO_GOAL}",
                "verified": f"{sum(x['ok'] for x in rows)}/{len(rows)}"}
        for (arm, label, n), row in figures.items():
            d = figures[("defaults", label, n)]
            row["MB/s vs defaults"] = row["pull MB/s"] / d["pull MB/s"]
            row["ratio vs defaults"] = row["pull / recompute"] / d["pull / recompute"]
            report.add_row(t, **row)
            report.facts.setdefault("kv_settings", []).append(row)
    _verdict(report)


def _verdict(report) -> None:
    """Per variant, the median over both directions and both lengths, next to its paired defaults'."""
    rows = report.facts.get("kv_settings", [])
    by: dict[str, list[dict]] = {}
    for r in rows:
        if not r["arm"].startswith("defaults"):
            by.setdefault(r["variant"], []).append(r)
    for v, rs in by.items():
        m = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        report.note(report.tables["kv_settings"],
                    f"{v}: pull {m('pull MB/s'):.0f} MB/s = {m('MB/s vs defaults'):.2f}x its paired defaults "
                    f"(goal >= {PULL_GOAL_MBPS:.0f} MB/s); pull / recompute {m('pull / recompute'):.2f} = "
                    f"{m('ratio vs defaults'):.2f}x its paired defaults' (goal <= {RATIO_GOAL}); medians over both "
                    "directions and lengths")
