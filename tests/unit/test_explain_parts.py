"""explain's parts: LMCache's hasher as a node fact, the prompt loaders, the near-match, key-input differences,
the directory readers' parsing, the odd-one-out split and vLLM's must-agree flags."""

from __future__ import annotations

import json
import sys

import pytest

from p2p_ops.diagnose.explain import prompt as P
from p2p_ops.diagnose.explain.near import closest, sent_by
from p2p_ops.endpoints.lmcache_api import DirectoryEntry, Placement, p2p_adapters, parse_directory_lookup
from p2p_ops.errors import BadInput
from p2p_ops.facts.base import run_local
from p2p_ops.facts.chunk_keys import KeyInputs, chunk_keys_fact, pack_tokens, parse_chunk_keys
from p2p_ops.spec.agreement import split, vllm_values
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.starter import local_fleet


def _keys(inputs: KeyInputs, tokens: list[int]):
    return chunk_keys_fact(sys.executable, inputs, tokens).collect(lambda argv: run_local(argv, 120))


def test_lmcache_hasher_on_the_node_gives_the_servers_keys_and_none_hash():
    """The fact runs LMCache's own TokenHasher: blake3 keys are what LMCache computes (the first key of
    tokens 0..255 is pinned), the NONE_HASH is printed the way the server logs it, and a different chunk size
    gives other keys."""
    got = _keys(KeyInputs(256, "blake3", "tiny", 1, "", "0"), list(range(600)))
    assert got.error is None and got.chunks == 2 and not got.builtin_hash
    assert got.hashes()[0] == "084547b6c40ed5b05ba8cd0305db5bf74d5617673948d9ed193ab7d6cbc484d4"
    assert got.keys[0][0]["kv_rank"] == (1 << 24) | (0 << 16) | (1 << 8) and got.keys[0][0]["model_name"] == "tiny"
    assert got.none_hash.startswith('b"~>\\xff\\x9e')
    other = _keys(KeyInputs(512, "blake3", "tiny", 1, "", "0"), list(range(600)))
    assert other.chunks == 1 and other.hashes()[0] != got.hashes()[0]


def test_the_hasher_says_when_lmcache_falls_back_to_pythons_hash():
    got = _keys(KeyInputs(256, "builtin", "tiny", 1, "", "0"), list(range(300)))
    assert got.builtin_hash and got.chunks == 1


def test_tokens_travel_in_argument_sized_pieces():
    pieces = pack_tokens(list(range(200_000)))
    assert len(pieces) > 1 and all(len(p) <= 100_000 for p in pieces)


def test_hasher_output_without_its_line_is_an_error_not_a_crash():
    got = parse_chunk_keys("Traceback (most recent call last):\nModuleNotFoundError: No module named 'lmcache'\n")
    assert got.error and "No module named 'lmcache'" in got.error and got.hashes() == []


def test_directory_lookup_and_adapter_parsing():
    body = {"chunks": 1, "results": [{"key": {"chunk_hash_hex": "ab"}, "token_ids": [1, 2], "access_count": 3,
                                      "placements": [{"instance_id": "a", "tier": "l1", "backend": "dram",
                                                      "size_bytes": 10, "incarnation": 1}]}]}
    [e] = parse_directory_lookup(body)
    assert e.placements == [Placement("a", "l1", "dram", 10)] and e.token_ids == [1, 2] and e.access_count == 3
    assert parse_directory_lookup({"detail": "Not Found"}) is None
    status = {"storage_manager": {"l2_adapters": [
        {"type": "P2PL2Adapter", "peer_mq_server_url": "tcp://127.0.0.1:5602", "in_flight_lookups": 2},
        {"type": "FSL2Adapter"}]}}
    assert [(h, p, a["in_flight_lookups"]) for h, p, a in p2p_adapters(status)] == [("127.0.0.1", 5602, 2)]


def test_the_near_match_names_the_positions_where_the_first_chunk_differs():
    first = [7, 1, 2, 3, 4, 5, 6, 8]
    held = [DirectoryEntry({"chunk_hash_hex": "k"}, [Placement("node-a-0", "l1")], [9, 1, 2, 3, 4, 5, 6, 8]),
            DirectoryEntry({"chunk_hash_hex": "z"}, [Placement("node-a-0", "l1")], [0] * 8)]
    near = closest(first, held)
    assert near == {"chunk": 0, "holder": "node-a-0", "positions": [0], "mine": [7], "theirs": [9], "key": "k"}
    assert closest(first, [DirectoryEntry({}, [], list(first))]) is None     # the same tokens: not a near match


