"""LMCache going away under a running engine: requests recompute, and the cache comes back."""

from __future__ import annotations

import uuid

import pytest

from tests.component.conftest import LMCacheServer, wait_until

pytestmark = pytest.mark.component


@pytest.fixture
def server(tmp_path):
    srv = LMCacheServer(tmp_path / "server.log")
    try:
        yield srv.start()
    finally:
        srv.stop()


def test_server_killed_mid_run_then_restarted(server, engines, tmp_path):
    engine = engines.start("--lmcache-url", server.rpc_url, "--instance-id", "survivor",
                           "--lmcache-timeout", "1", "--lmcache-reconnect-interval", "0.5",
                           name="survivor")
    prompt = f"Document {uuid.uuid4().hex}: " + " ".join(["hi"] * 400)
    cold = engine.chat(prompt)
    warm = engine.chat(prompt)
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    expected_text = cold["choices"][0]["message"]["content"]

    server.kill()
    before = engine.metrics()
    during = [engine.chat(prompt) for _ in range(3)]
    after = engine.metrics()
    for data in during:
        assert data["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert data["choices"][0]["message"]["content"] == expected_text
    fallbacks = after.get("p2p_engine_lmcache_fallbacks_total", 0) - \
        before.get("p2p_engine_lmcache_fallbacks_total", 0)
    assert fallbacks >= 3  # one per request at least (lookup), plus skipped stores
    assert after["p2p_engine_lmcache_connected"] == 0
    assert "stopped answering" in engine.log.read_text()

    # Same ports, fresh process: the engine re-registers on its own.
    restarted = LMCacheServer(tmp_path / "server-restarted.log")
    restarted.port, restarted.http_port = server.port, server.http_port
    try:
        restarted.start()
        wait_until(lambda: engine.metrics()["p2p_engine_lmcache_connected"] == 1,
                   "engine reconnected to the restarted server", 60, engine.log)
        engine.chat(prompt)
        again = engine.chat(prompt)
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        assert again["choices"][0]["message"]["content"] == expected_text
    finally:
        restarted.stop()
    assert engine.stop() == 0


def test_idle_engine_notices_a_dead_server_and_health_says_degraded(server, engines):
    """No request in flight: only the adapter's background ping can notice the server is gone."""
    import requests

    engine = engines.start("--lmcache-url", server.rpc_url, "--instance-id", "idle",
                           "--lmcache-timeout", "1", "--lmcache-reconnect-interval", "0.5", name="idle")
    wait_until(lambda: engine.metrics()["p2p_engine_lmcache_connected"] == 1, "engine connected", 60, engine.log)
    assert requests.get(engine.url + "/health", timeout=10).json()["status"] == "ok"
    server.kill()
    wait_until(lambda: requests.get(engine.url + "/health", timeout=10).json()["status"] == "degraded",
               "/health says degraded", 60, engine.log)
    assert engine.metrics()["p2p_engine_lmcache_connected"] == 0
    assert engine.stop() == 0
