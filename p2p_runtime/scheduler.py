"""One worker thread that admits, prefills and decodes requests (:class:`Scheduler`), and the model work it runs.

The model is CPU-bound, so exactly one thread runs it. Like vLLM's scheduler, it keeps up to
``max_num_seqs`` requests running and interleaves their decode steps (one token each per step);
the rest wait in FIFO order and show up as ``vllm:num_requests_waiting``. A request is admitted
only when the KV blocks for its prompt plus ``max_tokens`` are free, so it can never run out of
blocks midway. Requests do not share batches, so each one's output is independent of the others.

Per request (:class:`ModelRunner`), as vLLM with the LMCacheMPConnector does it: look up the prompt's full chunks
in LMCache, retrieve the hits straight into the request's KV blocks, compute only the remainder with chunked
prefill, then store the newly computed full chunks. Any LMCache failure degrades to recomputation (counted in
``p2p_engine_lmcache_fallbacks_total``); the request still succeeds.

The HTTP layer creates a :class:`Request`, submits it and reads :class:`Event`s from its ``on_event`` callback
(called on the worker thread). Once the ``finish`` or ``error`` event is out, the worker no longer touches the
request, so the HTTP layer may read its fields.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
import logging
import math
import threading
import time

from p2p_runtime.kv_cache import BlockAllocator, PagedKVCache
from p2p_runtime.kv_events import KVEventRecorder
from p2p_runtime.lmcache_adapter import LMCacheAdapter, LMCacheError
from p2p_runtime.metrics import EngineMetrics
from p2p_runtime.model import TinyTransformer
from p2p_runtime.timing_profiles import TimingEmulator
from p2p_runtime.tokenizer import EOS_ID, ByteTokenizer

logger = logging.getLogger(__name__)

# How long the idle worker sleeps before re-checking for shutdown.
_IDLE_WAIT_S = 0.1
_STOP_WAIT_S = 10.0
# While LMCache is down every request would warn; one warning per interval is enough.
_UNAVAILABLE_WARN_INTERVAL_S = 10.0


class EngineStopped(RuntimeError):
    pass


@dataclass(frozen=True)
class Event:
    """``delta`` (new text), ``finish`` (done, see the request's fields) or ``error``."""

    kind: str
    text: str = ""
    finish_reason: str | None = None
    error: str | None = None


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_ids: list[int]
    max_tokens: int
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    on_event: Callable[[Event], None] = lambda event: None
    arrival: float = field(default_factory=time.monotonic)

    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    sent_chars: int = 0
    cached_tokens: int = 0
    finish_reason: str | None = None
    aborted: bool = False
    # Set by the runner: the LMCache session (named after request_id) needs an END_SESSION.
    lmcache_session_used: bool = False
    first_token_at: float | None = None
    last_token_at: float | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class ModelRunner:
    """Used by one worker thread."""

    def __init__(self, model: TinyTransformer, cache: PagedKVCache, allocator: BlockAllocator,
                 metrics: EngineMetrics, timing: TimingEmulator, adapter: LMCacheAdapter | None,
                 kv_events: KVEventRecorder) -> None:
        self.model = model
        self.cache = cache
        self.allocator = allocator
        self.metrics = metrics
        self.timing = timing
        self.adapter = adapter
        self.kv_events = kv_events
        self.chunk_size = model.config.chunk_size
        self.block_size = cache.spec.block_size
        self.blocks_per_chunk = self.chunk_size // self.block_size
        self._last_unavailable_warning = -math.inf

    def blocks_needed(self, req: Request) -> int:
        return math.ceil(min(req.num_prompt_tokens + req.max_tokens, self.model.config.max_model_len) / self.block_size)

    def prefill(self, req: Request) -> int:
        """Load what LMCache has, compute the rest: the first token."""
        started = time.monotonic()
        table = self.allocator.allocate(req.request_id, self.blocks_needed(req))
        self.metrics.kv_usage.set(self.allocator.usage)
        loaded = self._load_prefix(req, table)
        computed = req.num_prompt_tokens - loaded
        logits = self.model.prefill(req.prompt_ids, loaded, self.cache, table)
        req.cached_tokens = loaded
        self.kv_events.prefilled(req.request_id, req.prompt_ids)
        self.kv_events.in_lmcache(req.request_id, loaded)
        self.metrics.computed_tokens.inc(computed)
        self.metrics.tokens_by_source["local_compute"].inc(computed)
        self.metrics.tokens_by_source["external_kv_transfer"].inc(loaded)
        self.pad(started, self.timing.prefill_target_s(computed, loaded))
        return self.model.greedy(logits)

    def store(self, req: Request) -> None:
        """Store the prompt's full chunks that were computed here (not the loaded ones)."""
        first, last = req.cached_tokens // self.chunk_size, req.num_prompt_tokens // self.chunk_size
        if self.adapter is None or last <= first:
            return
        blocks = self.allocator.table(req.request_id)[first * self.blocks_per_chunk : last * self.blocks_per_chunk]
        req.lmcache_session_used = True
        try:
            self._timed("store", self.adapter.store, req.request_id, req.prompt_ids, first, last, blocks)
        except LMCacheError as exc:
            self._fallback(req, exc)
            return
        tokens = (last - first) * self.chunk_size
        self.kv_events.in_lmcache(req.request_id, last * self.chunk_size)
        self.metrics.stored_tokens.inc(tokens)
        self.metrics.stored_bytes.inc(tokens * self.cache.spec.bytes_per_token)

    def decode(self, req: Request) -> int:
        position = req.num_prompt_tokens + len(req.output_ids) - 1
        table = self.allocator.table(req.request_id)
        return self.model.greedy(self.model.decode(req.output_ids[-1], position, self.cache, table))

    def release(self, req: Request) -> None:
        self.allocator.free(req.request_id)
        self.kv_events.freed(req.request_id)
        self.metrics.kv_usage.set(self.allocator.usage)
        if req.lmcache_session_used and self.adapter is not None:
            req.lmcache_session_used = False
            self.adapter.end_session(req.request_id)

    def _load_prefix(self, req: Request, table: list[int]) -> int:
        n = req.num_prompt_tokens
        self.metrics.prefix_queries.inc(n)
        if self.adapter is None:
            return 0
        self.metrics.external_queries.inc(n)
        # Like vLLM, never load the last prompt token: its logits are needed, so at least one
        # token is always computed. Hence only chunks ending before position n - 1 count.
        max_chunks = (n - 1) // self.chunk_size
        if max_chunks == 0:
            return 0
        req.lmcache_session_used = True
        loaded = 0
        try:
            hits = self._timed("lookup", self.adapter.lookup, req.request_id, req.prompt_ids, max_chunks)
            loaded = hits * self.chunk_size
            if hits:
                self._timed("retrieve", self.adapter.retrieve, req.request_id, req.prompt_ids, hits,
                            table[: hits * self.blocks_per_chunk])
        except LMCacheError as exc:
            self._fallback(req, exc)
            self.metrics.recomputed_tokens.inc(loaded)  # 0 unless the lookup hit and the retrieve failed
            return 0
        if not loaded:
            return 0
        mismatched = self.cache.check_loaded(table, loaded)
        if mismatched:
            # The answer will differ (check_loaded folds the disagreement in); say where it came from.
            self.metrics.kv_mismatch_tokens.inc(mismatched)
            logger.warning("%s: %d of %d loaded tokens carry KV bytes that disagree with their own primary "
                           "values (a corrupted or mis-laid transfer)", req.request_id, mismatched, loaded)
        self.metrics.external_hits.inc(loaded)
        self.metrics.loaded_tokens.inc(loaded)
        self.metrics.loaded_bytes.inc(loaded * self.cache.spec.bytes_per_token)
        logger.debug("%s: loaded %d/%d prompt tokens from LMCache", req.request_id, loaded, n)
        return loaded

    def _timed(self, op: str, fn, *args):
        started = time.monotonic()
        result = fn(*args)
        self.metrics.lmcache_op_seconds.labels(op=op).observe(time.monotonic() - started)
        return result

    def _fallback(self, req: Request, exc: LMCacheError) -> None:
        """Count the failure; warn (at most once per interval while LMCache is unavailable)."""
        self.metrics.lmcache_fallbacks.labels(op=exc.op, reason=exc.reason).inc()
        if exc.reason == "unavailable":
            now = time.monotonic()
            if now - self._last_unavailable_warning < _UNAVAILABLE_WARN_INTERVAL_S:
                return
            self._last_unavailable_warning = now
        action = "skipping the store" if exc.op == "store" else "recomputing the prompt"
        logger.warning("%s: %s; %s", req.request_id, exc, action)

    def pad(self, started: float, target_s: float) -> None:
        if target_s > 0:
            self.metrics.emulated_sleep.inc(self.timing.pad(started, target_s))


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
        admitted_at = time.monotonic()
        self.metrics.queue_time.observe(admitted_at - req.arrival)
        self.metrics.prompt_tokens.inc(req.num_prompt_tokens)
        try:
            token = self.runner.prefill(req)
            self._append(req, token)
            self.runner.store(req)
        except Exception as exc:
            self._crash(req, exc)
            return
        self.metrics.prefill_time.observe(req.first_token_at - admitted_at)
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
        self.runner.pad(started, self.runner.timing.decode_target_s())
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
        if token == EOS_ID and not req.ignore_eos:
            req.finish_reason = "stop"
        else:
            req.text += self.tokenizer.decode([token])
            if req.stop:
                # Only text that could contain a new match is searched: everything already sent is final.
                window_start = max(0, req.sent_chars - max(len(s) for s in req.stop) + 1)
                if found := [i for s in req.stop if (i := req.text.find(s, window_start)) >= 0]:
                    req.text = req.text[: min(found)]
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
