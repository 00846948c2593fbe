"""Contended document QA: each session has a private long document and several questions.

Questions of one session go one after another (each waits for the previous answer, as a user would), many
sessions are in flight at once, and every request names its session in `x-session-id` (what the router's
session-keyed policies hash on). A session's first question computes its document somewhere; later ones are
cheap only where that document's KV is: on the same engine (local cache) or, with P2P, on a peer.

`run` sends it with the toolkit's own client; `run_inference_perf` has inference-perf send the same sessions
(`bench placement --generator inference-perf`).
"""

from __future__ import annotations

import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from p2p_ops.harness import inference_perf, prompts
from p2p_ops.harness.load import Job, Load
from p2p_ops.observe.records import RequestRecord


SESSION_HEADER = "x-session-id"
QUESTION_TOKENS = 16   # inference-perf's question per turn, in tokenizer tokens (ours: a short sentence)


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
                   timeout_s=max(5.0, deadline - time.monotonic()), headers={SESSION_HEADER: f"{label}-s{s}"})

    def recorded(_: Job, rec: RequestRecord) -> None:
        if len(load.records) % max(1, opts.sessions) == 0:
            progress(f"{label}: {len(load.records)}/{total} turns")

    load = Load(model, t0=t0, max_tokens=opts.max_tokens, on_record=recorded)
    load.run(next_turn, opts.inflight, "docqa")
    return load.records, time.monotonic() - t0


def run_inference_perf(url: str, model: str, opts: DocQAOptions, label: str, out_dir: Path, tokenizer: Path,
                       venv: Path) -> tuple[list[RequestRecord], float]:
    """The same sessions sent by inference-perf (conversation_replay: a conversation per session, its document as
    the system prompt, its questions in turn, its id in SESSION_HEADER). Lengths are converted to tokenizer tokens;
    `label` seeds the documents, so each arm's are its own. The wall time is inference-perf's benchmark time (its
    start-up left out, as ours has none)."""
    shape = inference_perf.Shape(
        "docqa", "conversation_replay", opts.sessions,
        max(inference_perf.PREFIX_FLOOR, opts.doc_tokens // inference_perf.ENGINE_UNITS_PER_TOKEN), opts.questions,
        QUESTION_TOKENS, max(inference_perf.LENGTH_FLOOR, opts.max_tokens), opts.inflight, ())
    doc = inference_perf.config(shape, "", url, model, out_dir, tokenizer, session_header=SESSION_HEADER,
                                seed=zlib.crc32(f"{opts.seed}/{label}".encode()), request_timeout_s=opts.max_seconds)
    started = time.monotonic()
    entries, summary = inference_perf.read_output(inference_perf.run(venv, doc, opts.max_seconds + 60))
    wall = inference_perf.parse_summary(summary).get("benchmark_time_s") or time.monotonic() - started
    return inference_perf.parse_requests(entries, level=opts.inflight, stage=label, instance="router", url=url), wall
