"""A small OpenAI-API client that measures what the tests need: TTFT, end-to-end latency, cached tokens.

Each thread keeps one open connection per engine (HTTP keep-alive, stdlib `http.client`): a load's requests/s is
then the engine's, not a TCP handshake and a `requests` session per request (which held the harness to half the
requests/s of `vllm bench serve` against a server that answers at once).
"""

from __future__ import annotations

import http.client
import json
import select
import threading
import time
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

from p2p_ops.endpoints import auth

_local = threading.local()


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


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    """This thread's connection to the engine at `url`, and the path prefix of `url`."""
    parts = urlsplit(url)
    conns = _local.__dict__.setdefault("conns", {})
    key = (parts.scheme, parts.netloc)
    conn = conns.get(key)
    if conn is None:
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = conns[key] = cls(parts.netloc, timeout=timeout)
    elif conn.sock is not None and select.select([conn.sock], [], [], 0)[0]:
        # An idle kept-alive socket that is readable was closed by the peer (an engine restarted): sending on
        # it would fail a request the engine never saw. urllib3 makes the same check before reusing one.
        conn.close()
    conn.timeout = timeout
    if conn.sock is not None:
        conn.sock.settimeout(timeout)
    return conn, parts.path.rstrip("/")


def complete(engine_url: str, model: str, prompt: str, max_tokens: int = 16, timeout: float = 120.0,
             headers: Optional[dict] = None) -> Completion:
    """POST /v1/completions, streamed so time-to-first-token is measured client-side."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}}
    start = time.monotonic()
    conn, path = _connection(engine_url, timeout)
    reused = conn.sock is not None

    def send() -> http.client.HTTPResponse:
        conn.request("POST", path + "/v1/completions", body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json", **auth.headers(engine_url), **(headers or {})})
        return conn.getresponse()

    try:
        try:
            resp = send()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            if not reused:
                raise
            # The engine closed this kept-alive connection as the request went out (its keep-alive timeout ran
            # out between `_connection`'s readability check and the send): it answered nothing, so the request goes
            # once more on a new connection, as HTTP clients do with a pooled connection.
            conn.close()
            resp = send()
        if resp.status != 200:
            return Completion(engine_url, False, e2e_s=time.monotonic() - start, status=resp.status,
                              error=resp.read().decode(errors="replace")[:300])
        out = _streamed(engine_url, resp, start)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        conn.close()  # a half-read answer leaves the connection unusable
        return Completion(engine_url, False, e2e_s=time.monotonic() - start, error=f"{type(exc).__name__}: {exc}")
    out.e2e_s = time.monotonic() - start
    if out.ttft_s is None:
        out.ttft_s = out.e2e_s
    return out


def _streamed(url: str, resp: http.client.HTTPResponse, start: float) -> Completion:
    out = Completion(url, True, status=200)
    for raw in resp:
        if not raw.startswith(b"data:"):
            continue
        payload = raw[5:].strip()
        if payload == b"[DONE]":
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
        if usage := chunk.get("usage"):
            out.prompt_tokens, out.completion_tokens = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
            out.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    resp.read()  # the end of the stream, so the connection can carry the next request
    return out

