"""The vLLM metric names and ops routes tools expect from either engine (reference/vllm-cpu.md)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from p2p_ops.endpoints.metrics_api import metric_sum, parse_metrics
from p2p_runtime.api import create_app
from p2p_runtime.config import EngineConfig
from p2p_runtime.core import EngineCore
from p2p_runtime.metrics import buckets_1_2_5
from p2p_runtime.tokenizer import ByteTokenizer

MODEL = "tiny-surface"


@pytest.fixture(scope="module")
def client():
    core = EngineCore(EngineConfig(served_model_name=MODEL, max_model_len=1024, num_blocks=256, max_num_seqs=4))
    with TestClient(create_app(core)) as c:
        yield c


def scrape(client):
    return parse_metrics(client.get("/metrics").text)


def test_ping_and_reset_prefix_cache(client):
    assert client.get("/ping").status_code == 200
    assert client.post("/ping").status_code == 200
    assert client.post("/reset_prefix_cache").status_code == 200
    assert client.get("/reset_prefix_cache").status_code == 405


def test_request_token_histograms_and_sources(client):
    before = scrape(client)
    prompt = "where does this prompt's KV come from?"
    r = client.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 7, "ignore_eos": True})
    assert r.status_code == 200, r.text
    after = scrape(client)
    n_prompt = len(ByteTokenizer().encode(prompt, add_bos=True))

    def delta(name, **labels):
        return metric_sum(after, name, **labels) - metric_sum(before, name, **labels)

    assert delta("vllm:request_prompt_tokens_count") == 1
    assert delta("vllm:request_prompt_tokens_sum") == n_prompt
    assert delta("vllm:request_generation_tokens_sum") == 7
    assert delta("vllm:request_generation_tokens_bucket", le="+Inf") == 1
    assert delta("vllm:prompt_tokens_by_source_total", source="local_compute") == n_prompt
    assert delta("vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 0
    sources = {lab["source"] for n, lab, _ in after if n == "vllm:prompt_tokens_by_source_total"}
    assert sources == {"local_compute", "local_cache_hit", "external_kv_transfer"}


def test_preemptions_and_cache_config_are_exposed(client):
    samples = scrape(client)
    assert [v for n, _, v in samples if n == "vllm:num_preemptions_total"] == [0.0]
    info = [lab for n, lab, v in samples if n == "vllm:cache_config_info" and v == 1]
    assert info and info[0]["block_size"] == "16" and info[0]["num_gpu_blocks"] == "256"


def test_token_buckets_follow_vllm():
    assert buckets_1_2_5(1024) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
