"""Bring every server's L1 to its eviction watermark during the soak's warm-up, so the slopes after it are those
of a fleet in steady state (L1 full, evicting) rather than of caches still filling: an lmcache server's memory
grows with what its L1 holds (chunk metadata) until the L1 is full, which is no leak.

A thread of its own sends distinct long prompts to the engines in turn, recorded with the soak's requests (kind
"fill": their failures count too), until every server reports L1 use at `WATERMARK` of its size or the time
given runs out (an L1 already evicting counts as full)."""

from __future__ import annotations

import threading
import time
from typing import Optional

from p2p_ops.endpoints import lmcache_api, metrics_api
from p2p_ops.harness import prompts
from p2p_ops.harness.soak.load import MixedLoad
from p2p_ops.lifecycle.context import FleetContext

# LMCache 0.5.6 evicts from 80 % of L1 (`--eviction-trigger-watermark`); just below it is "full" here.
WATERMARK = 0.75
FILL_CHARS = 3000


def l1_fill(ctx: FleetContext) -> Optional[float]:
    """The least-filled server's L1 use as a fraction of its size, 1.0 for a server already evicting (LMCache
    evicts below the watermark it triggers at, so an evicting L1 is full); None when a server does not answer."""
    fracs = []
    for node, inst in ctx.fleet.instances():
        url = ctx.server_url(node, inst)
        st = lmcache_api.server_status(url)
        if not st.reachable or not st.l1_total:
            return None
        evicted = metrics_api.metric_sum(metrics_api.scrape(url), "lmcache_mp_l1_evicted_chunks_total")
        fracs.append(1.0 if evicted > 0 else st.l1_used / st.l1_total)
    return min(fracs) if fracs else None


class L1Filler:
    def __init__(self, ctx: FleetContext, load: MixedLoad, budget_s: float) -> None:
        self.ctx, self.load, self.budget_s = ctx, load, budget_s
        self.filled_at: Optional[float] = None   # seconds since the soak's start when every L1 was full
        self.fill: Optional[float] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="soak-l1-fill")

    def start(self) -> "L1Filler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.load.opts.request_timeout_s + 5)

    def _run(self) -> None:
        until = time.monotonic() + self.budget_s
        urls, k, next_check = self.load.urls, 0, 0.0
        while not self._stop.is_set() and time.monotonic() < until:
            if time.monotonic() >= next_check:
                self.fill = l1_fill(self.ctx)
                next_check = time.monotonic() + 2.0
                if self.fill is not None and self.fill >= WATERMARK:
                    self.filled_at = round(time.monotonic() - self.load.t0, 1)
                    return
            prompt = prompts.document(self.load.opts.seed + 31, 2_000_000 + k, FILL_CHARS)
            if not self.load.send("fill", urls[k % len(urls)], prompt, max_tokens=1).ok:
                self._stop.wait(0.2)
            k += 1
