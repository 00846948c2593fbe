"""The one load runner: client threads that send OpenAI completions and record every request.

Every load of the harness runs on it (stress, soak, faults, docqa, the benchmark's load generator). A set of
workers pulls jobs from a source until the source returns None or the workers are stopped; each request goes
over its thread's own kept-alive connection (`openai_client`) and becomes one `RequestRecord` in the load.
Several sets may feed one load (the soak's L1 fill beside its mixed load): one record, one clock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from p2p_ops.harness.openai_client import Completion, complete
from p2p_ops.observe.records import RequestRecord


@dataclass(frozen=True)
class Job:
    """One request to send, with the labels its record carries."""
    url: str
    prompt: str
    stage: str = ""
    level: int = 0
    instance: str = ""
    node: str = ""
    warmer: str = ""
    prefix_id: str = ""
    max_tokens: Optional[int] = None     # None: the load's
    timeout_s: Optional[float] = None    # None: the load's
    headers: Optional[dict] = None


Source = Callable[[int], Optional[Job]]  # the worker's index -> its next job; None: that worker is done


def jobs_of(jobs: Iterable[Job]) -> Source:
    """A source handing out a fixed sequence of jobs, each once, to whichever worker asks first."""
    it, lock = iter(jobs), threading.Lock()

    def take(_: int) -> Optional[Job]:
        with lock:
            return next(it, None)
    return take


class Workers:
    """One started set of client threads, with the stop they all watch."""

    def __init__(self, load: "Load", source: Source, count: int, name: str) -> None:
        self.load, self.stop_event = load, threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i, source), daemon=True, name=f"{name}-{i}")
                        for i in range(count)]
        for t in self.threads:
            t.start()

    def _run(self, i: int, source: Source) -> None:
        while not self.stop_event.is_set() and (job := source(i)) is not None:
            if not self.load.send(job).ok and self.load.pause_after_failure_s:
                self.stop_event.wait(self.load.pause_after_failure_s)  # a dead engine refuses at once: no spin

    def stop(self) -> None:
        self.stop_event.set()
        self.join()

    def join(self, bounded: bool = True) -> None:
        """Bounded by a request's timeout: a client stuck in a request never holds up the run's end longer."""
        for t in self.threads:
            t.join(timeout=self.load.timeout_s + 5 if bounded else None)

    @property
    def done(self) -> bool:
        return not any(t.is_alive() for t in self.threads)


class Load:
    """The requests of one run: who sends them (`start`, `run`, `send`) and what came back (`records`)."""

    def __init__(self, model: str, *, t0: Optional[float] = None, timeout_s: float = 120.0, max_tokens: int = 16,
                 retry_resets: bool = False, pause_after_failure_s: float = 0.0,
                 on_record: Optional[Callable[[Job, RequestRecord], None]] = None) -> None:
        self.model, self.timeout_s, self.max_tokens = model, timeout_s, max_tokens
        self.t0 = time.monotonic() if t0 is None else t0
        self.retry_resets, self.pause_after_failure_s, self.on_record = retry_resets, pause_after_failure_s, on_record
        self.records: list[RequestRecord] = []
        self.lock = threading.Lock()

    def start(self, source: Source, concurrency: int, name: str = "load") -> Workers:
        return Workers(self, source, max(1, concurrency), name)

    def run(self, source: Source, concurrency: int, name: str = "load") -> float:
        """Until the source is empty; returns the wall time."""
        started = time.monotonic()
        self.start(source, concurrency, name).join(bounded=False)
        return time.monotonic() - started

    def send(self, job: Job) -> RequestRecord:
        """Send one request now, from the caller's thread, and record it.

        With `retry_resets`, a connection reset before any answer is sent once more, as OpenAI's SDK does by
        default (it retries connection errors twice): the engine never saw a request it answered, so a client
        would not report it. Twice in a row is a failure, and the retry is kept in the record (`retried`).
        """
        start = time.monotonic()
        c = self._complete(job)
        retried = ""
        # Reset after the engine accepted the connection, before any status line: not a refusal, not a cut stream.
        if self.retry_resets and not c.ok and c.status == 0 and "reset by peer" in c.error:
            retried, c = c.error[:200], self._complete(job)
        rec = RequestRecord(stage=job.stage, level=job.level, instance=job.instance, node=job.node,
                            warmer=job.warmer, prefix_id=job.prefix_id, t_start_s=round(start - self.t0, 4),
                            prompt_tokens=c.prompt_tokens, cached_tokens=c.cached_tokens,
                            output_tokens=c.completion_tokens, ttft_s=c.ttft_s if c.ok else None,
                            e2e_s=time.monotonic() - start if retried else c.e2e_s, ok=c.ok, error=c.error[:200],
                            url=job.url, retried=retried)
        with self.lock:
            self.records.append(rec)
            if self.on_record:
                self.on_record(job, rec)
        return rec

    def _complete(self, job: Job) -> Completion:
        return complete(job.url, self.model, job.prompt, max_tokens=job.max_tokens or self.max_tokens,
                        timeout=job.timeout_s or self.timeout_s, headers=job.headers)

    def snapshot(self) -> list[RequestRecord]:
        with self.lock:
            return list(self.records)
