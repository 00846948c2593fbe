"""`p2pctl test matrix`'s pure parts: the N x N table and heatmap from a result document, the cause of a failing
pair from gathered evidence (`judge.request.proof_cause`, which `test basic` uses too), and the CLI verb's refusal
when no fleet runs."""

import json
import subprocess
import sys

import pytest

from p2p_ops.causes import verdict
from p2p_ops.diagnose import judge
from p2p_ops.diagnose.doctor import FleetFacts
from p2p_ops.diagnose.findings import Report
from p2p_ops.diagnose.judge import request
from p2p_ops.harness import matrix
from p2p_ops.harness.matrix import MatrixResult, Pair, default_max_seconds

NAMES = ["a-0", "b-0", "c-0"]


def result(**overrides) -> MatrixResult:
    pairs = [Pair(s, t, ok=True, cached_tokens=1024, need=1024, p2p_loads=1, identical=True, kv_bytes=128 << 20,
                  pull_ms=100.0) for s in NAMES for t in NAMES if s != t]
    pairs[1] = Pair("a-0", "c-0", need=1024, likely_cause="c-0's node cannot open a TCP connection to a-0's "
                    "127.0.0.1:1 (p2p)", cause=verdict("peer_unreachable", "c -> a-0 p2p", ("doctor:reach", "x")))
    pairs[5] = Pair("c-0", "b-0", need=1024, skipped=True, error="time bound reached")
    r = MatrixResult(False, NAMES, pairs, 256, 4, 12.0, 60.0, profile="llama-3-8b")
    for k, v in overrides.items():
        setattr(r, k, v)
    return r


def test_markdown_is_an_n_by_n_table_with_causes():
    text = matrix.markdown(result().to_dict())
    rows = [ln for ln in text.splitlines() if ln.startswith("| a-0 |") or ln.startswith("| b-0 |")
            or ln.startswith("| c-0 |")]
    assert len(rows) == 3 and all(r.count("|") == 5 for r in rows)
    assert "FAIL (4/6 pairs, 1 skipped)" in text
    assert "PASS 1024/1024, 100 ms, 1342 MB/s" in text  # 128 MiB in 100 ms
    assert "| a-0 -> c-0 | c-0's node cannot open" in text and "skipped" in text
    assert "llama-3-8b" in text


