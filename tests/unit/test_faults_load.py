"""The faults load sends a request once more when the engine reset the connection before any answer (as OpenAI's
SDK does), counts every such retry, and still fails a request reset twice. A real socket server stands in for the
engine: it resets (SO_LINGER 0) the first `resets` connections and answers the rest with a one-token stream."""

from __future__ import annotations

import socket
import struct
import threading
import time

from p2p_ops.harness.faults import core

STREAM = (b'data: {"choices": [{"index": 0, "text": "a"}]}\n\n'
          b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}\n\ndata: [DONE]\n\n')
ANSWER = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
          % len(STREAM)) + STREAM


class ResettingServer:
    def __init__(self, resets: int) -> None:
        self.resets, self.accepted = resets, 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                _read_request(conn)
                self.accepted += 1
                if self.accepted <= self.resets:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    conn.sendall(ANSWER)

    def close(self) -> None:
        self.sock.close()


def _read_request(conn: socket.socket) -> None:
    """Headers and the whole body: closing with unread bytes would reset the answered connection too."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        body += conn.recv(65536)


def _one(resets: int) -> tuple[core.Sample, core.Figures, int]:
    server = ResettingServer(resets)
    try:
        load = core.Load([], "m", core.FaultOptions.quick(), time.monotonic())
        sample = load.one(server.url, "hello")
    finally:
        server.close()
    fig = core.Figures("s", "-")
    core.fill_figures(fig, [sample], {}, "", "")
    return sample, fig, server.accepted


def test_a_reset_before_any_answer_is_sent_once_more_and_counted():
    sample, fig, accepted = _one(resets=1)
    assert accepted == 2 and sample.ok and "reset by peer" in sample.retried
    assert (fig.failed, fig.retried_resets) == (0, 1)
    assert "1 request(s) sent once more after a connection reset" in fig.note


def test_a_request_reset_twice_fails():
    sample, fig, accepted = _one(resets=2)
    assert accepted == 2 and not sample.ok and "reset by peer" in sample.error
    assert (fig.failed, fig.retried_resets, fig.unexpected_failures) == (1, 1, 1)


def test_a_refused_connection_is_not_retried():
    s = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()
    load = core.Load([], "m", core.FaultOptions.quick(), time.monotonic())
    sample = load.one(url, "hello")
    assert not sample.ok and sample.retried == "" and "Connection refused" in sample.error
