"""`bench placement`'s answer: which placement to run for the measured workload, and why P2P's margin under a
policy fell below 1, from what the run measured (pure functions over its arms and turns).

A margin below 1 has few measurable causes here: failed requests, no pull happened (the policy kept sessions on
their owner; a P2P server's transfer channel still busy-polls a core), pulls replaced no recompute, the pulls'
work slowed the shared cores (recomputed turns got slower too), or a pulled prefix cost more than the prefill
it saved. Each is named with the run's own figures; what is left is run-to-run variation.
"""

from __future__ import annotations

import statistics
from typing import Any, Optional

from p2p_runtime.timing_profiles import TimingProfile

# Below this difference a margin is run-to-run variation on a shared box (bench/README.md: runs swing ~10 %).
NOISE = 0.10
SLOWER = 1.2


def _p50(turns: list[dict], hit: bool) -> Optional[float]:
    ms = [t["ttft_s"] * 1000 for t in turns if t["ok"] and (t["cached_tokens"] > 0) == hit]
    return statistics.median(ms) if ms else None


def _ms(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:,.0f} ms"


def explain(on: Any, off: Any, on_turns: list[dict], off_turns: list[dict], profile: TimingProfile) -> str:
    hit_on, hit_off = _p50(on_turns, True), _p50(off_turns, True)
    cold_on, cold_off = _p50(on_turns, False), _p50(off_turns, False)
    saved = off.recomputed_tokens - on.recomputed_tokens
    figures = (f"{on.peer_tokens:,} tokens pulled; recomputed {on.recomputed_tokens:,} vs {off.recomputed_tokens:,} "
               f"tokens; TTFT p50 of cache hits {_ms(hit_on)} vs {_ms(hit_off)}, of recomputes {_ms(cold_on)} vs "
               f"{_ms(cold_off)} (P2P on vs off)")
    if on.failed > off.failed:
        why = f"{on.failed} requests failed with P2P on ({off.failed} off)"
    elif on.peer_tokens == 0:
        why = "no pull happened: the policy kept each session where its document was, so P2P added only lookups"
        if cold_on and cold_off and cold_on > SLOWER * cold_off:
            why += (f", yet recomputes took {cold_on / cold_off:.1f}x longer with P2P on: each server's NIXL transfer "
                    "channel busy-polls a core (nixl 1.5.1), which a small box takes from the engines")
    elif saved <= 0:
        why = ("the pulls replaced no recompute: every pulled document would have been a local hit or was "
               "recomputed anyway")
    elif cold_on and cold_off and cold_on > SLOWER * cold_off:
        why = (f"the shared cores were busier with P2P on: recomputed turns took {cold_on / cold_off:.1f}x longer, "
               "so the servers' transfer work competed with the engines' compute")
    elif hit_on and hit_off and hit_on > SLOWER * hit_off:
        why = (f"a pulled document cost more than a local hit ({_ms(hit_on)} vs {_ms(hit_off)} p50), more than the "
               f"~{profile.prefill_ms(saved) / 1000:,.1f} s of {profile.name} prefill its {saved:,} saved tokens "
               "were worth")
    else:
        why = f"within run-to-run variation on this shared box (under {NOISE:.0%})"
    return f"{why} ({figures})"


def recommend(results: list, margins: dict[str, dict], workload: Any, profile: TimingProfile) -> str:
    """The arm with the most served req/s among those without failures, and whether P2P pays under it."""
    ok = [r for r in results if not r.error and not r.failed and r.turns]
    if not ok:
        return "none: no arm finished without failures"
    best = max(ok, key=lambda r: (r.req_per_s, -r.ttft_p50_ms))
    m = margins.get(best.policy)
    p2p = "on" if best.p2p else "off"
    line = (f"for document Q&A with {workload.doc_tokens}-token documents ({workload.sessions} sessions, "
            f"{workload.inflight} in flight), timing profile {profile.name}: run {best.policy} with P2P {p2p} "
            f"({best.req_per_s:.2f} req/s, TTFT p50 {best.ttft_p50_ms:,.0f} ms)")
    if m and not best.p2p:
        line += (f"; P2P does not pay under it here ({m['throughput_x']:.2f}x req/s): `p2pctl calibrate --timing "
                 f"{profile.name}` gives the prefix length from which it would")
    elif m:
        line += f"; P2P adds {m['throughput_x']:.2f}x req/s under it"
    return line


def below_one(margins: dict[str, dict]) -> list[str]:
    return [p for p, v in margins.items() if min(v["throughput_x"], v["ttft_p50_x"]) < 1]


def explanations(results: list, margins: dict[str, dict], turns: list[dict], profile: TimingProfile) -> dict[str, str]:
    # Turns carry their arm's label.
    out = {}
    for policy in below_one(margins):
        on, off = (next(r for r in results if r.policy == policy and r.p2p == p and not r.error) for p in (True, False))
        arm = {p: [t for t in turns if t.get("arm") == f"{policy}-p2p-{p}"] for p in ("on", "off")}
        out[policy] = explain(on, off, arm["on"], arm["off"], profile)
    return out
