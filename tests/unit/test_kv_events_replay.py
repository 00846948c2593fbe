"""explain's reader of an engine's KV events: the replay client against the engine's real publisher, the decoder
of what engines stored (whole prompts, chained blocks, a cleared cache) and where a prompt departs from them."""

from __future__ import annotations

import time

from p2p_ops.diagnose.explain.near import departures
from p2p_ops.endpoints import kv_events_api as api
from p2p_ops.lifecycle.free_ports import free_port
from p2p_runtime import kv_events as kv
from p2p_runtime.config import KVEventsConfig


def _endpoint() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


def _stored(tokens: list[int], hashes: list[int], parent=None, size: int = 4) -> kv.BlockStored:
    return kv.BlockStored(block_hashes=hashes, parent_block_hash=parent, token_ids=tokens, block_size=size,
                          lora_id=None, medium="CPU", lora_name=None)


def _payload(*events) -> bytes:
    return kv.encode_batch(kv.EventBatch(ts=time.time(), events=list(events)))


def test_the_replay_returns_what_the_engines_recorder_published():
    cfg = KVEventsConfig(enable_kv_cache_events=True, endpoint=_endpoint(), replay_endpoint=_endpoint(), topic="")
    pub = kv.ZmqEventPublisher(cfg)
    try:
        recorder = kv.KVEventRecorder(pub, "tiny", block_size=4)
        prompt = list(range(100, 110))               # two full blocks and two tokens
        recorder.prefilled("r1", prompt)
        recorder.in_lmcache("r1", 8)
        recorder.freed("r1")
        deadline = time.monotonic() + 10
        while pub.published < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        payloads, why = api.replay(cfg.replay_endpoint, timeout_s=5)
    finally:
        pub.close()
    assert why == "" and len(payloads) == 2
    assert api.stored_sequences(payloads) == [prompt[:8]]     # the GPU store and the CPU one: the same tokens


def test_a_replay_nobody_answers_says_so_within_its_timeout():
    t = time.monotonic()
    payloads, why = api.replay(_endpoint(), timeout_s=0.5)
    assert payloads is None and "sent no end of replay within 0.5 s" in why
    assert time.monotonic() - t < 60          # it returns (bounded), however busy the box


def test_chained_blocks_make_one_sequence_and_a_clear_forgets_what_came_before():
    first = _payload(_stored([1, 2, 3, 4], [11]), _stored([5, 6, 7, 8], [12], parent=11))
    orphan = _payload(_stored([9, 9, 9, 9], [13], parent=999))     # its parent never seen: where it starts is unknown
    assert api.stored_sequences([first, orphan, b"\xc1not msgpack"]) == [[1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8]]
    cleared = _payload(kv.AllBlocksCleared(), _stored([7, 7, 7, 7], [21]))
    assert api.stored_sequences([first, cleared]) == [[7, 7, 7, 7]]


def test_a_prompt_departs_where_it_first_differs_from_a_stored_one_the_most_shared_first():
    cs = 4
    doc = list(range(16))
    changed = doc[:6] + [99, 98] + doc[8:]          # its middle sentence changed: chunk 1 from token 6
    other = [50] + doc[1:]                           # the same but its first token: 1 position in 4
    stranger = [0, 70, 71, 72, 73, 74, 75, 76]       # shares 1 token, then another prompt
    found = departures(changed, cs, {"node-a-0": [doc, stranger], "node-b-0": [changed[:5] + [0, 0, 0]]})
    assert [(t, e) for t, e, _ in found] == [(6, "node-a-0"), (5, "node-b-0")]
    assert departures(doc, cs, {"node-a-0": [doc, doc[:8]]}) == []             # equal, or a prefix: nothing departs
    assert [t for t, _, _ in departures(other, cs, {"node-a-0": [doc]})] == [0]
    assert departures([0, 1, 2, 3, 9, 9, 9, 9], cs, {"node-a-0": [stranger]}) == []    # 3 of 4 differ in chunk 0
    assert departures(doc[:6] + [99], cs, {"node-a-0": [doc]}) == []        # it departs in its partial last chunk


def test_explain_says_which_engines_kv_events_it_could_not_read():
    from p2p_ops.diagnose.explain import sources
    from p2p_ops.diagnose.judge.views import ExplainFacts

    facts = ExplainFacts("f", "embedded", "p", [], [], events_error={"node-b-0": "tcp://127.0.0.1:5560 sent no end"})
    assert "KV events of node-b-0's engine (its replay socket): UNKNOWN, tcp://127.0.0.1:5560 sent no end" in sources(facts)
