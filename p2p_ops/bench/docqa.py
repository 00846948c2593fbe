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
from dataclasses import dataclass
from typing import Callable, Optional

from p2p_ops.harness import prompts
from p2p_ops.harness.load import Job, Load
from p2p_ops.observe.records import RequestRecord


@dataclass(frozen=True)
class DocQAOptions:
    sessions: int = 16
    questions: int = 4
    doc_tokens: int = 3072
    inflight: int = 6            # sessions in flight at once
    max_tokens: int = 8
    max_seconds: float = 300.0   # hard bound for one arm
    seed: int = 0


def run(url: str, model: str, opts: DocQAOptions, label: str,
        progress: Callable[[str], None] = lambda _: None) -> tuple[list[RequestRecord], float]:
    """Every turn (stage: the label, prefix_id: the session, level: the question) and the wall time. `label` keeps
    documents unique per arm, so no arm is served from what an earlier arm left in the caches."""
    t0 = time.monotonic()
    deadline = t0 + opts.max_seconds
    sessions = iter(range(opts.sessions))
    turn: dict[int, tuple[int, int]] = {}   # worker -> (its session, the next question)
    lock = threading.Lock()
    total = opts.sessions * opts.questions

    def next_turn(w: int) -> Optional[Job]:
        with lock:
            s, q = turn.get(w, (-1, opts.questions))
            if q >= opts.questions:   # the worker's session is over: the next one
                s, q = next(sessions, None), 0
                if s is None:
                    return None
            turn[w] = (s, q + 1)
        if time.monotonic() > deadline:
            return None
        doc = prompts.document(opts.seed, zlib.crc32(f"{label}/{s}".encode()), opts.doc_tokens)
        return Job(url, doc + prompts.question(opts.seed, q), stage=label, level=q, prefix_id=f"s{s}",
                   timeout_s=max(5.0, deadline - time.monotonic()), headers={"x-session-id": f"{label}-s{s}"})

    def recorded(_: Job, rec: RequestRecord) -> None:
        if len(load.records) % max(1, opts.sessions) == 0:
            progress(f"{label}: {len(load.records)}/{total} turns")

    load = Load(model, t0=t0, max_tokens=opts.max_tokens, on_record=recorded)
    load.run(next_turn, opts.inflight, "docqa")
    return load.records, time.monotonic() - t0
