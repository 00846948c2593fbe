"""Monitor arithmetic from Prometheus text: rates, hit ratio, histogram quantiles (as Prometheus computes them)."""

from __future__ import annotations

import pytest

from p2p_ops.endpoints.metrics_api import metric_sum, parse_metrics
from p2p_ops.observe.monitor import frame_from_samples, histogram_quantile

SERVER_T0 = """
# HELP lmcache_mp_l2_load_completed_requests_total Total L2 load tasks completed (per-adapter)
# TYPE lmcache_mp_l2_load_completed_requests_total counter
lmcache_mp_l2_load_completed_requests_total{l2_name="p2p"} 4.0
lmcache_mp_lookup_hit_tokens_total{cache_salt="",model_name="tiny"} 512.0
lmcache_mp_lookup_requested_tokens_total{cache_salt="",model_name="tiny"} 1024.0
lmcache_mp_l1_memory_usage_bytes 1048576.0
lmcache_mp_l1_usage_ratio 0.25
"""
SERVER_T1 = SERVER_T0.replace('"p2p"} 4.0', '"p2p"} 10.0').replace("} 512.0", "} 1280.0").replace(
    "} 1024.0", "} 2048.0")
ENGINE_T0 = """
vllm:num_requests_running{model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_bucket{le="0.5",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="tiny"} 0.0
"""
ENGINE_T1 = """
vllm:num_requests_running{model_name="tiny"} 2.0
vllm:num_requests_waiting{model_name="tiny"} 3.0
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="tiny"} 2.0
vllm:time_to_first_token_seconds_bucket{le="0.5",model_name="tiny"} 8.0
vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="tiny"} 10.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="tiny"} 10.0
"""


def test_parse_metrics_reads_labels_and_values():
    s = parse_metrics(SERVER_T0)
    assert metric_sum(s, "lmcache_mp_l2_load_completed_requests_total", l2_name="p2p") == 4.0
    assert metric_sum(s, "lmcache_mp_l2_load_completed_requests_total", l2_name="fs") == 0.0
    assert metric_sum(s, "lmcache_mp_lookup_hit_tokens_total") == 512.0


def test_histogram_quantile_interpolates_like_prometheus():
    cum = [(0.1, 2.0), (0.5, 8.0), (1.0, 10.0), (float("inf"), 10.0)]
    # rank 5 falls in (0.1, 0.5]: 0.1 + 0.4 * (5 - 2) / (8 - 2) = 0.3
    assert histogram_quantile(0.5, cum) == pytest.approx(0.3)
    # rank 9.9 falls in (0.5, 1.0]: 0.5 + 0.5 * (9.9 - 8) / 2 = 0.975
    assert histogram_quantile(0.99, cum) == pytest.approx(0.975)
    assert histogram_quantile(0.5, []) is None
    assert histogram_quantile(0.5, [(0.1, 0.0), (float("inf"), 0.0)]) is None


def test_frame_from_two_scrapes():
    f = frame_from_samples("a-0", "a", parse_metrics(SERVER_T0), parse_metrics(SERVER_T1),
                           parse_metrics(ENGINE_T0), parse_metrics(ENGINE_T1), dt=2.0)
    assert f.up
    assert f.p2p_loads_total == 10.0 and f.p2p_loads_per_s == pytest.approx(3.0)
    assert f.hit_ratio == pytest.approx(768 / 1024)
    assert f.l1_usage_ratio == 0.25 and f.l1_used_bytes == 1048576.0
    assert (f.running, f.waiting) == (2.0, 3.0)
    assert f.ttft_p50_s == pytest.approx(0.3) and f.ttft_p99_s == pytest.approx(0.975)


def test_unreachable_node_is_down():
    f = frame_from_samples("a-0", "a", [], [], [], [], dt=2.0)
    assert not f.up and f.hit_ratio is None and f.ttft_p50_s is None
