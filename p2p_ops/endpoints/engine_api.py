"""What an engine says over HTTP: /health, its link to its lmcache server, and readiness by runtime.

The embedded engine is ready when /health answers; vLLM when /health answers and /v1/models lists the served
model (vLLM answers /health while the model is still loading on some versions).
"""

from __future__ import annotations

from typing import Any, Optional

from p2p_ops.endpoints import fetch
from p2p_ops.endpoints.metrics_api import ENGINE_CONNECTED, TOKENS_BY_SOURCE, parse_metrics


def engine_healthy(engine_url: str) -> bool:
    return fetch.answers(engine_url.rstrip("/") + "/health")


def engine_lmcache_state(engine_url: str) -> str:
    """The embedded engine's link to its lmcache server: connected | disconnected | n/a (no such metric)."""
    # Only this metric's lines are parsed: a full parse of an engine's /metrics took 0.1 s of CPU per engine,
    # serial in `status`, and most of status's time at 8 hosts (bench/suite/fleet_scale.py profiles).
    text = fetch.get_text(engine_url.rstrip("/") + "/metrics") or ""
    wanted = "".join(line + "\n" for line in text.splitlines() if line.startswith(ENGINE_CONNECTED))
    values = [v for n, _, v in parse_metrics(wanted) if n == ENGINE_CONNECTED]
    return "n/a" if not values else "connected" if max(values) >= 1 else "disconnected"


def served_models(body: Any) -> list[str]:
    """Model ids from an OpenAI `/v1/models` body (`{"object": "list", "data": [{"id": ...}, ...]}`)."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return []
    return [str(m["id"]) for m in body["data"] if isinstance(m, dict) and m.get("id")]


def vllm_ready(url: str, model: Optional[str] = None) -> bool:
    """`GET /health` is 200 and `GET /v1/models` lists a model (`model`, when given)."""
    if not engine_healthy(url):
        return False
    # vLLM started with --api-key guards /v1/models: `fetch` sends the key, else `up` would wait out its 900 s.
    models = served_models(fetch.get_json(url.rstrip("/") + "/v1/models", timeout=fetch.TIMEOUT))
    return bool(models) and (model is None or model in models)


def engine_ready(runtime: str, url: str, model: Optional[str] = None) -> bool:
    return vllm_ready(url, model) if runtime == "vllm" else engine_healthy(url)


def describe_ready(runtime: str, url: str, model: str) -> str:
    """What `engine_ready` checks, in words (for dry-run output)."""
    return f"GET {url}/health answers 200" + (f", then GET {url}/v1/models lists {model}" if runtime == "vllm" else "")


# How tokenize's error begins when the engine did not answer at all (down, frozen, unreachable), not refused.
ANSWERED_NOTHING = "POST /tokenize answered nothing"


def tokenize(engine_url: str, model: str, prompt: Optional[str] = None,
             messages: Optional[list[dict]] = None) -> tuple[Optional[list[int]], str]:
    """The token ids the engine itself makes of a prompt or of chat messages (its chat template applied, with
    the generation prompt, as /v1/chat/completions does): `POST /tokenize`, vLLM's and the embedded engine's.
    (None, why) when it refuses."""
    body: dict[str, Any] = {"model": model}
    body.update({"messages": messages} if messages is not None else {"prompt": prompt})
    code, data = fetch.post_json(engine_url.rstrip("/") + "/tokenize", body, timeout=30)
    if code == 200 and isinstance(data, dict) and isinstance(data.get("tokens"), list):
        return [int(t) for t in data["tokens"]], ""
    head = f"POST /tokenize answered {code}" if code else ANSWERED_NOTHING
    return None, f"{head}: {str(data)[:200]}"


def tokens_by_source(samples: list) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, labels, value in samples:
        if name == TOKENS_BY_SOURCE:
            src = labels.get("source", "?")
            out[src] = out.get(src, 0.0) + value
    return out
