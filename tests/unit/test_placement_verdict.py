"""`bench placement`'s answer: one recommendation for the workload from one named timing profile, and a measured
cause for every policy whose P2P margin fell below 1; over repeats, medians with their min-max and 'inconclusive on
this box' where the ranges overlap."""

from __future__ import annotations

from dataclasses import replace

import pytest

from p2p_ops.bench import docqa, placement, placement_verdict
from p2p_ops.causes import CAUSES
from p2p_ops.diagnose.judge import margin
from p2p_ops.observe.stats import span, with_spread
from p2p_runtime.timing_profiles import TIMING_PROFILES
from tests.conftest import write_local_fleet

RDMA = TIMING_PROFILES["h200-rdma"]
WORKLOAD = docqa.DocQAOptions(sessions=8, questions=3, doc_tokens=2048, inflight=4)


def arm(policy, p2p, req_s, p50=500.0, peer=0, recomputed=10_000, failed=0):
    return placement_verdict.ArmResult(policy, p2p, 24, failed, 10.0, req_s, p50, p50 * 2, 48_000, 0, peer, recomputed)


def turns(label: str, hit_ms: float, cold_ms: float, moved: int = 0) -> list[dict]:
    """Three sessions: each computes its document (cold), then asks again and hits; `moved` of those later turns
    found nothing cached."""
    def turn(s, t, ms, cached):
        return {"arm": label, "ok": True, "ttft_s": ms / 1000, "cached_tokens": cached, "prefix_id": f"s{s}",
                "t_start_s": t}
    return ([turn(s, 10.0 + s, *((cold_ms, 0) if s < moved else (hit_ms, 2048))) for s in range(3)]
            + [turn(s, float(s), cold_ms, 0) for s in range(3)])


def test_the_recommendation_is_the_arm_serving_most_and_names_the_profile_and_the_workload():
    results = [arm("cache_aware", True, 3.0, peer=4096), arm("cache_aware", False, 2.5),
               arm("round_robin", True, 2.0, peer=9000), arm("round_robin", False, 1.0)]
    line = placement_verdict.recommend(results, placement_verdict.margins(results), WORKLOAD, RDMA)
    assert line.startswith("for document Q&A with 2048-token documents (8 sessions, 4 in flight), timing profile "
                           "h200-rdma: run cache_aware with P2P on (3.00 req/s")
    assert "P2P adds 1.20x req/s under cache_aware" in line


def test_an_arm_with_failures_is_never_recommended_and_a_winning_p2p_off_arm_points_to_calibrate():
    results = [arm("kv_aware", True, 9.0, failed=2), arm("kv_aware", False, 2.0)]
    line = placement_verdict.recommend(results, placement_verdict.margins(results), WORKLOAD, RDMA)
    assert "run kv_aware with P2P off" in line and "`p2pctl calibrate --timing h200-rdma`" in line


def test_each_margin_below_one_gets_its_measured_cause():
    cases = {
        "no pull happened": (arm("a", True, 0.9), arm("a", False, 1.0), 100, 800, 100, 800),
        "yet recomputes took 1.5x longer with P2P on: each server's NIXL transfer channel busy-polls":
            (arm("a", True, 0.8), arm("a", False, 1.0), 100, 1200, 100, 800),
        "replaced no recompute": (arm("a", True, 0.9, peer=2048, recomputed=12_000), arm("a", False, 1.0),
                                  100, 800, 100, 800),
        "shared cores were busier": (arm("a", True, 0.8, peer=4096, recomputed=6000), arm("a", False, 1.0),
                                     100, 1200, 100, 800),
        "a pulled document cost more than a local hit": (arm("a", True, 0.8, peer=4096, recomputed=6000),
                                                           arm("a", False, 1.0), 400, 800, 100, 800),
        "run-to-run variation": (arm("a", True, 0.95, peer=4096, recomputed=6000), arm("a", False, 1.0),
                                 100, 800, 100, 800),
    }
    ids = ["no_pull_needed", "channel_poll", "pull_replaced_nothing", "cores_contended", "pull_costlier", "variation"]
    for (words, (on, off, hit_on, cold_on, hit_off, cold_off)), cause in zip(cases.items(), ids):
        why, v = margin.placement(on, off, turns("a-p2p-on", hit_on, cold_on),
                                  turns("a-p2p-off", hit_off, cold_off), RDMA)
        assert words in why and v.id == cause, (words, why, v)
    moved, v = margin.placement(arm("a", True, 0.9), arm("a", False, 1.0), turns("a-p2p-on", 100, 800, moved=2),
                                turns("a-p2p-off", 100, 800), RDMA)
    assert "no pull happened, yet 2 later turn(s) recomputed their document with P2P on" in moved
    assert v.id == "moved_unserved" and not v.confirmed and "fix:" not in moved
    assert "the cause is not confirmed here" in moved and "kept each session" not in moved
    failed, v = margin.placement(arm("a", True, 0.5, failed=3), arm("a", False, 1.0), [], [], RDMA)
    assert failed.startswith("3 requests failed with P2P on") and v.id == "failed_requests"


