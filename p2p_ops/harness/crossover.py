"""Pull versus recompute: TTFT on node B for a prefix pulled from A's cache, and for the same length computed cold.

The answer sets where P2P pays off (llm-d calibrates `minCachedTokenDelta` the same way): below the crossover
length the fixed lookup/transfer cost exceeds the prefill it saves.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from p2p_ops.endpoints import metrics_api
from p2p_ops.harness import prompts
from p2p_ops.harness.basic import pick_pair
from p2p_ops.harness.openai_client import complete
from p2p_ops.lifecycle.context import FleetContext


@dataclass
class CrossoverRow:
    tokens: int
    ttft_cold_a_s: float
    ttft_pulled_b_s: float
    ttft_recompute_b_s: float
    cached_tokens_b: int
    # What the servers did while this length was measured: B's prefetch fallbacks by reason (l1_oom: its L1
    # could not hold the restore buffers) and A's eviction-loop passes. A missed pull is explained by these.
    fallbacks_b: dict[str, float] = field(default_factory=dict)
    evictions_a: float = 0.0
    pulled_runs_s: list[float] = field(default_factory=list)   # every repeat's TTFT pulled on B: the spread

    @property
    def speedup(self) -> float:
        return self.ttft_recompute_b_s / self.ttft_pulled_b_s if self.ttft_pulled_b_s else float("nan")


def measure(ctx: FleetContext, lengths: list[int], repeats: int = 3, seed: Optional[int] = None,
            progress: Callable[[str], None] = lambda _: None, a: Optional[str] = None,
            b: Optional[str] = None) -> list[CrossoverRow]:
    """A computes each prefix cold, B pulls it; A and B are instance ids (default: pick_pair's)."""
    (na, ia), (nb, ib) = pick_pair(ctx, a, b)
    a, b = ctx.engine_url(na, ia), ctx.engine_url(nb, ib)
    model = ctx.fleet.model
    seed = seed if seed is not None else int(time.time()) % 10**6
    a_srv, b_srv = ctx.server_url(na, ia), ctx.server_url(nb, ib)
    rows = []
    for n in lengths:
        before_a, before_b = _counters(a_srv), _counters(b_srv)
        runs = []
        for r in range(repeats):
            progress(f"{n} tokens, repeat {r + 1}/{repeats}")
            shared = prompts.document(seed, n * 100 + r, n)
            fresh = prompts.document(seed + 1, n * 100 + r, n)
            ra = complete(a, model, shared, max_tokens=1)
            rb = complete(b, model, shared, max_tokens=1)
            rc = complete(b, model, fresh, max_tokens=1)
            if not (ra.ok and rb.ok and rc.ok):
                raise RuntimeError(f"request failed at {n} tokens: {ra.error or rb.error or rc.error}")
            runs.append((ra.ttft_s, rb.ttft_s, rc.ttft_s, rb.cached_tokens))
        cold, pulled, recompute, cached = (statistics.median(x) for x in zip(*runs))
        after_a, after_b = _counters(a_srv), _counters(b_srv)
        fallbacks = {k[len(FALLBACK):]: v - before_b.get(k, 0.0) for k, v in after_b.items()
                     if k.startswith(FALLBACK) and v > before_b.get(k, 0.0)}
        rows.append(CrossoverRow(n, cold, pulled, recompute, int(cached), fallbacks,
                                 after_a.get(metrics_api.L1_EVICTION_RUNS, 0.0)
                                 - before_a.get(metrics_api.L1_EVICTION_RUNS, 0.0),
                                 [x[1] for x in runs]))
    return rows


FALLBACK = "fallback:"


def _counters(server_url: str) -> dict[str, float]:
    """A server's eviction-loop passes and its prefetch fallbacks by reason (`fallback:<reason>`)."""
    samples = metrics_api.scrape(server_url)
    runs = {metrics_api.L1_EVICTION_RUNS: metrics_api.metric_sum(samples, metrics_api.L1_EVICTION_RUNS)}
    return runs | {FALLBACK + r: v for r, v in metrics_api.prefetch_failures(samples).items()}
