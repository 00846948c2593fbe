"""`bench placement`'s answer: one recommendation for the workload from one named timing profile, and a measured
cause for every policy whose P2P margin fell below 1."""

from __future__ import annotations

from p2p_ops.bench import docqa, placement
from p2p_runtime.timing_profiles import TIMING_PROFILES

RDMA = TIMING_PROFILES["h200-rdma"]
WORKLOAD = docqa.DocQAOptions(sessions=8, questions=3, doc_tokens=2048, inflight=4)


def arm(policy, p2p, req_s, p50=500.0, peer=0, recomputed=10_000, failed=0):
    return placement.ArmResult(policy, p2p, 24, failed, 10.0, req_s, p50, p50 * 2, 48_000, 0, peer, recomputed)


def turns(label: str, hit_ms: float, cold_ms: float) -> list[dict]:
    return ([{"arm": label, "ok": True, "ttft_s": hit_ms / 1000, "cached_tokens": 2048}] * 3
            + [{"arm": label, "ok": True, "ttft_s": cold_ms / 1000, "cached_tokens": 0}] * 3)


def test_the_recommendation_is_the_arm_serving_most_and_names_the_profile_and_the_workload():
    results = [arm("cache_aware", True, 3.0, peer=4096), arm("cache_aware", False, 2.5),
               arm("round_robin", True, 2.0, peer=9000), arm("round_robin", False, 1.0)]
    line = placement.recommend(results, placement.margins(results), WORKLOAD, RDMA)
    assert line.startswith("for document Q&A with 2048-token documents (8 sessions, 4 in flight), timing profile "
                           "h200-rdma: run cache_aware with P2P on (3.00 req/s")
    assert "P2P adds 1.20x req/s under it" in line


def test_an_arm_with_failures_is_never_recommended_and_a_winning_p2p_off_arm_points_to_calibrate():
    results = [arm("kv_aware", True, 9.0, failed=2), arm("kv_aware", False, 2.0)]
    line = placement.recommend(results, placement.margins(results), WORKLOAD, RDMA)
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
    for words, (on, off, hit_on, cold_on, hit_off, cold_off) in cases.items():
        why = placement.explain(on, off, turns("a-p2p-on", hit_on, cold_on),
                                        turns("a-p2p-off", hit_off, cold_off), RDMA)
        assert words in why, (words, why)
    failed = placement.explain(arm("a", True, 0.5, failed=3), arm("a", False, 1.0), [], [], RDMA)
    assert failed.startswith("3 requests failed with P2P on")


def test_the_report_and_document_carry_the_profile_the_recommendation_and_the_causes(tmp_path):
    results = [arm("cache_aware", True, 0.8), arm("cache_aware", False, 1.0)]
    opts = placement.PlacementOptions.quick()
    all_turns = turns("cache_aware-p2p-on", 100, 800) + turns("cache_aware-p2p-off", 100, 800)
    md = placement.markdown(results, opts, all_turns)
    assert "Timing profile h200-rdma (llm-d, gpt-oss-120b on H200" in md
    assert "**Recommendation**: for document Q&A" in md
    assert "- P2P margin below 1 under cache_aware: no pull happened" in md
    doc = placement.document(results, opts, placement.choose(2, None, router=True), all_turns)
    assert doc["timing"]["profile"] == "h200-rdma" and "cache_aware" in doc["below_one"]
    assert doc["timing"]["settings"]["prefill_us_per_token"] == round(RDMA.prefill_us_per_token, 2)


def test_the_fleet_runs_the_named_profile():
    data = placement.fleet_data(2, True, "round_robin", placement.choose(2, None, router=True).base, "h200-tcp", "x")
    assert data["engine"]["prefill_us_per_token"] == round(TIMING_PROFILES["h200-tcp"].prefill_us_per_token, 2)
