"""The engine against a real ``lmcache server``: cache hits, identical outputs, real clients.

One server and a few engine processes are shared by the whole module; every test uses prompts of
its own so the shared cache never couples tests.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
import uuid

import openai
import pytest

from tests.component.conftest import ENV, LMCACHE, EngineProcess, log_tail

pytestmark = pytest.mark.component

CHUNK = 256


@pytest.fixture(scope="module")
def engine_a(lmcache_server, engines) -> EngineProcess:
    return engines.start("--lmcache-url", lmcache_server.rpc_url, "--instance-id", "a",
                         name="cached-a")


@pytest.fixture(scope="module")
def engine_b(lmcache_server, engines) -> EngineProcess:
    return engines.start("--lmcache-url", lmcache_server.rpc_url, "--instance-id", "b",
                         name="cached-b")


@pytest.fixture(scope="module")
def plain(engines) -> EngineProcess:
    return engines.start("--instance-id", "plain", name="plain")


def document(tag: str, words: int) -> str:
    """A long-doc-qa style prompt, unique per ``tag`` so tests never share cache entries."""
    return f"Document {tag}-{uuid.uuid4().hex[:8]}: " + " ".join(["hi"] * words)


def full_chunks_before_last_token(prompt_tokens: int) -> int:
    return (prompt_tokens - 1) // CHUNK * CHUNK


def test_second_identical_request_is_served_from_lmcache(engine_a):
    prompt = document("repeat", 400)
    before = engine_a.metrics()
    cold = engine_a.chat(prompt)
    warm = engine_a.chat(prompt)
    after = engine_a.metrics()

    n = cold["usage"]["prompt_tokens"]
    expected = full_chunks_before_last_token(n)
    assert expected >= 2 * CHUNK
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] == expected
    assert warm["choices"][0]["message"]["content"] == cold["choices"][0]["message"]["content"]

    def delta(name):
        return after.get(name, 0) - before.get(name, 0)

    assert delta("p2p_engine_lmcache_stored_tokens_total") == n // CHUNK * CHUNK
    assert delta("p2p_engine_lmcache_loaded_tokens_total") == expected
    assert delta("vllm:external_prefix_cache_hits_total") == expected
    assert delta("p2p_engine_lmcache_loaded_bytes_total") == expected * 2 * 2 * 4 * 32 * 4
    assert delta("p2p_engine_computed_prompt_tokens_total") == 2 * n - expected
    assert after["p2p_engine_lmcache_connected"] == 1
    assert delta("p2p_engine_lmcache_fallbacks_total") == 0


@pytest.mark.parametrize("extra_tokens", [1, 0, 2, 300])
def test_outputs_with_cache_equal_plain_engine(engine_a, engine_b, plain, extra_tokens):
    # Prompt lengths straddle chunk boundaries: exactly k chunks, k chunks + 1, ...
    ids = [256, *uuid.uuid4().hex[:8].encode(), *[0x68, 0x69, 0x20] * 300]
    ids = ids[: 2 * CHUNK + extra_tokens]
    body = {"prompt": ids, "max_tokens": 24, "ignore_eos": True}

    reference = plain.post("/v1/completions", body)
    cold_a = engine_a.post("/v1/completions", body)
    warm_a = engine_a.post("/v1/completions", body)
    # Engine b never saw the prompt: whatever it loads was computed by engine a.
    from_b = engine_b.post("/v1/completions", body)

    expected_hits = full_chunks_before_last_token(len(ids))
    assert cold_a["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    for data in (warm_a, from_b):
        assert data["usage"]["prompt_tokens_details"]["cached_tokens"] == expected_hits
    texts = {d["choices"][0]["text"] for d in (reference, cold_a, warm_a, from_b)}
    assert len(texts) == 1, texts


def test_openai_client_streaming_and_not(engine_a):
    client = openai.OpenAI(base_url=f"{engine_a.url}/v1", api_key="unused", max_retries=0,
                           timeout=120)
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": document("openai", 300)}]

    full = client.chat.completions.create(model=model, messages=messages, max_tokens=12,
                                          temperature=0, extra_body={"ignore_eos": True})
    assert full.choices[0].finish_reason == "length"
    assert len(full.choices[0].message.content) == 12
    assert full.usage.completion_tokens == 12

    stream = client.chat.completions.create(model=model, messages=messages, max_tokens=12,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == \
        full_chunks_before_last_token(full.usage.prompt_tokens)

    completion = client.completions.create(model=model, prompt="Say something", max_tokens=5)
    assert completion.choices[0].text and completion.usage.prompt_tokens == 14
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=model, prompt="Say something", max_tokens=5, stream=True))
    assert streamed == completion.choices[0].text

    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=messages, max_tokens=1)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=messages, max_tokens=0)


def test_lmcache_bench_long_doc_qa_has_no_failures(engine_a, tmp_path):
    # 2 documents x 2 questions: num_documents = volume_gb * tokens_per_gb / document_length.
    argv = [str(LMCACHE), "bench", "engine", "--engine-url", engine_a.url,
            "--workload", "long-doc-qa", "--tokens-per-gb-kvcache", "524288",
            "--kv-cache-volume", "0.0012", "--ldqa-document-length", "300",
            "--ldqa-query-per-document", "2", "--ldqa-max-output-length", "8",
            "--no-interactive", "--json", "--output-dir", str(tmp_path), "-q"]
    res = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:] + log_tail(engine_a.log)
    results = json.loads((tmp_path / "bench_summary.json").read_text())["results"]
    assert results["failed_requests"] == 0
    assert results["successful_requests"] == 4


def test_sigterm_exits_cleanly_and_unregisters(lmcache_server, engine_b):
    def contexts() -> int:
        with urllib.request.urlopen(f"{lmcache_server.http_url}/status", timeout=10) as resp:
            return len(json.loads(resp.read())["non_cuda_context_meta"])

    registered = contexts()
    assert registered >= 1
    assert engine_b.stop() == 0
    assert contexts() == registered - 1
    assert "engine stopped" in engine_b.log.read_text()
