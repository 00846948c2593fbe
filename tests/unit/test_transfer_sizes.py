"""The size plan: bytes per chunk and per prefix, and the batch sizes a transfer sweep tests."""

from __future__ import annotations

import pytest

from p2p_ops.bench import calibrate
from p2p_ops.errors import BadInput
from p2p_ops.spec.load import parse_fleet
from p2p_ops.spec.starter import local_fleet
from p2p_ops.spec.transfer_sizes import fleet_size_plan, size_plan
from p2p_runtime.profiles import PROFILES


def test_llama_3_8b_at_8k_tokens():
    plan = size_plan(PROFILES["llama-3-8b"].bytes_per_token, 256, 8192)
    assert plan.chunk_bytes == 32 << 20 and plan.prefix_chunks == 32 and plan.prefix_bytes == 1 << 30
    assert plan.counts == (1, 2, 4, 8, 16, 32)


def test_a_partial_chunk_is_not_pulled_and_the_last_count_is_the_prefix():
    plan = size_plan(2048, 256, 1300)
    assert plan.prefix_chunks == 5 and plan.counts == (1, 2, 4, 5) and plan.prefix_bytes == 5 * plan.chunk_bytes


def test_chunks_round_up_to_whole_l1_pages():
    assert size_plan(1000, 16, 16, page_size=4096).chunk_bytes == 16384


def test_the_fleets_own_profile_sets_the_bytes():
    fleet = parse_fleet(local_fleet(2, name="sz"))   # the tiny engine: 2 KiB per token
    plan = fleet_size_plan(fleet, 2048)
    assert plan.bytes_per_token == 2048 and plan.prefix_bytes == 4 << 20   # the demo's "4.00 MiB pulled"


@pytest.mark.parametrize("args", [(0, 256, 1024), (2048, 256, 100)])
def test_bad_sizes_say_which(args):
    with pytest.raises(BadInput, match="prompt length|must be >= 1"):
        size_plan(*args)


def test_calibrate_advice_carries_the_same_bytes():
    class Row:
        def __init__(self, tokens):
            self.tokens, self.ttft_pulled_b_s, self.ttft_recompute_b_s, self.cached_tokens_b = tokens, 0.1, 0.2, 1

    adv = calibrate.advice([Row(1024), Row(2048)], 4096, bytes_per_token=2048, chunk_tokens=256)
    assert adv["min_pull_tokens"] == 1024 and adv["min_pull_bytes"] == size_plan(2048, 256, 1024).prefix_bytes
    assert adv["chunk_bytes"] == 512 << 10
