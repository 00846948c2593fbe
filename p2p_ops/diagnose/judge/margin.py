"""Why a measured P2P margin is what it is (pure): placement's P2P margin under a policy (`placement`) and
calibrate's pull-versus-prefill crossover (`crossover`, `missed`), each a cause of the catalogue decided from the
run's own figures, given as (its words, its verdict). A margin the figures do not explain is "run-to-run
variation", never a guess.
"""

from __future__ import annotations

from typing import Any, Optional

from p2p_ops.causes import CAUSES, Verdict, verdict
from p2p_ops.endpoints.metrics_api import PREFETCH_REASONS
from p2p_ops.observe.stats import median

# A margin's cause: its words (what the figures show, and the fix where they confirm it) and its verdict.
Said = tuple[str, Optional[Verdict]]

# Below this difference a margin is run-to-run variation on a shared box (bench/README.md: runs swing ~10 %).
NOISE = 0.10
# A leg this much slower with P2P on than off is slowed by P2P's work, not by variation.
SLOWER = 1.2


def _ttft_p50(turns: list[dict], hit: bool) -> Optional[float]:
    return median(t["ttft_s"] * 1000 for t in turns if t["ok"] and (t["cached_tokens"] > 0) == hit)


def _ms(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:,.0f} ms"


def placement(on: Any, off: Any, on_turns: list[dict], off_turns: list[dict], profile: Any) -> Said:
    """Why P2P's margin under one placement policy fell below 1, from the arms' figures (`on`, `off`: their
    aggregates) and turns, with the catalogue's fix where the figures confirm the cause."""
    hit_on, hit_off = _ttft_p50(on_turns, True), _ttft_p50(off_turns, True)
    cold_on, cold_off = _ttft_p50(on_turns, False), _ttft_p50(off_turns, False)
    slower = cold_on / cold_off if cold_on and cold_off else 0.0   # recomputes with P2P on vs off
    saved = off.recomputed_tokens - on.recomputed_tokens
    figures = (f"{on.peer_tokens:,} tokens pulled; recomputed {on.recomputed_tokens:,} vs "
               f"{off.recomputed_tokens:,} tokens; TTFT p50 of cache hits {_ms(hit_on)} vs {_ms(hit_off)}, of "
               f"recomputes {_ms(cold_on)} vs {_ms(cold_off)} (P2P on vs off)")
    if on.failed > off.failed:
        return said("failed_requests", f"{on.failed} requests failed with P2P on ({off.failed} off) ({figures})")
    if on.peer_tokens == 0 and (moved := _recomputed_later(on_turns)):
        return said("moved_unserved", (
            f"no pull happened, yet {moved} later turn(s) recomputed their document with P2P on: they went to "
            "another node than their document's and no peer served it; the cause is not confirmed here "
            f"(`p2pctl test basic` on the P2P fleet names it) ({figures})"))
    if on.peer_tokens == 0:
        why = ("no pull happened: every later turn hit its document's cache, so the policy kept each session "
               "where its document was, and P2P added only lookups")
        if slower > SLOWER:
            return said("channel_poll", (
                f"{why}, yet recomputes took {slower:.1f}x longer with P2P on: each server's NIXL "
                f"transfer channel busy-polls a core (nixl 1.5.1), which a small box takes from the engines "
                f"({figures})"))
        return said("no_pull_needed", f"{why} ({figures})")
    if saved <= 0:
        return said("pull_replaced_nothing", (
            "the pulls replaced no recompute: every pulled document would have been a local hit or was "
            f"recomputed anyway ({figures})"))
    if slower > SLOWER:
        return said("cores_contended", (
            f"the shared cores were busier with P2P on: recomputed turns took {slower:.1f}x longer, "
            f"so the servers' transfer work competed with the engines' compute ({figures})"))
    if hit_on and hit_off and hit_on > SLOWER * hit_off:
        return said("pull_costlier", (
            f"a pulled document cost more than a local hit ({_ms(hit_on)} vs {_ms(hit_off)} p50), more than the "
            f"~{profile.prefill_ms(saved) / 1000:,.1f} s of {profile.name} prefill its {saved:,} saved tokens "
            f"were worth ({figures})"))
    return said("variation", f"within run-to-run variation on this shared box (under {NOISE:.0%}) ({figures})")


