"""The soak's steady mixed load: shared documents asked about on other nodes, multi-turn sessions that move
between engines, and fresh prompts nobody asked before. Closed-loop clients; every request is recorded.

`L1Filler` brings every server's L1 to its eviction watermark during the warm-up, so the slopes after it are
those of a fleet in steady state (L1 full, evicting) rather than of caches still filling: an lmcache server's
memory grows with what its L1 holds (chunk metadata) until the L1 is full, which is no leak. It sends distinct
long prompts to the engines in turn, recorded with the soak's requests (kind "fill": their failures count too),
until every server reports L1 use at `WATERMARK` of its size or the time given runs out. An L1 whose use fell
well below its peak has been through an eviction pass, so it is full too. LMCache's
`lmcache_mp_l1_evicted_chunks_total` cannot tell that: it also counts every P2P-prefetched chunk freed after its
read (L1Manager publishes L1_KEYS_EVICTED for those), so on a P2P fleet it rises from the first pull on, with
the L1 nearly empty (the first full soak stopped its fill at 19 s that way, L1 at 0 %)."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Optional

from p2p_ops.endpoints import lmcache_api
from p2p_ops.harness import load, prompts
from p2p_ops.harness.soak.options import SoakOptions
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe.records import RequestRecord
from p2p_ops.spec.transfer_sizes import EVICTION_WATERMARK

# Of every 20 requests: 8 on shared documents, 7 session turns, 5 fresh prompts.
MIX = ("doc",) * 8 + ("session",) * 7 + ("fresh",) * 5
TURNS_PER_ENGINE = 3
# Just below LMCache's eviction watermark is "full" here.
WATERMARK = EVICTION_WATERMARK - 0.05
# It then frees `--eviction-ratio` (20 %) of L1 at once: a fall that deep from a peak that high is that pass.
EVICTING_FROM, EVICTION_DROP = 0.5, 0.1
FILL_CHARS = 3000


class Session:
    """One conversation: its text grows turn by turn; it moves to the next engine every few turns."""

    def __init__(self, seed: int, index: int) -> None:
        self.seed, self.index, self.turn, self.text = seed, index, 0, ""
        self.lock = threading.Lock()

    def next_prompt(self, max_chars: int) -> tuple[int, str]:
        with self.lock:
            if len(self.text) > max_chars:
                self.seed, self.turn, self.text = self.seed + 1, 0, ""
            self.turn += 1
            self.text += f"\nUser turn {self.turn}: " + prompts.document(self.seed * 131 + self.index,
                                                                        self.turn, 300) + "\nAssistant: ok."
            return self.turn, self.text


class MixedLoad:
    def __init__(self, urls: list[str], model: str, opts: SoakOptions, t0: float, route: Optional[str] = None):
        self.urls, self.model, self.opts, self.t0, self.route = urls, model, opts, t0, route
        self.docs = [prompts.document(opts.seed, i, opts.doc_chars) for i in range(opts.docs)]
        self.sessions = [Session(opts.seed + 17, i) for i in range(opts.sessions)]
        self.runner = load.Load(model, t0=t0, timeout_s=opts.request_timeout_s, max_tokens=opts.max_tokens,
                                pause_after_failure_s=0.2)
        self._count = itertools.count()

    def warm(self) -> None:
        """Every shared document computed once on the first engine: the others pull it over P2P."""
        for doc in self.docs:
            self.runner.send(self.job_for("warm", self.urls[0], doc, max_tokens=1))

    def start(self) -> load.Workers:
        return self.runner.start(lambda _: self.job_for(*self.job(next(self._count))), self.opts.concurrency,
                                 "soak-load")

    def job_for(self, kind: str, url: str, prompt: str, max_tokens: Optional[int] = None) -> load.Job:
        """The request as sent: through the router when the soak goes through one."""
        return load.Job(self.route or url, prompt, stage=kind, max_tokens=max_tokens)

    def job(self, k: int) -> tuple[str, str, str]:
        """The k-th request: (kind, engine url, prompt). Shared documents go to every engine but the first."""
        kind, n = MIX[k % len(MIX)], len(self.urls)
        if kind == "doc":
            d = (k // len(MIX)) % len(self.docs)
            url = self.urls[1 + k % (n - 1)] if n > 1 else self.urls[0]
            return kind, url, self.docs[d] + prompts.question(self.opts.seed, k)
        if kind == "session":
            s = self.sessions[k % len(self.sessions)]
            turn, text = s.next_prompt(self.opts.session_max_chars)
            return kind, self.urls[(s.index + turn // TURNS_PER_ENGINE) % n], text
        return kind, self.urls[k % n], prompts.document(self.opts.seed + 7, 1_000_000 + k, self.opts.fresh_chars)

    def snapshot(self) -> list[RequestRecord]:
        return self.runner.snapshot()


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
    for name, frac in fracs.items():
        peaks[name] = max(peaks.get(name, 0.0), frac)
    return min((1.0 if peaks[n] >= EVICTING_FROM and f <= peaks[n] - EVICTION_DROP else f
                for n, f in fracs.items()), default=0.0)


class L1Filler:
    """One sender per engine (a 1 GiB L1 takes ~160 fill prompts; one sender for the fleet could not fill three
    in a warm-up), the first of them also watching the fill level."""

    def __init__(self, ctx: FleetContext, mixed: MixedLoad, budget_s: float) -> None:
        self.ctx, self.mixed, self._until = ctx, mixed, time.monotonic() + budget_s
        self.filled_at: Optional[float] = None   # seconds since the soak's start when every L1 was full
        self.fill: Optional[float] = None
        self._peaks: dict[str, float] = {}
        self._next_check = 0.0
        self._sent = [0] * len(mixed.urls)
        self._workers: Optional[load.Workers] = None

    def start(self) -> "L1Filler":
        self._workers = self.mixed.runner.start(self._next, len(self.mixed.urls), "soak-l1-fill")
        return self

    def stop(self) -> None:
        if self._workers:
            self._workers.stop()

    def _next(self, i: int) -> Optional[load.Job]:
        """Sender i fills engine i with prompts nobody asked before; sender 0 also watches the fill level."""
        if self.filled_at is not None or time.monotonic() >= self._until:
            return None
        if i == 0 and time.monotonic() >= self._next_check:
            self._next_check = time.monotonic() + 2.0
            fracs = l1_fractions(self.ctx)
            self.fill = None if fracs is None else fill_level(fracs, self._peaks)
            if self.fill is not None and self.fill >= WATERMARK:
                self.filled_at = round(time.monotonic() - self.mixed.t0, 1)
                return None
        k = i + self._sent[i] * len(self.mixed.urls)
        self._sent[i] += 1
        prompt = prompts.document(self.mixed.opts.seed + 31, 2_000_000 + k, FILL_CHARS)
        return self.mixed.job_for("fill", self.mixed.urls[i], prompt, max_tokens=1)
