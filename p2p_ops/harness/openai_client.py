"""A small OpenAI-API client that measures what the tests need: TTFT, end-to-end latency, cached tokens."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Optional

import requests

from p2p_ops.endpoints import auth


@dataclass
class Completion:
    url: str
    ok: bool
    text: str = ""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: Optional[float] = None
    e2e_s: float = 0.0
    status: int = 0
    error: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def complete(engine_url: str, model: str, prompt: str, max_tokens: int = 16, timeout: float = 120.0,
             stream: bool = True, headers: Optional[dict] = None) -> Completion:
    """POST /v1/completions; streaming by default so time-to-first-token is measured client-side."""
    url = engine_url.rstrip("/") + "/v1/completions"
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    start = time.monotonic()
    try:
        resp = requests.post(url, json=body, timeout=timeout, stream=stream,
                             headers={**auth.headers(url), **(headers or {})})
    except requests.RequestException as exc:
        return Completion(engine_url, False, e2e_s=time.monotonic() - start, error=f"{type(exc).__name__}: {exc}")
    if resp.status_code != 200:
        return Completion(engine_url, False, e2e_s=time.monotonic() - start, status=resp.status_code,
                          error=resp.text[:300])
    if not stream:
        data = resp.json()
        usage = data.get("usage") or {}
        return Completion(engine_url, True, text=data["choices"][0]["text"],
                          prompt_tokens=usage.get("prompt_tokens", 0),
                          cached_tokens=(usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0,
                          completion_tokens=usage.get("completion_tokens", 0),
                          e2e_s=time.monotonic() - start, status=200)
    out = Completion(engine_url, True, status=200)
    try:
        for raw in resp.iter_lines(decode_unicode=True):
            if not raw or not raw.startswith("data:"):
                continue
            payload = raw[5:].strip()
            if payload == "[DONE]":
                break
            chunk = json.loads(payload)
            if "error" in chunk:
                out.ok, out.error = False, str(chunk["error"])[:300]
                break
            for choice in chunk.get("choices") or []:
                if choice.get("text"):
                    if out.ttft_s is None:
                        out.ttft_s = time.monotonic() - start
                    out.text += choice["text"]
            usage = chunk.get("usage")
            if usage:
                out.prompt_tokens = usage.get("prompt_tokens", 0)
                out.completion_tokens = usage.get("completion_tokens", 0)
                out.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    except (requests.RequestException, ValueError) as exc:
        out.ok, out.error = False, f"{type(exc).__name__}: {exc}"
    out.e2e_s = time.monotonic() - start
    if out.ttft_s is None:
        out.ttft_s = out.e2e_s
    return out


def count_tokens(engine_url: str, model: str, text: str) -> int:
    resp = requests.post(engine_url.rstrip("/") + "/tokenize", json={"model": model, "prompt": text}, timeout=30,
                         headers=auth.headers(engine_url))
    resp.raise_for_status()
    data = resp.json()
    return int(data.get("count", len(data.get("tokens", []))))
