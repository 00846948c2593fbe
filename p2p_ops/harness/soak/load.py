"""The soak's steady mixed load: shared documents asked about on other nodes, multi-turn sessions that move
between engines, and fresh prompts nobody asked before. Closed-loop clients; every request is recorded."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Optional

from p2p_ops.harness import prompts
from p2p_ops.harness.openai_client import complete
from p2p_ops.harness.soak.options import SoakOptions
from p2p_ops.harness.workers import Workers

# Of every 20 requests: 8 on shared documents, 7 session turns, 5 fresh prompts.
MIX = ("doc",) * 8 + ("session",) * 7 + ("fresh",) * 5
TURNS_PER_ENGINE = 3


@dataclass
class Request:
    t: float              # seconds since the soak started, when sent
    kind: str             # doc | session | fresh | warm
    url: str
    ok: bool
    ttft_s: Optional[float]
    prompt_tokens: int
    cached_tokens: int
    error: str = ""


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
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._count = itertools.count()
        self._workers = Workers(self._run, opts.concurrency, "soak-load", opts.request_timeout_s + 5)
        self._stop = self._workers.stop_event

    def warm(self) -> None:
        """Every shared document computed once on the first engine: the others pull it over P2P."""
        for doc in self.docs:
            self.send("warm", self.urls[0], doc, max_tokens=1)

    def start(self) -> "MixedLoad":
        self._workers.start()
        return self

    def stop(self) -> None:
        self._workers.stop()

    def send(self, kind: str, url: str, prompt: str, max_tokens: Optional[int] = None) -> Request:
        sent = time.monotonic() - self.t0
        c = complete(self.route or url, self.model, prompt, max_tokens=max_tokens or self.opts.max_tokens,
                     timeout=self.opts.request_timeout_s)
        r = Request(round(sent, 3), kind, self.route or url, c.ok, c.ttft_s if c.ok else None, c.prompt_tokens,
                    c.cached_tokens, c.error[:200])
        with self._lock:
            self.requests.append(r)
        return r

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

    def _run(self) -> None:
        while not self._stop.is_set():
            kind, url, prompt = self.job(next(self._count))
            if not self.send(kind, url, prompt).ok:
                self._stop.wait(0.2)  # a dead engine refuses at once: do not spin

    def snapshot(self) -> list[Request]:
        with self._lock:
            return list(self.requests)
