"""The benchmark runner writes well-formed output and keeps finished rows when a later benchmark fails.

Timings are never asserted: benchmarks print, tests only check the shape of what they write.
"""

import csv
import json
from pathlib import Path

from bench.suite import __main__ as runner
from bench.suite.report import Report


def _ok(report):
    t = report.table("demo", "Demo table", ["x", "y"], plot=("x", ["y"], "ms", False))
    report.add_row(t, x=1, y=2.5)
    report.add_row(t, x=2, y=float("nan"))
    report.target("demo target", "<= 3", "2.5", True)


def _boom(report):
    raise RuntimeError("later benchmark failed")


def test_runner_keeps_rows_of_finished_benchmarks(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "BENCHES", {"ok": _ok, "boom": _boom})
    monkeypatch.setattr(runner, "FULL_ONLY", {})
    code = runner.main(["--tiny", "--out", str(tmp_path)])
    assert code == 1  # a failed benchmark is reported, not hidden
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["size"] == "tiny"
    assert data["box"]["nproc"] and data["box"]["loadavg"]
    assert data["tables"]["demo"]["rows"][0] == {"x": 1, "y": 2.5}
    assert "boom" in data["failures"] and "later benchmark failed" in data["failures"]["boom"]
    rows = list(csv.DictReader((tmp_path / "demo.csv").open()))
    assert [r["x"] for r in rows] == ["1", "2"]
    md = (tmp_path / "results.md").read_text()
    assert "| x | y |" in md and "| 1 | 2.50 |" in md and "n/a" in md
    assert "demo target" in md and "reached" in md and "load average" in md
    assert (tmp_path / "demo.png").stat().st_size > 0


def test_rows_are_flushed_as_they_come(tmp_path):
    report = Report(tmp_path, size="tiny", echo=lambda _: None)
    t = report.table("t", "T", ["a"])
    report.add_row(t, a=1)
    # Before finish(): an interrupted run still has its rows on disk.
    assert json.loads((tmp_path / "results.json").read_text())["tables"]["t"]["rows"] == [{"a": 1}]


def test_instant_server_answers_the_harness_client(tmp_path):
    import sys

    from bench.suite.procs import process
    from p2p_ops.harness.openai_client import complete
    from p2p_ops.lifecycle.free_ports import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with process([sys.executable, "-m", "bench.suite.instant_server", str(port)], url + "/v1/models",
                 tmp_path / "s.log", timeout_s=30):
        c = complete(url, "tiny-llm", "hi", max_tokens=1)
    assert c.ok and c.text == "a" and c.completion_tokens == 1


def test_readme_targets_block_is_replaced_and_the_rest_kept(tmp_path):
    import pytest

    from bench.suite.report import README_BEGIN, README_END, replace_readme_targets

    report = Report(tmp_path, size="quick", echo=lambda _: None)
    report.target("P2P lookup", "<= 10 ms", "6.7 ms", True, "a miss")
    readme = f"intro\n{README_BEGIN}\nold table\n{README_END}\n## Layout\n"
    out = replace_readme_targets(readme, report)
    assert out.startswith("intro\n") and out.endswith(f"{README_END}\n## Layout\n")
    assert "old table" not in out and "| P2P lookup | <= 10 ms | 6.7 ms | reached | a miss |" in out
    assert "make bench-quick" in out and "load average" in out
    assert replace_readme_targets(out, report) == out  # idempotent
    with pytest.raises(ValueError, match="markers"):
        replace_readme_targets("no block here", report)


def test_fleet_scale_splits_a_step_at_its_progress_lines():
    from bench.suite.fleet_scale import _Clock

    c = _Clock()
    for line in ("rendered env.sh", "started a", "a is up", "started b"):
        c(line)
    assert c.first("rendered") <= c.first("started") <= c.last("started")
    assert c.last("started") >= c.first("a is up")
    assert c.first("never") != c.first("never")  # nan: a missing line reads as "not measured"


def test_real_size_pull_target_is_judged_against_lmcaches_channel_at_the_largest_prefix(tmp_path):
    from bench.suite import kv_real

    report = Report(tmp_path, size="tiny", echo=lambda _: None)
    report.facts["real_pull"] = [{"profile": "llama-3-8b", "tokens": 1024, "MiB": 128, "mbps": 100, "channel": 1000},
                                 {"profile": "llama-3-8b", "tokens": 4096, "MiB": 512, "mbps": 600, "channel": 1000}]
    kv_real._target(report)
    (t,) = report.targets
    assert t.reached and "600 MB/s vs channel 1000 MB/s (60%) at 512 MiB" in t.measured
    report.targets.clear()
    report.facts["real_pull"][1]["channel"] = None
    kv_real._target(report)
    assert report.targets[0].reached is None and "gave no figure" in report.targets[0].reason


def test_eviction_working_set_is_twice_the_fleet_l1_and_hit_ratio_counts_only_served_requests():
    from bench.suite import eviction
    from p2p_ops.harness.openai_client import Completion

    # 2 GiB of fleet L1 at 128 KiB per token: 16k tokens; twice that in 1k-token documents is 32 documents.
    assert eviction.documents_for(2 * 2**30, 128 * 1024, 1024) == 32
    assert eviction.documents_for(2 * 2**30, 128 * 1024, 1000) == 33
    p = eviction.Pass(2)
    p.add("A", Completion("a", True, prompt_tokens=1000, cached_tokens=768))
    p.add("A", Completion("a", False, error="ConnectionError: refused"))
    assert (p.sent, p.failed, p.first_error) == (2, 1, "ConnectionError: refused")
    assert p.hit_ratio("A") == 0.768 and p.hit_ratio("B") is None


def test_peer_load_generators_rows_come_from_their_own_captured_json():
    from bench.suite import loadgen_peers as lp

    fx = Path(__file__).parent.parent / "fixtures" / "bench" / "loadgen_peers"
    lm = lp.row_from_lmcache(json.loads((fx / "lmcache_bench_summary.json").read_text()), 200)
    assert (lm["requests"], lm["failed"], lm["concurrency"]) == (200, 0, 200)
    assert round(lm["req/s"], 1) == 37.1 and round(lm["latency p99 ms"]) == 3905
    vb = lp.row_from_vllm(json.loads((fx / "vllm_bench_serve.json").read_text()))
    assert (vb["requests"], vb["failed"], vb["concurrency"]) == (300, 0, 16)
    assert round(vb["req/s"]) == 927 and round(vb["latency p50 ms"], 1) == 11.1
