"""KV events in vLLM's wire format: frames, payloads, replay, config, and the engine's hooks."""

from __future__ import annotations

import json
import os
import subprocess
import time

import msgspec
import pytest
import zmq
from fastapi.testclient import TestClient

from p2p_ops.lifecycle.free_ports import free_port
from p2p_runtime import kv_events as kv
from p2p_runtime.api import create_app
from p2p_runtime.config import ConfigError, EngineConfig, KVEventsConfig, KVEventsConfigError
from p2p_runtime.core import EngineCore
from tests.conftest import tool_venv

VLLM_PYTHON = tool_venv("P2P_VLLM_VENV", ".venv-vllm") / "bin" / "python"
# What a subscriber (the router) does with a payload: decode it as vLLM's typed batch.
decode_batch = msgspec.msgpack.Decoder(kv.EventBatch).decode


def endpoint() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


def subscriber(ctx: zmq.Context, url: str) -> zmq.Socket:
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVTIMEO, 10_000)
    sub.connect(url)
    return sub


def receive_until(sub: zmq.Socket, done, publish, deadline_s: float = 30.0) -> list:
    """PUB drops what is sent before the SUB joins: publish again whenever nothing is pending."""
    frames, end = [], time.monotonic() + deadline_s
    sub.setsockopt(zmq.RCVTIMEO, 300)
    publish()
    while not done(frames) and time.monotonic() < end:
        try:
            frames.append(sub.recv_multipart())
        except zmq.Again:
            publish()
    return frames


def test_hashes_are_chained_unsigned_64_bit_and_per_model():
    ids = list(range(40))
    a = kv.block_hashes(ids, 16, "m")
    assert len(a) == 2  # the trailing partial block is not hashed
    assert all(0 <= h < 2 ** 64 for h in a)
    assert kv.block_hashes(ids[:32], 16, "m") == a
    assert kv.block_hashes([99] + ids[1:], 16, "m")[1] != a[1]  # block 1 names its prefix
    assert kv.block_hashes(ids, 16, "other") != a
    assert kv.block_hashes(ids[16:], 16, "m", parent=a[0]) == a[1:]


def test_payload_is_vllm_event_batch_with_tagged_maps():
    stored = kv.BlockStored(block_hashes=[1, 2 ** 64 - 1], parent_block_hash=None,
                            token_ids=list(range(32)), block_size=16, lora_id=None,
                            medium="GPU", lora_name=None)
    batch = kv.EventBatch(ts=12.5, events=[stored, kv.BlockRemoved(block_hashes=[1], medium="GPU"),
                                           kv.AllBlocksCleared()], data_parallel_rank=0)
    raw = msgspec.msgpack.decode(kv.encode_batch(batch))  # untyped: plain lists and maps
    assert raw[0] == 12.5 and raw[2] == 0
    first, second, third = raw[1]
    assert first["type"] == "BlockStored" and first["block_hashes"] == [1, 2 ** 64 - 1]
    assert first["parent_block_hash"] is None and first["medium"] == "GPU"
    assert list(first)[:8] == ["type", "block_hashes", "parent_block_hash", "token_ids",
                               "block_size", "lora_id", "medium", "lora_name"]
    assert second == {"type": "BlockRemoved", "block_hashes": [1], "medium": "GPU"}
    assert third == {"type": "AllBlocksCleared"}
    back = decode_batch(kv.encode_batch(batch))
    assert isinstance(back.events[0], kv.BlockStored) and back.events[0].token_ids == list(range(32))


