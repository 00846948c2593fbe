"""harness.workers: the loads' threads start, all see one stop, and stop() returns once they have ended."""

import threading

from p2p_ops.harness.workers import Workers


def test_workers_run_with_their_index_until_stopped():
    seen: set[int] = set()
    lock = threading.Lock()
    workers: Workers

    def run(i: int) -> None:
        with lock:
            seen.add(i)
        workers.stop_event.wait(30)

    workers = Workers(run, 3, "t", join_timeout_s=30, pass_index=True)
    assert not workers.stop_event.is_set()
    workers.start()
    assert not workers.done()
    workers.stop()
    assert workers.done() and seen == {0, 1, 2}
    assert [t.name for t in workers.threads] == ["t-0", "t-1", "t-2"] and all(t.daemon for t in workers.threads)


def test_workers_without_index_call_the_target_bare():
    calls = []
    workers = Workers(lambda: calls.append(1), 2, "bare", join_timeout_s=30)
    workers.start()
    workers.join()
    assert calls == [1, 1] and workers.done()


def test_the_fault_load_sends_its_bounded_jobs_and_ends(tmp_path):
    """faults.core.Load on its Workers: a refused port fails each request at once; the load takes exactly its
    bound, records every one and is done after join()."""
    from p2p_ops.harness.faults.core import FaultOptions, Load

    opts = FaultOptions(concurrency=2, max_requests=4, request_timeout_s=5.0)
    load = Load([("http://127.0.0.1:9", "p")], "m", opts, t0=0.0).start()
    load.join()
    assert load.done and load.taken == 4
    assert len(load.samples) == 4 and not any(s.ok for s in load.samples)
