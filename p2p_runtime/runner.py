"""Runs one request's model work: load the cached prefix, prefill the rest, store, decode.

Per request, as vLLM with the LMCacheMPConnector does it: look up the prompt's full chunks in
LMCache, retrieve the hits straight into the request's KV blocks, compute only the remainder with
chunked prefill, then store the newly computed full chunks. Any LMCache failure degrades to
recomputation (counted in ``p2p_engine_lmcache_fallbacks_total``); the request still succeeds.
"""

from __future__ import annotations

import logging
import math
import time

from p2p_runtime.kv_cache import BlockAllocator, PagedKVCache
from p2p_runtime.kv_events import KVEventRecorder
from p2p_runtime.lmcache_adapter import LMCacheAdapter, LMCacheError
from p2p_runtime.metrics import EngineMetrics
from p2p_runtime.model import TinyTransformer
from p2p_runtime.request import Request
from p2p_runtime.timing_profiles import TimingEmulator

logger = logging.getLogger(__name__)

# While LMCache is down every request would warn; one warning per interval is enough.
_UNAVAILABLE_WARN_INTERVAL_S = 10.0


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
        tokens = min(req.num_prompt_tokens + req.max_tokens, self.model.config.max_model_len)
        return math.ceil(tokens / self.block_size)

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
        self._pad(started, self.timing.prefill_target_s(computed, loaded))
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

    def pad_decode_step(self, started: float) -> None:
        self._pad(started, self.timing.decode_target_s())

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
        self.metrics.observe_op(op, time.monotonic() - started)
        return result

    def _fallback(self, req: Request, exc: LMCacheError) -> None:
        """Count the failure; warn (at most once per interval while LMCache is unavailable)."""
        self.metrics.fallback(exc.op, exc.reason)
        if exc.reason == "unavailable":
            now = time.monotonic()
            if now - self._last_unavailable_warning < _UNAVAILABLE_WARN_INTERVAL_S:
                return
            self._last_unavailable_warning = now
        action = "skipping the store" if exc.op == "store" else "recomputing the prompt"
        logger.warning("%s: %s; %s", req.request_id, exc, action)

    def _pad(self, started: float, target_s: float) -> None:
        if target_s > 0:
            self.metrics.emulated_sleep.inc(self.timing.pad(started, target_s))
