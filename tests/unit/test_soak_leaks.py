"""The soak's leak rule tells a sustained rise from warm-up, and its load and options say what they do."""

from __future__ import annotations

from statistics import median

import pytest

from p2p_ops.errors import BadInput
from p2p_ops.harness.soak.load import MIX, MixedLoad
from p2p_ops.harness.soak.options import LeakRule, SoakOptions, parse_duration
from p2p_ops.harness.soak.sampler import Row
from p2p_ops.harness.soak.leaks import cpu_percent, per_minute, slope_per_hour, trend, trends, windows
from p2p_ops.observe.records import RequestRecord

RULE = LeakRule(min_per_hour=30.0, min_growth=16.0)


def series(f, minutes: int = 30, every_s: float = 10.0):
    return [(t, f(t)) for t in (i * every_s for i in range(int(minutes * 60 / every_s)))]


def test_a_steady_rise_is_a_leak_with_its_slope():
    pts = series(lambda t: 400 + t / 3600 * 120)  # +120 MiB/hour, for 30 minutes
    tr = trend("node-a-0/server", "anon_mib", pts, RULE)
    assert tr.leak and abs(tr.slope_per_h - 120) < 1 and "rose at the floor through all three windows" in tr.why


def test_warm_up_that_levels_off_is_no_leak_even_with_a_positive_fit():
    # +60 MiB in the first 8 minutes (a pool filling), then flat: the fit over the whole is still positive
    pts = series(lambda t: 400 + min(t, 480) / 8)
    tr = trend("node-a-0/server", "anon_mib", pts, RULE)
    assert tr.slope_per_h > 30 and not tr.leak
    assert tr.windows[1] == tr.windows[2]


def test_noise_and_small_growth_are_no_leak():
    noisy = series(lambda t: 400 + (7 if int(t / 10) % 2 else -7))
    assert not trend("u", "anon_mib", noisy, RULE).leak
    small = series(lambda t: 400 + t / 1800 * 10)  # steady but only +10 MiB in all: below min_growth
    assert not trend("u", "anon_mib", small, RULE).leak


def test_stale_work_is_judged_by_its_floor():
    # Lookups come and go under load (peaks of 6), but the floor climbs by one every 5 minutes: a leak.
    pts = series(lambda t: int(t // 300) + (6 if int(t / 10) % 3 == 0 else 0))
    assert trend("all servers", "stale_p2p", pts, LeakRule(10.0, 2.0)).leak
    busy = series(lambda t: 6 if int(t / 10) % 3 == 0 else 0)
    assert not trend("all servers", "stale_p2p", busy, LeakRule(10.0, 2.0)).leak


def test_too_few_samples_give_no_slope_and_no_verdict():
    assert slope_per_hour([(0, 1), (10, 2)]) is None
    assert not trend("u", "fds", [(0, 1.0), (10, 100.0)], RULE).leak


def _rows(unit: str, role: str, f) -> list[Row]:
    return [Row(t, unit, role, 42, "running", rss_mib=v + 500, anon_mib=v, fds=50, threads=40, cpu_s=t * 0.3,
                lookup_jobs=0, read_locks=0) for t, v in series(f, 20)]


def test_trends_leave_warm_up_out_and_cover_every_process():
    opts = SoakOptions(duration_s=1200, warmup_s=300)
    rows = _rows("node-a-0/server", "server", lambda t: 300 + (t if t < 300 else 300)) + \
        _rows("node-a-0/engine", "engine", lambda t: 200 + t / 10)
    ts = {(t.unit, t.metric): t for t in trends(rows, opts)}
    assert not ts[("node-a-0/server", "anon_mib")].leak  # all its growth was in the warm-up
    assert ts[("node-a-0/engine", "anon_mib")].leak      # +360 MiB/hour throughout
    assert ts[("node-a-0/server", "anon_mib")].start == 600
    assert not ts[("all servers", "stale_p2p")].leak
    assert cpu_percent(rows, "node-a-0/server", 300) == pytest.approx(30.0)


def test_per_minute_leaves_warm_up_requests_out():
    def req(t, kind, ok, ttft, prompt, cached, error=""):
        return RequestRecord(kind, 1, "", "", "", "", t, prompt, cached, 1, ttft, 0.5, ok, error, url="u")

    reqs = [req(5, "warm", True, 1.0, 100, 0), req(10, "doc", True, 0.1, 100, 80),
            req(70, "fresh", False, None, 0, 0, "boom"), req(75, "doc", True, 0.3, 100, 50)]
    m = per_minute(reqs)
    assert [(x.minute, x.requests, x.failed) for x in m] == [(0, 1, 0), (1, 2, 1)]
    assert m[0].cached_share == 0.8 and m[1].ttft_p50_s == 0.3


def test_the_mix_sends_shared_documents_to_other_engines_and_moves_sessions():
    load = MixedLoad(["http://a", "http://b", "http://c"], "m", SoakOptions(docs=2, sessions=2), 0.0)
    jobs = [load.job(k) for k in range(len(MIX) * 3)]
    kinds = [k for k, _, _ in jobs]
    assert kinds.count("doc") == 24 and kinds.count("session") == 21 and kinds.count("fresh") == 15
    assert {u for k, u, _ in jobs if k == "doc"} == {"http://b", "http://c"}  # never the engine that warmed them
    session_urls = {u for k, u, _ in jobs if k == "session"}
    assert len(session_urls) >= 2  # sessions move between engines (their prefix is pulled over P2P)
    fresh = [p for k, _, p in jobs if k == "fresh"]
    assert len(set(fresh)) == len(fresh)


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("30m", 1800), ("1h", 3600), ("1h30m", 5400)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "m", "1h 30m", "-5m"])
def test_bad_durations_name_the_flag(text):
    with pytest.raises(BadInput, match="--duration"):
        parse_duration(text)


def test_options_refuse_a_warm_up_that_leaves_no_slope():
    with pytest.raises(BadInput, match="--warmup"):
        SoakOptions(duration_s=600, warmup_s=500).validate()
    SoakOptions.quick().validate()


def test_a_rise_that_slows_to_a_crawl_is_warm_up():
    """Seen on a 90 s soak: +35 MiB in the first third after warm-up, +1 MiB in the last: settling, no leak."""
    pts = [(t, 1337 + 35 * min(t, 30) / 30 + t / 90) for t in range(0, 90, 4)]
    tr = trend("node-a-0/server", "anon_mib", pts, RULE)
    assert tr.windows[0] < tr.windows[1] < tr.windows[2] and not tr.leak


def test_peaks_that_ratchet_up_over_a_flat_floor_are_no_leak():
    """An engine's memory under varying prompts: 365 MiB at rest between requests, ever higher peaks."""
    pts = [(t, 365 + (t / 3 if i % 4 else 0)) for i, t in enumerate(range(0, 180, 5))]
    assert not trend("node-b-0/engine", "anon_mib", pts, RULE).leak
    medians = windows(pts, median)
    assert medians[0] < medians[1] < medians[2]  # what a rule on medians would call a rise


def test_a_rise_over_a_few_minutes_is_reported_but_not_judged():
    pts = series(lambda t: 400 + t / 3600 * 600, minutes=4)  # +40 MiB in 4 minutes, steadily
    tr = trend("node-c-0/engine", "anon_mib", pts, RULE)
    assert not tr.leak and tr.too_short and "a leak needs 600 s to tell" in tr.why
