"""Pull-vs-recompute calibration: the shortest shared prefix worth pulling from a peer, and the router's
cache threshold to match (llm-d calibrates `minCachedTokenDelta` the same way, reference section 10).

Both legs run on the same node B: a fresh prompt computed on A and then served on B (pulled), and another fresh
prompt computed cold on B (recomputed); fresh prompts per length and repetition, medians per length. A length
whose measurement fails is recorded and skipped; the rows before it are kept. Lengths over the engines' context
are skipped and said so. One named timing profile (p2p_runtime.timing_profiles) answers the GPU question beside
the measured one (`project`).

On a CPU box the recompute leg is the CPU's (or the emulation's, when the engines run a profile); the pull leg is
the real LMCache/NIXL path. A GPU operator asks "with this transport, from which prefix does a pull beat my GPU's
prefill?", so the projection keeps the measured pull, replaces the recompute with the profile's prefill (fitted to
llm-d's H200 figures), and also shows the profile's own published pull. Every figure says whether it was measured
or emulated.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Optional

from p2p_ops import files
from p2p_ops.diagnose.judge import margin
from p2p_ops.harness import crossover
from p2p_ops.lifecycle import launch
from p2p_ops.lifecycle import status as fleet_status
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.lifecycle.free_ports import choose
from p2p_ops.observe import bench_plots
from p2p_ops.observe.stats import finite, median, span, straddles, with_spread
from p2p_ops.spec.starter import local_fleet
from p2p_ops.spec.transfer_sizes import fleet_size_plan, l1_shortfall, size_plan
from p2p_runtime.profiles import TINY
from p2p_runtime.timing_profiles import DEFAULT, TIMING_PROFILES, TimingProfile, fit_line, match

LENGTHS = (256, 512, 1024, 2048, 4096, 6144)
QUICK_LENGTHS = (256, 512, 1024, 2048, 4096)
# The byte-level engine spends one token per character plus BOS, and the answer needs one more.
_CONTEXT_MARGIN = 2


def advice(rows: list, doc_tokens: int, bytes_per_token: Optional[int] = None, chunk_tokens: int = 256,
           page_size: int = 65536) -> dict:
    """The shortest length from which the pull wins at every longer length, and the cache-aware threshold (the
    fraction of a typical request such a prefix is); with the fleet's bytes per token, also what that prefix
    weighs on the wire (the sizes `bench transfer` sweeps)."""
    wins = [r.ttft_pulled_b_s < r.ttft_recompute_b_s and r.cached_tokens_b > 0 for r in rows]
    first = first_lasting_win([r.tokens for r in rows], wins)
    out = {"min_pull_tokens": first, "doc_tokens": doc_tokens,
           "cache_threshold": round(min(1.0, first / doc_tokens), 2) if first is not None and doc_tokens else None}
    if bytes_per_token and first is not None and first >= chunk_tokens:
        sizes = size_plan(bytes_per_token, chunk_tokens, first, page_size)
        out.update(chunk_bytes=sizes.chunk_bytes, min_pull_bytes=sizes.prefix_bytes)
    return out


def prompt_limit(ctx: FleetContext) -> Optional[int]:
    """The longest prefix the engines take (prompt + one generated token); None when the model decides."""
    context = ctx.fleet.vllm.max_model_len if ctx.fleet.runtime == "vllm" else ctx.fleet.engine.max_model_len
    return context - _CONTEXT_MARGIN if context else None


def timing_doc(ctx: FleetContext, name: Optional[str]) -> dict[str, Any]:
    """Which profile the engines run (a profile name, `off` for vLLM's real compute, or `custom`) and which one
    the projection uses: --timing's, else the engines' own when it emulates a GPU, else the default (the one
    `bench placement` runs), so a fleet at CPU speed still gets the GPU answer."""
    engines = "off" if ctx.fleet.runtime == "vllm" else match(ctx.fleet.engine.model_dump()) or "custom"
    own = TIMING_PROFILES.get(engines)
    name = name or (engines if own and own.emulated else DEFAULT)
    return {"engines": engines, "profile": name, "describe": TIMING_PROFILES[name].describe(),
            "settings": TIMING_PROFILES[name].engine_settings()}


def check_running(ctx: FleetContext) -> None:
    # The router is not needed: the measure talks to the engines.
    fleet_status.require_ready(ctx, "or pass --launch to measure on a temporary local fleet")


def run(ctx: FleetContext, out_dir: Path, lengths: list[int], repeats: int, seed: Optional[int],
        doc_tokens: Optional[int], progress: Callable[[str], None] = lambda _: None,
        launched: Optional[dict[str, Any]] = None, timing: Optional[str] = None) -> dict[str, Any]:
    """The run's document, also written as crossover.json. `launched` (ports, timings): the fleet was started for
    this run; `timing`: the profile to project with (default: the one the engines run)."""
    files.make_dirs(out_dir)
    seed = seed if seed is not None else int(time.time()) % 10**6
    limit = prompt_limit(ctx)
    skipped = sorted(n for n in lengths if limit is not None and n > limit)
    if skipped:
        progress(f"skipping {skipped}: longer than the engines' context ({limit} prompt tokens fit)")
    # A length whose restore buffers cannot fit the reader's L1 would "miss" for that reason alone.
    for n in sorted(set(lengths) - set(skipped)):
        if why := l1_shortfall(ctx.fleet, n):
            skipped.append(n)
            progress(f"skipping {n}: {why}")
    rows, failures = [], []
    times = timing_doc(ctx, timing)
    progress(f"timing profile {times['describe']}")
    doc_tokens = doc_tokens or max(lengths)
    plan = fleet_size_plan(ctx.fleet, max(doc_tokens, ctx.fleet.settings.chunk_size))

    def record() -> dict[str, Any]:
        adv = advice(rows, doc_tokens, plan.bytes_per_token, plan.chunk_tokens, ctx.fleet.settings.l1_align_bytes)
        doc = document(ctx, rows, failures, skipped, adv, repeats, launched, times)
        files.write_json(out_dir / "crossover.json", doc)
        files.write_text(out_dir / "summary.md", summary(doc))
        if rows:
            bench_plots.crossover(out_dir / "crossover.png", rows)
        return doc

    doc = record()
    for n in sorted(set(lengths) - set(skipped)):
        try:
            rows += crossover.measure(ctx, [n], repeats, seed, progress)
        except Exception as exc:  # noqa: BLE001 - finished rows are kept; the failure is recorded
            failures.append({"tokens": n, "error": f"{type(exc).__name__}: {exc}"[:300]})
            progress(f"{n} tokens failed: {exc}")
        doc = record()
    return doc


def run_launched(out_dir: Path, lengths: list[int], repeats: int, seed: Optional[int], doc_tokens: Optional[int],
                 port_offset: Optional[int] = None, progress: Callable[[str], None] = lambda _: None,
                 timing: str = DEFAULT, profile: str = TINY) -> dict[str, Any]:
    """`run` on a temporary 2-node local fleet under out_dir/fleet (its logs stay), its engines running the
    `timing` profile and storing KV at `profile`'s geometry (so the measured pull moves that model's bytes)."""
    ports = choose(2, port_offset)
    progress(ports.line())
    data = local_fleet(2, name="calibrate", base=ports.base, profile=profile)
    data["engine"].update(TIMING_PROFILES[timing].engine_settings())
    timings: dict[str, float] = {}
    with launch.temporary(data, out_dir / "fleet", timings, progress) as ctx:
        progress(f"fleet up in {timings['up_s']:.1f} s, ready {timings['wait_s']:.1f} s later")
        return run(ctx, out_dir, lengths, repeats, seed, doc_tokens, progress,
                   launched={"ports": ports.to_json(), "timings_s": dict(timings)}, timing=timing)


def document(ctx: FleetContext, rows: list, failures: list, skipped: list[int], adv: dict, repeats: int,
             launched: Optional[dict[str, Any]], timing: dict[str, Any]) -> dict[str, Any]:
    table = [asdict(r) | {"speedup": r.speedup} for r in rows]
    kv_bytes = fleet_size_plan(ctx.fleet, ctx.fleet.settings.chunk_size).bytes_per_token
    doc = {"fleet": ctx.fleet.name, "runtime": ctx.fleet.runtime, "repeats": repeats, "kv_bytes_per_token": kv_bytes,
           "kv_profile": ctx.fleet.engine.profile if ctx.fleet.runtime == "embedded" else None, "rows": table,
           "failures": failures, "skipped": skipped, "advice": adv, "launched": launched, "timing": timing,
           "projection": project(table, TIMING_PROFILES[timing["profile"]], kv_bytes)}
    doc["recommendation"] = recommendation(doc)
    return finite(doc)


def summary(doc: dict[str, Any]) -> str:
    kv = (f", KV {doc['kv_profile']} at {doc['kv_bytes_per_token'] // 1024} KiB/token"
          if doc.get("kv_bytes_per_token") and doc.get("kv_profile") else "")
    lines = [f"# Pull vs recompute on {doc['fleet']} ({doc['runtime']}{kv}, median of {doc['repeats']})", ""]
    if launched := doc.get("launched"):
        t = launched["timings_s"]
        lines += [f"A temporary local fleet: up {t['up_s']:.1f} s, ready {t['wait_s']:.1f} s later; ports "
                  f"{launched['ports']['how']} (default plan + {launched['ports']['offset']}).", ""]
    lines += ["| Prefix tokens | TTFT cold on A (ms) | TTFT pulled on B (ms: median (min-max)) | "
              "TTFT recomputed on B (ms) | Pull speed-up | Cached tokens on B |", "|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        speed = f"{r['speedup']:.2f}x" if r["speedup"] is not None else "n/a"
        pulled = with_spread(r["ttft_pulled_b_s"] * 1000, span(s * 1000 for s in r.get("pulled_runs_s") or []))
        lines.append(f"| {r['tokens']} | {r['ttft_cold_a_s'] * 1000:.0f} | {pulled} | "
                     f"{r['ttft_recompute_b_s'] * 1000:.0f} | {speed} | {r['cached_tokens_b']} |")
    lines += [f"| {f['tokens']} | failed: {f['error'][:60]} | | | | |" for f in doc["failures"]] + [""]
    if doc["skipped"]:
        lines += [f"Skipped {doc['skipped']}: longer than the engines' context.", ""]
    adv = doc["advice"]
    timing = doc.get("timing")
    if timing and doc["rows"]:
        lines += projection_markdown(doc["projection"], timing["describe"])
    if timing:
        lines += [f"Engines ran timing profile: {timing['engines']}.", ""]
    if not doc["rows"]:
        lines.append("Advice: none; no length could be measured (see the failures above).")
    elif adv["min_pull_tokens"] is None:
        lines.append(f"{_as_run(doc)}: the pull never won consistently at these lengths; keep P2P for longer prefixes "
                     "or check the transfer path (`p2pctl test basic`).")
    else:
        lines.append(f"{_as_run(doc)}: pull prefixes of {adv['min_pull_tokens']} tokens or more (llm-d: "
                     f"minCachedTokenDelta={adv['min_pull_tokens']}); for requests of ~{adv['doc_tokens']} tokens "
                     f"start vllm-router with --cache-threshold {adv['cache_threshold']} "
                     f"(router.cache_threshold in the fleet spec)."
                     + (f" Such a prefix is {adv['min_pull_bytes'] / 2**20:.1f} MiB on the wire, "
                        f"{adv['chunk_bytes'] / 2**20:.2f} MiB per chunk (`p2pctl bench transfer` sweeps these "
                        "sizes)." if adv.get("min_pull_bytes") else ""))
    if doc.get("recommendation"):
        lines += ["", f"**Recommendation** (timing profile {timing['profile']}): {doc['recommendation']}"]
    return "\n".join(lines) + "\n"


def _as_run(doc: dict[str, Any]) -> str:
    """What the measured advice is about, so it is never mistaken for the GPU answer below it."""
    per_token = median(r["ttft_recompute_b_s"] * 1e6 / r["tokens"] for r in doc["rows"])
    return (f"This fleet as it runs (recompute measured at {per_token:.0f} us/token on this box, the emulated "
            "GPU's cost only where the CPU is faster)")


def recommendation(doc: dict[str, Any]) -> str:
    """One answer for the stated request length: the projection when the profile emulates a GPU, else what this
    fleet measured; when the pull does not pay, the measured cause."""
    if not doc["rows"]:
        return "none: no length could be measured"
    proj, adv = doc["projection"], doc["advice"]
    profile = TIMING_PROFILES[doc["timing"]["profile"]]
    longest = max(r["tokens"] for r in doc["rows"])
    if profile.emulated:
        m, basis = proj["min_pull_tokens"], f"this box's measured pull against {profile.name}'s emulated prefill"
        why = proj["why"]
    else:
        m, basis = adv["min_pull_tokens"], "this box's measured pull and recompute, no GPU emulation"
        why = f"the pull did not win at every length up to {longest} tokens"
    d = adv["doc_tokens"]
    own = proj["published_min_pull_tokens"]
    tail = (f" On the profile's own {profile.transport} (llm-d's figures) pulls pay from about {own:,} tokens."
            if own is not None else "")
    if profile.emulated and proj.get("inconclusive"):
        tail += (f" Inconclusive on this box at {proj['inconclusive']} tokens: the pulls of the {doc['repeats']} "
                 "repeats lie on both sides of the emulated prefill; more --repeats, an idle box or longer prefixes "
                 "would decide it.")
    if m is not None and m <= d:
        return (f"for ~{d}-token requests, pull: prefixes of {m} tokens or more pay (llm-d minCachedTokenDelta={m}, "
                f"vllm-router --cache-threshold {round(min(1.0, m / d), 2)}); from {basis}.{tail}")
    return f"for ~{d}-token requests, do not pull on this transport ({basis}): {why}.{tail}"


def first_lasting_win(lengths: list[int], wins: list[bool]) -> Optional[int]:
    """None: the last one loses."""
    return next((n for i, n in enumerate(lengths) if all(wins[i:])), None)


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
              "evictions_a": r.get("evictions_a") or 0,
              "pull_range_ms": span(s * 1000 for s in r.get("pulled_runs_s") or [])}
             for r in rows]
    wins = [t["pulled"] and t["pull_measured_ms"] < t["prefill_emulated_ms"] for t in table]
    for t, won in zip(table, wins):
        unsure = t["pulled"] and straddles(t["pull_range_ms"], t["prefill_emulated_ms"])
        t["pays"] = "inconclusive" if unsure else "yes" if won else "no"
    published = profile.crossover_tokens
    fit = pull_fit(rows)
    why, cause = margin.crossover(fit, profile, table, bytes_per_token)
    return {"profile": profile.name, "rows": table,
            "min_pull_tokens": first_lasting_win([t["tokens"] for t in table], wins) if table else None,
            "published_min_pull_tokens": None if published is None or math.isinf(published) else round(published),
            "pull_fit": fit, "why": why, "cause": cause.to_dict() if cause else None,
            "inconclusive": [t["tokens"] for t in table if t["pays"] == "inconclusive"]}


def projection_markdown(proj: dict[str, Any], describe: str) -> list[str]:
    lines = [f"What a GPU fleet would see, timing profile {describe}:", "",
             "| Prefix tokens | Pull, measured here (ms: median (min-max)) | Prefill, emulated (ms) | "
             "The profile's own pull at this fleet's KV bytes, published fit (ms) | Pull pays |",
             "|---|---|---|---|---|"]
    for t in proj["rows"]:
        own = f"{t['pull_published_ms']:.0f}" if t["pull_published_ms"] is not None else "n/a"
        lines.append(f"| {t['tokens']} | {with_spread(t['pull_measured_ms'], t.get('pull_range_ms'))} | "
                     f"{t['prefill_emulated_ms']:.0f} | {own} | {t['pays']} |")
    return lines + ["", f"Measured cause: {proj['why']}.", ""]
