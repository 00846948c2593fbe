"""/metrics text -> samples with prometheus_client's parser: +Inf buckets, escaped labels, bad lines."""

from __future__ import annotations

from pathlib import Path

from p2p_ops.endpoints import engine_api, fetch
from p2p_ops.endpoints.metrics_api import metric_sum, parse_metrics

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "metrics"


def test_engine_scrape_keeps_inf_buckets_and_counts():
    samples = parse_metrics((FIX / "engine.txt").read_text())
    inf = [v for n, lab, v in samples if n == "vllm:time_to_first_token_seconds_bucket" and lab.get("le") == "+Inf"]
    assert inf == [1.0]
    assert metric_sum(samples, "vllm:time_to_first_token_seconds_count") == 1
    assert metric_sum(samples, "vllm:generation_tokens_total", model_name="tiny-llm") == 4


def test_lmcache_server_scrape():
    samples = parse_metrics((FIX / "lmcache_server.txt").read_text())
    assert metric_sum(samples, "lmcache_mp_l2_load_completed_requests_total", l2_name="p2p") >= 1
    assert any(n.endswith("_bucket") and lab.get("le") == "+Inf" for n, lab, _ in samples)
    assert metric_sum(samples, "lmcache_mp_l1_memory_usage_bytes") > 0


def test_escaped_label_values_are_unescaped():
    text = ('# TYPE x counter\n'
            'x_total{path="C:\\\\dir",msg="say \\"hi\\"",nl="a\\nb"} 3\n')
    [(name, labels, value)] = parse_metrics(text)
    assert (name, value) == ("x_total", 3.0)
    assert labels == {"path": "C:\\dir", "msg": 'say "hi"', "nl": "a\nb"}


def test_a_malformed_line_costs_only_itself():
    text = "good_a 1\nthis is { not a sample\ngood_b{x=\"1\"} 2.5\n"
    assert parse_metrics(text) == [("good_a", {}, 1.0), ("good_b", {"x": "1"}, 2.5)]
    assert parse_metrics("") == [] and parse_metrics(None) == []


def test_engine_lmcache_state_reads_only_its_metric(monkeypatch):


    text = ("# HELP p2p_engine_lmcache_connected 1 when linked\n# TYPE p2p_engine_lmcache_connected gauge\n"
            "p2p_engine_lmcache_connected 1.0\np2p_engine_lmcache_connected_since 5.0\nother_metric{a=\"b\"} 3\n")
    monkeypatch.setattr(fetch, "get_text", lambda url, timeout=fetch.TIMEOUT: text)
    assert engine_api.engine_lmcache_state("http://e") == "connected"
    monkeypatch.setattr(fetch, "get_text", lambda url, timeout=fetch.TIMEOUT: text.replace(" 1.0\n", " 0.0\n", 1))
    assert engine_api.engine_lmcache_state("http://e") == "disconnected"
    monkeypatch.setattr(fetch, "get_text", lambda url, timeout=fetch.TIMEOUT: "other_metric 1\n")
    assert engine_api.engine_lmcache_state("http://e") == "n/a"
    monkeypatch.setattr(fetch, "get_text", lambda url, timeout=fetch.TIMEOUT: None)
    assert engine_api.engine_lmcache_state("http://e") == "n/a"