def test_config_takes_vllm_keys_and_refuses_wildcards():
    cfg = KVEventsConfig.from_json(json.dumps({
        "enable_kv_cache_events": True, "endpoint": "tcp://127.0.0.1:5557",
        "replay_endpoint": "tcp://127.0.0.1:5558", "buffer_steps": 5, "hwm": 10,
        "max_queue_size": 10, "topic": "kv@127.0.0.1:8000@m"}))
    assert cfg.active and cfg.publisher == "zmq"
    assert not KVEventsConfig.from_json("").active
    assert not KVEventsConfig.from_json('{"enable_kv_cache_events": false}').active
    for bad, word in [('{"enable_kv_cache_events": true, "endpoint": "tcp://*:5557"}', "every"),
                      ('{"enable_kv_cache_events": true, "endpoint": "ipc:///x"}', "tcp://"),
                      ('{"enable_kv_cache_events": true, "endpont": "x"}', "unknown"),
                      ('{"publisher": "kafka"}', "publisher"), ("[1]", "object"), ("{", "JSON")]:
        with pytest.raises(KVEventsConfigError, match=word):
            KVEventsConfig.from_json(bad)
    with pytest.raises(ConfigError, match="every interface"):
        EngineConfig(kv_events_config='{"enable_kv_cache_events": true, '
                                      '"endpoint": "tcp://0.0.0.0:5557"}')


def test_publisher_frames_sequence_and_replay():
    cfg = KVEventsConfig(enable_kv_cache_events=True, endpoint=endpoint(),
                            replay_endpoint=endpoint(), topic="kv@test")
    pub = kv.ZmqEventPublisher(cfg)
    ctx = zmq.Context()
    try:
        sub = subscriber(ctx, cfg.endpoint)
        frames = receive_until(sub, lambda f: len(f) >= 1, lambda: pub.publish([kv.AllBlocksCleared()]))
        assert frames, "no KV event frame arrived"
        topic, seq, payload = frames[0]
        assert topic == b"kv@test" and len(seq) == 8
        assert isinstance(decode_batch(payload).events[0], kv.AllBlocksCleared)
        # Replay from 0: every buffered batch in order, then the end marker.
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.RCVTIMEO, 10_000)
        dealer.connect(cfg.replay_endpoint)
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        seqs = []
        while True:
            _, t, s, p = dealer.recv_multipart()
            if s == kv.END_SEQ:
                assert t == b"" and p == b""
                break
            seqs.append(int.from_bytes(s, "big"))
        assert seqs == list(range(pub.published))
        dealer.close(0)
        sub.close(0)
    finally:
        pub.close()
        ctx.term()


def test_recorder_announces_gpu_then_cpu_blocks():
    sent = []

    class Pub:
        def publish(self, events):
            sent.append(events)

    rec = kv.KVEventRecorder(Pub(), "m", 4)
    prompt = list(range(10))
    rec.prefilled("r", prompt)
    rec.in_lmcache("r", 8)
    rec.freed("r")
    rec.freed("r")  # repeated cleanup says nothing twice
    (stored,), (removed, cpu) = sent
    hashes = kv.block_hashes(prompt, 4, "m")
    assert stored.medium == "GPU" and stored.block_hashes == hashes and stored.token_ids == prompt[:8]
    assert removed == kv.BlockRemoved(block_hashes=hashes, medium="GPU")
    assert cpu.medium == "CPU" and cpu.block_hashes == hashes[:2]


def test_engine_publishes_events_and_answers_discovery_routes():
    cfg = {"enable_kv_cache_events": True, "endpoint": endpoint(), "topic": "kv@e@tiny"}
    core = EngineCore(EngineConfig(served_model_name="tiny", max_model_len=512, num_blocks=128,
                                   kv_events_config=json.dumps(cfg)))
    ctx = zmq.Context()
    sub = subscriber(ctx, cfg["endpoint"])
    try:
        with TestClient(create_app(core)) as client:
            assert client.get("/get_server_info").json() == {
                "model_id": "tiny", "instance_id": core.config.label, "kv_block_size": 16}
            sources = client.get("/kv_event_sources").json()
            assert sources["0"]["endpoint"] == cfg["endpoint"]

            def ask():
                r = client.post("/v1/completions",
                                json={"model": "tiny", "prompt": "x" * 40, "max_tokens": 2})
                assert r.status_code == 200

            def seen(frames):
                return {type(e).__name__ for _, _, p in frames for e in decode_batch(p).events}

            frames = receive_until(sub, lambda f: {"BlockStored", "BlockRemoved"} <= seen(f), ask)
        events = [e for _, _, p in frames for e in decode_batch(p).events]
        kinds = [type(e).__name__ for e in events]
        assert "BlockStored" in kinds and "BlockRemoved" in kinds
        stored = next(e for e in events if isinstance(e, kv.BlockStored))
        assert stored.block_size == 16 and len(stored.block_hashes) == len(stored.token_ids) // 16
    finally:
        sub.close(0)
        ctx.term()


