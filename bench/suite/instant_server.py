"""An OpenAI-compatible server that answers at once: what the load generator costs by itself.

`python -m bench.suite.instant_server PORT` serves GET /v1/models, POST /v1/completions and POST
/v1/chat/completions (streamed, one token, usage included; `lmcache bench engine` sends chat) on raw asyncio, with no framework work per request, so a client's latency
against it is the client's own overhead plus loopback.
"""

from __future__ import annotations

import asyncio
import json
import sys

_CHUNK = json.dumps({"id": "x", "object": "text_completion", "model": "tiny-llm",
                     "choices": [{"index": 0, "text": "a", "finish_reason": None}]})
_USAGE = json.dumps({"id": "x", "object": "text_completion", "model": "tiny-llm", "choices": [],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2,
                               "prompt_tokens_details": {"cached_tokens": 0}}})
_STREAM = f"data: {_CHUNK}\n\ndata: {_USAGE}\n\ndata: [DONE]\n\n".encode()
_CHAT_CHUNK = json.dumps({"id": "x", "object": "chat.completion.chunk", "model": "tiny-llm",
                          "choices": [{"index": 0, "delta": {"role": "assistant", "content": "a"},
                                       "finish_reason": None}]})
_CHAT_STREAM = f"data: {_CHAT_CHUNK}\n\ndata: {_USAGE}\n\ndata: [DONE]\n\n".encode()
_MODELS = json.dumps({"object": "list", "data": [{"id": "tiny-llm", "object": "model"}]}).encode()


def _response(body: bytes, ctype: str) -> bytes:
    return (f"HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            if head.startswith(b"GET"):
                writer.write(_response(_MODELS, "application/json"))
            elif head.split(b" ", 2)[1:2] == [b"/v1/chat/completions"]:
                writer.write(_response(_CHAT_STREAM, "text/event-stream"))
            else:
                writer.write(_response(_STREAM, "text/event-stream"))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def _serve(port: int) -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    asyncio.run(_serve(int(sys.argv[1])))


if __name__ == "__main__":
    main()
