"""The named GPU timing profiles: fitted to llm-d's published H200 figures, reproducibly, and the projection
`calibrate` makes with them (this box's measured pull against a profile's emulated prefill)."""

from __future__ import annotations

import math

import pytest

from p2p_ops.bench import calibrate
from p2p_ops.harness.crossover import CrossoverRow
from p2p_ops.lifecycle.context import FleetContext
from p2p_runtime.config import EngineConfig
from p2p_runtime.timing_profiles import (RDMA_POINTS, TIMING_PROFILES, fit_line, fit_through_origin, match)
from tests.conftest import write_local_fleet

RDMA, TCP = TIMING_PROFILES["h200-rdma"], TIMING_PROFILES["h200-tcp"]


def test_the_tcp_fit_reproduces_llm_ds_own_cost_model_fit():
    # llm-d's fit of gpt-oss over TCP (reference section 10): P = 33.4 us/token, T = 15.6 us/token.
    assert TCP.prefill_us_per_token == pytest.approx(33.4, rel=0.02)
    assert TCP.pull_us_per_token == pytest.approx(15.6, rel=0.01)


def test_the_rdma_fit_gives_llm_ds_crossover_and_stays_near_every_published_point():
    # The recipe's answer over RDMA is 2048 (the smallest length tested, where the pull already won).
    assert 512 < RDMA.crossover_tokens < 2048
    for tokens, recompute_ms, pull_ms in RDMA_POINTS:
        assert RDMA.pull_ms(tokens) == pytest.approx(pull_ms, rel=0.10)
        assert RDMA.prefill_ms(tokens) == pytest.approx(recompute_ms, rel=RDMA.prefill_fit_error + 1e-9)
    assert RDMA.prefill_fit_error < 0.35


def test_fits_are_exact_on_exact_lines():
    assert fit_line(((1, 5.0), (3, 11.0), (7, 23.0))) == pytest.approx((2.0, 3.0))
    assert fit_through_origin(((2, 4.0), (5, 10.0))) == pytest.approx((2.0, 0.0))


def test_every_profile_is_a_valid_engine_config_and_is_recognised_from_its_settings():
    for name, p in TIMING_PROFILES.items():
        EngineConfig(**p.engine_settings())
        assert match(p.engine_settings()) == name
    assert match({}) == "off" and match({"prefill_us_per_token": 7.0}) is None
    # Only the compute is emulated: the pull stays this box's real one.
    assert RDMA.engine_settings()["load_us_per_token"] == 0.0 and RDMA.emulated and not TIMING_PROFILES["off"].emulated


def rows(pull_ms: dict[int, float], cached: int = 256) -> list[dict]:
    return [{"tokens": n, "ttft_pulled_b_s": ms / 1000, "cached_tokens_b": cached} for n, ms in pull_ms.items()]


def test_projection_finds_where_the_measured_pull_beats_the_emulated_prefill_and_says_why():
    # 100 ms fixed + 5 us/token here, against ~32.5 us/token: pays from ~3.6k tokens.
    proj = calibrate.project(rows({n: 100 + n * 0.005 for n in (1024, 2048, 4096, 8192)}), RDMA)
    assert proj["min_pull_tokens"] == 4096
    assert proj["pull_fit"] == pytest.approx({"fixed_ms": 100.0, "us_per_token": 5.0})
    assert proj["why"].startswith("round trips: a pull costs 100 ms fixed + 5.0 us/token")
    assert proj["cause"]["id"] == "round_trips" and proj["cause"]["fix"] in proj["why"]
    assert proj["published_min_pull_tokens"] == round(RDMA.crossover_tokens)


def test_a_pull_slower_per_token_than_the_gpu_prefill_is_named_as_the_limit():
    proj = calibrate.project(rows({n: 20 + n * 0.060 for n in (1024, 4096)}), RDMA, bytes_per_token=2048)
    assert proj["min_pull_tokens"] is None
    assert proj["why"].startswith("per-token cost: each pulled token costs 60.0 us here, 34 MB/s of 2 KiB tokens")
    assert f"{60 / RDMA.pull_us_per_token:.1f}x the profile's RDMA" in proj["why"]
    assert proj["cause"]["id"] == "per_token_cost"


