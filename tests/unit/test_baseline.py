"""`p2pctl baseline save|list` and `p2pctl compare` over small run folders written here: an unchanged rerun is
not flagged, a slowed one is (exit 1), and what cannot be compared is one line naming it (exit 2)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from p2p_ops.errors import BadInput
from p2p_ops.facts.python_env import python_env_fact
from p2p_ops.facts.ucx_info import UCX_INFO_VERSION
from p2p_ops.lifecycle.preflight.probe import node_python
from p2p_ops.observe import baseline as bl
from p2p_ops.observe.records import RequestRecord, write_csv
from tests.support.fake_connector import cli_through, fact

VERSIONS = json.dumps({"python": "3.12.3", "executable": "x", "mooncake": None,
                       "packages": {"lmcache": "0.5.6", "nixl": None, "nixl-cu12": "0.7.1", "vllm": None}})
SETTINGS = {"P2P_FLEET_NAME": "fake", "P2P_ENGINE_PROFILE": "tiny", "LMCACHE_CHUNK_SIZE": "256",
            "P2P_RUN_DIR": "/somewhere/else"}


def _versions(ctx, node):
    if node.name != ctx.fleet.nodes[0].name:
        return []
    return [fact(python_env_fact(node_python(node)), VERSIONS, repeat=True),
            fact(UCX_INFO_VERSION, "# Library version: 1.18.0\n", repeat=True)]


@pytest.fixture
def fleet(fakes, monkeypatch):
    made = fakes.fleet(2, _versions)
    cli_through(monkeypatch, made)
    return made


def write_env(run: Path, **changes: str) -> None:
    (run / "env").mkdir(parents=True)
    lines = [f"export {k}={v}" for k, v in {**SETTINGS, **changes}.items()]
    (run / "env" / "node-a-0.env.sh").write_text("\n".join(lines) + "\n")


def matrix_run(tests: Path, name: str, pulls: tuple, chunks: int = 4, **env: str) -> Path:
    """Pull times of a->b and b->a; None: that pair failed (nothing pulled, as when a pull outlives the engine's
    LMCache timeout and the target recomputes)."""
    run = tests / f"{name}-matrix"
    write_env(run, **env)
    pairs = [{"source": s, "target": t, "ok": ms is not None, "pull_ms": ms, "pull_measure": "engine lookup + retrieve",
              "cause": "" if ms else "no cause confirmed"}
             for (s, t), ms in zip((("node-a-0", "node-b-0"), ("node-b-0", "node-a-0")), pulls)]
    (run / "result.json").write_text(json.dumps({"pairs": pairs, "chunks": chunks, "chunk_size": 256}))
    return run


def stress_run(tests: Path, name: str, ttfts: list[float], state: str = "complete", **meta) -> Path:
    run = tests / f"{name}-stress"
    write_env(run)
    (run / "run.json").write_text(json.dumps({"kind": "stress", "state": state}))
    (run / "stages.json").write_text(json.dumps({"options": {"ladder": [2], "doc_tokens": 768, "seed": 1}, **meta}))
    recs = [RequestRecord("ladder", 2, "node-b-0", "node-b", "node-a-0", f"p{i}", i, 900, 768, 8, t, t + 0.1, True)
            for i, t in enumerate(ttfts)]
    write_csv(run / "requests.csv", recs)
    return run


def _cli(p2pctl, fleet, *argv):
    return p2pctl(*argv, "-f", str(fleet.ctx.fleet_file))


def test_an_unchanged_rerun_is_not_flagged_and_a_slowed_pull_is(fleet, p2pctl):
    tests = fleet.ctx.layout.tests
    for i, pulls in enumerate([(40, 160), (46, 150), (43, 171)]):
        matrix_run(tests, f"20261202T08000{i}Z", pulls)
    code, out, err = _cli(p2pctl, fleet, "baseline", "save", "before", "--run", "20261202T080000Z-matrix",
                          "--run", "20261202T080001Z-matrix", "--run", "20261202T080002Z-matrix")
    assert code == 0, err
    assert "3 figures" not in out and "2 figures" in out and "lmcache 0.5.6" in out and "ucx 1.18.0" in out
    saved = json.loads((fleet.ctx.layout.root / "baselines" / "before.json").read_text())
    assert saved["settings"]["node-a-0:P2P_ENGINE_PROFILE"] == "tiny"
    assert "node-a-0:P2P_RUN_DIR" not in saved["settings"]   # a path: a moved checkout measures the same

    # a rerun whose figures move a little (inside the spread, or beyond it by less than the tolerance)
    matrix_run(tests, "20261202T081000Z", (49, 175))
    code, out, err = _cli(p2pctl, fleet, "compare")
    assert code == 0, out + err
    assert "REGRESSED" not in out and "OK: no figure regressed" in out
    assert "versions since the baseline: unchanged" in out

    # the pull from node-a-0 made three times slower (as a rate limit on its link does)
    matrix_run(tests, "20261202T082000Z", (130, 160))
    code, out, err = _cli(p2pctl, fleet, "compare", "before", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["regressed"] == ["matrix pull node-a-0 -> node-b-0"], doc
    row = doc["figures"][0]
    assert row["samples"] == 1
    assert row["baseline"] == 43 and row["spread"] == [40, 46] and row["now"] == 130 and row["verdict"] == "REGRESSED"
    assert doc["figures"][1]["verdict"] == "within"
    code, out, _ = _cli(p2pctl, fleet, "compare", "before", "20261202T082000Z-matrix")
    assert code == 1 and "note: matrix pull node-a-0 -> node-b-0: fewer than 4 samples" in out

    # two reruns given together: judged on their median (here one slow, one not: within)
    matrix_run(tests, "20261202T083000Z", (44, 160))
    code, out, _ = _cli(p2pctl, fleet, "compare", "before", "20261202T082000Z-matrix", "20261202T083000Z-matrix",
                        "20261202T081000Z-matrix")
    assert code == 0 and "REGRESSED" not in out


def test_an_improvement_is_shown_never_a_failure(fleet, p2pctl):
    tests = fleet.ctx.layout.tests
    matrix_run(tests, "20261202T080000Z", (100, 100))
    assert _cli(p2pctl, fleet, "baseline", "save", "b")[0] == 0
    matrix_run(tests, "20261202T080100Z", (40, 100))
    code, out, _ = _cli(p2pctl, fleet, "compare", "b")
    assert code == 0 and "improved" in out and "-60%" in out


@pytest.mark.parametrize("make, expect", [
    (lambda tests: matrix_run(tests, "20261202T090000Z", (40, 160), P2P_FLEET_NAME="other"),
     "is of fleet 'other', baseline 'before' of 'fake'; compare runs of the same fleet"),
    (lambda tests: matrix_run(tests, "20261202T090000Z", (40, 160), chunks=8),
     "no figure of baseline 'before' was measured the same way there (matrix pull node-a-0 -> node-b-0: chunks is "
     "4 there, 8 here"),
    (lambda tests: stress_run(tests, "20261202T090000Z", [0.1] * 4),
     "none of baseline 'before''s figures measured there"),
])
def test_what_cannot_be_compared_is_one_line_naming_it(fleet, p2pctl, make, expect):
    tests = fleet.ctx.layout.tests
    matrix_run(tests, "20261202T080000Z", (40, 160))
    assert _cli(p2pctl, fleet, "baseline", "save", "before")[0] == 0
    run = make(tests)
    code, out, err = _cli(p2pctl, fleet, "compare", "before", run.name)
    assert code == 2 and expect in err and len(err.strip().splitlines()) == 1, err


def test_an_unknown_baseline_or_no_newer_run_is_named(fleet, p2pctl):
    tests = fleet.ctx.layout.tests
    code, _, err = _cli(p2pctl, fleet, "compare")
    assert code == 2 and "no baseline saved for this fleet" in err
    matrix_run(tests, "20261202T080000Z", (40, 160))
    assert _cli(p2pctl, fleet, "baseline", "save", "before")[0] == 0
    code, _, err = _cli(p2pctl, fleet, "compare", "after")
    assert code == 2 and "no baseline 'after' for this fleet (saved: before)" in err
    code, _, err = _cli(p2pctl, fleet, "compare")
    assert code == 2 and "no matrix run finished after baseline 'before'" in err
    code, _, err = _cli(p2pctl, fleet, "baseline", "save", "../x")
    assert code == 2 and "baseline name '../x'" in err


def test_save_takes_the_newest_finished_run_of_each_kind(fleet, p2pctl):
    tests = fleet.ctx.layout.tests
    matrix_run(tests, "20261202T080000Z", (40, 160))
    matrix_run(tests, "20261202T080500Z", (41, 161))
    stress_run(tests, "20261202T080600Z", [0.1, 0.12, 0.11, 0.13])
    stress_run(tests, "20261202T080700Z", [9.0] * 4, state="interrupted")
    code, out, _ = _cli(p2pctl, fleet, "baseline", "save", "both", "--json")
    assert code == 0
    assert [Path(r).name for r in json.loads(out)["runs"]] == ["20261202T080500Z-matrix", "20261202T080600Z-stress"]
    code, out, _ = _cli(p2pctl, fleet, "baseline", "list")
    assert code == 0 and "both" in out and "20261202T080600Z-stress" in out


def test_stress_figures_are_the_stage_percentiles_with_their_spread(tmp_path):
    run = stress_run(tmp_path, "20261202T080000Z", [0.1, 0.2, 0.3, 0.4, 0.5])
    p50, p99 = bl.figures_of(run)
    assert (p50.name, p50.value, p50.spread) == ("stress ladder@2 TTFT p50", 300, (200, 400))
    assert p99.name == "stress ladder@2 TTFT p99" and p99.spread == (460, 500)
    # the seed is no way of measuring; a run without a generator is our own runner's
    assert p50.how == {"test": "stress", "generator": "ours", "ladder": [2], "doc_tokens": 768}


def test_a_stress_figure_sent_by_another_generator_is_not_compared(fleet, p2pctl):
    tests = fleet.ctx.layout.tests
    stress_run(tests, "20261202T080000Z", [0.1, 0.11, 0.12, 0.1])
    assert _cli(p2pctl, fleet, "baseline", "save", "ours")[0] == 0
    run = stress_run(tests, "20261202T090000Z", [0.1] * 4, generator="inference-perf")
    code, _, err = _cli(p2pctl, fleet, "compare", "ours", run.name)
    assert code == 2 and "generator is 'ours' there, 'inference-perf' here" in err, err


def test_an_l1_lowered_by_hand_is_the_first_finding_and_its_regressed_figures_fail_the_compare(fleet, p2pctl):
    """Issue 42: after node-b's L1 was lowered by hand, compare refused ("save a baseline for these settings"),
    while the runs after the change were the regression the operator asked about."""
    tests = fleet.ctx.layout.tests
    for i, pulls in enumerate([(40, 160), (46, 150), (43, 171)]):
        matrix_run(tests, f"20261202T08000{i}Z", pulls)
    assert _cli(p2pctl, fleet, "baseline", "save", "before")[0] == 0
    matrix_run(tests, "20261202T090000Z", (400, 1500), LMCACHE_L1_SIZE_GB="0.25")
    code, out, err = _cli(p2pctl, fleet, "compare", "before", "--json")
    doc = json.loads(out)
    assert code == 1, err
    assert doc["settings_changed"] == ["node-a-0:LMCACHE_L1_SIZE_GB: (unset) -> 0.25 (run 20261202T090000Z-matrix)"]
    assert doc["regressed"] == ["matrix pull node-a-0 -> node-b-0", "matrix pull node-b-0 -> node-a-0"]
    code, out, _ = _cli(p2pctl, fleet, "compare", "before")
    assert code == 1 and out.index("settings changed since baseline before") < out.index("REGRESSED")
    assert "(settings differ)" in out and "baseline save" not in out   # never: enshrine the change as the baseline


def test_a_newer_run_that_did_not_finish_is_the_verdict_never_ok(fleet, p2pctl):
    """Issue 42: compare said "OK: no figure regressed" beside a run after the change that never finished; it had
    compared the baseline with the last run that finished before the change."""
    tests = fleet.ctx.layout.tests
    matrix_run(tests, "20261202T080000Z", (40, 160))
    assert _cli(p2pctl, fleet, "baseline", "save", "before")[0] == 0
    matrix_run(tests, "20261202T080100Z", (41, 158))
    stress_run(tests, "20261202T080200Z", [0.1] * 4, state="interrupted")
    code, out, _ = _cli(p2pctl, fleet, "compare")
    assert code == 1 and "NOT OK: a newer run did not finish: 20261202T080200Z-stress: interrupted" in out, out
    assert "OK: no figure regressed" not in out


@pytest.mark.parametrize("now, verdict", [
    (120, "within"),        # beyond the spread (p25..p75 = 95..105) but within the 25 % tolerance
    (130, "REGRESSED"),
    (104, "within"),
    (70, "improved"),
])
def test_a_figure_regresses_beyond_its_spread_and_the_tolerance(now, verdict):
    old = bl.Figure("x", "ms", "lower", [90, 95, 100, 105, 110])
    assert bl.movement(old, now) == verdict


@pytest.mark.parametrize("now, verdict", [
    (505, "REGRESSED"),     # an 8x slower pull, though one of the three repeats was slower still
    (90, "within"),         # +43 %: single pulls vary that much between unchanged runs
    (20, "improved"),
])
def test_a_figure_of_few_samples_moves_on_its_median_beyond_the_thin_tolerance(now, verdict):
    assert bl.movement(bl.Figure("pull", "ms", "lower", [63.2, 62.8, 732]), now) == verdict


def test_floors_keep_small_absolute_moves_quiet_and_higher_is_better_for_bandwidth():
    assert bl.movement(bl.Figure("soak slope", "/h", "lower", [0.1], floor=30), 20) == "within"
    assert bl.movement(bl.Figure("soak slope", "/h", "lower", [0.1], floor=30), 45) == "REGRESSED"
    gbps = bl.Figure("transfer", "GB/s", "higher", [9.0, 10.0, 11.0])
    assert bl.movement(gbps, 4.0) == "REGRESSED" and bl.movement(gbps, 16.0) == "improved"
    assert bl.movement(gbps, 6.0) == "within"


@pytest.mark.parametrize("name, value", [("DB_PASSWD", "hunter2"), ("MY_PASSPHRASE", "Zq8correct-horse"),
                                         ("P2P_API_KEY", "sk-first-one"), ("OTEL_EXPORTER_OTLP_HEADERS", "x-team=Zq8")])
def test_a_baseline_keeps_no_trace_of_a_secret_setting(fleet, p2pctl, name, value):
    tests = fleet.ctx.layout.tests
    matrix_run(tests, "20261202T080000Z", (40, 160), **{name: value})
    assert _cli(p2pctl, fleet, "baseline", "save", "before")[0] == 0
    path = fleet.ctx.layout.root / "baselines" / "before.json"
    text = path.read_text()
    assert value not in text and hashlib.sha256(value.encode()).hexdigest()[:16] not in text
    assert json.loads(text)["settings"][f"node-a-0:{name}"] == bl.SECRET_SET
    # another value measures the same, also against a baseline an older p2pctl saved with a digest
    path.write_text(text.replace(json.dumps(bl.SECRET_SET), '"sha256:0123456789abcdef"'))
    run = matrix_run(tests, "20261202T090000Z", (40, 160), **{name: value + "2"})
    assert _cli(p2pctl, fleet, "compare", "before", run.name)[0] == 0
    run = matrix_run(tests, "20261202T091000Z", (40, 160))
    code, out, err = _cli(p2pctl, fleet, "compare", "before", run.name, "--json")
    assert code == 0 and json.loads(out)["settings_changed"] == [
        f"node-a-0:{name}: set (not kept) -> (unset) (run {run.name})"], err


@pytest.mark.parametrize("field,value", [
    ("samples", []), ("samples", [float("nan")]), ("samples", [float("inf")]), ("samples", ["40"]),
    ("samples", [True]), ("better", "sideways"), ("q", float("nan")), ("floor", -1)])
def test_a_baseline_file_not_written_by_p2pctl_is_refused_in_one_line(fleet, p2pctl, field, value):
    """Issue 44 item 5: NaN, Infinity or `better: sideways` made a 40 -> 130 ms regression "within", exit 0."""
    matrix_run(fleet.ctx.layout.tests, "20261202T080000Z", (40, 160))
    assert _cli(p2pctl, fleet, "baseline", "save", "before")[0] == 0
    path = fleet.ctx.layout.root / "baselines" / "before.json"
    doc = json.loads(path.read_text())
    doc["figures"][0][field] = value
    path.write_text(json.dumps(doc))
    code, _, err = _cli(p2pctl, fleet, "compare", "before")
    assert code == 2 and "before.json: not a baseline p2pctl wrote" in err and len(err.strip().splitlines()) == 1


def test_a_pair_that_no_longer_pulls_is_flagged_failed_and_a_failing_run_is_no_baseline(fleet, p2pctl):
    tests = fleet.ctx.layout.tests
    matrix_run(tests, "20261202T080000Z", (40, 160))
    assert _cli(p2pctl, fleet, "baseline", "save", "before")[0] == 0
    matrix_run(tests, "20261202T080100Z", (None, 150))
    code, out, _ = _cli(p2pctl, fleet, "compare")
    assert code == 1 and "FAILED" in out and "REGRESSED: 1 of 2 figures regressed or failed" in out
    assert "matrix pull node-a-0 -> node-b-0: the pair failed: no cause confirmed" in out
    code, _, err = _cli(p2pctl, fleet, "baseline", "save", "after")
    assert code == 2 and "matrix pull node-a-0 -> node-b-0: the pair failed" in err and "--run" in err


def test_transfer_figures_are_gbps_per_size_from_each_timed_read(tmp_path):
    row = {"ok": True, "engine": "nixl", "object_size": 1 << 20, "payload_bytes": 8 << 20,
           "times_ms": [4.0, 8.0, 5.0, 2.0, 3.0]}
    (tmp_path / "transfer.json").write_text(json.dumps({"pattern": "pairwise", "source": "a", "reader": "b",
                                                        "rows": [row, {**row, "ok": False}]}))
    f, failed = bl.figures_of(tmp_path)
    assert failed.failed == "the size failed: no timed read"
    assert f.name == "transfer nixl 8 MiB" and f.better == "higher" and f.unit == "GB/s"
    gbps = lambda ms: (8 << 20) / (ms / 1000) / 1e9   # noqa: E731
    assert f.value == pytest.approx(gbps(4)) and f.spread == pytest.approx((gbps(5), gbps(3)))


def test_soak_figures_are_the_committed_soaks_slopes_with_its_leak_threshold_as_floor():
    figures = {f.name: f for f in bl.figures_of(Path(__file__).parents[2] / "bench/results/soak-2026-12-01-a")}
    leak = figures["soak node-a-0/server anon_mib slope"]
    assert leak.value == 456.3 and leak.floor == 30 and leak.how["duration_s"] == 1920
    assert figures["soak node-a-0/server fds slope"].floor == 30


def test_a_run_that_did_not_finish_is_refused_by_name(fakes, monkeypatch, p2pctl):
    fleet = fakes.fleet(2)   # refused before any node is asked for its versions
    cli_through(monkeypatch, fleet)
    run = stress_run(fleet.ctx.layout.tests, "20261202T080000Z", [0.1] * 4, state="interrupted")
    code, _, err = _cli(p2pctl, fleet, "baseline", "save", "b", "--run", run.name)
    assert code == 2 and "run '20261202T080000Z-stress' did not finish (interrupted" in err


def test_a_result_file_not_written_by_p2pctl_is_one_line_naming_the_run(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps({"pairs": [{"target": "b"}]}))
    with pytest.raises(BadInput, match="its files are not what p2pctl writes .KeyError: 'source'"):
        bl.figures_of(tmp_path)


def test_a_version_change_is_shown_never_refused(fakes, monkeypatch, p2pctl):
    def upgraded(ctx, node):
        if node.name != ctx.fleet.nodes[0].name:
            return []
        py, ucx = python_env_fact(node_python(node)), "# Library version: 1.18.0\n"
        return [fact(py, VERSIONS), fact(UCX_INFO_VERSION, ucx),                       # at save
                fact(py, VERSIONS.replace("0.5.6", "0.5.7")), fact(UCX_INFO_VERSION, ucx)]   # at compare

    fleet = fakes.fleet(2, upgraded)
    cli_through(monkeypatch, fleet)
    matrix_run(fleet.ctx.layout.tests, "20261202T080000Z", (40, 160))
    assert _cli(p2pctl, fleet, "baseline", "save", "before")[0] == 0
    matrix_run(fleet.ctx.layout.tests, "20261202T080100Z", (41, 158))
    code, out, _ = _cli(p2pctl, fleet, "compare")
    assert code == 0 and "versions since the baseline: lmcache 0.5.6 -> 0.5.7" in out


def test_a_baseline_that_is_a_link_is_not_followed(fleet, p2pctl, tmp_path):
    matrix_run(fleet.ctx.layout.tests, "20261202T080000Z", (40, 160))
    assert _cli(p2pctl, fleet, "baseline", "save", "before")[0] == 0
    path = fleet.ctx.layout.root / "baselines" / "before.json"
    real = tmp_path / "elsewhere.json"
    path.replace(real)
    path.symlink_to(real)
    code, _, err = _cli(p2pctl, fleet, "compare", "before")
    assert code == 2 and "before.json" in err and "link" in err and len(err.strip().splitlines()) == 1, err


def test_links_in_baselines_and_tests_are_passed_over(fleet, p2pctl, tmp_path):
    """Issue 44 item 5: a dangling link in baselines/ ended `baseline list` in a traceback, and a link in tests/ to
    a run folder elsewhere was taken as this fleet's newest run."""
    tests = fleet.ctx.layout.tests
    matrix_run(tests, "20261202T080000Z", (40, 160))
    elsewhere = matrix_run(tmp_path / "other", "20261202T090000Z", (41, 161))
    (tests / "20261202T090000Z-matrix").symlink_to(elsewhere)
    code, out, err = _cli(p2pctl, fleet, "baseline", "save", "mine", "--json")
    assert code == 0 and [Path(r).name for r in json.loads(out)["runs"]] == ["20261202T080000Z-matrix"], err
    (fleet.ctx.layout.root / "baselines" / "gone.json").symlink_to(tmp_path / "nowhere.json")
    code, out, err = _cli(p2pctl, fleet, "baseline", "list")
    assert code == 0 and "mine" in out and "gone" not in out and "Traceback" not in err, err
