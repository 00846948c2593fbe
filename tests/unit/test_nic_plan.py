"""The NIC plan on fixture host trees: every tree whose expected.json has a `nic_plan` gives exactly its devices.

Trees (tests/fixtures/diagnose/rdma/): ib_healthy (8 GPUs, 8 NICs, two sockets), ib_one_rail_down, roce_healthy,
no_rdma, and the ones made for the plan: dual_socket_cpu (4 NICs over two NUMA nodes, no GPU), gpu8_nic4_shared
(two GPUs per NIC, one NIC down), bonded (mlx5_bond_0 over bond0, a NIC behind the other socket).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2p_ops.diagnose.rdma.check import gather_rdma
from p2p_ops.facts.host_view import HostView
from p2p_ops.facts.ib_model import IbDevice, IbPort
from p2p_ops.facts.sysfs_ib import parse_sysfs_ib_grep
from p2p_ops.lifecycle.nic_plan import InstancePlan, check_pin, plan_node, rails_of

TREES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnose" / "rdma"
CASES = sorted(p.name for p in TREES.iterdir()
               if (p / "expected.json").is_file() and "nic_plan" in json.loads((p / "expected.json").read_text()))


def test_the_layouts_the_issue_names_are_covered():
    assert set(CASES) >= {"ib_healthy", "dual_socket_cpu", "gpu8_nic4_shared", "bonded", "ib_one_rail_down"}


@pytest.mark.parametrize("case", CASES)
def test_plan_on_tree(case):
    spec = json.loads((TREES / case / "expected.json").read_text())["nic_plan"]
    inputs = gather_rdma(HostView.snapshot(TREES / case))
    plans = plan_node([tuple(i) for i in spec["instances"]], inputs.devices, inputs.topo)
    got = {p.instance: {"UCX_NET_DEVICES": p.net_devices, "UCX_MAX_RMA_RAILS": p.max_rma_rails, "numa": p.numa}
           for p in plans}
    assert got == spec["expected"], "\n".join(f"{p.instance}: {p.why}" for p in plans)
    assert all(p.why for p in plans)


def test_a_gpu_never_gets_the_other_sockets_nic():
    inputs = gather_rdma(HostView.snapshot(TREES / "bonded"))
    (g1,) = plan_node([("g-1", 1)], inputs.devices, inputs.topo)
    # topo says PXB to both mlx5_3 (NUMA 0) and mlx5_7 (NUMA 1); GPU1 sits on NUMA 0
    assert g1.devices == ["mlx5_3:1"] and g1.numa == 0


def test_a_bond_is_one_rail():
    inputs = gather_rdma(HostView.snapshot(TREES / "bonded"))
    bond = [r for r in rails_of(inputs.devices) if r.device == "mlx5_bond_0"]
    assert len(bond) == 1 and bond[0].bond and bond[0].active


def test_down_nearest_nic_falls_back_and_says_so():
    inputs = gather_rdma(HostView.snapshot(TREES / "ib_one_rail_down"))
    (g3,) = plan_node([("g-3", 3)], inputs.devices, inputs.topo)
    assert "mlx5_3:1" not in g3.devices and "mlx5_3 not active" in g3.why and g3.numa == 0


def test_the_probes_batched_read_gives_the_same_plan():
    # `p2pctl probe` reads sysfs with one grep (SYSFS_IB), not by walking the tree: same devices, same plan
    text = "\n".join(["/sys/class/infiniband/mlx5_0/device/numa_node:0", "/sys/class/infiniband/mlx5_0/ports/1/state:4: ACTIVE",
                      "/sys/class/infiniband/mlx5_2/device/numa_node:1", "/sys/class/infiniband/mlx5_2/ports/1/state:4: ACTIVE",
                      "/sys/class/infiniband/mlx5_3/device/numa_node:1", "/sys/class/infiniband/mlx5_3/ports/1/state:1: DOWN"])
    plans = plan_node([("a", None), ("b", None)], parse_sysfs_ib_grep(text))
    assert [p.net_devices for p in plans] == ["mlx5_0:1", "mlx5_2:1"] and plans[1].max_rma_rails == 1


def _dev(name: str, numa: int, state: str = "ACTIVE") -> IbDevice:
    return IbDevice(name, numa_node=numa, ports=[IbPort(1, state=state)])


def test_check_pin_flags_remote_numa_and_down_ports():
    devices = [_dev("mlx5_0", 0), _dev("mlx5_4", 1), _dev("mlx5_5", 1, "DOWN")]
    plan = InstancePlan("a-0", gpu=0, numa=0, devices=["mlx5_0:1"], max_rma_rails=1)
    assert check_pin("mlx5_0:1", plan, devices) == []
    assert check_pin("mlx5_4:1", plan, devices) == ["mlx5_4:1 is on NUMA node 1, the instance's L1 on 0"]
    assert check_pin("mlx5_5", plan, devices) == ["mlx5_5 is DOWN"]
    assert check_pin("eth0,all", plan, devices) == []   # TCP interfaces are not RDMA rails


# ---- render writes the plan; the spec's own pin wins -------------------------------------------------------

def _ssh_fleet(settings: dict | None = None):
    from p2p_ops.spec.load import parse_fleet
    from p2p_ops.spec.starter import local_fleet

    data = local_fleet(2, name="nic")
    data["settings"] = settings or {}
    for i, node in enumerate(data["nodes"]):
        node.update(connection="ssh", address=f"198.18.0.{12 + i}", venv="/opt/p2p/.venv", run_dir="/srv/p2p")
        node["instances"][0]["gpu"] = 3
    data["coordinator"]["host"] = "198.18.0.12"
    return parse_fleet(data)


def _env_sh(fleet, plans) -> str:
    from p2p_ops.lifecycle.render import render_fleet
    from p2p_ops.spec.layout import RunLayout

    layout = RunLayout(Path("/srv/p2p/nic"))
    first = fleet.instances()[0][1].id
    return next(f.text for f in render_fleet(fleet, lambda n: layout, plans) if f.unit == first and f.name == "env.sh")


def test_render_writes_the_plan_where_the_spec_leaves_devices_unset():
    fleet = _ssh_fleet()
    inputs = gather_rdma(HostView.snapshot(TREES / "ib_healthy"))
    inst = fleet.instances()[0][1]
    plans = {p.instance: p for p in plan_node([(inst.id, inst.gpu)], inputs.devices, inputs.topo)}
    text = _env_sh(fleet, plans)
    assert "export UCX_NET_DEVICES=mlx5_3:1\n" in text and "export UCX_MAX_RMA_RAILS=1\n" in text
    assert "nearest GPU3 (PIX)" in text and "P2P_UCX_DEV" not in text
    pinned = _env_sh(_ssh_fleet({"ucx_net_devices": "mlx5_0:1"}), plans)
    assert "export UCX_NET_DEVICES=mlx5_0:1\n" in pinned and "UCX_MAX_RMA_RAILS" not in pinned
    assert "UCX_MAX_RMA_RAILS" not in _env_sh(fleet, {})  # no plan: the interface of the address, as before


def test_read_plans_reads_the_probe_facts_once_per_node(fakes):
    from p2p_ops.lifecycle.nic_plan import PLAN_FACTS, read_plans
    from tests.support.fake_connector import node_read

    fleet = _ssh_fleet()
    node = fleet.nodes[0]
    grep = "/sys/class/infiniband/mlx5_3/device/numa_node:0\n/sys/class/infiniband/mlx5_3/ports/1/state:4: ACTIVE"
    topo = (TREES / "ib_healthy" / "tools" / "nvidia_smi_topo.txt").read_text()
    conn = fakes.connector(node.name, [node_read(PLAN_FACTS, {"rdma": grep, "topo": topo})])
    plans = read_plans(conn, fleet, node)
    assert {k: v.net_devices for k, v in plans.items()} == {node.instances[0].id: "mlx5_3:1"}
    loopback = fakes.connector("lo")  # a loopback fleet reads nothing (an undeclared command would fail)
    from p2p_ops.spec.load import parse_fleet
    from p2p_ops.spec.starter import local_fleet
    local = parse_fleet(local_fleet(2, name="lo"))
    assert read_plans(loopback, local, local.nodes[0]) == {}


# ---- the doctor flags a pin on a remote NUMA node or a down port -------------------------------------------

def _doctor(pin: str, gpu, tree: str = "ib_healthy"):
    from p2p_ops.diagnose.doctor.checks import check
    from p2p_ops.diagnose.doctor.model import FleetFacts, InstanceFacts, NodeFacts

    inputs = gather_rdma(HostView.snapshot(TREES / tree))
    topo = (TREES / tree / "tools" / "nvidia_smi_topo.txt").read_text()
    node = NodeFacts("gpu-a", "198.18.0.12", rdma=inputs.devices, rdma_devices=len(inputs.devices), topo_text=topo)
    inst = InstanceFacts("gpu-a-0", "gpu-a", "198.18.0.12", env_file={"UCX_NET_DEVICES": pin}, gpu=gpu)
    facts = FleetFacts("f", "embedded", "http://198.18.0.12:9300", "gpu-a", instances=[inst], nodes=[node])
    return [f for f in check(facts).findings if f.check == "nic_pin"]


def test_doctor_flags_a_pin_on_the_other_socket():
    (finding,) = _doctor("mlx5_4:1", 0)
    assert finding.severity == "error" and finding.subject == "gpu-a-0"
    assert "NUMA node 1" in finding.message and "UCX_NET_DEVICES=mlx5_0:1" in finding.fix
    assert _doctor("mlx5_0:1", 0) == [] and _doctor("", 0) == []


def test_doctor_flags_a_pin_on_a_down_port():
    (finding,) = _doctor("mlx5_3:1", 3, "ib_one_rail_down")
    assert "mlx5_3:1 is DOWN" in finding.message and "mlx5_0:1,mlx5_1:1,mlx5_2:1" in finding.fix
