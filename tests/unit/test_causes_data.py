"""Causes from captured evidence, one folder per case under tests/fixtures/causes/<case>/ (pyinfra's way, as
tests/unit/test_facts_data.py does for facts).

Each case's `case.yaml` names the judge that reads it (`judge`), the cause id it must give (`expect`, and the
`subject` where it matters) and, beside it, the evidence that judge reads, as the fleet gives it: the doctor's
gathered facts (`gathered.json`, what `p2pctl doctor --json --facts` writes), server logs, /metrics text,
explain's views of the instances, a proof's measurements with its target engine's counters before and after, a
node's probe, a fleet.yaml, calibrate's rows. Adding a case is adding a folder.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from p2p_ops.causes import CAUSES, Evidence, Verdict, verdict
from p2p_ops.diagnose import doctor, judge
from p2p_ops.diagnose.explain.answer import explain
from p2p_ops.diagnose.judge.views import ExplainFacts, InstanceView
from p2p_ops.diagnose.judge.request import proof_cause, request_cause
from p2p_ops.diagnose.nixl.failures import classify
from p2p_ops.diagnose.tree import evidence, model, walk
from p2p_ops.endpoints.lmcache_api import Placement
from p2p_ops.endpoints.metrics_api import KV_MISMATCH, metric_sum, parse_metrics
from p2p_ops.errors import BadInput
from p2p_ops.facts.chunk_keys import ChunkKeys, KeyInputs

CASES = Path(__file__).resolve().parent.parent / "fixtures" / "causes"
TREE = model.load_tree()


def fleet_facts(d: dict) -> doctor.FleetFacts:
    """The doctor's gathered facts from their JSON (the doctor's own reader, as triage uses it)."""
    return doctor.FleetFacts.from_dict(d)


def by_doctor(case: dict, here: Path):
    facts = fleet_facts(json.loads((here / "gathered.json").read_text()))
    return judge.judgement(facts, doctor.check(facts)).cause(case.get("about", ()))


class _Captured(evidence.Evidence):
    """The tree's evidence from the case's files: gathered facts, server logs, /metrics per server."""

    def __init__(self, case: dict, here: Path):
        super().__init__(None, TREE)
        facts = fleet_facts(json.loads((here / "gathered.json").read_text()))
        self._given, self._case, self._here = (facts, doctor.check(facts)), case, here

    def doctor(self):
        return self._given

    def logs(self):
        return [(f"{i}/server.log", "server", node, (self._here / f).read_text().splitlines())
                for i, (node, f) in (self._case.get("logs") or {}).items()]

    def running_servers(self):
        return [(None, type("I", (), {"id": i})(), i) for i in self._case.get("metrics") or {}]

    def metrics(self, url):
        return parse_metrics((self._here / self._case["metrics"][url]).read_text())


def by_tree(case: dict, here: Path):
    got = walk.diagnose(TREE, model.find_symptom(TREE, case["symptom"]), _Captured(case, here)).likely()
    return got[1].cause if got else None


def _view(v: dict) -> InstanceView:
    keys = [[{"chunk_hash_hex": h, "model_name": "m", "kv_rank": 1}] for h in v.pop("keys", [])]
    inputs = v.pop("inputs", None)
    return InstanceView(**v, inputs=KeyInputs(**inputs) if inputs else None,
                        keys=ChunkKeys(len(keys), v.get("logged_none_hash"), False, keys) if inputs else None)


def by_explain(case: dict, here: Path):
    d = yaml.safe_load((here / "views.yaml").read_text())
    facts = ExplainFacts("f", "embedded", "p", [_view(v) for v in d.pop("views")], d.pop("targets"),
                         **{k: v for k, v in d.items() if k != "placements"})
    for key, holders in (d.get("placements") or {}).items():
        facts.placements[key] = [Placement(h, "l1") for h in holders]
    node = explain(facts).nodes[0]
    return node.causes[0] if node.causes else None


def by_nixl(case: dict, here: Path):
    return classify((here / "failure.log").read_text(), "the initiator")


def by_proof(case: dict, here: Path):
    """What the pair's requests measured, the target engine's KV-mismatch counter before and after the pull, and
    explain's verdict on the target (an id, where it ran); the fleet judge where the case gives gathered facts."""
    m = yaml.safe_load((here / "pair.yaml").read_text())
    counters = [metric_sum(parse_metrics((here / f).read_text()), KV_MISMATCH)
                for f in ("engine_before.txt", "engine_after.txt")]
    proved = request_cause(m["target"], m["source"], failed_on=m.get("failed_on", ""), error=m.get("error", ""),
                           cached_tokens=m["cached_tokens"], mismatch_tokens=counters[1] - counters[0],
                           own_l1=m.get("own_l1", False), identical=m.get("identical", True))
    said = m.get("explained") or {}
    explained = verdict(said["id"], m["target"], ("explain", said["seen"]), **said.get("values", {})) if said else None
    facts = fleet_facts(json.loads((here / "gathered.json").read_text())) if (here / "gathered.json").exists() else \
        doctor.FleetFacts("f", "embedded", "http://c", "a")
    return proof_cause(proved, explained, lambda: judge.judgement(facts, doctor.check(facts)),
                       {m["source"], m["target"]})[0]


