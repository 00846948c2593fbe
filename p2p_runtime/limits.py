"""What the engine refuses before any work is done: oversized bodies, text that is not Unicode, missing keys.

A pure ASGI middleware in front of the FastAPI app, so nothing it refuses is ever parsed into a model,
tokenized or queued:

- `Authorization: Bearer <key>` on every route but /health, /version and /metrics when an API key is set
  (vLLM's `--api-key` guards the same routes); 401 otherwise, compared in constant time;
- request bodies larger than `max_body_bytes`: 413, decided from Content-Length or while reading;
- JSON strings holding a lone surrogate (`"\\ud800"`): valid JSON, but not text; they would fail deep inside
  the tokenizer or when an error echoes them, so they are a 400 here.
"""

from __future__ import annotations

import hmac
import json
from typing import Any, Awaitable, Callable

from p2p_runtime import protocol as p

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]

# Routes an operator's probes and Prometheus reach without a key (as with vLLM).
OPEN_PATHS = frozenset({"/health", "/version", "/metrics"})


class RequestLimits:
    def __init__(self, app, max_body_bytes: int, api_key: str = "") -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self._key = api_key.encode() if api_key else b""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if self._key and scope.get("path") not in OPEN_PATHS and not self._authorized(headers):
            await _reply(send, 401, "missing or wrong API key: send `Authorization: Bearer <key>`",
                         extra=[(b"www-authenticate", b"Bearer")])
            return
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await _reply(send, 413, self._too_large())
            return
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                await _reply(send, 413, self._too_large())
                return
            if not message.get("more_body"):
                break
        if body and _json_with_lone_surrogate(bytes(body)):
            await _reply(send, 400, "request holds a string that is not valid Unicode (a lone surrogate such as "
                                    "\\ud800); send UTF-8 text")
            return
        pending = [{"type": "http.request", "body": bytes(body), "more_body": False}]

        async def replay() -> dict:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        got = headers.get(b"authorization", b"")
        scheme, _, token = got.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._key)

    def _too_large(self) -> str:
        return (f"request body exceeds {self.max_body_bytes} bytes; send a shorter prompt (or raise the engine's "
                "--max-body-bytes)")


def _json_with_lone_surrogate(body: bytes) -> bool:
    if b"\\u" not in body:  # a lone surrogate can only arrive as a JSON escape (raw bytes must be UTF-8)
        return False
    try:
        # Encoding the parsed document as UTF-8 fails exactly where a string (key or value) is not text.
        json.dumps(json.loads(body), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    except (ValueError, RecursionError):
        return False  # not JSON: the route's own validation answers 400
    return False


async def _reply(send: Send, status: int, message: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    data = json.dumps(p.error_body(status, message)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *(extra or [])]})
    await send({"type": "http.response.body", "body": data})