def test_the_report_and_document_carry_the_profile_the_recommendation_and_the_causes(tmp_path):
    results = [arm("cache_aware", True, 0.8), arm("cache_aware", False, 1.0)]
    opts = placement_verdict.PlacementOptions.quick()
    all_turns = turns("cache_aware-p2p-on", 100, 800) + turns("cache_aware-p2p-off", 100, 800)
    md = placement_verdict.markdown(results, opts, all_turns)
    assert "Timing profile h200-rdma (llm-d, gpt-oss-120b on H200" in md
    assert "**Recommendation**: for document Q&A" in md
    assert "- P2P margin below 1 under cache_aware: no pull happened" in md
    doc = placement_verdict.document(results, opts, placement.choose(2, None, router=True), all_turns)
    assert doc["timing"]["profile"] == "h200-rdma" and "cache_aware" in doc["below_one"]
    assert doc["causes"]["cache_aware"]["id"] == "no_pull_needed"
    assert doc["timing"]["settings"]["prefill_us_per_token"] == round(RDMA.prefill_us_per_token, 2)


def test_the_fleet_runs_the_named_profile():
    data = placement.fleet_data(2, True, "round_robin", placement.choose(2, None, router=True).base, "h200-tcp", "x")
    assert data["engine"]["prefill_us_per_token"] == round(TIMING_PROFILES["h200-tcp"].prefill_us_per_token, 2)


def runs(policy, p2p, req_s: list[float], p50: list[float] | None = None):
    """One arm's repeats: the k-th run is repeat k + 1."""
    return [replace(arm(policy, p2p, r, p50=(p50 or [500.0] * len(req_s))[k], peer=1000 * k), repeat=k + 1)
            for k, r in enumerate(req_s)]


def test_an_arm_over_its_repeats_is_the_median_with_min_max_and_a_failed_fleet_stays_its_own_row():
    failed = placement_verdict.ArmResult("(fleet)", False, 0, 0, 0, 0, float("nan"), float("nan"), 0, 0, 0, 0,
                                 error="CouldNotRun: x", repeat=2)
    arm_runs = runs("cache_aware", True, [2.0, 3.0, 2.5], [400.0, 900.0, 600.0])
    [one, fleet] = placement_verdict.aggregate(arm_runs + [failed])
    assert (one.req_per_s, one.spread["req_per_s"], one.repeats, one.repeat) == (2.5, [2.0, 3.0], 3, 0)
    assert one.ttft_p50_ms == 600.0 and one.spread["ttft_p50_ms"] == [400.0, 900.0]
    assert one.turns == 72 and one.peer_tokens == 1000 and isinstance(one.peer_tokens, int)
    assert fleet is failed


def test_p2p_margins_pair_on_and_off_runs_of_the_same_repeat():
    m = placement_verdict.margins(runs("a", True, [3.0, 3.3, 2.7]) + runs("a", False, [2.0, 3.0, 2.5]))["a"]
    # 3/2, 3.3/3, 2.7/2.5: not the ratio of the medians (2.7/2.5) nor of the extremes
    assert m["repeats"] == 3 and m["throughput_x"] == pytest.approx(1.1)
    assert m["range"]["throughput_x"] == pytest.approx([1.08, 1.5])


def test_figures_over_repeats_read_median_then_min_max():
    assert with_spread(412.4, [300.0, 500.2]) == "412 (300-500)"
    assert with_spread(1.2, [1.2, 1.2], "{:.2f}x") == "1.20x" and with_spread(3.0, None, "{:.2f}") == "3.00"
    assert span([None, float("nan"), 3.0, 1.0]) == [1.0, 3.0] and span([None]) is None


