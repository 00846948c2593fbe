"""The load's client over a kept-alive connection: a request the engine closed the connection on, unanswered, goes
once more on a new connection only when the connection was a reused one (an engine's keep-alive timeout racing
the next request), never on a fresh one. A real socket server stands in for the engine."""

from __future__ import annotations

import socket
import threading

from p2p_ops.harness.openai_client import complete

STREAM = (b'data: {"choices": [{"index": 0, "text": "a"}]}\n\n'
          b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}\n\ndata: [DONE]\n\n')
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s" % (len(STREAM), STREAM)


def _read_request(conn: socket.socket) -> bool:
    data = b""
    while b"\r\n\r\n" not in data:
        got = conn.recv(65536)
        if not got:
            return False
        data += got
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += conn.recv(65536)
    return True


class Server:
    """Answers `answered` requests on each connection it accepts (kept alive), then reads the next one and closes
    without a word; from connection `close_from` on it answers every request."""

    def __init__(self, answered: int, close_from: int) -> None:
        self.answered, self.close_from, self.accepted = answered, close_from, 0
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
                n = 0
                while _read_request(conn):
                    if self.accepted < self.close_from and n >= self.answered:
                        break
                    conn.sendall(ANSWER)
                    n += 1


def _run(server: Server, requests: int) -> list:
    out = []

    def client() -> None:  # the client keeps its connections per thread: one thread, like one load worker
        out.extend(complete(server.url, "m", "hello", max_tokens=1, timeout=10) for _ in range(requests))
    t = threading.Thread(target=client)
    t.start()
    t.join(30)
    server.sock.close()
    return out


def test_a_kept_alive_connection_closed_under_the_next_request_is_sent_again_on_a_new_one():
    first, second = _run(Server(answered=1, close_from=2), 2)
    assert first.ok and second.ok, (first.error, second.error)
    assert second.text == "a" and second.prompt_tokens == 3


def test_a_fresh_connection_closed_without_an_answer_is_not_sent_again():
    server = Server(answered=0, close_from=99)
    (only,) = _run(server, 1)
    assert not only.ok and "RemoteDisconnected" in only.error and server.accepted == 1
