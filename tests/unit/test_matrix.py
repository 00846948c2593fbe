"""`p2pctl test matrix`'s pure parts: the N x N table and heatmap from a result document, the likely cause of a
failing pair from gathered evidence, and the CLI verb's refusal when no fleet runs."""

import json
import subprocess
import sys

import pytest

from p2p_ops.endpoints.lmcache_api import ServerStatus
from p2p_ops.harness import matrix_causes
from p2p_ops.harness.matrix import MatrixResult, Pair, default_max_seconds
from p2p_ops.observe import matrix_plot
from p2p_ops.spec.agreement import Disagreement

NAMES = ["a-0", "b-0", "c-0"]


def result(**overrides) -> MatrixResult:
    pairs = [Pair(s, t, ok=True, cached_tokens=1024, need=1024, p2p_loads=1, identical=True, kv_bytes=128 << 20,
                  pull_ms=100.0) for s in NAMES for t in NAMES if s != t]
    pairs[1] = Pair("a-0", "c-0", need=1024, cause="c-0's node cannot open a TCP connection to a-0's 127.0.0.1:1 (p2p)")
    pairs[5] = Pair("c-0", "b-0", need=1024, skipped=True, error="time bound reached")
    r = MatrixResult(False, NAMES, pairs, 256, 4, 12.0, 60.0, profile="llama-3-8b")
    for k, v in overrides.items():
        setattr(r, k, v)
    return r


def test_markdown_is_an_n_by_n_table_with_causes():
    text = matrix_plot.markdown(result().to_dict())
    rows = [ln for ln in text.splitlines() if ln.startswith("| a-0 |") or ln.startswith("| b-0 |")
            or ln.startswith("| c-0 |")]
    assert len(rows) == 3 and all(r.count("|") == 5 for r in rows)
    assert "FAIL (4/6 pairs, 1 skipped)" in text
    assert "PASS 1024/1024, 100 ms, 1342 MB/s" in text  # 128 MiB in 100 ms
    assert "| a-0 -> c-0 | c-0's node cannot open" in text and "skipped" in text
    assert "llama-3-8b" in text


def test_heatmap_is_written(tmp_path):
    matrix_plot.heatmap(tmp_path / "h.png", result().to_dict())
    assert (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"


def test_counts_and_json_document():
    doc = json.loads(json.dumps(result().to_dict()))
    assert doc["counts"] == {"pairs": 6, "passed": 4, "failed": 1, "skipped": 1}
    assert doc["pairs"][0]["mbps"] == pytest.approx((128 << 20) / 0.1 / 1e6)


def test_the_default_bound_grows_with_the_pairs():
    assert default_max_seconds(2) < default_max_seconds(8) <= 600


class FakeEvidence(matrix_causes._Evidence):
    def __init__(self, advertised=None, peers=None, unreachable=None, settings=(), coordinator_ok=True):
        self.coordinator_ok = coordinator_ok
        self.advertised = {"a-0": "127.0.0.1:5651", "b-0": "127.0.0.1:5652"} if advertised is None else advertised
        self.peers = peers or {"b-0": ServerStatus(True, p2p_state="registered", peers=["a-0"])}
        self.unreachable = unreachable or {}
        self._settings = list(settings)
        self.urls = {"a-0": "127.0.0.1:5651", "b-0": "127.0.0.1:5652"}

    def expected_url(self, inst_id):
        return self.urls[inst_id]


def failing(**kw) -> Pair:
    return Pair("a-0", "b-0", need=1024, **kw)


@pytest.mark.parametrize("evidence,pair,words", [
    (FakeEvidence(), failing(error="ConnectionError: refused"), "the request to b-0 failed"),
    (FakeEvidence(), failing(cached_tokens=1024, p2p_loads=1, mismatch_tokens=256), "disagree"),
    (FakeEvidence(), failing(cached_tokens=1024, p2p_loads=1), "answered differently"),
    (FakeEvidence(), failing(cached_tokens=1024), "hit its own L1"),
    (FakeEvidence(coordinator_ok=False), failing(), "coordinator does not answer"),
    (FakeEvidence(advertised={"b-0": "x"}), failing(), "a-0 is not registered"),
    (FakeEvidence(advertised={"a-0": "10.0.0.9:5651"}), failing(), "advertises P2P URL '10.0.0.9:5651'"),
    (FakeEvidence(peers={"b-0": ServerStatus(True, p2p_state="registered", peers=[])}), failing(),
     "does not list a-0 as a peer"),
    (FakeEvidence(unreachable={("a-0", "b-0"): "127.0.0.1:5651 (p2p)"}), failing(), "cannot open a TCP connection"),
    (FakeEvidence(settings=[Disagreement("chunk_size", {"a-0": "256", "b-0": "512"})]), failing(),
     "chunk_size differs"),
    (FakeEvidence(), failing(), "look for P2P lookup/load timeouts"),
])
def test_a_failing_pair_names_its_likely_cause(evidence, pair, words):
    assert words in matrix_causes._cause(evidence, pair)


def test_settings_of_two_other_peers_do_not_blame_this_pair():
    ev = FakeEvidence(settings=[Disagreement("chunk_size", {"c-0": "256", "d-0": "512"})])
    assert "timeouts" in matrix_causes._cause(ev, failing())


def test_matrix_without_a_running_fleet_says_so(tmp_path):
    subprocess.run([sys.executable, "-m", "p2p_ops.cli", "init", "--local", "3", "-o", str(tmp_path / "f.yaml"),
                    "--memory-budget", "20", "--port-offset", "41000"], check=True, capture_output=True, timeout=120)
    res = subprocess.run([sys.executable, "-m", "p2p_ops.cli", "test", "matrix", "-f", str(tmp_path / "f.yaml")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "p2pctl up" in res.stderr and "Traceback" not in res.stderr
