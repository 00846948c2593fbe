"""What the engine refuses before doing work: big bodies, over-long prompts, non-Unicode text, a full queue,
a missing API key. None of these may ever be a 5xx."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from p2p_runtime.api import create_app
from p2p_runtime.config import EngineConfig
from p2p_runtime.core import EngineCore
from p2p_runtime.scheduler import Scheduler

MODEL = "tiny-limits"
MAX_LEN = 512
KEY = "k3y-for-tests-only"


def make_client(**kw) -> TestClient:
    cfg = dict(served_model_name=MODEL, max_model_len=MAX_LEN, num_blocks=64, max_num_seqs=2,
               max_body_bytes=64 * 1024, **kw)
    return TestClient(create_app(EngineCore(EngineConfig(**cfg))))


@pytest.fixture(scope="module")
def client():
    with make_client() as c:
        yield c


def test_body_over_the_cap_is_413_before_parsing(client):
    r = client.post("/v1/completions", content=b'{"prompt": "' + b"x" * (65 * 1024) + b'"}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 413 and "65536 bytes" in r.json()["error"]["message"]


def test_chunked_body_without_length_is_capped_too(client):
    def chunks():
        yield b'{"prompt": "'
        for _ in range(80):
            yield b"y" * 1024
        yield b'"}'

    r = client.post("/tokenize", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_over_long_prompt_is_refused_before_tokenizing(client, monkeypatch):
    core = client.app.state.core

    def boom(*_a, **_k):
        raise AssertionError("tokenized a prompt that can never fit")

    monkeypatch.setattr(core.tokenizer.__class__, "encode", boom)
    for path, body in (("/tokenize", {"prompt": "z" * (MAX_LEN + 1)}),
                       ("/v1/completions", {"prompt": "z" * (MAX_LEN + 1), "max_tokens": 1}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "z" * (MAX_LEN + 1)}]})):
        r = client.post(path, json=body)
        assert r.status_code == 400 and "maximum context length" in r.json()["error"]["message"], (path, r.text)


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", '{"prompt": "\\ud800", "max_tokens": 2}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "a\\udfffb"}]}'),
    ("/tokenize", '{"prompt": "x\\ud800"}'),
    ("/v1/completions", '{"model": "\\ud800", "prompt": "hi"}'),
    ("/v1/completions", '{"prompt": "hi", "stop": ["\\udc00"]}'),
])
def test_lone_surrogate_is_400_not_500(client, path, body):
    r = client.post(path, content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert "not valid Unicode" in r.json()["error"]["message"]


def test_a_valid_surrogate_pair_is_fine(client):
    r = client.post("/tokenize", content=b'{"prompt": "\\ud83d\\ude00"}', headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json()["count"] == 5  # BOS + the 4 UTF-8 bytes of one emoji


def test_full_queue_is_429_with_retry_after(client, monkeypatch):
    monkeypatch.setattr(Scheduler, "num_waiting", property(lambda self: 10_000))
    r = client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 2})
    assert r.status_code == 429 and r.headers["retry-after"].isdigit()
    assert r.json()["error"]["type"] == "RateLimitError"


def test_api_key_guards_the_api_but_not_health_or_metrics():
    with make_client(api_key=KEY) as c:
        assert c.get("/health").status_code == 200 and c.get("/metrics").status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
            r = c.get("/v1/models", headers=headers)
            assert r.status_code == 401 and KEY not in r.text, headers
        assert c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1}).status_code == 401
        r = c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1},
                   headers={"Authorization": f"Bearer {KEY}"})
        assert r.status_code == 200, r.text


def test_api_key_comes_from_the_environment_and_is_never_in_the_config_repr(monkeypatch):
    monkeypatch.setenv("P2P_ENGINE_API_KEY", KEY)
    cfg = EngineConfig.from_argv([])
    assert cfg.api_key == KEY and KEY not in repr(cfg) and KEY not in str(cfg)


def test_huge_token_list_prompt_is_bounded(client):
    r = client.post("/v1/completions", content=json.dumps({"prompt": [1] * 100_000}).encode(),
                    headers={"content-type": "application/json"})
    assert r.status_code == 413
