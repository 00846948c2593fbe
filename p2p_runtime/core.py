"""Assembles an engine from its config: tokenizer, model, KV cache, LMCache adapter, scheduler.

The HTTP layer (``api.py``) only sees :class:`EngineCore`; the CLI (``engine.py``) only builds one.
"""

from __future__ import annotations

from dataclasses import replace
import logging
import os
import zlib

from p2p_runtime.config import DEFAULT_CHUNK_SIZE, ConfigError, EngineConfig
from p2p_runtime.kv_cache import BlockAllocator, PagedKVCache
from p2p_runtime.kv_events import KVEventRecorder, ZmqEventPublisher
from p2p_runtime.lmcache_adapter import KVRegistration, LMCacheAdapter, probe_chunk_size
from p2p_runtime.metrics import EngineMetrics
from p2p_runtime.model import TinyTransformer, configure_threads
from p2p_runtime.scheduler import ModelRunner, Scheduler
from p2p_runtime.timing_profiles import TimingEmulator
from p2p_runtime.tokenizer import ByteTokenizer

logger = logging.getLogger(__name__)


class EngineCore:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        configure_threads(config.threads)
        self.tokenizer = ByteTokenizer(config.vocab_size)
        self.metrics = EngineMetrics(config.served_model_name, config.label, config.max_model_len, cache_info={
            "block_size": config.block_size, "num_gpu_blocks": config.num_blocks, "cache_dtype": "auto",
            "enable_prefix_caching": False, "kv_connector": "LMCache" if config.lmcache_url else ""})
        chunk_size = self._resolve_chunk_size() if config.lmcache_url else config.chunk_size
        self.chunk_size = chunk_size or DEFAULT_CHUNK_SIZE
        self.model = TinyTransformer(replace(config, chunk_size=self.chunk_size))
        self.cache = PagedKVCache(self.model.kv_spec(config.num_blocks, config.block_size, config.kv_profile))
        spec = self.cache.spec
        logger.info("paged KV: %s profile, %d layers x %d KV heads x %d %s, %.0f KiB per token, %d blocks of %d "
                    "tokens = %.2f GiB", config.profile, spec.num_layers, spec.num_heads, spec.head_size,
                    str(spec.dtype).replace("torch.", ""), spec.bytes_per_token / 1024, spec.num_blocks,
                    spec.block_size, config.kv_bytes / 2**30)
        self.allocator = BlockAllocator(config.num_blocks)
        self.adapter = None
        if config.lmcache_url:
            # The server keys registered KV caches by an int; derive a stable one from the label and
            # pid so two engines on one server never collide.
            worker_id = zlib.crc32(f"{config.label}/{os.getpid()}".encode()) & 0x7FFFFFFF
            registration = KVRegistration(config.served_model_name, self.cache.tensors, spec.num_layers,
                                          config.block_size, worker_id)
            self.adapter = LMCacheAdapter(config.lmcache_url, registration, config.lmcache_timeout,
                                          config.lmcache_reconnect_interval)
        events = config.kv_events
        self.kv_publisher = ZmqEventPublisher(events) if events.active else None
        self.kv_events = KVEventRecorder(self.kv_publisher, config.served_model_name, config.block_size)
        self.runner = ModelRunner(self.model, self.cache, self.allocator, self.metrics,
                                  TimingEmulator(config), self.adapter, self.kv_events)
        self.scheduler = Scheduler(self.runner, self.tokenizer, self.metrics, config.max_num_seqs)
        self._started = self._stopped = False

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        if self.adapter is not None:
            self.adapter.on_state_change = self.metrics.lmcache_connected.set
            if not self.adapter.start(self.chunk_size):
                logger.warning("LMCache server %s not reachable yet; serving without cache and "
                               "retrying every %.1fs", self.config.lmcache_url,
                               self.config.lmcache_reconnect_interval)
        # A restarted engine's earlier announcements are void (a replay may still carry them).
        self.kv_events.cleared()
        self.scheduler.start()

    def stop(self) -> None:
        """Idempotent, also if never started."""
        if self._stopped:
            return
        self._stopped = True
        self.scheduler.stop()
        if self.adapter is not None:
            self.adapter.close()
        if self.kv_publisher is not None:
            self.kv_publisher.close()
        logger.info("engine stopped")

    @property
    def lmcache_state(self) -> str:
        if self.adapter is None:
            return "off"
        return "connected" if self.adapter.connected else "disconnected"

    def _resolve_chunk_size(self) -> int | None:
        # Asked before the adapter exists: the KV cache and model depend on the chunk size.
        server = probe_chunk_size(self.config.lmcache_url, self.config.lmcache_timeout)
        wanted = self.config.chunk_size
        if server is None:
            logger.warning("LMCache server %s did not answer; assuming chunk size %d",
                           self.config.lmcache_url, wanted or DEFAULT_CHUNK_SIZE)
            return wanted
        if wanted is not None and wanted != server:
            raise ConfigError(f"--chunk-size {wanted} differs from the LMCache server's chunk size "
                              f"{server}; drop --chunk-size or use {server}")
        self.config.check_chunk_size(server)
        return server
