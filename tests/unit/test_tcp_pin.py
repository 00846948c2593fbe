"""A NIC pin on a node without RDMA (TCP only): judged from the node's IPv4 interfaces, named by the doctor's
nic_pin and by the decision tree's "single NIC or TCP" branch, with the interface that holds the node's address
as the fix."""

from __future__ import annotations

from p2p_ops.diagnose.doctor.checks import check
from p2p_ops.diagnose.doctor.model import FleetFacts, InstanceFacts, NodeFacts
from p2p_ops.diagnose.doctor.nic import pin_views, tcp_pin_problems
from p2p_ops.diagnose.tree import evidence, model, walk

IPV4 = {"127.0.0.1": "lo", "198.18.0.3": "eth0"}
TREE = model.load_tree()


def test_an_absent_interface_and_one_off_the_nodes_address_are_wrong():
    assert tcp_pin_problems("eth0", "198.18.0.3", IPV4, "h2") == []
    absent = tcp_pin_problems("eth9", "198.18.0.3", IPV4, "h2")
    assert len(absent) == 2 and "eth9 holds no IPv4 address on h2" in absent[0] and "eth0, lo" in absent[0]
    assert "holds h2's address 198.18.0.3 (on eth0)" in absent[1]
    assert tcp_pin_problems("lo", "198.18.0.3", IPV4, "h2") == [
        "none of lo holds h2's address 198.18.0.3 (on eth0), the one its peers connect to"]
    assert tcp_pin_problems("", "198.18.0.3", IPV4, "h2") == [] and tcp_pin_problems("eth9", "x", {}, "h2") == []


def _facts(pin: str) -> FleetFacts:
    insts = [InstanceFacts("h1-0", "h1", "198.18.0.2", env_file={"UCX_NET_DEVICES": "eth0"}, server_state="none"),
             InstanceFacts("h2-0", "h2", "198.18.0.3", env_file={"UCX_NET_DEVICES": pin}, server_state="none")]
    nodes = [NodeFacts("h1", "198.18.0.2", ipv4={"127.0.0.1": "lo", "198.18.0.2": "eth0"}),
             NodeFacts("h2", "198.18.0.3", ipv4=IPV4)]
    return FleetFacts("f", "embedded", "http://198.18.0.2:9300", "h1", instances=insts, nodes=nodes)


class _Given(evidence.Evidence):
    def __init__(self, facts: FleetFacts):
        super().__init__(None, TREE)
        self._given = (facts, check(facts))

    def doctor(self):
        return self._given


def test_the_doctor_and_the_tree_name_the_instance_its_nic_and_the_fix():
    facts = _facts("eth9")
    views = {v.instance: v for v in pin_views(facts)}
    assert views["h1-0"].ok and not views["h2-0"].ok
    findings = [f for f in check(facts).findings if f.check == "nic_pin"]
    assert [f.subject for f in findings] == ["h2-0", "h2-0"] and "UCX_NET_DEVICES=eth9" in findings[0].value
    d = walk.diagnose(TREE, model.find_symptom(TREE, "wrong nic"), _Given(facts))
    step = next(s for s in d.steps if s.id == "nic-plan")
    problems = [o for o in step.observations if o.status == "problem"]
    assert step.verdict == "problem" and {o.subject for o in problems} == {"h2-0"}
    text = " ".join(f"{o.detail} {o.fix}" for o in problems)
    assert "eth9" in text and "UCX_NET_DEVICES=eth0" in text and "p2pctl down --node h2 --role server" in text