def test_overlapping_req_s_ranges_are_inconclusive_naming_both_arms_and_what_would_decide_it():
    results = runs("cache_aware", True, [2.6, 3.0, 3.4]) + runs("cache_aware", False, [2.0, 2.1, 2.2]) \
        + runs("round_robin", False, [2.5, 2.8, 2.9])
    line = placement_verdict.recommend(results, placement_verdict.margins(results), WORKLOAD, RDMA)
    assert ("inconclusive on this box between cache_aware with P2P on (3.00 (2.60-3.40) req/s, TTFT p50 500 ms) "
            "and round_robin with P2P off (2.80 (2.50-2.90) req/s") in line
    assert "more repeats (--repeats 6), an idle box or longer documents (--doc-tokens 4096)" in line
    assert "run cache_aware" not in line
    md = placement_verdict.markdown(results, placement_verdict.PlacementOptions.quick(), [])
    assert "| cache_aware | yes | 3 | 3.00 (2.60-3.40) | 500 / 1,000 | 0 / 1,000 / 10,000 | 0 | 0 |" in md
    assert "| cache_aware | 1.43x (1.30x-1.55x) | 1.00x |" in md


def test_disjoint_ranges_give_a_clear_recommendation_and_a_p2p_margin_across_one_is_inconclusive():
    clear = runs("cache_aware", True, [3.9, 4.0, 4.1]) + runs("cache_aware", False, [2.4, 2.5, 2.6]) \
        + runs("round_robin", True, [2.0, 3.0, 3.8])
    line = placement_verdict.recommend(clear, placement_verdict.margins(clear), WORKLOAD, RDMA)
    assert "run cache_aware with P2P on (4.00 (3.90-4.10) req/s" in line and "inconclusive" not in line
    assert "P2P adds 1.60x (1.58x-1.62x) req/s under cache_aware" in line
    across = runs("kv_aware", False, [4.0, 4.2, 4.4]) + runs("kv_aware", True, [4.5, 3.0, 3.5])
    line = placement_verdict.recommend(across, placement_verdict.margins(across), WORKLOAD, RDMA)
    assert line.count("would decide it") == 1 and "between kv_aware with P2P off (4.20 (4.00-4.40) req/s" in line
    assert "P2P's margin under kv_aware is inconclusive on this box (0.80x (0.71x-1.12x) req/s over 3" in line
    why, v = placement_verdict.explanations(across, placement_verdict.margins(across), [], RDMA)["kv_aware"]
    assert why.startswith("inconclusive on this box, the 3 repeats' req/s margins lie on both sides of 1")
    assert v is not None and v.id in CAUSES


def test_a_single_run_per_arm_says_it_measured_no_spread():
    results = [arm("cache_aware", True, 3.0), arm("cache_aware", False, 2.5)]
    line = placement_verdict.recommend(results, placement_verdict.margins(results), WORKLOAD, RDMA)
    assert line.endswith("(one run per arm: no spread; --repeats 3 shows it)")


def test_repeats_below_one_are_refused_by_every_verb_that_takes_them(tmp_path, p2pctl):
    fleet = str(write_local_fleet(tmp_path / "fleet.yaml", 2, name="rep"))
    for argv in (["bench", "placement", "--quick", "--repeats", "0", "--out", str(tmp_path / "run")],
                 ["bench", "transfer", "-f", fleet, "--repeats", "0"], ["calibrate", "--launch", "--repeats", "-1"]):
        code, out, err = p2pctl(*argv)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (argv, err)
        assert f"--repeats {argv[argv.index('--repeats') + 1]}: give 1 or more" in err
    assert not (tmp_path / "run").exists()


def test_arms_that_never_ran_get_no_margin_recommendation_or_comparison_only_their_error_rows():
    nan = float("nan")
    failed = [placement_verdict.ArmResult("(fleet)", p2p, 0, 0, 0, 0, nan, nan, 0, 0, 0, 0,
                                          error="CouldNotRun: no router") for p2p in (True, False)]
    md = placement_verdict.markdown(failed, placement_verdict.PlacementOptions.quick(), [])
    assert md.count("error: CouldNotRun: no router") == 2
    assert "Recommendation" not in md and "llm-d (8 pods" not in md and "P2P margin" not in md
    assert placement_verdict.recommend(failed, {}, WORKLOAD, RDMA) == "none: no arm ran"
    ran = failed + [arm("a", True, 2.0, failed=24)]
    assert placement_verdict.recommend(ran, {}, WORKLOAD, RDMA) == "none: no arm finished without failures"
    md = placement_verdict.markdown(ran, placement_verdict.PlacementOptions.quick())
    assert "**Recommendation**: none: no arm finished" in md and "llm-d (8 pods" in md
