"""A real socket server standing in for an engine's streamed /v1/completions: each accepted connection is handed
to a scripted `handle(conn, accepted)`, which reads requests with `read_request` and answers with `ANSWER` (or
resets, or closes without a word)."""

from __future__ import annotations

import socket
import threading
from typing import Callable

STREAM = (b'data: {"choices": [{"index": 0, "text": "a"}]}\n\n'
          b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}\n\ndata: [DONE]\n\n')
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s" % (len(STREAM), STREAM)


def read_request(conn: socket.socket) -> bool:
    """Headers and the whole body (closing with unread bytes would reset an answered connection too); False when
    the client closed the connection first."""
    data = b""
    while b"\r\n\r\n" not in data:
        got = conn.recv(65536)
        if not got:
            return False
        data += got
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        body += conn.recv(65536)
    return True


class StreamServer:
    def __init__(self, handle: Callable[[socket.socket, int], None]) -> None:
        self.handle, self.accepted = handle, 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                self.handle(conn, self.accepted)

    def close(self) -> None:
        self.sock.close()
