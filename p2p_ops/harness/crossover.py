"""Pull versus recompute: TTFT on node B for a prefix pulled from A's cache, and for the same length computed cold.

The answer sets where P2P pays off (llm-d calibrates `minCachedTokenDelta` the same way): below the crossover
length the fixed lookup/transfer cost exceeds the prefill it saves.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Optional

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
    rows = []
    for n in lengths:
        cold, pulled, recompute, cached = [], [], [], []
        for r in range(repeats):
            progress(f"{n} tokens, repeat {r + 1}/{repeats}")
            shared = prompts.document(seed, n * 100 + r, n)
            fresh = prompts.document(seed + 1, n * 100 + r, n)
            ra = complete(a, model, shared, max_tokens=1)
            rb = complete(b, model, shared, max_tokens=1)
            rc = complete(b, model, fresh, max_tokens=1)
            if not (ra.ok and rb.ok and rc.ok):
                raise RuntimeError(f"request failed at {n} tokens: {ra.error or rb.error or rc.error}")
            cold.append(ra.ttft_s)
            pulled.append(rb.ttft_s)
            recompute.append(rc.ttft_s)
            cached.append(rb.cached_tokens)
        rows.append(CrossoverRow(n, statistics.median(cold), statistics.median(pulled), statistics.median(recompute),
                                 int(statistics.median(cached))))
    return rows
