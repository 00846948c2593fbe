"""Prometheus metrics: vLLM's names for what vLLM also reports, ``p2p_engine_*`` for the rest.

Keeping vLLM's names (and its ``model_name``/``engine`` labels and buckets) lets dashboards,
routers and the test harness read this engine and a real vLLM the same way. Each engine gets its
own registry so several apps can live in one process (tests).

This engine has no local prefix cache of its own (like ``vllm serve --no-enable-prefix-caching``):
``vllm:prefix_cache_hits_total`` stays 0 and every reused token is an external (LMCache) hit.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest

# vLLM exposes no ``*_created`` series; matching it halves the scrape size.
disable_created_metrics()

# vLLM v1's buckets (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)
LMCACHE_OP_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
# Where a prompt token's KV came from, as vLLM labels vllm:prompt_tokens_by_source.
TOKEN_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


def buckets_1_2_5(max_value: int) -> tuple[float, ...]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to max_value (token-count histograms)."""
    return tuple(float(v) for v in (m * 10 ** e for e in range(20) for m in (1, 2, 5)) if v <= max_value)


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class EngineMetrics:
    def __init__(self, model_name: str, instance_id: str, max_model_len: int = 8192,
                 cache_info: dict[str, object] | None = None) -> None:
        self.registry = r = CollectorRegistry()
        labels, lv = ("model_name", "engine"), {"model_name": model_name, "engine": "0"}
        self._lv = lv

        def labelled(kind, name, doc, **kw):
            return kind(name, doc, labels, registry=r, **kw).labels(**lv)

        def total(name, doc):  # an engine-wide p2p_engine_* counter, no labels
            return Counter(name, doc, registry=r)

        def hist(name, doc, buckets):
            return labelled(Histogram, name, doc, buckets=buckets)

        self.running = labelled(Gauge, "vllm:num_requests_running", "Requests being decoded.")
        self.waiting = labelled(Gauge, "vllm:num_requests_waiting", "Requests waiting to start.")
        self.kv_usage = labelled(Gauge, "vllm:kv_cache_usage_perc", "Fraction of KV blocks in use (0-1).")
        self.prefix_queries = labelled(Counter, "vllm:prefix_cache_queries",
                                       "Prompt tokens queried in the local prefix cache.")
        # Never incremented: no local prefix cache here (every reuse is an LMCache hit).
        labelled(Counter, "vllm:prefix_cache_hits", "Prompt tokens hit in the local prefix cache.")
        self.external_queries = labelled(Counter, "vllm:external_prefix_cache_queries",
                                         "Prompt tokens queried in LMCache.")
        self.external_hits = labelled(Counter, "vllm:external_prefix_cache_hits", "Prompt tokens loaded from LMCache.")
        self.prompt_tokens = labelled(Counter, "vllm:prompt_tokens", "Prompt tokens processed.")
        self.generation_tokens = labelled(Counter, "vllm:generation_tokens", "Tokens generated.")
        self._success = Counter("vllm:request_success", "Finished requests.", (*labels, "finished_reason"), registry=r)
        by_source = Counter("vllm:prompt_tokens_by_source", "Prompt tokens by where their KV came from.",
                            (*labels, "source"), registry=r)
        self.tokens_by_source = {src: by_source.labels(source=src, **lv) for src in TOKEN_SOURCES}
        # Never incremented: this scheduler waits for free blocks instead of preempting (exposed at 0 as vLLM).
        labelled(Counter, "vllm:num_preemptions", "Preempted requests.")
        token_buckets = buckets_1_2_5(max_model_len)
        self.request_prompt_tokens = hist("vllm:request_prompt_tokens", "Prompt tokens per finished request.",
                                          token_buckets)
        self.request_generation_tokens = hist("vllm:request_generation_tokens",
                                              "Generated tokens per finished request.", token_buckets)
        info = {k: str(v) for k, v in (cache_info or {}).items()}
        Gauge("vllm:cache_config_info", "Information of the KV cache configuration (value is always 1).",
              tuple(info), registry=r).labels(**info).set(1)
        self.ttft = hist("vllm:time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS)
        self.e2e = hist("vllm:e2e_request_latency_seconds", "End-to-end request latency.", LATENCY_BUCKETS)
        self.itl = hist("vllm:inter_token_latency_seconds", "Time between generated tokens.", ITL_BUCKETS)
        self.queue_time = hist("vllm:request_queue_time_seconds", "Time spent waiting.", LATENCY_BUCKETS)
        self.prefill_time = hist("vllm:request_prefill_time_seconds", "Prefill phase time.", LATENCY_BUCKETS)
        self.decode_time = hist("vllm:request_decode_time_seconds", "Decode phase time.", LATENCY_BUCKETS)

        Gauge("p2p_engine_info", "Static engine facts (value is always 1).",
              ("instance_id", "model_name"), registry=r).labels(instance_id, model_name).set(1)
        self.lmcache_connected = Gauge("p2p_engine_lmcache_connected",
                                "1 while registered with the LMCache server.", registry=r)
        self.lmcache_fallbacks = Counter(
            "p2p_engine_lmcache_fallbacks", "LMCache operations that failed and were worked "
            "around (recompute, or skip the store).", ("op", "reason"), registry=r)
        self.recomputed_tokens = total("p2p_engine_lmcache_recomputed_tokens", "Prompt tokens LMCache reported as "
                                       "hits that were recomputed because loading them failed.")
        self.loaded_tokens = total("p2p_engine_lmcache_loaded_tokens", "Prompt tokens loaded from LMCache.")
        self.loaded_bytes = total("p2p_engine_lmcache_loaded_bytes", "KV bytes loaded from LMCache.")
        self.stored_tokens = total("p2p_engine_lmcache_stored_tokens", "Prompt tokens stored to LMCache.")
        self.stored_bytes = total("p2p_engine_lmcache_stored_bytes", "KV bytes stored to LMCache.")
        self.kv_mismatch_tokens = total(
            "p2p_engine_lmcache_kv_mismatch_tokens", "Loaded tokens whose KV bytes in some layer disagreed with "
            "their primary values (real-model profiles check every loaded byte).")
        self.computed_tokens = total("p2p_engine_computed_prompt_tokens", "Prompt tokens computed by the model.")
        self.lmcache_op_seconds = Histogram("p2p_engine_lmcache_op_seconds", "Latency of LMCache operations.",
                                            ("op",), buckets=LMCACHE_OP_BUCKETS, registry=r)
        self.emulated_sleep = total("p2p_engine_emulated_sleep_seconds", "Seconds slept to emulate GPU timing.")

    def request_finished(self, reason: str) -> None:
        self._success.labels(finished_reason=reason, **self._lv).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
