"""Each instance's NIC pin against its NIC plan (lifecycle/nic_plan.py), judged from the doctor's facts. Pure.

Two ways a pin goes wrong, kept apart because they have different symptoms:
- `wrong`: a pinned device that is down or on another NUMA node than the instance's L1 (the doctor's `nic_pin`);
- `narrow`: a pin that names no RDMA device although the node has active ones (P2P moves over TCP), or fewer
  rails than the plan gives (one NIC carries what several could): the "single NIC or TCP" branch of diagnose.

On a node without RDMA (TCP only) a pin is `wrong` when it names an interface that holds no IPv4 address there
(absent or unaddressed: UCX's TCP transport cannot use it) or, off loopback, none that holds the node's own
address (the one its peers connect to); the fix names the interface that does.

Every fix (the catalogue's `nic_pin`) names the instance, the plan's devices, the env vars and the command that
restarts the servers of its node from fleet.yaml (`up --node` re-renders their env.sh; there is no finer restart)::

    pin_views(facts) -> [PinView("gpu-a-0", "gpu-a", pin="eth0", where="env.sh", plan=..., narrow="...")]
"""

from __future__ import annotations

from dataclasses import dataclass, field

from p2p_ops.diagnose.doctor.agreement import restart
from p2p_ops.diagnose.doctor.model import FleetFacts, InstanceFacts, NodeFacts
from p2p_ops.diagnose.doctor.peers import observed
from p2p_ops.facts.topo import parse_topo
from p2p_ops.lifecycle.nic_plan import InstancePlan, check_pin, plan_node, rails_of


@dataclass
class PinView:
    instance: str
    node: str
    pin: str                    # UCX_NET_DEVICES as the server uses it ("" = unset: UCX picks among all)
    where: str                  # process | env.sh | spec (not rendered)
    plan: InstancePlan
    wrong: list[str] = field(default_factory=list)
    narrow: str = ""
    fix: dict[str, str] = field(default_factory=dict)      # the values of the catalogue's `nic_pin` fix

    @property
    def ok(self) -> bool:
        return not self.wrong and not self.narrow


def _narrow(pin: str, plan: InstancePlan, node: NodeFacts) -> str:
    """Why the pin leaves the plan's rails unused ("" when it does not)."""
    names = [p.strip() for p in pin.split(",") if p.strip()]
    if not names or "all" in names or not plan.devices:
        return ""
    rails = {r.ucx: r for r in rails_of(node.rdma)} | {r.device: r for r in rails_of(node.rdma)}
    pinned = {rails[n].ucx for n in names if n in rails and rails[n].active}
    if not pinned:
        return f"UCX_NET_DEVICES={pin} names no active RDMA device: P2P moves over TCP"
    if len(pinned) < len(plan.devices):
        return f"UCX_NET_DEVICES={pin} pins {len(pinned)} of the plan's {len(plan.devices)} rails"
    return ""


def pin_fix(facts: FleetFacts, inst: InstanceFacts, plan: InstancePlan, devices: str = "") -> dict[str, str]:
    return {"instance": inst.instance, "devices": devices or plan.net_devices or "(none active: leave it unset)",
            "rails": str(plan.max_rma_rails or 1), "why": plan.why, "node": inst.node,
            "restart": restart(facts, [inst.instance], "server")}


def tcp_pin_problems(pin: str, address: str, ipv4: dict[str, str], node: str) -> list[str]:
    """What is wrong with a TCP pin on a node without RDMA, from its IPv4 interfaces. Pure."""
    names = [p.strip() for p in pin.split(",") if p.strip() and p.strip() != "all"]
    if not names or not ipv4:
        return []
    have = sorted(set(ipv4.values()))
    problems = [f"{n} holds no IPv4 address on {node} (absent or unaddressed; it has {', '.join(have)}), so "
                "UCX's TCP transport cannot use it" for n in names if n not in have]
    own = ipv4.get(address)
    if own and own not in names:
        problems.append(f"none of {pin} holds {node}'s address {address} (on {own}), the one its peers connect to")
    return problems


def _tcp_views(facts: FleetFacts, node: NodeFacts) -> list[PinView]:
    out = []
    for inst in (i for i in facts.instances if i.node == node.node and not i.address.startswith("127.")):
        pin, where = observed(inst, {})["UCX_NET_DEVICES"]
        plan = InstancePlan(inst.instance, inst.gpu, why="no RDMA device: TCP on the interface of the node's address")
        own = node.ipv4.get(inst.address) or f"<the interface of {inst.address}>"
        out.append(PinView(inst.instance, node.node, pin, where, plan,
                           tcp_pin_problems(pin, inst.address, node.ipv4, node.node), "", pin_fix(facts, inst, plan, own)))
    return out


def pin_views(facts: FleetFacts) -> list[PinView]:
    """One view per instance on a node whose RDMA devices were read; on a node without RDMA, a TCP view of each
    instance off loopback whose node's IPv4 interfaces were read."""
    out = []
    for node in facts.nodes:
        if not node.error and not node.rdma and node.ipv4:
            out += _tcp_views(facts, node)
        if node.error or not node.rdma:
            continue
        topo = parse_topo(node.topo_text) if node.topo_text else None
        mine = [i for i in facts.instances if i.node == node.node]
        plans = plan_node([(i.instance, i.gpu) for i in mine], node.rdma, None if topo is None or topo.error else topo)
        for inst, plan in zip(mine, plans):
            pin, where = observed(inst, {})["UCX_NET_DEVICES"]
            # A loopback instance keeps `lo` on purpose (render plans nothing there): its pin is not narrow.
            narrow = "" if inst.address.startswith("127.") else _narrow(pin, plan, node)
            out.append(PinView(inst.instance, node.node, pin, where, plan, check_pin(pin, plan, node.rdma),
                               narrow, pin_fix(facts, inst, plan)))
    return out
