"""The load's client over a kept-alive connection: a request the engine closed the connection on, unanswered, goes
once more on a new connection only when the connection was a reused one (an engine's keep-alive timeout racing
the next request), never on a fresh one. A real socket server stands in for the engine."""

from __future__ import annotations

import socket
import threading

from p2p_ops.harness.openai_client import complete
from tests.support.stream_server import ANSWER, StreamServer, read_request


def closing(answered: int, close_from: int) -> StreamServer:
    """Answers `answered` requests on each connection (kept alive), then reads the next one and closes without a
    word; from connection `close_from` on it answers every request."""
    def handle(conn: socket.socket, accepted: int) -> None:
        n = 0
        while read_request(conn):
            if accepted < close_from and n >= answered:
                return
            conn.sendall(ANSWER)
            n += 1
    return StreamServer(handle)


def _run(server: StreamServer, requests: int) -> list:
    out = []

    def client() -> None:  # the client keeps its connections per thread: one thread, like one load worker
        out.extend(complete(server.url, "m", "hello", max_tokens=1, timeout=10) for _ in range(requests))
    t = threading.Thread(target=client)
    t.start()
    t.join(30)
    server.close()
    return out


def test_a_kept_alive_connection_closed_under_the_next_request_is_sent_again_on_a_new_one():
    first, second = _run(closing(answered=1, close_from=2), 2)
    assert first.ok and second.ok, (first.error, second.error)
    assert second.text == "a" and second.prompt_tokens == 3


def test_a_fresh_connection_closed_without_an_answer_is_not_sent_again():
    server = closing(answered=0, close_from=99)
    (only,) = _run(server, 1)
    assert not only.ok and "RemoteDisconnected" in only.error and server.accepted == 1
