"""The diagnosis benchmark reads cause ids from each verb's --json, never its prose (issue 40): the documents here are
made by the verbs' own code (explain's answer, the doctor's document, the tree's walk, the tests' results, the
CLI's refusal), so a change of a JSON shape fails here before a 20-minute benchmark run."""

from __future__ import annotations

import json

from bench import diagnosis as D
from p2p_ops.causes import verdict
from p2p_ops.diagnose.doctor import check
from p2p_ops.diagnose.explain.answer import explain
from p2p_ops.diagnose.judge.fleet import document
from p2p_ops.diagnose.tree import walk
from p2p_ops.harness.basic import BasicResult
from p2p_ops.harness.matrix import MatrixResult, Pair
from tests.unit import test_doctor as doc_facts
from tests.unit.test_explain_answer import connected, fleet
from tests.unit.test_tree_likely_cause import TREE, _fleet, _Given, _meshed

CASE = next(c for c in D.CASES if c.id == "chunk_size")


def test_explain_gives_its_first_missing_chunks_cause_and_abstains_on_one_that_confirms_nothing():
    a, b = connected(engine_degraded=True)
    doc = json.loads(json.dumps(explain(fleet(a, b, held={"k0": ["node-a-0"]})).to_dict()))
    assert D.top_explain(doc, "node-b-0")[0] == "engine_degraded"
    a, b = connected()
    assert D.top_explain(explain(fleet(a, b)).to_dict(), "node-b-0")[0] == D.ABSTAIN        # cold
    served = explain(fleet(a, b, held={"k0": ["node-a-0"], "k1": ["node-a-0"]})).to_dict()
    assert D.top_explain(served, "node-b-0")[0] == D.HEALTHY
    assert D.top_explain(served, "node-x-0")[0] == "error"


def test_the_doctor_gives_the_judges_likely_cause_first():
    c = doc_facts.inst("node-c-0", status=dict(doc_facts.STATUS, chunk_size=512),
                       proc_env=doc_facts.env(LMCACHE_CHUNK_SIZE="512"))
    c.engine_health = "degraded"
    facts = doc_facts.fleet([doc_facts.inst("node-a-0"), doc_facts.inst("node-b-0"), c])
    doc = json.loads(json.dumps(document(facts, check(facts))))
    assert D.top_doctor(doc)[0] == "chunk_size_differs"
    healthy = doc_facts.fleet([doc_facts.inst("node-a-0"), doc_facts.inst("node-b-0")])
    assert D.top_doctor(document(healthy, check(healthy)))[0] == D.HEALTHY


def test_diagnose_gives_its_likely_cause_and_abstains_when_none_is_confirmed():
    d = walk.diagnose(TREE, TREE.symptoms[1], _Given(_fleet("127.0.0.1", "rc,cuda_copy")))
    assert D.top_diagnose(json.loads(json.dumps(d.to_dict())))[0] == "tls_unavailable"
    d = walk.diagnose(TREE, TREE.symptoms[0], _Given(_meshed()))
    assert D.top_diagnose(d.to_dict())[0] == D.ABSTAIN


def test_a_proof_gives_its_cause_its_pass_or_its_refusals_cause():
    basic = BasicResult(False, "node-a-0", "node-c-0", 256, 4, [], {}, {}, likely_cause="words",
                        cause=verdict("hash_algorithm_differs", "node-c-0"))
    assert D.answer("basic", CASE, 1, json.loads(json.dumps(basic.to_dict())))[0] == "hash_algorithm_differs"
    basic.passed = True
    assert D.answer("basic", CASE, 0, basic.to_dict())[0] == D.HEALTHY
    pairs = [Pair("node-a-0", "node-b-0", ok=True), Pair("node-a-0", "node-c-0", cause=verdict("own_l1", "node-c-0"))]
    matrix = MatrixResult(False, ["node-a-0", "node-b-0", "node-c-0"], pairs, 256, 2, 1.0, 60.0)
    assert D.answer("matrix", CASE, 1, json.loads(json.dumps(matrix.to_dict())))[0] == "own_l1"
    refused = {"ok": False, "error": "fleet 'f' is not ready", "exit_code": 2,
               "cause": verdict("chunk_size_differs", "node-c-0").to_dict()}
    for verb in ("basic", "matrix", "wait"):
        assert D.answer(verb, CASE, 2, refused)[0] == "chunk_size_differs"
    assert D.answer("wait", CASE, 2, {**refused, "cause": None})[0] == D.ABSTAIN
    assert D.answer("wait", CASE, 0, {"ready": True})[0] == D.HEALTHY
    assert D.answer("doctor", CASE, 2, {"could_not_check": "no node could be read"})[0] == "error"


def test_the_spec_cases_run_without_a_fleet_and_validate_names_each_planted_cause(tmp_path):
    # The benchmark runs these before any fleet starts (Bench.ctx is None): a verb line that reads the fleet file
    # for them made both cells 'error' in CI.
    bench = D.Bench(None, tmp_path)
    for case in [c for c in D.CASES if not c.needs_fleet]:
        case.plant(bench)
        cell = D.run_verb(bench, case, "validate")
        assert cell.exit_code == 2 and cell.cause == case.expect[0], (case.id, cell)


def test_a_case_accepts_its_ids_and_two_of_them_are_no_contradiction():
    cells = {"doctor": D.Cell("doctor", "chunk_size_differs"), "explain": D.Cell("explain", "env_drift"),
             "basic": D.Cell("basic", D.ABSTAIN)}
    assert not D.contradicts(cells, CASE.expect)
    assert D.score(cells["explain"], CASE.expect, "") == "correct"
    cells["matrix"] = D.Cell("matrix", "server_down")
    assert D.contradicts(cells, CASE.expect) and D.score(cells["matrix"], CASE.expect, "") == "wrong"
    assert D.score(cells["basic"], CASE.expect, "") == "abstained"


def test_every_case_expects_causes_of_the_catalogue():
    from p2p_ops.causes import CAUSES
    assert len(D.CASES) == 22 and all(c.expect and set(c.expect) <= set(CAUSES) for c in D.CASES)
    assert set(D.one_verb_each(D.CASES).values()) == set(D.VERBS)
