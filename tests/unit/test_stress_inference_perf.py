"""`test stress --generator inference-perf`: the passes it plans on a fleet, and a whole run through a stand-in
inference-perf that writes the real output captured against the embedded engine (tests/fixtures/inference_perf),
read back into the run folder and its report. The fleet is not running: its snapshots are empty."""

from __future__ import annotations

import json

import pytest

from p2p_ops import files
from p2p_ops.errors import BadInput
from p2p_ops.harness import stress_inference_perf as sip
from p2p_ops.lifecycle.context import FleetContext
from p2p_ops.observe.records import read_csv
from p2p_ops.observe.report import build_report
from tests.conftest import write_local_fleet
from tests.unit.test_inference_perf import CAPTURED, fake_venv


def tokenizer(tmp_path):
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer_config.json").write_text("{}")
    return str(tok)


def stand_in_run(tmp_path, n_nodes: int, **opts) -> tuple[dict, object, str, sip.InferencePerfOptions]:
    """A run whose inference-perf answers every pass with the captured shared-prefix-pool run (32 requests, 8
    entries kept): its meta, run folder, first instance and options."""
    venv = fake_venv(tmp_path, f'cp {CAPTURED}/pool_local/*_lifecycle_metrics.json "$PWD"/')
    out = files.make_dirs(tmp_path / "run")
    o = sip.InferencePerfOptions(**{"venv": str(venv), "tokenizer": tokenizer(tmp_path), **opts})
    with FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", n_nodes, name="ip")) as ctx:
        return sip.run_inference_perf_stress(ctx, o, out), out, ctx.fleet.nodes[0].instances[0].id, o


def test_passes_warm_on_the_first_node_then_one_engine_of_every_other_node(tmp_path):
    with FleetContext.load(write_local_fleet(tmp_path / "fleet.yaml", 3, name="ip")) as ctx:
        targets = sip.passes(ctx, via_router=False)
        assert [t[1] for t in targets] == [n.name for n in ctx.fleet.nodes]
        assert len({t[0] for t in targets}) == 3 and all(t[2].startswith("http://127.0.0.1:") for t in targets)
        with pytest.raises(BadInput, match="router.enabled: true"):
            sip.passes(ctx, via_router=True)
    with FleetContext.load(write_local_fleet(tmp_path / "one.yaml", 1, name="one")) as ctx:
        with pytest.raises(BadInput, match="one node; use a fleet of two or more nodes, or --via-router"):
            sip.passes(ctx, via_router=False)


def test_options_name_an_unknown_shape_and_a_missing_tokenizer(tmp_path):
    with pytest.raises(BadInput, match="shape 'pool'.*shapes: shared-prefix-pool, hot-set, document-qa"):
        sip.InferencePerfOptions(shapes=["pool"]).validate()
    with pytest.raises(BadInput, match=f"--tokenizer {tmp_path}: not a Hugging Face tokenizer folder"):
        sip.tokenizer_dir(str(tmp_path), "tiny-llm")
    with pytest.raises(BadInput, match="no inference-perf there; run `make setup-inference-perf`"):
        sip.venv_dir(str(tmp_path))


def test_a_run_reads_every_pass_into_records_the_report_and_inference_perfs_figures(tmp_path):
    meta, out, first, opts = stand_in_run(tmp_path, 3, shapes=["shared-prefix-pool"], seed=7)
    records = read_csv(out / "requests.csv")
    assert [r.stage for r in records] == ["shared-prefix-pool-warm"] * 8 + ["shared-prefix-pool"] * 16
    assert {r.warmer for r in records} == {first}
    assert [r.cross_node for r in records] == [False] * 8 + [True] * 16
    assert meta["stages"] == [{"name": "shared-prefix-pool", "level": 4, "wall_s": meta["stages"][0]["wall_s"],
                               "requests": 16}]
    doc = json.loads((out / sip.RESULT).read_text())
    assert [(p["pass"], p["stage"]) for p in doc["passes"]] == [(0, "shared-prefix-pool-warm"),
                                                                (1, "shared-prefix-pool"), (2, "shared-prefix-pool")]
    assert doc["passes"][0]["inference_perf"]["requests"] == 32 and doc["shapes"]["shared-prefix-pool"]["requests"] == 32
    config = json.loads((out / "inference-perf" / f"shared-prefix-pool-0-{first}" / "inference-perf-config.yaml")
                        .read_text())
    assert config["data"]["shared_prefix"]["seed"] == 7 and config["tokenizer"]["pretrained_model_name_or_path"] \
        == opts.tokenizer
    summary = build_report(out)
    text = summary.summary.read_text()
    # inference-perf's own TTFT median / p90 / p99 of the captured run (695 / 1725 / 3891 ms), per pass
    assert text.count("| 695 / 1725 / 3891 |") == 3 and "| shared-prefix-pool | 2 |" in text
    assert any(c.name == "inference-perf: every pass ran" and c.ok for c in summary.checks)
    assert "prompt" in (out / "prompts.jsonl").read_text()


def test_a_relative_venv_in_the_environment_is_the_callers_not_the_output_folders(tmp_path, monkeypatch):
    """Issue 47: inference-perf runs in its output folder, so $P2P_INFERENCE_PERF_VENV=venv (relative) must name
    the caller's ./venv, resolved once where it is read."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(sip.VENV_VAR, "venv")
    meta, out, _, _ = stand_in_run(tmp_path, 2, shapes=["shared-prefix-pool"], venv="")
    assert sip.venv_dir() == tmp_path / "venv" and sip.venv_dir("venv") == tmp_path / "venv"
    assert len(read_csv(out / "requests.csv")) == 16 and not meta["stopped"]


def test_a_run_past_its_bound_says_where_it_stopped_and_fails_the_report(tmp_path):
    meta, out, _, _ = stand_in_run(tmp_path, 2, shapes=["hot-set"], max_seconds=5)
    assert meta["stopped"] == "--max-seconds 5 reached before hot-set's pass 1"
    report = build_report(out)
    assert not report.passed
    assert [c.detail for c in report.checks if not c.ok] == [meta["stopped"]]


def test_placements_document_qa_sent_by_inference_perf_is_the_same_sessions_with_their_id_header(tmp_path):
    from p2p_ops.bench import docqa

    venv = fake_venv(tmp_path, f'cp {CAPTURED}/docqa_local/*_lifecycle_metrics.json "$PWD"/')
    opts = docqa.DocQAOptions(sessions=8, questions=3, doc_tokens=2048, inflight=4, max_tokens=4, seed=3)
    configs = []
    for label in ("round_robin-p2p-on-r1", "round_robin-p2p-on-r2"):
        records, wall = docqa.run_inference_perf("http://127.0.0.1:1", "m", opts, label, tmp_path / label,
                                                 tmp_path, venv)
        configs.append(json.loads((tmp_path / label / "inference-perf-config.yaml").read_text()))
        assert {r.stage for r in records} == {label} and len(records) == 6 and {r.instance for r in records} == \
            {"router"}
        assert wall == pytest.approx(70.035, abs=0.01)   # the captured run's benchmark time, not this call's
    c = configs[0]
    assert c["api"]["session_id_header_key"] == docqa.SESSION_HEADER
    replay = c["data"]["conversation_replay"]
    assert (replay["num_conversations"], replay["turns_per_conversation"]["mean"],
            replay["dynamic_system_prompt_len"]["mean"], replay["output_tokens_per_turn"]["mean"],
            c["load"]["stages"][0]["concurrency_level"]) == (8, 3, 1024, 4, 4)
    assert replay["seed"] != configs[1]["data"]["conversation_replay"]["seed"]   # each arm's documents its own