def test_plain_engine_answers_404_on_discovery_routes():
    core = EngineCore(EngineConfig(max_model_len=512, num_blocks=64))
    with TestClient(create_app(core)) as client:
        assert client.get("/kv_event_sources").status_code == 404
        assert client.get("/get_server_info").status_code == 404


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM environment at {VLLM_PYTHON}: "
                                                      f"run `make setup-vllm`")
def test_vllm_own_structs_decode_our_payload(tmp_path):
    prompt = list(range(48))
    hashes = kv.block_hashes(prompt, 16, "m")
    batch = kv.EventBatch(ts=1.0, data_parallel_rank=0, events=[
        kv.BlockStored(block_hashes=hashes, parent_block_hash=None, token_ids=prompt, block_size=16,
                       lora_id=None, medium="CPU", lora_name=None),
        kv.BlockRemoved(block_hashes=hashes[:1], medium="GPU"), kv.AllBlocksCleared()])
    (tmp_path / "payload.bin").write_bytes(kv.encode_batch(batch))
    script = (
        "import sys, msgspec\n"
        "from vllm.distributed.kv_events import KVEventBatch\n"
        "b = msgspec.msgpack.decode(open(sys.argv[1], 'rb').read(), type=KVEventBatch)\n"
        "print([type(e).__name__ for e in b.events], b.events[0].block_hashes, "
        "b.events[0].medium, b.data_parallel_rank)\n")
    env = {**os.environ, "LMCACHE_TRACK_USAGE": "false", "VLLM_LOGGING_LEVEL": "ERROR"}
    out = subprocess.run([str(VLLM_PYTHON), "-c", script, str(tmp_path / "payload.bin")],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == (
        f"['BlockStored', 'BlockRemoved', 'AllBlocksCleared'] {hashes} CPU 0")


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM environment at {VLLM_PYTHON}: "
                                                      f"run `make setup-vllm`")
def test_vllm_publisher_binds_the_rendered_endpoint_and_we_read_it():
    # What render.kv_events_config gives vLLM: the IPv4-mapped form that vLLM binds (it connects the rest).
    port = free_port()
    script = (
        "import sys, time, zmq\n"
        "from vllm.distributed.kv_events import ZmqEventPublisher, KVEventBatch, BlockStored\n"
        "pub = ZmqEventPublisher(0, endpoint=sys.argv[1], topic='')\n"
        "print(pub._pub.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)\n"
        "for _ in range(600):\n"
        "    pub.publish(KVEventBatch(ts=time.time(), events=[BlockStored(block_hashes=[7], "
        "parent_block_hash=None, token_ids=list(range(16)), block_size=16, lora_id=None, medium='GPU', "
        "lora_name=None)]))\n"
        "    time.sleep(0.1)\n")
    env = {**os.environ, "LMCACHE_TRACK_USAGE": "false", "VLLM_LOGGING_LEVEL": "ERROR"}
    proc = subprocess.Popen([str(VLLM_PYTHON), "-c", script, f"tcp://[::ffff:127.0.0.1]:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    ctx = zmq.Context()
    try:
        bound = proc.stdout.readline().strip()
        assert bound == f"tcp://127.0.0.1:{port}", (bound, proc.stderr.read()[-2000:] if not bound else "")
        sub = subscriber(ctx, f"tcp://127.0.0.1:{port}")
        frames = receive_until(sub, lambda f: len(f) >= 1, lambda: None, deadline_s=60)
        assert frames, "no frame from vLLM's publisher"
        event = decode_batch(frames[0][2]).events[0]
        assert isinstance(event, kv.BlockStored) and event.block_hashes == [7]
        sub.close(0)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        ctx.term()
