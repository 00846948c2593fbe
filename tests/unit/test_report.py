"""The report from raw evidence: checks, tables, plots; failures are counted and shown, never hidden."""

from __future__ import annotations

import json

import matplotlib.image as mpimg
import pytest

from p2p_ops.observe.records import RequestRecord, read_csv, write_csv
from p2p_ops.observe.report import build_report, stage_checks
from p2p_ops.observe.stats import percentile


def rec(stage, level, inst, warmer, t, cached=512, ok=True, ttft=0.1):
    return RequestRecord(stage=stage, level=level, instance=inst, node=inst[:-2], warmer=warmer, prefix_id="p",
                         t_start_s=t, prompt_tokens=1024, cached_tokens=cached if ok else 0, output_tokens=8,
                         ttft_s=ttft if ok else None, e2e_s=0.2, ok=ok, error="" if ok else "ConnectionError")


def make_run(tmp_path, kill_b=False):
    records = []
    t = 0.0
    for level in (1, 2, 4):
        records.append(rec("ladder-warm", level, "a-0", "", t, cached=0))
        for k in range(4):
            t += 0.3
            target = "b-0" if k % 2 == 0 else "a-0"
            warmer = "a-0" if target == "b-0" else "b-0"
            failed = kill_b and target == "b-0" and level == 4
            records.append(rec("ladder", level, target, warmer, t, ok=not failed, ttft=0.05 * level))
    write_csv(tmp_path / "requests.csv", records)
    (tmp_path / "stages.json").write_text(json.dumps({"stages": [
        {"name": "ladder", "level": c, "wall_s": 1.2, "requests": 4} for c in (1, 2, 4)]}))
    snap = {"a-0": {"engine_metrics": {"p2p_engine_lmcache_loaded_bytes_total": 0.0},
                    "server_metrics": {'lmcache_mp_l2_load_completed_requests_total{"l2_name": "p2p"}': 0.0}},
            "b-0": {"engine_metrics": {"p2p_engine_lmcache_loaded_bytes_total": 0.0},
                    "server_metrics": {'lmcache_mp_l2_load_completed_requests_total{"l2_name": "p2p"}': 0.0}}}
    after = json.loads(json.dumps(snap))
    after["b-0"]["engine_metrics"]["p2p_engine_lmcache_loaded_bytes_total"] = 3 * 2**20
    after["b-0"]["server_metrics"]['lmcache_mp_l2_load_completed_requests_total{"l2_name": "p2p"}'] = 6.0
    (tmp_path / "status_before.json").write_text(json.dumps(snap))
    (tmp_path / "status_after.json").write_text(json.dumps(after))
    return records


def test_percentile_interpolates_linearly_between_the_nearest_ranks_as_numpy_and_vllm_bench_do():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    # The samples: nearest rank said 100, `lat[int(0.99 * (n - 1))]` said 18.
    assert percentile([*range(10, 19), 100], 99) == pytest.approx(92.62)
    assert percentile([3.0, None, 1.0], 50) == 2.0
    assert percentile([5], 99) == 5
    assert percentile([], 50) is None


def test_csv_roundtrip(tmp_path):
    records = make_run(tmp_path)
    assert read_csv(tmp_path / "requests.csv") == records


def test_healthy_run_passes_with_tables_and_plots(tmp_path):
    make_run(tmp_path)
    report = build_report(tmp_path)
    text = report.summary.read_text()
    assert report.passed
    assert "| ladder c=4 | 4 | 0 |" in text
    assert "| b-0 | 3.00 | - | 6 |" in text  # MiB loaded, tokens via the connector (vLLM only), P2P loads
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["hit_ratio_over_time.png", "pulled_per_node.png", "throughput_vs_concurrency.png",
                    "ttft_vs_concurrency.png"]
    for p in pngs:
        img = mpimg.imread(tmp_path / p)
        assert img.shape[0] > 200 and img.shape[1] > 300
        assert img.std() > 0.01  # not a blank canvas
        assert f"![{p}]({p})" in text


def test_failures_on_one_node_fail_the_stage_and_name_it(tmp_path):
    make_run(tmp_path, kill_b=True)
    report = build_report(tmp_path)
    text = report.summary.read_text()
    assert not report.passed
    assert "| ladder: no failed requests | **FAIL** | 2 of 15 failed (b-0: 2) |" in text
    assert "| ladder c=4 | 4 | 2 |" in text


def test_cross_node_without_hits_fails():
    records = [rec("ladder", 1, "b-0", "a-0", 0.0, cached=0), rec("ladder", 1, "a-0", "b-0", 0.1, cached=0)]
    checks = {c.name: c for c in stage_checks(records)}
    assert not checks["ladder: P2P hits on the node that did not warm the prefix"].ok
