"""`p2pctl test stress --generator inference-perf` on a real 2-node local fleet with the real inference-perf
(`make setup-inference-perf`): llm-d's three shapes at the smoke scale, each a warm pass and a pass on each other node.
The passes on the other nodes must be served from the first node's cache (P2P loads), and the report must show
inference-perf's TTFT/ITL percentiles beside them. Skipped without .venv-inference-perf (`make test-inference-perf` sets it
up); P2P_REQUIRE_INFERENCE_PERF=1 fails instead."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from p2p_ops.harness import inference_perf
from p2p_ops.harness.local_model import make_model
from p2p_ops.harness.stress_inference_perf import VENV_VAR
from p2p_ops.resources import CHECKOUT, env_path
from tests.e2e.conftest import running_fleet

pytestmark = pytest.mark.e2e
VENV = env_path(VENV_VAR, CHECKOUT / inference_perf.DEFAULT_VENV)
READY = (VENV / ".p2p-inference-perf-setup-done").is_file()


@pytest.mark.skipif(not READY and not os.environ.get("P2P_REQUIRE_INFERENCE_PERF"),
                    reason=f"no inference-perf in {VENV}: `make setup-inference-perf`")
def test_three_llm_d_shapes_pull_across_nodes_and_report_inference_perfs_figures(tmp_path, p2pctl):
    tokenizer = make_model(tmp_path / "model")
    with running_fleet(tmp_path, 2, name="inference-perf") as ctx:
        code, out, err = p2pctl("test", "stress", "--fleet", str(ctx.fleet_file), "--generator", "inference-perf",
                                "--scale", "smoke", "--tokenizer", str(tokenizer), "--seed", "11", "--json")
        assert code == 0, err[-3000:] + out[-3000:]
        run_dir = Path(json.loads(out)["run_dir"])
    doc = json.loads((run_dir / "inference-perf.json").read_text())
    assert [p["shape"] for p in doc["passes"]] == [s for s in inference_perf.SHAPES for _ in range(2)]
    for p in doc["passes"]:
        assert p["inference_perf"]["failed"] == 0 and p["inference_perf"]["ttft_s"]["median"] > 0, p
        if p["pass"]:   # another node than the one that warmed: served from the first node's cache over P2P
            assert p["cached_tokens"] > 0 and p["p2p"]["p2p_loads"] > 0, p
    summary = (run_dir / "summary.md").read_text()
    assert "**Overall: PASS**" in summary and "| TTFT p50 / p90 / p99 ms | ITL p50 / p90 / p99 ms |" in summary
