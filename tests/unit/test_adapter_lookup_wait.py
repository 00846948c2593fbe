"""The adapter's two ways of waiting for a lookup's prefetch, against a fake request client."""

import pytest

from p2p_runtime.lmcache_adapter import KVRegistration, LMCacheAdapter, LMCacheError, _Connection


class _Done:
    def __init__(self, value):
        self.value = value

    def result(self, timeout=None):
        return self.value


class _FakeClient:
    """Prefetch finishes after `pending` status queries; records which RPCs were sent."""

    def __init__(self, pending: int, hits: int = 3):
        self.pending, self.hits, self.calls = pending, hits, []

    def lookup(self, key, tp):
        self.calls.append("lookup")
        return _Done(None)

    def query_prefetch_status(self, session):
        self.calls.append("query")
        self.pending -= 1
        return _Done(self.hits if self.pending < 0 else None)

    def wait_prefetch_status(self, session, timeout):
        self.calls.append(("wait", timeout))
        return _Done(self.hits if self.pending <= 0 else None)


def _adapter(client, mode, timeout_s=2.0):
    import torch

    reg = KVRegistration("m", {"layer.0": torch.zeros(2, 4, 16, 1, 4)}, 1, 16, 1)
    a = LMCacheAdapter("tcp://127.0.0.1:1", reg, timeout_s=timeout_s, lookup_wait=mode)
    a._conn = _Connection(client, None, 256, "shm")
    return a


def _close(a):
    a._conn = None  # the fake connection has no transfer context to unregister
    a.close()


def test_poll_queries_until_done_and_records_timings():
    client = _FakeClient(pending=2)
    a = _adapter(client, "poll")
    try:
        assert a.lookup("s", list(range(1025)), 4) == 3
    finally:
        _close(a)
    assert client.calls == ["lookup", "query", "query", "query"]
    assert a.last_timings["lookup_rpcs"] == 3 and a.last_timings["lookup_wait"] >= 0


def test_wait_sends_one_bounded_server_side_wait():
    client = _FakeClient(pending=0)
    a = _adapter(client, "wait", timeout_s=0.4)
    try:
        assert a.lookup("s", list(range(1025)), 2) == 2  # capped at max_chunks
    finally:
        _close(a)
    assert client.calls[0] == "lookup" and client.calls[1][0] == "wait"
    assert 0 < client.calls[1][1] <= 0.2  # never more than half the RPC timeout


def test_wait_times_out_as_prefetch_timeout():
    client = _FakeClient(pending=10**6)
    a = _adapter(client, "wait", timeout_s=0.2)
    try:
        with pytest.raises(LMCacheError) as err:
            a.lookup("s", list(range(1025)), 4)
    finally:
        _close(a)
    assert err.value.reason == "prefetch_timeout"


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError):
        _adapter(_FakeClient(0), "spin")
