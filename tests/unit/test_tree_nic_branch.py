"""The "single NIC or TCP transfers" branch of the decision tree on planted NIC pins (data-driven).

Each case in tests/fixtures/diagnose/nic_branch/ puts pins on a node built from an RDMA fixture tree, walks the
symptom over the doctor's facts and checks each step's verdict, the instances it names and its fix texts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2p_ops.diagnose.doctor.checks import check
from p2p_ops.diagnose.doctor.model import FleetFacts, InstanceFacts, NodeFacts
from p2p_ops.diagnose.doctor.nic import pin_views
from p2p_ops.diagnose.rdma.check import gather_rdma
from p2p_ops.diagnose.tree import evidence, model, render, walk
from p2p_ops.facts.host_view import HostView

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose"
CASES = sorted(p.stem for p in (FIXTURES / "nic_branch").glob("*.json"))
TREE = model.load_tree()
SYMPTOM = model.find_symptom(TREE, "single nic")


class _Facts(evidence.Evidence):
    """Evidence whose doctor facts are given (no fleet to read): what the tree's checks see on such a node."""

    def __init__(self, facts: FleetFacts):
        super().__init__(None, TREE)
        self._given = (facts, check(facts))

    def doctor(self):
        return self._given


def _instance(spec: dict) -> InstanceFacts:
    pin = {"UCX_NET_DEVICES": spec["pin"]} if spec["pin"] else {}
    if spec["running"]:
        return InstanceFacts(spec["id"], "gpu-a", "198.18.0.12", env_file={}, server_state="running", pid=4242,
                             process_env=pin, gpu=spec["gpu"])
    return InstanceFacts(spec["id"], "gpu-a", "198.18.0.12", env_file=pin, server_state="none", gpu=spec["gpu"])


def _facts(case: dict) -> FleetFacts:
    tree = FIXTURES / "rdma" / case["tree"]
    inputs = gather_rdma(HostView.snapshot(tree))
    topo = tree / "tools" / "nvidia_smi_topo.txt"
    node = NodeFacts("gpu-a", "198.18.0.12", rdma=inputs.devices, rdma_devices=len(inputs.devices),
                     topo_text=topo.read_text() if topo.is_file() else "")
    return FleetFacts("f", "embedded", "http://198.18.0.12:9300", "gpu-a",
                      instances=[_instance(i) for i in case["instances"]], nodes=[node])


def _walk(name: str):
    case = json.loads((FIXTURES / "nic_branch" / f"{name}.json").read_text())
    return case, walk.diagnose(TREE, SYMPTOM, _Facts(_facts(case)))


def test_the_branch_runs_the_plan_and_the_doctors_nic_pin():
    step = next(s for s in SYMPTOM.steps if s.id == "nic-plan")
    assert list(step.checks) == ["doctor:nic_pin", "nic:plan"]
    assert any("bench transfer" in m for s in SYMPTOM.steps for m in s.manual)


@pytest.mark.parametrize("name", CASES)
def test_case(name):
    case, d = _walk(name)
    steps = {s.id: s for s in d.steps}
    assert {k: steps[k].verdict for k in case["steps"]} == case["steps"], render.render_text(d)
    for step_id, named in case["named"].items():
        got = sorted({o.subject for o in steps[step_id].observations if o.status == "problem"})
        assert got == sorted(named), f"{step_id}: {got}"
    text = "\n".join(f"{o.detail} {o.fix}" for o in steps["nic-plan"].observations if o.status == "problem")
    for want in case["fix_has"]:
        assert want in text, f"{want!r} not in:\n{text}"
    assert d.exit_code == (1 if any(v == "problem" for v in case["steps"].values()) else 0)


def test_first_problem_names_the_instance_and_its_fix_in_json():
    _, d = _walk("other_socket_nic")
    cause = json.loads(json.dumps(d.to_dict()))["likely_cause"]
    assert cause["step"] == "nic-plan" and cause["subjects"] == ["g-0"]


def test_a_wrong_pin_is_reported_once_not_by_both_checks():
    _, d = _walk("other_socket_nic")
    obs = next(s for s in d.steps if s.id == "nic-plan").observations
    assert [o.check for o in obs if o.status == "problem"] == ["doctor:nic_pin"]
    assert [o.status for o in obs if o.check == "nic:plan"] == ["info"]


def test_a_node_without_rdma_has_nothing_to_plan():
    case = {"tree": "no_rdma", "instances": [{"id": "c-0", "gpu": None, "pin": "eth0", "running": True}]}
    assert pin_views(_facts(case)) == []
    d = walk.diagnose(TREE, SYMPTOM, _Facts(_facts(case)))
    steps = {s.id: s for s in d.steps}
    assert steps["rdma-present"].verdict == "problem" and steps["nic-plan"].verdict != "problem"


def test_the_one_rail_step_points_at_the_plan_not_at_all():
    _, d = _walk("tcp_pin_on_rdma_node")
    (obs,) = [o for o in next(s for s in d.steps if s.id == "ucx-env").observations if o.status == "problem"]
    assert obs.subject == "g-0" and "UCX_NET_DEVICES=mlx5_0:1" in obs.fix and "=all" not in obs.fix


def test_a_loopback_instance_keeps_lo():
    case = {"tree": "ib_healthy", "instances": [{"id": "g-0", "gpu": 0, "pin": "lo", "running": True}]}
    facts = _facts(case)
    facts.instances[0].address = "127.0.0.1"
    (view,) = pin_views(facts)
    assert view.ok and view.plan.net_devices == "mlx5_0:1"
    facts.instances[0].address = "198.18.0.12"
    assert "P2P moves over TCP" in pin_views(facts)[0].narrow
