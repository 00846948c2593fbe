"""Contended document QA: each session has a private long document and several questions.

Questions of one session go one after another (each waits for the previous answer, as a user would), many
sessions are in flight at once, and every request names its session in `x-session-id` (what the router's
session-keyed policies hash on). A session's first question computes its document somewhere; later ones are
cheap only where that document's KV is: on the same engine (local cache) or, with P2P, on a peer.
"""

from __future__ import annotations

import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Callable

from p2p_ops.harness import prompts
from p2p_ops.harness.openai_client import complete


@dataclass(frozen=True)
class DocQAOptions:
    sessions: int = 16
    questions: int = 4
    doc_tokens: int = 3072
    inflight: int = 6            # sessions in flight at once
    max_tokens: int = 8
    max_seconds: float = 300.0   # hard bound for one arm
    seed: int = 0


@dataclass
class Turn:
    session: int
    question: int
    ok: bool
    ttft_s: float
    e2e_s: float
    prompt_tokens: int
    cached_tokens: int
    started_s: float
    error: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def run(url: str, model: str, opts: DocQAOptions, label: str,
        progress: Callable[[str], None] = lambda _: None) -> tuple[list[Turn], float]:
    """All sessions through `url`; returns every turn and the wall time. `label` keeps documents unique per arm,
    so no arm is served from what an earlier arm left in the caches."""
    turns: list[Turn] = []
    lock = threading.Lock()
    t0 = time.monotonic()
    deadline = t0 + opts.max_seconds

    def session(i: int) -> None:
        doc = prompts.document(opts.seed, zlib.crc32(f"{label}/{i}".encode()), opts.doc_tokens)
        headers = {"x-session-id": f"{label}-s{i}"}
        for q in range(opts.questions):
            if time.monotonic() > deadline:
                return
            started = time.monotonic() - t0
            r = complete(url, model, doc + prompts.question(opts.seed, q), max_tokens=opts.max_tokens,
                         timeout=max(5.0, deadline - time.monotonic()), headers=headers)
            with lock:
                turns.append(Turn(i, q, r.ok, r.ttft_s or r.e2e_s, r.e2e_s, r.prompt_tokens, r.cached_tokens,
                                  started, r.error))
                done = len(turns)
            if done % max(1, opts.sessions) == 0:
                progress(f"{label}: {done}/{opts.sessions * opts.questions} turns")

    with ThreadPoolExecutor(max_workers=opts.inflight) as pool:
        list(pool.map(session, range(opts.sessions)))
    return turns, time.monotonic() - t0

