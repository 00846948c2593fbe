"""Prometheus text exposition (the servers' and engines' /metrics): every metric name this toolkit reads (once,
here), and parse, sum, scrape."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from p2p_ops.endpoints.fetch import get_text

Sample = tuple[str, dict[str, str], float]

# LMCache's servers. The L1 eviction counters: how many chunks its eviction loop deleted (also every pulled chunk
# freed after its read), and how often the loop ran.
L1_EVICTED = "lmcache_mp_l1_evicted_chunks_total"
L1_EVICTION_RUNS = "lmcache_mp_l1_eviction_loop_triggered_total"
L1_USED = "lmcache_mp_l1_memory_usage_bytes"
L1_RATIO = "lmcache_mp_l1_usage_ratio"
# Loads an L2 adapter completed into this server (label l2_name="p2p": pulls from peers), and their GB/s.
P2P_LOADS = "lmcache_mp_l2_load_completed_requests_total"
LOAD_THROUGHPUT_BUCKETS = "lmcache_mp_l2_load_throughput_GB_per_second_bucket"
PREFETCH_ADAPTERS = "lmcache_mp_l2_prefetch_adapters"     # label state="active": the peers a server reads from
# Chunks whose prefetch fell back to recompute, by reason: LMCache 0.5.6's reasons are causes of the catalogue.
PREFETCH_FAILURES = "lmcache_mp_l2_prefetch_failure_chunks_total"
PREFETCH_REASONS = ("l1_oom", "l1_contended", "not_found")
ACTIVE_LOOKUP_JOBS = "lmcache_mp_active_p2p_lookup_jobs"  # owner-side P2P lookup jobs held
HIT_TOKENS = "lmcache_mp_lookup_hit_tokens_total"
REQ_TOKENS = "lmcache_mp_lookup_requested_tokens_total"
L1_HIT_TOKENS = "lmcache_mp_lookup_hit_l1_tokens_total"
PEER_HIT_TOKENS = "lmcache_mp_lookup_hit_l2_tokens_total"
# The embedded engine (p2p_runtime): its link to its server, KV bytes it loaded, bytes a pull mis-laid, op times.
ENGINE_CONNECTED = "p2p_engine_lmcache_connected"
ENGINE_LOADED_BYTES = "p2p_engine_lmcache_loaded_bytes_total"
KV_MISMATCH = "p2p_engine_lmcache_kv_mismatch_tokens_total"
ENGINE_OP_SECONDS = "p2p_engine_lmcache_op_seconds"     # histogram, label op=lookup|retrieve|store
# vLLM (and the embedded engine's vLLM-named series). Where each prompt token came from, by source:
# local_compute, local_cache_hit (vLLM's own prefix cache), external_kv_transfer (its KV connector: LMCache).
TOKENS_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
TTFT = "vllm:time_to_first_token_seconds"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
EXTERNAL_PREFIX_CACHE_HITS = "vllm:external_prefix_cache_hits_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"


def _parse(text: str) -> list[Sample]:
    return [(smp.name, dict(smp.labels), float(smp.value))
            for fam in text_string_to_metric_families(text) for smp in fam.samples]


def parse_metrics(text: str) -> list[Sample]:
    """Prometheus text exposition -> (name, labels, value) samples, by prometheus_client's parser (+Inf buckets,
    escaped label values, NaN). A malformed line costs only itself: the text is then parsed line by line."""
    text = text or ""
    try:
        return _parse(text)
    except ValueError:
        pass
    out: list[Sample] = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            try:
                out.extend(_parse(line + "\n"))
            except ValueError:
                continue
    return out


def metric_sum(samples: list[Sample], name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include `labels` (0.0 when absent: counters appear lazily)."""
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == val for k, val in labels.items()))


def scrape(url: str) -> list[Sample]:
    return parse_metrics(get_text(url.rstrip("/") + "/metrics") or "")


def prefetch_failures(samples: list[Sample]) -> dict[str, float]:
    """Chunks whose prefetch fell back to recompute, by reason (only reasons counted above 0)."""
    out: dict[str, float] = {}
    for name, labels, value in samples:
        if name == PREFETCH_FAILURES and value > 0:
            out[labels.get("reason", "?")] = out.get(labels.get("reason", "?"), 0.0) + value
    return out
