"""The one spread of repeated figures (observe.stats): the median, the min-max, and when the repeats lie on both
sides of a threshold, as every benchmark that says "inconclusive on this box" judges it."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from p2p_ops.bench import calibrate, docqa, placement_verdict, transfer
from p2p_ops.observe.stats import median, straddles

NAN = float("nan")

# (the repeats' min, max, the threshold, whether they lie on both sides of it): only a repeat strictly below and
# one strictly above make the median's side chance; one equal to the threshold is on neither side.
EDGES = [
    (1.0, 3.0, 2.0, True),
    (1.0, 3.0, 1.0, False),
    (1.0, 3.0, 3.0, False),
    (2.0, 2.0, 2.0, False),
    (1.0, 3.0, 0.5, False),
    (1.0, 3.0, 4.0, False),
]


@pytest.mark.parametrize("lo, hi, t, both", EDGES)
def test_a_spread_straddles_a_threshold_only_with_repeats_strictly_on_both_sides(lo, hi, t, both):
    assert straddles([lo, hi], t) is both
    assert straddles(None, t) is False and straddles([], t) is False


@pytest.mark.parametrize("lo, hi, t, both", EDGES)
def test_every_benchmark_calls_inconclusive_by_that_one_rule(lo, hi, t, both):
    mid = (lo + hi) / 2
    last = {"ok": True, "p50_ms": mid, "p50_range": [lo, hi], "payload_bytes": 2**20, "runs": [{}] * 3}
    assert ("inconclusive" in transfer.verdict([last], t)[1]) is both

    # calibrate: the emulated prefill is t; the pulls' seconds go through the same * 1000 as the prefill below
    profile = SimpleNamespace(name="t", emulated=False, has_pull=False, crossover_tokens=None,
                              prefill_ms=lambda n: t / 1000 * 1000)
    row = {"tokens": 1024, "ttft_pulled_b_s": mid / 1000, "cached_tokens_b": 1024,
           "pulled_runs_s": [lo / 1000, mid / 1000, hi / 1000]}
    assert (calibrate.project([row], profile)["inconclusive"] == [1024]) is both

    # placement: P2P's req/s margin over 1.0 req/s off, scaled so that the threshold t is the margin 1
    arm = placement_verdict.ArmResult("a", True, 9, 0, 1.0, 1.0, 500.0, 900.0, 1, 0, 0, 1)
    runs = [replace(arm, p2p=p2p, req_per_s=req / t if p2p else 1.0, repeat=k + 1)
            for p2p in (True, False) for k, req in enumerate((lo, mid, hi))]
    line = placement_verdict.recommend(runs, placement_verdict.margins(runs), docqa.DocQAOptions(),
                                       SimpleNamespace(name="t"))
    assert ("P2P's margin under a is inconclusive" in line) is both


@pytest.mark.parametrize("values, default, expected", [
    ([3, 1, 2], None, 2),               # a rank itself: that value, an int stays an int
    ([1, 2, 3, 4], None, 2.5),
    ([None, NAN, 5.0, 7.0], None, 6.0),   # None and NaN are no data
    ([], None, None),
    ([NAN], NAN, NAN),
])
def test_the_median_is_percentile_50_skipping_missing_figures(values, default, expected):
    got = median(values, default)
    assert got == expected or (got != got and expected != expected)
    assert type(got) is type(expected)
