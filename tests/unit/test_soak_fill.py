"""The soak's warm-up fill: when is an L1 full (harness/soak/load.py)."""

from __future__ import annotations

from p2p_ops.harness.soak.load import WATERMARK, fill_level


def test_the_least_filled_server_sets_the_level():
    assert fill_level({"a": 0.78, "b": 0.3}, {}) == 0.3


def test_a_server_that_fell_from_a_high_peak_went_through_an_eviction_pass():
    peaks: dict[str, float] = {}
    assert fill_level({"a": 0.77, "b": 0.76}, peaks) >= WATERMARK
    # LMCache evicted 20 % of a's L1 between two looks: a is full although its use is now below the watermark.
    assert fill_level({"a": 0.62, "b": 0.78}, peaks) == 0.78
    assert peaks == {"a": 0.77, "b": 0.78}


def test_small_falls_of_a_nearly_empty_l1_are_not_evictions():
    # P2P-prefetched chunks are freed after their read (LMCache counts those as evicted too): use dips a little.
    peaks: dict[str, float] = {}
    fill_level({"a": 0.12}, peaks)
    assert fill_level({"a": 0.05}, peaks) == 0.05
    fill_level({"a": 0.45}, peaks)
    assert fill_level({"a": 0.3}, peaks) == 0.3