def test_without_a_gpu_profile_or_a_p2p_hit_the_projection_says_so():
    off = calibrate.project(rows({1024: 10.0, 2048: 20.0}), TIMING_PROFILES["off"])
    assert "no GPU profile" in off["why"] and off["cause"]["id"] == "no_gpu_profile"
    assert "no P2P hit at [1024]" in calibrate.project(rows({1024: 10.0}, cached=0), RDMA)["why"]
    assert math.isinf(TIMING_PROFILES["h200-rdma"].crossover_tokens) is False


def _doc(tmp_path, engine: dict, timing=None, pulled_s=0.05, doc_tokens=4096):
    path = write_local_fleet(tmp_path / "fleet.yaml", 2, name="cal", engine=engine)
    with FleetContext.load(path) as ctx:
        rs = [CrossoverRow(n, 0.3, pulled_s + n * 2e-6, 0.2, n) for n in (1024, 2048, 4096)]
        adv = calibrate.advice(rs, doc_tokens)
        return calibrate.document(ctx, rs, [], [], adv, 3, None, calibrate.timing_doc(ctx, timing))


def test_calibration_names_one_profile_and_recommends_a_pull_for_the_stated_length(tmp_path):
    doc = _doc(tmp_path, dict(RDMA.engine_settings()))
    assert doc["timing"]["engines"] == "h200-rdma" == doc["timing"]["profile"]
    assert doc["recommendation"].startswith("for ~4096-token requests, pull: prefixes of 2048 tokens or more pay")
    assert "--cache-threshold 0.5" in doc["recommendation"]
    md = calibrate.summary(doc)
    assert "**Recommendation** (timing profile h200-rdma)" in md and "Prefill, emulated (ms)" in md
    assert "Engines ran timing profile: h200-rdma." in md
    # The measured advice says what it is about, so it is not read as the GPU answer.
    assert "This fleet as it runs (recompute measured at 98 us/token on this box" in md


def test_a_fleet_at_cpu_speed_is_projected_with_the_named_profile_and_a_losing_pull_names_its_cause(tmp_path):
    doc = _doc(tmp_path, {}, timing="h200-tcp", pulled_s=0.5)
    assert doc["timing"]["engines"] == "off" and doc["timing"]["profile"] == "h200-tcp"
    assert doc["recommendation"].startswith("for ~4096-token requests, do not pull on this transport")
    assert "round trips: a pull costs 500 ms fixed" in doc["recommendation"]
    assert "pulls pay from about 1,107 tokens" in doc["recommendation"]


def test_the_published_pull_scales_with_kv_bytes_and_the_fixed_part_does_not():
    # llama-3-8b writes 128 KiB per token, gpt-oss-120b 72 KiB: the bandwidth term grows by 128/72.
    extra = RDMA.pull_ms(8192, 131072) - RDMA.pull_fixed_ms
    assert extra == pytest.approx((RDMA.pull_ms(8192) - RDMA.pull_fixed_ms) * 128 / 72)
    assert RDMA.pull_gb_per_s == pytest.approx(73728 / RDMA.pull_us_per_token / 1000)
    assert 5 < RDMA.pull_gb_per_s < 9 and TCP.pull_gb_per_s < RDMA.pull_gb_per_s


def test_a_fleet_at_cpu_speed_gets_the_gpu_answer_of_the_default_profile(tmp_path):
    doc = _doc(tmp_path, {})
    assert doc["timing"]["engines"] == "off" and doc["timing"]["profile"] == "h200-rdma"
    assert "this box's measured pull against h200-rdma's emulated prefill" in doc["recommendation"]


# Issue 28: on a fleet whose L1 could not hold the prefix, calibrate said "the pull did not happen" while the
# servers counted l1_oom fallbacks. What the servers did during a length is its cause.

def test_a_missed_pull_with_l1_oom_fallbacks_names_them_and_the_setting():
    missed = [dict(r, fallbacks_b={"l1_oom": 32.0}) for r in rows({4096: 10.0}, cached=0)]
    proj = calibrate.project(missed, RDMA)
    cause = proj["why"]
    assert "l1_oom=32" in cause and "settings.l1_size_gb" in cause and "did not happen" not in cause
    assert proj["cause"]["id"] == "l1_oom"


def test_a_missed_pull_while_the_holder_evicted_names_the_eviction():
    missed = [dict(r, evictions_a=3.0) for r in rows({4096: 10.0}, cached=0)]
    proj = calibrate.project(missed, RDMA)
    assert "evicted during the measurement" in proj["why"] and "3 eviction pass(es)" in proj["why"]
    assert proj["cause"]["id"] == "evicted"


