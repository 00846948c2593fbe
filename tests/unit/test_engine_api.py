"""The OpenAI-compatible HTTP API in plain mode (no LMCache), through FastAPI's TestClient."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from p2p_runtime.api import create_app
from p2p_runtime.config import EngineConfig
from p2p_runtime.core import EngineCore
from p2p_runtime.tokenizer import ByteTokenizer

MODEL = "tiny-test"
MAX_LEN = 1024


@pytest.fixture(scope="module")
def client():
    core = EngineCore(EngineConfig(served_model_name=MODEL, max_model_len=MAX_LEN, num_blocks=256,
                                   max_num_seqs=4))
    with TestClient(create_app(core)) as c:
        yield c


def sse_events(text: str) -> list:
    """Parse an SSE body into JSON payloads; the final ``[DONE]`` is returned as a string."""
    events = []
    for block in text.strip().split("\n\n"):
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def metrics(client) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if not sample.name.endswith("_bucket"):
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def complete(client, prompt="Hello there, tiny model.", **kw):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 12, **kw}
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_models_lists_the_served_model(client):
    data = client.get("/v1/models").json()
    assert data["object"] == "list"
    card = data["data"][0]
    assert card["id"] == MODEL and card["object"] == "model" and card["max_model_len"] == MAX_LEN


def test_health_says_degraded_while_the_lmcache_server_is_unreachable():
    from types import SimpleNamespace

    core = EngineCore(EngineConfig(served_model_name=MODEL, max_model_len=MAX_LEN, num_blocks=64, max_num_seqs=2))
    with TestClient(create_app(core)) as c:
        assert c.get("/health").json() == {"status": "ok", "lmcache": "off"}
        core.adapter = SimpleNamespace(connected=True)
        assert c.get("/health").json()["status"] == "ok"
        core.adapter = SimpleNamespace(connected=False)  # what the adapter's watchdog sets when pings fail
        r = c.get("/health")
        assert r.status_code == 200 and r.json()["status"] == "degraded" and r.json()["lmcache"] == "disconnected"
        core.adapter = None


def test_health_and_version(client):
    assert client.get("/health").status_code == 200
    assert "version" in client.get("/version").json()


def test_completion_fields(client):
    data = complete(client, "Hello", ignore_eos=True)
    assert data["id"].startswith("cmpl-") and data["object"] == "text_completion"
    assert data["model"] == MODEL and isinstance(data["created"], int)
    choice = data["choices"][0]
    assert choice["index"] == 0 and choice["finish_reason"] == "length"
    assert len(choice["text"]) == 12 and choice["text"].isprintable()
    assert data["usage"] == {"prompt_tokens": 6, "completion_tokens": 12, "total_tokens": 18,
                             "prompt_tokens_details": {"cached_tokens": 0}}


def test_greedy_output_is_deterministic(client):
    first = complete(client, "determinism check", temperature=0.9, top_p=0.5)
    second = complete(client, "determinism check")
    assert first["choices"][0]["text"] == second["choices"][0]["text"]
    assert complete(client, "another prompt")["choices"][0]["text"] != first["choices"][0]["text"]


def test_token_id_prompt_equals_text_prompt(client):
    ids = client.post("/tokenize", json={"prompt": "same prompt"}).json()["tokens"]
    assert complete(client, ids)["choices"][0]["text"] == \
        complete(client, "same prompt")["choices"][0]["text"]
    assert complete(client, ["same prompt"])["choices"][0]["text"] == \
        complete(client, "same prompt")["choices"][0]["text"]


def test_completion_stream_matches_non_stream(client):
    expected = complete(client, "stream me", ignore_eos=True)
    r = client.post("/v1/completions", json={
        "model": MODEL, "prompt": "stream me", "max_tokens": 12, "stream": True,
        "ignore_eos": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    usage_event, finish_event, token_events = events[-2], events[-3], events[:-3]
    assert all(e["object"] == "text_completion" and e["id"] == events[0]["id"] for e in events[:-1])
    assert "".join(e["choices"][0]["text"] for e in token_events) == \
        expected["choices"][0]["text"]
    assert all(e["choices"][0]["finish_reason"] is None and e["usage"] is None
               for e in token_events)
    assert finish_event["choices"][0]["finish_reason"] == "length"
    assert usage_event["choices"] == [] and usage_event["usage"] == expected["usage"]


def test_chat_non_stream_and_stream(client):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Hi!"}]
    r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": messages,
                                                  "max_tokens": 10, "ignore_eos": True})
    data = r.json()
    assert r.status_code == 200 and data["object"] == "chat.completion"
    assert data["id"].startswith("chatcmpl-")
    message = data["choices"][0]["message"]
    assert message["role"] == "assistant" and len(message["content"]) == 10
    prompt_ids = client.post("/tokenize", json={"messages": messages}).json()["tokens"]
    assert data["usage"]["prompt_tokens"] == len(prompt_ids)
    assert data["usage"]["completion_tokens"] == 10
    assert data["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}

    r = client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": messages, "max_tokens": 10, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True}})
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[1:-3])
    assert text == message["content"]
    assert events[-3]["choices"][0]["finish_reason"] == "length"
    assert events[-2]["usage"] == data["usage"]


def test_stream_without_usage_option_has_no_usage_chunk(client):
    r = client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
        "stream": True})
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    assert all("usage" not in e and e["choices"] for e in events[:-1])


def test_stop_string_cuts_the_output(client):
    full = complete(client, "stop test", max_tokens=30, ignore_eos=True)["choices"][0]["text"]
    stop = full[10:13]
    cut = full[: full.index(stop)]
    data = complete(client, "stop test", max_tokens=30, ignore_eos=True, stop=[stop])
    assert data["choices"][0]["text"] == cut
    assert data["choices"][0]["finish_reason"] == "stop"
    r = client.post("/v1/completions", json={"model": MODEL, "prompt": "stop test",
                                             "max_tokens": 30, "ignore_eos": True, "stop": stop,
                                             "stream": True})
    events = sse_events(r.text)
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == cut


def test_tokenize_and_detokenize_round_trip(client):
    text = "héllo wörld 🚀"
    data = client.post("/tokenize", json={"model": MODEL, "prompt": text}).json()
    expected = ByteTokenizer().encode(text, add_bos=True)
    assert data["tokens"] == expected and data["count"] == len(expected)
    assert data["max_model_len"] == MAX_LEN
    no_bos = client.post("/tokenize", json={"prompt": text, "add_special_tokens": False}).json()
    assert no_bos["tokens"] == expected[1:]
    assert client.post("/detokenize", json={"tokens": data["tokens"]}).json() == {"prompt": text}


def test_concurrent_requests_match_sequential_ones(client):
    prompts = [f"request number {i} " * (i + 1) for i in range(6)]
    sequential = [complete(client, p)["choices"][0]["text"] for p in prompts]
    with ThreadPoolExecutor(6) as pool:
        parallel = list(pool.map(lambda p: complete(client, p)["choices"][0]["text"], prompts))
    assert parallel == sequential


def test_metrics_use_vllm_names_and_count(client):
    before = metrics(client)
    complete(client, "count me", max_tokens=5, ignore_eos=True)
    after = metrics(client)
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total",
                 "vllm:prefix_cache_hits_total", "vllm:external_prefix_cache_hits_total",
                 "vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_count",
                 "p2p_engine_lmcache_connected", "p2p_engine_lmcache_loaded_bytes_total",
                 "p2p_engine_lmcache_stored_tokens_total", "p2p_engine_info"):
        assert name in after, name
    prompt_len = len(ByteTokenizer().encode("count me", add_bos=True))
    assert after["vllm:prompt_tokens_total"] - before.get("vllm:prompt_tokens_total", 0) == \
        prompt_len
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 5
    assert after["vllm:e2e_request_latency_seconds_count"] == \
        before["vllm:e2e_request_latency_seconds_count"] + 1
    assert after["vllm:num_requests_running"] == 0 and after["vllm:kv_cache_usage_perc"] == 0
    assert after["p2p_engine_lmcache_connected"] == 0


BAD_REQUESTS = [
    ("/v1/completions", "{not json", 400, None),
    ("/v1/completions", "[]", 400, None),
    ("/v1/completions", json.dumps({"model": MODEL}), 400, "prompt"),
    ("/v1/completions", json.dumps({"prompt": 5}), 400, "prompt"),
    ("/v1/completions", json.dumps({"prompt": "x", "max_tokens": "many"}), 400, "max_tokens"),
    ("/v1/completions", json.dumps({"prompt": "x", "max_tokens": 0}), 400, "max_tokens"),
    ("/v1/completions", json.dumps({"prompt": "x", "max_tokens": -3}), 400, "max_tokens"),
    ("/v1/completions", json.dumps({"prompt": "x", "stream": "maybe"}), 400, "stream"),
    ("/v1/completions", json.dumps({"prompt": "x", "n": 2}), 400, "n"),
    ("/v1/completions", json.dumps({"prompt": ["a", "b"]}), 400, "prompt"),
    ("/v1/completions", json.dumps({"prompt": []}), 400, "prompt"),
    ("/v1/completions", json.dumps({"prompt": [1, 99999]}), 400, "prompt"),
    ("/v1/completions", json.dumps({"prompt": "x" * MAX_LEN}), 400, "max_tokens"),
    ("/v1/completions", json.dumps({"prompt": "x", "max_tokens": MAX_LEN}), 400, "max_tokens"),
    ("/v1/completions", json.dumps({"prompt": "x", "model": "gpt-9"}), 404, "model"),
    ("/v1/chat/completions", json.dumps({"model": MODEL}), 400, "messages"),
    ("/v1/chat/completions", json.dumps({"messages": []}), 400, "messages"),
    ("/v1/chat/completions", json.dumps({"messages": [{"content": "no role"}]}), 400,
     "messages.0.role"),
    ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]}), 400, "messages"),
    ("/v1/chat/completions", json.dumps({"messages": [{"role": "user",
                                                       "content": "y" * MAX_LEN}]}), 400,
     "messages"),
    ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}],
                                         "temperature": "hot"}), 400, "temperature"),
    ("/tokenize", json.dumps({}), 400, "prompt"),
    ("/detokenize", json.dumps({"tokens": [-1]}), 400, "tokens"),
]


@pytest.mark.parametrize("path,body,status,param", BAD_REQUESTS)
def test_bad_requests_get_openai_error_bodies(client, path, body, status, param):
    r = client.post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status and error["message"] and error["type"].endswith("Error")
    assert error["param"] == param
    assert "Traceback" not in r.text


def test_unknown_route_and_method(client):
    r = client.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == 404
    r = client.get("/v1/completions")
    assert r.status_code == 405 and r.json()["error"]["code"] == 405


def test_engine_still_serves_after_bad_requests(client):
    for _, body, _, _ in BAD_REQUESTS[:5]:
        client.post("/v1/completions", content=body, headers={"content-type": "application/json"})
    assert complete(client)["choices"][0]["finish_reason"] in ("length", "stop")


def test_error_messages_say_what_is_wrong(client):
    def message(body):
        r = client.post("/v1/completions", content=body,
                        headers={"content-type": "application/json"})
        return r.json()["error"]["message"]

    assert message("{oops") == "request body is not valid JSON"
    assert message("[1, 2]") == "request body must be a JSON object"
    assert message("{}") == "prompt: Field required"
