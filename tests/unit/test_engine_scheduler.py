"""Scheduler: FIFO waiting queue, abort frees KV blocks, timing emulation reaches the metrics."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient

from p2p_runtime.api import create_app
from p2p_runtime.config import EngineConfig
from p2p_runtime.core import EngineCore
from p2p_runtime.scheduler import Request
from p2p_runtime.tokenizer import ByteTokenizer

TOK = ByteTokenizer()


class Collector:
    """Records a request's events; ``done`` is set on finish or error."""

    def __init__(self):
        self.events = []
        self.done = threading.Event()
        self.first_delta = threading.Event()

    def __call__(self, event):
        self.events.append(event)
        if event.kind == "delta":
            self.first_delta.set()
        else:
            self.done.set()


def make_request(rid, text, max_tokens, sink):
    return Request(request_id=rid, prompt_ids=TOK.encode(text, add_bos=True),
                   max_tokens=max_tokens, ignore_eos=True, on_event=sink)


@pytest.fixture
def core():
    core = EngineCore(EngineConfig(max_model_len=1024, num_blocks=64, max_num_seqs=1))
    yield core
    core.stop()


def gauges(core):
    text = core.metrics.render().decode()
    values = {}
    for line in text.splitlines():
        for name in ("vllm:num_requests_waiting", "vllm:num_requests_running"):
            if line.startswith(name + "{"):
                values[name] = float(line.rsplit(" ", 1)[1])
    return values


def test_queued_requests_count_as_waiting_until_the_worker_runs(core):
    sinks = [Collector() for _ in range(3)]
    for i, sink in enumerate(sinks):
        core.scheduler.submit(make_request(f"r{i}", f"prompt {i}", 4, sink))
    assert gauges(core) == {"vllm:num_requests_waiting": 3, "vllm:num_requests_running": 0}
    core.start()
    for sink in sinks:
        assert sink.done.wait(timeout=60)
        assert sink.events[-1].finish_reason == "length"
        assert "".join(e.text for e in sink.events if e.kind == "delta")
    assert gauges(core) == {"vllm:num_requests_waiting": 0, "vllm:num_requests_running": 0}
    assert core.allocator.usage == 0.0  # every block back


def test_abort_frees_the_blocks_of_a_running_request(core):
    core.start()
    sink = Collector()
    req = make_request("long", "x" * 300, 700, sink)
    core.scheduler.submit(req)
    assert sink.first_delta.wait(timeout=60)
    core.scheduler.abort(req)
    waiter = Collector()
    core.scheduler.submit(make_request("after", "y", 2, waiter))
    assert waiter.done.wait(timeout=60)  # runs only after the aborted one left (max_num_seqs=1)
    assert req.finish_reason == "abort" and not sink.done.is_set()
    assert len(req.output_ids) < 700
    assert core.allocator.usage == 0.0  # every block back


def test_stop_fails_queued_requests_instead_of_hanging(core):
    sink = Collector()
    core.scheduler.submit(make_request("queued", "z", 4, sink))
    core.start()
    core.stop()
    assert sink.done.wait(timeout=30)
    assert sink.events[-1].kind in ("finish", "error")


def test_emulated_gpu_timing_stretches_decode_and_prefill():
    core = EngineCore(EngineConfig(max_model_len=1024, num_blocks=64, decode_ms_per_token=40,
                                   prefill_us_per_token=1000, timing_jitter=0.1, timing_seed=3))
    with TestClient(create_app(core)) as client:
        r = client.post("/v1/completions", json={"prompt": "p" * 99, "max_tokens": 6,
                                                 "ignore_eos": True})
        assert r.status_code == 200
        text = client.get("/metrics").text
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    itl_sum = values['vllm:inter_token_latency_seconds_sum{engine="0",model_name="p2p-tiny"}']
    itl_count = values['vllm:inter_token_latency_seconds_count{engine="0",model_name="p2p-tiny"}']
    ttft = values['vllm:time_to_first_token_seconds_sum{engine="0",model_name="p2p-tiny"}']
    assert itl_count == 5 and itl_sum / itl_count >= 0.040 * 0.9
    assert ttft >= 100 * 1000e-6 * 0.9  # 100 prompt tokens (with BOS) x 1 ms
    assert values["p2p_engine_emulated_sleep_seconds_total"] > 0