def test_a_missed_pull_without_evidence_is_not_confirmed():
    proj = calibrate.project(rows({1024: 10.0}, cached=0), RDMA)
    assert "cause not confirmed" in proj["why"] and proj["cause"]["id"] == "no_pull_seen"
    assert not proj["cause"]["confirmed"]


def test_lengths_whose_restore_buffers_cannot_fit_l1_are_named_with_the_setting(tmp_path):
    from p2p_ops.spec.transfer_sizes import l1_shortfall

    path = write_local_fleet(tmp_path / "fleet.yaml", 2, name="cal", engine={"profile": "llama-3-8b"},
                             settings={"l1_size_gb": 1})
    with FleetContext.load(path) as ctx:
        assert l1_shortfall(ctx.fleet, 1024) is None           # 2 x 128 MiB fits 80 % of 1 GiB
        why = l1_shortfall(ctx.fleet, 4096)                    # 2 x 512 MiB does not
        assert why and "settings.l1_size_gb=1" in why and "raise settings.l1_size_gb to at least 1.2" in why


# Issue 30: a figure a recommendation rests on carries its spread; where the repeats' pulls lie on both sides of
# the emulated prefill, the length is inconclusive on this box, and the recommendation says what would decide it.

def _with_runs(pulls_ms: dict[int, list[float]]) -> list[dict]:
    return [{"tokens": n, "ttft_pulled_b_s": sorted(ms)[len(ms) // 2] / 1000, "cached_tokens_b": 256,
             "pulled_runs_s": [m / 1000 for m in ms]} for n, ms in pulls_ms.items()]


def test_a_length_whose_pulls_straddle_the_emulated_prefill_is_inconclusive():
    prefill = RDMA.prefill_ms(4096)
    proj = calibrate.project(_with_runs({2048: [10, 11, 12], 4096: [prefill * 0.5, prefill * 0.9, prefill * 1.5],
                                         8192: [5, 6, 7]}), RDMA)
    assert [t["pays"] for t in proj["rows"]] == ["yes", "inconclusive", "yes"]
    assert proj["inconclusive"] == [4096]
    assert proj["rows"][1]["pull_range_ms"] == pytest.approx([prefill * 0.5, prefill * 1.5])
    md = "\n".join(calibrate.projection_markdown(proj, RDMA.describe()))
    assert f"| 4096 | {prefill * 0.9:.0f} ({prefill * 0.5:.0f}-{prefill * 1.5:.0f}) |" in md
    assert "| inconclusive |" in md


def test_a_tight_spread_decides_and_a_single_run_shows_no_range():
    prefill = RDMA.prefill_ms(4096)
    proj = calibrate.project(_with_runs({4096: [prefill * 1.1, prefill * 1.2, prefill * 1.3]}), RDMA)
    assert proj["rows"][0]["pays"] == "no" and proj["inconclusive"] == []
    one = calibrate.project(rows({4096: 10.0}), RDMA)
    assert one["rows"][0]["pays"] == "yes" and one["rows"][0]["pull_range_ms"] is None


def test_the_recommendation_says_inconclusive_and_what_would_decide_it(tmp_path):
    path = write_local_fleet(tmp_path / "fleet.yaml", 2, name="cal", engine=dict(RDMA.engine_settings()))
    with FleetContext.load(path) as ctx:
        prefill = RDMA.prefill_ms(2048) / 1000
        rs = [CrossoverRow(n, 0.3, 0.01, 0.2, n, pulled_runs_s=[0.005, 0.01, 0.02]) for n in (1024, 4096)]
        rs.insert(1, CrossoverRow(2048, 0.3, prefill * 0.9, 0.2, 2048, pulled_runs_s=[prefill * 0.5, prefill * 0.9,
                                                                                      prefill * 2]))
        doc = calibrate.document(ctx, rs, [], [], calibrate.advice(rs, 4096), 3, None,
                                 calibrate.timing_doc(ctx, None))
    assert "Inconclusive on this box at [2048] tokens" in doc["recommendation"]
    assert "more --repeats, an idle box or longer prefixes" in doc["recommendation"]
    md = calibrate.summary(doc)
    assert "TTFT pulled on B (ms: median (min-max))" in md and "| 1024 | 300 | 10 (5-20) |" in md