def by_readiness(case: dict, here: Path):
    from p2p_ops.facts.python_env import PythonEnv
    from p2p_ops.lifecycle.preflight.readiness import assess_node
    from p2p_ops.spec.load import parse_fleet

    fl = parse_fleet(yaml.safe_load((here / "fleet.yaml").read_text()))
    d = yaml.safe_load((here / "probe.yaml").read_text())
    probe = type("Probe", (), {"problems": [], "warnings": [], "ports": [], "rdma": [], "memlock": None,
                               "disk": None, "model_cache": None, "gpus": None,
                               "python": PythonEnv(**d["python"])})()
    assess_node(fl, fl.nodes[0], probe)
    return (probe.problems + probe.warnings or [None])[0]


def by_spec(case: dict, here: Path):
    from p2p_ops.spec.load import parse_fleet

    with pytest.raises(BadInput) as refused:
        parse_fleet(yaml.safe_load((here / "fleet.yaml").read_text()))
    return refused.value.cause


def by_calibrate(case: dict, here: Path):
    from p2p_ops.bench import calibrate
    from p2p_runtime.timing_profiles import TIMING_PROFILES

    d = yaml.safe_load((here / "rows.yaml").read_text())
    got = calibrate.project(d["rows"], TIMING_PROFILES[d["profile"]])["cause"]
    return Verdict(**{**got, "evidence": tuple(Evidence(**e) for e in got["evidence"])}) if got else None


JUDGES = {"doctor": by_doctor, "tree": by_tree, "explain": by_explain, "nixl": by_nixl, "proof": by_proof,
          "readiness": by_readiness, "spec": by_spec, "calibrate": by_calibrate}


@pytest.mark.parametrize("here", sorted(p for p in CASES.iterdir() if p.is_dir()), ids=lambda p: p.name)
def test_cause_case(here: Path):
    case = yaml.safe_load((here / "case.yaml").read_text())
    assert case["expect"] in CAUSES, f"{case['expect']} is not a cause of the catalogue"
    got = JUDGES[case["judge"]](case, here)
    assert got is not None and got.id == case["expect"], f"GOT {got}\nWANT {case['expect']}"
    assert got.subject == case.get("subject", got.subject) and "{" not in got.fix, got
    assert got.confirmed == CAUSES[got.id].confirmed and got.evidence, got
    # `says`: what the verdict's evidence must state, where the id alone does not pin it (a chunk, a value)
    assert case.get("says", "") in " ".join(e.seen for e in got.evidence), got


def test_every_judge_has_a_case():
    used = {yaml.safe_load((p / "case.yaml").read_text())["judge"] for p in CASES.iterdir() if p.is_dir()}
    assert used == set(JUDGES)


def test_a_view_field_a_case_names_is_one_explain_reads():
    known = {f.name for f in fields(InstanceView)}
    for path in CASES.glob("*/views.yaml"):
        for v in yaml.safe_load(path.read_text())["views"]:
            assert set(v) <= known | {"keys"}, (path, set(v) - known)
