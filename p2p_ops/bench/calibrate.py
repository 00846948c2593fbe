"""Pull-vs-recompute calibration: the shortest shared prefix worth pulling from a peer, and the router's
cache threshold to match (llm-d calibrates `minCachedTokenDelta` the same way, reference section 10).

Both legs run on the same node B: a fresh prompt computed on A and then served on B (pulled), and another fresh
prompt computed cold on B (recomputed); fresh prompts per length and repetition, medians per length. A length
whose measurement fails is recorded and skipped; the rows before it are kept.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

from p2p_ops.observe import charts
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.harness import crossover

LENGTHS = (256, 512, 1024, 2048, 4096, 6144)
QUICK_LENGTHS = (256, 512, 1024, 2048, 4096)


def advice(rows: list, doc_tokens: int) -> dict:
    """Pure: the shortest length from which the pull wins at every longer length, and the cache-aware threshold
    (the fraction of a typical request such a prefix is)."""
    wins = [r.ttft_pulled_b_s < r.ttft_recompute_b_s and r.cached_tokens_b > 0 for r in rows]
    crossover_tokens = None
    for i, r in enumerate(rows):
        if all(wins[i:]):
            crossover_tokens = r.tokens
            break
    out = {"min_pull_tokens": crossover_tokens, "doc_tokens": doc_tokens, "cache_threshold": None}
    if crossover_tokens is not None and doc_tokens:
        out["cache_threshold"] = round(min(1.0, crossover_tokens / doc_tokens), 2)
    return out


def run(ctx: FleetContext, out_dir: Path, lengths: list[int], repeats: int, seed: Optional[int], doc_tokens: Optional[int],
        progress: Callable[[str], None] = lambda _: None) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    seed = seed if seed is not None else int(time.time()) % 10**6
    rows, failures = [], []
    for n in sorted(lengths):
        try:
            rows += crossover.measure(ctx, [n], repeats, seed, progress)
        except Exception as exc:  # noqa: BLE001 - finished rows are kept; the failure is recorded
            failures.append({"tokens": n, "error": f"{type(exc).__name__}: {exc}"[:300]})
            progress(f"{n} tokens failed: {exc}")
        _write(out_dir, rows, failures, advice(rows, doc_tokens or max(lengths)), ctx)
    return {"rows": rows, "failures": failures}


def _write(out_dir: Path, rows: list, failures: list, adv: dict, ctx: FleetContext) -> None:
    (out_dir / "crossover.json").write_text(json.dumps(
        {"rows": [asdict(r) | {"speedup": r.speedup} for r in rows], "failures": failures, "advice": adv,
         "fleet": ctx.fleet.name, "runtime": ctx.fleet.runtime}, indent=2))
    lines = [f"# Pull vs recompute on {ctx.fleet.name} ({ctx.fleet.runtime})", "",
             "| Prefix tokens | TTFT pulled (ms) | TTFT recomputed (ms) | Pull speed-up | Cached tokens on B |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.tokens} | {r.ttft_pulled_b_s * 1000:.0f} | {r.ttft_recompute_b_s * 1000:.0f} | "
                     f"{r.speedup:.2f}x | {r.cached_tokens_b} |")
    for f in failures:
        lines.append(f"| {f['tokens']} | failed: {f['error'][:60]} | | | |")
    lines.append("")
    if adv["min_pull_tokens"] is None:
        lines.append("Advice: the pull never won consistently at these lengths; keep P2P for longer prefixes "
                     "or check the transfer path (`p2pctl test basic`).")
    else:
        lines.append(f"Advice: pull prefixes of {adv['min_pull_tokens']} tokens or more (llm-d: "
                     f"minCachedTokenDelta={adv['min_pull_tokens']}); for requests of ~{adv['doc_tokens']} tokens "
                     f"start vllm-router with --cache-threshold {adv['cache_threshold']} "
                     f"(router.cache_threshold in the fleet spec).")
    (out_dir / "summary.md").write_text("\n".join(lines) + "\n")
    if rows:
        charts.crossover(out_dir / "crossover.png", rows)
