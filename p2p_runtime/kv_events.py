"""KV-cache events in vLLM's wire format, so a KV-aware router can follow our engine's blocks.

The same bytes vLLM 0.32 (``vllm/distributed/kv_events.py``) puts on the wire: a ZMQ PUB socket sends
``[topic, seq (8-byte big-endian), payload]`` where the payload is a msgspec-msgpack ``EventBatch``
``[ts, events, data_parallel_rank]`` and each event is a map tagged ``"type"`` (``BlockStored``,
``BlockRemoved``, ``AllBlocksCleared``). An optional ROUTER socket replays buffered batches: a client
sends ``[id, "", start_seq]`` and gets every buffered batch from ``start_seq`` on, then
``[id, "", "", -1, ""]``. Configured with the JSON vLLM takes as ``--kv-events-config``.

Unlike vLLM, every endpoint is *bound* (we are always the publisher) and wildcard addresses are
refused: the toolkit binds loopback on local fleets and the node address on real ones.
"""

from __future__ import annotations

from collections import deque
import hashlib
import logging
import queue
import threading
import time

import msgspec
import zmq

from p2p_runtime.config import KVEventsConfig

logger = logging.getLogger(__name__)

MEDIUM_GPU = "GPU"
MEDIUM_CPU = "CPU"
END_SEQ = (-1).to_bytes(8, "big", signed=True)


# Wire structs: field names, order and tagging match vLLM's msgspec structs.

class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Base of the tagged event maps (``{"type": "<class name>", ...}``)."""


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


_ENCODER = msgspec.msgpack.Encoder()


def encode_batch(batch: EventBatch) -> bytes:
    return _ENCODER.encode(batch)


def block_hashes(token_ids: list[int], block_size: int, model: str, parent: int | None = None) -> list[int]:
    """Chained 64-bit hashes of the full blocks: each covers its parent hash and its tokens, so it names the
    whole prefix up to the end of its block (as vLLM's do). Unsigned: the router rejects negative hashes."""
    # The parent of block 0 is per model, so two models never share a key.
    prev = _h64(b"p2p-kv-root\0" + model.encode()) if parent is None else parent
    out = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block = token_ids[start:start + block_size]
        data = prev.to_bytes(8, "big") + b"".join(t.to_bytes(4, "little") for t in block)
        prev = _h64(data)
        out.append(prev)
    return out


def _h64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class ZmqEventPublisher:
    """``publish`` never blocks the engine worker: a full queue drops the batch (counted) rather than stall
    decoding, as a lagging subscriber must never slow serving down."""

    def __init__(self, config: KVEventsConfig) -> None:
        self.dropped = 0
        self.published = 0
        self._queue: queue.Queue[EventBatch | None] = queue.Queue(maxsize=config.max_queue_size)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._topic = config.topic.encode()
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._pub.bind(config.endpoint)
        self._replay = None
        if config.replay_endpoint:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.bind(config.replay_endpoint)
        self._running = True
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self._thread.start()

    def publish(self, events: list[KVCacheEvent]) -> None:
        if not events or not self._running:
            return
        try:
            # One engine, one data-parallel rank: 0 (as /kv_event_sources names it).
            self._queue.put_nowait(EventBatch(ts=time.time(), events=events, data_parallel_rank=0))
        except queue.Full:
            self.dropped += 1

    def close(self, timeout_s: float = 1.0) -> None:
        if not self._running:
            return
        self._running = False
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(timeout=timeout_s)
        for sock in (self._pub, self._replay):
            if sock is not None:
                sock.close(linger=0)
        self._ctx.term()

    def _run(self) -> None:
        seq = 0
        while True:
            if self._replay is not None and self._replay.poll(0):
                self._serve_replay()
            try:
                batch = self._queue.get(timeout=0.05)
            except queue.Empty:
                if not self._running:
                    return
                continue
            if batch is None:
                return
            payload = encode_batch(batch)
            try:
                self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
            except zmq.ZMQError as exc:
                logger.warning("KV event batch %d not sent: %s", seq, exc)
            self._buffer.append((seq, payload))
            self.published += 1
            seq += 1

    def _serve_replay(self) -> None:
        frames = self._replay.recv_multipart()
        if len(frames) != 3:
            logger.warning("ignoring a malformed KV-event replay request (%d frames)", len(frames))
            return
        client, _, start = frames
        start_seq = int.from_bytes(start, "big")
        for seq, payload in list(self._buffer):
            if seq >= start_seq:
                self._replay.send_multipart((client, b"", self._topic, seq.to_bytes(8, "big"), payload))
        self._replay.send_multipart((client, b"", b"", END_SEQ, b""))


class KVEventRecorder:
    """The paged cache holds a request's blocks only while it runs; what persists is the copy in this node's LMCache
    server. So a prompt's full blocks are announced on the ``GPU`` medium when prefill fills them, and when the request
    frees them one batch says ``BlockRemoved(GPU)`` and then ``BlockStored(CPU)`` for the part the LMCache server holds
    (computed and stored here, or loaded from it). In that order a router that ignores the medium still ends up with the
    blocks indexed on this engine, which is where the next request of that prefix is cheapest. LMCache evictions are not
    visible to the engine, so CPU blocks are never removed; a router may overrate an engine whose server evicted, and
    then the request recomputes (still correct).
    """

    def __init__(self, publisher: ZmqEventPublisher | None, model: str, block_size: int) -> None:
        self.publisher = publisher
        self.model = model
        self.block_size = block_size
        # request id -> [prompt, its full blocks' hashes, leading prompt tokens this node's LMCache holds]
        self._live: dict[str, list] = {}
        self._lock = threading.Lock()

    def prefilled(self, request_id: str, prompt_ids: list[int]) -> None:
        if self.publisher is None:
            return
        hashes = block_hashes(prompt_ids, self.block_size, self.model)
        with self._lock:
            self._live[request_id] = [list(prompt_ids), hashes, 0]
        if hashes:
            self.publisher.publish([self._stored(prompt_ids, hashes, MEDIUM_GPU)])

    def in_lmcache(self, request_id: str, num_tokens: int) -> None:
        with self._lock:
            if (live := self._live.get(request_id)) is not None:
                live[2] = max(live[2], num_tokens)

    def freed(self, request_id: str) -> None:
        with self._lock:  # nothing is live without a publisher
            live = self._live.pop(request_id, None)
        if live and live[1]:
            prompt, hashes, in_lmcache = live
            kept = hashes[:in_lmcache // self.block_size]
            self.publisher.publish([BlockRemoved(block_hashes=hashes, medium=MEDIUM_GPU),
                                    *([self._stored(prompt, kept, MEDIUM_CPU)] if kept else [])])

    def cleared(self) -> None:
        if self.publisher is None:
            return
        with self._lock:
            self._live.clear()
        self.publisher.publish([AllBlocksCleared()])

    def _stored(self, prompt: list[int], hashes: list[int], medium: str) -> BlockStored:
        return BlockStored(block_hashes=hashes, parent_block_hash=None,
                           token_ids=list(prompt[:len(hashes) * self.block_size]), block_size=self.block_size,
                           lora_id=None, medium=medium, lora_name=None)