def said(cause: str, text: str, subject: str = "run") -> Said:
    """A margin's cause in words, with the catalogue's fix where its evidence confirms it, and its verdict."""
    v = verdict(cause, subject, ("the run's figures", text))
    return (f"{text}; fix: {v.fix}" if v.confirmed else text), v


def _recomputed_later(turns: list[dict]) -> int:
    """Turns after the first of their session (document) that found none of it cached."""
    first: dict[str, float] = {}
    for t in turns:
        first[t["prefix_id"]] = min(first.get(t["prefix_id"], t["t_start_s"]), t["t_start_s"])
    return sum(1 for t in turns if t["ok"] and t["cached_tokens"] == 0 and t["t_start_s"] > first[t["prefix_id"]])


def crossover(fit: Optional[dict[str, float]], profile: Any, table: list[dict],
              bytes_per_token: Optional[int] = None) -> Said:
    """What limits calibrate's crossover: a profile that says nothing about a GPU, a miss (`missed`), one length
    only, the per-token pull cost, or the pull's fixed round trips."""
    if not profile.emulated:
        return said("no_gpu_profile", "no GPU profile: the recompute leg is this box's CPU, so the crossover says "
                    "nothing about a GPU")
    if not table:
        return "nothing measured", None
    if not all(t["pulled"] for t in table):
        return missed([t for t in table if not t["pulled"]])
    if fit is None:
        return "one length only: measure two or more to split the pull into round trips and bandwidth", None
    p, f, t = profile.prefill_us_per_token, fit["fixed_ms"], fit["us_per_token"]
    rate = (f", {bytes_per_token / t:,.0f} MB/s of {bytes_per_token // 1024} KiB tokens"
            if bytes_per_token and t > 0 else "")
    if t >= p:
        return said("per_token_cost", (
            f"per-token cost: each pulled token costs {t:.1f} us here{rate}, more than the profile's {p:.1f} "
            f"us/token prefill, so the pull loses at every length; this box's pull path is the limit "
            + (f"({t / profile.pull_us_per_token:.1f}x the profile's {profile.transport} "
               f"{profile.pull_us_per_token:.1f} us/token)" if profile.has_pull else "")))
    breakeven = f * 1000 / (p - t) if f > 0 else 0
    return said("round_trips", f"round trips: a pull costs {f:.0f} ms fixed + {t:.1f} us/token here{rate}, so it "
                f"pays from about {breakeven:,.0f} tokens against the profile's {p:.1f} us/token prefill")


def missed(rows: list[dict]) -> Said:
    """Why calibrate saw no P2P hit at these lengths: the reader's prefetch fallbacks, else the holder's evictions,
    counted during the measurement; "not confirmed" when neither was."""
    lengths = [t["tokens"] for t in rows]
    oom = {t["tokens"]: t["fallbacks_b"] for t in rows if t.get("fallbacks_b")}
    if oom:
        shown = "; ".join(f"{n} tokens: " + ", ".join(f"{r}={v:g}" for r, v in sorted(f.items()))
                          for n, f in oom.items())
        reasons = [r if r in PREFETCH_REASONS else "prefetch_fallback" for r in sorted({r for f in oom.values()
                                                                                        for r in f})]
        text, v = said(reasons[0], f"no P2P hit at {lengths} tokens: the reader's prefetches fell back to recompute "
                       f"({shown})", "reader")
        return text + "".join(f"; {r}: {CAUSES[r].fix}" for r in reasons[1:]) + " (or measure shorter prefixes)", v
    evicted = {t["tokens"]: t["evictions_a"] for t in rows if t.get("evictions_a")}
    if evicted:
        return said("evicted", f"no P2P hit at {lengths} tokens: the holder's L1 evicted during the measurement ("
                    + ", ".join(f"{n} tokens: {v:g} eviction pass(es)" for n, v in evicted.items()) + ")", "holder")
    return said("no_pull_seen", f"no P2P hit at {lengths} tokens, and no fallback or eviction was counted: cause "
                "not confirmed (run `p2pctl test basic`, which explains a miss)")
