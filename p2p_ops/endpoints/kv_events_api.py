"""An engine's KV-event replay socket (vLLM's ZMQ protocol; the embedded engine speaks the same): what prompts the
engine stored, as token sequences. explain reads them to say where a prompt departs from what a node computed.

The protocol: a DEALER sends ``(b"", start_seq)``; the engine's ROUTER answers each buffered batch from that
sequence number as ``(b"", topic, seq, payload)`` and ends with ``(b"", b"", END_SEQ, b"")``. A payload is a
msgpack ``EventBatch`` (``[ts, events, dp_rank]``), each event a map tagged by ``type``. Decoded generically, so
neither the engine's structs nor vLLM's are needed here, only pyzmq and msgspec (the `engine` extra).
"""

from __future__ import annotations

import time
from typing import Optional

END_SEQ = (-1).to_bytes(8, "big", signed=True)
MAX_BATCHES = 5000          # the engine buffers a bounded number; this bounds what a bad peer can send
MAX_SEQUENCES = 200         # the newest stored prompts kept per engine


def replay(url: str, timeout_s: float = 2.0) -> tuple[Optional[list[bytes]], str]:
    """(payloads of every buffered batch, "") or (None, why not)."""
    try:
        import zmq
    except ImportError:
        return None, "pyzmq is not installed here (the engine extra: pip install 'p2p-kv-ops[engine]')"
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(url)
        sock.send_multipart([b"", (0).to_bytes(8, "big")])
        payloads: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(payloads) < MAX_BATCHES:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000)):
                return None, f"{url} sent no end of replay within {timeout_s:g} s"
            frames = sock.recv_multipart()
            if len(frames) != 4:
                continue
            if frames[2] == END_SEQ:
                break
            payloads.append(frames[3])
        return payloads, ""
    except zmq.ZMQError as exc:
        return None, f"{url}: {exc}"
    finally:
        sock.close()
        ctx.term()


def stored_sequences(payloads: list[bytes]) -> list[list[int]]:
    """The token sequences the engine stored, newest last: each BlockStored's tokens after those of its parent
    block (a store whose parent was never seen is skipped: where it starts is unknown). AllBlocksCleared forgets
    everything before it; BlockRemoved does not, as an engine's paged blocks go while its LMCache server keeps them."""
    import msgspec

    prefix_of: dict = {}              # block hash -> the tokens up to and including that block
    sequences: list[list[int]] = []
    for payload in payloads:
        try:
            batch = msgspec.msgpack.decode(payload)
        except msgspec.DecodeError:
            continue
        events = batch[1] if isinstance(batch, list) and len(batch) > 1 and isinstance(batch[1], list) else []
        for ev in events:
            if not isinstance(ev, dict):
                continue
            if ev.get("type") == "AllBlocksCleared":
                prefix_of.clear()
                sequences.clear()
            if ev.get("type") != "BlockStored":
                continue
            parent, tokens = ev.get("parent_block_hash"), ev.get("token_ids") or []
            size, hashes = ev.get("block_size") or 0, ev.get("block_hashes") or []
            if not size or (parent is not None and _key(parent) not in prefix_of):
                continue
            full = (prefix_of[_key(parent)] if parent is not None else []) + list(tokens)
            start = len(full) - len(tokens)
            for i, h in enumerate(hashes):
                prefix_of[_key(h)] = full[:start + (i + 1) * size]
            sequences.append(full)
    unique = list({tuple(s): s for s in sequences if s}.values())
    return unique[-MAX_SEQUENCES:]


def _key(h) -> object:
    return tuple(h) if isinstance(h, list) else h


def departure(tokens: list[int], theirs: list[int]) -> Optional[int]:
    """The first token position where `tokens` and a stored sequence differ; None where one is a prefix of the
    other (nothing departs)."""
    for i, (a, b) in enumerate(zip(tokens, theirs)):
        if a != b:
            return i
    return None
