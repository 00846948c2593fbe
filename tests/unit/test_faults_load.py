"""The faults load sends a request once more when the engine reset the connection before any answer (as OpenAI's
SDK does), counts every such retry, and still fails a request reset twice. A real socket server stands in for the
engine: it resets (SO_LINGER 0) the first `resets` connections and answers the rest with a one-token stream."""

from __future__ import annotations

import socket
import struct
import time

from p2p_ops.harness.faults import core
from p2p_ops.harness.load import Job
from p2p_ops.observe.records import RequestRecord
from tests.support.stream_server import ANSWER, StreamServer, read_request


def resetting(resets: int) -> StreamServer:
    """Resets (SO_LINGER 0) the first `resets` connections after reading their request; answers the rest."""
    def handle(conn: socket.socket, accepted: int) -> None:
        read_request(conn)
        if accepted <= resets:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            conn.sendall(ANSWER)
    return StreamServer(handle)


def _one(resets: int) -> tuple[RequestRecord, core.Figures, int]:
    server = resetting(resets)
    try:
        sample = core.clients("m", core.FaultOptions.quick(), time.monotonic()).send(Job(server.url, "hello"))
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
    sample = core.clients("m", core.FaultOptions.quick(), time.monotonic()).send(Job(url, "hello"))
    assert not sample.ok and sample.retried == "" and "Connection refused" in sample.error
