"""harness.load: the one load runner. Its workers take jobs until the source is empty or they are stopped, each
request becomes one record with its job's labels, and the fault load's bound holds. A closed port stands in for
an engine: every request fails at once, which is all the runner's bookkeeping needs."""

from __future__ import annotations

import socket
import threading

from p2p_ops.harness.load import Job, Load, jobs_of


def closed_url() -> str:
    s = socket.create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def test_every_job_is_sent_once_and_recorded_with_its_labels():
    url = closed_url()
    jobs = [Job(url, f"p{i}", stage="ladder", level=4, instance="a-0", prefix_id=f"d{i}") for i in range(10)]
    seen = []
    load = Load("m", t0=0.0, on_record=lambda job, rec: seen.append(job.prompt))
    load.run(jobs_of(jobs), 3, "t")
    assert sorted(seen) == sorted(j.prompt for j in jobs)
    assert sorted(r.prefix_id for r in load.records) == sorted(f"d{i}" for i in range(10))
    r = load.records[0]
    assert (r.stage, r.level, r.instance, r.url, r.ok) == ("ladder", 4, "a-0", url, False)
    assert "refused" in r.error and r.ttft_s is None and r.t_end_s >= r.t_start_s


def test_workers_get_their_index_and_stop_ends_an_endless_source():
    url, asked = closed_url(), set()
    lock = threading.Lock()

    def forever(i: int) -> Job:
        with lock:
            asked.add(i)
        return Job(url, "p")

    workers = Load("m", pause_after_failure_s=0.05).start(forever, 3, "t")
    assert [t.name for t in workers.threads] == ["t-0", "t-1", "t-2"] and all(t.daemon for t in workers.threads)
    workers.stop()
    assert workers.done and asked == {0, 1, 2}


def test_the_fault_load_sends_its_bounded_jobs_and_ends():
    from p2p_ops.harness.faults.core import FaultOptions, clients, closed_loop

    opts = FaultOptions(concurrency=2, max_requests=4, request_timeout_s=5.0)
    runner = clients("m", opts, t0=0.0)
    workers = closed_loop(runner, [(closed_url(), "p")], opts, stage="fill")
    workers.join()
    assert workers.done and [r.stage for r in runner.records] == ["fill"] * 4
    assert not any(r.ok for r in runner.records)
