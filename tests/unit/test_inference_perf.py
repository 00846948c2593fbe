"""harness.inference_perf: llm-d's shapes at a named scale rendered as inference-perf 0.7.0 configs, and its real
output (captured against the embedded engine with LMCache, tests/fixtures/inference_perf) read back as records."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from p2p_ops import files
from p2p_ops.errors import BadInput, CouldNotRun
from p2p_ops.harness import inference_perf as ip
from p2p_ops.harness.stress_inference_perf import VENV_VAR
from p2p_ops.observe.records import read_csv, write_csv
from p2p_ops.resources import env_path

REPO = Path(__file__).resolve().parents[2]
CAPTURED = REPO / "tests/fixtures/inference_perf"
# make test-inference-perf sets up its own venv and names it in $P2P_INFERENCE_PERF_VENV (CI: a second one)
VENV = env_path(VENV_VAR, REPO / ip.DEFAULT_VENV)
TOKENIZER = str(REPO / "models/tiny-llama")


def captured(name: str) -> tuple[list, dict]:
    return ip.read_output(CAPTURED / name)


def rendered_as_captured(name: str, shape: str, scale: str) -> tuple[dict, dict]:
    """config() with the arguments the captured run was given, beside the config that run used."""
    doc = json.loads((CAPTURED / name / "inference-perf-config.yaml").read_text())
    mine = ip.config(shape, scale, doc["server"]["base_url"], "p2p-tiny", doc["storage"]["local_storage"]["path"],
                     doc["tokenizer"]["pretrained_model_name_or_path"], request_timeout_s=60, max_model_len=3500)
    return mine, doc


@pytest.mark.parametrize("name, shape", [("pool_local", "shared-prefix-pool"), ("docqa_local", "document-qa")])
def test_config_renders_the_config_that_ran(name, shape):
    mine, ran = rendered_as_captured(name, shape, "local")
    assert mine == ran


def test_shared_prefix_pool_at_local_scale():
    doc = ip.config("shared-prefix-pool", "local", "http://127.0.0.1:8000/", "m", "/tmp/o", TOKENIZER)
    assert doc["data"] == {"type": "shared_prefix", "shared_prefix": {
        "num_groups": 8, "num_prompts_per_group": 4, "system_prompt_len": 750, "question_len": 32, "output_len": 8,
        "seed": 1234}}
    assert doc["load"]["stages"] == [{"num_requests": 32, "concurrency_level": 4}]
    assert doc["server"]["base_url"] == "http://127.0.0.1:8000"
    assert doc["api"] == {"type": "completion", "streaming": True}
    assert "api_key" not in doc["server"]
    fields = doc["report"]["request_lifecycle"]["per_request_fields"]
    assert fields["request"] and fields["computed_metrics"] and not fields["response"]


def test_document_qa_is_a_conversation_per_document():
    doc = ip.config("document-qa", "llm-d", "http://r:1", "m", "/o", TOKENIZER, max_model_len=131072)
    cr = doc["data"]["conversation_replay"]
    assert doc["data"]["type"] == "conversation_replay"
    assert cr["num_conversations"] == 192 and cr["shared_system_prompt_len"] == 0
    assert cr["dynamic_system_prompt_len"]["mean"] == 48_000 and cr["turns_per_conversation"]["mean"] == 6
    assert cr["max_model_len"] == 131072
    assert doc["load"]["stages"] == [{"num_requests": 1152, "concurrency_level": 128}]
    assert doc["load"]["num_workers"] == 8


def test_scales_keep_llm_d_figures_at_full_size_and_name_the_scale():
    assert ip.scaled("hot-set", "llm-d") == ip.SHAPES["hot-set"]
    pool = ip.SHAPES["shared-prefix-pool"]
    assert (pool.prefixes, pool.prefix_tokens, pool.question_tokens, pool.output_tokens) == (128, 48_000, 256, 64)
    d = ip.describe("hot-set", "smoke")
    assert d["scale"]["name"] == "smoke" and d["llm_d"]["output_tokens"] == 512
    assert d["sent"]["output_tokens"] == 16 and d["sent"]["prefix_tokens"] == 188 and d["requests"] == 16
    for shape in ip.SHAPES:
        for scale in ip.SCALES:
            s = ip.scaled(shape, scale)
            assert s.prefix_tokens >= ip.PREFIX_FLOOR and s.output_tokens >= ip.LENGTH_FLOOR and s.concurrency >= 1


def test_unknown_shape_or_scale_is_bad_input():
    with pytest.raises(BadInput, match="shapes: shared-prefix-pool"):
        ip.config("pool", "local", "http://x", "m", "/o", TOKENIZER)
    with pytest.raises(BadInput, match="scales: llm-d"):
        ip.scaled("hot-set", "huge")


def test_api_key_goes_into_the_server_section_only_when_given():
    assert ip.config("hot-set", "smoke", "http://x", "m", "/o", TOKENIZER, api_key="k")["server"]["api_key"] == "k"


def test_parse_pool_requests_from_captured_output():
    entries, _ = captured("pool_local")
    recs = ip.parse_requests(entries, level=4, instance="e0", node="n0", url="http://127.0.0.1:41453")
    assert len(recs) == 8 and all(r.ok for r in recs)
    assert recs[0].t_start_s == 0.0 and [r.t_start_s for r in recs] == sorted(r.t_start_s for r in recs)
    assert len({r.prefix_id for r in recs}) == 2
    first = {}
    for r in recs:
        first.setdefault(r.prefix_id, r)
    # The first request of each prefix computed it; the later ones loaded it through LMCache.
    assert all(r.cached_tokens == 0 for r in first.values())
    assert all(r.cached_tokens >= 1024 for r in recs if r not in first.values())
    assert all(r.output_tokens == 8 and r.ttft_s is not None and 0 < r.ttft_s < r.e2e_s for r in recs)
    assert all(r.warmer == "e0" and r.level == 4 and r.stage == "inference-perf" for r in recs)
    e = min(entries, key=lambda x: x["start_time"])
    assert recs[0].prompt_tokens == e["info"]["response_metrics"]["server_usage"]["prompt_tokens"]
    assert recs[0].ttft_s == e["computed_metrics"]["time_to_first_token"]


def test_parse_document_qa_turns_grow_and_share_the_document():
    entries, _ = captured("docqa_local")
    recs = ip.parse_requests(entries, level=8)
    assert len(recs) == 6 and len({r.prefix_id for r in recs}) == 1
    assert [r.prompt_tokens for r in recs] == sorted(r.prompt_tokens for r in recs)
    assert recs[0].cached_tokens == 0 and all(r.cached_tokens >= 2048 for r in recs[1:])
    assert all(r.warmer == "" and r.instance == "" for r in recs)  # behind a router: nobody named


def test_parse_refused_requests_as_failures():
    entries, summary = captured("refused")
    recs = ip.parse_requests(entries, level=1)
    assert [r.ok for r in recs] == [False, False]
    assert recs[0].error.startswith("ClientConnectorError: Cannot connect to host")
    assert recs[0].ttft_s is None and recs[0].prompt_tokens == 0
    s = ip.parse_summary(summary, entries)
    assert s["failed"] == s["requests"] == 8 and s["ttft_s"] is None and s["requests_reporting_cached"] == 0


def test_summary_keeps_inference_perfs_own_figures():
    entries, summary = captured("pool_local")
    s = ip.parse_summary(summary, entries)
    latency = summary["successes"]["latency"]
    assert s["ttft_s"] == latency["time_to_first_token"] and s["itl_s"] == latency["inter_token_latency"]
    assert s["ttft_s"]["p99"] == pytest.approx(3.891092368319515)
    assert s["requests"] == 32 and s["failed"] == 0
    assert s["cached_tokens"] == 33024.0 and s["prompt_tokens"] == 50604.0
    assert s["requests_reporting_cached"] == len(entries) == 8


def test_records_round_trip_through_requests_csv(tmp_path):
    entries, _ = captured("pool_local")
    recs = ip.parse_requests(entries, level=4, instance="e0")
    write_csv(tmp_path / "requests.csv", recs)
    back = read_csv(tmp_path / "requests.csv")
    assert [r.prefix_id for r in back] == [r.prefix_id for r in recs]


def fake_venv(tmp_path: Path, body: str) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    exe = venv / "bin" / "inference-perf"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    return venv


def test_run_failure_names_command_exit_code_and_tail(tmp_path):
    venv = fake_venv(tmp_path, 'for i in $(seq 30); do echo "line $i"; done; echo "Tokenizer initialization failed"; '
                               'exit 3')
    doc = ip.config("hot-set", "smoke", "http://x", "m", tmp_path / "out", TOKENIZER)
    with pytest.raises(CouldNotRun) as exc:
        ip.run(venv, doc, timeout_s=30)
    msg = str(exc.value)
    assert "inference-perf --config_file" in msg and "exited 3" in msg
    assert "Tokenizer initialization failed" in msg and "line 30" in msg and "line 2\n" not in msg
    assert (tmp_path / "out" / "inference-perf.log").is_file()
    assert json.loads((tmp_path / "out" / "inference-perf-config.yaml").read_text()) == doc


def test_run_timeout_and_missing_venv(tmp_path):
    doc = ip.config("hot-set", "smoke", "http://x", "m", tmp_path / "out", TOKENIZER)
    with pytest.raises(CouldNotRun, match="did not finish within 1 s"):
        ip.run(fake_venv(tmp_path, "echo started; sleep 30"), doc, timeout_s=1)
    with pytest.raises(CouldNotRun, match="setup_inference_perf.sh"):
        ip.run(tmp_path / "nowhere", doc, timeout_s=5)


def test_run_passes_the_config_file_and_returns_the_output_folder(tmp_path):
    venv = fake_venv(tmp_path, 'test "$1" = --config_file && cp "$2" "$PWD/seen.yaml" && test "$HF_HUB_OFFLINE" = 1')
    doc = ip.config("document-qa", "smoke", "http://x", "m", tmp_path / "out", TOKENIZER)
    assert ip.run(venv, doc, timeout_s=30) == tmp_path / "out"
    assert json.loads(files.read_text(tmp_path / "out" / "seen.yaml")) == doc


@pytest.mark.skipif(not (VENV / ".p2p-inference-perf-setup-done").exists()
                    and os.environ.get("P2P_REQUIRE_INFERENCE_PERF") != "1",
                    reason="needs `make setup-inference-perf` (make test-inference-perf runs it)")
def test_every_shape_and_scale_is_a_config_inference_perf_accepts(tmp_path):
    from p2p_ops.harness.local_model import make_model

    tokenizer = str(make_model(tmp_path / "tiny-llama"))
    checks = []
    for shape in ip.SHAPES:
        for scale in ip.SCALES:
            path = tmp_path / f"{shape}-{scale}.yaml"
            files.write_json(path, ip.config(shape, scale, "http://127.0.0.1:1", "m", tmp_path / "o", tokenizer))
            checks.append(str(path))
    code = ("import sys\nfrom inference_perf.config import read_config\n"
            "for p in sys.argv[1:]: read_config(p)\n")
    res = subprocess.run([str(VENV / "bin" / "python"), "-c", code, *checks], capture_output=True, text=True,
                         timeout=120, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert res.returncode == 0, res.stderr[-2000:]
