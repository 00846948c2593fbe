"""One worker thread that admits, prefills and decodes requests.

The model is CPU-bound, so exactly one thread runs it. Like vLLM's scheduler, it keeps up to
``max_num_seqs`` requests running and interleaves their decode steps (one token each per step);
the rest wait in FIFO order and show up as ``vllm:num_requests_waiting``. A request is admitted
only when the KV blocks for its prompt plus ``max_tokens`` are free, so it can never run out of
blocks midway. Requests do not share batches, so each one's output is independent of the others.
"""

from __future__ import annotations

from collections import deque
import logging
import threading
import time

from p2p_runtime.metrics import EngineMetrics
from p2p_runtime.request import Event, Request
from p2p_runtime.runner import ModelRunner
from p2p_runtime.tokenizer import ByteTokenizer

logger = logging.getLogger(__name__)

# How long the idle worker sleeps before re-checking for shutdown.
_IDLE_WAIT_S = 0.1
_STOP_WAIT_S = 10.0


class EngineStopped(RuntimeError):
    pass


class Scheduler:
    """The only place where requests change state."""

    def __init__(self, runner: ModelRunner, tokenizer: ByteTokenizer, metrics: EngineMetrics,
                 max_num_seqs: int) -> None:
        self.runner = runner
        self.tokenizer = tokenizer
        self.metrics = metrics
        self.max_num_seqs = max_num_seqs
        self.max_model_len = runner.model.config.max_model_len
        self._cond = threading.Condition()
        self._waiting: deque[Request] = deque()
        self._running: list[Request] = []
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="engine-worker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Finish the current step, fail everything still queued or running, join the worker."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=_STOP_WAIT_S)
            if self._thread.is_alive():
                logger.error("engine worker did not stop within %.0fs", _STOP_WAIT_S)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit(self, req: Request) -> None:
        with self._cond:
            if self._stopping:
                raise EngineStopped("engine is shutting down")
            self._waiting.append(req)
            self._publish_queue()
            self._cond.notify_all()

    @property
    def num_waiting(self) -> int:
        """Requests queued for a slot (a racy read is fine: it only decides when to answer 429)."""
        return len(self._waiting)

    def abort(self, req: Request) -> None:
        """Drop a request whose client went away; its resources are freed at the next step."""
        with self._cond:
            req.aborted = True
            self._cond.notify_all()

    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    if self._stopping:
                        break
                    if not self._waiting and not self._running:
                        self._cond.wait(timeout=_IDLE_WAIT_S)
                        continue
                    req = self._next_admissible()
                if req is not None:
                    self._admit(req)
                if self._running:
                    self._decode_step()
        except Exception:
            logger.exception("engine worker crashed")
            self._fail_all("engine worker crashed")
            raise
        self._fail_all("engine is shutting down")

    def _next_admissible(self) -> Request | None:
        """Pop the head of the queue if it can run now (caller holds the lock)."""
        while self._waiting and self._waiting[0].aborted:
            # Never admitted, so it holds no blocks and no LMCache session.
            dropped = self._waiting.popleft()
            dropped.finish_reason = "abort"
            self.metrics.request_finished("abort")
            self._publish_queue()
        if not self._waiting or len(self._running) >= self.max_num_seqs:
            return None
        head = self._waiting[0]
        if not self.runner.allocator.can_allocate(self.runner.blocks_needed(head)):
            return None  # FIFO: wait for running requests to free blocks
        self._waiting.popleft()
        self._running.append(head)
        self._publish_queue()
        return head

    def _admit(self, req: Request) -> None:
        req.admitted_at = time.monotonic()
        self.metrics.queue_time.observe(req.admitted_at - req.arrival)
        self.metrics.prompt_tokens.inc(req.num_prompt_tokens)
        try:
            token = self.runner.prefill(req)
            self._append(req, token)
            self.runner.store(req)
        except Exception as exc:
            self._crash(req, exc)
            return
        self.metrics.prefill_time.observe(req.first_token_at - req.admitted_at)
        if req.finished:
            self._complete(req)

    def _decode_step(self) -> None:
        started = time.monotonic()
        produced = []
        for req in list(self._running):
            if req.aborted:
                self._complete(req, reason="abort", emit=False)
                continue
            try:
                produced.append((req, self.runner.decode(req)))
            except Exception as exc:
                self._crash(req, exc)
        # Tokens become visible when the (emulated) step ends, as on a GPU.
        self.runner.pad_decode_step(started)
        for req, token in produced:
            self._append(req, token)
            if req.finished:
                self._complete(req)

    def _append(self, req: Request, token: int) -> None:
        now = time.monotonic()
        if req.first_token_at is None:
            req.first_token_at = now
            self.metrics.ttft.observe(now - req.arrival)
        else:
            self.metrics.itl.observe(now - req.last_token_at)
        req.last_token_at = now
        req.output_ids.append(token)
        self.metrics.generation_tokens.inc()
        if token == self.tokenizer.eos_id and not req.ignore_eos:
            req.finish_reason = "stop"
        else:
            req.text += self.tokenizer.decode([token])
            if req.stop and _truncate_at_stop(req):
                req.finish_reason = "stop"
        if not req.finished and (len(req.output_ids) >= req.max_tokens or
                                 req.num_prompt_tokens + len(req.output_ids) >= self.max_model_len):
            req.finish_reason = "length"
        # Hold back text that could still turn out to be the start of a stop string.
        holdback = 0 if req.finished else max((len(s) - 1 for s in req.stop), default=0)
        upto = max(len(req.text) - holdback, req.sent_chars)
        if upto > req.sent_chars:
            req.on_event(Event("delta", text=req.text[req.sent_chars : upto]))
            req.sent_chars = upto

    def _complete(self, req: Request, reason: str | None = None, emit: bool = True) -> None:
        """Release resources and report, outside the lock (release may do RPCs)."""
        self._stop_running(req)
        req.finish_reason = reason = reason or req.finish_reason
        self.runner.release(req)
        self.metrics.request_finished(reason)
        self.metrics.request_prompt_tokens.observe(req.num_prompt_tokens)
        self.metrics.request_generation_tokens.observe(len(req.output_ids))
        now = time.monotonic()
        self.metrics.e2e.observe(now - req.arrival)
        if req.first_token_at is not None:
            self.metrics.decode_time.observe(now - req.first_token_at)
        if emit:
            req.on_event(Event("finish", finish_reason=reason))

    def _stop_running(self, req: Request) -> None:
        with self._cond:
            if req in self._running:
                self._running.remove(req)
            self._publish_queue()

    def _crash(self, req: Request, exc: Exception) -> None:
        logger.exception("%s failed: %s", req.request_id, exc)
        self._stop_running(req)
        self._fail(req, f"internal engine error: {exc}")

    def _fail_all(self, message: str) -> None:
        with self._cond:
            pending = [*self._running, *self._waiting]
            self._running.clear()
            self._waiting.clear()
            self._publish_queue()
        for req in pending:
            self._fail(req, message)

    def _fail(self, req: Request, message: str) -> None:
        req.finish_reason = "error"
        self.runner.release(req)
        req.on_event(Event("error", error=message))

    def _publish_queue(self) -> None:
        self.metrics.running.set(len(self._running))
        self.metrics.waiting.set(len(self._waiting))


def _truncate_at_stop(req: Request) -> bool:
    # Only text that could contain a new match is searched: everything already sent is final.
    window_start = max(0, req.sent_chars - max(len(s) for s in req.stop) + 1)
    found = [i for s in req.stop if (i := req.text.find(s, window_start)) >= 0]
    if not found:
        return False
    req.text = req.text[: min(found)]
    return True
