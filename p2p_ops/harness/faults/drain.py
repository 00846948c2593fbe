"""Whether LMCache's P2P lookups drained after a fault.

LMCache 0.5.6 has no counter of pending transfers, but its servers' /status says what is in flight:
`active_p2p_lookup_jobs` (P2PControllerModule.report_status: lookup-and-lock jobs a peer started here and has
not finished or released; the same value is the gauge `lmcache_mp_active_p2p_lookup_jobs`),
`active_prefetch_jobs` (LookupModule: this server's own prefetches, which include its P2P pulls), and the L1's
`read_locked_count` (chunks a lookup locked for a peer's read; an abandoned lookup holds them until the read
TTL). "Drained" means: after the load stopped, the sum over every server came back to what it was at rest
before the fault, within the fleet's own lookup/load timeouts (+5 s).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from p2p_ops.endpoints import lmcache_api
from p2p_ops.lifecycle.context import FleetContext

FIELDS = ("active_p2p_lookup_jobs", "active_prefetch_jobs", "read_locked_count")


def inflight(status: dict) -> Optional[dict[str, int]]:
    """The in-flight counts of one server's /status body (None when it did not answer)."""
    if not isinstance(status, dict) or not status:
        return None
    src = {**status, "read_locked_count": lmcache_api.l1_manager(status).get("read_locked_count")}
    return {k: int(src.get(k) or 0) for k in FIELDS}


def snapshot(ctx: FleetContext) -> dict[str, Optional[dict[str, int]]]:
    return {inst.id: inflight(lmcache_api.server_status(ctx.server_url(node, inst)).raw)
            for node, inst in ctx.fleet.instances()}


def total(snap: dict[str, Optional[dict[str, int]]]) -> int:
    return sum(sum(v.values()) for v in snap.values() if v)


@dataclass
class DrainFigures:
    inflight_max_during: int = 0          # the most in flight seen (all servers, all three counts) under load
    inflight_at_end: Optional[int] = None  # after the drain wait (None: a server did not answer)
    drained: bool = False
    drained_after_s: Optional[float] = None
    last: dict = field(default_factory=dict)


class Poller:
    """`sample()` every `period_s` on a daemon thread, from `start()` until `stop()`."""

    def __init__(self, period_s: float, name: str) -> None:
        self.period_s, self._stop = period_s, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sample()

    def sample(self) -> None: ...


class Sampler(Poller):
    """Polls every server's /status once a second while the scenario runs, keeping the maximum in flight."""

    def __init__(self, ctx: FleetContext, period_s: float = 1.0) -> None:
        super().__init__(period_s, "fault-drain-sampler")
        self.ctx, self.max_seen = ctx, 0

    def sample(self) -> None:
        try:
            self.max_seen = max(self.max_seen, total(snapshot(self.ctx)))
        except Exception:  # noqa: BLE001 - a server down is what a fault does; keep sampling
            pass


def lookup_timeout_s(ctx: FleetContext) -> float:
    """A lookup or pull cut off mid-way ends by LMCache's own timeouts at the latest: the longest of them."""
    return max(max(st.p2p_lookup_timeout, st.p2p_load_timeout)
               for st in (ctx.fleet.effective_settings(i) for _, i in ctx.fleet.instances()))


def wait_drained(ctx: FleetContext, max_seen: int, timeout_s: float = 15.0, baseline: int = 0) -> DrainFigures:
    """After the load stopped: seconds until every server reports no more in flight than at rest before."""
    start = time.monotonic()
    fig = DrainFigures(inflight_max_during=max_seen)
    while True:
        snap = snapshot(ctx)
        fig.last = snap
        answered = all(v is not None for v in snap.values())
        fig.inflight_at_end = total(snap) if answered else None
        if answered and fig.inflight_at_end <= baseline:
            fig.drained, fig.drained_after_s = True, round(time.monotonic() - start, 2)
            return fig
        if time.monotonic() - start > timeout_s:
            return fig
        time.sleep(0.5)
