"""What a GPU fleet would see: this box's measured pull beside a named timing profile's emulated prefill.

`calibrate` measures TTFT on node B for a pulled prefix and for the same length recomputed. On a CPU box the
recompute leg is the CPU's (or the emulation's, when the engines run a profile); the pull leg is the real
LMCache/NIXL path. A GPU operator's question is different: "with this transport, from which prefix does a
pull beat my GPU's prefill?" So the projection keeps the measured pull and replaces the recompute with the
profile's prefill (p2p_runtime.timing_profiles, fitted to llm-d's H200 figures), and also shows the profile's
own published pull. Every figure says whether it was measured or emulated.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from p2p_runtime.timing_profiles import TimingProfile, fit_line


def first_lasting_win(lengths: list[int], wins: list[bool]) -> Optional[int]:
    """None: the last one loses."""
    for i, n in enumerate(lengths):
        if all(wins[i:]):
            return n
    return None


def pull_fit(rows: list[dict]) -> Optional[dict[str, float]]:
    points = tuple((r["tokens"], r["ttft_pulled_b_s"] * 1000) for r in rows if r["cached_tokens_b"] > 0)
    if len({n for n, _ in points}) < 2:
        return None
    fixed, per_token_ms = fit_line(points)
    return {"fixed_ms": fixed, "us_per_token": per_token_ms * 1000}


def project(rows: list[dict], profile: TimingProfile, bytes_per_token: Optional[int] = None) -> dict[str, Any]:
    """Per length the measured pull against the profile's emulated prefill, the lasting crossover, the profile's
    own (published) crossover, and the measured cause when the pull does not pay. With the fleet's KV bytes per
    token, the published pull is scaled to them (the emulated prefill stays the profile's model)."""
    weigh = {"bytes_per_token": bytes_per_token} if bytes_per_token else {}
    table = [{"tokens": r["tokens"], "pull_measured_ms": r["ttft_pulled_b_s"] * 1000,
              "prefill_emulated_ms": profile.prefill_ms(r["tokens"]),
              "pull_published_ms": profile.pull_ms(r["tokens"], **weigh) if profile.has_pull else None,
              "pulled": r["cached_tokens_b"] > 0, "fallbacks_b": r.get("fallbacks_b") or {},
              "evictions_a": r.get("evictions_a") or 0} for r in rows]
    wins = [t["pulled"] and t["pull_measured_ms"] < t["prefill_emulated_ms"] for t in table]
    published = profile.crossover_tokens
    fit = pull_fit(rows)
    return {"profile": profile.name, "rows": table,
            "min_pull_tokens": first_lasting_win([t["tokens"] for t in table], wins) if table else None,
            "published_min_pull_tokens": None if published is None or math.isinf(published) else round(published),
            "pull_fit": fit, "cause": cause(fit, profile, table, bytes_per_token)}


def cause(fit: Optional[dict[str, float]], profile: TimingProfile, table: list[dict],
          bytes_per_token: Optional[int] = None) -> str:
    if not profile.emulated:
        return "no GPU profile: the recompute leg is this box's CPU, so the crossover says nothing about a GPU"
    if not table:
        return "nothing measured"
    if not all(t["pulled"] for t in table):
        return missed_cause([t for t in table if not t["pulled"]])
    if fit is None:
        return "one length only: measure two or more to split the pull into round trips and bandwidth"
    p, f, t = profile.prefill_us_per_token, fit["fixed_ms"], fit["us_per_token"]
    rate = (f", {bytes_per_token / t:,.0f} MB/s of {bytes_per_token // 1024} KiB tokens"
            if bytes_per_token and t > 0 else "")
    if t >= p:
        return (f"per-token cost: each pulled token costs {t:.1f} us here{rate}, more than the profile's {p:.1f} "
                f"us/token prefill, so the pull loses at every length; this box's pull path is the limit "
                + (f"({t / profile.pull_us_per_token:.1f}x the profile's {profile.transport} "
                   f"{profile.pull_us_per_token:.1f} us/token)" if profile.has_pull else ""))
    breakeven = f * 1000 / (p - t) if f > 0 else 0
    return (f"round trips: a pull costs {f:.0f} ms fixed + {t:.1f} us/token here{rate}, so it pays from about "
            f"{breakeven:,.0f} tokens against the profile's {p:.1f} us/token prefill")


def missed_cause(missed: list[dict]) -> str:
    lengths = [t["tokens"] for t in missed]
    oom = {t["tokens"]: t["fallbacks_b"] for t in missed if t.get("fallbacks_b")}
    if oom:
        shown = "; ".join(f"{n} tokens: " + ", ".join(f"{r}={v:g}" for r, v in sorted(f.items()))
                          for n, f in oom.items())
        return (f"no P2P hit at {lengths} tokens: the reader's prefetches fell back to recompute ({shown}); "
                "l1_oom means its L1 could not hold the restore buffers: raise settings.l1_size_gb or measure "
                "shorter prefixes")
    evicted = {t["tokens"]: t["evictions_a"] for t in missed if t.get("evictions_a")}
    if evicted:
        return (f"no P2P hit at {lengths} tokens: the holder's L1 evicted during the measurement ("
                + ", ".join(f"{n} tokens: {v:g} eviction pass(es)" for n, v in evicted.items())
                + "): raise settings.l1_size_gb or measure shorter prefixes")
    return (f"no P2P hit at {lengths} tokens, and no fallback or eviction was counted: cause not confirmed "
            "(run `p2pctl test basic`, which explains a miss)")


def markdown(proj: dict[str, Any], describe: str) -> list[str]:
    lines = [f"What a GPU fleet would see, timing profile {describe}:", "",
             "| Prefix tokens | Pull, measured here (ms) | Prefill, emulated (ms) | The profile's own "
             "pull at this fleet's KV bytes, published fit (ms) | Pull pays |", "|---|---|---|---|---|"]
    for t in proj["rows"]:
        own = f"{t['pull_published_ms']:.0f}" if t["pull_published_ms"] is not None else "n/a"
        pays = "yes" if t["pulled"] and t["pull_measured_ms"] < t["prefill_emulated_ms"] else "no"
        lines.append(f"| {t['tokens']} | {t['pull_measured_ms']:.0f} | {t['prefill_emulated_ms']:.0f} | {own} | "
                     f"{pays} |")
    return lines + ["", f"Measured cause: {proj['cause']}.", ""]