def test_heatmap_is_written(tmp_path):
    matrix.heatmap(tmp_path / "h.png", result().to_dict())
    assert (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"


def test_counts_and_json_document():
    doc = json.loads(json.dumps(result().to_dict()))
    assert doc["counts"] == {"pairs": 6, "passed": 4, "failed": 1, "skipped": 1}
    assert doc["pairs"][1]["cause"]["id"] == "peer_unreachable" and doc["pairs"][0]["cause"] is None
    assert doc["pairs"][0]["mbps"] == pytest.approx((128 << 20) / 0.1 / 1e6)


def test_the_default_bound_grows_with_the_pairs():
    assert default_max_seconds(2) < default_max_seconds(8) <= 600


def failing(**kw) -> Pair:
    return Pair("a-0", "b-0", need=1024, **kw)


@pytest.mark.parametrize("pair,cause", [
    (failing(error="ConnectionError: refused"), "request_failed"),
    (failing(error="source a-0 could not compute the prefix cold: refused"), "request_failed"),
    (failing(cached_tokens=1024, p2p_loads=1, mismatch_tokens=256), "kv_mismatch"),
    (failing(cached_tokens=1024, p2p_loads=1), "answer_differs"),
    (failing(cached_tokens=1024, own_l1=True), "own_l1"),
])
def test_what_the_pairs_requests_prove_comes_first(pair, cause):
    v = matrix.request_cause(pair)
    assert v.id == cause and v.confirmed
    # ... before explain's verdict and the judge, which is then never read
    got, said = request.proof_cause(v, verdict("prompt_differs", "b-0"), lambda: pytest.fail("judge read"), ABOUT)
    assert got is v and said.startswith(f"{cause}: ")
    assert matrix.request_cause(failing()) is None


def test_a_hit_is_the_targets_own_l1_only_where_its_lookups_counted_l1_hits_and_nothing_from_a_peer():
    """Issue 28's advertise_url case: node-a-0 was served from cache with no completed P2P load counted, and the
    matrix said it hit its own L1 although the prompt was fresh. Peer-served tokens rule that out; the cause is
    then the judge's (the advertised URL nobody reaches)."""
    assert request.own_l1_hit(p2p_loads=0, peer_hit_tokens=0, l1_hit_tokens=1024)
    assert not request.own_l1_hit(p2p_loads=0, peer_hit_tokens=1024, l1_hit_tokens=0)
    assert not request.own_l1_hit(p2p_loads=0, peer_hit_tokens=0, l1_hit_tokens=0)     # no evidence either way
    assert not request.own_l1_hit(p2p_loads=1, peer_hit_tokens=0, l1_hit_tokens=1024)
    assert matrix.request_cause(failing(cached_tokens=1024, own_l1=False, identical=True)) is None


def _judged(*findings) -> judge.Judgement:
    report = Report("doctor", source="doctor")
    for severity, check, subject, message, cause in findings:
        report.add(severity, check, subject, "v", message, cause)
    return judge.judgement(FleetFacts("f", "embedded", "http://c", "a", coordinator_state="running"), report)


ABOUT = {"a-0", "b-0", "a", "b"}


@pytest.mark.parametrize("findings,cause,words", [
    ([("error", "coordinator", "coordinator", "the coordinator is not running", "coordinator_down")],
     "coordinator_down", "coordinator is not running"),
    ([("error", "registration", "a-0", "a-0 advertises 10.0.0.9:5651", "advertise_stale")], "advertise_stale",
     "a-0 advertises"),
    ([("error", "reach", "b -> a-0 p2p", "node b cannot open a TCP connection", "peer_unreachable")],
     "peer_unreachable", "cannot open a TCP connection"),
    ([("error", "agree:chunk_size", "b-0", "chunk_size differs across peers", "chunk_size_differs")],
     "chunk_size_differs", "chunk_size differs"),
    # the setting beats the state it causes; a pair's own instances beat two other peers'
    ([("error", "process", "b-0/server", "b-0's server is dead", "server_down"),
      ("warn", "agree:chunk_size", "b-0", "chunk_size differs across peers", "chunk_size_differs")],
     "chunk_size_differs", "chunk_size differs"),
    ([("error", "agree:chunk_size", "c-0, d-0", "chunk_size differs across peers", "chunk_size_differs"),
      ("warn", "peer_count", "b-0", "b-0 sees 0 peer(s)", "peer_not_connected")], "peer_not_connected",
     "b-0 sees 0 peer(s)"),
])
def test_a_failing_pair_whose_requests_prove_nothing_names_the_judges_cause_for_its_instances(findings, cause, words):
    got, said = request.proof_cause(None, None, lambda: _judged(*findings), ABOUT)
    assert got.id == cause and words in said and "fix: " in said, said


def test_explains_verdict_on_the_target_comes_before_the_judge_where_it_confirms_a_cause():
    judged = _judged(("error", "reach", "b -> a-0 p2p", "node b cannot open", "peer_unreachable"))
    chunk = verdict("hash_seed_differs", "b-0", ("explain", "no serving peer keys chunks as b-0 does"))
    got, said = request.proof_cause(None, chunk, lambda: judged, ABOUT)
    assert got is chunk and said.startswith("explain: hash_seed_differs: b-0: no serving peer")
    got, _ = request.proof_cause(None, verdict("cold", "b-0"), lambda: judged, ABOUT)     # confirms nothing
    assert got.id == "peer_unreachable"


def test_findings_about_other_peers_do_not_blame_this_pair():
    got, said = request.proof_cause(None, None, lambda: _judged(
        ("error", "agree:chunk_size", "c-0, d-0", "chunk_size differs", "chunk_size_differs")), ABOUT)
    assert got is None and said.startswith("no cause confirmed")
    # a name inside a longer one is not that instance (b-0 is not b-0-extra's)
    got, said = request.proof_cause(None, None, lambda: _judged(
        ("error", "process", "b-0-extra/server", "dead", "server_down")), ABOUT)
    assert got is None and said.startswith("no cause confirmed")


def test_matrix_without_a_running_fleet_says_so(tmp_path):
    subprocess.run([sys.executable, "-m", "p2p_ops.cli", "init", "--local", "3", "-o", str(tmp_path / "f.yaml"),
                    "--memory-budget", "20", "--port-offset", "41000"], check=True, capture_output=True, timeout=120)
    res = subprocess.run([sys.executable, "-m", "p2p_ops.cli", "test", "matrix", "-f", str(tmp_path / "f.yaml")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "p2pctl up" in res.stderr and "Traceback" not in res.stderr
