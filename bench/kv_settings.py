"""LMCache server settings against the KV pull: the notifier tick, server workers, the shm transport.

Each variant is a fresh two-node fleet with fleet-wide settings (every server the same), so the shm
transport is measured with both nodes offering it and the roles swapped pull by pull: A warms and B
pulls, then B warms and A pulls. Per variant and prefix length, two measures, both warmed first:

- pull: the adapter-level P2P pull of kv_path.pull_once (lookup incl. the peer's NIXL READ, then the
  retrieve into paged KV blocks), as bytes per second end to end;
- pull / recompute: on the pulling node's engine, TTFT of the prefix pulled from the peer over TTFT of
  a fresh prefix of the same length recomputed (harness/crossover.py), i.e. pull and recompute on the
  same node.

Variants run one after the other (each needs its own fleet), so they do not share load the way the
interleaved sides of kv_path do: every row carries the load average it ran under.
"""

from __future__ import annotations

import random
import statistics
from typing import Any

from bench.kv_path import BLOCK, CHUNK, VOCAB, Side, bytes_per_token, pull_once
from bench.localfleet import local_fleet

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
COLS = ["variant", "direction", "tokens", "pull ms", "pull MB/s", "goal MB/s", "lookup ms", "retrieve ms",
        "TTFT pulled ms", "TTFT recompute ms", "pull / recompute", "goal ratio", "verified"]


def run(report) -> None:
    from p2p_ops.harness.crossover import measure

    lengths, repeats = LENGTHS[report.size], REPEATS[report.size]
    bpt = bytes_per_token()
    t = report.table("kv_settings", "LMCache settings vs the KV pull (medians; A warms/B pulls and B warms/A pulls)",
                     COLS, plot=None)
    report.note(t, "pull: adapter-level P2P pull (lookup + NIXL READ + retrieve into KV blocks); pull / recompute: "
                "engine TTFT on the pulling node, pulled prefix over a fresh one of the same length")
    rng = random.Random(1414)
    num_blocks = max(lengths) // BLOCK + 64
    for variant, settings in VARIANTS.items():
        with local_fleet(2, name="bench-kvset", settings=settings) as ctx:
            (na, ia), (nb, ib) = ctx.fleet.instances()[:2]
            insts = {ia.id: (na, ia), ib.id: (nb, ib)}
            sides = {}
            try:
                for iid, (node, inst) in insts.items():
                    sides[iid] = Side(f"tcp://{node.address}:{inst.ports.mp}", f"{iid}-set", "poll", num_blocks)
                logs = {iid: ctx.layout.log(iid, "server") for iid in insts}
                # (label, writer/warmer, reader/puller)
                dirs = [("A warms, B pulls", ia.id, ib.id), ("B warms, A pulls", ib.id, ia.id)]
                for _, w, r in dirs:  # warm each path (REGISTER, NIXL connection) before timing
                    pull_once(sides[w], sides[r], [rng.randrange(VOCAB) for _ in range(CHUNK + 1)], logs[r])
                pulls: dict[tuple[str, int], list[dict]] = {}
                for n in lengths:
                    for _ in range(repeats):
                        for label, w, r in dirs:
                            pulls.setdefault((label, n), []).append(
                                pull_once(sides[w], sides[r], [rng.randrange(VOCAB) for _ in range(n + 1)], logs[r]))
            finally:
                for s in sides.values():
                    s.close()
            measure(ctx, [min(lengths)], 1, a=ia.id, b=ib.id)  # warm both engines' paths
            measure(ctx, [min(lengths)], 1, a=ib.id, b=ia.id)
            ttft: dict[tuple[str, int], list] = {}
            for n in lengths:
                for _ in range(repeats):
                    for label, w, r in dirs:
                        ttft.setdefault((label, n), []).extend(measure(ctx, [n], 1, a=w, b=r))
            transport = sides[ib.id].transport
            for (label, n), rows in pulls.items():
                pull_ms = statistics.median(x["e2e"] for x in rows) * 1e3
                tr = ttft[(label, n)]
                pulled = statistics.median(x.ttft_pulled_b_s for x in tr) * 1e3
                recompute = statistics.median(x.ttft_recompute_b_s for x in tr) * 1e3
                row = {"variant": f"{variant} ({transport})", "direction": label, "tokens": n, "pull ms": pull_ms,
                       "pull MB/s": n * bpt / (pull_ms / 1e3) / 1e6, "goal MB/s": f">= {PULL_GOAL_MBPS:.0f}",
                       "lookup ms": statistics.median(x["lookup"] for x in rows) * 1e3,
                       "retrieve ms": statistics.median(x["retrieve"] for x in rows) * 1e3,
                       "TTFT pulled ms": pulled, "TTFT recompute ms": recompute,
                       "pull / recompute": pulled / recompute, "goal ratio": f"<= {RATIO_GOAL}",
                       "verified": f"{sum(x['ok'] for x in rows)}/{len(rows)}"}
                report.add_row(t, **row)
                report.facts.setdefault("kv_settings", []).append(row)
    _verdict(report)


def _verdict(report) -> None:
    """Per variant, the median over both directions and all lengths, next to the defaults'."""
    rows = report.facts.get("kv_settings", [])
    if not rows:
        return
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["variant"], []).append(r)
    summary = {v: (statistics.median(r["pull MB/s"] for r in rs), statistics.median(r["pull / recompute"] for r in rs))
               for v, rs in by.items()}
    base = next(iter(summary.values()))
    for v, (mbps, ratio) in summary.items():
        report.note(report.tables["kv_settings"],
                    f"{v}: pull {mbps:.0f} MB/s ({mbps / base[0]:.2f}x the defaults; goal >= {PULL_GOAL_MBPS:.0f}), "
                    f"pull / recompute {ratio:.2f} (goal <= {RATIO_GOAL}), medians over both directions and lengths")