def test_split_names_the_odd_one_out_or_no_majority():
    s = split({"node-a-0": "256", "node-b-0": "256", "node-c-0": "512"})
    assert s.majority_value == "256" and s.odd == {"node-c-0": "512"}
    assert s.describe("chunk_size") == ("node-c-0=512 (the odd one out; node-a-0, node-b-0 use chunk_size=256)")
    tie = split({"node-a-0": "0", "node-b-0": "7"})
    assert tie.tie and tie.describe("x") == "node-a-0=0, node-b-0=7 (no majority)"


def test_prompt_from_a_run_takes_the_first_miss_or_the_named_request(tmp_path):
    tests = tmp_path / "tests"
    older, run = tests / "20261201T000000Z-basic", tests / "20261201T000500Z-basic"
    older.mkdir(parents=True)
    (older / P.PROMPTS_FILE).write_text(json.dumps({"request": "b", "missed": True, "prompt": "old"}) + "\n")
    tmp_path = run
    run.mkdir()
    rows = [{"request": "a", "instance": "node-a-0", "computed_on": "", "missed": False, "prompt": "p"},
            {"request": "b", "instance": "node-b-0", "computed_on": "node-a-0", "missed": True, "prompt": "p"}]
    (tmp_path / P.PROMPTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = P.from_run(str(tmp_path), None)
    assert spec.computed_on == "node-a-0" and spec.recorded["instance"] == "node-b-0" and spec.text == "p"
    assert P.from_run(str(tmp_path), "a").recorded["request"] == "a"
    with pytest.raises(BadInput, match="--request zz: not in"):
        P.from_run(str(tmp_path), "zz")
    assert P.latest_failed_run(tests) == run


def test_bad_prompt_inputs_are_one_line_errors(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        P.from_file(str(tmp_path / "none.txt"))
    (tmp_path / "m.json").write_text("{not json")
    with pytest.raises(BadInput, match="--messages .*m.json: is not valid JSON"):
        P.from_messages(str(tmp_path / "m.json"))
    (tmp_path / "m.json").write_text(json.dumps([{"role": "user", "content": "hi"}]))
    assert P.from_messages(str(tmp_path / "m.json")).messages == [{"role": "user", "content": "hi"}]
    with pytest.raises(BadInput, match="no prompts.jsonl"):
        P.from_run(str(tmp_path), None)


def test_vllm_command_line_values_and_spec_refusals():
    argv = ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--block-size", "128",
            "-tp=2", "--kv-cache-dtype", "fp8"]
    got = vllm_values(argv)
    assert got == {"vllm_block_size": "128", "vllm_parallel": "tp=2 pp=1", "vllm_dtype": "auto",
                   "vllm_kv_cache_dtype": "fp8", "vllm_model": "/m@main"}
    assert vllm_values(["/bin/p2p-engine", "--port", "1"]) == {}
    router = {"enabled": True, "policy": "kv_aware", "kv_events": False}
    with pytest.raises(BadInput, match="kv_aware routes on KV events"):
        parse_fleet(local_fleet(2) | {"router": router})
    assert parse_fleet(local_fleet(2) | {"router": router | {"kv_events": True}}).kv_events_on


def test_sent_by_names_the_newest_saved_request_of_this_prompt_to_this_instance(tmp_path):
    for run, instance in (("20261201T000000Z-basic", "node-b-0"), ("20261202T000000Z-basic", "node-a-0"),
                          ("20261203T000000Z-stress", "node-b-0")):
        (tmp_path / run).mkdir()
        rows = [{"request": "r1", "instance": instance, "prompt": "the prompt"},
                {"request": "r2", "instance": "node-b-0", "prompt": "another"}]
        (tmp_path / run / P.PROMPTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert sent_by(tmp_path, "the prompt", "node-b-0") == "20261203T000000Z-stress request r1"
    assert sent_by(tmp_path, "the prompt", "node-a-0") == "20261202T000000Z-basic request r1"
    assert sent_by(tmp_path, "the prompt", "node-c-0") == "" and sent_by(tmp_path, "unsent", "node-b-0") == ""
