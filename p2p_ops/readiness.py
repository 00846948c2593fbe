"""Engine readiness by runtime: the embedded engine answers /health; vLLM is ready when /health answers and
/v1/models lists the served model (vLLM answers /health while the model is still loading on some versions).
"""

from __future__ import annotations

from typing import Any, Optional

import requests

from p2p_ops import auth, probes

TIMEOUT = 3.0


def served_models(body: Any) -> list[str]:
    """Model ids from an OpenAI `/v1/models` body (`{"object": "list", "data": [{"id": ...}, ...]}`)."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return []
    return [str(m["id"]) for m in body["data"] if isinstance(m, dict) and m.get("id")]


def vllm_ready(url: str, model: Optional[str] = None) -> bool:
    """`GET /health` is 200 and `GET /v1/models` lists a model (`model`, when given)."""
    try:
        # vLLM started with --api-key guards /v1/models: without the key `up` would wait out its 900 s.
        if requests.get(url.rstrip("/") + "/health", timeout=TIMEOUT, headers=auth.headers(url)).status_code != 200:
            return False
    except requests.RequestException:
        return False
    models = served_models(probes.get_json(url.rstrip("/") + "/v1/models", timeout=TIMEOUT))
    return bool(models) and (model is None or model in models)


def engine_ready(runtime: str, url: str, model: Optional[str] = None) -> bool:
    return vllm_ready(url, model) if runtime == "vllm" else probes.engine_healthy(url)


def describe(runtime: str, url: str, model: str) -> str:
    """What `engine_ready` checks, in words (for dry-run output)."""
    if runtime == "vllm":
        return f"GET {url}/health answers 200, then GET {url}/v1/models lists {model}"
    return f"GET {url}/health answers 200"
