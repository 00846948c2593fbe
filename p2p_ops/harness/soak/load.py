"""The soak's steady mixed load: shared documents asked about on other nodes, multi-turn sessions that move
between engines, and fresh prompts nobody asked before. Closed-loop clients; every request is recorded."""

from __future__ import annotations

import itertools
import threading
from typing import Optional

from p2p_ops.harness import load, prompts
from p2p_ops.harness.soak.options import SoakOptions
from p2p_ops.observe.records import RequestRecord

# Of every 20 requests: 8 on shared documents, 7 session turns, 5 fresh prompts.
MIX = ("doc",) * 8 + ("session",) * 7 + ("fresh",) * 5
TURNS_PER_ENGINE = 3


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
        self._workers: Optional[load.Workers] = None

    def warm(self) -> None:
        """Every shared document computed once on the first engine: the others pull it over P2P."""
        for doc in self.docs:
            self.runner.send(self.job_for("warm", self.urls[0], doc, max_tokens=1))

    def start(self) -> "MixedLoad":
        self._workers = self.runner.start(lambda _: self.job_for(*self.job(next(self._count))),
                                          self.opts.concurrency, "soak-load")
        return self

    def stop(self) -> None:
        if self._workers:
            self._workers.stop()

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
