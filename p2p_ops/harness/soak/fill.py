"""Bring every server's L1 to its eviction watermark during the soak's warm-up, so the slopes after it are those
of a fleet in steady state (L1 full, evicting) rather than of caches still filling: an lmcache server's memory
grows with what its L1 holds (chunk metadata) until the L1 is full, which is no leak.

A thread of its own sends distinct long prompts to the engines in turn, recorded with the soak's requests (kind
"fill": their failures count too), until every server reports L1 use at `WATERMARK` of its size or the time
given runs out. An L1 whose use fell well below its peak has been through an eviction pass, so it is full too.
LMCache's `lmcache_mp_l1_evicted_chunks_total` cannot tell that: it also counts every P2P-prefetched chunk freed
after its read (L1Manager publishes L1_KEYS_EVICTED for those), so on a P2P fleet it rises from the first pull
on, with the L1 nearly empty (the first full soak stopped its fill at 19 s that way, L1 at 0 %)."""

from __future__ import annotations

import time
from typing import Optional

from p2p_ops.endpoints import lmcache_api
from p2p_ops.harness import prompts
from p2p_ops.harness.load import Job, Workers
from p2p_ops.harness.soak.load import MixedLoad
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.spec.transfer_sizes import EVICTION_WATERMARK

# Just below LMCache's eviction watermark is "full" here.
WATERMARK = EVICTION_WATERMARK - 0.05
# It then frees `--eviction-ratio` (20 %) of L1 at once: a fall that deep from a peak that high is that pass.
EVICTING_FROM, EVICTION_DROP = 0.5, 0.1
FILL_CHARS = 3000


def l1_fractions(ctx: FleetContext) -> Optional[dict[str, float]]:
    """Each server's L1 use as a fraction of its size; None when a server does not answer."""
    fracs = {}
    for node, inst in ctx.fleet.instances():
        st = lmcache_api.server_status(ctx.server_url(node, inst))
        if not st.reachable or not st.l1_total:
            return None
        fracs[inst.id] = st.l1_used / st.l1_total
    return fracs


def fill_level(fracs: dict[str, float], peaks: dict[str, float]) -> float:
    """The least-filled server's L1 use, 1.0 for one that went through an eviction pass (its use fell by
    `EVICTION_DROP` from a peak above `EVICTING_FROM`); `peaks` is updated with what it saw."""
    levels = []
    for name, frac in fracs.items():
        peak = peaks[name] = max(peaks.get(name, 0.0), frac)
        levels.append(1.0 if peak >= EVICTING_FROM and frac <= peak - EVICTION_DROP else frac)
    return min(levels) if levels else 0.0


class L1Filler:
    """One sender per engine (a 1 GiB L1 takes ~160 fill prompts; one sender for the fleet could not fill three
    in a warm-up), the first of them also watching the fill level."""

    def __init__(self, ctx: FleetContext, load: MixedLoad, budget_s: float) -> None:
        self.ctx, self.load, self.budget_s = ctx, load, budget_s
        self.filled_at: Optional[float] = None   # seconds since the soak's start when every L1 was full
        self.fill: Optional[float] = None
        self._peaks: dict[str, float] = {}
        self._until = self._next_check = 0.0
        self._full_seen = False
        self._sent = [0] * len(load.urls)
        self._workers: Optional[Workers] = None

    def start(self) -> "L1Filler":
        self._until = time.monotonic() + self.budget_s
        self._workers = self.load.runner.start(self._next, len(self.load.urls), "soak-l1-fill")
        return self

    def stop(self) -> None:
        if self._workers:
            self._workers.stop()

    def _full(self) -> bool:
        fracs = l1_fractions(self.ctx)
        self.fill = None if fracs is None else fill_level(fracs, self._peaks)
        if self.fill is not None and self.fill >= WATERMARK:
            self.filled_at = round(time.monotonic() - self.load.t0, 1)
            return True
        return False

    def _next(self, i: int) -> Optional[Job]:
        """Sender i fills engine i with prompts nobody asked before; sender 0 also watches the fill level."""
        if self._full_seen or time.monotonic() >= self._until:
            return None
        if i == 0 and time.monotonic() >= self._next_check:
            self._next_check = time.monotonic() + 2.0
            if self._full():
                self._full_seen = True
                return None
        k = i + self._sent[i] * len(self.load.urls)
        self._sent[i] += 1
        prompt = prompts.document(self.load.opts.seed + 31, 2_000_000 + k, FILL_CHARS)
        return self.load.job_for("fill", self.load.urls[i], prompt, max_tokens=1)
