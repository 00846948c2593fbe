"""The right NIC per instance: `UCX_NET_DEVICES` and `UCX_MAX_RMA_RAILS` from a node's RDMA and GPU facts.

LMCache P2P reads KV out of the serving peer's L1, which lives in host memory: the NICs that matter are the ones
on the L1's NUMA node. A GPU instance's L1 belongs on its GPU's NUMA node, so it gets the active NIC(s) nearest
its GPU (`nvidia-smi topo -m`: PIX before PXB before PHB before NODE; never SYS); a CPU instance gets every
active NIC of one NUMA node, instances spread over the nodes that have active NICs, in instance order (like
Mooncake's transfer engine, which prefers the NICs of the buffer's NUMA node).

Inputs are what the probe already reads (`facts.sysfs_ib`, `facts.topo`). A bonded device (`mlx5_bond_0`, its
netdev a `bond*`) is one UCX device carrying two links: it counts as one rail. Ports that are not ACTIVE are never
picked; a down nearest NIC falls back to the other active NICs of that NUMA node, and the plan says so. No active
port: no plan (`devices == []`): UCX picks, and render keeps its own default.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from p2p_ops.connectors.base import Connector, Result
from p2p_ops.facts import node_facts
from p2p_ops.facts.ib_model import IbDevice
from p2p_ops.facts.sections import read_node
from p2p_ops.facts.sysfs_ib import SYSFS_IB
from p2p_ops.facts.topo import LINKS, NVIDIA_SMI_TOPO, Topology
from p2p_ops.spec.model import Fleet, Node

@dataclass(frozen=True)
class Rail:
    device: str
    port: int
    numa: Optional[int]
    state: str
    bond: bool = False

    @property
    def ucx(self) -> str:
        return f"{self.device}:{self.port}"

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"


@dataclass
class InstancePlan:
    instance: str
    gpu: Optional[int] = None
    numa: Optional[int] = None
    devices: list[str] = field(default_factory=list)
    max_rma_rails: int = 0
    why: str = ""

    @property
    def net_devices(self) -> str:
        return ",".join(self.devices)


def rails_of(devices: Sequence[IbDevice]) -> list[Rail]:
    """Every RDMA port, active or not (numa -1, "no NUMA information", reads as None)."""
    out = []
    for dev in devices:
        numa = dev.numa_node if dev.numa_node is not None and dev.numa_node >= 0 else None
        bond = "bond" in dev.name or any(n.startswith("bond") for n in dev.netdevs)
        out += [Rail(dev.name, p.port, numa, p.state, bond) for p in dev.ports]
    return out


def _nearest(topo: Optional[Topology], gpu: int, rails: list[Rail]) -> tuple[str, list[Rail]]:
    """The rails with the best topo link from the GPU; ("", []) without topo."""
    # A NIC across the socket interconnect (SYS) is never "nearest": it is the slow path the plan exists to avoid.
    for link in LINKS[:-1]:
        names = topo.nics_at(f"GPU{gpu}", link) if topo else []
        if picked := [r for r in rails if r.device in names]:
            return link, picked
    return "", []


def _plan(instance: str, gpu: Optional[int], numa: Optional[int], picked: list[Rail], why: str) -> InstancePlan:
    return InstancePlan(instance, gpu, numa, [r.ucx for r in picked], len(picked), why)


def _gpu_plan(instance: str, gpu: int, topo: Optional[Topology], rails: list[Rail]) -> InstancePlan:
    active = [r for r in rails if r.active]
    affinity = (topo.numa_affinity.get(f"GPU{gpu}", "") if topo else "").strip()
    numa = int(affinity) if affinity.isdecimal() else None
    link, picked = _nearest(topo, gpu, active)
    # A switch can reach a NIC of the other socket (PXB on paper): the L1 still sits on the GPU's node.
    picked = [r for r in picked if numa is None or r.numa in (numa, None)]
    down = sorted({r.device for r in _nearest(topo, gpu, rails)[1] if not r.active})
    note = f"; {', '.join(down)} not active" if down else ""
    if picked:
        numa = picked[0].numa if numa is None else numa
        return _plan(instance, gpu, numa, picked, f"nearest GPU{gpu} ({link}){note}")
    if local := [r for r in active if numa is not None and r.numa == numa]:
        return _plan(instance, gpu, numa, local, f"GPU{gpu}'s NUMA node {numa}{note}")
    return _cpu_plan(instance, gpu, 0, rails)


def _cpu_plan(instance: str, gpu: Optional[int], order: int, rails: list[Rail]) -> InstancePlan:
    active = [r for r in rails if r.active]
    if not active:
        return InstancePlan(instance, gpu, why="no active RDMA port: UCX picks (TCP)")
    nodes = sorted({r.numa for r in active if r.numa is not None})
    if not nodes:
        return _plan(instance, gpu, None, active, "no NUMA information: every active port")
    numa = nodes[order % len(nodes)]
    return _plan(instance, gpu, numa, [r for r in active if r.numa == numa],
                 f"NUMA node {numa}'s active ports (bind the server's L1 there: numactl --membind={numa})")


def plan_node(instances: Sequence[tuple[str, Optional[int]]], devices: Sequence[IbDevice],
              topo: Optional[Topology] = None) -> list[InstancePlan]:
    rails = rails_of(devices)
    cpu_order = itertools.count()  # CPU instances spread over the NUMA nodes in turn
    return [_gpu_plan(inst, gpu, topo, rails) if gpu is not None else _cpu_plan(inst, None, next(cpu_order), rails)
            for inst, gpu in instances]


def check_pin(pin: str, plan: InstancePlan, devices: Sequence[IbDevice]) -> list[str]:
    """The doctor's view of a pinned UCX_NET_DEVICES: a device that is down, or on another NUMA node than the
    plan's; each problem names the device."""
    rails = {r.ucx: r for r in rails_of(devices)} | {r.device: r for r in rails_of(devices)}
    problems = []
    for name in [p.strip() for p in pin.split(",") if p.strip() and p.strip() != "all"]:
        if (rail := rails.get(name)) is None:
            continue  # a TCP interface (eth0, lo) is not an RDMA rail: nothing to judge here
        if not rail.active:
            problems.append(f"{name} is {rail.state or 'not active'}")
        elif plan.numa is not None and rail.numa is not None and rail.numa != plan.numa:
            problems.append(f"{name} is on NUMA node {rail.numa}, the instance's L1 on {plan.numa}")
    return problems


# What the plan reads on a node: the probe's own facts, in one round trip.
PLAN_FACTS = node_facts(("rdma", "topo"))


def plan_from_reads(instances: Sequence[tuple[str, Optional[int]]], reads: Mapping[str, Result]) -> list[InstancePlan]:
    """A plan from a batched read of PLAN_FACTS (a node without nvidia-smi has no topo: NUMA only)."""
    devices = SYSFS_IB.parse(reads["rdma"].output) if "rdma" in reads else []
    topo = NVIDIA_SMI_TOPO.parse(reads["topo"].output) if "topo" in reads and reads["topo"].ok else None
    return plan_node(instances, devices, None if topo is None or topo.error else topo)


def read_plans(conn: Connector, fleet: Fleet, node: Node) -> dict[str, InstancePlan]:
    # Only nodes off loopback, with an instance whose spec leaves UCX_NET_DEVICES to us, are read.
    if fleet.all_loopback or all(fleet.effective_settings(inst).ucx_net_devices for inst in node.instances):
        return {}
    plans = plan_from_reads([(i.id, i.gpu) for i in node.instances], read_node(conn, PLAN_FACTS, timeout=60))
    return {p.instance: p for p in plans}
